package watertighthttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/balance"
)

// balancedAttempt is a request's state across its attempts with a
// Balancer: the attempt state of an unbalanced request, and the host the
// last attempt went to, which the next one avoids.
type balancedAttempt struct {
	attempt
	orig  *http.Request
	host  *balance.Host
	shard balance.Shard // the request's shard of the pool (TransportConfig.ShardKey)
}

// roundTripBalanced is RoundTrip with TransportConfig.Balancer: the retry
// policy around the pick of a host and that host's protections.
func (t *Transport) roundTripBalanced(ctx context.Context, req *http.Request, total time.Time) (*http.Response, error) {
	p := t.outer
	pipe := p.choose(ctx, req)
	b := &balancedAttempt{attempt: attempt{t: t, req: req, total: total}, orig: req}
	b.shard = t.balancer.Shard(t.shardOf(req), t.shardCfg)
	resp, err := watertight.Do(ctx, pipe, b.do)
	return t.result(ctx, req, p, pipe, &b.attempt, resp, err)
}

// do is one attempt: it picks a host, passing over those whose protections
// refuse the attempt, and sends the attempt there.
func (b *balancedAttempt) do(ctx context.Context) (*http.Response, error) {
	t := b.t
	avoid := b.host
	var err error
	var refused []*balance.Host // hosts that refused this attempt
	inUse := hostsInUseFrom(ctx)
	first := b.shard.Pick(avoid)
	if first == nil {
		return nil, balance.ErrShardDown // every host of the request's shard is ejected
	}
	if inUse != nil && inUse.has(first) {
		// A hedge: to a host of the shard none of its request's attempts
		// went to, if it has one.
		if h := b.shard.Next(avoid, func(h *balance.Host) bool { return inUse.has(h) || !b.shard.Contains(h) }); h != nil {
			first.Done(watertight.Ignored, 0) // not called
			first = h
		}
	}
	for h := first; h != nil; h = b.next(avoid, refused) {
		r := b.orig
		if t.key != nil {
			// Key sees the attempt's request, to the picked host.
			ru := new(requestURL) // the attempt's request and URL, one allocation
			ru.r, ru.u = *b.orig, *b.orig.URL
			ru.u.Host = h.Addr()
			ru.r.URL = &ru.u
			r = &ru.r
		} else {
			b.addr = h.Addr() // attempt.do's copy of the request goes there
		}
		p, perr := t.pipesFor(r, h.Addr())
		if perr != nil {
			h.Done(watertight.Ignored, 0)
			return nil, perr
		}
		sent := b.n
		b.req = r
		if inUse != nil {
			inUse.add(h) // before the answer: a hedge sent meanwhile avoids it
		}
		start := time.Now()
		var resp *http.Response
		if p.inner != nil {
			resp, err = watertight.Do(ctx, p.inner, b.doCounted)
		} else {
			resp, err = b.attempt.do(ctx)
		}
		b.req, b.addr = b.orig, ""
		if b.n == sent {
			// Refused before it was sent: this host's breaker is open, or
			// its bulkhead or limit is full. Another host may take it.
			h.Done(watertight.Ignored, 0)
			if !watertight.IsRejection(err) {
				return resp, err
			}
			refused = append(refused, h)
			continue
		}
		b.host = h
		lat := time.Since(start)
		if err != nil {
			o := watertight.Classify(ctx, err)
			if callerEnded(ctx) {
				o = watertight.Ignored // the caller's own end, not the host's
			}
			h.Done(o, lat)
			return nil, err
		}
		if _, hijacked := resp.Body.(io.Writer); hijacked || resp.Body == nil || resp.Body == http.NoBody {
			h.Done(watertight.Success, lat)
		} else {
			resp.Body = &hostBody{ReadCloser: resp.Body, h: h, lat: lat}
		}
		return resp, nil
	}
	return nil, err
}

// requestURL is a request to a picked host with its URL.
type requestURL struct {
	r http.Request
	u url.URL
}

// doCounted is attempt.do for the picked host's protections: an attempt
// cut short by the caller's own end (see callerEnded) is Ignored by the
// host's breaker, as by the Balancer, so that callers cannot open a
// healthy host's breaker by asking for too little time. The attempt's own
// timeout (AttemptTimeout) still counts.
func (b *balancedAttempt) doCounted(ctx context.Context) (*http.Response, error) {
	resp, err := b.attempt.do(ctx)
	if err != nil && callerEnded(b.orig.Context()) {
		err = watertight.Mark(err, watertight.Ignored)
	}
	return resp, err
}

// callerEnded reports whether ctx, the caller's, has ended in a way that
// says nothing of the host: cancelled, or past a deadline the caller chose
// (a client's deadline header at a gateway). A deadline whose cause
// carries the Failure outcome (context.WithTimeoutCause with
// watertight.Mark(err, watertight.Failure): a gateway's route timeout,
// which the operator set for the host to meet) is the host's.
func callerEnded(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	var o interface{ Outcome() watertight.Outcome }
	if c := context.Cause(ctx); errors.As(c, &o) && o.Outcome() == watertight.Failure {
		return false
	}
	return true
}

// next returns a host for an attempt that refused hosts already: one of
// the shard neither refused nor avoided, else the avoided one (the
// previous attempt's), else, with ShardSpill, one of the rest of the pool,
// else nil (balance.Shard.Next).
func (b *balancedAttempt) next(avoid *balance.Host, refused []*balance.Host) *balance.Host {
	return b.shard.Next(avoid, func(h *balance.Host) bool { return slices.Contains(refused, h) })
}

// hostBody ends its host's call when the answer's body is closed or read
// to its end.
type hostBody struct {
	io.ReadCloser
	h    *balance.Host
	lat  time.Duration
	done atomic.Bool
}

func (b *hostBody) end() {
	if b.done.CompareAndSwap(false, true) {
		b.h.Done(watertight.Success, b.lat)
	}
}

func (b *hostBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.end()
	}
	return n, err
}

func (b *hostBody) Close() error {
	err := b.ReadCloser.Close()
	b.end()
	return err
}

// DefaultShardSize is the default of TransportConfig.ShardSize: shards of
// two hosts, the smallest in which a retry or a hedge has another host to
// go to.
const DefaultShardSize = 2

// shardConfig returns the shards of cfg (TransportConfig.ShardKey,
// ShardSize, ShardSpill), or an error naming the invalid field.
func shardConfig(cfg TransportConfig) (balance.ShardConfig, error) {
	sc := balance.ShardConfig{Size: cfg.ShardSize, Spill: cfg.ShardSpill}
	switch {
	case cfg.ShardKey == nil && cfg.ShardSize != 0:
		return sc, fmt.Errorf("watertighthttp: TransportConfig.ShardSize (%d) needs ShardKey, which says whose shard a request is", cfg.ShardSize)
	case cfg.ShardKey == nil && cfg.ShardSpill:
		return sc, errors.New("watertighthttp: TransportConfig.ShardSpill needs ShardKey, which says whose shard a request is")
	case cfg.ShardKey == nil:
		return sc, nil
	case cfg.Balancer == nil:
		return sc, errors.New("watertighthttp: TransportConfig.ShardKey needs a Balancer, whose pool the shards are cut from")
	case cfg.ShardSize < 0 || cfg.ShardSize > balance.MaxShardSize:
		return sc, fmt.Errorf("watertighthttp: TransportConfig.ShardSize must be from 1 to %d hosts (balance.MaxShardSize), or 0 for %d, got %d", balance.MaxShardSize, DefaultShardSize, cfg.ShardSize)
	case sc.Size == 0:
		sc.Size = DefaultShardSize
	}
	return sc, nil
}

// shardOf returns req's tenant (TransportConfig.ShardKey), "" for the
// whole pool.
func (t *Transport) shardOf(req *http.Request) string {
	if t.shardKey == nil {
		return ""
	}
	return t.shardKey(req)
}
