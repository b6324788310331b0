package deadline

// The codes of EventBadInput (watertight.Event.Code), stable for metric
// labels, dashboards and alerts; Reason.String gives the same words.
const (
	// CodeMalformed: a timeout header value that is not well-formed was
	// ignored (Malformed).
	CodeMalformed = "malformed"
	// CodeAbsurd: a well-formed timeout header value beyond a
	// time.Duration was clamped to Config.Max (Absurd).
	CodeAbsurd = "absurd"
)
