package chaos

// The codes of EventFaultInjected (watertight.Event.Code): which fault was
// injected, stable for metric labels, dashboards and alerts. The event's
// Reason carries the same word.
const (
	// CodeLatency: the call was delayed by Rule.Latency.
	CodeLatency = "latency"
	// CodeError: the call was replaced by an error.
	CodeError = "error"
	// CodeResult: the call's result was replaced.
	CodeResult = "result"
)
