package retry

import "context"

type idemKey struct{}

// idem is the mark a context carries: idempotent, with or without a key.
type idem struct{ key string }

// Idempotent returns a context that marks the call made with it as safe to
// repeat, so that a retry policy may retry it.
func Idempotent(ctx context.Context) context.Context {
	return context.WithValue(ctx, idemKey{}, idem{})
}

// WithIdempotencyKey returns a context that carries an idempotency key for
// the call made with it: the same key is sent on every attempt (the HTTP
// adapter sends it as the Idempotency-Key header), the server deduplicates
// them, and so the call is safe to retry. An empty key marks nothing.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, idemKey{}, idem{key: key})
}

// IdempotencyKey returns the key WithIdempotencyKey put in ctx.
func IdempotencyKey(ctx context.Context) (string, bool) {
	m, ok := ctx.Value(idemKey{}).(idem)
	return m.key, ok && m.key != ""
}

// IsIdempotent reports whether ctx marks its call as safe to repeat
// (Idempotent or WithIdempotencyKey).
func IsIdempotent(ctx context.Context) bool {
	_, ok := ctx.Value(idemKey{}).(idem)
	return ok
}
