package deadline_test

import (
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/deadline"
)

func FuzzParseMillis(f *testing.F) {
	for _, s := range []string{
		"0", "1", "250", "007", " 250 ", "\t5", "300000", "9223372036854", "9223372036855",
		"18446744073709551616", strings.Repeat("9", 40), "", " ", "-1", "+5", "1.5", "1e3", "1 0",
		"0x10", "250ms", "١٢", "\u00a0250", "\x00", "1_000",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := deadline.ParseMillis(v)
		if err != nil {
			if !errors.Is(err, deadline.ErrSyntax) || d != 0 {
				t.Fatalf("ParseMillis(%q) = %v, %v; want 0 and an ErrSyntax", v, d, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseMillis(%q) = %v < 0", v, d)
		}
		s := strings.Trim(v, " \t")
		n, perr := strconv.ParseUint(s, 10, 64)
		if perr != nil && !errors.Is(perr, strconv.ErrRange) {
			t.Fatalf("ParseMillis(%q) = %v, but strconv says %v", v, d, perr)
		}
		if perr == nil && n <= math.MaxInt64/uint64(time.Millisecond) {
			if d != time.Duration(n)*time.Millisecond {
				t.Fatalf("ParseMillis(%q) = %v, want %dms", v, d, n)
			}
			if back, err := deadline.ParseMillis(deadline.FormatMillis(d)); err != nil || back != d {
				t.Fatalf("round trip of %v: %v, %v", d, back, err)
			}
		} else if d != math.MaxInt64 {
			t.Fatalf("ParseMillis(%q) = %v, want the largest Duration", v, d)
		}
	})
}

func FuzzParseGRPCTimeout(f *testing.F) {
	for _, s := range []string{
		"1H", "2M", "5S", "100m", "250u", "999n", "0m", "00000001S", "99999999H", "99999999n",
		" 5S ", "", "S", "5", "123456789S", "-1S", "+1S", "1.5S", "5 S", "5s", "5ms", "５S",
	} {
		f.Add(s)
	}
	units := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second, 'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := deadline.ParseGRPCTimeout(v)
		if err != nil {
			if !errors.Is(err, deadline.ErrSyntax) || d != 0 {
				t.Fatalf("ParseGRPCTimeout(%q) = %v, %v; want 0 and an ErrSyntax", v, d, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseGRPCTimeout(%q) = %v < 0", v, d)
		}
		s := strings.Trim(v, " \t")
		if len(s) < 2 || len(s) > 9 {
			t.Fatalf("ParseGRPCTimeout(%q) accepted %d bytes", v, len(s))
		}
		unit, ok := units[s[len(s)-1]]
		if !ok {
			t.Fatalf("ParseGRPCTimeout(%q) accepted unit %q", v, s[len(s)-1])
		}
		num := s[:len(s)-1]
		if strings.ContainsAny(num, "+-_") {
			t.Fatalf("ParseGRPCTimeout(%q) accepted a sign or separator", v)
		}
		n, perr := strconv.ParseUint(num, 10, 64)
		if perr != nil {
			t.Fatalf("ParseGRPCTimeout(%q) = %v, but strconv says %v", v, d, perr)
		}
		want := time.Duration(math.MaxInt64)
		if n <= uint64(math.MaxInt64/int64(unit)) {
			want = time.Duration(n) * unit
		}
		if d != want {
			t.Fatalf("ParseGRPCTimeout(%q) = %v, want %v", v, d, want)
		}
	})
}

// FuzzIncoming reads our header, grpc-timeout and Envoy's, each given as
// lines separated by "\n" (a header given several times), each line a value
// or a comma-separated list, under a Max of its own; see checkIncoming.
func FuzzIncoming(f *testing.F) {
	f.Add("250", "", "", int64(0))
	f.Add("", "2S", "", int64(time.Second))
	f.Add("", "", "1500", int64(time.Minute))
	f.Add("-5", "1.5S", "250", int64(0))
	f.Add("99999999999999999999", "99999999H", "9223372036855", int64(time.Millisecond))
	f.Add("1.5", "123456789m", "x", int64(0))
	f.Add(" 0 ", "0n", "0", int64(1))
	// Several values: lines, lists, and both; malformed ones beside good.
	f.Add("5000\n50", "", "", int64(0))
	f.Add("5000, 50", "", "", int64(0))
	f.Add("5000,50\n700, x", "5S\n50m", "40", int64(0))
	f.Add(", ,", " , 1S ,", ",\n", int64(0))
	f.Add("soon, 5000", "1H, 2m", "-1,3", int64(time.Second))
	f.Fuzz(func(t *testing.T, ours, grpc, envoy string, max int64) {
		if max < 0 {
			max = -max
			if max < 0 {
				max = 0
			}
		}
		checkIncoming(t, time.Duration(max), map[string]string{
			deadline.DefaultHeader: ours, deadline.HeaderGRPCTimeout: grpc, deadline.HeaderEnvoyTimeout: envoy,
		})
	})
}

// FuzzIncomingShortest gives every header the parser reads, with the default
// Max: conflicting values never lengthen a deadline.
func FuzzIncomingShortest(f *testing.F) {
	f.Add("5000", "50m", "3000", "40")
	f.Add("5000\n50", "", "", "")
	f.Add("5000, 50", "5S, 1H", "", "")
	f.Add("", "", "5000,,50", "x, 7")
	f.Add("0", "1H", "", "99999999999999999999")
	f.Add("a\nb", "5\n5s", "-0", "1.0")
	f.Fuzz(func(t *testing.T, ours, grpc, envoy, upstream string) {
		checkIncoming(t, 0, map[string]string{
			deadline.DefaultHeader: ours, deadline.HeaderGRPCTimeout: grpc,
			deadline.HeaderEnvoyTimeout: envoy, deadline.HeaderEnvoyUpstreamTimeout: upstream,
		})
	})
}

// checkIncoming checks Incoming against a reference: every element of every
// line of every header is parsed alone, and the result is the shortest that
// parses, clamped to Max: never longer than any single well-formed value.
// Each malformed value is counted: each element that is not empty and does
// not parse, and each line that gives nothing to parse at all.
func checkIncoming(t *testing.T, max time.Duration, values map[string]string) {
	p, err := deadline.New(deadline.Config{Max: max, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	limit := p.Config().Max
	h := http.Header{}
	var want time.Duration
	var wantOK bool
	var malformed uint64
	for name, v := range values {
		if v == "" {
			continue
		}
		parse := deadline.ParseMillis
		if name == deadline.HeaderGRPCTimeout {
			parse = deadline.ParseGRPCTimeout
		}
		h[name] = strings.Split(v, "\n")
		for _, line := range h[name] {
			elems := strings.Split(line, ",")
			empty := 0
			for _, e := range elems {
				if strings.Trim(e, " \t") == "" && len(elems) > 1 {
					empty++
					continue
				}
				d, err := parse(e)
				if err != nil {
					malformed++
					continue
				}
				if d > limit {
					d = limit
				}
				if !wantOK || d < want {
					want, wantOK = d, true
				}
			}
			if empty == len(elems) {
				malformed++ // a list of nothing
			}
		}
	}
	d, ok := p.Incoming(h)
	if d < 0 || d > limit {
		t.Fatalf("Incoming(%q) = %v, outside [0, %v]", h, d, limit)
	}
	if d != want || ok != wantOK {
		t.Fatalf("Incoming(%q) = %v, %v; want the shortest value %v, %v", h, d, ok, want, wantOK)
	}
	if !ok && d != 0 {
		t.Fatalf("Incoming(%q) = %v with ok false", h, d)
	}
	if n := p.Warned(deadline.Malformed); n != malformed {
		t.Fatalf("Incoming(%q): Warned(Malformed) = %d, want %d", h, n, malformed)
	}
}
