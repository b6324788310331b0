package dashboard

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// streamBuffer is how many frames a page may fall behind before it is
// dropped (its browser reconnects and starts afresh).
const streamBuffer = 4

// stream is one open page.
type stream struct {
	ch     chan []byte // framed server-sent events
	closed bool        // ch closed; guarded by Dashboard.mu
}

// samplerRun is one run of the sampler goroutine: from the first page
// opened to the last one closed.
type samplerRun struct {
	stop chan struct{}
}

// serveEvents streams frames to one page until the client goes away, the
// page falls behind, or the Dashboard is closed.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	s := &stream{ch: make(chan []byte, streamBuffer)}
	first, err := d.subscribe(s)
	if err != nil {
		code := http.StatusServiceUnavailable
		http.Error(w, err.Error(), code)
		return
	}
	defer d.unsubscribe(s)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not buffer the stream
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	if !d.write(rc, w, first) {
		return
	}
	for {
		select {
		case b, ok := <-s.ch:
			if !ok || !d.write(rc, w, b) {
				return
			}
		case <-r.Context().Done():
			return
		case <-d.done:
			return
		}
	}
}

// write sends one framed event and flushes it, within WriteTimeout.
func (d *Dashboard) write(rc *http.ResponseController, w http.ResponseWriter, b []byte) bool {
	if d.cfg.WriteTimeout > 0 {
		_ = rc.SetWriteDeadline(time.Now().Add(d.cfg.WriteTimeout)) // not every writer supports it
	}
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// sse frames a JSON document as one server-sent event. JSON from
// encoding/json holds no newline, so one data line carries it.
func sse(b []byte) []byte {
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, '\n', '\n')
}

// subscribe adds s to the pages fed by the sampler, starting it for the
// first page, and returns the page's first event: the history, the
// timeline and the latest frame.
func (d *Dashboard) subscribe(s *stream) ([]byte, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	if d.cfg.MaxPages > 0 && len(d.subs) >= d.cfg.MaxPages {
		d.mu.Unlock()
		return nil, ErrTooManyPages
	}
	d.subs[s] = struct{}{}
	d.viewers.Store(int32(len(d.subs)))
	d.streams.Add(1)
	if d.run == nil {
		d.startLocked()
	}
	recs := slices.Clone(d.hist.recs) // their contents are never changed
	last, sent := d.last, d.tlSent
	d.mu.Unlock()

	in := initFrame{
		Type:       "init",
		Title:      d.cfg.Title,
		IntervalMs: d.cfg.Interval.Milliseconds(),
		HistoryMs:  d.cfg.History.Milliseconds(),
		Changes:    d.changes.upTo(sent),
		Now:        last,
	}
	in.Times, in.Series, in.ReasonsSeries = seriesOf(recs)
	b, err := json.Marshal(in)
	if err != nil {
		panic(err) // cannot happen: nothing in it fails to marshal
	}
	return append([]byte("retry: 2000\n"), sse(b)...), nil
}

// unsubscribe removes s, stopping the sampler after the last page.
func (d *Dashboard) unsubscribe(s *stream) {
	d.mu.Lock()
	if _, ok := d.subs[s]; ok {
		d.dropLocked(s)
	}
	d.mu.Unlock()
	d.streams.Done()
}

// dropLocked removes s and closes its channel; d.mu is held.
func (d *Dashboard) dropLocked(s *stream) {
	delete(d.subs, s)
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	d.viewers.Store(int32(len(d.subs)))
	if len(d.subs) == 0 {
		d.stopLocked()
	}
}

// startLocked starts a sampler run; d.mu is held.
func (d *Dashboard) startLocked() {
	run := &samplerRun{stop: make(chan struct{})}
	d.run = run
	d.reasons.reset()
	d.samplers.Add(1)
	go d.sampleLoop(run)
}

// stopLocked stops the sampler run; d.mu is held. The frame it kept is
// dropped (a page opened later waits for a fresh one); the history stays.
func (d *Dashboard) stopLocked() {
	if d.run != nil {
		close(d.run.stop)
		d.run = nil
		d.last = nil
	}
}

func (d *Dashboard) sampleLoop(run *samplerRun) {
	defer d.samplers.Done()
	s := newSampler(d)
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		d.tick(run, s, time.Now())
		select {
		case <-run.stop:
			return
		case <-t.C:
		}
	}
}

// tick takes one sample and sends it to every page. A page that has
// fallen streamBuffer frames behind is dropped.
func (d *Dashboard) tick(run *samplerRun, s *sampler, now time.Time) {
	d.ticks.Add(1)
	d.mu.Lock()
	after := d.tlSent
	d.mu.Unlock()
	f := s.sample(now, after)
	b := s.encode(f)
	msg := sse(b)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.run != run {
		return // stopped meanwhile
	}
	d.last = b
	if d.tlSent == after {
		d.tlSent = f.seq
	}
	d.hist.add(now, f, d.cfg.History)
	for st := range d.subs {
		select {
		case st.ch <- msg:
		default:
			d.dropLocked(st)
		}
	}
}

// initFrame is a page's first event.
type initFrame struct {
	Type       string `json:"type"` // "init"
	Title      string `json:"title"`
	IntervalMs int64  `json:"interval_ms"`
	HistoryMs  int64  `json:"history_ms"`
	// Times are the samples kept (Unix milliseconds); Series each row's
	// charted values at those times (null where it was not there), and
	// ReasonsSeries the counted events per second.
	Times         []int64                  `json:"times"`
	Series        map[string][]*[2]float64 `json:"series"`
	ReasonsSeries []float64                `json:"reasons_series"`
	// Changes are the timeline, oldest first.
	Changes []change `json:"changes"`
	// Now is the latest frame, if a page was open already.
	Now json.RawMessage `json:"now,omitempty"`
}

// tickRec is one sample in the history. It is never changed once added.
type tickRec struct {
	t       int64
	ids     []string
	vals    [][2]float64
	reasons float64
}

// history is the samples of the last Config.History.
type history struct {
	recs []tickRec
}

func (h *history) add(now time.Time, f *frame, keep time.Duration) {
	if keep <= 0 {
		return
	}
	rec := tickRec{t: f.Time, ids: make([]string, len(f.Rows)), vals: make([][2]float64, len(f.Rows)), reasons: f.ReasonsRate}
	for i, r := range f.Rows {
		rec.ids[i], rec.vals[i] = r.ID, r.Values
	}
	cut := now.Add(-keep).UnixMilli()
	i := 0
	for i < len(h.recs) && h.recs[i].t < cut {
		i++
	}
	if i > 0 {
		h.recs = append(h.recs[:0:0], h.recs[i:]...)
	}
	h.recs = append(h.recs, rec)
}

// seriesOf turns samples into aligned series.
func seriesOf(recs []tickRec) (times []int64, series map[string][]*[2]float64, reasons []float64) {
	times = make([]int64, len(recs))
	reasons = make([]float64, len(recs))
	series = map[string][]*[2]float64{}
	for i, rec := range recs {
		times[i], reasons[i] = rec.t, rec.reasons
		for j, id := range rec.ids {
			s := series[id]
			if s == nil {
				s = make([]*[2]float64, len(recs))
				series[id] = s
			}
			s[i] = &rec.vals[j]
		}
	}
	return times, series, reasons
}
