package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/contrib/watertightprom"
	"github.com/watertight-go/watertight/limit"
)

// State is the JSON view of the gateway's protections, served at /state
// on the admin listener.
type State struct {
	// Upstreams are the pools: their hosts (in flight, ejected and why)
	// and each host's breaker.
	Upstreams []UpstreamState `json:"upstreams"`
	// Routes are the routes: their bulkhead and retry budget.
	Routes []RouteState `json:"routes"`
	// Reloads counts the reloads done, Refused those refused (the old
	// configuration stayed); LastRefusal says why the last one was.
	Reloads     int64  `json:"reloads"`
	Refused     int64  `json:"reloads_refused"`
	LastRefusal string `json:"last_refusal,omitempty"`
}

// UpstreamState is one upstream in State.
type UpstreamState struct {
	Name     string           `json:"name"`
	Balance  balance.Snapshot `json:"balance"`
	Breakers []BreakerState   `json:"breakers,omitempty"`
}

// BreakerState is a host's breaker in State.
type BreakerState struct {
	Host  string `json:"host"`
	State string `json:"state"`
	// Reason is why it last changed state (the rule that tripped it).
	Reason string `json:"reason,omitempty"`
	Calls  int64  `json:"calls"`
}

// RouteState is one route in State.
type RouteState struct {
	Name     string             `json:"name"`
	Upstream string             `json:"upstream"`
	Bulkhead *bulkhead.Snapshot `json:"bulkhead,omitempty"`
	// Tenants are the route's tenants' shares (Route.Tenants).
	Tenants *bulkhead.PartitionedSnapshot `json:"tenants,omitempty"`
	// Limiter is the route's adaptive limiter (Route.Limiter).
	Limiter *limit.Snapshot  `json:"limiter,omitempty"`
	Budget  *budget.Snapshot `json:"retry_budget,omitempty"`
}

// State returns the state of every protection.
func (g *Gateway) State() State {
	t := g.tab.Load()
	s := State{Reloads: g.reloads.Load(), Refused: g.refused.Load()}
	if m := g.lastRefusal.Load(); m != nil {
		s.LastRefusal = *m
	}
	names := make([]string, 0, len(t.ups))
	for n := range t.ups {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		up := t.ups[n]
		us := UpstreamState{Name: n, Balance: up.bal.Snapshot()}
		if up.breakers != nil {
			for _, b := range up.breakers.Snapshots() {
				if slices.Contains(up.cfg.Hosts, b.Name) { // upstreams may share a registry
					us.Breakers = append(us.Breakers, breakerState(b))
				}
			}
			sort.Slice(us.Breakers, func(i, j int) bool { return us.Breakers[i].Host < us.Breakers[j].Host })
		}
		s.Upstreams = append(s.Upstreams, us)
	}
	for _, rt := range t.routes {
		rs := RouteState{Name: rt.cfg.Name, Upstream: rt.cfg.Upstream}
		if rt.bulk != nil {
			b := rt.bulk.Snapshot()
			rs.Bulkhead = &b
		}
		if rt.budget != nil {
			b := rt.budget.Snapshot()
			rs.Budget = &b
		}
		if rt.tenants != nil {
			p := rt.tenants.Snapshot()
			rs.Tenants = &p
		}
		if rt.limiter != nil {
			l := rt.limiter.Snapshot()
			rs.Limiter = &l
		}
		s.Routes = append(s.Routes, rs)
	}
	return s
}

func breakerState(b circuit.Snapshot) BreakerState {
	return BreakerState{Host: b.Name, State: b.State.String(), Reason: b.Reason, Calls: b.Calls}
}

// Admin returns the admin listener's handler: /metrics (Prometheus),
// /healthz (the process is up), /readyz (it serves: 503 while it starts
// and drains), /config (the effective configuration), /state (State as
// JSON), /dashboard/ (the live page of every breaker, bulkhead, budget
// and balancer: package dashboard) and /debug/pprof/ (Go's profiles). It
// is read-only.
func (g *Gateway) Admin() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", watertightprom.Handler(g.prom))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !g.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, r *http.Request) {
		cfg := g.tab.Load().cfg
		var lib bytes.Buffer
		if err := cfg.Library.Write(&lib); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, map[string]any{
			"listeners": cfg.Listeners, "admin": cfg.Admin,
			"upstreams": cfg.Upstreams, "routes": cfg.Routes,
			"library": lib.String(),
		})
	})
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, g.State())
	})
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", g.dash))
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Run listens on every listener of the Config and on the admin listener,
// and serves until ctx ends; then it stops taking connections, waits for
// the requests in flight (up to Options.DrainTimeout) and returns. It
// returns an error at once if a listener cannot listen.
func (g *Gateway) Run(ctx context.Context) error {
	type server struct {
		name string
		srv  *http.Server
		ln   net.Listener
		tls  bool
	}
	cfg := g.tab.Load().cfg
	var servers []server
	closeAll := func() {
		for _, s := range servers {
			s.ln.Close()
		}
	}
	names := make([]string, 0, len(cfg.Listeners))
	for n := range cfg.Listeners {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		l := cfg.Listeners[n]
		ln, err := net.Listen("tcp", l.Address)
		if err != nil {
			closeAll()
			return fmt.Errorf("gateway: listener %s: %w", n, err)
		}
		srv := &http.Server{
			Handler: g.Handler(n), ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout,
			MaxHeaderBytes: l.MaxHeaderBytes, ErrorLog: g.errorLog(),
		}
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetHTTP2(true)
		if l.TLSCert == "" {
			srv.Protocols.SetUnencryptedHTTP2(true) // h2c with prior knowledge
		}
		servers = append(servers, server{n, srv, ln, l.TLSCert != ""})
	}
	aln, err := net.Listen("tcp", cfg.Admin.Address)
	if err != nil {
		closeAll()
		return fmt.Errorf("gateway: admin listener: %w", err)
	}
	servers = append(servers, server{"admin", &http.Server{
		Handler: g.Admin(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second, ErrorLog: g.errorLog(),
	}, aln, false})
	errc := make(chan error, len(servers))
	for _, s := range servers {
		g.log.Info("listening", "listener", s.name, "address", s.ln.Addr().String())
		go func() {
			var err error
			if s.tls {
				l := cfg.Listeners[s.name]
				err = s.srv.ServeTLS(s.ln, l.TLSCert, l.TLSKey)
			} else {
				err = s.srv.Serve(s.ln)
			}
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- err
		}()
	}
	g.ready.Store(true)
	stopWatch := g.watch(ctx)
	var first error
	received := 0
	select {
	case <-ctx.Done():
	case first = <-errc:
		received++
	}
	stopWatch()
	g.ready.Store(false)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.DrainTimeout)
	defer cancel()
	// The public listeners drain together; the admin listener last, so
	// that /readyz says 503 while they do.
	var drain sync.WaitGroup
	errs := make([]error, len(servers))
	for i, s := range servers[:len(servers)-1] {
		drain.Go(func() { errs[i] = s.srv.Shutdown(dctx) })
	}
	drain.Wait()
	errs[len(servers)-1] = servers[len(servers)-1].srv.Shutdown(dctx)
	for i, err := range errs {
		if err != nil && first == nil {
			first = fmt.Errorf("gateway: draining %s: %w", servers[i].name, err)
		}
	}
	for ; received < len(servers); received++ {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	g.Close()
	return first
}

// watch reloads Options.ConfigPath on SIGHUP and when the file changes,
// until stop is called.
func (g *Gateway) watch(ctx context.Context) (stop func()) {
	path := g.opts.ConfigPath
	if path == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var tick <-chan time.Time
	if g.opts.WatchInterval > 0 {
		t := time.NewTicker(g.opts.WatchInterval)
		tick = t.C
		context.AfterFunc(ctx, t.Stop)
	}
	done := make(chan struct{})
	last := g.stamp // the file as New saw it: a change since then is a change
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				last = fileStamp(path)
				g.Reload(path)
			case <-tick:
				if st := fileStamp(path); st != last {
					last = st
					g.Reload(path)
				}
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}

// fileStamp is what tells a changed file: its size and modification time.
func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
}

func (g *Gateway) errorLog() *log.Logger {
	return slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)
}
