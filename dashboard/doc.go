// Package dashboard is watertight's live page: an http.Handler that shows
// every protection a program watches, updated once a second, in any
// browser, with nothing to install. Mount it in any server, bound to
// 127.0.0.1 or behind authentication:
//
//	set := new(watch.Set)             // the protections, registered once
//	set.AddBreaker(payments)
//	d, err := dashboard.New(dashboard.Config{Sources: set})
//	...
//	defer d.Close()
//	// give d to the protections as (one of) their Listener, for the
//	// timeline, the rule that tripped each breaker and shed requests by reason
//	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", d))
//	http.ListenAndServe("127.0.0.1:8080", mux)
//
// # What the page shows
//
// For every watched protection: breakers (state, the rule that tripped,
// failure, slow-call and saturation rates, time until half-open, trials),
// bulkheads and pools (in use, waiting, rejections/s; a partitioned
// bulkhead as a card per partition, in use against its guarantee and
// borrowed), budgets (balance, refusals), throttlers, hedges (sent, wins),
// adaptive limiters (limit, in flight), balancers (hosts, ejected); the
// events that refused or shed a call, counted by their Code; the last few
// minutes as small charts; and state changes as a timeline. A filter box, grouping by kind and by
// registry, state words and icons beside the colours, light and dark themes
// (the browser's prefers-color-scheme). The page loads nothing from
// elsewhere: its script and style are embedded and inline, and its
// Content-Security-Policy forbids anything else, so it works offline.
//
// # How protections are watched
//
// Two ways, used together. Their state comes from snapshots: the Dashboard
// reads the Snapshot of everything in its watch.Set (Config.Sources) once
// per Config.Interval, and only while at least one page is open. Their
// history comes from events: the Dashboard is a watertight.Listener, and a
// protection that has it as (one of) its Listener reports state changes (the
// timeline, the rule that opened a breaker from the event's Code, when an
// open breaker goes half-open) and the calls it refused or shed (counted by
// Event.Code). Without the listener the page still shows every protection;
// it lacks the timeline, the trip codes and the shed counts.
//
// A breaker registry's events carry its Config.Name: watch it under that
// name (watch.Set.AddBreakerRegistry) so its events meet its rows.
//
// # Cost
//
// With no page open the Dashboard costs nothing but its OnEvent: an atomic
// load for every event, and for state changes (rare) a short lock to keep
// them in a small ring. No goroutine runs. While pages are open, one sampler
// goroutine, shared by all of them, reads the snapshots and encodes one
// frame per Interval, sent to every page; at 200 protections that is well
// under 1% of a core (docs/dashboard.md has the figure and the command).
//
// # Endpoints
//
// Relative to where it is mounted: the page (GET on a path ending in "/"),
// its event stream ("events", server-sent events), and "state.json" (a
// frame sampled for the request, with the timeline, for scripts; its rates
// read zero, since a rate needs two samples). All are read-only: the
// Dashboard has no endpoint that changes anything.
package dashboard
