// Command rateload sends GETs at a fixed rate (open loop: a request is
// sent on time whether or not the earlier ones have been answered) for a
// duration, and prints the latency percentiles of the answers, measured
// from each request's scheduled time (so a client that falls behind shows
// as latency, not as a lower rate). bench/gateway/run.sh uses it for the
// latency a proxy adds at a given load, which wrk's closed loop cannot
// hold.
//
//	rateload -url http://127.0.0.1:9400/ -rate 15000 -d 10s
//
// Output, one line: sent=N ok=N errors=N p50_ms=X p99_ms=Y p999_ms=Z
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:9400/", "URL to GET")
	rate := flag.Float64("rate", 10000, "requests per second")
	d := flag.Duration("d", 10*time.Second, "how long to send")
	conc := flag.Int("max", 2048, "most requests in flight (then sending waits, which shows as latency)")
	flag.Parse()
	if *rate <= 0 {
		log.Fatal("rateload: -rate must be > 0")
	}
	tr := &http.Transport{MaxIdleConns: *conc, MaxIdleConnsPerHost: *conc, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	n := int(*rate * d.Seconds())
	lat := make([]time.Duration, n)
	ok := make([]bool, n)
	sem := make(chan struct{}, *conc)
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / *rate)
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := client.Get(*url)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok[i] = resp.StatusCode == http.StatusOK
			}
			lat[i] = time.Since(due)
		})
	}
	wg.Wait()
	var good []time.Duration
	for i, l := range lat {
		if ok[i] {
			good = append(good, l)
		}
	}
	slices.Sort(good)
	pct := func(p float64) float64 {
		if len(good) == 0 {
			return 0
		}
		return float64(good[min(len(good)-1, int(p*float64(len(good))))]) / 1e6
	}
	fmt.Printf("sent=%d ok=%d errors=%d p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f\n", n, len(good), n-len(good), pct(0.5), pct(0.99), pct(0.999))
}
