package fallback

// The codes of EventFallbackUsed (watertight.Event.Code): the kind of step
// that answered, as Kind.String names it, stable for metric labels,
// dashboards and alerts. The event's Reason is the step's name, which
// Named may change; its Code is always one of these.
const (
	// CodeStale: a Stale step answered with a last-known-good value.
	CodeStale = "stale"
	// CodeDefault: a Default step answered with its value.
	CodeDefault = "default"
	// CodeReduced: a Reduced step's function answered.
	CodeReduced = "reduced"
	// CodeDefer: a Defer step queued the work and answered with its
	// placeholder.
	CodeDefer = "defer"
	// CodeError: an Error step answered with its fast error.
	CodeError = "error"
)

// kindCodes are the codes of the step kinds.
var kindCodes = [...]string{
	KindStale:    CodeStale,
	KindDefault:  CodeDefault,
	KindReduced:  CodeReduced,
	KindDeferred: CodeDefer,
	KindError:    CodeError,
}
