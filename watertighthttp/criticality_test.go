package watertighthttp

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestParseCriticality(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Criticality
		ok   bool
	}{
		{"critical-plus", CriticalPlus, true},
		{"critical", Critical, true},
		{"sheddable-plus", SheddablePlus, true},
		{"sheddable", Sheddable, true},
		{" CRITICAL_PLUS ", CriticalPlus, true},
		{"Sheddable_Plus", SheddablePlus, true},
		{"", Critical, false},
		{"urgent", Critical, false},
		{"critical plus", Critical, false},
		{"sheddable-plus-plus", Critical, false},
	} {
		got, err := ParseCriticality(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseCriticality(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadCriticality) {
			t.Errorf("ParseCriticality(%q) error %v does not match ErrBadCriticality", tc.in, err)
		}
	}
}

func TestCriticalityOrderAndString(t *testing.T) {
	if !(Sheddable < SheddablePlus && SheddablePlus < Critical && Critical < CriticalPlus) {
		t.Fatal("criticalities are not ordered lowest first")
	}
	var zero Criticality
	if zero != Critical {
		t.Fatalf("zero Criticality = %v, want critical", zero)
	}
	for c, s := range map[Criticality]string{
		CriticalPlus: "critical-plus", Critical: "critical", SheddablePlus: "sheddable-plus",
		Sheddable: "sheddable", Criticality(42): "critical",
	} {
		if c.String() != s {
			t.Errorf("Criticality(%d).String() = %q, want %q", int(c), c.String(), s)
		}
	}
}

func TestCriticalityContext(t *testing.T) {
	ctx := context.Background()
	if c, ok := CriticalityFrom(ctx); ok || c != Critical {
		t.Fatalf("CriticalityFrom(empty) = %v, %v; want critical, false", c, ok)
	}
	ctx = WithCriticality(ctx, SheddablePlus)
	if c, ok := CriticalityFrom(ctx); !ok || c != SheddablePlus {
		t.Fatalf("CriticalityFrom = %v, %v; want sheddable-plus, true", c, ok)
	}
}

func FuzzParseCriticality(f *testing.F) {
	for _, s := range []string{"critical-plus", "critical", "sheddable-plus", "sheddable",
		"CRITICAL_PLUS", " critical ", "", "x", "critical\n", "\xff", strings.Repeat("a", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCriticality(s)
		if err != nil {
			if c != Critical || !errors.Is(err, ErrBadCriticality) {
				t.Fatalf("ParseCriticality(%q) = %v, %v: a failure must give critical and match ErrBadCriticality", s, c, err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error message of %q spans lines: %q", s, err.Error())
			}
			return
		}
		switch c {
		case CriticalPlus, Critical, SheddablePlus, Sheddable:
		default:
			t.Fatalf("ParseCriticality(%q) = %d, not a defined criticality", s, int(c))
		}
		if back, err := ParseCriticality(c.String()); err != nil || back != c {
			t.Fatalf("round trip of %v gave %v, %v", c, back, err)
		}
	})
}
