package lab

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
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

func TestJSONDocument(t *testing.T) {
	a, b := sampleResult(), sampleResult()
	one, err := json.Marshal(JSONDocument([]*Result{a}))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(one); got != `{"results":[1,2],"scenario":"sample"}` {
		t.Errorf("one: %s", got)
	}
	two, err := json.Marshal(JSONDocument([]*Result{a, b}))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(two); got != `{"scenarios":[{"results":[1,2],"scenario":"sample"},{"results":[1,2],"scenario":"sample"}]}` {
		t.Errorf("two: %s", got)
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
