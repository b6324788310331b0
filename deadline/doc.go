// Package deadline propagates a request's deadline from hop to hop, and
// refuses work that cannot finish in the time left.
//
// A deadline is an absolute instant for the whole request. Each hop sends on
// the time that remains, reduced by a safety margin for the network and the
// reply, and capped by a maximum; the next hop turns it back into an absolute
// deadline on its own clock. Relative times on the wire keep clocks out of it:
// hosts need not agree on the time.
//
// # The margin
//
// The margin scales with the time left: a tenth of it, at least 1ms and at
// most Config.Margin (100ms by default); see Propagator.MarginFor. A fixed
// margin cannot suit every budget: 100ms is too little for a minute's work
// and all of a 50ms call's, which it would refuse without sending although
// the callee answers in a millisecond. A share keeps what the margin is for
// at every size: the callee's deadline falls before the caller's, by room in
// proportion to the call, so that the callee gives up first and its answer
// comes back in time. The floor is the header's resolution and about a round
// trip on a local network; the cap keeps long budgets from giving away
// seconds. With the defaults, 5s left is sent as 4.9s, 150ms as 135ms, 50ms
// as 45ms and 10ms as 9ms; less than 2ms leaves nothing to send, and the
// request fails fast with ErrTooShort. Config.MarginFraction changes the
// share; a negative one gives the fixed margin of old.
//
// # Wire format
//
// The time left travels as a decimal integer of whole milliseconds in one
// header, X-Request-Timeout-Ms by default (DefaultHeader; Config.Header
// changes it), for example
//
//	X-Request-Timeout-Ms: 250
//
// On input, two other headers are understood, after the configured one:
// gRPC's grpc-timeout (1 to 8 ASCII digits followed by a unit: H hours,
// M minutes, S seconds, m milliseconds, u microseconds, n nanoseconds; see
// ParseGRPCTimeout) and Envoy's x-envoy-expected-rq-timeout-ms and
// x-envoy-upstream-rq-timeout-ms (whole milliseconds, like ours). Every value
// is read, of every header, a header given several times and each element of
// a comma-separated list ("5000, 50") alike, and the shortest well-formed one
// wins: conflicting values never lengthen a deadline.
//
// # Untrusted input
//
// Incoming headers come from the network. A value that is malformed (a sign,
// a fraction, spaces inside, a unit missing, too many digits) is ignored and
// logged at Warn with the header, the value and the reason (Config.Logger);
// the other values are used. A client cannot flood the log: the lines of one
// reason about one header are at most one each Config.WarnInterval (10s),
// the next saying how many were left out, and every warning is counted
// (Propagator.Warned, for metrics) and sent to Config.Listener as a
// watertight.EventBadInput (Key the header, Code and Reason CodeMalformed
// "malformed" or CodeAbsurd "absurd"),
// which the metrics exporters count as watertight_bad_input_total. A
// well-formed value larger than Config.Max is clamped to Max: a caller cannot
// make a server wait longer than it is willing to. Parsing never panics (the
// parsers are fuzzed).
//
// # Fail fast
//
// A callee whose remaining time is below what its work needs should answer at
// once rather than start work it cannot finish: Check returns ErrTooShort (a
// watertight rejection, see watertight.IsRejection) when less than
// Config.MinRemaining is left, and Inject refuses to send a request with no
// time left after the margin (less than 2ms left, with the defaults).
//
// # Server and client
//
// A server reads the caller's timeout with WithIncoming, which derives a
// context whose deadline is now plus the timeout (or the context's own, if
// earlier); when it passes, context.Cause is an *ExpiredError naming the
// header, so a handler can tell the caller's deadline from its own timeouts.
// A client sends the remaining time on with Inject (or Outgoing, for other
// transports). As a watertight.Policy, a Propagator fails fast (Check) before
// the protected call.
package deadline
