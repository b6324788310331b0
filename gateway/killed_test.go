package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// restartable is a server on 127.0.0.1 that can be killed and started
// again on the same address.
type restartable struct {
	addr string
	h    http.Handler
	mu   sync.Mutex
	srv  *http.Server
	done chan struct{}
}

func (s *restartable) start(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.srv = &http.Server{Handler: s.h}
	s.done = make(chan struct{})
	srv, done := s.srv, s.done
	s.mu.Unlock()
	go func() { srv.Serve(ln); close(done) }()
}

// kill closes the listener and every connection at once, as a crash does.
func (s *restartable) kill() {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.mu.Unlock()
	srv.Close()
	<-done
}

// An upstream killed mid-load: idempotent requests are retried on another
// host and all succeed, no POST without a key reaches a host twice, no
// request outlives the route's timeout, the host is ejected, and it comes
// back when it is up again.
func TestUpstreamKilledMidLoad(t *testing.T) {
	var posts sync.Map // id -> times received
	var hits [3]atomic.Int64
	servers := make([]*restartable, 3)
	var hostList []string
	for i := range servers {
		servers[i] = &restartable{addr: deadAddress(t), h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			if r.Method == http.MethodPost {
				id := r.Header.Get("X-Id")
				n, _ := posts.LoadOrStore(id, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
			time.Sleep(time.Millisecond) // some work, so that requests are in flight when it dies
			io.WriteString(w, "ok")
		})}
		servers[i].start(t)
		hostList = append(hostList, servers[i].addr)
	}
	defer func() {
		for _, s := range servers {
			s.kill()
		}
	}()
	g, srv := front(t, listener+fmt.Sprintf(`
upstreams:
  pool: {hosts: [%s], consecutive_errors: 3, base_ejection: 300ms, max_ejection: 1s, slow_factor: off}
routes:
  all: {upstream: pool, timeout: 1s}
`, strings.Join(hostList, ", ")))
	c := client(t)
	var stop atomic.Bool
	var getFail, postSent, postOK atomic.Int64
	var slowest atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				start := time.Now()
				method := http.MethodGet
				if i%4 == 0 {
					method = http.MethodPost
				}
				req, _ := http.NewRequest(method, srv.URL+"/x", nil)
				if method == http.MethodPost {
					req.Header.Set("X-Id", fmt.Sprintf("%d-%d", w, i))
					postSent.Add(1)
				}
				resp, err := c.Do(req)
				if d := time.Since(start); int64(d) > slowest.Load() {
					slowest.Store(int64(d))
				}
				if err != nil {
					if method == http.MethodGet {
						getFail.Add(1)
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case method == http.MethodPost && resp.StatusCode == 200:
					postOK.Add(1)
				case method == http.MethodGet && resp.StatusCode != 200:
					getFail.Add(1)
				}
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for i := 0; !cond(); i++ {
			if i > 1000 {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("never: %s; state %+v", what, g.State())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("load on every host", func() bool { return hits[0].Load() > 20 && hits[1].Load() > 20 && hits[2].Load() > 20 })
	servers[1].kill()
	waitFor("the killed host ejected", func() bool { return g.State().Upstreams[0].Balance.Hosts[1].Ejected })
	before := hits[1].Load()
	servers[1].start(t)
	waitFor("the host back and serving", func() bool { return hits[1].Load() > before+20 })
	stop.Store(true)
	wg.Wait()
	if n := getFail.Load(); n != 0 {
		t.Errorf("%d GETs failed: they should have been retried on another host", n)
	}
	posts.Range(func(id, n any) bool {
		if c := n.(*atomic.Int64).Load(); c > 1 {
			t.Errorf("POST %v reached the hosts %d times", id, c)
		}
		return true
	})
	if d := time.Duration(slowest.Load()); d > 1500*time.Millisecond {
		t.Errorf("a request took %v, beyond the route's timeout of 1s", d)
	}
	t.Logf("POSTs: %d sent, %d answered 200; slowest request %v", postSent.Load(), postOK.Load(), time.Duration(slowest.Load()))
}
