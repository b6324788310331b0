package watertightkafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/idempotency"
)

// outcome is how one record's processing ended.
type outcome uint8

const (
	// finished: dead-lettered, or found processed already.
	finished outcome = iota
	// processedOK: the handler succeeded.
	processedOK
	// refused: a breaker or another protection refused it before its
	// handler ran, or its handler answered with a rejection: it is held.
	refused
	// abandoned: its partition was abandoned while it was processed.
	abandoned
)

// handlerPanic is the error of a handler that panicked. It is not retried.
type handlerPanic struct{ value any }

func (e *handlerPanic) Error() string {
	return fmt.Sprintf("watertightkafka: handler panicked: %v", e.value)
}

// errStore wraps the idempotency store's failures.
var errStore = errors.New("watertightkafka: idempotency store")

// isBreakerRefusal reports whether err is a breaker's refusal.
func isBreakerRefusal(err error) bool {
	return errors.Is(err, circuit.ErrOpen) || errors.Is(err, circuit.ErrHalfOpen)
}

// isOpen reports whether a breaker in state s refuses every call.
func isOpen(s circuit.State) bool { return s == circuit.Open || s == circuit.ForcedOpen }

func kerrOf(code int16) error { return kerr.ErrorForCode(code) }

// runBatch is a pool task: it processes b's records from the first
// unfinished one, in order, and decides what becomes of the rest when it
// stops early.
func (c *Consumer) runBatch(b *batch) {
	l, p := b.lane, b.part
	start := int(b.finished.Load())
	l.queued.Add(-int64(len(b.recs) - start))
	if l.heldN.Load() > 0 {
		// The records counted as queued until now may have kept a held
		// batch out: there is room for it now.
		c.pump(l)
	}
	var wd *watchdog
	if l.cfg.AttemptTimeout > 0 {
		wd = c.wd
	}
	rn, ok := p.enter(wd)
	if !ok {
		l.buffered.Add(-int64(len(b.recs) - start)) // gone: the next owner runs them
		return
	}
	if rn != nil {
		rn.limit.Store(l.timeoutTicks)
	}
	began := time.Now()
	i, res, err := start, abandoned, error(nil)
	processed := 0
	defer func() {
		p.exit(rn)
		l.processed.Add(uint64(processed))
		switch res {
		case finished:
			l.observe(time.Since(began), len(b.recs)-start)
			l.buffered.Add(-int64(len(b.recs) - start))
		case refused:
			l.buffered.Add(-int64(i - start))
			c.hold(b, err)
		case abandoned:
			l.buffered.Add(-int64(len(b.recs) - start))
		}
		if l.heldN.Load() > 0 {
			c.pump(l)
		}
	}()
	for ; i < len(b.recs); i++ {
		if p.ctx.Err() != nil {
			res = abandoned
			return
		}
		var o outcome
		o, err = c.process(l, p, b.recs[i], rn)
		switch o {
		case refused, abandoned:
			res = o
			return
		case processedOK:
			processed++
		}
		b.finished.Store(int32(i + 1))
	}
	res = finished
}

// process runs one record through the lane's protections: the idempotency
// claim, the breaker, the handler with its attempt timeout, the retry
// policy, and the dead letter when the policy gives up. The error is the
// refusal when the outcome is refused.
func (c *Consumer) process(l *lane, p *partition, r *kgo.Record, rn *run) (outcome, error) {
	ctx, t, _ := l.cfg.Retry.Enter(p.ctx)
	if c.cfg.Idempotency.Store != nil || l.cfg.Breaker != nil {
		return c.attempts(l, p, r, rn, ctx, t, nil)
	}
	// Nothing to claim nor to ask: the first attempt is a plain call.
	err := c.call(ctx, l, r, rn)
	if err == nil {
		_ = l.cfg.Retry.Exit(ctx, t, nil)
		return processedOK, nil
	}
	return c.attempts(l, p, r, rn, ctx, t, err)
}

// attempts runs the record's attempts under the retry policy (whose Enter
// gave ctx and t) until one succeeds or the policy gives up; failed, when not
// nil, is the error of a first attempt already made.
func (c *Consumer) attempts(l *lane, p *partition, r *kgo.Record, rn *run, ctx context.Context, t watertight.Ticket, failed error) (outcome, error) {
	pol := l.cfg.Retry
	cl := claimer{c: c, r: r}
	err := failed
	attempts := 0
	if failed != nil {
		attempts = 1
	}
	for made := failed != nil; ; made = false {
		if !made {
			err = nil
			if !cl.claimed && c.cfg.Idempotency.Store != nil {
				var o claimOutcome
				o, err = cl.claim(ctx)
				switch o {
				case claimDone:
					_ = pol.Exit(ctx, t, nil)
					l.duplicates.Add(1)
					c.emit(watertight.Event{Kind: watertight.EventReplayed, Key: l.name, Code: CodeDuplicate,
						Reason: "record " + recordID(r) + " was processed already; skipped"})
					return finished, nil
				case claimUnknown:
					_ = pol.Exit(ctx, t, nil)
					return c.deadLetter(l, p, r, CodeOutcomeUnknown, err, 0)
				case claimRefused:
					_ = pol.Exit(ctx, t, err)
					return refused, err
				}
			}
			if err == nil { // err is a store failure otherwise: a failed attempt
				var permit circuit.Permit
				if br := l.cfg.Breaker; br != nil {
					if permit, err = br.Allow(); err != nil {
						_ = pol.Exit(ctx, t, err)
						cl.release()
						return refused, err
					}
				}
				attempts++
				err = c.call(ctx, l, r, rn)
				if l.cfg.Breaker != nil {
					permit.Record(ctx, err)
				}
				if err == nil {
					break
				}
			}
		}
		if watertight.IsRejection(err) && p.ctx.Err() == nil {
			// The handler's own protections (or the store) refused: the
			// record's work did not happen.
			_ = pol.Exit(ctx, t, err)
			cl.release()
			return refused, err
		}
		var hp *handlerPanic
		if errors.As(err, &hp) {
			break // not retried
		}
		if p.ctx.Err() != nil {
			_ = pol.Exit(ctx, t, err)
			cl.release()
			return abandoned, nil
		}
		var again bool
		var wait time.Duration
		t, wait, again = pol.Again(ctx, t, err)
		if !again {
			break
		}
		if !sleep(p.ctx, wait) {
			_ = pol.Exit(ctx, t, err)
			cl.release()
			return abandoned, nil
		}
	}
	err = pol.Exit(ctx, t, err)
	if err == nil {
		cl.complete()
		return processedOK, nil
	}
	o, _ := c.deadLetter(l, p, r, failureCode(err), err, attempts)
	if o == finished {
		cl.complete()
	} else {
		cl.release()
	}
	return o, nil
}

// call runs the lane's handler once, under the attempt timeout (rn, nil
// without one), and turns a panic into an error.
func (c *Consumer) call(ctx context.Context, l *lane, r *kgo.Record, rn *run) (err error) {
	if rn != nil {
		ctx = c.wd.attempt(rn)
	}
	defer func() {
		if v := recover(); v != nil {
			err = &handlerPanic{value: v}
		}
		if rn != nil && err != nil && c.wd.done(rn) {
			err = &timeoutError{err: err}
		}
	}()
	return l.handler(ctx, r)
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Dead letters that fail to be written are tried again after a wait that
// doubles from deadLetterMinWait to deadLetterMaxWait.
const (
	deadLetterMinWait = 50 * time.Millisecond
	deadLetterMaxWait = 5 * time.Second
)

// deadLetter writes r to the lane's dead-letter topic with the reason in
// headers, trying again until it is written (finished) or the partition is
// abandoned.
func (c *Consumer) deadLetter(l *lane, p *partition, r *kgo.Record, code string, cause error, attempts int) (outcome, error) {
	topic := l.cfg.DeadLetterTopic
	if topic == "" {
		topic = r.Topic + DefaultDeadLetterSuffix
	}
	text := code
	if cause != nil {
		text = cause.Error()
	}
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+7)
	headers = append(headers, r.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderCode, Value: []byte(code)},
		kgo.RecordHeader{Key: HeaderError, Value: []byte(text)},
		kgo.RecordHeader{Key: HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
		kgo.RecordHeader{Key: HeaderLane, Value: []byte(l.name)},
	)
	wait := deadLetterMinWait
	for {
		dl := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: headers}
		err := c.cl.ProduceSync(p.ctx, dl).FirstErr()
		if err == nil {
			l.deadLettered.Add(1)
			if ts := c.topics[r.Topic]; ts != nil {
				ts.deadLettered.Add(1)
			}
			c.emit(watertight.Event{Kind: watertight.EventDropped, Key: l.name, Code: CodeDeadLettered, Attempt: attempts, Err: cause,
				Reason: "record " + recordID(r) + " written to " + topic + " (" + code + ")"})
			return finished, nil
		}
		if p.ctx.Err() != nil {
			return abandoned, nil
		}
		c.emit(watertight.Event{Kind: watertight.EventRetryScheduled, Key: l.name, Code: CodeDeadLetterFailed, Delay: wait, Err: err,
			Reason: "writing record " + recordID(r) + " to " + topic + " failed; trying again"})
		if !sleep(p.ctx, wait) {
			return abandoned, nil
		}
		wait = min(2*wait, deadLetterMaxWait)
	}
}

// recordID names a record in events: "topic/partition/offset".
func recordID(r *kgo.Record) string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}

// claimOutcome is what an idempotency claim decided.
type claimOutcome uint8

const (
	claimRun     claimOutcome = iota // claimed (or the store failed: err says)
	claimDone                        // processed already: skip
	claimUnknown                     // started once, outcome never recorded
	claimRefused                     // store full of claims, or another execution holds the key: hold
)

// claimer holds one record's idempotency claim.
type claimer struct {
	c       *Consumer
	r       *kgo.Record
	key     string
	token   string
	claimed bool
}

// claim asks the store for the record's key. A store error is returned with
// claimRun, as a failed attempt for the retry policy.
func (cl *claimer) claim(ctx context.Context) (claimOutcome, error) {
	id := cl.c.cfg.Idempotency
	if cl.key == "" {
		k := recordID(cl.r)
		if id.Key != nil {
			k = id.Key(cl.r)
		}
		cl.key = idempotency.ScopedKey(cl.c.cfg.Group, k)
	}
	got, err := id.Store.Claim(ctx, cl.key, "", id.LockTTL, id.TTL)
	if err != nil {
		if watertight.IsRejection(err) {
			return claimRefused, err
		}
		return claimRun, fmt.Errorf("%w: %w", errStore, err)
	}
	switch idempotency.Resolve(got, "") {
	case idempotency.Run:
		cl.claimed, cl.token = true, got.Token
		return claimRun, nil
	case idempotency.Replay, idempotency.AnswerForgotten:
		return claimDone, nil
	case idempotency.AnswerUnknown:
		return claimUnknown, errors.New("watertightkafka: the record's processing started once and recorded no outcome")
	case idempotency.Wait:
		return claimRefused, errInFlight
	}
	return claimRun, fmt.Errorf("%w: unexpected answer %v for key %q", errStore, got.State, cl.key)
}

// errInFlight is the refusal of a record whose key another execution holds
// (a previous owner's abandoned handler still running, say).
var errInFlight = watertight.NewRejection("watertightkafka: the record is being processed elsewhere (idempotency claim in flight)")

// complete records the record's outcome under its key.
func (cl *claimer) complete() {
	if !cl.claimed {
		return
	}
	cl.claimed = false
	id := cl.c.cfg.Idempotency
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	// On failure the claim turns Unknown at the end of its lock: a replay
	// is then dead-lettered as CodeOutcomeUnknown, never run twice.
	_ = id.Store.Complete(ctx, cl.key, cl.token, idempotency.Record{Created: time.Now()}, id.TTL)
}

// release gives the claim back: the handler did not run, or said by its
// error that it did nothing.
func (cl *claimer) release() {
	if !cl.claimed {
		return
	}
	cl.claimed = false
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	_ = cl.c.cfg.Idempotency.Store.Release(ctx, cl.key, cl.token)
}

// storeTimeout bounds the store calls that end a claim.
const storeTimeout = 5 * time.Second
