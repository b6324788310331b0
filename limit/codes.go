package limit

// The codes of EventLimitChanged (watertight.Event.Code): the algorithm
// that moved the limit, stable for metric labels, dashboards and alerts.
// The event's Reason is the algorithm's Name.
const (
	// CodeAIMD: the limit was moved by NewAIMD's algorithm.
	CodeAIMD = "aimd"
	// CodeVegas: the limit was moved by NewVegas's algorithm.
	CodeVegas = "vegas"
	// CodeGradient2: the limit was moved by NewGradient2's algorithm.
	CodeGradient2 = "gradient2"
	// CodeWatertight: the limit was moved by NewDefault's algorithm.
	CodeWatertight = "watertight"
	// CodeCustom: the limit was moved by an Algorithm of the caller's own;
	// its Name is in the event's Reason.
	CodeCustom = "custom"
)

// algCode is the code of a's changes.
func algCode(a Algorithm) string {
	switch a.(type) {
	case *aimd:
		return CodeAIMD
	case *vegas:
		return CodeVegas
	case *gradient2:
		return CodeGradient2
	case *watertightAlg:
		return CodeWatertight
	}
	return CodeCustom
}
