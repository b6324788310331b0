// Package watertighthttp brings watertight to net/http: a client
// Transport (an http.RoundTripper) with per-host breakers and bulkheads,
// retries of idempotent requests and deadline propagation, and a server
// Handler that reads the incoming deadline, sheds requests that cannot be
// served in time, and admits the rest through a bulkhead, answering
// rejections with the "overloaded, don't retry" signal. Both are plain
// net/http pieces, usable in a reverse proxy.
package watertighthttp
