package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/watch"
)

// Defaults used for zero Config fields.
const (
	DefaultInterval     = time.Second
	DefaultHistory      = 5 * time.Minute
	DefaultTimeline     = 200
	DefaultMaxPages     = 16
	DefaultWriteTimeout = 10 * time.Second
	// MinInterval is the shortest Interval New accepts.
	MinInterval = 10 * time.Millisecond
	// MaxHistoryPoints bounds History / Interval: the samples a chart holds.
	MaxHistoryPoints = 3600
)

// ErrClosed answers the requests a closed Dashboard receives.
var ErrClosed = errors.New("dashboard: closed")

// ErrTooManyPages answers a page's event stream when Config.MaxPages pages
// are open already. It is a rejection (watertight.IsRejection).
var ErrTooManyPages = watertight.NewRejection("dashboard: too many pages open")

// Config configures a Dashboard. The zero value is valid: an empty set of
// its own, sampled once a second while a page is open, five minutes of
// charts.
type Config struct {
	// Sources are the protections the page shows, read at each sample. If
	// nil, the Dashboard makes an empty set of its own (see Sources). Give
	// the same Set to the Prometheus and OpenTelemetry exporters so that a
	// protection is registered once.
	Sources *watch.Set
	// Title is the page's title and heading. Empty means "watertight".
	Title string
	// Interval is the time between two samples while a page is open. Zero
	// means DefaultInterval (1s); it must be at least MinInterval.
	Interval time.Duration
	// History is how far back the charts reach. The Dashboard keeps the
	// samples taken while pages were open, at most this old, so that a page
	// opened later starts with them. Zero means DefaultHistory (5m), or
	// MaxHistoryPoints samples if fewer; negative keeps none (a page charts
	// what it sampled since it opened). History / Interval must be at most
	// MaxHistoryPoints.
	History time.Duration
	// Timeline is the number of state changes kept for the timeline. Zero
	// means DefaultTimeline (200); negative keeps none.
	Timeline int
	// MaxPages bounds the pages open at once; another is refused with 503
	// (ErrTooManyPages). Zero means DefaultMaxPages (16); negative means no
	// bound.
	MaxPages int
	// WriteTimeout bounds each write to a page; a page that does not take
	// a frame within it is dropped, and its browser reconnects. Zero means
	// DefaultWriteTimeout (10s); negative means no bound.
	WriteTimeout time.Duration
}

func (cfg *Config) resolve() error {
	if cfg.Sources == nil {
		cfg.Sources = new(watch.Set)
	}
	if cfg.Title == "" {
		cfg.Title = "watertight"
	}
	switch {
	case cfg.Interval == 0:
		cfg.Interval = DefaultInterval
	case cfg.Interval < MinInterval:
		return fmt.Errorf("dashboard: Config.Interval must be at least %v (zero means %v), got %v", MinInterval, DefaultInterval, cfg.Interval)
	}
	switch {
	case cfg.History == 0:
		cfg.History = min(DefaultHistory, MaxHistoryPoints*cfg.Interval)
	case cfg.History < 0:
		cfg.History = 0
	}
	if n := cfg.History / cfg.Interval; n > MaxHistoryPoints {
		return fmt.Errorf("dashboard: Config.History / Config.Interval must be at most %d samples, got %v / %v = %d: shorten History or lengthen Interval", MaxHistoryPoints, cfg.History, cfg.Interval, n)
	}
	switch {
	case cfg.Timeline == 0:
		cfg.Timeline = DefaultTimeline
	case cfg.Timeline < 0:
		cfg.Timeline = 0
	}
	if cfg.MaxPages == 0 {
		cfg.MaxPages = DefaultMaxPages
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	return nil
}

// Dashboard is the live page: an http.Handler serving one page and its
// event stream, and a watertight.Listener that keeps state changes and
// counts refused and shed calls by Event.Code. It is read-only: nothing it
// serves changes a protection.
//
// A Dashboard is safe for concurrent use. Build it with New; Close it to end
// the open pages' streams. The zero Dashboard is not usable.
type Dashboard struct {
	cfg  Config
	page []byte
	csp  string

	viewers atomic.Int32 // open streams: OnEvent's only read when none is open
	changes changeLog
	reasons reasonCounts

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close
	subs   map[*stream]struct{}
	run    *samplerRun // nil while no page is open
	hist   history
	last   []byte // the latest tick's frame (JSON), for a page that opens now
	tlSent uint64 // the last timeline sequence number sent to pages

	streams  sync.WaitGroup
	samplers sync.WaitGroup
	ticks    atomic.Uint64 // samples taken by the sampler, for tests
}

// New returns a Dashboard for cfg, or an error naming the invalid field.
func New(cfg Config) (*Dashboard, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: cfg, done: make(chan struct{}), subs: map[*stream]struct{}{}}
	d.changes.init(cfg.Timeline)
	d.reasons.init()
	var err error
	d.page, d.csp, err = buildPage(cfg.Title)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Sources returns the set the Dashboard reads (Config.Sources, or its own).
func (d *Dashboard) Sources() *watch.Set { return d.cfg.Sources }

// Wants declines the events sent on every call (EventAcquired,
// EventReleased): what they would count is read from the protections'
// snapshots, so that a call that succeeds costs nothing here (see
// watertight.Wants).
func (d *Dashboard) Wants(k watertight.EventKind) bool {
	return k != watertight.EventAcquired && k != watertight.EventReleased
}

// OnEvent implements watertight.Listener. With no page open it returns after
// one atomic load, except for state changes, which it keeps (a short lock)
// for the timeline and the breakers' trip codes. With a page open it also
// counts, by Event.Code, the events that refused, shed, dropped or skipped a
// call.
func (d *Dashboard) OnEvent(e watertight.Event) {
	if e.Kind == watertight.EventStateChange {
		d.changes.record(e)
		return
	}
	if d.viewers.Load() == 0 {
		return
	}
	if int(e.Kind) < len(countedKinds) && countedKinds[e.Kind] {
		d.reasons.count(e)
	}
}

// countedKinds are the kinds the page counts by code: those that say a call
// was refused, shed, dropped, skipped or answered otherwise.
var countedKinds = func() (k [32]bool) {
	for _, kind := range []watertight.EventKind{
		watertight.EventRejected, watertight.EventBulkheadFull, watertight.EventShed, watertight.EventDropped,
		watertight.EventBudgetExhausted, watertight.EventRetrySkipped, watertight.EventRetryExhausted,
		watertight.EventHedgeSuppressed, watertight.EventFallbackUsed, watertight.EventFaultInjected,
		watertight.EventBadInput,
	} {
		k[kind] = true
	}
	return k
}()

// ServeHTTP serves the page (a path ending in "/", or empty after
// http.StripPrefix), its event stream (a path ending in "/events") and
// "/state.json". It answers only GET and HEAD.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "dashboard: read-only: only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	if d.isClosed() {
		http.Error(w, ErrClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	p := r.URL.Path
	switch {
	case p == "" || strings.HasSuffix(p, "/"):
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", d.csp)
		h.Set("Cache-Control", "no-cache")
		w.Write(d.page)
	case p == "events" || strings.HasSuffix(p, "/events"):
		d.serveEvents(w, r)
	case p == "state.json" || strings.HasSuffix(p, "/state.json"):
		d.serveState(w)
	default:
		http.NotFound(w, r)
	}
}

func (d *Dashboard) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// serveState answers a frame sampled now, with every state change kept.
// Rates need two samples: they read zero here.
func (d *Dashboard) serveState(w http.ResponseWriter) {
	s := newSampler(d)
	b := s.encode(s.sample(time.Now(), 0))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// Close ends the open pages' streams, stops the sampler and waits for both;
// afterwards the Dashboard answers 503 (ErrClosed). As a Listener it keeps
// working (it counts nothing, as with no page open). It returns nil, and may
// be called more than once.
func (d *Dashboard) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.done)
		for s := range d.subs {
			d.dropLocked(s)
		}
		d.stopLocked()
	}
	d.mu.Unlock()
	d.samplers.Wait()
	d.streams.Wait()
	return nil
}

// buildPage inlines the script and style into the page and returns it with
// the Content-Security-Policy that allows those two and nothing else but
// the page's own event stream.
func buildPage(title string) (page []byte, csp string, err error) {
	read := func(name string) ([]byte, error) { return assets.ReadFile("assets/" + name) }
	tmpl, err := read("index.html")
	if err != nil {
		return nil, "", err
	}
	css, err := read("app.css")
	if err != nil {
		return nil, "", err
	}
	js, err := read("app.js")
	if err != nil {
		return nil, "", err
	}
	if bytes.Contains(bytes.ToLower(js), []byte("</script")) || bytes.Contains(bytes.ToLower(css), []byte("</style")) {
		return nil, "", errors.New("dashboard: an embedded asset closes its own tag")
	}
	hash := func(b []byte) string {
		sum := sha256.Sum256(b)
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	out := string(tmpl)
	out = strings.Replace(out, "{{TITLE}}", html.EscapeString(title), -1)
	out = strings.Replace(out, "{{STYLE}}", string(css), 1)
	out = strings.Replace(out, "{{SCRIPT}}", string(js), 1)
	csp = "default-src 'none'; script-src " + hash(js) + "; style-src " + hash(css) +
		"; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return []byte(out), csp, nil
}

//go:embed assets
var assets embed.FS
