package watertightconfig

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
)

// Write writes the file as it resolves: every instance with every field,
// after the defaults section and the package defaults, each line commented
// with where its value comes from ("line 12", "defaults, line 4" or
// "default"). Fields that have no effect (slow_call_rate_threshold without
// slow_call_duration, for one) are written as comments. The output is
// itself a valid configuration file that resolves to the same instances.
func (f *File) Write(w io.Writer) error {
	var o out
	n := len(f.Breakers) + len(f.Bulkheads) + len(f.Retries) + len(f.Budgets) + len(f.ConcurrencyBudgets) + len(f.Timeouts) + len(f.Hedges) + len(f.Limiters)
	o.comment(fmt.Sprintf("%s: %s: every field as it resolves.", f.Name, count(n, "instance")))
	if len(f.Breakers) > 0 {
		o.line("breakers:", "")
		for _, name := range sortedKeys(f.Breakers) {
			b := f.Breakers[name]
			o.instance(name, b.src)
			writeBreaker(&o, b)
		}
	}
	if len(f.Bulkheads) > 0 {
		o.line("bulkheads:", "")
		for _, name := range sortedKeys(f.Bulkheads) {
			b := f.Bulkheads[name]
			o.instance(name, b.src)
			c := b.Config
			o.field(b.src, "max_concurrent", strconv.Itoa(c.MaxConcurrent))
			o.field(b.src, "max_wait", durOr(c.MaxWait, c.MaxWait < 0, "unlimited"))
			field := o.field
			if c.MaxWait == 0 {
				field = func(s source, key, val string) { o.unused(s, key, val, "max_wait is 0s") }
			}
			if c.MaxWaiters == 0 {
				if c.MaxWait != 0 {
					o.comment(fmt.Sprintf("    # max_waiters: %d (the default: %d, or max_concurrent if larger)", max(bulkhead.DefaultMaxWaiters, c.MaxConcurrent), bulkhead.DefaultMaxWaiters))
				}
			} else {
				field(b.src, "max_waiters", keys(c.MaxWaiters))
			}
			field(b.src, "queue_order", c.QueueOrder.String())
			o.field(b.src, "max_keys", keys(b.MaxKeys))
		}
	}
	if len(f.Retries) > 0 {
		o.line("retries:", "")
		for _, name := range sortedKeys(f.Retries) {
			r := f.Retries[name]
			o.instance(name, r.src)
			writeRetry(&o, r)
		}
	}
	if len(f.Budgets) > 0 {
		o.line("budgets:", "")
		for _, name := range sortedKeys(f.Budgets) {
			b := f.Budgets[name]
			o.instance(name, b.src)
			c := b.Config
			o.field(b.src, "ratio", num(c.Ratio))
			o.field(b.src, "max_tokens", strconv.Itoa(c.MaxTokens))
			mps := num(c.MinPerSecond)
			if c.MinPerSecond < 0 {
				mps = "off"
			}
			o.field(b.src, "min_per_second", mps)
		}
	}
	if len(f.ConcurrencyBudgets) > 0 {
		o.line("concurrency_budgets:", "")
		for _, name := range sortedKeys(f.ConcurrencyBudgets) {
			b := f.ConcurrencyBudgets[name]
			o.instance(name, b.src)
			c := b.Config
			if c.Percent < 0 {
				o.field(b.src, "percent", "off")
			} else {
				o.field(b.src, "percent", pct(c.Percent))
			}
			o.field(b.src, "min_concurrency", strconv.Itoa(max(c.MinConcurrency, 0))) // negative (no floor) is 0 in a file
		}
	}
	if len(f.Timeouts) > 0 {
		o.line("timeouts:", "")
		for _, name := range sortedKeys(f.Timeouts) {
			t := f.Timeouts[name]
			o.instance(name, t.src)
			c := t.Config
			o.field(t.src, "timeout", durOr(c.Timeout, c.Timeout < 0, "off"))
			if c.Timeout < 0 {
				o.unused(t.src, "abandon", strconv.FormatBool(c.Abandon), "timeout is off")
			} else {
				o.field(t.src, "abandon", strconv.FormatBool(c.Abandon))
			}
		}
	}
	if len(f.Hedges) > 0 {
		o.line("hedges:", "")
		for _, name := range sortedKeys(f.Hedges) {
			h := f.Hedges[name]
			o.instance(name, h.src)
			writeHedge(&o, h)
		}
	}
	if len(f.Limiters) > 0 {
		o.line("limiters:", "")
		for _, name := range sortedKeys(f.Limiters) {
			l := f.Limiters[name]
			o.instance(name, l.src)
			c, s := l.Config, l.src
			o.field(s, "algorithm", l.Algorithm)
			o.field(s, "initial_limit", strconv.Itoa(c.InitialLimit))
			o.field(s, "min_limit", strconv.Itoa(c.MinLimit))
			o.field(s, "max_limit", strconv.Itoa(c.MaxLimit))
			o.field(s, "max_wait", durOr(c.MaxWait, c.MaxWait < 0, "unlimited"))
			field := o.field
			if c.MaxWait == 0 {
				field = func(s source, key, val string) { o.unused(s, key, val, "max_wait is 0s") }
			}
			if c.MaxWaiters != 0 {
				field(s, "max_waiters", keys(c.MaxWaiters))
			}
			field(s, "queue_order", c.QueueOrder.String())
			o.field(s, "window_samples", strconv.Itoa(c.WindowSamples))
			o.field(s, "min_window", durOr(c.MinWindow, c.MinWindow < 0, "off"))
			o.field(s, "max_keys", keys(l.MaxKeys))
		}
	}
	return o.flush(w)
}

func writeHedge(o *out, h Hedge) {
	c, s := h.Config, h.src
	if _, set := s.set["delay"]; !set && c.Percentile > 0 {
		o.line("    delay: "+dur(c.Delay), "default: min_delay")
	} else {
		o.field(s, "delay", dur(c.Delay))
	}
	if c.Percentile == 0 {
		o.field(s, "percentile", "off")
		o.unused(s, "min_delay", "", "percentile is off")
		o.unused(s, "min_samples", "", "percentile is off")
		o.unused(s, "window", "", "percentile is off")
	} else {
		o.field(s, "percentile", num(c.Percentile))
		o.field(s, "min_delay", dur(c.MinDelay))
		o.field(s, "min_samples", strconv.Itoa(c.MinSamples))
		o.field(s, "window", dur(c.Window))
	}
	mh := strconv.Itoa(c.MaxHedges)
	if c.MaxHedges < 0 {
		mh = "off"
	}
	o.field(s, "max_hedges", mh)
	o.field(s, "idempotent", strconv.FormatBool(c.Idempotent))
	o.field(s, "overload_cooldown", durOr(c.OverloadCooldown, c.OverloadCooldown < 0, "off"))
	for _, ref := range [][2]string{{"budget", h.Budget}, {"breaker", h.Breaker}, {"bulkhead", h.Bulkhead}} {
		if ref[1] != "" {
			o.field(s, ref[0], scalarText(ref[1]))
		} else {
			o.comment("    # " + ref[0] + ": none")
		}
	}
}

func writeBreaker(o *out, b Breaker) {
	c, s := b.Config, b.src
	o.field(s, "window_type", c.WindowType.String())
	if c.WindowType == circuit.TimeBased {
		o.unused(s, "window_size", strconv.Itoa(c.WindowSize), "the window is time-based")
		o.field(s, "window_duration", dur(c.WindowDuration))
		o.field(s, "window_buckets", strconv.Itoa(c.WindowBuckets))
	} else {
		o.field(s, "window_size", strconv.Itoa(c.WindowSize))
		o.unused(s, "window_duration", dur(c.WindowDuration), "the window is count-based")
		o.unused(s, "window_buckets", strconv.Itoa(c.WindowBuckets), "the window is count-based")
	}
	o.field(s, "min_calls", strconv.Itoa(c.MinCalls))
	if c.FailureRateThreshold < 0 {
		o.field(s, "failure_rate_threshold", "off")
	} else {
		o.field(s, "failure_rate_threshold", pct(c.FailureRateThreshold))
	}
	o.field(s, "consecutive_failures", intOff(c.ConsecutiveFailures))
	o.field(s, "failure_count_threshold", intOff(c.FailureCountThreshold))
	o.field(s, "slow_call_duration", durOr(c.SlowCallDuration, c.SlowCallDuration <= 0, "off"))
	if c.SlowCallDuration <= 0 {
		o.unused(s, "slow_call_rate_threshold", pct(c.SlowCallRateThreshold), "slow_call_duration is off")
	} else {
		o.field(s, "slow_call_rate_threshold", pct(c.SlowCallRateThreshold))
	}
	o.field(s, "count_saturation", strconv.FormatBool(c.CountSaturation))
	o.field(s, "open_duration", dur(max(c.OpenDuration, 0))) // negative (no wait) is 0 in a file
	o.field(s, "open_duration_multiplier", num(c.OpenDurationMultiplier))
	if c.OpenDuration < 0 {
		o.unused(s, "max_open_duration", dur(c.MaxOpenDuration), "open_duration is 0: no wait")
	} else {
		o.field(s, "max_open_duration", dur(c.MaxOpenDuration))
	}
	o.field(s, "open_jitter", num(max(c.OpenJitter, 0))) // negative (none) is 0 in a file
	o.field(s, "half_open_calls", strconv.Itoa(c.HalfOpenCalls))
	o.field(s, "half_open_successes", intOff(c.HalfOpenSuccesses))
	o.field(s, "max_half_open_wait", durOr(c.MaxHalfOpenWait, c.MaxHalfOpenWait < 0, "unlimited"))
	o.field(s, "max_keys", keys(b.MaxKeys))
}

func writeRetry(o *out, r Retry) {
	c, s := r.Config, r.src
	o.field(s, "max_attempts", strconv.Itoa(c.MaxAttempts))
	o.field(s, "idempotent", strconv.FormatBool(c.Idempotent))
	field := o.field
	if c.MaxAttempts == 1 {
		field = func(s source, key, val string) {
			o.unused(s, key, val, "max_attempts is 1")
		}
	}
	field(s, "max_delay", dur(c.MaxDelay))
	field(s, "min_attempt_time", dur(c.MinAttemptTime))
	if r.Budget != "" {
		field(s, "budget", scalarText(r.Budget))
	} else if c.MaxAttempts != 1 {
		o.comment("    # budget: none")
	}
	if r.Concurrency != "" {
		field(s, "concurrency", scalarText(r.Concurrency))
	} else if c.MaxAttempts != 1 {
		o.comment("    # concurrency: none")
	}
	if c.MaxAttempts == 1 {
		field(s, "budget", "")
		field(s, "concurrency", "")
		for _, k := range []string{"jitter", "base", "cap", "multiplier"} {
			field(s, "backoff."+k, "")
		}
		return
	}
	o.line("    backoff:", "")
	bc := r.Backoff
	o.field(s, "backoff.jitter", bc.Jitter.String())
	o.field(s, "backoff.base", dur(bc.Base))
	o.field(s, "backoff.cap", dur(bc.Cap))
	if bc.Jitter == backoff.Constant || bc.Jitter == backoff.Decorrelated {
		o.unused(s, "backoff.multiplier", num(bc.Multiplier), "jitter is "+bc.Jitter.String())
	} else {
		o.field(s, "backoff.multiplier", num(bc.Multiplier))
	}
}

// out collects lines and their comments, to align the comments.
type out struct {
	lines [][2]string // text, comment
}

func (o *out) line(text, comment string) { o.lines = append(o.lines, [2]string{text, comment}) }

// comment adds a line that is all comment, not aligned.
func (o *out) comment(text string) {
	if !strings.HasPrefix(strings.TrimSpace(text), "#") {
		text = "# " + text
	}
	o.lines = append(o.lines, [2]string{text, "\x00"})
}

func (o *out) instance(name string, s source) {
	o.line("  "+scalarText(name)+":", where(s.line, false))
}

// field writes key: val, indented by its depth, commented with its origin.
func (o *out) field(s source, key, val string) {
	k, depth := key, 2
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		k, depth = key[i+1:], 3
	}
	c := "default"
	if or, ok := s.set[key]; ok {
		c = where(or.line, or.defaults)
	}
	o.line(strings.Repeat("  ", depth)+k+": "+val, c)
}

// unused notes, as a comment, a field that was set (in the defaults: an
// instance that sets one is refused) but has no effect on this instance.
func (o *out) unused(s source, key, val, why string) {
	or, ok := s.set[key]
	if !ok {
		return
	}
	k, depth := key, 2
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		k, depth = key[i+1:], 3
	}
	o.comment(strings.Repeat("  ", depth) + "# " + k + ": no effect, " + why + " (" + where(or.line, or.defaults) + ")")
}

func where(line int, defaults bool) string {
	switch {
	case line <= 0:
		return ""
	case defaults:
		return "defaults, line " + strconv.Itoa(line)
	}
	return "line " + strconv.Itoa(line)
}

func (o *out) flush(w io.Writer) error {
	col := 0
	for _, l := range o.lines {
		if l[1] != "" && l[1] != "\x00" {
			col = max(col, len(l[0]))
		}
	}
	col = min(col+2, 60)
	bw := bufio.NewWriter(w)
	for _, l := range o.lines {
		bw.WriteString(l[0])
		if l[1] != "" && l[1] != "\x00" {
			bw.WriteString(strings.Repeat(" ", max(1, col-len(l[0]))))
			bw.WriteString("# ")
			bw.WriteString(l[1])
		}
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// dur formats a duration as time.ParseDuration reads it, without the
// trailing zero units of time.Duration.String ("1m", not "1m0s").
func dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func durOr(d time.Duration, kw bool, word string) string {
	if kw {
		return word
	}
	return dur(d)
}

// intOff writes a count whose zero turns a rule off.
func intOff(n int) string {
	if n <= 0 {
		return "off"
	}
	return strconv.Itoa(n)
}

func keys(n int) string {
	if n < 0 {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func pct(p float64) string { return strconv.Quote(num(p) + "%") }

// scalarText writes s as a YAML string scalar, quoted when it must be.
func scalarText(s string) string {
	if s == "<<" {
		return `"<<"` // else a merge key
	}
	b, err := yaml.Marshal(s)
	if err != nil {
		return strconv.Quote(s)
	}
	return strings.TrimSuffix(string(b), "\n")
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
