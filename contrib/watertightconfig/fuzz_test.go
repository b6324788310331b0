package watertightconfig

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzParse: Parse never panics; an error is an Errors list naming the
// file, with a line on every error when the text is valid YAML; a valid
// file's resolved form (Write) parses back to the same instances, which
// every package accepts (NewRegistry builds them).
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(example),
		"",
		"{}",
		"breakers: {a: {}}",
		"bulkheads:\n  payment:\n    max_concurrent: -3\n",
		"defaults:\n  breakers: {window_size: 10}\nbreakers:\n  a: {min_calls: 5}\n  b: {}\n",
		"retries:\n  r: {budget: b, backoff: {jitter: decorrelated, base: 1s, cap: 2s}}\nbudgets:\n  b: {ratio: 50%, min_per_second: off}\n",
		"timeouts: {t: {timeout: off}, u: {timeout: 1h30m, abandon: true}}",
		"breakers: {a: {failure_rate_threshold: 50, slow_call_duration: 1s, slow_call_rate_threshold: '33.3%'}}",
		"breakers: {a: {window_type: time, window_duration: 1ns, window_buckets: 2}}",
		"x-a: &a {max_concurrent: 3}\nbulkheads: {p: {<<: *a, max_wait: unlimited}, q: *a}\n",
		"x-a: &a {<<: *a}\nbulkheads: {p: {<<: *a}}\n",
		"a: &x [*x]\n",
		"{\n\t\"breakers\": {\"a\": {\"min_calls\": 0, \"typo\": true}},\n\t\"budgets\": {\"b\": {\"ratio\": 0.1}}\n}\n",
		"{\"bulkheads\": {\"a\": {\"max_concurrent\": 1e3}}}",
		"breakers:\n  a: {window_size: 10\n",
		"- 1\n- 2\n",
		"breakers: 3",
		"breakers: {a: {}}\n---\nbulkheads: {}\n",
		"hedges: {h: {}}",
		"hedges: {h: {percentile: off, delay: 5ms, budget: b, window: 1s}, g: {percentile: 99.9%, min_delay: 0s, delay: 1ms, breaker: c}}\nbudgets: {b: {}}\nbreakers: {c: {}}",
		"bulkheads: {'<<': {max_concurrent: 2}, '': {}, 'a.b': {}}",
		"breakers: {a: {open_duration: 2562047h}}",
		"retries: {r: {max_attempts: 1, backoff: {base: 1s}}}",
		"budgets: {b: {ratio: 1e-4%}}",
		"breakers: {a: {failure_rate_threshold: 1e-12}}",
		"breakers: {a: {open_jitter: 0}, b: {open_jitter: 25%}, c: {}}",
		"limiters: {a: {algorithm: watertight, initial_limit: 5, min_limit: 2, max_limit: 9, max_wait: 10ms, max_waiters: 4, queue_order: newest_first, window_samples: 3, min_window: off, max_keys: unlimited}, b: {max_keys: 3}}",
		"bulkheads: {a: {max_wait: 1s, max_waiters: 3, queue_order: newest_first}, b: {max_waiters: unlimited, max_wait: unlimited}}",
		"retries: {a: {concurrency: c}}\nconcurrency_budgets: {c: {percent: 20%, min_concurrency: 0}, d: {percent: off, min_concurrency: 2}}",
		"breakers: {a: {consecutive_failures: 5, failure_rate_threshold: off, open_duration: 0s, half_open_calls: 2, half_open_successes: 2}}",
		"breakers: {a: {window_size: 5, min_calls: 5, failure_count_threshold: 3, half_open_successes: off}, b: {failure_count_threshold: 101}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("f.yaml", data)
		if err != nil {
			if file != nil {
				t.Fatal("a File with an error")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T is not a non-empty Errors: %v", err, err)
			}
			validYAML := isYAML(data)
			for _, e := range es {
				if e.File != "f.yaml" || e.Msg == "" {
					t.Fatalf("error without file or message: %+v", e)
				}
				if validYAML && e.Line <= 0 {
					t.Fatalf("error without a line in valid YAML: %v\n%q", e, data)
				}
			}
			return
		}
		var out bytes.Buffer
		if err := file.Write(&out); err != nil {
			t.Fatal(err)
		}
		again, err := Parse("resolved.yaml", out.Bytes())
		if err != nil {
			t.Fatalf("the resolved form does not parse: %v\n%s\nfrom %q", err, out.String(), data)
		}
		if !sameValues(file, again) {
			t.Fatalf("the resolved form resolves differently:\n%s\n%+v\n%+v", out.String(), strip(file), strip(again))
		}
		if _, err := NewRegistry(file, Options{}); err != nil {
			t.Fatalf("NewRegistry: %v\n%q", err, data)
		}
	})
}

// isYAML reports whether data is one well-formed YAML document (or none).
func isYAML(data []byte) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	var root yaml.Node
	return parseYAML(data, &root) == nil
}
