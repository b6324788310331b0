package retry_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/retry"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"120", 2 * time.Minute},
		{" 5 ", 5 * time.Second},
		{"Mon, 30 Nov 2026 12:00:30 GMT", 30 * time.Second},          // IMF-fixdate
		{"Monday, 30-Nov-26 12:01:00 GMT", time.Minute},              // RFC 850
		{"Mon Nov 30 12:00:10 2026", 10 * time.Second},               // asctime
		{"Sun, 06 Nov 1994 08:49:37 GMT", 0},                         // in the past
		{"99999999999999999999999999", time.Duration(math.MaxInt64)}, // clamped, never overflows
		{"1743412680", 1743412680 * time.Second},                     // go-retryablehttp's 484289h
	} {
		got, err := retry.ParseRetryAfter(tc.in, now)
		if err != nil || got != tc.want {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "  ", "-5", "1.5", "+3", "soon", "Mon, 30 Nov 2026 12:00:30 CET", "0x10"} {
		_, err := retry.ParseRetryAfter(bad, now)
		if !errors.Is(err, retry.ErrRetryAfterSyntax) {
			t.Errorf("ParseRetryAfter(%q) error %v, want ErrRetryAfterSyntax", bad, err)
		}
	}
	_, err := retry.ParseRetryAfter("soon", now)
	if !strings.Contains(err.Error(), `"soon"`) || !strings.Contains(err.Error(), "delay-seconds") {
		t.Errorf("error %q should quote the value and say what is expected", err)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "Mon, 30 Nov 2026 12:00:30 GMT", "Monday, 30-Nov-26 12:01:00 GMT",
		"Mon Nov 30 12:00:10 2026", "-1", "1e3", "99999999999999999999999", "", " 7 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := retry.ParseRetryAfter(s, now)
		if err != nil {
			if d != 0 || !errors.Is(err, retry.ErrRetryAfterSyntax) {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v", s, d, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v: negative", s, d)
		}
	})
}
