package sources_test

import (
	"testing"

	"github.com/watertight-go/watertight/contrib/internal/sources"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSetAddReplaceRemove(t *testing.T) {
	var set sources.Set
	a := &sources.Source{Name: "payments"}
	removeA := set.Add(sources.Circuit, a)
	set.Add(sources.Bulkhead, &sources.Source{Name: "payments"}) // another family: both kept
	if n := len(set.List()); n != 2 {
		t.Fatalf("%d sources, want 2", n)
	}
	b := &sources.Source{Name: "payments"}
	removeB := set.Add(sources.Circuit, b) // replaces a
	removeA()                              // a was replaced: nothing happens
	if n := len(set.List()); n != 2 {
		t.Fatalf("after a stale remove: %d sources, want 2", n)
	}
	removeB()
	for _, s := range set.List() {
		if s == b {
			t.Fatal("b still watched after its remove")
		}
	}
	if n := len(set.List()); n != 1 {
		t.Fatalf("%d sources, want 1", n)
	}
}
