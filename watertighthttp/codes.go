package watertighthttp

import "errors"

// The codes of the package's events (watertight.Event.Code): stable,
// machine-readable reasons for metric labels, dashboards and alerts. They
// keep their meaning across versions; the words for people are in Reason.
// The gRPC adapter (contrib/watertightgrpc) uses the same codes for its
// shed requests and bad input, so that one dashboard reads both.
const (
	// CodeRouteFull: EventShed, the route had its MaxConcurrent requests
	// in flight and its queue full (ErrRouteFull).
	CodeRouteFull = "route_full"
	// CodeDisplaced: EventShed, the request was displaced from a full
	// queue by one of higher criticality (ErrDisplaced).
	CodeDisplaced = "displaced"
	// CodeQueueGaveUp: EventShed, the request's context ended while it
	// waited in the queue (ErrQueueGaveUp).
	CodeQueueGaveUp = "queue_gave_up"
	// CodeClientLimit: EventShed, the request's client was at its limit
	// of requests in flight (ErrClientLimit).
	CodeClientLimit = "client_limit"
	// CodeClientOverflow: EventShed, the clients beyond a full table of
	// busy ones were at their shared limit (ErrClientOverflow).
	CodeClientOverflow = "client_overflow"
	// CodeDeadline: EventShed, the request's deadline was too short to
	// start it, on arrival or after it waited in the queue
	// (deadline.ErrTooShort, deadline.ErrExpired).
	CodeDeadline = "deadline"
	// CodeUnknownCriticality: EventBadInput, a criticality header value
	// that names no criticality, taken as critical. It is also the event's
	// Reason (ReasonUnknownCriticality).
	CodeUnknownCriticality = ReasonUnknownCriticality
	// CodeBodyNotReplayable: EventRetrySkipped from the Transport, the
	// request body cannot be sent again (ErrBodyNotReplayable).
	CodeBodyNotReplayable = "body_not_replayable"
)

// shedCode is the code of a request shed with reason, one of the errors the
// Handler sheds with.
func shedCode(reason error) string {
	switch {
	case errors.Is(reason, ErrDisplaced):
		return CodeDisplaced
	case errors.Is(reason, ErrQueueGaveUp):
		return CodeQueueGaveUp
	case errors.Is(reason, ErrRouteFull):
		return CodeRouteFull
	case errors.Is(reason, ErrClientLimit):
		return CodeClientLimit
	case errors.Is(reason, ErrClientOverflow):
		return CodeClientOverflow
	}
	return CodeDeadline // the other reason: the deadline propagator's Check
}
