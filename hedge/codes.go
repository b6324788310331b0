package hedge

// The codes of EventHedgeSuppressed (watertight.Event.Code): stable,
// machine-readable reasons for metric labels, dashboards and alerts. They
// are the values of the Reason constants, which the event's Reason and the
// reason label of the exporters' suppressed-hedge counters also carry.
const (
	// CodeBudget: Config.Budget refused the hedge.
	CodeBudget = ReasonBudget
	// CodeBreaker: Config.Breaker was not closed.
	CodeBreaker = ReasonBreaker
	// CodeBulkhead: Config.Bulkhead was saturated.
	CodeBulkhead = ReasonBulkhead
	// CodeOverload: an attempt of the call, or of a recent call, carried the
	// overloaded signal.
	CodeOverload = ReasonOverload
)
