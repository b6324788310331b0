package deadline_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/watertight-go/watertight/deadline"
)

const maxDuration = time.Duration(math.MaxInt64)

func TestParseMillis(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"1", time.Millisecond},
		{"250", 250 * time.Millisecond},
		{"007", 7 * time.Millisecond},
		{" 250", 250 * time.Millisecond},
		{"250 ", 250 * time.Millisecond},
		{"\t250\t ", 250 * time.Millisecond},
		{"300000", 5 * time.Minute},
		{"9223372036854", 9223372036854 * time.Millisecond},     // the largest that fits
		{"9223372036855", maxDuration},                          // one more overflows: clamped
		{"99999999999999999999999999999999999999", maxDuration}, // beyond uint64: clamped
		{"18446744073709551615", maxDuration},
		{"18446744073709551616", maxDuration},
	} {
		got, err := deadline.ParseMillis(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseMillis(%q) = %v, %v; want %v, nil", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"", " ", "\t", "-1", "-0", "+5", "1.5", "1e3", "1 0", "0x10", "250ms", "ms",
		"abc", "1,000", "١٢", "\u00a0250", "250\n", "\x00", "1_000", strings.Repeat("9", 100) + "x",
	} {
		got, err := deadline.ParseMillis(in)
		if err == nil {
			t.Errorf("ParseMillis(%q) = %v, nil; want an error", in, got)
			continue
		}
		if !errors.Is(err, deadline.ErrSyntax) {
			t.Errorf("ParseMillis(%q) error %v does not wrap ErrSyntax", in, err)
		}
		if got != 0 {
			t.Errorf("ParseMillis(%q) = %v with an error, want 0", in, got)
		}
		if !strings.Contains(err.Error(), "milliseconds") {
			t.Errorf("ParseMillis(%q) error %q does not say what was expected", in, err)
		}
	}
}

func TestParseMillisErrorQuotesValue(t *testing.T) {
	_, err := deadline.ParseMillis("1.5")
	want := `deadline: malformed timeout value "1.5": want a non-negative integer of milliseconds (digits only)`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
	// A long value is cut in the message.
	_, err = deadline.ParseMillis(strings.Repeat("x", 10000))
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("err = %v (%d bytes), want a short message", err, len(err.Error()))
	}
}

func TestParseGRPCTimeout(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"1H", time.Hour},
		{"2M", 2 * time.Minute},
		{"5S", 5 * time.Second},
		{"100m", 100 * time.Millisecond},
		{"250u", 250 * time.Microsecond},
		{"999n", 999 * time.Nanosecond},
		{"0m", 0},
		{"0n", 0},
		{"00000001S", time.Second},
		{"99999999n", 99999999 * time.Nanosecond},
		{"99999999m", 99999999 * time.Millisecond},
		{"99999999M", 99999999 * time.Minute},
		{"99999999H", maxDuration}, // overflows a Duration: clamped
		{"2562047H", 2562047 * time.Hour},
		{"2562048H", maxDuration},
		{" 5S ", 5 * time.Second},
		{"\t5S", 5 * time.Second},
	} {
		got, err := deadline.ParseGRPCTimeout(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseGRPCTimeout(%q) = %v, %v; want %v, nil", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"", " ", "S", "m", "5", "100", "123456789S", "000000000m", "-1S", "+1S", "1.5S",
		"5 S", "5s", "5h", "5U", "5N", "5ms", "5Sx", "S5", "1e3m", "0x1S", "５S", "5\u00a0S",
	} {
		got, err := deadline.ParseGRPCTimeout(in)
		if err == nil {
			t.Errorf("ParseGRPCTimeout(%q) = %v, nil; want an error", in, got)
			continue
		}
		if !errors.Is(err, deadline.ErrSyntax) {
			t.Errorf("ParseGRPCTimeout(%q) error %v does not wrap ErrSyntax", in, err)
		}
		if !strings.Contains(err.Error(), "digits") {
			t.Errorf("ParseGRPCTimeout(%q) error %q does not say what was expected", in, err)
		}
	}
	_, err := deadline.ParseGRPCTimeout("123456789S")
	if want := `deadline: malformed timeout value "123456789S": want at most 8 digits before the unit`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestFormatMillis(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0"},
		{-time.Second, "0"},
		{time.Duration(math.MinInt64), "0"},
		{999 * time.Microsecond, "0"},
		{time.Millisecond, "1"},
		{1999 * time.Microsecond, "1"},
		{250 * time.Millisecond, "250"},
		{5 * time.Minute, "300000"},
		{maxDuration, "9223372036854"},
	} {
		if got := deadline.FormatMillis(tc.in); got != tc.want {
			t.Errorf("FormatMillis(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Round trip: what FormatMillis writes, ParseMillis reads back rounded
	// down to the millisecond.
	for _, d := range []time.Duration{0, time.Millisecond, 1234567 * time.Microsecond, time.Hour, maxDuration} {
		got, err := deadline.ParseMillis(deadline.FormatMillis(d))
		if err != nil || got != d.Truncate(time.Millisecond) {
			t.Errorf("ParseMillis(FormatMillis(%v)) = %v, %v", d, got, err)
		}
	}
}
