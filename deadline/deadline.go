package deadline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
)

// DefaultHeader is the header that carries the time left, in whole
// milliseconds, when Config.Header is empty. Its value is a non-negative
// decimal integer ("250"), already reduced by the sender's margin.
const DefaultHeader = "X-Request-Timeout-Ms"

// Other headers understood on input, after the configured one, in this order
// of precedence. They are never written.
const (
	// HeaderGRPCTimeout is gRPC's grpc-timeout header (see ParseGRPCTimeout),
	// in canonical form.
	HeaderGRPCTimeout = "Grpc-Timeout"
	// HeaderEnvoyTimeout is Envoy's x-envoy-expected-rq-timeout-ms header,
	// whole milliseconds (see ParseMillis), in canonical form: the time
	// Envoy gives the request, set on the requests it forwards.
	HeaderEnvoyTimeout = "X-Envoy-Expected-Rq-Timeout-Ms"
	// HeaderEnvoyUpstreamTimeout is Envoy's x-envoy-upstream-rq-timeout-ms
	// header, whole milliseconds (see ParseMillis), in canonical form: the
	// timeout a client asks Envoy for, which reaches the server when Envoy
	// passes it on.
	HeaderEnvoyUpstreamTimeout = "X-Envoy-Upstream-Rq-Timeout-Ms"
)

// Defaults used for zero fields of Config.
const (
	// DefaultMargin is the largest margin subtracted from the time left
	// before it is sent on, for the network and the reply (see
	// Config.Margin).
	DefaultMargin = 100 * time.Millisecond
	// DefaultMarginFraction is the share of the time left that the margin
	// takes, between MarginFloor and Config.Margin (see
	// Config.MarginFraction).
	DefaultMarginFraction = 0.1
	// MarginFloor is the least margin, when Config.Margin is at least that:
	// the header's resolution, and about a round trip on a local network.
	MarginFloor = time.Millisecond
	// DefaultMax is the largest timeout accepted from the wire or sent on.
	DefaultMax = 5 * time.Minute
	// DefaultWarnInterval is the least time between two log lines of one
	// Reason about one header (see Config.WarnInterval).
	DefaultWarnInterval = 10 * time.Second
)

// ErrTooShort is the fail-fast answer: too little time is left for the work
// (see Check and Inject). It is a rejection (watertight.IsRejection), so it is
// never retried and never counts as a failure of a dependency. The errors
// Check and Inject return wrap it with the numbers.
var ErrTooShort = watertight.NewRejection("deadline: too little time left for the work")

// ErrExpired matches, with errors.Is, the cause (context.Cause) of a context
// WithIncoming derived once the caller's propagated deadline has passed.
var ErrExpired = errors.New("deadline: the caller's deadline passed")

// ExpiredError is the cause (context.Cause) of a context derived by
// WithIncoming when the deadline the caller sent has passed: a handler can
// tell it from its own timeouts and from a cancelled request. errors.Is holds
// for ErrExpired and for context.DeadlineExceeded.
//
// The value is shared: contexts derived from the same header and timeout by
// one Propagator may have the same *ExpiredError as their cause (WithIncoming
// keeps a few recent ones, so as not to allocate one per request). Treat it
// as read-only.
type ExpiredError struct {
	// Header is the header the timeout was read from, in canonical form.
	Header string
	// Timeout is the timeout read from it, after clamping to Config.Max.
	Timeout time.Duration
}

// Error describes the expired deadline, for example
// "deadline: the caller's deadline passed (X-Request-Timeout-Ms: 250ms)".
func (e *ExpiredError) Error() string {
	return fmt.Sprintf("%s (%s: %v)", ErrExpired, e.Header, e.Timeout)
}

// Is reports whether target is ErrExpired or context.DeadlineExceeded.
func (e *ExpiredError) Is(target error) bool {
	return target == ErrExpired || target == context.DeadlineExceeded
}

// Config configures a Propagator. The zero value is valid: every zero field
// takes the default named in its comment (see DefaultConfig).
type Config struct {
	// Header is the header that carries the remaining time in whole
	// milliseconds, read first on input and the only one written on output.
	// Zero (empty) means DefaultHeader ("X-Request-Timeout-Ms"). It must be a
	// valid header name and not HeaderGRPCTimeout, whose format differs; it is
	// used in canonical form.
	Header string
	// Margin is the largest margin: what is subtracted from the remaining
	// time when it is sent on, to leave room for the network and the reply,
	// so that the callee gives up before the caller does and its answer can
	// come back. The margin scales with the time left: it is
	// MarginFraction of it, at least MarginFloor (or Margin, if that is
	// smaller) and at most Margin. With the defaults, 5s left sends 4.9s,
	// 150ms sends 135ms, 50ms sends 45ms, 10ms sends 9ms, and less than 2ms
	// leaves nothing to send (ErrTooShort). See MarginFor. Zero means
	// DefaultMargin (100ms); a negative value means no margin at all.
	Margin time.Duration
	// MarginFraction is the share of the remaining time that the margin
	// takes, below Margin: a fixed margin is too much for a 50ms budget
	// (or all of it) and too little for a minute's. Zero means
	// DefaultMarginFraction (0.1); a negative value means no scaling, the
	// margin is always Margin (the rule before MarginFraction). Must be
	// below 1, and not NaN.
	MarginFraction float64
	// Max is the largest timeout accepted from the wire (larger values are
	// clamped to it) and the largest sent on. Zero means DefaultMax (5
	// minutes). Must not be negative.
	Max time.Duration
	// MinRemaining is the least time the work needs: Check fails fast with
	// ErrTooShort when less is left. Zero means 0: only a deadline that has
	// passed fails. Must not be negative.
	MinRemaining time.Duration
	// Logger receives, at Warn, the incoming values that were ignored
	// (malformed, negative) or that were absurd (beyond a time.Duration) and
	// clamped, with the header, the value and the reason; at most one line
	// per Reason and header each WarnInterval. If nil, slog.Default() is used, at the
	// time of each log.
	Logger *slog.Logger
	// WarnInterval is the least time between two log lines of the same
	// Reason about the same header: incoming headers come from clients, and a hostile one must
	// not flood the log. The warnings in between are not logged, only
	// counted; the next line says how many were left out (suppressed=N).
	// Every warning, logged or not, is counted by Warned and sent to
	// Listener. Zero means DefaultWarnInterval (10s); a negative value logs
	// every warning.
	WarnInterval time.Duration
	// Name labels the Propagator's events (watertight.Event.Name). It may
	// be empty.
	Name string
	// Listener, if not nil, receives an EventBadInput for every incoming
	// value warned about, logged or not (the rate limit of WarnInterval
	// applies to the log only): Source "deadline", Name this Name, Key the
	// header, in canonical form, and Reason the Reason's label
	// ("malformed", "absurd"). It is called synchronously, in the goroutine
	// that read the header, never under a lock; a client can send a bad
	// value on every request, so it must return quickly (see
	// watertight.Listener). If nil, no events are built and the clock is
	// not read for them.
	Listener watertight.Listener
}

// DefaultConfig returns the configuration that zero fields resolve to:
// DefaultHeader, a margin of a tenth of the time left between 1ms and 100ms,
// at most 5 minutes, no minimum, the default logger (nil), a warning of each
// reason logged at most every 10 seconds, no name and no listener.
func DefaultConfig() Config {
	return Config{
		Header:         DefaultHeader,
		Margin:         DefaultMargin,
		MarginFraction: DefaultMarginFraction,
		Max:            DefaultMax,
		WarnInterval:   DefaultWarnInterval,
	}
}

// resolve fills defaults and validates; the error names the field and the rule.
func (c Config) resolve() (Config, error) {
	bad := func(field, rule string, got any) error {
		return fmt.Errorf("deadline: Config.%s %s, got %v", field, rule, got)
	}
	if c.Header == "" {
		c.Header = DefaultHeader
	}
	if !validHeaderName(c.Header) {
		return c, bad("Header", "must be a valid header name (token characters only)", quote(c.Header))
	}
	c.Header = http.CanonicalHeaderKey(c.Header)
	if c.Header == HeaderGRPCTimeout {
		return c, bad("Header", "must not be grpc-timeout, whose format (digits and a unit) differs", quote(c.Header))
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.Margin < 0 {
		c.Margin = 0
	}
	if c.MarginFraction != c.MarginFraction || c.MarginFraction >= 1 {
		return c, bad("MarginFraction", "must be below 1 (0 means 0.1, negative means always Margin)", c.MarginFraction)
	}
	if c.MarginFraction == 0 {
		c.MarginFraction = DefaultMarginFraction
	}
	if c.WarnInterval == 0 {
		c.WarnInterval = DefaultWarnInterval
	}
	if c.Max < 0 {
		return c, bad("Max", "must be >= 0 (0 means 5m0s)", c.Max)
	}
	if c.Max == 0 {
		c.Max = DefaultMax
	}
	if c.MinRemaining < 0 {
		return c, bad("MinRemaining", "must be >= 0 (0 means only an expired deadline fails)", c.MinRemaining)
	}
	return c, nil
}

// validHeaderName reports whether s is an HTTP token (RFC 9110, 5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// source is one header read on input, with its parser.
type source struct {
	header  string
	parse   func(string) (time.Duration, string) // parseMillis or parseGRPCTimeout
	expired *expiredCache
	warns   *[numReasons]warnLimit // by Reason
}

// expiredSlots is the size of the cache of ExpiredError values of a source.
const expiredSlots = 64

// expiredCache holds recent causes of one source, direct-mapped by timeout:
// a request whose timeout was seen recently reuses its cause, without an
// allocation. Entries are never modified once stored.
type expiredCache [expiredSlots]atomic.Pointer[ExpiredError]

// get returns an *ExpiredError for header and d, from the cache if it holds
// one.
func (c *expiredCache) get(header string, d time.Duration) *ExpiredError {
	slot := &c[(uint64(d)*0x9E3779B97F4A7C15)>>58] // Fibonacci hashing: 64 slots
	if e := slot.Load(); e != nil && e.Timeout == d {
		return e
	}
	e := &ExpiredError{Header: header, Timeout: d}
	slot.Store(e)
	return e
}

// Propagator reads a caller's timeout from request headers, sends the
// remaining time on, and fails fast when too little is left. It is safe for
// concurrent use; build it with New. It holds its resolved configuration and
// the counts of its warnings (Warned).
type Propagator struct {
	cfg     Config
	sources []source // the headers read on input, in order of precedence
	// full is the time left from which the margin is all of Margin (the
	// fraction would give more); below it the margin scales. The least
	// Duration when it never scales.
	full  time.Duration
	floor time.Duration // the least margin: min(MarginFloor, Margin)
	start time.Time     // the origin of the warnings' times, on the monotonic clock
}

// New returns a Propagator for cfg, with defaults for its zero fields. The
// error names the field and the rule it breaks.
func New(cfg Config) (*Propagator, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	p := &Propagator{cfg: c, start: time.Now(), floor: min(MarginFloor, c.Margin), full: math.MinInt64}
	if c.MarginFraction > 0 && c.Margin > 0 {
		p.full = math.MaxInt64 // when Margin / MarginFraction is beyond a Duration
		if full := float64(c.Margin) / c.MarginFraction; full < math.MaxInt64 {
			p.full = time.Duration(full)
		}
	}
	p.sources = append(p.sources,
		source{c.Header, parseMillis, new(expiredCache), new([numReasons]warnLimit)},
		source{HeaderGRPCTimeout, parseGRPCTimeout, new(expiredCache), new([numReasons]warnLimit)})
	for _, h := range []string{HeaderEnvoyTimeout, HeaderEnvoyUpstreamTimeout} {
		if c.Header != h {
			p.sources = append(p.sources, source{h, parseMillis, new(expiredCache), new([numReasons]warnLimit)})
		}
	}
	return p, nil
}

// Config returns the resolved configuration: defaults filled in, Header in
// canonical form, a negative Margin turned to 0. Logger, Name and Listener
// are left as given.
func (p *Propagator) Config() Config { return p.cfg }

func (p *Propagator) logger() *slog.Logger {
	if p.cfg.Logger != nil {
		return p.cfg.Logger
	}
	return slog.Default()
}

// MarginFor returns the margin subtracted from left, the time remaining,
// before it is sent on: Config.MarginFraction of left, at least MarginFloor
// and at most Config.Margin (exactly Margin when MarginFraction is negative,
// 0 when Margin is). Outgoing, Inject, Value and OutgoingMillis send
// left - MarginFor(left); a transport that computes the time left itself
// (the gRPC client interceptor) uses it to apply the same rule.
func (p *Propagator) MarginFor(left time.Duration) time.Duration {
	if left >= p.full {
		return p.cfg.Margin
	}
	return max(time.Duration(float64(left)*p.cfg.MarginFraction), p.floor)
}

// Incoming reads the caller's timeout from h: the configured header,
// grpc-timeout, and Envoy's x-envoy-expected-rq-timeout-ms and
// x-envoy-upstream-rq-timeout-ms. Every value is read, of every header,
// including each element of a comma-separated list ("5000, 50") and each
// line of a header given several times, and the shortest well-formed one
// wins: conflicting values never lengthen a deadline. (Empty list elements
// are skipped, as RFC 9110 asks.) An ill-formed value is counted and logged at
// Warn (header, value, reason; see Config.WarnInterval) and skipped. The
// result is clamped to Config.Max; an absurd value (beyond a time.Duration)
// is clamped and warned about too. ok is false when no usable value was
// present. A result of 0 is valid: the caller has no time left.
func (p *Propagator) Incoming(h http.Header) (d time.Duration, ok bool) {
	d, _, ok = p.incoming(h)
	return d, ok
}

// incoming is Incoming, with the header the timeout was read from.
func (p *Propagator) incoming(h http.Header) (time.Duration, string, bool) {
	d, s, ok := p.incomingSource(h)
	if !ok {
		return 0, "", false
	}
	return d, s.header, true
}

// incomingSource is Incoming, with the source the timeout was read from (the
// first in order of precedence, of those that gave the shortest value).
func (p *Propagator) incomingSource(h http.Header) (time.Duration, *source, bool) {
	var best time.Duration
	var from *source
	for i := range p.sources {
		s := &p.sources[i]
		for _, line := range h[s.header] {
			if d, ok := p.shortest(s, line); ok && (from == nil || d < best) {
				best, from = d, s
			}
		}
	}
	if from == nil {
		return 0, nil, false
	}
	return min(best, p.cfg.Max), from, true
}

// shortest returns the shortest well-formed value of one line of s's header,
// unclamped, and warns about the others. A line with no comma is one value;
// a line with commas is a list, whose empty elements are skipped.
func (p *Propagator) shortest(s *source, line string) (best time.Duration, ok bool) {
	if strings.IndexByte(line, ',') < 0 {
		return p.value(s, line)
	}
	some := false
	for rest := line; ; {
		v, tail, more := strings.Cut(rest, ",")
		if trimOWS(v) != "" {
			some = true
			if d, good := p.value(s, v); good && (!ok || d < best) {
				best, ok = d, true
			}
		}
		if !more {
			break
		}
		rest = tail
	}
	if !some { // a list of nothing: ",", " , "
		p.value(s, line)
	}
	return best, ok
}

// value parses one value of s's header, warning about it when it is
// malformed or absurd.
func (p *Propagator) value(s *source, v string) (time.Duration, bool) {
	d, want := s.parse(v)
	if want != "" {
		p.warn(s, Malformed, v, want)
		return 0, false
	}
	if d == math.MaxInt64 && d > p.cfg.Max {
		p.warn(s, Absurd, v, "")
	}
	return d, true
}

// cut shortens a value for a log line.
func cut(v string) string {
	if len(v) > maxQuoted {
		return v[:maxQuoted] + "..."
	}
	return v
}

func noop() {}

// WithIncoming returns a context whose deadline is now plus the timeout
// Incoming reads from h (clamped to Config.Max), or ctx's own deadline if that
// is earlier, with a cancel func that the caller must call (it is never nil).
// When the caller's deadline passes, context.Cause of the result is an
// *ExpiredError naming the header (errors.Is(cause, ErrExpired) holds), so a
// handler can tell it from other deadlines (the cause may be shared by other
// contexts of the same header and timeout: see ExpiredError); when ctx's
// earlier deadline passes, ctx's cause stands. Without a usable header, WithIncoming returns
// ctx itself and a cancel func that does nothing.
func (p *Propagator) WithIncoming(ctx context.Context, h http.Header) (context.Context, context.CancelFunc) {
	d, s, ok := p.incomingSource(h)
	if !ok {
		return ctx, noop
	}
	return context.WithDeadlineCause(ctx, time.Now().Add(d), s.expired.get(s.header, d))
}

// Outgoing returns the timeout to send on: the time left before ctx's
// deadline minus the margin (MarginFor: a share of it, at most
// Config.Margin), capped by Config.Max. ok is false when ctx
// has no deadline. A result below 1ms (0 or negative) means nothing is left:
// callers should not send the request (Inject refuses; see also Check).
func (p *Propagator) Outgoing(ctx context.Context) (d time.Duration, ok bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	left := time.Until(dl)
	d = left - p.MarginFor(left)
	if d > p.cfg.Max {
		d = p.cfg.Max
	}
	return d, true
}

// Inject sets the configured header on h to Outgoing(ctx) in whole
// milliseconds. It does nothing when ctx has no deadline. When less than a
// millisecond is left after the margin, it sets nothing and returns an error
// wrapping ErrTooShort with the numbers: the request would arrive with no time
// left, so it should not be sent.
func (p *Propagator) Inject(ctx context.Context, h http.Header) error {
	ms, ok, err := p.OutgoingMillis(ctx)
	if !ok {
		return err
	}
	v := strconv.FormatInt(ms, 10)
	if vs := h[p.cfg.Header]; len(vs) == 1 {
		vs[0] = v // reuse the slice of a header set before (a retry)
	} else {
		h[p.cfg.Header] = []string{v}
	}
	return nil
}

// Check is the fail-fast test, for a callee before it starts its work (and a
// caller before it sends a request). It returns an error wrapping ErrTooShort
// with the numbers, such as "deadline: too little time left for the work:
// 40ms left, the work needs at least 200ms", when ctx's deadline leaves less
// than Config.MinRemaining or has passed. It returns nil otherwise, and when
// ctx has no deadline. Exactly MinRemaining left is enough.
func (p *Propagator) Check(ctx context.Context) error {
	left, ok := Remaining(ctx)
	if !ok {
		return nil
	}
	if left <= 0 {
		return fmt.Errorf("%w: the deadline passed %s ago", ErrTooShort, human(-left))
	}
	if left < p.cfg.MinRemaining {
		return fmt.Errorf("%w: %s left, the work needs at least %v", ErrTooShort, human(left), p.cfg.MinRemaining)
	}
	return nil
}

// human rounds d for a message: to the millisecond from 1ms, to the
// microsecond below.
func human(d time.Duration) string {
	if d >= time.Millisecond || d <= -time.Millisecond {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// Remaining returns the time left before ctx's deadline, negative once it has
// passed; ok is false when ctx has no deadline.
func Remaining(ctx context.Context) (time.Duration, bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return time.Until(dl), true
}

// Enter makes the Propagator a watertight.Policy that fails fast: it refuses
// the call with Check's error when too little time is left, and lets it
// through under ctx unchanged otherwise. It does not touch headers: the
// transport injects them (Inject). Place it outermost in a client pipeline, or
// first in a server's, so that no permit is taken for work that cannot finish.
func (p *Propagator) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	return ctx, watertight.Ticket{}, p.Check(ctx)
}

// Exit returns err unchanged; see Enter.
func (p *Propagator) Exit(_ context.Context, _ watertight.Ticket, err error) error { return err }

var _ watertight.Policy = (*Propagator)(nil)
