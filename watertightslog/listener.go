package watertightslog

import (
	"context"
	"log/slog"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
)

// Group is the name of the slog group that holds an event's attributes.
const Group = "watertight"

// The attribute keys, inside Group. See the package documentation for what
// each holds and when it is present.
const (
	KeyEvent   = "event"
	KeySource  = "source"
	KeyName    = "name"
	KeyKey     = "key"
	KeyFrom    = "from"
	KeyTo      = "to"
	KeyReason  = "reason"
	KeyCode    = "code"
	KeyAttempt = "attempt"
	KeyDelay   = "delay"
	KeyPermits = "permits"
	KeyError   = "error"
)

// Options configures NewListener. The zero value gives the default levels.
type Options struct {
	// Levels sets the level of the events of a kind. A kind not in the map
	// takes its default: Info for EventStateChange (except openings, see
	// OpenLevel), Debug for every other kind. For EventStateChange the level
	// set here applies to the changes that are not openings. The map is
	// copied by NewListener.
	Levels map[watertight.EventKind]slog.Level
	// OpenLevel is the level of a state change to "open" or "forced-open"
	// (a breaker that opened). If nil, slog.LevelWarn.
	OpenLevel slog.Leveler
}

// Listener logs events to a slog.Logger; build it with NewListener. It is
// safe for concurrent use, as the Logger's handler must be.
type Listener struct {
	logger  *slog.Logger
	handler slog.Handler // logger's handler, with Group open
	levels  [256]slog.Level
	open    slog.Leveler
}

var _ watertight.Listener = (*Listener)(nil)

// The state names that make a state change an opening.
var (
	openState       = circuit.Open.String()
	forcedOpenState = circuit.ForcedOpen.String()
)

// messages are the record messages, by kind.
var messages = [256]string{
	watertight.EventStateChange:     "watertight: state change",
	watertight.EventRejected:        "watertight: call rejected",
	watertight.EventBulkheadFull:    "watertight: bulkhead full",
	watertight.EventRetryScheduled:  "watertight: retry scheduled",
	watertight.EventRetryExhausted:  "watertight: retries exhausted",
	watertight.EventRetrySkipped:    "watertight: retry skipped",
	watertight.EventBudgetExhausted: "watertight: budget exhausted",
	watertight.EventHedgeSent:       "watertight: hedge sent",
	watertight.EventHedgeWon:        "watertight: hedge won",
	watertight.EventHedgeSuppressed: "watertight: hedge suppressed",
	watertight.EventFallbackUsed:    "watertight: fallback used",
	watertight.EventShed:            "watertight: request shed",
	watertight.EventFaultInjected:   "watertight: fault injected",
	watertight.EventReplayed:        "watertight: result replayed",
	watertight.EventDropped:         "watertight: queued task dropped",
	watertight.EventBadInput:        "watertight: bad input ignored",
	watertight.EventAcquired:        "watertight: bulkhead permit acquired",
	watertight.EventReleased:        "watertight: bulkhead permit released",
	watertight.EventLimitChanged:    "watertight: concurrency limit changed",
}

// NewListener returns a Listener that logs each event to logger (if nil,
// slog.Default() as it is when NewListener is called) at the level opts
// gives its kind.
func NewListener(logger *slog.Logger, opts Options) *Listener {
	if logger == nil {
		logger = slog.Default()
	}
	l := &Listener{logger: logger, handler: logger.Handler().WithGroup(Group), open: opts.OpenLevel}
	for k := range l.levels {
		l.levels[k] = slog.LevelDebug
	}
	l.levels[watertight.EventStateChange] = slog.LevelInfo
	for k, lv := range opts.Levels {
		l.levels[k] = lv
	}
	if l.open == nil {
		l.open = slog.LevelWarn
	}
	return l
}

// Level returns the level at which l logs e.
func (l *Listener) Level(e watertight.Event) slog.Level {
	if e.Kind == watertight.EventStateChange && (e.To == openState || e.To == forcedOpenState) {
		return l.open.Level()
	}
	return l.levels[e.Kind]
}

// OnEvent logs e, unless the logger is not enabled at its level.
func (l *Listener) OnEvent(e watertight.Event) {
	level := l.Level(e)
	ctx := context.Background()
	if !l.logger.Enabled(ctx, level) {
		return
	}
	msg := messages[e.Kind]
	if msg == "" {
		msg = "watertight: event"
	}
	at := e.Time
	if at.IsZero() { // an event sent without watertight.Emit
		at = time.Now()
	}
	r := slog.NewRecord(at, level, msg, 0)
	r.AddAttrs(slog.String(KeyEvent, e.Kind.String()), slog.String(KeySource, e.Source))
	if e.Name != "" {
		r.AddAttrs(slog.String(KeyName, e.Name))
	}
	if e.Key != "" {
		r.AddAttrs(slog.String(KeyKey, e.Key))
	}
	if e.From != "" {
		r.AddAttrs(slog.String(KeyFrom, e.From))
	}
	if e.To != "" {
		r.AddAttrs(slog.String(KeyTo, e.To))
	}
	if e.Reason != "" {
		r.AddAttrs(slog.String(KeyReason, e.Reason))
	}
	if e.Code != "" {
		r.AddAttrs(slog.String(KeyCode, e.Code))
	}
	if e.Attempt > 0 {
		r.AddAttrs(slog.Int(KeyAttempt, e.Attempt))
	}
	if e.Delay > 0 {
		r.AddAttrs(slog.Duration(KeyDelay, e.Delay))
	}
	if e.Permits > 0 {
		r.AddAttrs(slog.Int(KeyPermits, e.Permits))
	}
	if e.Err != nil {
		r.AddAttrs(slog.Any(KeyError, e.Err))
	}
	_ = l.handler.Handle(ctx, r)
}
