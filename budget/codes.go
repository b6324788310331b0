package budget

// The codes of the package's events (watertight.Event.Code): stable,
// machine-readable reasons for metric labels, dashboards and alerts. They
// keep their meaning across versions; the words for people are in Reason.
const (
	// CodeNoTokens: EventBudgetExhausted from a Budget, no token in the
	// ratio balance nor from the per-second floor (ErrExhausted).
	CodeNoTokens = "no_tokens"
	// CodeConcurrencyLimit: EventBudgetExhausted from a Concurrency, the
	// retries in flight were at the limit (ErrExhausted).
	CodeConcurrencyLimit = "concurrency_limit"
	// CodeTokensBelowHalf: EventBudgetExhausted from a RetryThrottle, its
	// tokens were at or below half of MaxTokens (ErrExhausted).
	CodeTokensBelowHalf = "tokens_below_half"
	// CodeThrottled: EventRejected from a Throttler, the request was
	// rejected locally because the backend accepts too few (ErrThrottled).
	CodeThrottled = "throttled"
)
