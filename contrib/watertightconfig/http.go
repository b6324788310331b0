package watertightconfig

import (
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

// TransportNames names the instances an HTTP client Transport takes from
// the configuration. An empty name means none of that kind.
type TransportNames struct {
	// Breaker names the breaker whose configuration every key's breaker
	// takes (TransportConfig.Breakers, through CircuitRegistry).
	Breaker string
	// Bulkhead names the bulkhead whose configuration every key's
	// bulkhead takes (TransportConfig.Bulkheads, through BulkheadRegistry).
	Bulkhead string
	// Retry names the retry policy (TransportConfig.Retry, through
	// RetryConfig). Empty means no retries: MaxAttempts 1.
	Retry string
	// Limiter names the adaptive limiter whose configuration every key's
	// limiter takes (TransportConfig.Limiters, through LimiterRegistry).
	Limiter string
}

// TransportConfig returns a watertighthttp.TransportConfig whose
// Breakers, Bulkheads and Retry come from the named instances; the caller
// sets the other fields (Base, Key, Deadline) before
// watertighthttp.NewTransport. A name the configuration does not have is
// an error matching ErrNotFound.
//
// The Transport keeps what it was built with: after a Reload that rebuilt
// or removed one of these names (Changes.Rebuilt, including
// "breakers.<name>.keyed", or Removed), build a new Transport. A kept or
// reconfigured breaker keeps its keyed registry when it can, so the new
// Transport finds the same breakers in the same state.
func (r *Registry) TransportConfig(n TransportNames) (watertighthttp.TransportConfig, error) {
	var tc watertighthttp.TransportConfig
	var err error
	if n.Breaker != "" {
		if tc.Breakers, err = r.CircuitRegistry(n.Breaker); err != nil {
			return tc, err
		}
	}
	if n.Bulkhead != "" {
		if tc.Bulkheads, err = r.BulkheadRegistry(n.Bulkhead); err != nil {
			return tc, err
		}
	}
	if n.Limiter != "" {
		if tc.Limiters, err = r.LimiterRegistry(n.Limiter); err != nil {
			return tc, err
		}
	}
	tc.Retry = retry.Config{MaxAttempts: 1}
	if n.Retry != "" {
		if tc.Retry, err = r.RetryConfig(n.Retry); err != nil {
			return tc, err
		}
	}
	return tc, nil
}
