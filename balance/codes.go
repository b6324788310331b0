package balance

// The codes of the Balancer's EventStateChange (watertight.Event.Code),
// stable for metric labels, dashboards and alerts. They are the values of
// the Reason constants, which the event's Reason and HostSnapshot.Reason
// also carry.
const (
	// CodeConsecutiveErrors: active → ejected, the host's last
	// ConsecutiveErrors calls all failed.
	CodeConsecutiveErrors = ReasonConsecutiveErrors
	// CodeSlow: active → ejected, the host was more than SlowFactor times
	// slower than the median of the others.
	CodeSlow = ReasonSlow
	// CodeEjectionEnded: ejected → active, the ejection time passed.
	CodeEjectionEnded = ReasonEjectionEnded
)
