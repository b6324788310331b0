package dashboard

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/watertight-go/watertight/balance"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/hedge"
	"github.com/watertight-go/watertight/limit"
	"github.com/watertight-go/watertight/watch"
)

// row is one protection on the page, in one shape for every kind.
type row struct {
	// ID is unique on the page: kind/group/name.
	ID string `json:"id"`
	// Kind is the watch.Kind's name ("circuit", "bulkhead"...), Group the
	// name it is watched under, Name its key within a registry (empty
	// otherwise).
	Kind  string `json:"kind"`
	Group string `json:"group"`
	Name  string `json:"name,omitempty"`
	// State is a word for people ("open", "full", "rejecting"); Level the
	// page's severity: "ok", "warn", "bad" or "off".
	State string `json:"state"`
	Level string `json:"level"`
	// Code is the rule that opened a breaker (its state change's
	// Event.Code); Why the words of its reason.
	Code string `json:"code,omitempty"`
	Why  string `json:"why,omitempty"`
	// Until is when an open breaker goes half-open, in Unix milliseconds.
	Until int64 `json:"until,omitempty"`
	// Fields are key, value pairs, values formatted.
	Fields []string `json:"fields"`
	// Values are the two numbers charted this sample; Max, if not zero, is
	// the chart's top.
	Values [2]float64 `json:"values"`
	Max    float64    `json:"max,omitempty"`
}

// reasonRow is one series of counted events.
type reasonRow struct {
	Kind   string  `json:"kind"`
	Source string  `json:"source"`
	Name   string  `json:"name,omitempty"`
	Code   string  `json:"code"`
	Total  uint64  `json:"total"`
	Rate   float64 `json:"rate"`
}

// frame is one sample, as sent to pages and served at state.json.
type frame struct {
	Type string `json:"type"` // "tick"
	Time int64  `json:"t"`    // Unix milliseconds
	Rows []row  `json:"rows"`
	// Reasons are the refused, shed and skipped calls counted by code since
	// sampling began, the most first; ReasonsRate their sum per second.
	Reasons         []reasonRow `json:"reasons"`
	ReasonsRate     float64     `json:"reasons_rate"`
	ReasonsOverflow uint64      `json:"reasons_overflow,omitempty"`
	// Changes are the state changes since the previous frame.
	Changes []change `json:"changes,omitempty"`

	seq uint64 // the newest change's sequence number when sampled
}

// sampler turns snapshots into frames. It keeps the counters of the previous
// sample, for rates; one sampler belongs to one goroutine.
type sampler struct {
	d           *Dashboard
	at          time.Time
	prev        map[string][4]uint64
	next        map[string][4]uint64
	prevReasons map[reasonKey]uint64
	dt          float64 // seconds since the previous sample; 0 for the first
}

func newSampler(d *Dashboard) *sampler {
	return &sampler{d: d, prev: map[string][4]uint64{}, next: map[string][4]uint64{}, prevReasons: map[reasonKey]uint64{}}
}

// sample reads every source and the event counts, with the state changes
// numbered after `after`.
func (s *sampler) sample(now time.Time, after uint64) *frame {
	s.dt = 0
	if !s.at.IsZero() {
		s.dt = now.Sub(s.at).Seconds()
	}
	s.at = now
	f := &frame{Type: "tick", Time: now.UnixMilli(), Rows: []row{}}
	srcs := s.d.cfg.Sources.Sources()
	s.d.changes.lookup(func(get func(evKey) (lastChange, bool)) {
		for _, src := range srcs {
			f.Rows = s.rows(f.Rows, src, now, get)
		}
	})
	slices.SortStableFunc(f.Rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)), strings.Compare(a.Group, b.Group), strings.Compare(a.Name, b.Name))
	})
	s.prev, s.next = s.next, s.prev
	clear(s.next)
	f.Reasons, f.ReasonsRate = s.reasonRows()
	f.ReasonsOverflow = s.d.reasons.overflow.Load()
	f.Changes, f.seq = s.d.changes.since(after)
	return f
}

var kindOrders = func() map[string]int {
	m := map[string]int{}
	for _, k := range []watch.Kind{watch.Circuit, watch.Bulkhead, watch.Pool, watch.Budget, watch.Throttler,
		watch.Concurrency, watch.Hedge, watch.Limiter, watch.Balancer} {
		m[k.String()] = int(k)
	}
	return m
}()

func kindOrder(k string) int { return kindOrders[k] }

// encode returns f as JSON.
func (s *sampler) encode(f *frame) []byte {
	b, err := json.Marshal(f)
	if err != nil { // cannot happen: no value in a frame fails to marshal
		panic(err)
	}
	return b
}

// rates returns the increase of counter i of row id per second since the
// previous sample, and records cur for the next one. A counter that went
// back (the source was replaced) and the first sample read zero.
func (s *sampler) rates(id string, cur [4]uint64) (r [4]float64) {
	prev, ok := s.prev[id]
	s.next[id] = cur // the next sample's prev: sample swaps them
	if !ok || s.dt <= 0 {
		return r
	}
	for i := range cur {
		if cur[i] >= prev[i] {
			r[i] = float64(cur[i]-prev[i]) / s.dt
		}
	}
	return r
}

func (s *sampler) rows(out []row, src watch.Source, now time.Time, get func(evKey) (lastChange, bool)) []row {
	switch {
	case src.Breaker != nil:
		out = append(out, s.breaker(src.Name, "", src.Breaker.Snapshot(), now, get))
	case src.Breakers != nil:
		for _, snap := range src.Breakers.Snapshots() {
			out = append(out, s.breaker(src.Name, snap.Name, snap, now, get))
		}
	case src.Bulkhead != nil:
		out = append(out, s.bulkhead(src.Name, "", src.Bulkhead.Snapshot()))
	case src.Bulkheads != nil:
		for _, snap := range src.Bulkheads.Snapshots() {
			out = append(out, s.bulkhead(src.Name, snap.Name, snap))
		}
	case src.Partitioned != nil:
		snap := src.Partitioned.Snapshot()
		for _, part := range snap.Partitions {
			out = append(out, s.partition(src.Name, part, snap.Available))
		}
	case src.Pool != nil:
		out = append(out, s.pool(src.Name, src.Pool.Snapshot()))
	case src.Budget != nil:
		out = append(out, s.budget(src.Name, src.Budget.Snapshot()))
	case src.Throttler != nil:
		out = append(out, s.throttler(src.Name, src.Throttler.Snapshot()))
	case src.Concurrency != nil:
		out = append(out, s.concurrency(src.Name, src.Concurrency.Snapshot()))
	case src.Hedge != nil:
		out = append(out, s.hedge(src.Name, src.Hedge.Snapshot()))
	case src.Limiter != nil:
		out = append(out, s.limiter(src.Name, "", src.Limiter.Snapshot()))
	case src.Limiters != nil:
		for _, snap := range src.Limiters.Snapshots() {
			out = append(out, s.limiter(src.Name, snap.Name, snap))
		}
	case src.Balancer != nil:
		out = append(out, s.balancer(src.Name, src.Balancer.Snapshot()))
	}
	return out
}

func newRow(kind watch.Kind, group, name string) row {
	k := kind.String()
	return row{ID: k + "/" + group + "/" + name, Kind: k, Group: group, Name: name}
}

func (s *sampler) breaker(group, key string, snap circuit.Snapshot, now time.Time, get func(evKey) (lastChange, bool)) row {
	r := newRow(watch.Circuit, group, key)
	r.State = snap.State.String()
	switch snap.State {
	case circuit.Closed:
		r.Level = "ok"
	case circuit.HalfOpen:
		r.Level = "warn"
	case circuit.Open, circuit.ForcedOpen:
		r.Level = "bad"
	default:
		r.Level = "off"
	}
	rate := s.rates(r.ID, [4]uint64{snap.Rejected})
	lc, known := get(evKey{"circuit", group, key})
	if open := snap.State == circuit.Open || snap.State == circuit.HalfOpen || snap.State == circuit.ForcedOpen; open {
		r.Why = snap.Reason
		switch {
		case known && lc.openCode != "":
			r.Code = lc.openCode
		case snap.Rule != circuit.RuleNone:
			// No state change seen (the Dashboard is not the breaker's
			// listener): the rule from the snapshot, in its own words.
			r.Code = snap.Rule.String()
		}
		if snap.State == circuit.Open && known && lc.to == "open" && lc.delay > 0 {
			if until := lc.at.Add(lc.delay); until.After(now) {
				r.Until = until.UnixMilli()
			}
		}
	}
	sat := percent(snap.Saturated, snap.Calls)
	r.Fields = []string{
		"calls", itoa(snap.Calls),
		"failure", pct(snap.FailureRate),
		"slow", pct(snap.SlowCallRate),
		"saturated", pct(sat),
		"rejected_s", perSec(rate[0]),
		"opens", utoa(snap.Opens),
	}
	if snap.State == circuit.HalfOpen {
		r.Fields = append(r.Fields, "trials", strconv.Itoa(snap.TrialCalls)+" ended, "+strconv.Itoa(snap.TrialFailures)+" failed, "+strconv.Itoa(snap.TrialsInFlight)+" in flight")
	}
	r.Values = [2]float64{round2(snap.FailureRate), round2(snap.SlowCallRate)}
	r.Max = 100
	return r
}

func (s *sampler) bulkhead(group, key string, snap bulkhead.Snapshot) row {
	r := newRow(watch.Bulkhead, group, key)
	rate := s.rates(r.ID, [4]uint64{snap.Rejected, snap.Acquired})
	r.State, r.Level = loadState(rate[0], snap.Available == 0 || snap.Waiting > 0, snap.Active > 0)
	r.Fields = []string{
		"in_use", strconv.Itoa(snap.Active),
		"max", strconv.Itoa(snap.MaxConcurrent),
		"waiting", strconv.Itoa(snap.Waiting),
		"rejected_s", perSec(rate[0]),
		"admitted_s", perSec(rate[1]),
	}
	r.Values = [2]float64{float64(snap.Active), float64(snap.Waiting)}
	r.Max = float64(snap.MaxConcurrent)
	return r
}

// partition is the row of one partition of a partitioned bulkhead: in the
// bulkhead's group, as a registry's key. available is the whole
// bulkhead's free permits.
func (s *sampler) partition(group string, snap bulkhead.PartitionSnapshot, available int) row {
	r := newRow(watch.Bulkhead, group, snap.Name)
	rate := s.rates(r.ID, [4]uint64{snap.Rejected, snap.Acquired})
	// Full: its calls queue, or no permit is free for its next one.
	r.State, r.Level = loadState(rate[0], snap.Waiting > 0 || available == 0, snap.Active > 0)
	if r.State == "busy" && snap.Borrowed > 0 {
		r.State = "borrowing"
	}
	r.Fields = []string{
		"in_use", strconv.Itoa(snap.Active),
		"guaranteed", strconv.Itoa(snap.Guaranteed),
		"borrowed", strconv.Itoa(snap.Borrowed),
		"waiting", strconv.Itoa(snap.Waiting),
		"rejected_s", perSec(rate[0]),
		"admitted_s", perSec(rate[1]),
	}
	r.Values = [2]float64{float64(snap.Active), float64(snap.Waiting)}
	r.Max = float64(snap.Guaranteed)
	return r
}

// loadState names the state of a bulkhead-shaped thing.
func loadState(rejectedPerSec float64, full, busy bool) (state, level string) {
	switch {
	case rejectedPerSec > 0:
		return "rejecting", "bad"
	case full:
		return "full", "warn"
	case busy:
		return "busy", "ok"
	}
	return "idle", "ok"
}

func (s *sampler) pool(group string, snap bulkhead.PoolSnapshot) row {
	r := newRow(watch.Pool, group, "")
	rate := s.rates(r.ID, [4]uint64{snap.Rejected, snap.Dropped, snap.Completed})
	full := snap.Busy >= snap.Workers && (snap.QueueCapacity == 0 || snap.Queued >= snap.QueueCapacity)
	r.State, r.Level = loadState(rate[0]+rate[1], full, snap.Busy > 0)
	r.Fields = []string{
		"busy", strconv.Itoa(snap.Busy),
		"workers", strconv.Itoa(snap.Workers),
		"queued", strconv.Itoa(snap.Queued),
		"queue", strconv.Itoa(snap.QueueCapacity),
		"rejected_s", perSec(rate[0]),
		"dropped_s", perSec(rate[1]),
		"done_s", perSec(rate[2]),
	}
	r.Values = [2]float64{float64(snap.Busy), float64(snap.Queued)}
	r.Max = float64(snap.Workers)
	return r
}

func (s *sampler) budget(group string, snap budget.Snapshot) row {
	r := newRow(watch.Budget, group, "")
	rate := s.rates(r.ID, [4]uint64{snap.Refused, snap.Withdrawals})
	r.State, r.Level = "ok", "ok"
	if rate[0] > 0 {
		r.State, r.Level = "refusing", "bad"
	}
	r.Fields = []string{
		"balance", num(snap.Balance),
		"refused", utoa(snap.Refused),
		"refused_s", perSec(rate[0]),
		"granted_s", perSec(rate[1]),
	}
	r.Values = [2]float64{round2(snap.Balance), round2(rate[0])}
	return r
}

func (s *sampler) throttler(group string, snap budget.ThrottleSnapshot) row {
	r := newRow(watch.Throttler, group, "")
	rate := s.rates(r.ID, [4]uint64{snap.Rejected})
	r.State, r.Level = "ok", "ok"
	if snap.RejectProbability > 0 {
		r.State, r.Level = "throttling", "warn"
	}
	r.Fields = []string{
		"reject_p", pct(100 * snap.RejectProbability),
		"rejected_s", perSec(rate[0]),
		"requests", itoa(snap.Requests),
		"accepts", itoa(snap.Accepts),
	}
	r.Values = [2]float64{round2(100 * snap.RejectProbability), 0}
	r.Max = 100
	return r
}

func (s *sampler) concurrency(group string, snap budget.ConcurrencySnapshot) row {
	r := newRow(watch.Concurrency, group, "")
	rate := s.rates(r.ID, [4]uint64{snap.Refused, snap.Granted})
	r.State, r.Level = "ok", "ok"
	if rate[0] > 0 {
		r.State, r.Level = "refusing", "bad"
	}
	r.Fields = []string{
		"in_flight", itoa(snap.InFlight),
		"limit", itoa(snap.Limit),
		"active", itoa(snap.Active),
		"refused_s", perSec(rate[0]),
		"granted_s", perSec(rate[1]),
	}
	r.Values = [2]float64{float64(snap.InFlight), float64(snap.Limit)}
	return r
}

func (s *sampler) hedge(group string, snap hedge.Snapshot) row {
	r := newRow(watch.Hedge, group, "")
	rate := s.rates(r.ID, [4]uint64{snap.Sent, snap.Won, snap.Calls})
	r.State, r.Level = "on", "ok"
	if snap.Overloaded {
		r.State, r.Level = "off: overload", "warn"
	}
	r.Fields = []string{
		"sent", utoa(snap.Sent),
		"won", utoa(snap.Won),
		"sent_s", perSec(rate[0]),
		"won_s", perSec(rate[1]),
		"extra", pct(snap.ExtraPercent()),
		"delay", snap.Delay.Round(10 * time.Microsecond).String(),
		"suppressed", utoa(snap.Suppressed()),
	}
	r.Values = [2]float64{round2(rate[0]), round2(rate[1])}
	return r
}

func (s *sampler) limiter(group, key string, snap limit.Snapshot) row {
	r := newRow(watch.Limiter, group, key)
	rate := s.rates(r.ID, [4]uint64{snap.Rejected, snap.Acquired})
	r.State, r.Level = loadState(rate[0], snap.InFlight >= snap.Limit || snap.Waiting > 0, snap.InFlight > 0)
	if r.State == "full" {
		r.State = "at limit"
	}
	r.Fields = []string{
		"limit", strconv.Itoa(snap.Limit),
		"in_flight", strconv.Itoa(snap.InFlight),
		"waiting", strconv.Itoa(snap.Waiting),
		"rejected_s", perSec(rate[0]),
		"admitted_s", perSec(rate[1]),
		"algorithm", snap.Algorithm,
	}
	r.Values = [2]float64{float64(snap.InFlight), float64(snap.Limit)}
	return r
}

func (s *sampler) balancer(group string, snap balance.Snapshot) row {
	r := newRow(watch.Balancer, group, "")
	var ejected []string
	for _, h := range snap.Hosts {
		if h.Ejected {
			ejected = append(ejected, h.Addr+" ("+h.Reason+")")
		}
	}
	n := len(snap.Hosts)
	switch {
	case snap.Ejected == 0:
		r.State, r.Level = "all active", "ok"
	case snap.Ejected >= n:
		r.State, r.Level = "all ejected", "bad"
	default:
		r.State, r.Level = "ejecting", "warn"
	}
	r.Fields = []string{
		"hosts", strconv.Itoa(n),
		"ejected", strconv.Itoa(snap.Ejected),
		"max_ejected", strconv.Itoa(snap.MaxEjected),
		"strategy", snap.Strategy,
	}
	if len(ejected) > 0 {
		r.Fields = append(r.Fields, "ejected_hosts", strings.Join(ejected, ", "))
	}
	r.Values = [2]float64{float64(snap.Ejected), 0}
	r.Max = float64(n)
	return r
}

// reasonRows returns the counted series, the most first, with their rates,
// and their total rate.
func (s *sampler) reasonRows() ([]reasonRow, float64) {
	out := []reasonRow{} // [] in JSON, not null
	var total float64
	next := make(map[reasonKey]uint64, len(s.prevReasons))
	s.d.reasons.totals(func(k reasonKey, n uint64) {
		next[k] = n
		var rate float64
		if prev, ok := s.prevReasons[k]; ok && s.dt > 0 && n >= prev {
			rate = float64(n-prev) / s.dt
		} else if !ok && s.dt > 0 {
			rate = float64(n) / s.dt // a series born since the previous sample
		}
		total += rate
		code := k.code
		if code == "" {
			code = "(none)"
		}
		out = append(out, reasonRow{Kind: k.kind.String(), Source: k.source, Name: k.name, Code: code, Total: n, Rate: round2(rate)})
	})
	s.prevReasons = next
	slices.SortFunc(out, func(a, b reasonRow) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Source, b.Source),
			strings.Compare(a.Name, b.Name), strings.Compare(a.Code, b.Code))
	})
	return out, round2(total)
}

func percent(n, of int64) float64 {
	if of <= 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

func round2(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return math.Round(f*100) / 100
}

func itoa(n int64) string  { return strconv.FormatInt(n, 10) }
func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

// num formats a quantity with at most one decimal.
func num(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

// pct formats a percentage: one decimal below 10%, none above.
func pct(f float64) string {
	if f > 0 && f < 10 {
		return strconv.FormatFloat(f, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(f, 'f', 0, 64) + "%"
}

// perSec formats a rate per second.
func perSec(f float64) string {
	if f == 0 {
		return "0"
	}
	if f < 10 {
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	return strconv.FormatFloat(f, 'f', 0, 64)
}
