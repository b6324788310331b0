package watertighthttp

import (
	"testing"
	"time"
)

func TestFormatGRPCTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Millisecond:               "1m",
		1500 * time.Microsecond:        "2m", // rounded up: never more time than is left
		3 * time.Second:                "3000m",
		99_999_999 * time.Millisecond:  "99999999m",
		100_000_000 * time.Millisecond: "100000S",
	} {
		if got := formatGRPCTimeout(d); got != want {
			t.Errorf("formatGRPCTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}
