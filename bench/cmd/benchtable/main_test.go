package main

import (
	"strings"
	"testing"
)

const input = `goos: linux
pkg: github.com/watertight-go/watertight/bench
BenchmarkBreakerOpen/watertight-2         	30098988	         8.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkBreakerOpen/gobreaker-2          	 2770200	        90 ns/op	       0 B/op	       0 allocs/op
BenchmarkBreakerOpen/watertight-2         	30098988	         6.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkBreakerOpen/gobreaker-2          	 2770200	        80 ns/op	       0 B/op	       0 allocs/op
BenchmarkBreakerOpen/watertight-2         	30098988	         7.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkBreakerOpen/gobreaker-2          	 2770200	        70 ns/op	       0 B/op	       0 allocs/op
BenchmarkBulkhead/x-sync-semaphore-2     	 7884186	        28.86 ns/op	       0 B/op	       0 allocs/op
BenchmarkBreakerClosed/hystrix-go-2         	--- FAIL: BenchmarkBreakerClosed/hystrix-go-2
PASS
`

func TestParseAndWrite(t *testing.T) {
	groups, err := parse(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[0].name != "BreakerOpen" || groups[1].name != "Bulkhead" {
		t.Fatalf("groups = %v", groups)
	}
	if got := groups[0].subs; len(got) != 2 || got[0] != "watertight" || got[1] != "gobreaker" {
		t.Fatalf("subs = %v", got)
	}
	if got := groups[1].subs; len(got) != 1 || got[0] != "x-sync-semaphore" {
		t.Fatalf("subs = %v (the -N suffix must go, the name's own dashes stay)", got)
	}
	var b strings.Builder
	write(&b, groups)
	out := b.String()
	for _, want := range []string{
		"| watertight | 7.00 | 0 | 0 | 3 | 1.00× |",
		"| gobreaker | 80.0 | 0 | 0 | 3 | 11.43× |",
		"| x-sync-semaphore | 28.9 | 0 | 0 | 1 | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{5, 1, 9}, 5}} {
		if got, ok := median(c.in); !ok || got != c.want {
			t.Errorf("median(%v) = %v, %v; want %v", c.in, got, ok, c.want)
		}
	}
	if _, ok := median(nil); ok {
		t.Error("median(nil) reported a value")
	}
}

func TestOverheadGroup(t *testing.T) {
	in := `BenchmarkGRPCUnaryOverhead/watertight-2   	    9070	    348422 ns/op	    169433 base-ns/call	         3.5 overhead-%	        -4.768 q1-%	        19.78 q3-%	    178237 wrapped-ns/call	   11368 B/op	     181 allocs/op
BenchmarkGRPCUnaryOverhead/watertight-2   	    9070	    348422 ns/op	    169433 base-ns/call	         2.5 overhead-%	        -4.768 q1-%	        19.78 q3-%	    178237 wrapped-ns/call	   11368 B/op	     181 allocs/op
BenchmarkGRPCUnaryOverhead/watertight-2   	    9070	    348422 ns/op	    169433 base-ns/call	         9 overhead-%	        -4.768 q1-%	        19.78 q3-%	    178237 wrapped-ns/call	   11368 B/op	     181 allocs/op
`
	groups, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	write(&b, groups)
	if want := "| watertight | 3.5 | 3 |"; !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
}

// A nested sub-benchmark is compared with watertight's of the same variant.
func TestNestedReference(t *testing.T) {
	in := `BenchmarkLimiter/watertight/sequential-2   	 100	        80 ns/op	       0 B/op	       0 allocs/op
BenchmarkLimiter/watertight/parallel-2     	 100	        64 ns/op	       0 B/op	       0 allocs/op
BenchmarkLimiter/failsafe-go/sequential-2  	 100	       200 ns/op	      96 B/op	       1 allocs/op
BenchmarkLimiter/failsafe-go/parallel-2    	 100	       256 ns/op	      96 B/op	       1 allocs/op
`
	groups, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	write(&b, groups)
	for _, want := range []string{
		"| watertight/parallel | 64.0 | 0 | 0 | 1 | 1.00× |",
		"| failsafe-go/sequential | 200 | 96 | 1 | 1 | 2.50× |",
		"| failsafe-go/parallel | 256 | 96 | 1 | 1 | 4.00× |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
