// Package config reads watertight's instances from a YAML (or JSON) file of
// named breakers, bulkheads, retry policies, budgets, timeouts and hedging
// policies, in the
// manner of Resilience4j's application.yml, so that each dependency's sizes
// can be tuned without recompiling:
//
//	defaults:
//	  breakers:
//	    failure_rate_threshold: 50%
//	    open_duration: 10s
//	breakers:
//	  payment:
//	    min_calls: 10
//	bulkheads:
//	  payment:
//	    max_concurrent: 20
//	    max_wait: 50ms
//
// Each section maps instance names to fields that mirror the package's
// Config in snake_case (circuit.Config.FailureRateThreshold is
// failure_rate_threshold). Durations are Go duration strings ("250ms"),
// rates a fraction (0.5) or a percentage ("50%"); a rule that can be turned
// off reads off (consecutive_failures: off), and where the Go Config spells
// a real zero negative, the file writes 0 (open_jitter: 0, no jitter;
// open_duration: 0s, straight to half-open). The defaults section
// gives every instance of a section the fields it does not set itself;
// a field set nowhere takes its package's default. YAML anchors and merge
// keys (<<) work too.
//
// # Errors
//
// Load and Parse check everything and report every problem at once, as an
// Errors list; each Error names the file, the line, the field and the rule:
//
//	payments.yaml:12: bulkheads.payment.max_concurrent: must be > 0, got -3
//
// Unknown fields are errors (a typo must not pass silently), and so are
// values a package would silently take for something else: an explicit 0
// where zero would mean "the default" (leave the field out instead), a rate
// of 50 (write "50%"), a field that has no effect on its instance
// (window_size on a time-based window). Each package's own validation (its
// New) runs on the result, its Go field names mapped back to YAML keys.
//
// # Registry and reload
//
// NewRegistry builds every instance, ready to use, by name: Breaker,
// Bulkhead, Retry, Budget, Timeout, Hedge; CircuitRegistry and BulkheadRegistry
// turn a named configuration into a keyed registry (one breaker per host),
// and TransportConfig fills a watertighthttp.TransportConfig from names.
// Reload and ReloadFrom swap in a new file: instances whose resolved
// configuration did not change keep their objects and state; changed
// breakers and bulkheads are reconfigured in place, keeping their state (an
// open breaker stays open, permits in flight count against the new limit);
// other changed instances are rebuilt (a budget keeping its balance);
// removed ones are dropped; an invalid file is refused whole and the old
// configuration stays. docs/configuration.md says what a reload keeps.
// WatchSIGHUP reloads on SIGHUP in a long-running program.
//
// The command `watertight config check FILE` validates a file and prints
// what each instance resolves to (File.Write). docs/configuration.md is the
// full reference.
package watertightconfig
