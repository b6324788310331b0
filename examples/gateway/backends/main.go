// Command backends serves the example gateway's upstreams on 127.0.0.1:
// two catalog hosts (9001, 9002) and a recommendation service (9003)
// that stalls for ten seconds of every thirty, as a dependency does on a
// bad day, so that the gateway's timeout, bulkhead and fallback show.
//
//	go run ./examples/gateway/backends &
//	go run ./cmd/watertight proxy --config examples/gateway/gateway.yaml
//	curl -s 127.0.0.1:8080/catalog/items/1
//	curl -s 127.0.0.1:8080/recommendations
//	curl -s 127.0.0.1:9901/state
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	stallEvery := flag.Duration("stall-every", 30*time.Second, "recommendations stall for -stall-for at the start of every period of this length; 0 never")
	stallFor := flag.Duration("stall-for", 10*time.Second, "how long each stall lasts")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	stalled := func() bool {
		return *stallEvery > 0 && time.Since(start)%*stallEvery < *stallFor
	}
	servers := []struct {
		addr string
		h    http.Handler
	}{
		{"127.0.0.1:9001", catalog("catalog-1")},
		{"127.0.0.1:9002", catalog("catalog-2")},
		{"127.0.0.1:9003", recommendations(stalled)},
	}
	var wg sync.WaitGroup
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			log.Fatalf("backends: %v (is another copy running?)", err)
		}
		srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 5 * time.Second}
		log.Printf("backends: serving %s", s.addr)
		wg.Go(func() { srv.Serve(ln) })
		context.AfterFunc(ctx, func() { srv.Close() })
	}
	wg.Wait()
}

// catalog answers at once with the item and the host that served it.
func catalog(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"path\": %q, \"served_by\": %q}\n", r.URL.Path, name)
	})
}

// recommendations answers in 20 ms, or, while stalled, only when the
// caller gives up.
func recommendations(stalled func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wait := 20 * time.Millisecond
		if stalled() {
			wait = time.Hour
		}
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"items": ["a", "b", "c"]}`)
	})
}
