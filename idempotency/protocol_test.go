package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

func TestResolve(t *testing.T) {
	rec := &idempotency.Record{Fingerprint: "fp", Status: 201}
	marker := idempotency.UnknownRecord("fp")
	for _, tc := range []struct {
		c    idempotency.Claim
		want idempotency.Action
	}{
		{idempotency.Claim{State: idempotency.Claimed, Token: "1"}, idempotency.Run},
		{idempotency.Claim{State: idempotency.Completed, Record: rec}, idempotency.Replay},
		{idempotency.Claim{State: idempotency.Completed, Fingerprint: "other", Record: rec}, idempotency.Mismatch},
		{idempotency.Claim{State: idempotency.Completed, Record: &marker}, idempotency.AnswerUnknown},
		{idempotency.Claim{State: idempotency.Completed}, idempotency.Invalid},
		{idempotency.Claim{State: idempotency.InFlight, Fingerprint: "fp"}, idempotency.Wait},
		{idempotency.Claim{State: idempotency.InFlight, Fingerprint: "other"}, idempotency.Mismatch},
		{idempotency.Claim{State: idempotency.Unknown, Fingerprint: "fp"}, idempotency.AnswerUnknown},
		{idempotency.Claim{State: idempotency.Unknown}, idempotency.AnswerUnknown},
		{idempotency.Claim{State: idempotency.Unknown, Fingerprint: "other"}, idempotency.Mismatch},
		{idempotency.Claim{State: idempotency.Forgotten}, idempotency.AnswerForgotten},
		{idempotency.Claim{}, idempotency.Invalid},
	} {
		if got := idempotency.Resolve(tc.c, "fp"); got != tc.want {
			t.Errorf("Resolve(%+v) = %v, want %v", tc.c, got, tc.want)
		}
	}
	if idempotency.IsUnknownRecord(rec) || !idempotency.IsUnknownRecord(&marker) || idempotency.IsUnknownRecord(nil) {
		t.Fatal("IsUnknownRecord tells the marker from a result wrongly")
	}
}

// failingStore fails every Complete with err.
type failingStore struct {
	idempotency.Store
	err error
}

func (s failingStore) Complete(context.Context, string, string, idempotency.Record, time.Duration) error {
	return s.err
}

func TestSave(t *testing.T) {
	ctx := context.Background()
	small := newMemory(t, idempotency.MemoryConfig{MaxBytes: 1000}) // a small result fits, a 1000-byte body does not
	claim := func(s idempotency.Store, key string) string {
		c, err := s.Claim(ctx, key, "fp", time.Minute, time.Hour)
		if err != nil || c.State != idempotency.Claimed {
			t.Fatalf("Claim: %+v, %v", c, err)
		}
		return c.Token
	}
	state := func(key string) idempotency.Claim {
		c, _ := small.Claim(ctx, key, "fp", time.Minute, time.Hour)
		return c
	}
	// Stored as it is.
	rec := idempotency.Record{Fingerprint: "fp", Status: 201, Body: []byte("ok")}
	if got, err := idempotency.Save(ctx, small, "a", claim(small, "a"), "fp", &rec, time.Hour); got != idempotency.SavedResult || err != nil {
		t.Fatalf("Save of a small record = %v, %v", got, err)
	}
	if c := state("a"); idempotency.Resolve(c, "fp") != idempotency.Replay {
		t.Fatalf("after SavedResult: %+v", c)
	}
	// Refused as too large: the marker.
	big := idempotency.Record{Fingerprint: "fp", Status: 201, Body: make([]byte, 1000)}
	got, err := idempotency.Save(ctx, small, "b", claim(small, "b"), "fp", &big, time.Hour)
	if got != idempotency.SavedUnknown || !errors.Is(err, idempotency.ErrTooLarge) {
		t.Fatalf("Save of a record over MaxBytes = %v, %v; want SavedUnknown with ErrTooLarge", got, err)
	}
	if c := state("b"); idempotency.Resolve(c, "fp") != idempotency.AnswerUnknown {
		t.Fatalf("after SavedUnknown: %+v", c)
	}
	// Not kept by the adapter (nil): the marker.
	if got, err := idempotency.Save(ctx, small, "c", claim(small, "c"), "fp", nil, time.Hour); got != idempotency.SavedUnknown || err != nil {
		t.Fatalf("Save(nil) = %v, %v", got, err)
	}
	// The store fails: nothing saved, the claim left held.
	down := failingStore{Store: small, err: errors.New("connection refused")}
	tok := claim(small, "d")
	if got, err := idempotency.Save(ctx, down, "d", tok, "fp", &rec, time.Hour); got != idempotency.NotSaved || err == nil {
		t.Fatalf("Save on a failing store = %v, %v", got, err)
	}
	if c := state("d"); c.State != idempotency.InFlight {
		t.Fatalf("after NotSaved: %v, want the claim still held", c.State)
	}
	// The lock ended before: LockLost.
	gone := failingStore{Store: small, err: idempotency.ErrNotOwner}
	if got, _ := idempotency.Save(ctx, gone, "d", tok, "fp", &rec, time.Hour); got != idempotency.LockLost {
		t.Fatalf("Save after the lock ended = %v, want LockLost", got)
	}
}
