// Command plainproxy is bench/gateway/run.sh's baseline: a plain
// httputil.ReverseProxy to one upstream, with a buffer pool and a
// connection pool sized like the gateway's, and no protection at all.
//
//	plainproxy -addr 127.0.0.1:9200 -upstream 127.0.0.1:9100
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

type pool struct{ p sync.Pool }

func (b *pool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *pool) Put(s []byte) { b.p.Put(&s) }

func main() {
	addr := flag.String("addr", "127.0.0.1:9200", "address to listen on")
	up := flag.String("upstream", "127.0.0.1:9100", "host:port to proxy to")
	flag.Parse()
	u := &url.URL{Scheme: "http", Host: *up}
	bp := &pool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
		},
		BufferPool: bp,
	}
	srv := &http.Server{Addr: *addr, Handler: rp, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
