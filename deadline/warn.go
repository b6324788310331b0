package deadline

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
)

// Reason says why an incoming value was warned about. Its String is a
// stable label, for metrics: the Reason of the EventBadInput sent to
// Config.Listener.
type Reason uint8

// The reasons of a warning, counted apart (Warned) and rate-limited apart
// (Config.WarnInterval).
const (
	// Malformed: a value that is not well-formed (see ParseMillis and
	// ParseGRPCTimeout) was ignored.
	Malformed Reason = iota
	// Absurd: a well-formed value beyond a time.Duration (about 292
	// years) was clamped to Config.Max.
	Absurd
	numReasons
)

// String returns "malformed" or "absurd" ("unknown" for any other value).
func (r Reason) String() string {
	switch r {
	case Malformed:
		return CodeMalformed
	case Absurd:
		return CodeAbsurd
	}
	return "unknown"
}

// warnLimit counts the warnings of one Reason about one header and lets at
// most one a WarnInterval reach the log.
type warnLimit struct {
	count      atomic.Uint64 // every warning of the reason
	suppressed atomic.Uint64 // not logged since the last line
	next       atomic.Int64  // no line before this, in ns since Propagator.start
}

// Warned returns how many incoming values have been warned about for reason
// r since New, whether they were logged or, beyond the rate limit
// (Config.WarnInterval), only counted. It is 0 for an unknown Reason. It is
// for metrics: counters exported by a collector. The same warnings reach
// Config.Listener as events, by header and reason: with the listener a
// metrics exporter (contrib/watertightprom, contrib/watertightotel), they
// are counted as watertight_bad_input_total without further code.
func (p *Propagator) Warned(r Reason) uint64 {
	if r >= numReasons {
		return 0
	}
	var n uint64
	for i := range p.sources {
		n += p.sources[i].warns[r].count.Load()
	}
	return n
}

// eventSource is the Source of the package's events.
const eventSource = "deadline"

// warn counts a warning of reason r about value v of s's header (want is
// the parser's, for Malformed), sends it to Config.Listener as an
// EventBadInput, and logs it unless a line of r about that header was logged
// less than WarnInterval ago; a line logged after some were left out says
// how many (suppressed). Only a line logged allocates. No lock is held: the
// listener may call back into p.
func (p *Propagator) warn(s *source, r Reason, v, want string) {
	w := &s.warns[r]
	w.count.Add(1)
	if l := p.cfg.Listener; l != nil {
		watertight.Emit(l, watertight.Event{
			Kind: watertight.EventBadInput, Source: eventSource, Name: p.cfg.Name, Key: s.header, Reason: r.String(), Code: r.String(),
		})
	}
	if every := p.cfg.WarnInterval; every > 0 {
		now := int64(time.Since(p.start)) // monotonic: immune to clock steps
		next := w.next.Load()
		if now < next || !w.next.CompareAndSwap(next, now+int64(every)) {
			w.suppressed.Add(1)
			return
		}
	}
	msg, why := "deadline: clamped an absurd timeout header", "beyond a time.Duration; clamped to Max "+p.cfg.Max.String()
	if r == Malformed {
		msg, why = "deadline: ignored a malformed timeout header", syntaxError(v, want).Error()
	}
	attrs := []slog.Attr{slog.String("header", s.header), slog.String("value", cut(v)), slog.String("reason", why)}
	if n := w.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Uint64("suppressed", n), slog.Duration("interval", p.cfg.WarnInterval))
	}
	p.logger().LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}
