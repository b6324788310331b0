// Package watertightslog writes watertight's events to a log/slog Logger.
//
// NewListener returns a watertight.Listener to put in the Listener field of
// any watertight Config (a breaker, a bulkhead, a retry policy, a budget, the
// HTTP Handler or Transport), or to combine with others with
// watertight.Listeners:
//
//	log := watertightslog.NewListener(slog.Default(), watertightslog.Options{})
//	breaker, err := circuit.New(circuit.Config{Name: "payments", Listener: log})
//
// # Levels
//
// A state change is logged at Warn when a breaker opens (To is "open" or
// "forced-open": an open breaker is a symptom someone needs to see) and at
// Info otherwise (half-open, closed again). Every other kind of event —
// rejections, a full bulkhead, retries, an exhausted budget, shed requests,
// hedges, fallbacks, a bulkhead's acquired and released permits — happens
// per call, up to thousands of times a second
// during an incident, and is logged at Debug. Options.Levels changes the
// level of any kind, Options.OpenLevel that of openings. The listener asks
// the logger first (Logger.Enabled) and does no other work for an event
// whose level is disabled, so Debug events cost a few nanoseconds when Debug
// is off.
//
// # Records
//
// Each event is one record, at the event's Time, with a message that names
// the kind ("watertight: state change", see the table in
// docs/observability.md) and its fields in a group named "watertight"
// (Group), so that they never collide with the application's own
// attributes. The attribute names are stable:
//
//	attribute            value                                   when
//	watertight.event     kind, snake_case: "state_change", ...   always
//	watertight.source    emitting package: "circuit", "http" ... always
//	watertight.name      instance's configured name              if not empty
//	watertight.key       registry key, route or host             if not empty
//	watertight.from      state before (state changes)            if not empty
//	watertight.to        state after (state changes)             if not empty
//	watertight.reason    why, in words                           if not empty
//	watertight.code      why, as a stable code (Event.Code)      if not empty
//	watertight.attempt   attempt number (int)                    if above zero
//	watertight.delay     wait or open duration (time.Duration)   if above zero
//	watertight.permits   bulkhead permits taken or given back    if above zero
//	watertight.error     the error concerned                     if not nil
//
// With a slog.TextHandler they read "watertight.event=state_change"; with a
// slog.JSONHandler they form one object, {"watertight":{"event":...}}.
//
// # Delivery
//
// Listeners are called synchronously, in the goroutine that caused the
// event. A handler that writes to a file or the network should be put behind
// a watertight.AsyncListener, which queues events for one goroutine and drops
// (and counts) them rather than block when it falls behind:
//
//	async := watertight.NewAsyncListener(watertightslog.NewListener(logger, watertightslog.Options{}), 0)
//	defer async.Close()
package watertightslog
