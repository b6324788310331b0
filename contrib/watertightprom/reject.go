package watertightprom

import "github.com/watertight-go/watertight"

// isRejection is watertight.IsRejection without its allocation: it walks
// err's chain (Unwrap() error and Unwrap() []error, depth first, as
// errors.As does) and asks the first error with a Rejection() bool method.
// An error with an As method on the way may convert to anything, so from
// there it leaves the answer to watertight.IsRejection. Latency calls it for
// every failed call, so the common answers (a rejection, a plain failure)
// cost no allocation.
func isRejection(err error) bool {
	found, rej, ask := walkRejection(err)
	if ask {
		return watertight.IsRejection(err)
	}
	return found && rej
}

// walkRejection reports whether err's chain holds a Rejection method (found)
// and what the first one says (rej), or that an As method came first (ask).
func walkRejection(err error) (found, rej, ask bool) {
	for err != nil {
		if r, ok := err.(interface{ Rejection() bool }); ok {
			return true, r.Rejection(), false
		}
		if _, ok := err.(interface{ As(any) bool }); ok {
			return false, false, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if found, rej, ask = walkRejection(e); found || ask {
					return found, rej, ask
				}
			}
			return false, false, false
		default:
			return false, false, false
		}
	}
	return false, false, false
}
