package idempotency

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// FingerprintPrefix starts every fingerprint Fingerprint returns; it names
// the algorithm, so that a fingerprint stored by another version (or
// another function) never matches by accident.
const FingerprintPrefix = "sha256:"

// Fingerprint identifies a request, so that a key reused for a different
// request is refused (422 in the HTTP middleware) instead of answered with
// another request's result. It is FingerprintPrefix followed by the
// unpadded base64url SHA-256 digest of the method, the path and the body:
//
//	SHA-256( uvarint(len(method)) ‖ method ‖ uvarint(len(path)) ‖ path ‖ body )
//
// The lengths make the encoding unambiguous: ("POST", "/ab", "c") and
// ("POST", "/a", "bc") differ. Method and path are taken as given (the
// middleware passes r.Method and r.URL.RequestURI(), that is the escaped
// path and the query); the body byte for byte, so two JSON bodies that
// differ only in spacing or key order are different requests. Headers are
// not covered (not even Content-Type): a server whose requests differ in
// meaning by a header should fold that header into the path argument or
// supply its own fingerprint function.
func Fingerprint(method, path string, body []byte) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(method)))])
	h.Write([]byte(method))
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(path)))])
	h.Write([]byte(path))
	h.Write(body)
	var sum [sha256.Size]byte
	var out [len(FingerprintPrefix) + 43]byte
	copy(out[:], FingerprintPrefix)
	base64.RawURLEncoding.Encode(out[len(FingerprintPrefix):], h.Sum(sum[:0]))
	return string(out[:])
}
