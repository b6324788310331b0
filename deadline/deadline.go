package deadline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
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
	// whole milliseconds (see ParseMillis), in canonical form.
	HeaderEnvoyTimeout = "X-Envoy-Expected-Rq-Timeout-Ms"
)

// Defaults used for zero fields of Config.
const (
	// DefaultMargin is subtracted from the time left before it is sent on,
	// for the network and the reply.
	DefaultMargin = 100 * time.Millisecond
	// DefaultMax is the largest timeout accepted from the wire or sent on.
	DefaultMax = 5 * time.Minute
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
	// Margin is subtracted from the remaining time when it is sent on, to
	// leave room for the network and the reply. Zero means DefaultMargin
	// (100ms); a negative value means no margin.
	Margin time.Duration
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
	// clamped, with the header, the value and the reason. If nil,
	// slog.Default() is used, at the time of each log.
	Logger *slog.Logger
}

// DefaultConfig returns the configuration that zero fields resolve to:
// DefaultHeader, a 100ms margin, at most 5 minutes, no minimum, the default
// logger (nil).
func DefaultConfig() Config {
	return Config{
		Header: DefaultHeader,
		Margin: DefaultMargin,
		Max:    DefaultMax,
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
	parse   func(string) (time.Duration, error)
	expired *expiredCache
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
// concurrent use; build it with New. It holds only its resolved
// configuration.
type Propagator struct {
	cfg     Config
	sources []source // the headers read on input, in order of precedence
}

// New returns a Propagator for cfg, with defaults for its zero fields. The
// error names the field and the rule it breaks.
func New(cfg Config) (*Propagator, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	p := &Propagator{cfg: c}
	p.sources = append(p.sources,
		source{c.Header, ParseMillis, new(expiredCache)},
		source{HeaderGRPCTimeout, ParseGRPCTimeout, new(expiredCache)})
	if c.Header != HeaderEnvoyTimeout {
		p.sources = append(p.sources, source{HeaderEnvoyTimeout, ParseMillis, new(expiredCache)})
	}
	return p, nil
}

// Config returns the resolved configuration: defaults filled in, Header in
// canonical form, a negative Margin turned to 0. Logger is left as given.
func (p *Propagator) Config() Config { return p.cfg }

func (p *Propagator) logger() *slog.Logger {
	if p.cfg.Logger != nil {
		return p.cfg.Logger
	}
	return slog.Default()
}

// Incoming reads the caller's timeout from h: the configured header first,
// then grpc-timeout, then Envoy's x-envoy-expected-rq-timeout-ms; the first
// well-formed one wins. Of a header given several times, the first value
// counts. An ill-formed value is logged at Warn (header, value, reason) and
// skipped. The result is clamped to Config.Max; an absurd value (beyond a
// time.Duration) is clamped and logged too. ok is false when no usable header
// was present. A result of 0 is valid: the caller has no time left.
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

// incomingSource is Incoming, with the source the timeout was read from.
func (p *Propagator) incomingSource(h http.Header) (time.Duration, *source, bool) {
	for i := range p.sources {
		s := &p.sources[i]
		vs := h[s.header]
		if len(vs) == 0 {
			continue
		}
		d, err := s.parse(vs[0])
		if err != nil {
			p.logger().LogAttrs(context.Background(), slog.LevelWarn, "deadline: ignored a malformed timeout header",
				slog.String("header", s.header), slog.String("value", cut(vs[0])), slog.String("reason", err.Error()))
			continue
		}
		if d > p.cfg.Max {
			if d == math.MaxInt64 {
				p.logger().LogAttrs(context.Background(), slog.LevelWarn, "deadline: clamped an absurd timeout header",
					slog.String("header", s.header), slog.String("value", cut(vs[0])),
					slog.String("reason", "beyond a time.Duration; clamped to Max "+p.cfg.Max.String()))
			}
			d = p.cfg.Max
		}
		return d, s, true
	}
	return 0, nil, false
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
// deadline minus Config.Margin, capped by Config.Max. ok is false when ctx
// has no deadline. A result below 1ms (0 or negative) means nothing is left:
// callers should not send the request (Inject refuses; see also Check).
func (p *Propagator) Outgoing(ctx context.Context) (d time.Duration, ok bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	d = time.Until(dl) - p.cfg.Margin
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
	d, ok := p.Outgoing(ctx)
	if !ok {
		return nil
	}
	if d < time.Millisecond {
		left := d + p.cfg.Margin
		return fmt.Errorf("%w: %s left, nothing after the %v margin", ErrTooShort, human(left), p.cfg.Margin)
	}
	v := FormatMillis(d)
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
