package gateway

import "net/http"

// WithBase returns o with rt as every upstream's transport, in place of
// the gateway's own: for benchmarks that measure the gateway without a
// network.
func WithBase(o Options, rt http.RoundTripper) Options {
	o.testBase = rt
	return o
}
