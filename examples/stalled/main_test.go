package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDescribe: the header says what the stall is — a latency, from when
// on — not "stalls at 3s", which reads as a time.
func TestDescribe(t *testing.T) {
	got := describe(20, 40, 3*time.Second, 3*time.Second, time.Second)
	for _, want := range []string{"from 500ms into each run every call to it takes 3s", "answers in 200ms", "20 shared workers", "40 req/s per route for 3s", "client deadline 1s"} {
		if !strings.Contains(got, want) {
			t.Errorf("header %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "stalls at") {
		t.Errorf("header %q still says \"stalls at\"", got)
	}
	if stallStart(6*time.Second) != time.Second {
		t.Error("the stall starts a sixth into the run")
	}
}
