package watertightprom_test

import (
	"strings"
	"testing"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	watertightprom "github.com/watertight-go/watertight/contrib/watertightprom"
)

// FuzzOnEvent feeds events whose names, keys and reasons may hold any bytes
// (routes and hosts come from requests) and checks that a scrape still
// gathers, with each name appearing as a label value.
func FuzzOnEvent(f *testing.F) {
	f.Add(uint8(watertight.EventShed), "http", "api", "GET /items", "route full")
	f.Add(uint8(watertight.EventStateChange), "circuit", "hosts", "eu", "")
	f.Add(uint8(watertight.EventRetrySkipped), "retry", "p\xff", "k\xfe\xfd", "not enough time")
	f.Add(uint8(0), "", "", "", "")
	f.Add(uint8(200), "x\x00y", "\"quoted\"", "\\xff", "\n")
	f.Fuzz(func(t *testing.T, kind uint8, source, name, key, reason string) {
		c, err := watertightprom.NewCollector(watertightprom.Config{MaxEventSeries: 4})
		if err != nil {
			t.Fatal(err)
		}
		b, err := circuit.New(circuit.Config{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		c.AddBreaker(b)
		e := watertight.Event{Kind: watertight.EventKind(kind), Source: source, Name: name, Key: key, Reason: reason, From: reason, To: key}
		c.OnEvent(e)
		c.OnEvent(e)
		got := scrape(t, c) // fails the test if Gather fails
		n := 0.0
		for k, v := range got {
			if strings.HasPrefix(k, "watertight_events_total{") {
				n += v
			}
		}
		if n != 2 {
			t.Errorf("watertight_events_total adds up to %v, want 2", n)
		}
		found := false
		for k, v := range got {
			if strings.HasPrefix(k, "watertight_circuit_state{") && strings.Contains(k, `state="closed"`) && v == 1 {
				found = true
			}
		}
		if !found {
			t.Errorf("no closed state sample for breaker %q", name)
		}
	})
}
