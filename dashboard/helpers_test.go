package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/dashboard"
)

// must returns v, or panics on err (which fails the test).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// row and frame mirror the JSON the page reads.
type row struct {
	ID     string     `json:"id"`
	Kind   string     `json:"kind"`
	Group  string     `json:"group"`
	Name   string     `json:"name"`
	State  string     `json:"state"`
	Level  string     `json:"level"`
	Code   string     `json:"code"`
	Why    string     `json:"why"`
	Until  int64      `json:"until"`
	Fields []string   `json:"fields"`
	Values [2]float64 `json:"values"`
	Max    float64    `json:"max"`
}

func (r row) field(k string) string {
	for i := 0; i+1 < len(r.Fields); i += 2 {
		if r.Fields[i] == k {
			return r.Fields[i+1]
		}
	}
	return "<none>"
}

type reasonRow struct {
	Kind, Source, Name, Code string
	Total                    uint64
	Rate                     float64
}

type change struct {
	Seq                               uint64
	T                                 int64 `json:"t"`
	Source, Name, Key, From, To, Code string
	Reason                            string
	DelayMs                           int64 `json:"delay_ms"`
}

type frame struct {
	Type        string      `json:"type"`
	T           int64       `json:"t"`
	Rows        []row       `json:"rows"`
	Reasons     []reasonRow `json:"reasons"`
	ReasonsRate float64     `json:"reasons_rate"`
	Changes     []change    `json:"changes"`

	// init only
	Title         string                   `json:"title"`
	IntervalMs    int64                    `json:"interval_ms"`
	Times         []int64                  `json:"times"`
	Series        map[string][]*[2]float64 `json:"series"`
	ReasonsSeries []float64                `json:"reasons_series"`
	Now           *frame                   `json:"now"`
}

func (f *frame) row(id string) (row, bool) {
	for _, r := range f.Rows {
		if r.ID == id {
			return r, true
		}
	}
	return row{}, false
}

// page is one open event stream on a real server.
type page struct {
	t      testing.TB
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// open connects to the stream of the dashboard served at url.
func open(t testing.TB, url string) *page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req := must(http.NewRequestWithContext(ctx, http.MethodGet, url+"/events", nil))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		resp.Body.Close()
		t.Fatalf("events: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("events Content-Type %q, want text/event-stream", ct)
	}
	p := &page{t: t, resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(p.close)
	return p
}

func (p *page) close() {
	p.cancel()
	p.resp.Body.Close()
}

// next returns the next frame of the stream.
func (p *page) next() *frame {
	p.t.Helper()
	for {
		line, err := p.r.ReadString('\n')
		if err != nil {
			p.t.Fatalf("reading the stream: %v", err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var f frame
			if err := json.Unmarshal([]byte(data), &f); err != nil {
				p.t.Fatalf("a frame that is not JSON: %v: %.200s", err, data)
			}
			return &f
		}
	}
}

// until reads frames until ok accepts one, at most n frames.
func (p *page) until(n int, ok func(*frame) bool) *frame {
	p.t.Helper()
	for range n {
		if f := p.next(); ok(f) {
			return f
		}
	}
	p.t.Fatalf("no frame of %d matched", n)
	return nil
}

// serve starts d on a real server on 127.0.0.1, closed at the end.
func serve(t testing.TB, d *dashboard.Dashboard) string {
	t.Helper()
	srv := httptest.NewServer(d)
	t.Cleanup(func() {
		d.Close() // ends the streams first: Server.Close waits for handlers
		srv.Close()
	})
	return srv.URL
}
