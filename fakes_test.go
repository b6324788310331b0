package watertight_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight-go/watertight"
)

// event is one Enter or Exit seen by a fake policy, or the call of fn.
type event struct {
	op   string // "enter", "exit", "fn"
	name string
	err  error     // the error Exit got, or Enter returned
	at   time.Time // when it happened (virtual time inside a synctest bubble)
}

func (e event) String() string { return e.op + " " + e.name }

// eventLog records events from any goroutine.
type eventLog struct {
	mu sync.Mutex
	ev []event
}

func (l *eventLog) add(op, name string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ev = append(l.ev, event{op: op, name: name, err: err, at: time.Now()})
}

func (l *eventLog) events() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ev)
}

// ops returns the events as "enter a", "exit a", "fn", ...
func (l *eventLog) ops() []string {
	var s []string
	for _, e := range l.events() {
		if e.op == "fn" {
			s = append(s, "fn")
			continue
		}
		s = append(s, e.String())
	}
	return s
}

// find returns the only event with op and name; it fails the test if there
// is not exactly one.
func (l *eventLog) find(t *testing.T, op, name string) event {
	t.Helper()
	var found []event
	for _, e := range l.events() {
		if e.op == op && e.name == name {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d events %q %q, want 1; log: %v", len(found), op, name, l.ops())
	}
	return found[0]
}

func (l *eventLog) fn() { l.add("fn", "", nil) }

type ctxKey string

// recording is a Policy that logs its Enter and Exit, derives a context of its
// own, issues a distinct Ticket per call, and checks that each Exit gets the
// context and the Ticket its Enter returned. If rewrite is set, Exit returns
// rewrite(err).
type recording struct {
	name    string
	log     *eventLog
	rewrite func(error) error

	seq      atomic.Uint64
	ctxs     sync.Map // Seq -> the context Enter returned
	enters   atomic.Int64
	exits    atomic.Int64
	mismatch atomic.Int64 // Exits that got another call's context or Ticket
}

func newRecording(name string, log *eventLog) *recording {
	return &recording{name: name, log: log}
}

func (r *recording) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	s := r.seq.Add(1)
	r.enters.Add(1)
	r.log.add("enter", r.name, nil)
	c := context.WithValue(ctx, ctxKey(r.name), s)
	r.ctxs.Store(s, c)
	return c, watertight.Ticket{Seq: s, Start: int64(s) * 7}, nil
}

func (r *recording) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	r.exits.Add(1)
	c, ok := r.ctxs.LoadAndDelete(t.Seq)
	if !ok || c != ctx || t.Start != int64(t.Seq)*7 {
		r.mismatch.Add(1)
	}
	r.log.add("exit", r.name, err)
	if r.rewrite != nil {
		return r.rewrite(err)
	}
	return err
}

// check fails the test unless every Enter had exactly one matching Exit.
func (r *recording) check(t *testing.T) {
	t.Helper()
	if n, x := r.enters.Load(), r.exits.Load(); n != x {
		t.Errorf("%s: %d enters, %d exits", r.name, n, x)
	}
	if m := r.mismatch.Load(); m != 0 {
		t.Errorf("%s: %d exits got a context or ticket that their Enter did not return", r.name, m)
	}
}

// wrapWith returns a rewrite that prefixes non-nil errors with name.
func wrapWith(name string) func(error) error {
	return func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("%s: %w", name, err)
	}
}

// rejecting is a Policy that always refuses with err. Its Exit must never be
// called.
type rejecting struct {
	name  string
	log   *eventLog
	err   error
	exits atomic.Int64
}

func (r *rejecting) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	r.log.add("enter", r.name, r.err)
	return ctx, watertight.Ticket{}, r.err
}

func (r *rejecting) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	r.exits.Add(1)
	r.log.add("exit", r.name, err)
	return err
}

// resource is a Resource policy, like a bulkhead without a limit: it counts
// the permits its tickets hold.
type resource struct {
	name  string
	log   *eventLog
	held  atomic.Int64
	exits atomic.Int64
}

func (r *resource) HoldsResource() bool { return true }

func (r *resource) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	r.held.Add(1)
	r.log.add("enter", r.name, nil)
	return ctx, watertight.Ticket{Seq: 1}, nil
}

func (r *resource) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	if t.Seq != 1 {
		panic("resource: Exit got a ticket it did not issue")
	}
	r.exits.Add(1)
	r.log.add("exit", r.name, err)
	r.held.Add(-1)
	return err
}

// nop is a trivial policy that allocates nothing.
type nop struct{}

func (nop) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	return ctx, watertight.Ticket{Seq: 1}, nil
}

func (nop) Exit(ctx context.Context, t watertight.Ticket, err error) error { return err }

// detacher is a detaching policy whose context the test ends by calling
// abandon; the context does not follow the caller's, so each level of a
// nested pipeline can be abandoned on its own, in a chosen order.
type detacher struct {
	name   string
	log    *eventLog
	mu     sync.Mutex
	cancel context.CancelCauseFunc
}

var errAbandoned = errors.New("detacher: abandoned")

func (d *detacher) Detaches() bool { return true }

func (d *detacher) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	c, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	d.mu.Lock()
	d.cancel = cancel
	d.mu.Unlock()
	d.log.add("enter", d.name, nil)
	return c, watertight.Ticket{}, nil
}

func (d *detacher) Exit(ctx context.Context, t watertight.Ticket, err error) error {
	d.log.add("exit", d.name, err)
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%s: %w", d.name, context.Cause(ctx))
	}
	d.mu.Lock()
	d.cancel(nil)
	d.mu.Unlock()
	return err
}

// abandon ends the context of the current call.
func (d *detacher) abandon() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancel(errAbandoned)
}
