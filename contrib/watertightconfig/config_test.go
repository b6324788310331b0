package watertightconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/timeout"
)

func TestLoadExample(t *testing.T) {
	f, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "testdata/example.yaml" {
		t.Errorf("Name %q", f.Name)
	}
	if got := len(f.Breakers) + len(f.Bulkheads) + len(f.Retries) + len(f.Budgets) + len(f.Timeouts) + len(f.Hedges); got != 14 {
		t.Errorf("%d instances, want 14", got)
	}
	h := f.Hedges["catalog"]
	hc := hedge.DefaultConfig()
	hc.Name, hc.MinDelay, hc.Delay, hc.Idempotent = "catalog", 20*time.Millisecond, 20*time.Millisecond, true
	if !reflect.DeepEqual(h.Config, hc) || h.Budget != "hedging" || h.Breaker != "catalog" || h.Bulkhead != "" {
		t.Errorf("catalog hedge %+v, want %+v", h, hc)
	}

	// payment: own fields over defaults over package defaults.
	p := f.Breakers["payment"].Config
	want := circuit.DefaultConfig()
	want.Name = "payment"
	want.MinCalls, want.WindowSize = 10, 50 // instance
	want.OpenDurationMultiplier, want.MaxOpenDuration = 2, 2*time.Minute
	want.FailureRateThreshold = 50 // defaults
	want.SlowCallDuration, want.SlowCallRateThreshold = 2*time.Second, 80
	want.OpenDuration = 10 * time.Second
	if !sameConfig(p, want) {
		t.Errorf("payment breaker\n got %+v\nwant %+v", p, want)
	}
	// catalog: {} takes the defaults; max_open_duration follows
	// open_duration (10·).
	c := f.Breakers["catalog"].Config
	if c.OpenDuration != 10*time.Second || c.MaxOpenDuration != 100*time.Second || c.MinCalls != circuit.DefaultMinCalls || c.Name != "catalog" {
		t.Errorf("catalog breaker %+v", c)
	}
	if f.Breakers["catalog"].MaxKeys != circuit.DefaultMaxKeys {
		t.Errorf("max_keys %d", f.Breakers["catalog"].MaxKeys)
	}
	r := f.Breakers["recommendation"].Config
	if r.WindowType != circuit.TimeBased || r.WindowDuration != 30*time.Second || r.WindowBuckets != 10 {
		t.Errorf("recommendation breaker %+v", r)
	}

	if b := f.Bulkheads["payment"].Config; !reflect.DeepEqual(b, bulkhead.Config{Name: "payment", MaxConcurrent: 20, MaxWait: 50 * time.Millisecond}) {
		t.Errorf("payment bulkhead %+v", b)
	}
	if b := f.Bulkheads["catalog"].Config; b.MaxWait != 0 || b.MaxConcurrent != 40 {
		t.Errorf("catalog bulkhead %+v", b)
	}

	rp := f.Retries["payment"]
	if rp.Config.MaxAttempts != 2 || rp.Config.MinAttemptTime != 100*time.Millisecond || rp.Config.MaxDelay != retry.DefaultMaxDelay || rp.Config.Idempotent {
		t.Errorf("payment retry %+v", rp.Config)
	}
	if rp.Budget != "shared" {
		t.Errorf("payment retry budget %q", rp.Budget)
	}
	// backoff merges field by field: base from the instance, the rest from
	// the defaults and the package.
	if want := (backoff.Config{Jitter: backoff.Full, Base: 100 * time.Millisecond, Cap: 2 * time.Second, Multiplier: 2}); !reflect.DeepEqual(rp.Backoff, want) {
		t.Errorf("payment backoff %+v, want %+v", rp.Backoff, want)
	}
	if rc := f.Retries["catalog"]; !rc.Config.Idempotent || rc.Config.MaxAttempts != 3 || rc.Backoff.Base != 50*time.Millisecond {
		t.Errorf("catalog retry %+v %+v", rc.Config, rc.Backoff)
	}
	if b := f.Budgets["shared"].Config; b.Ratio != 0.1 || b.MaxTokens != 20 || b.MinPerSecond != budget.DefaultMinPerSecond || b.Name != "shared" {
		t.Errorf("budget %+v", b)
	}
	if to := f.Timeouts["catalog"].Config; to != (timeout.Config{Name: "catalog", Timeout: time.Second}) {
		t.Errorf("catalog timeout %+v", to)
	}
	if to := f.Timeouts["recommendation"].Config; to.Timeout != 300*time.Millisecond {
		t.Errorf("recommendation timeout %+v", to)
	}
	// Every resolved config is one its package accepts as it is.
	for n, b := range f.Breakers {
		if _, err := circuit.New(b.Config); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// sameConfig compares breaker configs, whose function fields are nil.
func sameConfig(a, b circuit.Config) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// An instance written as {} resolves to exactly its package's defaults.
func TestEmptyInstancesArePackageDefaults(t *testing.T) {
	f := mustParse(t, yamlLines(
		"breakers: {a: {}}",
		"bulkheads: {a: }",
		"retries: {a: {}}",
		"budgets: {a: {}}",
		"timeouts: {a: {}}",
		"hedges: {a: {}}",
	))
	hc := hedge.DefaultConfig()
	hc.Name, hc.Delay = "a", hc.MinDelay // a zero Delay with a percentile means MinDelay
	if !reflect.DeepEqual(f.Hedges["a"].Config, hc) {
		t.Errorf("hedge %+v, want %+v", f.Hedges["a"].Config, hc)
	}
	bc := circuit.DefaultConfig()
	bc.Name = "a"
	if !sameConfig(f.Breakers["a"].Config, bc) {
		t.Errorf("breaker %+v, want %+v", f.Breakers["a"].Config, bc)
	}
	kc := bulkhead.DefaultConfig()
	kc.Name = "a"
	if !reflect.DeepEqual(f.Bulkheads["a"].Config, kc) || f.Bulkheads["a"].MaxKeys != bulkhead.DefaultMaxKeys {
		t.Errorf("bulkhead %+v", f.Bulkheads["a"])
	}
	r := f.Retries["a"]
	if r.Config.MaxAttempts != retry.DefaultMaxAttempts || r.Config.MaxDelay != retry.DefaultMaxDelay || !reflect.DeepEqual(r.Backoff, backoff.DefaultConfig()) || r.Budget != "" {
		t.Errorf("retry %+v", r)
	}
	dc := budget.DefaultConfig()
	dc.Name = "a"
	if !reflect.DeepEqual(f.Budgets["a"].Config, dc) {
		t.Errorf("budget %+v", f.Budgets["a"].Config)
	}
	tc := timeout.DefaultConfig()
	tc.Name = "a"
	if f.Timeouts["a"].Config != tc {
		t.Errorf("timeout %+v", f.Timeouts["a"].Config)
	}
}

func TestEmptyFiles(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "{}", "---\n", "breakers:\nbulkheads: {}\ndefaults:\n", "defaults: {breakers: }\n"} {
		f, err := Parse("e.yaml", []byte(src))
		if err != nil {
			t.Errorf("%q: %v", src, err)
			continue
		}
		if len(f.Breakers)+len(f.Bulkheads)+len(f.Retries)+len(f.Budgets)+len(f.Timeouts) != 0 {
			t.Errorf("%q: %+v", src, f)
		}
	}
}

// The issue's own example, to the letter.
func TestErrorNamesFileLineFieldRule(t *testing.T) {
	src := strings.Repeat("# comment\n", 10) + "bulkheads:\n  payment:\n    max_concurrent: -3\n"
	_, err := Parse("payments.yaml", []byte(src))
	if err == nil || err.Error() != "payments.yaml:13: bulkheads.payment.max_concurrent: must be > 0, got -3" {
		t.Fatalf("got %v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.File != "payments.yaml" || e.Line != 13 || e.Path != "bulkheads.payment.max_concurrent" || e.Msg != "must be > 0, got -3" {
		t.Errorf("Error %+v", e)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"unknown field with a suggestion", yamlLines(
			"bulkheads:",
			"  payment:",
			"    max_concurent: 3",
		), []string{"test.yaml:3: bulkheads.payment.max_concurent: unknown field (did you mean max_concurrent?)"}},
		{"unknown field, nothing close", yamlLines(
			"timeouts:",
			"  t: {color: red}",
		), []string{"test.yaml:2: timeouts.t.color: unknown field (fields: timeout, abandon)"}},
		{"unknown section", yamlLines(
			"breaker:",
			"  a: {}",
		), []string{"test.yaml:1: breaker: unknown section (did you mean breakers?)"}},
		{"unknown defaults section", yamlLines(
			"defaults:",
			"  retry: {max_attempts: 2}",
		), []string{"test.yaml:2: defaults.retry: unknown section (did you mean retries?)"}},
		{"explicit zero that would mean the default", yamlLines(
			"breakers:",
			"  a: {window_size: 0, min_calls: 0, consecutive_failures: 0, half_open_successes: 0}",
		), []string{
			"test.yaml:2: breakers.a.window_size: must be > 0, got 0",
			"test.yaml:2: breakers.a.min_calls: must be > 0, got 0",
			"test.yaml:2: breakers.a.consecutive_failures: must be > 0 or off, got 0",
			"test.yaml:2: breakers.a.half_open_successes: must be > 0 or off, got 0",
		}},
		{"the trip rules' own rules", yamlLines(
			"breakers:",
			"  a: {window_size: 5, min_calls: 5, failure_count_threshold: 6}",
			"  b: {half_open_calls: 2, half_open_successes: 3}",
			"  c: {window_size: 5, failure_rate_threshold: off, slow_call_duration: 1s}",
			"  d: {consecutive_failures: -1, failure_rate_threshold: on}",
		), []string{
			"test.yaml:2: breakers.a.failure_count_threshold: must be <= window_size (5), or the window could never hold that many failures, got 6",
			"test.yaml:3: breakers.b.half_open_successes: must be <= half_open_calls (2), or the trials could never close the breaker, got 3",
			"test.yaml:4: breakers.c.window_size: must be >= min_calls (20), or the rates could never trip the breaker (a negative failure_rate_threshold turns the rate rule off), got 5",
			"test.yaml:5: breakers.d.consecutive_failures: must be > 0 or off, got -1",
			`test.yaml:5: breakers.d.failure_rate_threshold: must be a fraction such as 0.5 or a percentage such as "50%", got "on"`,
		}},
		{"a bare number for a duration", yamlLines(
			"breakers:",
			"  a:",
			"    open_duration: 250",
		), []string{`test.yaml:3: breakers.a.open_duration: must be a duration such as "250ms" or "1m30s", got 250`}},
		{"a bad duration", yamlLines(
			"bulkheads:",
			"  a:",
			"    max_wait: soon",
		), []string{`test.yaml:3: bulkheads.a.max_wait: must be a duration such as "250ms" or "1m30s" or unlimited, got "soon"`}},
		{"a negative duration", yamlLines(
			"timeouts:",
			"  a: {timeout: -1s}",
		), []string{`test.yaml:2: timeouts.a.timeout: must be > 0 or off, got "-1s"`}},
		{"a rate of 50 means 50%?", yamlLines(
			"breakers:",
			"  a:",
			"    failure_rate_threshold: 50",
		), []string{`test.yaml:3: breakers.a.failure_rate_threshold: must be a fraction of 1 (0.5) or a percentage ("50%"), got 50: write "50%" for a percentage`}},
		{"rates out of range", yamlLines(
			"breakers:",
			"  a: {failure_rate_threshold: 0, slow_call_duration: 1s, slow_call_rate_threshold: 120%, open_jitter: 1}",
			"budgets:",
			"  b: {ratio: '0%'}",
		), []string{
			`test.yaml:2: breakers.a.failure_rate_threshold: must be in (0, 1] (a fraction, or a percentage such as "50%"), got 0; write off to turn the rule off`,
			`test.yaml:2: breakers.a.slow_call_rate_threshold: must be in (0, 1] (a fraction, or a percentage such as "50%"), got "120%"`,
			`test.yaml:2: breakers.a.open_jitter: must be in [0, 1) (a fraction, or a percentage such as "50%"), got 1`,
			`test.yaml:4: budgets.b.ratio: must be in [1e-06, 1] (a fraction, or a percentage such as "50%"), got "0%"`,
		}},
		{"not a rate", yamlLines(
			"breakers:",
			"  a: {failure_rate_threshold: 'half', slow_call_rate_threshold: 'NaN%', slow_call_duration: 1s}",
		), []string{
			`test.yaml:2: breakers.a.failure_rate_threshold: must be a fraction such as 0.5 or a percentage such as "50%", got "half"`,
			`test.yaml:2: breakers.a.slow_call_rate_threshold: must be a fraction such as 0.5 or a percentage such as "50%", got "NaN%"`,
		}},
		{"types", yamlLines(
			"breakers:",
			"  a:",
			"    window_size: 2.5",
			"    count_saturation: yes",
			"    window_type: sliding",
			"    half_open_calls: [1]",
			"    open_duration_multiplier: .inf",
			"    max_keys: lots",
		), []string{
			"test.yaml:3: breakers.a.window_size: must be an integer, got 2.5",
			`test.yaml:4: breakers.a.count_saturation: must be true or false, got "yes"`,
			`test.yaml:5: breakers.a.window_type: must be one of count, time, got "sliding"`,
			"test.yaml:6: breakers.a.half_open_calls: must be an integer, got a list",
			"test.yaml:7: breakers.a.open_duration_multiplier: must be a number, got .inf",
			`test.yaml:8: breakers.a.max_keys: must be an integer or unlimited, got "lots"`,
		}},
		{"bounds", yamlLines(
			"bulkheads:",
			"  a: {max_concurrent: 9999999999}",
			"budgets:",
			"  b: {max_tokens: 2000000000, min_per_second: 0}",
			"breakers:",
			"  c: {open_duration_multiplier: 0.5}",
		), []string{
			"test.yaml:2: bulkheads.a.max_concurrent: must be <= 8388608, got 9999999999",
			"test.yaml:4: budgets.b.max_tokens: must be <= 1000000000, got 2000000000",
			"test.yaml:4: budgets.b.min_per_second: must be > 0 or off, got 0",
			"test.yaml:6: breakers.c.open_duration_multiplier: must be >= 1, got 0.5",
		}},
		{"the package's own rules, in YAML keys", yamlLines(
			"breakers:",
			"  a:",
			"    min_calls: 50",
			"    window_size: 10",
			"  b:",
			"    open_duration: 1m",
			"    max_open_duration: 30s",
			"retries:",
			"  r:",
			"    backoff: {base: 1s, cap: 500ms}",
			"  s:",
			"    backoff: {base: 20s}",
		), []string{
			"test.yaml:4: breakers.a.window_size: must be >= min_calls (50), or the rates could never trip the breaker (a negative failure_rate_threshold turns the rate rule off), got 10",
			"test.yaml:7: breakers.b.max_open_duration: must be >= open_duration (1m0s), got 30s",
			"test.yaml:10: retries.r.backoff.cap: must be >= base (1s), got 500ms",
			"test.yaml:11: retries.s.backoff.cap: must be >= base (20s), got 10s (the default)",
		}},
		{"fields that would have no effect", yamlLines(
			"breakers:",
			"  a:",
			"    window_type: time",
			"    window_size: 10",
			"  b:",
			"    window_buckets: 5",
			"    slow_call_rate_threshold: 50%",
			"retries:",
			"  r:",
			"    max_attempts: 1",
			"    max_delay: 1s",
			"  s:",
			"    backoff: {jitter: decorrelated, multiplier: 3}",
			"timeouts:",
			"  t: {timeout: off, abandon: true}",
		), []string{
			"test.yaml:4: breakers.a.window_size: applies only to window_type: count (this breaker's window_type is time)",
			"test.yaml:6: breakers.b.window_buckets: applies only to window_type: time (this breaker's window_type is count)",
			"test.yaml:7: breakers.b.slow_call_rate_threshold: has no effect without slow_call_duration",
			"test.yaml:11: retries.r.max_delay: has no effect with max_attempts: 1 (no retries)",
			"test.yaml:13: retries.s.backoff.multiplier: has no effect with jitter: decorrelated",
			"test.yaml:15: timeouts.t.abandon: has no effect with timeout: off",
		}},
		{"budget references", yamlLines(
			"defaults:",
			"  retries: {budget: common}",
			"retries:",
			"  a: {}",
			"  b: {budget: nosuch}",
			"budgets:",
			"  shared: {}",
		), []string{
			`test.yaml:2: defaults.retries.budget: no budget named "common" (budgets: shared)`,
			`test.yaml:5: retries.b.budget: no budget named "nosuch" (budgets: shared)`,
		}},
		{"duplicate keys and bad names", yamlLines(
			"bulkheads:",
			"  a: {max_concurrent: 1}",
			"  a: {max_concurrent: 2}",
			"  b.c: {}",
			"  ' ': {}",
			"  d:",
			"    max_wait: 1s",
			"    max_wait: 2s",
		), []string{
			"test.yaml:3: bulkheads.a: duplicate key (first at line 2)",
			"test.yaml:4: bulkheads.b.c: invalid name: names must not be blank, contain dots or control characters, or be longer than 200 bytes",
			"test.yaml:5: bulkheads. : invalid name: names must not be blank, contain dots or control characters, or be longer than 200 bytes",
			"test.yaml:8: bulkheads.d.max_wait: duplicate key (first at line 7)",
		}},
		{"shapes", yamlLines(
			"breakers: [a, b]",
			"bulkheads:",
			"  a: 5",
			"defaults: 3",
		), []string{
			"test.yaml:1: breakers: must be a mapping of keys to values, got a list",
			"test.yaml:3: bulkheads.a: must be a mapping of keys to values, got 5",
			"test.yaml:4: defaults: must be a mapping of keys to values, got 3",
		}},
		{"not a mapping at the top", "- breakers\n", []string{
			"test.yaml:1: the file must be a mapping with the sections defaults, breakers, bulkheads, retries, budgets, concurrency_budgets, timeouts, hedges, limiters; got a list",
		}},
		{"hedges", yamlLines(
			"hedges:",
			"  fixed: {percentile: off}",
			"  unused: {percentile: 0, delay: 5ms, window: 1s, min_samples: 10}",
			"  nofloor: {min_delay: 0s}",
			"  range: {percentile: 1, max_hedges: 17, overload_cooldown: 0s}",
			"  refs: {budget: b, breaker: c, bulkhead: d}",
		), []string{
			"test.yaml:2: hedges.fixed.delay: must be set with percentile: off (the fixed delay)",
			"test.yaml:3: hedges.unused.min_samples: has no effect with percentile: off (a fixed delay)",
			"test.yaml:3: hedges.unused.window: has no effect with percentile: off (a fixed delay)",
			"test.yaml:4: hedges.nofloor.min_delay: must be > 0 with a percentile unless delay is set: it is the delay until min_samples latencies are known, got 0s",
			`test.yaml:5: hedges.range.percentile: must be in [0, 1) (a fraction, or a percentage such as "50%") or off, got 1`,
			"test.yaml:5: hedges.range.max_hedges: must be <= 16 or off, got 17",
			`test.yaml:5: hedges.range.overload_cooldown: must be > 0 or off, got "0s"`,
			`test.yaml:6: hedges.refs.budget: no budget named "b" (budgets: none)`,
			`test.yaml:6: hedges.refs.breaker: no breaker named "c" (breakers: none)`,
			`test.yaml:6: hedges.refs.bulkhead: no bulkhead named "d" (bulkheads: none)`,
		}},
		{"syntax error", yamlLines(
			"breakers:",
			"  a: {window_size: 10",
			"bulkheads: {}",
		), []string{"test.yaml:2: invalid YAML: did not find expected ',' or '}'"}},
		{"two documents", yamlLines(
			"breakers: {}",
			"---",
			"bulkheads: {}",
		), []string{"test.yaml:2: invalid YAML: the file holds more than one document (---): put every section in one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseErrs(t, tc.src)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// Every error is reported, in the order of the file, not just the first.
func TestAllErrorsInFileOrder(t *testing.T) {
	src := yamlLines(
		"timeouts:",
		"  t: {timeout: soon}", // 2
		"breakers:",
		"  a: {window_size: -1}", // 4
		"  b: {min_calls: x}",    // 5
		"bulkheads:",
		"  c: {max_concurrent: 0}", // 7
		"defaults:",
		"  retries: {max_attempts: 0}", // 9
	)
	got := parseErrs(t, src)
	if len(got) != 5 {
		t.Fatalf("%d errors, want 5:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i, line := range []string{":2:", ":4:", ":5:", ":7:", ":9:"} {
		if !strings.Contains(got[i], line) {
			t.Errorf("error %d is %q, want line %s", i, got[i], line)
		}
	}
}

// A problem in the defaults is reported once, in the defaults, not again
// for every instance that inherits it.
func TestDefaultsErrorsOnce(t *testing.T) {
	got := parseErrs(t, yamlLines(
		"defaults:",
		"  breakers:",
		"    window_size: 10",
		"    min_calls: 0",
		"breakers:",
		"  a: {}",
		"  b: {}",
		"  c: {min_calls: 5}",
	))
	want := []string{"test.yaml:4: defaults.breakers.min_calls: must be > 0, got 0"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	got = parseErrs(t, yamlLines(
		"defaults:",
		"  breakers:",
		"    window_size: 10",
		"breakers:",
		"  a: {}",
		"  b: {}",
		"  c: {min_calls: 5}",    // fine: 10 >= 5
		"  d: {min_calls: 15}",   // not fine, and not the defaults' problem
		"  e: {window_size: 30}", // fine
	))
	want = []string{
		"test.yaml:3: defaults.breakers.window_size: must be >= min_calls (20), or the rates could never trip the breaker (a negative failure_rate_threshold turns the rate rule off), got 10",
		"test.yaml:3: breakers.d.window_size: must be >= min_calls (15), or the rates could never trip the breaker (a negative failure_rate_threshold turns the rate rule off), got 10",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A field from the defaults that does not apply to an instance which chose
// otherwise itself is not an error: the defaults serve the others.
func TestInheritedFieldWithoutEffect(t *testing.T) {
	f := mustParse(t, yamlLines(
		"defaults:",
		"  breakers: {window_size: 50, min_calls: 10}",
		"  retries: {budget: b, backoff: {multiplier: 3}}",
		"breakers:",
		"  counted: {}",
		"  timed: {window_type: time, window_duration: 10s}",
		"retries:",
		"  once: {max_attempts: 1}",
		"  decorrelated: {backoff: {jitter: decorrelated}}",
		"budgets:",
		"  b: {}",
	))
	if f.Breakers["counted"].Config.WindowSize != 50 {
		t.Errorf("counted %+v", f.Breakers["counted"].Config)
	}
	// Fields without effect are reset to the defaults, so that changing
	// them changes nothing.
	if got := f.Breakers["timed"].Config.WindowSize; got != circuit.DefaultWindowSize {
		t.Errorf("timed window_size %d", got)
	}
	if r := f.Retries["once"]; r.Budget != "" || !reflect.DeepEqual(r.Backoff, backoff.DefaultConfig()) {
		t.Errorf("once %+v", r)
	}
	if m := f.Retries["decorrelated"].Backoff.Multiplier; m != backoff.DefaultMultiplier {
		t.Errorf("decorrelated multiplier %v", m)
	}
}

func TestKeywordsAndRates(t *testing.T) {
	f := mustParse(t, yamlLines(
		"breakers:",
		"  a:",
		"    failure_rate_threshold: 0.29",
		"    slow_call_duration: off",
		"    max_half_open_wait: unlimited",
		"    max_keys: unlimited",
		"    open_jitter: 10%",
		"  b:",
		"    failure_rate_threshold: 1",
		"    slow_call_duration: 1s",
		"    slow_call_rate_threshold: \"33.3%\"",
		"bulkheads:",
		"  a: {max_wait: unlimited, max_keys: 3}",
		"  b: {max_wait: 0}",
		"budgets:",
		"  a: {ratio: 0.25, min_per_second: off}",
		"  b: {ratio: '0.5%', min_per_second: 0.5}",
		"timeouts:",
		"  a: {timeout: off}",
		"  b: {timeout: 1m30s, abandon: true}",
	))
	a := f.Breakers["a"].Config
	if a.FailureRateThreshold != 29 || a.SlowCallDuration != 0 || a.MaxHalfOpenWait >= 0 || a.OpenJitter != 0.1 || f.Breakers["a"].MaxKeys != -1 {
		t.Errorf("a %+v", a)
	}
	b := f.Breakers["b"].Config
	if b.FailureRateThreshold != 100 || b.SlowCallDuration != time.Second || b.SlowCallRateThreshold != 33.3 {
		t.Errorf("b %+v", b)
	}
	if k := f.Bulkheads["a"]; k.Config.MaxWait >= 0 || k.MaxKeys != 3 {
		t.Errorf("bulkhead a %+v", k)
	}
	if k := f.Bulkheads["b"]; k.Config.MaxWait != 0 {
		t.Errorf("bulkhead b %+v", k)
	}
	if c := f.Budgets["a"].Config; c.Ratio != 0.25 || c.MinPerSecond >= 0 {
		t.Errorf("budget a %+v", c)
	}
	if c := f.Budgets["b"].Config; c.Ratio != 0.005 || c.MinPerSecond != 0.5 {
		t.Errorf("budget b %+v", c)
	}
	if c := f.Timeouts["a"].Config; c.Timeout >= 0 {
		t.Errorf("timeout a %+v", c)
	}
	if c := f.Timeouts["b"].Config; c.Timeout != 90*time.Second || !c.Abandon {
		t.Errorf("timeout b %+v", c)
	}
	// The packages take these as they are.
	for _, b := range f.Breakers {
		if _, err := circuit.New(b.Config); err != nil {
			t.Error(err)
		}
	}
	for _, b := range f.Budgets {
		if _, err := budget.New(b.Config); err != nil {
			t.Error(err)
		}
	}
}

// Anchors, aliases and merge keys work, with the instance's own keys over
// the merged ones; top-level keys that start with x- are left alone, to
// hold anchors.
func TestAnchorsAndMergeKeys(t *testing.T) {
	f := mustParse(t, yamlLines(
		"x-small: &small {max_concurrent: 5, max_wait: 10ms}",
		"x-big: &big {max_concurrent: 50}",
		"x-n: &n 7",
		"bulkheads:",
		"  a: *small",
		"  b: {<<: *small, max_wait: 20ms}",
		"  c: {<<: [*big, *small]}",
		"  d: {max_concurrent: *n}",
	))
	want := map[string]bulkhead.Config{
		"a": {Name: "a", MaxConcurrent: 5, MaxWait: 10 * time.Millisecond},
		"b": {Name: "b", MaxConcurrent: 5, MaxWait: 20 * time.Millisecond},
		"c": {Name: "c", MaxConcurrent: 50, MaxWait: 10 * time.Millisecond},
		"d": {Name: "d", MaxConcurrent: 7},
	}
	for n, w := range want {
		if got := f.Bulkheads[n].Config; !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %+v, want %+v", n, got, w)
		}
	}
	// An error in an anchored mapping points at the anchor.
	got := parseErrs(t, yamlLines(
		"x-bad: &bad",
		"  max_concurrent: -1",
		"bulkheads:",
		"  a: {<<: *bad}",
		"  b: {<<: 3}",
	))
	wantErrs := []string{
		"test.yaml:2: bulkheads.a.max_concurrent: must be > 0, got -1",
		"test.yaml:5: bulkheads.b: a merge key (<<) takes a mapping or a list of mappings, got 3",
	}
	if !slices.Equal(got, wantErrs) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantErrs, "\n"))
	}
}

// An alias bomb is refused quickly rather than expanded: merge keys
// nest at most maxMergeDepth deep, and the pairs visited are bounded.
func TestAliasBomb(t *testing.T) {
	build := func(levels, instances int) string {
		var b strings.Builder
		b.WriteString("x-0: &a0 {max_concurrent: 1}\n")
		for i := 1; i <= levels; i++ {
			b.WriteString("x-" + itoa(i) + ": &a" + itoa(i) + " {<<: [")
			for j := 0; j < 10; j++ {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString("*a" + itoa(i-1))
			}
			b.WriteString("]}\n")
		}
		b.WriteString("bulkheads:\n")
		for i := 0; i < instances; i++ {
			b.WriteString("  b" + itoa(i) + ": {<<: *a" + itoa(levels) + "}\n")
		}
		return b.String()
	}
	for _, tc := range []struct {
		levels, instances int
		want              string
	}{
		{30, 1, "merge keys (<<) nested more than 4 deep"},
		{3, 300, "the file expands to more than 200000 keys through aliases and merges"},
	} {
		start := time.Now()
		_, err := Parse("bomb.yaml", []byte(build(tc.levels, tc.instances)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d levels, %d instances: got %.300v", tc.levels, tc.instances, err)
		}
		if d := time.Since(start); d > time.Minute { // expanding it would take forever
			t.Errorf("took %v", d)
		}
	}
	// Within the bounds, merges nest.
	f := mustParse(t, build(3, 2))
	if f.Bulkheads["b1"].Config.MaxConcurrent != 1 {
		t.Errorf("%+v", f.Bulkheads["b1"])
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// JSON parses through the same path, with its lines, tabs or spaces.
func TestJSON(t *testing.T) {
	src := "{\n\t\"bulkheads\": {\n\t\t\"payment\": {\n\t\t\t\"max_concurrent\": -3,\n\t\t\t\"max_wait\": 5\n\t\t}\n\t},\n  \"breakers\": {\"a\": {\"failure_rate_threshold\": \"50%\", \"typo\": 1}}\n}\n"
	_, err := Parse("p.json", []byte(src))
	want := []string{
		"p.json:4: bulkheads.payment.max_concurrent: must be > 0, got -3",
		`p.json:5: bulkheads.payment.max_wait: must be a duration such as "250ms" or "1m30s" or unlimited, got 5`,
		"p.json:8: breakers.a.typo: unknown field (fields: " + strings.Join(fieldKeys(breakerFields), ", ") + ")",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}

	// The example, turned into JSON, resolves to the same instances.
	y, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(y, &m); err != nil {
		t.Fatal(err)
	}
	j, err := json.MarshalIndent(m, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	fy, err := Parse("example.yaml", y)
	if err != nil {
		t.Fatal(err)
	}
	fj, err := Parse("example.json", j)
	if err != nil {
		t.Fatalf("%v\n%s", err, j)
	}
	if !sameValues(fy, fj) {
		t.Errorf("JSON and YAML differ:\n%+v\n%+v", strip(fy), strip(fj))
	}
	jf := filepath.Join(t.TempDir(), "x.json")
	if err := os.WriteFile(jf, j, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(jf); err != nil {
		t.Error(err)
	}
}

func fieldKeys[T any](fs []field[T]) []string {
	var ks []string
	for _, f := range fs {
		ks = append(ks, f.key)
	}
	return ks
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("got %v", err)
	}
}

// Write's output is a valid file that resolves to the same instances,
// and says where each value came from.
func TestWriteRoundTrip(t *testing.T) {
	f, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := written(t, f)
	g, err := Parse("resolved.yaml", []byte(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !sameValues(f, g) {
		t.Errorf("round trip differs:\n%s", out)
	}
	for _, want := range []string{
		"# testdata/example.yaml: 14 instances: every field as it resolves.",
		"  payment:                           # line 21",
		"    window_size: 50                  # line 23",
		`    failure_rate_threshold: "50%"    # defaults, line 6`,
		"    max_open_duration: 1m40s         # default",
		"    budget: shared                   # defaults, line 12",
		"      base: 100ms                    # line 48",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Fields without effect, inherited from the defaults, are noted.
	h := mustParse(t, yamlLines(
		"defaults:",
		"  breakers: {window_size: 50}",
		"breakers:",
		"  t: {window_type: time}",
		"retries:",
		"  once: {max_attempts: 1}",
		"  plain: {}",
		"budgets:",
		"  'yes': {min_per_second: off}",
		"timeouts:",
		"  off: {timeout: off}",
		"bulkheads:",
		"  u: {max_wait: unlimited, max_keys: unlimited}",
	))
	out = written(t, h)
	for _, want := range []string{
		"    # window_size: no effect, the window is time-based (defaults, line 2)",
		"    # budget: none",
		`  "yes":`,
		"    min_per_second: off",
		"    timeout: off",
		"    max_wait: unlimited",
		"    max_keys: unlimited",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	g, err = Parse("resolved.yaml", []byte(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !sameValues(h, g) {
		t.Errorf("round trip differs:\n%s", out)
	}
}

func TestDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Minute: "1m", time.Hour: "1h", 90 * time.Minute: "1h30m", 61 * time.Second: "1m1s",
		250 * time.Millisecond: "250ms", time.Hour + time.Second: "1h0m1s",
	} {
		if got := dur(d); got != want {
			t.Errorf("dur(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(dur(d)); err != nil || back != d {
			t.Errorf("%q does not parse back to %v", dur(d), d)
		}
	}
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"WindowSize": "window_size", "MaxHalfOpenWait": "max_half_open_wait", "Base": "base",
		"MinPerSecond": "min_per_second", "OpenDurationMultiplier": "open_duration_multiplier",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
	// Every field of each Config that a file can set is named by snake.
	for _, k := range fieldKeys(breakerFields) {
		if k == "max_keys" {
			continue
		}
		if !strings.Contains(strings.ToLower(snakeFields(circuit.Config{})), k) {
			t.Errorf("breaker field %s mirrors no circuit.Config field", k)
		}
	}
}

// snakeFields lists a struct's field names in snake_case.
func snakeFields(v any) string {
	t := reflect.TypeOf(v)
	var names []string
	for i := range t.NumField() {
		names = append(names, snake(t.Field(i).Name))
	}
	return strings.Join(names, " ")
}
