// Command gwbackend is the small backend of bench/gateway/run.sh: it
// answers every request at once with 13 bytes, keeping connections alive.
//
//	gwbackend -addr 127.0.0.1:9100
package main

import (
	"flag"
	"log"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9100", "address to listen on")
	flag.Parse()
	body := []byte("hello, world\n")
	srv := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Write(body)
		}),
	}
	log.Fatal(srv.ListenAndServe())
}
