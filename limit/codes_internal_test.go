package limit

import (
	"context"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
)

// Each built-in algorithm has its code, which is also its Name; any other
// is CodeCustom.
func TestAlgorithmCodes(t *testing.T) {
	for _, c := range []struct {
		a    Algorithm
		code string
	}{
		{NewAIMD(AIMDOptions{}), CodeAIMD},
		{NewVegas(VegasOptions{}), CodeVegas},
		{NewGradient2(Gradient2Options{}), CodeGradient2},
		{NewDefault(DefaultOptions{}), CodeWatertight},
		{halver{}, CodeCustom},
	} {
		if got := algCode(c.a); got != c.code {
			t.Errorf("algCode(%s) = %q, want %q", c.a.Name(), got, c.code)
		}
		if c.code != CodeCustom && c.a.Name() != c.code {
			t.Errorf("%T: Name %q differs from its code %q", c.a, c.a.Name(), c.code)
		}
	}
}

// halver is an Algorithm of the caller's own: it halves the limit.
type halver struct{}

func (halver) Name() string            { return "halver" }
func (halver) Update(w Window) float64 { return float64(w.Limit) / 2 }

// The event of a change carries the code, and the algorithm's Name as Reason.
func TestLimitChangedCode(t *testing.T) {
	var got []watertight.Event
	l, err := New(Config{
		InitialLimit: 8, WindowSamples: 1, MinWindow: -1,
		Algorithm: func() Algorithm { return halver{} },
		Listener: watertight.ListenerFunc(func(e watertight.Event) {
			if e.Kind == watertight.EventLimitChanged {
				got = append(got, e)
			}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.Done(time.Millisecond)
	if len(got) != 1 || got[0].Code != CodeCustom || got[0].Reason != "halver" || got[0].Permits != 4 {
		t.Fatalf("events %+v, want one to 4 permits with Code %q and Reason %q", got, CodeCustom, "halver")
	}
}
