package dashboard_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/dashboard"
	"github.com/watertight-go/watertight/watch"
)

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  dashboard.Config
		want string
	}{
		{dashboard.Config{Interval: time.Millisecond}, "Config.Interval must be at least 10ms"},
		{dashboard.Config{Interval: -time.Second}, "Config.Interval"},
		{dashboard.Config{Interval: 10 * time.Millisecond, History: time.Hour}, "Config.History / Config.Interval must be at most 3600"},
	} {
		_, err := dashboard.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "dashboard: ") {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	d := must(dashboard.New(dashboard.Config{History: -1, Timeline: -1, MaxPages: -1, WriteTimeout: -1}))
	d.Close()
}

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

// The page is self-contained: inline script and style allowed by hash,
// nothing loaded from elsewhere, the title escaped.
func TestPage(t *testing.T) {
	d := must(dashboard.New(dashboard.Config{Title: `shop <b>&</b>`}))
	defer d.Close()
	for _, path := range []string{"/", "", "/dashboard/"} {
		w := get(t, d, http.MethodGet, "http://x"+path)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("GET %q: %d %s", path, w.Code, w.Header().Get("Content-Type"))
		}
	}
	w := get(t, d, http.MethodGet, "/")
	page := w.Body.String()
	if !strings.Contains(page, "<title>shop &lt;b&gt;&amp;&lt;/b&gt; · dashboard</title>") {
		t.Error("the title is not in the page, escaped")
	}
	if strings.Contains(page, "<b>&</b>") {
		t.Error("the title went into the page unescaped")
	}
	// One <link>: the empty icon, so that the browser asks for no favicon.
	if strings.Count(page, "<link") != 1 || !strings.Contains(page, `<link rel="icon" href="data:,">`) {
		t.Error("the page links to something other than its empty data: icon")
	}
	for _, bad := range []string{"<script src", "@import", "url(", "https://", "src=\"http", "href=\"http"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q: it must load nothing from elsewhere", bad)
		}
	}
	// The one http:// is the SVG namespace, which is a name, not a fetch.
	if n := strings.Count(page, "http://"); n != strings.Count(page, "http://www.w3.org/2000/svg") {
		t.Error("the page names an http:// address other than the SVG namespace")
	}
	csp := w.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("CSP %q: want default-src 'none' and connect-src 'self'", csp)
	}
	for _, tag := range []string{"script", "style"} {
		m := regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllStringSubmatch(page, -1)
		if len(m) != 1 {
			t.Fatalf("%d inline <%s> elements, want 1", len(m), tag)
		}
		sum := sha256.Sum256([]byte(m[0][1]))
		if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, tag+"-src "+h) {
			t.Errorf("the CSP does not allow the inline %s by its hash %s: %s", tag, h, csp)
		}
	}
	if w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Error("no X-Content-Type-Options: nosniff")
	}
}

// Read-only: every method but GET and HEAD is refused; unknown paths are 404.
func TestReadOnly(t *testing.T) {
	d := must(dashboard.New(dashboard.Config{}))
	defer d.Close()
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		for _, p := range []string{"/", "/events", "/state.json"} {
			if w := get(t, d, m, p); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d (Allow %q), want 405 with Allow: GET, HEAD", m, p, w.Code, w.Header().Get("Allow"))
			}
		}
	}
	if w := get(t, d, http.MethodGet, "/admin"); w.Code != http.StatusNotFound {
		t.Errorf("GET /admin: %d, want 404", w.Code)
	}
	if w := get(t, d, http.MethodHead, "/"); w.Code != http.StatusOK {
		t.Errorf("HEAD /: %d, want 200", w.Code)
	}
}

// state.json is the current frame, without a page open.
func TestStateJSON(t *testing.T) {
	set := new(watch.Set)
	b := must(circuit.New(circuit.Config{Name: "payments"}))
	set.AddBreaker(b)
	d := must(dashboard.New(dashboard.Config{Sources: set}))
	defer d.Close()
	b.ForceOpen()
	w := get(t, d, http.MethodGet, "/dashboard/state.json")
	var f frame
	if err := json.Unmarshal(w.Body.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	r, ok := f.row("circuit/payments/")
	if !ok || r.State != "forced-open" || r.Level != "bad" {
		t.Fatalf("state.json: %+v, want payments forced-open", f.Rows)
	}
}

// The stream over a real server on 127.0.0.1: the page's first event, then
// one frame per interval that follows the protections.
func TestStreamFollowsProtections(t *testing.T) {
	set := new(watch.Set)
	d := must(dashboard.New(dashboard.Config{Sources: set, Interval: 20 * time.Millisecond}))
	b := must(circuit.New(circuit.Config{Name: "payments", Listener: d}))
	bh := must(bulkhead.New(bulkhead.Config{Name: "search", MaxConcurrent: 10}))
	set.AddBreaker(b)
	set.AddBulkhead(bh)
	url := serve(t, d)

	p := open(t, url)
	first := p.next()
	if first.Type != "init" || first.IntervalMs != 20 || first.Title != "watertight" {
		t.Fatalf("first event: type %q interval %d title %q, want init, 20, watertight", first.Type, first.IntervalMs, first.Title)
	}
	f := p.until(10, func(f *frame) bool { return f.Type == "tick" })
	if r, ok := f.row("circuit/payments/"); !ok || r.State != "closed" || r.Level != "ok" {
		t.Fatalf("payments: %+v, want closed", r)
	}

	b.ForceOpen()
	f = p.until(10, func(f *frame) bool { r, _ := f.row("circuit/payments/"); return r.State == "forced-open" })
	r, _ := f.row("circuit/payments/")
	if r.Level != "bad" || r.Code != circuit.CodeManual {
		t.Errorf("forced open: level %q code %q, want bad and %q (the state change's Code)", r.Level, r.Code, circuit.CodeManual)
	}

	if err := bh.AcquireN(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	p.until(10, func(f *frame) bool { r, _ := f.row("bulkhead/search/"); return r.field("in_use") == "3" })
	bh.ReleaseN(3)
	p.until(10, func(f *frame) bool { r, _ := f.row("bulkhead/search/"); return r.field("in_use") == "0" })
}

// A breaker that opens on its own shows the rule that tripped it (its state
// change's Code), the words, and when it goes half-open; the timeline has
// the change once.
func TestTripCodeAndTimeline(t *testing.T) {
	set := new(watch.Set)
	d := must(dashboard.New(dashboard.Config{Sources: set, Interval: 20 * time.Millisecond}))
	b := must(circuit.New(circuit.Config{Name: "recommendation", WindowSize: 4, MinCalls: 4, OpenDuration: time.Minute, OpenJitter: -1, Listener: d}))
	set.AddBreaker(b)
	url := serve(t, d)
	p := open(t, url)
	p.next() // init
	fail := errors("down")
	for range 4 {
		circuit.Call(context.Background(), b, func(context.Context) (int, error) { return 0, fail })
	}
	var seen []change
	f := p.until(20, func(f *frame) bool {
		seen = append(seen, f.Changes...)
		r, _ := f.row("circuit/recommendation/")
		return r.State == "open"
	})
	r, _ := f.row("circuit/recommendation/")
	if r.Code != circuit.CodeFailureRate || !strings.Contains(r.Why, "failure rate") {
		t.Errorf("open: code %q why %q, want %q and the reason's words", r.Code, r.Why, circuit.CodeFailureRate)
	}
	if left := time.Until(time.UnixMilli(r.Until)); left <= 0 || left > time.Minute {
		t.Errorf("half-open in %v, want within the minute it stays open", left)
	}
	for range 3 { // a few more frames: the change must not come again
		seen = append(seen, p.next().Changes...)
	}
	if len(seen) != 1 || seen[0].To != "open" || seen[0].Code != circuit.CodeFailureRate || seen[0].Name != "recommendation" {
		t.Fatalf("timeline %+v, want the one change to open, code %q", seen, circuit.CodeFailureRate)
	}
	// A page opened now gets it in its first event.
	q := open(t, url)
	in := q.next()
	if len(in.Changes) != 1 || in.Changes[0].Seq != seen[0].Seq {
		t.Fatalf("a new page's timeline: %+v, want the change seq %d", in.Changes, seen[0].Seq)
	}
	if next := q.until(5, func(f *frame) bool { return f.Type == "tick" }); len(next.Changes) != 0 {
		t.Errorf("a new page got the change again in its first tick: %+v", next.Changes)
	}
}

type errors string

func (e errors) Error() string { return string(e) }

// Refused and shed calls are counted by their Code, while a page is open.
func TestReasonsByCode(t *testing.T) {
	d := must(dashboard.New(dashboard.Config{Interval: 20 * time.Millisecond}))
	url := serve(t, d)
	shed := func(code string) {
		d.OnEvent(watertight.Event{Kind: watertight.EventShed, Source: "http", Name: "api", Code: code, Reason: "words " + code})
	}
	shed("deadline") // no page open: not counted
	p := open(t, url)
	p.next()
	for range 3 {
		shed("route_full")
	}
	shed("deadline")
	shed("")
	d.OnEvent(watertight.Event{Kind: watertight.EventAcquired, Source: "bulkhead"}) // not a refusal: not counted
	f := p.until(20, func(f *frame) bool { return len(f.Reasons) == 3 })
	want := []reasonRow{
		{Kind: "shed", Source: "http", Name: "api", Code: "route_full", Total: 3},
		{Kind: "shed", Source: "http", Name: "api", Code: "(none)", Total: 1},
		{Kind: "shed", Source: "http", Name: "api", Code: "deadline", Total: 1},
	}
	for i, w := range want {
		g := f.Reasons[i]
		g.Rate = 0
		if g != w {
			t.Errorf("reason %d: %+v, want %+v", i, g, w)
		}
	}
}

// More pages than MaxPages are refused; the closed Dashboard refuses all.
func TestMaxPagesAndClose(t *testing.T) {
	d := must(dashboard.New(dashboard.Config{MaxPages: 1, Interval: 20 * time.Millisecond}))
	url := serve(t, d)
	p := open(t, url)
	p.next()
	resp := must(http.Get(url + "/events"))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a second page: %s, want 503", resp.Status)
	}
	d.Close() // ends the open stream
	for {
		if _, err := p.r.ReadString('\n'); err != nil {
			break // the stream ended
		}
	}
	resp = must(http.Get(url + "/"))
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET / after Close: %s, want 503", resp.Status)
	}
}
