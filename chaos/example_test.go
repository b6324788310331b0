package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/chaos"
	"github.com/watertight-go/watertight/fallback"
)

// A game day: fail every call to the recommendations service and check that
// the fallback answers.
func Example() {
	inj, err := chaos.New(chaos.Config{
		Name:  "gameday",
		Rules: map[string]chaos.Rule{"recommendations": {ErrorRate: 1}},
	})
	if err != nil {
		panic(err)
	}
	pipeline := watertight.MustNew(inj.Policy("recommendations")) // innermost, next to the call
	chain, _ := fallback.New(fallback.Config{}, fallback.Default([]string{"bestsellers"}))
	recommend := func(ctx context.Context) ([]string, error) {
		return chain.Do(ctx, "user-1", func(ctx context.Context) ([]string, error) {
			return watertight.Do(ctx, pipeline, func(context.Context) ([]string, error) {
				return []string{"for you"}, nil
			})
		})
	}

	v, _ := recommend(context.Background())
	fmt.Println("off:", v)
	inj.Enable()
	v, _ = recommend(context.Background())
	fmt.Println("on: ", v)
	inj.Disable()
	fmt.Printf("injected %d errors\n", inj.Snapshot().Errors)
	// Output:
	// off: [for you]
	// on:  [bestsellers]
	// injected 1 errors
}

// Server side: answer the requests of one route with 503, switched on at
// run time. (A rate of 1 keeps the output fixed; a game day uses less.)
func ExampleHandler() {
	inj, _ := chaos.New(chaos.Config{})
	h := chaos.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), inj, nil)

	serve := func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/checkout", nil))
		fmt.Printf("%d %q\n", w.Code, w.Header().Get(chaos.HeaderInjected))
	}
	serve()
	inj.SetRule("GET /checkout", chaos.Rule{ErrorRate: 1})
	inj.Enable()
	serve()
	// Output:
	// 200 ""
	// 503 "error"
}

// Do can also replace a result: here, an empty answer.
func ExampleDo() {
	inj, _ := chaos.New(chaos.Config{
		Enabled: true,
		Rules:   map[string]chaos.Rule{"search": {ResultRate: 1, Result: []string{}}},
	})
	hits, err := chaos.Do(context.Background(), inj, "search", func(context.Context) ([]string, error) {
		return nil, errors.New("not reached")
	})
	fmt.Println(len(hits), err)
	// Output: 0 <nil>
}
