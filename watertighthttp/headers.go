package watertighthttp

// The headers watertight puts on the wire. They are plain HTTP headers, so a
// gateway or a service in any language can read and write them.
const (
	// HeaderTimeout carries the time the caller still gives the request, in
	// whole milliseconds, already reduced by the caller's margin (see package
	// deadline). It is the default of deadline.Config.Header.
	HeaderTimeout = "X-Request-Timeout-Ms"
	// HeaderAttempt carries the attempt number of the request: 1 for the
	// first try, 2 for the first retry, and so on.
	HeaderAttempt = "X-Request-Attempt"
	// HeaderOverloaded, with the value "true" on a response, is the
	// "overloaded, don't retry" signal: the server (or the layer below it,
	// which already retried) asks its callers not to retry, and the caller
	// passes the signal on (watertight.ErrOverloaded). Envoy's
	// x-envoy-overloaded header is honoured on input too.
	HeaderOverloaded = "X-Overloaded"
	// HeaderEnvoyOverloaded is Envoy's header for a request it shed.
	HeaderEnvoyOverloaded = "X-Envoy-Overloaded"
	// HeaderCriticality carries the request's criticality, as in the Google
	// SRE book: "critical-plus", "critical" (the default), "sheddable-plus",
	// "sheddable". Lower criticality is shed first.
	HeaderCriticality = "X-Criticality"
	// HeaderIdempotencyKey is the Idempotency-Key header of the IETF draft
	// "The Idempotency-Key HTTP Header Field": a request that carries it may
	// be retried whatever its method.
	HeaderIdempotencyKey = "Idempotency-Key"
)
