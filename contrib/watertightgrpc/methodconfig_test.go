package watertightgrpc_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/deadline"
	"github.com/watertight-go/watertight/retry"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

// methodOfOther is a method of a service the test server does not serve:
// it answers UNIMPLEMENTED without reaching a handler.
const methodOfOther = "/watertight.test.Elsewhere/Call"

// perMethod counts the calls each method's handler saw, and fails them all
// with code.
type perMethod struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *perMethod) failAll(code codes.Code, pushback string) func(context.Context, string, string) (string, error) {
	return func(ctx context.Context, method, _ string) (string, error) {
		p.mu.Lock()
		if p.n == nil {
			p.n = map[string]int{}
		}
		p.n[method]++
		p.mu.Unlock()
		return "", fail(ctx, code, pushback)
	}
}

func (p *perMethod) count(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[method]
}

// attemptsOf returns the attempts that a call's error reports: those of an
// ExhaustedError or a SkippedError, else 1.
func attemptsOf(err error) int {
	var ex *retry.ExhaustedError
	if errors.As(err, &ex) {
		return ex.Attempts
	}
	var sk *retry.SkippedError
	if errors.As(err, &sk) {
		return sk.Attempts
	}
	return 1
}

// retryTimes is fastRetry with n attempts.
func retryTimes(n int) retry.Config {
	rc := fastRetry()
	rc.MaxAttempts = n
	return rc
}

// parsed parses a service config that must be valid.
func parsed(t *testing.T, js string) []watertightgrpc.MethodConfig {
	t.Helper()
	mcs, err := watertightgrpc.ParseServiceConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return mcs
}

// One method with 2 attempts, another with 4, both failing UNAVAILABLE:
// the server sees 2 and 4, each call ends exhausted, and the entry's
// policy reports to the interceptor's listener.
func TestMethodsPerMethodAttempts(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			var pm perMethod
			var l events
			e := clientEnv(t, tr, &testServer{call: pm.failAll(codes.Unavailable, "")}, watertightgrpc.ClientConfig{
				Name:     "test",
				Listener: &l,
				Methods: []watertightgrpc.MethodConfig{
					{Names: []string{methodCall}, Retry: retryTimes(2)},
					{Names: []string{methodOther}, Retry: retryTimes(4)},
				},
			})
			for _, c := range []struct {
				method string
				want   int
			}{{methodCall, 2}, {methodOther, 4}} {
				_, err := e.call(bounded(t), c.method, "x")
				if status.Code(err) != codes.Unavailable || !errors.Is(err, retry.ErrExhausted) {
					t.Fatalf("%s: err = %v; want UNAVAILABLE, exhausted", c.method, err)
				}
				if n := pm.count(c.method); n != c.want {
					t.Errorf("%s: server saw %d calls, want %d", c.method, n, c.want)
				}
			}
			sched := l.of(watertight.EventRetryScheduled)
			if len(sched) != 1+3 || sched[0].Key != methodCall || sched[0].Name != "test" || sched[3].Key != methodOther {
				t.Fatalf("retry events = %+v; want 1 for %s then 3 for %s, Name test", sched, methodCall, methodOther)
			}
		})
	}
}

// A parsed retryPolicy retries the codes it lists, and those only: here
// INTERNAL, which the default classification never retries, and not
// UNAVAILABLE, which it does.
func TestMethodsRetryableCodes(t *testing.T) {
	mcs := parsed(t, `{"methodConfig": [{
		"name": [{"service": "watertight.test.Test"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["internal", 8]}
	}]}`)
	for _, c := range []struct {
		code codes.Code
		want int // calls the server sees
		ok   bool
	}{
		{codes.Internal, 2, true},          // listed: retried, and the second call succeeds
		{codes.ResourceExhausted, 2, true}, // listed by number, without pushback: retried
		{codes.Unavailable, 1, false},      // not listed: not retried
		{codes.DeadlineExceeded, 1, false}, // not listed
	} {
		ts := &testServer{call: failFirst(1, c.code)}
		e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Methods: mcs})
		_, err := e.call(bounded(t), methodCall, "x")
		if (err == nil) != c.ok || (!c.ok && status.Code(err) != c.code) {
			t.Errorf("%v: err = %v; want success %v", c.code, err, c.ok)
		}
		if n := ts.count(); n != c.want {
			t.Errorf("%v: server saw %d calls, want %d", c.code, n, c.want)
		}
		if !c.ok && (errors.Is(err, retry.ErrExhausted) || errors.Is(err, retry.ErrNotIdempotent)) {
			t.Errorf("%v: err = %v; want the status as it is: the code is not retryable", c.code, err)
		}
	}
}

// An exact method name beats a service entry, which beats "*", whatever
// the order of the entries.
func TestMethodsPrecedence(t *testing.T) {
	anyStatus := func(err error) bool { _, ok := status.FromError(err); return ok }
	exact := watertightgrpc.MethodConfig{Names: []string{methodCall}, Retry: retryTimes(2)}
	service := watertightgrpc.MethodConfig{Names: []string{"/" + svcName + "/*"}, Retry: retryTimes(3)}
	def := watertightgrpc.MethodConfig{Names: []string{"*"}, Retry: retryTimes(4)}
	for _, mc := range []*watertightgrpc.MethodConfig{&exact, &service, &def} {
		mc.Retry.Retryable = anyStatus // UNIMPLEMENTED too, for methodOfOther
	}
	for _, order := range [][]watertightgrpc.MethodConfig{{exact, service, def}, {def, service, exact}, {service, def, exact}} {
		var pm perMethod
		e := clientEnv(t, "bufconn", &testServer{call: pm.failAll(codes.Unavailable, "")}, watertightgrpc.ClientConfig{Methods: order})
		for _, c := range []struct {
			method string
			code   codes.Code
			want   int
		}{{methodCall, codes.Unavailable, 2}, {methodOther, codes.Unavailable, 3}, {methodOfOther, codes.Unimplemented, 4}} {
			_, err := e.call(bounded(t), c.method, "x")
			if status.Code(err) != c.code || !errors.Is(err, retry.ErrExhausted) {
				t.Fatalf("%s: err = %v; want %v, exhausted", c.method, err, c.code)
			}
			if n := attemptsOf(err); n != c.want {
				t.Errorf("%s: %d attempts, want %d", c.method, n, c.want)
			}
			if c.code == codes.Unavailable && pm.count(c.method) != c.want {
				t.Errorf("%s: server saw %d calls, want %d", c.method, pm.count(c.method), c.want)
			}
		}
	}
}

// A negative pushback is never retried, even when its code is listed.
func TestMethodsNegativePushbackIsNotRetried(t *testing.T) {
	mcs := parsed(t, `{"methodConfig": [{"name": [{}],
		"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`)
	for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted} {
		var pm perMethod
		e := clientEnv(t, "bufconn", &testServer{call: pm.failAll(code, "-1")}, watertightgrpc.ClientConfig{Methods: mcs})
		_, err := e.call(bounded(t), methodCall, "x")
		if status.Code(err) != code || !watertight.IsOverloaded(err) || errors.Is(err, retry.ErrExhausted) {
			t.Errorf("%v: err = %v; want %v, overloaded, not retried", code, err, code)
		}
		if n := pm.count(methodCall); n != 1 {
			t.Errorf("%v: server saw %d calls, want 1", code, n)
		}
	}
}

// A listed code with a non-negative pushback is retried after the
// pushback's wait.
func TestMethodsPositivePushbackIsWaited(t *testing.T) {
	mcs := parsed(t, `{"methodConfig": [{"name": [{"service": "watertight.test.Test", "method": "Call"}],
		"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`)
	var l events
	var pm perMethod
	e := clientEnv(t, "bufconn", &testServer{call: pm.failAll(codes.ResourceExhausted, "30")}, watertightgrpc.ClientConfig{Methods: mcs, Listener: &l})
	_, err := e.call(bounded(t), methodCall, "x")
	if !errors.Is(err, retry.ErrExhausted) || pm.count(methodCall) != 2 {
		t.Fatalf("err = %v after %d calls; want exhausted after 2", err, pm.count(methodCall))
	}
	if s := l.of(watertight.EventRetryScheduled); len(s) != 1 || s[0].Delay != 30*time.Millisecond {
		t.Fatalf("retry events %+v; want one, after the pushback's 30ms", s)
	}
}

// A method with no entry keeps ClientConfig.Retry: not retried unless it is
// idempotent; retried with Retry's attempts when it is.
func TestMethodsOtherMethodsKeepRetry(t *testing.T) {
	var pm perMethod
	cfg := watertightgrpc.ClientConfig{
		Retry:   retryTimes(3),
		Methods: []watertightgrpc.MethodConfig{{Names: []string{methodOther}, Retry: retryTimes(2)}},
	}
	e := clientEnv(t, "bufconn", &testServer{call: pm.failAll(codes.Unavailable, "")}, cfg)
	_, err := e.call(bounded(t), methodCall, "x")
	if status.Code(err) != codes.Unavailable || !errors.Is(err, retry.ErrNotIdempotent) || pm.count(methodCall) != 1 {
		t.Fatalf("err = %v after %d calls; want UNAVAILABLE skipped as not idempotent after 1", err, pm.count(methodCall))
	}
	// Marked idempotent by its context: ClientConfig.Retry's 3 attempts.
	_, err = e.call(retry.Idempotent(bounded(t)), methodCall, "x")
	if !errors.Is(err, retry.ErrExhausted) || pm.count(methodCall) != 1+3 {
		t.Fatalf("err = %v after %d calls; want exhausted after 1+3", err, pm.count(methodCall))
	}
	// A method with an entry, marked by its context too: the entry's 2.
	_, err = e.call(retry.Idempotent(bounded(t)), methodOther, "x")
	if !errors.Is(err, retry.ErrExhausted) || pm.count(methodOther) != 2 {
		t.Fatalf("err = %v after %d calls; want exhausted after 2", err, pm.count(methodOther))
	}
	// Listed in Idempotent as well as having no entry: ClientConfig.Retry.
	cfg.Idempotent = []string{methodCall}
	var pm2 perMethod
	e = clientEnv(t, "bufconn", &testServer{call: pm2.failAll(codes.Unavailable, "")}, cfg)
	if _, err = e.call(bounded(t), methodCall, "x"); !errors.Is(err, retry.ErrExhausted) || pm2.count(methodCall) != 3 {
		t.Fatalf("err = %v after %d calls; want exhausted after 3", err, pm2.count(methodCall))
	}
}

// A DEADLINE_EXCEEDED at the caller's own deadline is not retried, even
// when listed; one from the server's own timeout, earlier, is.
func TestMethodsOwnDeadlineIsNotRetried(t *testing.T) {
	mcs := parsed(t, `{"methodConfig": [{"name": [{"service": "watertight.test.Test"}],
		"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["DEADLINE_EXCEEDED"]}}]}`)
	ts := &testServer{call: func(ctx context.Context, method, _ string) (string, error) {
		if method == methodOther { // the server's own timeout, at once
			return "", status.Error(codes.DeadlineExceeded, "downstream timed out")
		}
		<-ctx.Done()
		return "", status.FromContextError(ctx.Err()).Err()
	}}
	margin := 100 * time.Millisecond
	var l events
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{Methods: mcs, Listener: &l, Deadline: propagator(t, deadline.Config{Margin: margin})})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := e.call(ctx, methodCall, "x")
	if status.Code(err) != codes.DeadlineExceeded || watertight.IsRejection(err) || errors.Is(err, retry.ErrExhausted) || ts.count() != 1 {
		t.Fatalf("err = %v after %d calls; want the server's DEADLINE_EXCEEDED, not retried", err, ts.count())
	}
	if sched := l.of(watertight.EventRetryScheduled); len(sched) != 0 {
		t.Fatalf("a retry was scheduled (%+v); the caller's own deadline is not retried", sched)
	}
	_, err = e.call(bounded(t), methodOther, "x")
	if !errors.Is(err, retry.ErrExhausted) || attemptsOf(err) != 4 || ts.count() != 1+4 {
		t.Fatalf("err = %v after %d calls; want exhausted after 4 more", err, ts.count())
	}
}

// A method with an entry is idempotent, so it is hedged when Hedge is set.
func TestMethodsHedged(t *testing.T) {
	cancelled := make(chan codes.Code, 1)
	ts := &testServer{call: slowFirst(cancelled)}
	e := clientEnv(t, "bufconn", ts, watertightgrpc.ClientConfig{
		Hedge:   hedgePolicy(t, nil),
		Methods: []watertightgrpc.MethodConfig{{Names: []string{"*"}, Retry: retryTimes(2)}},
	})
	if out, err := e.call(bounded(t), methodCall, "x"); err != nil || out != "hedge won" {
		t.Fatalf("call = %q, %v; want the hedge's answer", out, err)
	}
	<-cancelled
	if n := ts.count(); n != 2 {
		t.Fatalf("server saw %d calls, want 2", n)
	}
}

// The pipelines of an entry are built once per key and kept; they follow
// the key's breaker.
func TestMethodsUseTheKeysBreaker(t *testing.T) {
	var pm perMethod
	br := breakers(t, circuit.Config{})
	e := clientEnv(t, "bufconn", &testServer{call: pm.failAll(codes.Unavailable, "")}, watertightgrpc.ClientConfig{
		Breakers: br,
		Methods:  []watertightgrpc.MethodConfig{{Names: []string{"*"}, Retry: retryTimes(2)}},
	})
	for range 3 {
		if _, err := e.call(bounded(t), methodCall, "x"); !errors.Is(err, retry.ErrExhausted) {
			t.Fatalf("err = %v; want exhausted", err)
		}
	}
	b, _ := br.Get(methodCall)
	if s := b.Snapshot(); s.Calls != 6 || s.Failures != 6 {
		t.Fatalf("breaker counted %d calls, %d failures; want every attempt: 6, 6", s.Calls, s.Failures)
	}
}

func TestMethodsConfigErrors(t *testing.T) {
	svc := "/" + svcName + "/"
	cases := []struct {
		ms   []watertightgrpc.MethodConfig
		want string
	}{
		{[]watertightgrpc.MethodConfig{{}}, "ClientConfig.Methods[0].Names must not be empty"},
		{[]watertightgrpc.MethodConfig{{Names: []string{methodCall, "Call"}}}, `ClientConfig.Methods[0].Names[1] must be "*", "/package.Service/Method" or "/package.Service/*", got "Call"`},
		{[]watertightgrpc.MethodConfig{{Names: []string{"**"}}}, "Methods[0].Names[0] must be"},
		{[]watertightgrpc.MethodConfig{{Names: []string{"/a/b/c"}}}, "Methods[0].Names[0] must be"},
		{[]watertightgrpc.MethodConfig{{Names: []string{"/svc/Ca*"}}}, "Methods[0].Names[0] must be"},
		{[]watertightgrpc.MethodConfig{{Names: []string{"*"}}, {Names: []string{methodCall, "*"}}}, `Methods[1].Names[1] "*" names the same methods as Methods[0].Names[0]`},
		{[]watertightgrpc.MethodConfig{{Names: []string{svc + "*"}}, {Names: []string{svc}}}, `Methods[1].Names[0] "` + svc + `" names the same methods as Methods[0].Names[0]`},
		{[]watertightgrpc.MethodConfig{{Names: []string{methodCall, methodCall}}}, "Methods[0].Names[1]"},
		{[]watertightgrpc.MethodConfig{{Names: []string{methodCall}}, {Names: []string{"*"}, Retry: retry.Config{MaxAttempts: -1}}}, "ClientConfig.Methods[1].Retry: retry: Config.MaxAttempts must be >= 0"},
	}
	for _, c := range cases {
		_, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{Methods: c.ms})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "watertightgrpc: ") {
			t.Errorf("Methods %+v: err = %v; want it to contain %s", c.ms, err, c.want)
		}
	}
}

// retryableOf returns the parsed policy's Retryable, checked to be set.
func retryableOf(t *testing.T, mc watertightgrpc.MethodConfig) func(error) bool {
	t.Helper()
	if mc.Retry.Retryable == nil {
		t.Fatal("Retry.Retryable is nil")
	}
	return mc.Retry.Retryable
}

// overloadedStatus is an error with a status that carries the overloaded
// signal.
type overloadedStatus struct{ st *status.Status }

func (e overloadedStatus) Error() string              { return e.st.Message() }
func (e overloadedStatus) GRPCStatus() *status.Status { return e.st }
func (e overloadedStatus) Overloaded() bool           { return true }

func TestParseServiceConfig(t *testing.T) {
	const policy = `"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`
	valid := []struct {
		name     string
		js       string
		names    [][]string
		attempts []int
	}{
		{"empty object", `{}`, nil, nil},
		{"no entries", `{"methodConfig": []}`, nil, nil},
		{"null entries", `{"methodConfig": null, "loadBalancingConfig": [{"round_robin": {}}]}`, nil, nil},
		{"names", `{"methodConfig": [{"name": [{"service": "pkg.Svc", "method": "M"}, {"service": "pkg.Svc2"}, {}], ` + policy + `}]}`,
			[][]string{{"/pkg.Svc/M", "/pkg.Svc2/*", "*"}}, []int{4}},
		{"missing service is the default", `{"methodConfig": [{"name": [{"service": ""}], ` + policy + `}]}`, [][]string{{"*"}}, []int{4}},
		{"skipped and ignored fields", `{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}, "methodConfig": [
			{"name": [{"service": "a.B"}], "timeout": "1s", "waitForReady": true},
			{"name": [{"service": "a.C", "method": "D"}], "timeout": "2s", "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s",
				"maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": [14], "extra": true}},
			{"name": [{"service": "a.C"}], "retryPolicy": null, "hedgingPolicy": null}]}`,
			[][]string{{"/a.C/D"}}, []int{2}},
		{"attempts capped at 5", `{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 10, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
			[][]string{{"*"}}, []int{5}},
		{"huge attempts capped", `{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 123456789012345678901234567890, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
			[][]string{{"*"}}, []int{5}},
		{"maxBackoff below initialBackoff", `{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 3, "initialBackoff": "2s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
			[][]string{{"*"}}, []int{3}},
	}
	for _, c := range valid {
		t.Run(c.name, func(t *testing.T) {
			mcs, err := watertightgrpc.ParseServiceConfig([]byte(c.js))
			if err != nil {
				t.Fatal(err)
			}
			if len(mcs) != len(c.names) {
				t.Fatalf("%d entries, want %d: %+v", len(mcs), len(c.names), mcs)
			}
			for i, mc := range mcs {
				if strings.Join(mc.Names, " ") != strings.Join(c.names[i], " ") || mc.Retry.MaxAttempts != c.attempts[i] {
					t.Errorf("entry %d: names %q, %d attempts; want %q, %d", i, mc.Names, mc.Retry.MaxAttempts, c.names[i], c.attempts[i])
				}
				if mc.Retry.Backoff == nil || mc.Retry.Backoff.Config().Jitter != backoff.Full {
					t.Errorf("entry %d: backoff %+v; want full jitter", i, mc.Retry.Backoff)
				}
			}
			if _, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{Methods: mcs}); err != nil {
				t.Fatalf("the interceptor refuses the parsed entries: %v", err)
			}
		})
	}

	entry := func(rp string) string {
		return `{"methodConfig": [{"name": [{}]}, {"name": [{"service": "s.S"}], "retryPolicy": {` + rp + `}}]}`
	}
	const (
		att = `"maxAttempts": 3, `
		ib  = `"initialBackoff": "0.1s", `
		mb  = `"maxBackoff": "1s", `
		bm  = `"backoffMultiplier": 2, `
		rsc = `"retryableStatusCodes": ["UNAVAILABLE"]`
	)
	invalid := []struct {
		name, js, want string
	}{
		{"empty", ``, "service config: want a JSON object"},
		{"null", `null`, "service config: want a JSON object"},
		{"array", `[]`, "service config: want a JSON object"},
		{"bad json", `{"methodConfig": [`, "service config: want a JSON object"},
		{"methodConfig not an array", `{"methodConfig": {}}`, "methodConfig: want an array"},
		{"entry not an object", `{"methodConfig": [{}, 3]}`, "methodConfig[1]: want an object, got 3"},
		{"name not an array", `{"methodConfig": [{"name": {"service": "a.B"}}]}`, "methodConfig[0].name: want an array"},
		{"name entry not an object", `{"methodConfig": [{"name": ["a.B"]}]}`, `methodConfig[0].name[0]: want an object`},
		{"service not a string", `{"methodConfig": [{"name": [{"service": 1}]}]}`, "methodConfig[0].name[0].service: want a string, got 1"},
		{"method not a string", `{"methodConfig": [{"name": [{"service": "a.B", "method": []}]}]}`, "methodConfig[0].name[0].method: want a string"},
		{"method without service", `{"methodConfig": [{"name": [{"method": "M"}]}]}`, `methodConfig[0].name[0]: want a service with the method "M"`},
		{"method wildcard", `{"methodConfig": [{"name": [{"service": "a.B", "method": "*"}]}]}`, "methodConfig[0].name[0].method: want a method name"},
		{"service with a slash", `{"methodConfig": [{"name": [{"service": "a/B"}]}]}`, `methodConfig[0].name[0]: want a service like "package.Service"`},
		{"service with a star", `{"methodConfig": [{"name": [{"service": "a*"}]}]}`, `methodConfig[0].name[0]: want a service like`},
		{"method with a space", `{"methodConfig": [{"name": [{"service": "a.B", "method": "M N"}]}]}`, `methodConfig[0].name[0]: want a service like`},
		{"duplicate name", `{"methodConfig": [{"name": [{"service": "a.B"}]}, {"name": [{"service": "a.C"}, {"service": "a.B"}]}]}`, "methodConfig[1].name[1]: /a.B/* is also named by methodConfig[0]"},
		{"duplicate default", `{"methodConfig": [{"name": [{}, {"service": ""}]}]}`, "methodConfig[0].name[1]: * is also named by methodConfig[0]"},
		{"hedging", `{"methodConfig": [{"name": [{}]}, {"name": [{"service": "a.B"}], "hedgingPolicy": {"maxAttempts": 2}}]}`, "methodConfig[1].hedgingPolicy: not read: hedging is configured with ClientConfig.Hedge"},
		{"both policies", `{"methodConfig": [{"name": [{}], "retryPolicy": {}, "hedgingPolicy": {}}]}`, "methodConfig[0]: has both a retryPolicy and a hedgingPolicy"},
		{"no names", `{"methodConfig": [{"retryPolicy": {` + att + ib + mb + bm + rsc + `}}]}`, "methodConfig[0].name: want at least one name"},
		{"empty names", `{"methodConfig": [{"name": [], "retryPolicy": {` + att + ib + mb + bm + rsc + `}}]}`, "methodConfig[0].name: want at least one name"},
		{"retryPolicy not an object", `{"methodConfig": [{"name": [{}], "retryPolicy": 5}]}`, "methodConfig[0].retryPolicy: want an object, got 5"},
		{"missing maxAttempts", entry(ib + mb + bm + rsc), "methodConfig[1].retryPolicy.maxAttempts: missing"},
		{"missing initialBackoff", entry(att + mb + bm + rsc), "methodConfig[1].retryPolicy.initialBackoff: missing"},
		{"missing maxBackoff", entry(att + ib + bm + rsc), "methodConfig[1].retryPolicy.maxBackoff: missing"},
		{"missing multiplier", entry(att + ib + mb + rsc), "methodConfig[1].retryPolicy.backoffMultiplier: missing"},
		{"missing codes", entry(att + ib + mb + `"backoffMultiplier": 2`), "methodConfig[1].retryPolicy.retryableStatusCodes: missing"},
		{"one attempt", entry(`"maxAttempts": 1, ` + ib + mb + bm + rsc), "methodConfig[1].retryPolicy.maxAttempts: want an integer >= 2 (the first attempt included), got 1"},
		{"negative attempts", entry(`"maxAttempts": -3, ` + ib + mb + bm + rsc), "maxAttempts: want an integer >= 2"},
		{"fractional attempts", entry(`"maxAttempts": 2.5, ` + ib + mb + bm + rsc), "maxAttempts: want an integer >= 2"},
		{"attempts as a string", entry(`"maxAttempts": "3", ` + ib + mb + bm + rsc), `maxAttempts: want an integer >= 2 (the first attempt included), got "3"`},
		{"go duration", entry(att + `"initialBackoff": "100ms", ` + mb + bm + rsc), `methodConfig[1].retryPolicy.initialBackoff: want a duration like "0.1s" (decimal seconds and an "s"), got "100ms"`},
		{"duration number", entry(att + ib + `"maxBackoff": 1, ` + bm + rsc), `maxBackoff: want a duration like "0.1s", got 1`},
		{"zero duration", entry(att + `"initialBackoff": "0s", ` + mb + bm + rsc), `initialBackoff: want a duration > 0, got "0s"`},
		{"negative duration", entry(att + ib + `"maxBackoff": "-1s", ` + bm + rsc), `maxBackoff: want a duration > 0, got "-1s"`},
		{"ten fraction digits", entry(att + `"initialBackoff": "0.1000000000s", ` + mb + bm + rsc), `initialBackoff: want a duration like "0.1s"`},
		{"no whole part", entry(att + `"initialBackoff": ".5s", ` + mb + bm + rsc), `initialBackoff: want a duration like "0.1s"`},
		{"empty fraction", entry(att + `"initialBackoff": "1.s", ` + mb + bm + rsc), `initialBackoff: want a duration like "0.1s"`},
		{"too long", entry(att + ib + `"maxBackoff": "9223372037s", ` + bm + rsc), `maxBackoff: want a duration of at most 9223372036s`},
		{"exponent", entry(att + `"initialBackoff": "1e3s", ` + mb + bm + rsc), `initialBackoff: want a duration like "0.1s"`},
		{"zero multiplier", entry(att + ib + mb + `"backoffMultiplier": 0, ` + rsc), "backoffMultiplier: want a number > 0"},
		{"multiplier below 1", entry(att + ib + mb + `"backoffMultiplier": 0.5, ` + rsc), "backoffMultiplier: want a number >= 1: watertight's backoff does not shrink"},
		{"multiplier string", entry(att + ib + mb + `"backoffMultiplier": "2", ` + rsc), `backoffMultiplier: want a number >= 1, got "2"`},
		{"multiplier infinite", entry(att + ib + mb + `"backoffMultiplier": 1e999, ` + rsc), "backoffMultiplier: want a finite number >= 1"},
		{"no codes", entry(att + ib + mb + bm + `"retryableStatusCodes": []`), `retryableStatusCodes: want a non-empty array of status codes like ["UNAVAILABLE"], got []`},
		{"codes not an array", entry(att + ib + mb + bm + `"retryableStatusCodes": "UNAVAILABLE"`), `retryableStatusCodes: want a non-empty array`},
		{"unknown code", entry(att + ib + mb + bm + `"retryableStatusCodes": ["UNAVAILABLE", "BUSY"]`), `retryableStatusCodes[1]: want a status code other than OK, by name ("UNAVAILABLE") or number (1 to 16), got "BUSY"`},
		{"OK", entry(att + ib + mb + bm + `"retryableStatusCodes": ["OK"]`), `retryableStatusCodes[0]: want a status code other than OK`},
		{"code 0", entry(att + ib + mb + bm + `"retryableStatusCodes": [0]`), `retryableStatusCodes[0]: want a status code other than OK`},
		{"code 17", entry(att + ib + mb + bm + `"retryableStatusCodes": [17]`), `retryableStatusCodes[0]: want a status code other than OK`},
		{"code object", entry(att + ib + mb + bm + `"retryableStatusCodes": [{}]`), `retryableStatusCodes[0]: want a status code`},
	}
	for _, c := range invalid {
		t.Run(c.name, func(t *testing.T) {
			mcs, err := watertightgrpc.ParseServiceConfig([]byte(c.js))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "watertightgrpc: service config") {
				t.Fatalf("ParseServiceConfig(%s) = %+v, %v; want an error containing %s", c.js, mcs, err, c.want)
			}
		})
	}
}

// The parsed backoff is gRPC's: the n-th retry waits up to
// min(initialBackoff·backoffMultiplier^(n-1), maxBackoff).
func TestParseServiceConfigBackoff(t *testing.T) {
	for _, c := range []struct {
		initial, max string
		mult         string
		want         []time.Duration // the bound of retries 1, 2, ...
	}{
		{"0.1s", "1s", "2", []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}},
		{"0.1s", "0.25s", "1.5", []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 225 * time.Millisecond, 250 * time.Millisecond}},
		{"0.5s", "0.5s", "1", []time.Duration{500 * time.Millisecond, 500 * time.Millisecond}},
		{"2s", "1s", "3", []time.Duration{time.Second, time.Second}},
		{"0.000000001s", "0.000000001s", "10", []time.Duration{1, 1}},
	} {
		js := `{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 5, "initialBackoff": "` + c.initial + `", "maxBackoff": "` +
			c.max + `", "backoffMultiplier": ` + c.mult + `, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
		mc := parsed(t, js)[0]
		bc := mc.Retry.Backoff.Config()
		if bc.Jitter != backoff.Full {
			t.Fatalf("%s: jitter %v, want full", js, bc.Jitter)
		}
		bc.Jitter = backoff.None // the bound itself
		b, err := backoff.New(bc)
		if err != nil {
			t.Fatal(err)
		}
		for n, want := range c.want {
			if got := b.Delay(n+1, 0); math.Abs(float64(got-want)) > float64(want)*1e-6 {
				t.Errorf("initial %s, max %s, multiplier %s: retry %d waits up to %v, want %v", c.initial, c.max, c.mult, n+1, got, want)
			}
		}
	}
}

// The parsed Retryable: listed codes only, never the overloaded signal,
// never an error without a status.
func TestParseServiceConfigRetryable(t *testing.T) {
	mc := parsed(t, `{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["unavailable", "Aborted", 4]}}]}`)[0]
	retryable := retryableOf(t, mc)
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{status.Error(codes.Unavailable, "x"), true},
		{status.Error(codes.Aborted, "x"), true},
		{status.Error(codes.DeadlineExceeded, "x"), true},
		{status.Error(codes.Internal, "x"), false},
		{status.Error(codes.ResourceExhausted, "x"), false},
		{retry.After(status.Error(codes.Unavailable, "x"), time.Second), true},
		{overloadedStatus{status.New(codes.Unavailable, "x")}, false},
		{errors.New("no status"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func FuzzParseServiceConfig(f *testing.F) {
	const policy = `"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"methodConfig": []}`, `{"methodConfig": null}`, `{"methodConfig": {}}`, `{"methodConfig": [3]}`,
		`{"methodConfig": [{"name": [{"service": "pkg.Svc", "method": "M"}, {"service": "pkg.Svc2"}, {}], ` + policy + `}]}`,
		`{"methodConfig": [{"name": [{"service": "a.B"}], "timeout": "1s"}, {"name": [{"service": "a.C", "method": "D"}], ` + policy + `}]}`,
		`{"methodConfig": [{"name": [{"service": "a.B"}]}, {"name": [{"service": "a.B"}], ` + policy + `}]}`,
		`{"methodConfig": [{"name": [{"method": "M"}], ` + policy + `}]}`,
		`{"methodConfig": [{"name": [{"service": "a/B"}], ` + policy + `}]}`,
		`{"methodConfig": [{"name": [{"service": "a.B", "method": "*"}], ` + policy + `}]}`,
		`{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2}}]}`,
		`{"methodConfig": [{"name": [{}], "retryPolicy": {}, "hedgingPolicy": {}}]}`,
		`{"methodConfig": [{"retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": [14]}}]}`,
		`{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 99999999999999999999999, "initialBackoff": "9223372036.854775807s", "maxBackoff": "0.000000001s", "backoffMultiplier": 1.0000000001, "retryableStatusCodes": ["data_loss", 16]}}]}`,
		`{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 1, "initialBackoff": "100ms", "maxBackoff": "-1s", "backoffMultiplier": 0.5, "retryableStatusCodes": ["OK"]}}]}`,
		`{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 1e999, "retryableStatusCodes": [17, {}]}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		mcs, err := watertightgrpc.ParseServiceConfig(js)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "watertightgrpc: service config") {
				t.Fatalf("error without the prefix: %v", err)
			}
			return
		}
		for i, mc := range mcs {
			if len(mc.Names) == 0 || mc.Retry.MaxAttempts < 2 || mc.Retry.MaxAttempts > 5 || mc.Retry.Backoff == nil || mc.Retry.Retryable == nil {
				t.Fatalf("entry %d: %+v", i, mc)
			}
		}
		if _, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{Methods: mcs}); err != nil {
			t.Fatalf("the interceptor refuses what the parser accepted: %v", err)
		}
	})
}

// BenchmarkUnaryClientMethods is BenchmarkUnaryClient's call through an
// entry of ClientConfig.Methods: an exact name, a service entry and the
// default.
func BenchmarkUnaryClientMethods(b *testing.B) {
	br, err := circuit.NewRegistry(circuit.RegistryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	bh, err := bulkhead.NewRegistry(bulkhead.RegistryConfig{Config: bulkhead.Config{MaxConcurrent: 1000}})
	if err != nil {
		b.Fatal(err)
	}
	icpt, err := watertightgrpc.UnaryClientInterceptor(watertightgrpc.ClientConfig{
		Breakers: br, Bulkheads: bh,
		Methods: []watertightgrpc.MethodConfig{
			{Names: []string{methodCall}},
			{Names: []string{"/" + svcName + "/*"}},
			{Names: []string{"*"}},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range []struct{ name, method string }{{"exact", methodCall}, {"service", methodOther}, {"default", methodOfOther}} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := icpt(ctx, m.method, nil, nil, nil, nopInvoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := icpt(ctx, methodCall, nil, nil, nil, nopInvoker); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
