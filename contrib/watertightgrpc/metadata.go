package watertightgrpc

// The metadata keys watertight reads and writes on gRPC calls. gRPC metadata
// keys are lower case; the HTTP adapter's headers of the same name
// (watertighthttp.HeaderCriticality, HeaderIdempotencyKey, HeaderAttempt)
// carry the same values, so a gateway can map one to the other.
const (
	// MetadataPushback is the trailer of gRFC A6 by which a server tells its
	// clients when to retry: a non-negative integer of milliseconds means
	// "retry after that long"; a negative or malformed value means "do not
	// retry" (see ParsePushback). The server interceptors answer every
	// rejection with "-1".
	MetadataPushback = "grpc-retry-pushback-ms"
	// MetadataCriticality carries the request's criticality:
	// "critical-plus", "critical" (the default), "sheddable-plus",
	// "sheddable" (watertighthttp.ParseCriticality reads it).
	MetadataCriticality = "x-criticality"
	// MetadataIdempotencyKey carries the call's idempotency key: a call
	// that carries one may be retried whatever its method.
	MetadataIdempotencyKey = "idempotency-key"
	// MetadataAttempt carries the attempt number of a retried call: "2" for
	// the first retry, and so on. The first attempt does not send it.
	MetadataAttempt = "x-request-attempt"
)

// PushbackOverloaded is the value of MetadataPushback that the server
// interceptors send with every rejection: negative, "overloaded, don't
// retry".
const PushbackOverloaded = "-1"
