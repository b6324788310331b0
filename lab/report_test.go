package lab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

func sampleResult() *Result {
	return &Result{
		Scenario: "sample",
		Summary:  "A sample result.",
		Tables: []Table{{
			Title:  "numbers",
			Header: []string{"name", "value", "diff"},
			Rows:   [][]string{{"alpha", "1", "+0.5%"}, {"beta|gamma", "1234.5", "-10.0%"}},
		}},
		Charts: []Chart{
			{File: "sample-lin", Title: "Linear", XLabel: "x", YLabel: "y", Series: []Series{
				{Name: "a", X: []float64{1, 2, 3}, Y: []float64{1, 4, 9}},
				{Name: "b", X: []float64{1, 2, 3}, Y: []float64{2, math.NaN(), 3}},
			}},
			{File: "sample-log", Title: "Log", XLabel: "x", YLabel: "y", LogY: true, Series: []Series{
				{Name: "a", X: []float64{1, 2, 3}, Y: []float64{0, 0.3, 300}},
			}},
		},
		JSON:   map[string]any{"scenario": "sample", "results": []int{1, 2}},
		Checks: []Check{{Name: "one is one", OK: true, Detail: "1"}, {Name: "two is three", OK: false, Detail: "2"}},
	}
}

func TestWriteReport(t *testing.T) {
	bo, _ := quickBackoff(t, 1, 10, 50, 100)
	dir := filepath.Join(t.TempDir(), "report")
	if err := WriteReport(dir, []*Result{bo, sampleResult()}, "Written by a test."); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, ReportIndex))
	if err != nil {
		t.Fatal(err)
	}
	s := string(md)
	for _, want := range []string{
		"# watertight lab report", "Written by a test.",
		"## backoff", "## sample", "- [backoff](#backoff): 10 of 10 checks pass",
		"| clients | none | exponential | full | equal | decorrelated |",
		"| --- |", `beta\|gamma`, "**PASS** one is one: 1", "**FAIL** two is three: 2",
		"![Calls (writes) vs clients](backoff-calls.png)", "(backoff-time.png)", "(sample-lin.png)", "(sample-log.png)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("index.md lacks %q", want)
		}
	}
	for _, name := range []string{"backoff-calls", "backoff-time", "sample-lin", "sample-log"} {
		b, err := os.ReadFile(filepath.Join(dir, name+".png"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, pngMagic) || len(b) < 2000 {
			t.Errorf("%s.png: %d bytes, not a PNG image", name, len(b))
		}
	}
}

// TestWriteReportOneRun: a report holds one run. A report of one scenario
// written over a report of two removes the other scenario's charts (PNG
// and SVG) — including those of a report written before the index listed
// its files — and leaves every file the lab did not write alone.
func TestWriteReportOneRun(t *testing.T) {
	dir := t.TempDir()
	other := sampleResult()
	other.Scenario = "other"
	other.Charts = []Chart{{File: "other-chart", Series: other.Charts[0].Series}}
	if err := WriteReport(dir, []*Result{sampleResult(), other}, ""); err != nil {
		t.Fatal(err)
	}
	// A chart of an older report, linked from its index only, and files of
	// the user's: a PNG the index never named, notes, a folder.
	md, err := os.ReadFile(filepath.Join(dir, ReportIndex))
	if err != nil {
		t.Fatal(err)
	}
	md = append(md, "\n![old](older-chart.png)\n"...)
	for name, content := range map[string]string{ReportIndex: string(md), "older-chart.png": "png", "mine.png": "mine", "notes.txt": "mine"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "keep.png"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sample-lin.svg", "other-chart.png", "other-chart.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("first report: %v", err)
		}
	}

	if err := WriteReport(dir, []*Result{sampleResult()}, ""); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"index.md", "keep.png", "mine.png", "notes.txt", "sample-lin.png", "sample-lin.svg", "sample-log.png", "sample-log.svg"}
	if !slices.Equal(names, want) {
		t.Errorf("after a one-scenario report the folder holds\n%v\nwant\n%v", names, want)
	}
	md, _ = os.ReadFile(filepath.Join(dir, ReportIndex))
	if strings.Contains(string(md), "other") {
		t.Errorf("index.md still names the other scenario:\n%s", md)
	}
	if !strings.Contains(string(md), "([SVG](sample-lin.svg))") || !strings.Contains(string(md), filesMarker+"sample-lin.png sample-lin.svg sample-log.png sample-log.svg -->") {
		t.Errorf("index.md lacks the SVG links or the files marker:\n%s", md)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "sample-lin.svg"))
	if err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("sample-lin.svg is not an SVG image (%v)", err)
	}

	// A folder whose index.md is not a lab report loses nothing.
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, ReportIndex), []byte("# my notes\n![x](x.png)\n"), 0o644)
	os.WriteFile(filepath.Join(foreign, "x.png"), []byte("x"), 0o644)
	if err := WriteReport(foreign, []*Result{sampleResult()}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(foreign, "x.png")); err != nil {
		t.Errorf("a file named by an index.md the lab did not write was removed: %v", err)
	}
}

// TestChartStyles: every series of a chart of up to eight differs from the
// others in colour, dash pattern and marker together, and the series drawn
// first are drawn widest, so that a later one on top of it leaves it
// visible.
func TestChartStyles(t *testing.T) {
	const n = 8
	seen := map[string]bool{}
	var prev chartStyle
	for i := range n {
		st := seriesStyle(i, n)
		key := fmt.Sprint(st.color, st.dashes, fmt.Sprintf("%T", st.glyph))
		if seen[key] {
			t.Errorf("series %d looks like an earlier one: %s", i, key)
		}
		seen[key] = true
		if i > 0 && (st.width >= prev.width || st.radius >= prev.radius) {
			t.Errorf("series %d: width %v, radius %v; want both below series %d's (%v, %v)", i, st.width, st.radius, i-1, prev.width, prev.radius)
		}
		prev = st
	}
	// A percentage axis runs from 0 to 100, however the data lies; any
	// other axis ends at the data's top: no headroom for a legend, which
	// sits beside the data.
	series := []Series{{Name: "a", X: []float64{0, 1}, Y: []float64{90, 90}}, {Name: "b", X: []float64{0, 1}, Y: []float64{90, 40}}, {Name: "c", X: []float64{0, 1}, Y: []float64{50, 60}}}
	for _, tc := range []struct{ ymax, want float64 }{{100, 100}, {0, 90}} {
		p, _, err := chartPlot(Chart{YMax: tc.ymax, Series: series})
		if err != nil {
			t.Fatal(err)
		}
		if p.Y.Min != 0 || p.Y.Max != tc.want {
			t.Errorf("YMax %v: Y axis %v…%v, want 0…%v", tc.ymax, p.Y.Min, p.Y.Max, tc.want)
		}
	}
}

func TestWriteReportBadChartNames(t *testing.T) {
	a, b := sampleResult(), sampleResult()
	if err := WriteReport(t.TempDir(), []*Result{a, b}, ""); err == nil || !strings.Contains(err.Error(), "used by") {
		t.Errorf("duplicate chart file: err = %v", err)
	}
	a.Charts[0].File = "../escape"
	if err := WriteReport(t.TempDir(), []*Result{a}, ""); err == nil {
		t.Error("chart file with a path accepted")
	}
}

func TestChartPNG(t *testing.T) {
	for _, c := range []Chart{
		{File: "empty"},
		{File: "zeros", LogY: true, Series: []Series{{Name: "z", X: []float64{1, 2}, Y: []float64{0, 0}}}},
		{File: "flat", Series: []Series{{Name: "f", X: []float64{1}, Y: []float64{5}}}},
		{File: "many", Series: func() []Series {
			var ss []Series
			for i := range 12 {
				ss = append(ss, Series{Name: string(rune('a' + i)), X: []float64{0, 1}, Y: []float64{float64(i), float64(i + 1)}})
			}
			return ss
		}()},
	} {
		b, err := ChartPNG(c)
		if err != nil {
			t.Errorf("%s: %v", c.File, err)
			continue
		}
		if !bytes.HasPrefix(b, pngMagic) {
			t.Errorf("%s: not a PNG image", c.File)
		}
	}
}

func TestLogTicks(t *testing.T) {
	ticks := logTicks{}.Ticks(0.3, 130)
	var labels []string
	for _, tk := range ticks {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
		if tk.Value < 0.3 || tk.Value > 130 {
			t.Errorf("tick %v outside [0.3, 130]", tk.Value)
		}
	}
	if got := strings.Join(labels, " "); got != "1 10 100" {
		t.Errorf("labels %q, want \"1 10 100\"", got)
	}
	labels = nil
	for _, tk := range (logTicks{}).Ticks(3, 40) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "5 10 20" {
		t.Errorf("labels %q, want \"5 10 20\"", got)
	}
}

func TestWriteText(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteText(&buf, sampleResult()); err != nil {
		t.Fatal(err)
	}
	want := `== sample ==
A sample result.

numbers
name         value    diff
----------  ------  ------
alpha            1   +0.5%
beta|gamma  1234.5  -10.0%

PASS  one is one: 1
FAIL  two is three: 2

`
	if got := buf.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestWrap(t *testing.T) {
	lines := wrap(strings.Repeat("word ", 50), 22)
	for _, l := range lines {
		if len(l) > 22 {
			t.Errorf("line %q longer than 22", l)
		}
	}
	if len(lines) != 13 {
		t.Errorf("%d lines, want 13", len(lines))
	}
}

// TestJSONDocument: the document holds the scenario's own fields, then
// every check with its measured value and bound, and the run's seed and
// flags; several results go under "scenarios".
func TestJSONDocument(t *testing.T) {
	a, b := sampleResult(), sampleResult()
	a.Checks = append(a.Checks, Within("share in band", 5.5, 4, 6, "%", "delay 8 ms"))
	info := RunInfo{Command: "watertight lab sample", Seed: 7, Flags: map[string]any{"quick": true}}
	one, err := JSONDocument([]*Result{a}, info)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"results":[1,2],"scenario":"sample","checks":[{"name":"one is one","pass":true,"detail":"1"},{"name":"two is three","pass":false,"detail":"2"},` +
		`{"name":"share in band","pass":true,"value":5.5,"unit":"%","min":4,"max":6,"bound":"4–6%","detail":"delay 8 ms"}],` +
		`"command":"watertight lab sample","seed":7,"flags":{"quick":true},"checks_passed":2,"checks_total":3}`
	if got := string(one); got != want {
		t.Errorf("one:\n%s\nwant\n%s", got, want)
	}
	two, err := JSONDocument([]*Result{a, b}, RunInfo{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Seed      uint64 `json:"seed"`
		Passed    int    `json:"checks_passed"`
		Total     int    `json:"checks_total"`
		Scenarios []struct {
			Scenario string `json:"scenario"`
			Checks   []struct {
				Name string `json:"name"`
				Pass bool   `json:"pass"`
			} `json:"checks"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(two, &doc); err != nil {
		t.Fatalf("%v: %s", err, two)
	}
	if doc.Seed != 1 || doc.Passed != 3 || doc.Total != 5 || len(doc.Scenarios) != 2 || len(doc.Scenarios[0].Checks) != 3 || len(doc.Scenarios[1].Checks) != 2 {
		t.Errorf("two: %s", two)
	}
	// A scenario whose JSON is not an object, or nil.
	c := &Result{Scenario: "odd", JSON: []int{1}}
	d := &Result{Scenario: "none"}
	three, err := JSONDocument([]*Result{c, d}, RunInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(three); got != `{"seed":0,"checks_passed":0,"checks_total":0,"scenarios":[{"scenario":"odd","result":[1],"checks":[]},{"scenario":"none","checks":[]}]}` {
		t.Errorf("three: %s", got)
	}
	if Passed([]*Result{a}) || !Passed(nil) {
		t.Error("Passed wrong")
	}
}

func TestLinearTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{10, 190, "20 40 60 80 100 120 140 160 180"},
		{0, 11000, "0 2000 4000 6000 8000 10000"},
		{0, 1.3, "0.0 0.2 0.4 0.6 0.8 1.0 1.2"},
		{-3, 3, "-3 -2 -1 0 1 2 3"},
	} {
		var labels []string
		for _, tk := range (linearTicks{}).Ticks(tc.lo, tc.hi) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, " "); got != tc.want {
			t.Errorf("[%v, %v]: labels %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}
