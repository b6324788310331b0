package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"sync"

	"github.com/watertight-go/watertight"
)

// The proxy core: what the gateway does with a request once its route and
// protections have admitted it. It is httputil.ReverseProxy's job, done
// with fewer copies: the request the upstream gets is built once (its
// header too, sharing the client's value slices, which nothing modifies),
// the answer's header is moved, not copied, and the few values the
// gateway adds live in the same allocation as the request's URL. What it
// keeps of ReverseProxy: hop-by-hop headers stripped both ways (those the
// Connection header names too), "Te: trailers" passed on, Upgrade
// (WebSocket) switched through, unparsable queries re-encoded, no Go
// User-Agent added, trailers passed on, answers that stream (no length,
// or server-sent events) flushed as they arrive, and a body that fails
// half-way aborting the client's connection rather than ending as if
// whole. What it does not pass on: 1xx informational answers (103 Early
// Hints) of the upstream.

// outParts is what an upstream request needs beside its http.Request, in
// one allocation: its URL and the values the gateway sets.
type outParts struct {
	u                   url.URL
	xff, xfh, xfp, fwd  [1]string
	conn, upgrade, none [1]string
}

// isHop reports whether the canonical header name k is hop-by-hop (RFC
// 9110 §7.6.1, and the older ones ReverseProxy strips too), or one of the
// forwarding headers the gateway sets itself.
func isHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// isForwarding reports whether k is a forwarding header the gateway
// writes anew on every request.
func isForwarding(k string) bool {
	switch k {
	case "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return false
}

// connectionTokens returns the header names the Connection header lists,
// canonical, or nil: they are hop-by-hop too.
func connectionTokens(h http.Header) []string {
	vs := h["Connection"]
	if len(vs) == 0 {
		return nil
	}
	var names []string
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				names = append(names, textproto.CanonicalMIMEHeaderKey(f))
			}
		}
	}
	return names
}

// hasToken reports whether a comma-separated header's values hold token,
// case-insensitively.
func hasToken(vs []string, token string) bool {
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(f), token) {
				return true
			}
		}
	}
	return false
}

// upgradeType returns the protocol a request or answer asks to switch to
// (Connection: Upgrade and an Upgrade header), or "".
func upgradeType(h http.Header) string {
	if !hasToken(h["Connection"], "Upgrade") {
		return ""
	}
	if vs := h["Upgrade"]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// outbound builds the request upstream up gets for in, under ctx: the
// upstream's scheme and logical name in its URL (the Transport's Balancer
// puts a host of the pool there on every attempt), the client's Host, the
// client's header less its hop-by-hop and forwarding headers, and the
// gateway's forwarding headers. lis is the listener the request came in
// on (nil: none known, no proxy trusted). It returns an error for a
// request the gateway refuses to pass on.
func (rt *route) outbound(ctx context.Context, in *http.Request, lis *listenerRoute, up *upstream) (*http.Request, error) {
	p := new(outParts)
	p.u = *in.URL
	p.u.Scheme = up.cfg.Scheme
	p.u.Host = up.cfg.Name
	p.u.RawQuery = cleanQuery(p.u.RawQuery)

	switchTo := upgradeType(in.Header)
	if switchTo != "" && !printable(switchTo) {
		return nil, fmt.Errorf("the client asked to switch to a protocol whose name is not printable: %q", switchTo)
	}
	conns := connectionTokens(in.Header)
	h := make(http.Header, len(in.Header)+4)
	for k, vs := range in.Header {
		if isHop(k) || isForwarding(k) {
			continue
		}
		if conns != nil && containsString(conns, k) {
			continue
		}
		h[k] = vs // shared: neither the Transport nor net/http changes a value slice
	}
	if hasToken(in.Header["Te"], "trailers") {
		h["Te"] = teTrailers
	}
	if switchTo != "" {
		p.conn[0], p.upgrade[0] = "Upgrade", switchTo
		h["Connection"], h["Upgrade"] = p.conn[:], p.upgrade[:]
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = p.none[:] // an empty value: net/http sends no User-Agent of its own
	}
	rt.forwarded(in, lis, h, p)

	body := in.Body
	if in.ContentLength == 0 || body == http.NoBody {
		body = nil // a nil body lets http.Transport retry a request on a reused connection that was closed
	} else if body != nil {
		body = clientBody{body}
	}
	req := http.Request{
		Method: in.Method, URL: &p.u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: body, GetBody: in.GetBody, ContentLength: in.ContentLength,
		Host: in.Host, Trailer: in.Trailer,
	}
	if body == nil {
		req.ContentLength, req.GetBody = 0, nil
	}
	return req.WithContext(ctx), nil
}

var teTrailers = []string{"trailers"}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// clientBody is the client's request body as the upstream request
// carries it. A read error (a body over the route's limit, a client that
// went away or trickles past the route's time) is the client's doing, not
// the host's: it is marked watertight.Ignored, so that neither the host's
// breaker nor the Balancer counts it (http.Transport returns the body's
// error as it is). Close does nothing: http.Transport closes the body of a
// request it could not send, which for a body still arriving (Expect:
// 100-continue) would wait for it; net/http closes it after the handler.
type clientBody struct{ r io.Reader }

func (b clientBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = watertight.Mark(err, watertight.Ignored)
	}
	return n, err
}

func (clientBody) Close() error { return nil }

// forwarded sets the forwarding headers of the upstream request: the
// client's address appended to X-Forwarded-For and Forwarded, and the
// original host and scheme, keeping what came before only from a trusted
// proxy of the listener.
func (rt *route) forwarded(in *http.Request, lis *listenerRoute, h http.Header, p *outParts) {
	client, _, err := net.SplitHostPort(in.RemoteAddr)
	if err != nil {
		client = in.RemoteAddr
	}
	trusted := lis != nil && lis.trusts(client)
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	p.xff[0] = client
	if prior := in.Header["X-Forwarded-For"]; trusted && len(prior) > 0 {
		p.xff[0] = strings.Join(prior, ", ") + ", " + client
	}
	h["X-Forwarded-For"] = p.xff[:]
	p.xfh[0] = in.Host
	if prior := in.Header["X-Forwarded-Host"]; trusted && len(prior) > 0 && prior[0] != "" {
		p.xfh[0] = prior[0]
	}
	h["X-Forwarded-Host"] = p.xfh[:]
	p.xfp[0] = proto
	if prior := in.Header["X-Forwarded-Proto"]; trusted && len(prior) > 0 && (prior[0] == "http" || prior[0] == "https") {
		p.xfp[0] = prior[0]
	}
	h["X-Forwarded-Proto"] = p.xfp[:]
	if prior := in.Header["Forwarded"]; trusted && len(prior) > 0 {
		// RFC 7239: the element of this hop appended to those a trusted
		// proxy sent; from any other client, its Forwarded is dropped.
		p.fwd[0] = strings.Join(prior, ", ") + ", " + forwardedElement(client, in.Host, proto)
		h["Forwarded"] = p.fwd[:]
	}
}

// forwardedElement is one element of a Forwarded header (RFC 7239 §4):
// for=, host= and proto=, quoted where the syntax asks.
func forwardedElement(client, host, proto string) string {
	node := client
	if a, err := netip.ParseAddr(client); err == nil && a.Is6() && !a.Is4In6() {
		node = `"[` + client + `]"`
	}
	return "for=" + node + ";host=" + quoteForwarded(host) + ";proto=" + proto
}

// quoteForwarded quotes v as an RFC 7239 value when it is not a token.
func quoteForwarded(v string) string {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
		}
	}
	return v
}

// cleanQuery returns q, or q re-encoded when the gateway and an upstream
// could read it differently (a ';', which older servers take as a
// separator, or a bad escape): as ReverseProxy does, the gateway sends
// only what it parses itself.
func cleanQuery(q string) string {
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return reencode(q)
		case '%':
			if i+2 >= len(q) || !ishex(q[i+1]) || !ishex(q[i+2]) {
				return reencode(q)
			}
			i += 2
		}
	}
	return q
}

func reencode(q string) string {
	v, _ := url.ParseQuery(q)
	return v.Encode()
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// respond writes the upstream's answer res to w: its header less the
// hop-by-hop ones, its status, its body (flushed as it arrives when it
// streams) and its trailers. A body that fails half-way aborts the
// client's connection (http.ErrAbortHandler), so that the client does not
// take a cut answer for a whole one.
func respond(w http.ResponseWriter, res *http.Response) {
	for _, k := range connectionTokens(res.Header) {
		delete(res.Header, k)
	}
	dst := w.Header()
	for k, vs := range res.Header {
		if isHop(k) {
			continue
		}
		dst[k] = vs // res.Header is the gateway's alone: moved, not copied
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		dst["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	w.WriteHeader(res.StatusCode)
	if err := copyBody(w, res.Body, streams(res)); err != nil {
		res.Body.Close()
		panic(http.ErrAbortHandler)
	}
	res.Body.Close() // now, so that res.Trailer is filled in
	if len(res.Trailer) == 0 {
		return
	}
	// Force chunking, so that net/http does not add a Content-Length.
	http.NewResponseController(w).Flush()
	if len(res.Trailer) == announced {
		for k, vs := range res.Trailer {
			dst[k] = vs
		}
		return
	}
	for k, vs := range res.Trailer {
		for _, v := range vs {
			dst.Add(http.TrailerPrefix+k, v)
		}
	}
}

// streams reports whether res's body should be flushed as it arrives: it
// has no length, or it is server-sent events.
func streams(res *http.Response) bool {
	if res.ContentLength == -1 {
		return true
	}
	ct := res.Header["Content-Type"]
	return len(ct) > 0 && len(ct[0]) >= len("text/event-stream") && strings.EqualFold(ct[0][:len("text/event-stream")], "text/event-stream")
}

// copyBuffers lends the body copies their 32 KiB buffers.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody copies src to w, flushing after each write when flush is set.
// It returns the first read or write error (io.EOF is the end, not an
// error).
func copyBody(w http.ResponseWriter, src io.Reader, flush bool) error {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	var fl http.Flusher
	if flush {
		fl, _ = w.(http.Flusher)
		if fl == nil {
			rc := http.NewResponseController(w)
			fl = flushFunc(func() { rc.Flush() })
		}
		fl.Flush() // the header at once, even if the body is slow to come
	}
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

type flushFunc func()

func (f flushFunc) Flush() { f() }

// switchProtocols completes an Upgrade the upstream accepted (101
// Switching Protocols): it checks the protocol is the one asked for,
// takes over the client's connection, sends it the 101, and copies both
// ways until either side ends or ctx does.
func switchProtocols(ctx context.Context, w http.ResponseWriter, asked string, res *http.Response) error {
	got := upgradeType(res.Header)
	if !printable(got) {
		res.Body.Close()
		return fmt.Errorf("the upstream switched to a protocol whose name is not printable: %q", got)
	}
	if !strings.EqualFold(asked, got) {
		res.Body.Close()
		return fmt.Errorf("the upstream switched to protocol %q when %q was asked for", got, asked)
	}
	back, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		res.Body.Close()
		return errors.New("the upstream's 101 answer has no connection to write to")
	}
	stop := context.AfterFunc(ctx, func() { back.Close() })
	defer stop()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		back.Close()
		return fmt.Errorf("cannot take over the client's connection to switch protocols: %w", err)
	}
	defer conn.Close()
	defer back.Close()
	hd := w.Header()
	for k, vs := range res.Header {
		hd[k] = vs
	}
	res.Header, res.Body = hd, nil // Write sends the header only
	if err := res.Write(brw); err != nil {
		return nil // the client went away
	}
	if err := brw.Flush(); err != nil {
		return nil
	}
	// Both ways until both ends half-closed, or one failed: then the
	// deferred closes end the other copy.
	errc := make(chan error, 2)
	go func() { errc <- splice(back, brw) }()
	go func() { errc <- splice(conn, back) }()
	if err := <-errc; err == nil {
		<-errc
	}
	return nil
}

// errSpliced ends a copy whose destination cannot be half-closed.
var errSpliced = errors.New("gateway: copy done")

// splice copies from src to dst, then half-closes dst when it can, so that
// the other side sees the end (nil); errSpliced when it cannot.
func splice(dst io.Writer, src io.Reader) error {
	if _, err := io.Copy(dst, src); err != nil {
		return err
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errSpliced
}
