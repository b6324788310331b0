package lab

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/watertight-go/watertight/deadline"
)

// openLoop calls send(i) at at[i] after its start (at sorted), each call in
// a goroutine of its own, whatever the earlier calls are doing: an open-loop
// load, as the overload and tenants scenarios drive their servers. A
// generator that fell behind catches up at once. It returns once every call
// it started has returned: ctx's error if ctx ended before all were started.
func openLoop(ctx context.Context, at []time.Duration, send func(i int)) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	t0 := time.Now()
	for i, a := range at {
		if d := time.Until(t0.Add(a)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		wg.Go(func() { send(i) })
	}
	return nil
}

// deadlineGet is one client's GET of url that gives up after dl: the
// deadline goes on the wire through prop, with the header hdr (name, value;
// none if hdr[0] is ""). It returns the answer's status (0 without one), the
// latency, whether the client's context had ended by then (late), and the
// error of the request or of reading its body.
func deadlineGet(ctx context.Context, client *http.Client, prop *deadline.Propagator, url string, dl time.Duration, hdr [2]string) (status int, lat time.Duration, late bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, dl)
	defer cancel()
	t0 := time.Now()
	err = func() error {
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if hdr[0] != "" {
			req.Header.Set(hdr[0], hdr[1])
		}
		if err := prop.Inject(cctx, req.Header); err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		status = resp.StatusCode
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}()
	return status, time.Since(t0), cctx.Err() != nil, err
}
