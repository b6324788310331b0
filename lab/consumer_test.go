package lab

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestConsumerQuick runs the consumer scenario (seed 1, quick) and asserts
// its checks pass, that every record was processed once and after it
// arrived, that the phases account for every record, that backpressure
// moved the backlog from the consumer to the topic, and that the JSON has
// the scenario's shape.
func TestConsumerQuick(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	s, err := Lookup("consumer")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, err := s.Run(context.Background(), Options{Seed: 1, Quick: true, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("consumer ran in %v", time.Since(began).Round(time.Millisecond))
	for _, c := range res.Checks {
		t.Logf("%s %s%s", passFail(c.OK), c.Name, checkNumbers(c))
		if !c.OK {
			t.Errorf("check failed: %s%s", c.Name, checkNumbers(c))
		}
	}
	if len(res.Checks) != 5 || len(res.Tables) != 2 || len(res.Charts) != 2 || res.Summary == "" {
		t.Errorf("%d checks, %d tables, %d charts, summary %q", len(res.Checks), len(res.Tables), len(res.Charts), res.Summary)
	}
	doc, ok := res.JSON.(cnJSON)
	if !ok || doc.Scenario != "consumer" || len(doc.Results) != len(cnConfigs)*len(cnTopics)*len(cnPhases) || len(doc.Buffers) != len(cnConfigs) {
		t.Fatalf("JSON %T: %d results, %d buffers", res.JSON, len(doc.Results), len(doc.Buffers))
	}

	p := cnParamsFor(true)
	recs := cnRecords(p, 1)
	var perTopic [2]int
	for _, r := range recs {
		perTopic[r.topic]++
	}
	for _, cfg := range cnConfigs {
		for ti, topic := range cnTopics {
			n := 0
			for _, r := range doc.Results {
				if r.Config == cfg.name && r.Topic == topic {
					n += r.Records
				}
			}
			if n != perTopic[ti] {
				t.Errorf("%s %s: the phases count %d records, the topic had %d", cfg.name, topic, n, perTopic[ti])
			}
		}
	}
	runs, err := cnRunAll(context.Background(), p, cnConfigs, 1)
	if err != nil {
		t.Fatal(err)
	}
	for name, run := range runs {
		for i, r := range recs {
			if run.end[i] < r.arrival+r.service {
				t.Fatalf("%s: record %d (%s, arrived %v, %v of work) ended at %v", name, i, cnTopics[r.topic], r.arrival, r.service, run.end[i])
			}
		}
	}
	bp, nobp := runs[cnBackpressure], runs[cnPerTopic]
	if bp.peakLag[cnVideoT] < p.burst/2 || nobp.peakLag[cnVideoT] > p.fetchMax || bp.pausedPolls[cnVideoT] == 0 || bp.pausedPolls[cnRegsT] != 0 {
		t.Errorf("backpressure: transcoding lag %d, paused at %d polls (registrations %d); without: lag %d: want the backlog in the topic with it, not without",
			bp.peakLag[cnVideoT], bp.pausedPolls[cnVideoT], bp.pausedPolls[cnRegsT], nobp.peakLag[cnVideoT])
	}

	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Scenario string           `json:"scenario"`
		Results  []map[string]any `json:"results"`
		Buffers  []map[string]any `json:"buffers"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil || shape.Scenario != "consumer" {
		t.Fatalf("JSON shape: %v", err)
	}
	for _, key := range []string{"config", "topic", "phase", "records", "p50_ms", "p99_ms"} {
		if _, ok := shape.Results[0][key]; !ok {
			t.Errorf("result without %q: %v", key, shape.Results[0])
		}
	}
	for _, key := range []string{"config", "peak_buffered", "queue_sizes", "fetch_max", "peak_lag_by_topic"} {
		if _, ok := shape.Buffers[0][key]; !ok {
			t.Errorf("buffers without %q: %v", key, shape.Buffers[0])
		}
	}
	goleak.VerifyNone(t, leaks)
}

// TestConsumerDeterministic: the same seed gives the same numbers.
func TestConsumerDeterministic(t *testing.T) {
	p := cnParamsFor(true)
	a, err := cnRunAll(context.Background(), p, cnConfigs, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cnRunAll(context.Background(), p, cnConfigs, 7)
	if err != nil {
		t.Fatal(err)
	}
	for name := range a {
		if !reflect.DeepEqual(a[name], b[name]) {
			t.Fatalf("%s: two runs with one seed differ", name)
		}
	}
	c, err := cnRunAll(context.Background(), p, cnConfigs, 8)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a[cnShared].end, c[cnShared].end) {
		t.Fatal("seeds 7 and 8 gave the same run")
	}
}

// TestConsumerMechanics runs the simulator on a handful of records whose
// fate can be worked out by hand: pools of one worker and a queue of one,
// polls every 5 ms taking at most 2 records a partition. Four transcoding
// jobs of 100 ms arrive at 1 ms, a registration of 1 ms at 1 ms and another
// at 12 ms.
func TestConsumerMechanics(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	p := cnParamsFor(true)
	p.poll, p.fetchMax, p.end, p.bin = ms(5), 2, ms(500), ms(100)
	p.sharedPool, p.regPool, p.videoPool = cnPoolSize{1, 1}, cnPoolSize{1, 1}, cnPoolSize{1, 1}
	p.quiet, p.burstSpan = 0, ms(1)
	recs := []cnRecord{
		{topic: cnRegsT, arrival: ms(1), service: ms(1)},
		{topic: cnVideoT, arrival: ms(1), service: ms(100), burst: true},
		{topic: cnVideoT, arrival: ms(1), service: ms(100), burst: true},
		{topic: cnVideoT, arrival: ms(1), service: ms(100), burst: true},
		{topic: cnVideoT, arrival: ms(1), service: ms(100), burst: true},
		{topic: cnRegsT, arrival: ms(12), service: ms(1)},
	}
	for _, tc := range []struct {
		cfg        cnConfig
		end        []float64 // ms, by record
		peak, lag  int
		videoPause int // polls that skipped the transcoding partition
	}{
		// The poll at 5 ms starts r0 (ends 6) and v0 (105) and queues v1;
		// the one at 10 ms fetches v2 and v3 into the consumer's buffer
		// (3 buffered); the one at 15 ms starts r1 on its own worker.
		{cfg: cnConfig{name: "per-topic"}, end: []float64{6, 105, 205, 305, 405, 16}, peak: 3, lag: 2},
		// Paused while v1 is queued (the polls at 10–100 ms); the poll at
		// 105 ms, just after v0 ended and v1 started, fetches v2 (queued)
		// and v3 (buffered): the queue plus FetchMax − 1. Paused again
		// while v2, then v3, are queued (110–300 ms).
		{cfg: cnConfig{name: "backpressure", backpressure: true}, end: []float64{6, 105, 205, 305, 405, 16}, peak: 2, lag: 2, videoPause: 19 + 39},
		// One worker for both: v0 waits in the queue for r0, and r1 for
		// every job fetched before it.
		{cfg: cnConfig{name: "shared", shared: true}, end: []float64{6, 106, 206, 306, 406, 407}, peak: 4, lag: 2},
		// One buffer in fetch order: r1, fetched at 15 ms behind v2 and
		// v3 (4 buffered), starts only when v3 has entered the queue, at
		// 205 ms.
		{cfg: cnConfig{name: "head-of-line", headOfLine: true}, end: []float64{6, 105, 205, 305, 405, 206}, peak: 4, lag: 2},
	} {
		t.Run(tc.cfg.name, func(t *testing.T) {
			run, err := cnSimulate(context.Background(), p, tc.cfg, recs)
			if err != nil {
				t.Fatal(err)
			}
			var got []float64
			for _, e := range run.end {
				got = append(got, ovMs(e))
			}
			if !reflect.DeepEqual(got, tc.end) {
				t.Errorf("ends %v ms, want %v", got, tc.end)
			}
			if run.peak != tc.peak || run.peakLag[cnVideoT] != tc.lag || run.pausedPolls[cnVideoT] != tc.videoPause || run.pausedPolls[cnRegsT] != 0 {
				t.Errorf("peak buffered %d, transcoding lag %d, paused polls %v; want %d, %d, [0 %d]",
					run.peak, run.peakLag[cnVideoT], run.pausedPolls, tc.peak, tc.lag, tc.videoPause)
			}
			if want := ms(405); tc.cfg.name != "shared" && run.burstEnd != want {
				t.Errorf("burst ended at %v, want %v", run.burstEnd, want)
			}
		})
	}
	if _, err := cnSimulate(context.Background(), p, cnConfig{name: "x", shared: true, backpressure: true}, recs); err == nil {
		t.Error("a shared pool with backpressure was accepted")
	}
}

// cnCheckNamed returns the check whose name starts with prefix.
func cnCheckNamed(t *testing.T, checks []Check, prefix string) Check {
	t.Helper()
	for _, c := range checks {
		if strings.HasPrefix(c.Name, prefix) {
			return c
		}
	}
	t.Fatalf("no check %q", prefix)
	return Check{}
}

// TestConsumerChecksCanFail: each pass line fails when what it measures is
// taken away, on the quick run of seeds 1–3.
func TestConsumerChecksCanFail(t *testing.T) {
	noBurst := func(p *cnParams) { p.burst = 0 }
	replace := func(name string, cfg cnConfig) []cnConfig {
		cfg.name = name
		var out []cnConfig
		for _, c := range cnConfigs {
			if c.name == name {
				c = cfg
			}
			out = append(out, c)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		check  string // the prefix of the check that must fail
		params func(*cnParams)
		cfgs   []cnConfig
	}{
		// Without the burst there is nothing to starve the registrations.
		{"shared pool without the burst", cnShared + ": registrations' p99", noBurst, cnConfigs},
		// Pools per topic, but one dispatch loop that waits on the head
		// record: the registrations queue behind the transcoding jobs.
		{"per-topic pools behind one blocking dispatch loop", cnPerTopic + ": registrations' p99", nil,
			replace(cnPerTopic, cnConfig{headOfLine: true})},
		{"backpressure behind one blocking dispatch loop", cnBackpressure + ": registrations' p99", nil,
			replace(cnBackpressure, cnConfig{backpressure: true, headOfLine: true})},
		// The same pools, never pausing: the buffer holds the backlog.
		{"backpressure switched off", cnBackpressure + ": buffered records", nil,
			replace(cnBackpressure, cnConfig{})},
		// Without the burst the buffer has nothing to grow with.
		{"no backpressure without the burst", cnPerTopic + " (no backpressure): buffered records", noBurst, cnConfigs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := cnParamsFor(true)
			if tc.params != nil {
				tc.params(&p)
			}
			for seed := uint64(1); seed <= 3; seed++ {
				runs, err := cnRunAll(context.Background(), p, tc.cfgs, seed)
				if err != nil {
					t.Fatal(err)
				}
				c := cnCheckNamed(t, cnChecks(p, runs), tc.check)
				t.Logf("seed %d: %s %s%s", seed, passFail(c.OK), c.Name, checkNumbers(c))
				if c.OK {
					t.Errorf("seed %d: the check passed: %s%s", seed, c.Name, checkNumbers(c))
				}
			}
		})
	}
}

// TestConsumerSeeds runs the consumer scenario over
// WATERTIGHT_LAB_CONSUMER_SEEDS seeds (from 1; the full run with
// WATERTIGHT_LAB_CONSUMER_FULL=1, else the quick one), fails on every check
// that fails, and logs each check's passes and the range of its value: how
// the pass rates in docs/lab.md were measured. Skipped unless the variable
// is set (TestQuickSeeds runs seeds 1–20 of every registered scenario).
func TestConsumerSeeds(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("WATERTIGHT_LAB_CONSUMER_SEEDS"))
	if n < 1 {
		t.Skip("set WATERTIGHT_LAB_CONSUMER_SEEDS to a number of seeds")
	}
	quick := os.Getenv("WATERTIGHT_LAB_CONSUMER_FULL") != "1"
	var names []string
	var passes []int
	var lo, hi []float64
	for seed := uint64(1); seed <= uint64(n); seed++ {
		res, err := consumerScenario.Run(context.Background(), Options{Seed: seed, Quick: quick, Progress: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		line := ""
		for i, c := range res.Checks {
			if len(names) < len(res.Checks) {
				names, passes = append(names, c.Name), append(passes, 0)
				lo, hi = append(lo, math.Inf(1)), append(hi, math.Inf(-1))
			}
			line += passFail(c.OK)[:1]
			lo[i], hi[i] = min(lo[i], c.Value), max(hi[i], c.Value)
			if c.OK {
				passes[i]++
			} else {
				t.Errorf("seed %d: %s%s", seed, c.Name, checkNumbers(c))
			}
		}
		t.Logf("seed %3d: %s", seed, line)
	}
	for i, name := range names {
		t.Logf("%3d of %d seeds (quick %v): %s — values %s to %s", passes[i], n, quick, name, fmtNum(lo[i]), fmtNum(hi[i]))
	}
}
