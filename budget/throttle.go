package budget

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/internal/stripe"
)

// ErrThrottled is returned by Throttler.Allow (and Enter) for a request that
// the throttler rejects locally, without sending it. It is a rejection
// (watertight.IsRejection): it is never retried and never counts as a failure
// of the dependency.
var ErrThrottled = watertight.NewRejection("budget: throttled locally (adaptive throttling)")

// Defaults used for zero fields of ThrottleConfig.
const (
	DefaultK       = 2.0
	DefaultWindow  = 2 * time.Minute
	DefaultBuckets = 120
)

// ThrottleConfig configures a Throttler. The zero value is valid: every zero
// field takes the default named in its comment (see DefaultThrottleConfig).
type ThrottleConfig struct {
	// Name labels the throttler in events (the backend it guards). It may
	// be empty.
	Name string
	// K is the multiplier of accepts: the throttler lets through about K
	// times as many requests as the backend accepts, rejecting the rest
	// locally. Lower is more aggressive (K = 1 sends no more than the backend
	// accepts, but reacts slowly when it recovers); higher sends more
	// requests the backend will reject. Zero means DefaultK (2, the SRE
	// book's value). Must be at least 1.
	K float64
	// Window is the span over which requests and accepts are counted. Zero
	// means DefaultWindow (2 minutes). Must not be negative.
	Window time.Duration
	// Buckets is the number of buckets Window is split into; the window
	// slides one bucket at a time, so it covers between Window minus one
	// bucket and Window. Zero means DefaultBuckets (120: one-second buckets
	// for the default Window). Must not be negative, and must leave buckets
	// of at least 1ms (Window/Buckets).
	Buckets int
	// Rand, if not nil, returns numbers in [0, 1) for the rejection draw, for
	// reproducible simulations; it must be safe for concurrent use if the
	// Throttler is. It is called only when the rejection probability is
	// above zero. If nil, math/rand/v2 is used.
	Rand func() float64
	// Rejected reports whether the backend rejected a call for overload,
	// given the error the rest of the pipeline returned to Exit (never nil).
	// Every other call counts as accepted. If nil, an error counts as
	// rejected when watertight.IsOverloaded(err) or
	// watertight.IsRejection(err): an overload answer from the backend, or a
	// local rejection by a policy further in (a breaker, a bulkhead), which
	// never reached the backend and so is not an accept either. A backend
	// that sheds load by timing out rather than answering needs a Rejected
	// that counts timeouts too.
	Rejected func(err error) bool
	// Listener, if not nil, receives an EventRejected, with Source
	// "budget", Name this Name and Err ErrThrottled, for every request the
	// throttler rejects locally. It is called in the goroutine of Allow (or
	// Enter), with no lock held; while the backend is overloaded that is a
	// share of all requests, so it should return quickly (see
	// watertight.Listener). If nil, no events are built.
	Listener watertight.Listener
}

// DefaultThrottleConfig returns the configuration that zero fields resolve
// to: K = 2 over a two-minute window of one-second buckets.
func DefaultThrottleConfig() ThrottleConfig {
	return ThrottleConfig{K: DefaultK, Window: DefaultWindow, Buckets: DefaultBuckets}
}

func (c ThrottleConfig) resolve() (ThrottleConfig, error) {
	bad := func(field, rule string, got any) error {
		return fmt.Errorf("budget: ThrottleConfig.%s %s, got %v", field, rule, got)
	}
	if c.K == 0 {
		c.K = DefaultK
	}
	if !(c.K >= 1) || math.IsInf(c.K, 1) {
		return c, bad("K", "must be >= 1 and finite (0 means 2)", c.K)
	}
	if c.Window < 0 {
		return c, bad("Window", "must be >= 0 (0 means 2m)", c.Window)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Buckets < 0 {
		return c, bad("Buckets", "must be >= 0 (0 means 120)", c.Buckets)
	}
	if c.Buckets == 0 {
		c.Buckets = DefaultBuckets
	}
	if c.Window/time.Duration(c.Buckets) < time.Millisecond {
		return c, bad("Buckets", fmt.Sprintf("must leave buckets of at least 1ms (Window %v / Buckets)", c.Window), c.Buckets)
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.Rejected == nil {
		c.Rejected = defaultRejected
	}
	return c, nil
}

func defaultRejected(err error) bool {
	return watertight.IsOverloaded(err) || watertight.IsRejection(err)
}

// Throttler is client-side adaptive throttling (Google SRE book, chapter 21,
// "Handling Overload"): it counts the requests made to a backend and the
// ones the backend accepted over the last Window, and rejects new requests
// locally with probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// so that a backend that rejects for overload gets about K times what it
// accepts instead of everything its clients offer, and the rejections that
// would have been sent cost the client nothing. A locally rejected request
// counts in requests, so the probability rises with the rejections: once the
// backend accepts again, accepts catch up and the probability falls back to
// zero.
//
// Used as a watertight.Policy (Enter and Exit), the throttler counts the
// requests still in flight as accepts while it would otherwise reject, so
// that a burst of concurrent first requests at a cold start — no answers yet
// — is not taken for a backend that refuses everything. Allow and Accepted
// cannot know when a refused request ends, so they do not do this: with
// them, such a burst is partly rejected until answers come in.
//
// Build it with NewThrottler; it is safe for concurrent use. A nil
// *Throttler is valid and disabled: Allow returns nil, Accepted does
// nothing, Enter and Exit pass everything through. The zero Throttler is not
// usable.
//
// # Cost
//
// Allow reads the clock once (time.Since of a fixed instant, about half of
// time.Now: 25–50 ns on these machines, most of Allow's cost), loads the
// current bucket and adds one to it; it draws a random number only when the
// probability is above zero, never in the healthy case. Accepted and Exit do
// not read the clock. Nothing allocates. Once per bucket (a second, by
// default) the first call that finds the bucket over moves the window on
// under a mutex, summing the buckets once.
type Throttler struct {
	_   [64]byte
	cur atomic.Pointer[tbucket] // the bucket being filled
	_   [56]byte

	// Read-mostly.
	buckets []tbucket
	epoch   time.Time
	width   int64 // bucket span in ns
	cfg     ThrottleConfig

	_        [64]byte // keep the writes below off the read-mostly line
	rejected atomic.Uint64
	mu       sync.Mutex // serialises rotate

	// inflight counts the requests let through by Enter whose Exit has not
	// come yet (policy use only). While the probability would be above
	// zero, they count as accepts: at a cold start, a burst of concurrent
	// first requests has no answers yet, and without this most of it would
	// be rejected as if the backend had refused it. A striped counter, so
	// that Enter and Exit rarely contend; it is summed only when the
	// probability would otherwise be above zero.
	inflight stripe.Counter
}

// tbucket counts one span of the window. Fields other than the counters are
// set by rotate before the bucket is published in Throttler.cur; they are
// atomics because a slow reader may still hold the bucket when it is reused
// a window later.
type tbucket struct {
	req, acc atomic.Int64
	span     atomic.Int64 // which bucket-span since epoch the counts belong to
	end      atomic.Int64 // ns since epoch at which the span ends
	pastReq  atomic.Int64 // the other buckets of the window, summed when this one began
	pastAcc  atomic.Int64
	idx      int
	_        [8]byte
}

// NewThrottler returns a Throttler for cfg, or an error that names the first
// invalid field and its rule.
func NewThrottler(cfg ThrottleConfig) (*Throttler, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	t := &Throttler{
		buckets: make([]tbucket, c.Buckets),
		epoch:   time.Now(),
		width:   int64(c.Window) / int64(c.Buckets),
		cfg:     c,
	}
	for i := range t.buckets {
		t.buckets[i].idx = i
		t.buckets[i].span.Store(math.MinInt64 / 2) // out of every window
	}
	b := &t.buckets[0]
	b.span.Store(0)
	b.end.Store(t.width)
	t.cur.Store(b)
	return t, nil
}

// Config returns the throttler's configuration, with defaults filled in.
func (t *Throttler) Config() ThrottleConfig {
	if t == nil {
		return ThrottleConfig{}
	}
	return t.cfg
}

// bucket returns the current bucket, moving the window on if its span is
// over at now.
func (t *Throttler) bucket(now int64) *tbucket {
	b := t.cur.Load()
	if now >= b.end.Load() {
		b = t.rotate(now)
	}
	return b
}

// rotate makes the bucket of now's span current, with the sum of the rest of
// the window. A call racing with it may count in the bucket that was current
// an instant ago, which is then summed at the next rotation: nothing drifts,
// since every rotation sums the buckets afresh.
func (t *Throttler) rotate(now int64) *tbucket {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.cur.Load()
	if now < b.end.Load() {
		return b // another caller moved it on
	}
	n := int64(len(t.buckets))
	span := now / t.width
	var req, acc int64
	for i := range t.buckets {
		x := &t.buckets[i]
		if s := x.span.Load(); s > span-n && s < span {
			req += x.req.Load()
			acc += x.acc.Load()
		}
	}
	nb := &t.buckets[span%n]
	nb.req.Store(0)
	nb.acc.Store(0)
	nb.span.Store(span)
	nb.end.Store((span + 1) * t.width)
	nb.pastReq.Store(req)
	nb.pastAcc.Store(acc)
	t.cur.Store(nb)
	return nb
}

// probability is the SRE book's rejection probability for req requests and
// acc accepts.
func (t *Throttler) probability(req, acc int64) float64 {
	r, a := float64(req), float64(acc)
	if r <= t.cfg.K*a {
		return 0
	}
	return (r - t.cfg.K*a) / (r + 1)
}

// allow counts a request and decides on it; it returns the bucket it counted
// in. withInflight counts the requests in flight as accepts (see
// Throttler.inflight).
func (t *Throttler) allow(withInflight bool) (*tbucket, error) {
	b := t.bucket(int64(time.Since(t.epoch)))
	// The probability is that of the requests before this one.
	req := b.req.Add(1) - 1 + b.pastReq.Load()
	acc := b.acc.Load() + b.pastAcc.Load()
	if withInflight && float64(req) > t.cfg.K*float64(acc) {
		acc += max(int64(t.inflight.Load()), 0)
	}
	if float64(req) > t.cfg.K*float64(acc) { // else the probability is 0: no draw
		if t.cfg.Rand() < t.probability(req, acc) {
			t.rejected.Add(1)
			if t.cfg.Listener != nil {
				t.emitRejected()
			}
			return b, ErrThrottled
		}
	}
	return b, nil
}

// emitRejected sends an EventRejected. It is kept out of line so that allow
// stays as small as it was for a throttler without a listener.
//
//go:noinline
func (t *Throttler) emitRejected() {
	watertight.Emit(t.cfg.Listener, watertight.Event{
		Kind: watertight.EventRejected, Source: source, Name: t.cfg.Name,
		Reason: "throttled locally: the backend accepts too few of the requests", Err: ErrThrottled, Code: CodeThrottled,
	})
}

// Allow counts one request to the backend and decides whether to send it: it
// returns ErrThrottled (with the probability in the type's documentation)
// for a request to reject locally, nil otherwise. A rejected request still
// counts as a request. After a nil, call Accepted if the backend accepted the
// request: if it answered anything but an overload rejection. On a nil
// Throttler, Allow returns nil.
func (t *Throttler) Allow() error {
	if t == nil {
		return nil
	}
	_, err := t.allow(false)
	return err
}

// Accepted records that the backend accepted a request that Allow let
// through: it answered anything but an overload rejection (an error of the
// caller's own, such as "not found", is an accept). It counts in the current
// bucket and does not read the clock. On a nil Throttler it does nothing.
func (t *Throttler) Accepted() {
	if t == nil {
		return
	}
	t.cur.Load().acc.Add(1)
}

// NilDisabled implements watertight.NilDisabled: a nil *Throttler is a
// valid, disabled policy, which watertight.New skips.
func (*Throttler) NilDisabled() {}

// Enter implements watertight.Policy: it is Allow. The Ticket remembers the
// bucket the request counted in, so that Exit counts the accept in the same
// one and a request and its accept leave the window together.
func (t *Throttler) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	if t == nil {
		return ctx, watertight.Ticket{}, nil
	}
	b, err := t.allow(true)
	if err != nil {
		return ctx, watertight.Ticket{}, err
	}
	t.inflight.Add(1)
	return ctx, watertight.Ticket{Seq: uint64(b.span.Load()), Start: int64(b.idx)}, nil
}

// Exit implements watertight.Policy: unless ThrottleConfig.Rejected says the
// backend rejected the call for overload, it records an accept, in the
// bucket Enter counted the request in (if that bucket is still in the
// window). It returns err unchanged.
func (t *Throttler) Exit(_ context.Context, tk watertight.Ticket, err error) error {
	if t == nil {
		return err
	}
	t.inflight.Add(^uint64(0)) // -1
	if err == nil || !t.cfg.Rejected(err) {
		t.acceptIn(tk)
	}
	return err
}

// acceptIn counts an accept in the bucket of the request's Ticket, if that
// bucket is still in the window. When it is no longer the current bucket,
// the current one's sum of the past is bumped too, so that the accept counts
// at once rather than from the next rotation. (If a rotation races with
// this, the accept may count twice until the rotation after, which sums the
// buckets afresh.)
func (t *Throttler) acceptIn(tk watertight.Ticket) {
	i := tk.Start
	if i < 0 || i >= int64(len(t.buckets)) {
		return
	}
	b, span := &t.buckets[i], int64(tk.Seq)
	c := t.cur.Load()
	if b.span.Load() != span || span <= c.span.Load()-int64(len(t.buckets)) {
		return // the bucket has been reused, or has left the window
	}
	b.acc.Add(1)
	if c != b {
		c.pastAcc.Add(1)
	}
}

// ThrottleSnapshot is a Throttler's window at one moment.
type ThrottleSnapshot struct {
	// Requests is the number of requests counted in the window, the locally
	// rejected ones included.
	Requests int64
	// Accepts is the number of requests the backend accepted in the window.
	Accepts int64
	// RejectProbability is the probability with which the next request
	// would be rejected locally.
	RejectProbability float64
	// Rejected is the number of requests rejected locally since
	// NewThrottler.
	Rejected uint64
}

// Snapshot returns the throttler's window as it is now (it reads the clock).
// A nil Throttler returns the zero ThrottleSnapshot.
func (t *Throttler) Snapshot() ThrottleSnapshot {
	if t == nil {
		return ThrottleSnapshot{}
	}
	b := t.bucket(int64(time.Since(t.epoch)))
	req := b.req.Load() + b.pastReq.Load()
	acc := b.acc.Load() + b.pastAcc.Load()
	return ThrottleSnapshot{
		Requests:          req,
		Accepts:           acc,
		RejectProbability: t.probability(req, acc),
		Rejected:          t.rejected.Load(),
	}
}
