package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/watertight-go/watertight/idempotency"
)

// The server side of one keyed request, by hand: claim the key, run the
// operation once, store its result, and replay it for the retry. (The HTTP
// middleware, watertighthttp.Idempotency, does all of this.)
func Example() {
	store, _ := idempotency.NewMemoryStore(idempotency.DefaultMemoryConfig())
	ctx := context.Background()

	key, _ := idempotency.ParseKey(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	fp := idempotency.Fingerprint("POST", "/charges", []byte(`{"amount":100}`))

	charges := 0
	serve := func() string {
		c, err := store.Claim(ctx, "tenant-42/"+key, fp, 30*time.Second, time.Hour)
		if err != nil {
			return "503: store unavailable, safe to retry"
		}
		switch {
		case c.State == idempotency.InFlight:
			return "409: in flight"
		case c.Fingerprint != fp && c.State == idempotency.Completed:
			return "422: key reused for another request"
		case c.State == idempotency.Completed:
			return fmt.Sprintf("%d %s (replayed)", c.Record.Status, c.Record.Body)
		}
		charges++ // the operation, run once
		rec := idempotency.Record{Fingerprint: fp, Status: http.StatusCreated, Body: []byte(`{"id":"ch_1"}`), Created: time.Now()}
		if err := store.Complete(ctx, "tenant-42/"+key, c.Token, rec, 24*time.Hour); err != nil {
			_ = store.Release(ctx, "tenant-42/"+key, c.Token)
		}
		return fmt.Sprintf("%d %s", rec.Status, rec.Body)
	}

	fmt.Println(serve()) // the first attempt
	fmt.Println(serve()) // the client's retry: its response was lost
	fmt.Println("charges:", charges)
	// Output:
	// 201 {"id":"ch_1"}
	// 201 {"id":"ch_1"} (replayed)
	// charges: 1
}

// The header value of a key, and reading it back: the quoted form of the
// draft, and the bare form many clients send.
func ExampleParseKey() {
	for _, v := range []string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`,
		`8e03978e-40d5-43e8-bc93-6894a57f9324`,
		`"a", "b"`,
	} {
		k, err := idempotency.ParseKey(v)
		fmt.Printf("%q %v\n", k, err)
	}
	fmt.Println(idempotency.FormatKey(`order "42"`))
	// Output:
	// "8e03978e-40d5-43e8-bc93-6894a57f9324" <nil>
	// "8e03978e-40d5-43e8-bc93-6894a57f9324" <nil>
	// "" idempotency: Idempotency-Key is malformed: the value holds more than one item (a comma); send exactly one Idempotency-Key
	// "order \"42\""
}
