package watertightprom

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns an http.Handler that serves the metrics of c, with those
// of the Go runtime and of the process, in the Prometheus exposition
// formats. It registers them with a registry of its own: to serve c with
// other metrics, register c with your registry and use promhttp instead.
// A metric that fails to gather is left out and the rest is served
// (promhttp.ContinueOnError).
func Handler(c *Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Server serves a Collector's metrics at /metrics; see Serve.
type Server struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

// Serve listens on addr (":9090", "127.0.0.1:0") and serves Handler(c) at
// /metrics in a goroutine of its own until Close. It returns once the
// listener is open, so that an address in use is reported here.
func Serve(addr string, c *Collector) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("watertightprom: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(c))
	s := &Server{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr: ln.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr returns the address the server listens on, with the port chosen
// when addr asked for port 0.
func (s *Server) Addr() string { return s.addr }

// URL returns the URL of the metrics page, "http://ADDR/metrics" (with
// 127.0.0.1 for an address that listens on every interface).
func (s *Server) URL() string {
	host, port, err := net.SplitHostPort(s.addr)
	if err == nil && (host == "" || net.ParseIP(host).IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics"
}

// Close stops the server: it stops listening, waits up to five seconds for
// scrapes in progress, then closes what is left, and returns when the
// serving goroutine has ended. It may be called more than once.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	<-s.done
	return err
}
