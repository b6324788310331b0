package watertightgrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/budget"
	"github.com/watertight-go/watertight/retry"
)

// MethodConfig gives some methods a retry policy of their own: one entry of
// ClientConfig.Methods, the counterpart of a methodConfig entry with a
// retryPolicy in a gRPC service config (see ParseServiceConfig).
//
// A method named by an entry is idempotent: its unary calls are retried
// (or hedged, with ClientConfig.Hedge) under the entry's policy, whatever
// ClientConfig.Idempotent says. As in gRPC, the most specific name wins: a
// full method name beats a service entry, which beats "*".
type MethodConfig struct {
	// Names lists the methods the entry applies to: a full method name
	// "/package.Service/Method"; "/package.Service/*" (or
	// "/package.Service/") for every method of a service; or "*" for every
	// method that no other entry names. It must not be empty, and a name
	// may be listed once across all the entries ("/package.Service/*" and
	// "/package.Service/" are the same name).
	Names []string
	// Retry is the retry policy of those methods, with the meaning of
	// ClientConfig.Retry: zero fields take the retry package's defaults
	// (three attempts, full-jitter backoff, no budget); if Retryable is nil,
	// retry.IsTransient decides, which follows ClassifyCode and the
	// pushback; if Name is empty, ClientConfig.Name. Retry.Idempotent is not
	// read: the calls of these methods are idempotent. Share one
	// Retry.Budget between the entries (and ClientConfig.Retry) to bound
	// the retries towards one dependency as a whole.
	Retry retry.Config
}

// methodTable is ClientConfig.Methods, validated and indexed: the lookup
// of a method's entry is two map reads at most, and allocates nothing.
type methodTable struct {
	retry    []retry.Config // per entry, validated, with the client's name
	exact    map[string]int // "/package.Service/Method" → entry
	services map[string]int // "/package.Service/" → entry
	def      int            // the entry of "*"; -1 if none
}

// newMethodTable validates ms (ClientConfig.Methods); name is
// ClientConfig.Name.
func newMethodTable(ms []MethodConfig, name string) (*methodTable, error) {
	t := &methodTable{retry: make([]retry.Config, len(ms)), def: -1}
	where := map[string]string{} // normalised name → where it was listed
	for i, m := range ms {
		if len(m.Names) == 0 {
			return nil, fmt.Errorf("watertightgrpc: ClientConfig.Methods[%d].Names must not be empty", i)
		}
		for j, n := range m.Names {
			at := fmt.Sprintf("Methods[%d].Names[%d]", i, j)
			key, service, err := methodName(n)
			if err != nil {
				return nil, fmt.Errorf("watertightgrpc: ClientConfig.%s must be \"*\", \"/package.Service/Method\" or \"/package.Service/*\", got %q", at, n)
			}
			if prev, dup := where[key]; dup {
				return nil, fmt.Errorf("watertightgrpc: ClientConfig.%s %q names the same methods as %s: a name may be listed once", at, n, prev)
			}
			where[key] = at
			switch {
			case key == "*":
				t.def = i
			case service:
				if t.services == nil {
					t.services = make(map[string]int)
				}
				t.services[key] = i
			default:
				if t.exact == nil {
					t.exact = make(map[string]int)
				}
				t.exact[key] = i
			}
		}
		rc := m.Retry
		if rc.Name == "" {
			rc.Name = name
		}
		rc.Idempotent = true
		if _, err := retry.New(rc); err != nil {
			return nil, fmt.Errorf("watertightgrpc: ClientConfig.Methods[%d].Retry: %w", i, err)
		}
		t.retry[i] = rc
	}
	return t, nil
}

// methodName checks a name of MethodConfig.Names and returns it
// normalised: "*", "/package.Service/" for a service (service true), or
// the full method name. The rules are those of ClientConfig.Idempotent
// (methodSet), plus "*".
func methodName(n string) (key string, service bool, err error) {
	if n == "*" {
		return n, false, nil
	}
	var s methodSet
	if err := s.add(n); err != nil {
		return "", false, err
	}
	if len(s.services) > 0 {
		return n[:strings.LastIndexByte(n, '/')+1], true, nil
	}
	return n, false, nil
}

// lookup returns the entry of method: its exact name's, else its
// service's, else the default's; -1 if none.
func (t *methodTable) lookup(method string) int {
	if i, ok := t.exact[method]; ok {
		return i
	}
	if len(t.services) > 0 {
		if j := strings.LastIndexByte(method, '/'); j > 0 {
			if i, ok := t.services[method[:j+1]]; ok {
				return i
			}
		}
	}
	return t.def
}

// maxServiceConfigAttempts is the most attempts ParseServiceConfig gives a
// method: gRPC caps a retryPolicy's maxAttempts at 5, and so does
// ParseServiceConfig.
const maxServiceConfigAttempts = 5

// ParseServiceConfig reads the retry settings of a gRPC service config
// (https://github.com/grpc/grpc/blob/master/doc/service_config.md, gRFC A6),
// for ClientConfig.Methods: each entry of its methodConfig array that has a
// retryPolicy becomes a MethodConfig. What it reads:
//
//   - name: each {"service": "pkg.Svc", "method": "M"} becomes
//     "/pkg.Svc/M"; {"service": "pkg.Svc"} becomes "/pkg.Svc/*"; {} (no
//     service) becomes "*". A name may appear once in the whole config.
//   - retryPolicy.maxAttempts: an integer >= 2, the first attempt included;
//     as in gRPC, a value above 5 is taken as 5.
//   - retryPolicy.initialBackoff, maxBackoff: durations > 0 in protobuf's
//     JSON form, decimal seconds with an "s" suffix ("0.1s", "1.5s").
//   - retryPolicy.backoffMultiplier: a number >= 1 (gRPC allows any number
//     > 0; watertight's backoff never shrinks).
//   - retryPolicy.retryableStatusCodes: a non-empty array of status codes,
//     by name ("UNAVAILABLE", in any case) or number (14).
//
// The waits are gRPC's: full jitter, the n-th retry waits
// random(0, min(initialBackoff·backoffMultiplier^(n-1), maxBackoff)). The
// policy retries the listed codes and nothing else, and never an answer
// that carries the overloaded signal (a negative grpc-retry-pushback-ms),
// nor a DEADLINE_EXCEEDED that is the caller's own deadline (see
// ClientConfig.Deadline); a non-negative pushback sets the wait of a listed
// code. An error without a gRPC status is not retried. Retry.Budget,
// Retry.Listener and the other fields are left zero: set them on the
// result.
//
// Entries with neither a retryPolicy nor a hedgingPolicy (a timeout, say)
// are skipped, as are the other fields of the config (loadBalancingConfig;
// retryThrottling is read by ParseRetryThrottling). An entry
// with a hedgingPolicy is an error: hedging is configured with
// ClientConfig.Hedge. The error names the entry and the field, and says
// what is wanted.
//
// Keep gRPC's own retries off on the channel (grpc.WithDisableRetry, or do
// not give gRPC this service config's retryPolicy): each layer would
// multiply the other's attempts.
func ParseServiceConfig(js []byte) ([]MethodConfig, error) {
	var sc struct {
		MethodConfig json.RawMessage `json:"methodConfig"`
	}
	if isNull(bytes.TrimSpace(js)) {
		return nil, errors.New("watertightgrpc: service config: want a JSON object, got nothing")
	}
	if err := json.Unmarshal(js, &sc); err != nil {
		return nil, fmt.Errorf("watertightgrpc: service config: want a JSON object: %w", err)
	}
	var entries []json.RawMessage
	if !isNull(sc.MethodConfig) {
		if err := json.Unmarshal(sc.MethodConfig, &entries); err != nil {
			return nil, fmt.Errorf("watertightgrpc: service config methodConfig: want an array, got %s", shown(sc.MethodConfig))
		}
	}
	var out []MethodConfig
	where := map[string]int{} // normalised name → entry
	for i, raw := range entries {
		bad := func(field, format string, args ...any) error {
			return fmt.Errorf("watertightgrpc: service config methodConfig[%d]%s: %s", i, field, fmt.Sprintf(format, args...))
		}
		var mc struct {
			Name          json.RawMessage `json:"name"`
			RetryPolicy   json.RawMessage `json:"retryPolicy"`
			HedgingPolicy json.RawMessage `json:"hedgingPolicy"`
		}
		if isNull(raw) || json.Unmarshal(raw, &mc) != nil {
			return nil, bad("", "want an object, got %s", shown(raw))
		}
		names, err := parseNames(mc.Name, i, where)
		if err != nil {
			return nil, err
		}
		retrying, hedging := !isNull(mc.RetryPolicy), !isNull(mc.HedgingPolicy)
		switch {
		case retrying && hedging:
			return nil, bad("", "has both a retryPolicy and a hedgingPolicy: gRPC allows one; watertight hedges with ClientConfig.Hedge")
		case hedging:
			return nil, bad(".hedgingPolicy", "not read: hedging is configured with ClientConfig.Hedge (a hedge.Policy)")
		case !retrying:
			continue
		}
		if len(names) == 0 {
			return nil, bad(".name", "want at least one name for the retryPolicy, got %s", shown(mc.Name))
		}
		rc, err := parseRetryPolicy(mc.RetryPolicy, i)
		if err != nil {
			return nil, err
		}
		out = append(out, MethodConfig{Names: names, Retry: rc})
	}
	return out, nil
}

// parseNames reads the name array of methodConfig[i], and records its
// names in where, failing on a name already there.
func parseNames(raw json.RawMessage, i int, where map[string]int) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("watertightgrpc: service config methodConfig[%d].name: want an array of {\"service\": ..., \"method\": ...}, got %s", i, shown(raw))
	}
	names := make([]string, 0, len(list))
	for j, r := range list {
		bad := func(field, format string, args ...any) error {
			return fmt.Errorf("watertightgrpc: service config methodConfig[%d].name[%d]%s: %s", i, j, field, fmt.Sprintf(format, args...))
		}
		var n struct {
			Service json.RawMessage `json:"service"`
			Method  json.RawMessage `json:"method"`
		}
		if isNull(r) || json.Unmarshal(r, &n) != nil {
			return nil, bad("", "want an object {\"service\": ..., \"method\": ...}, got %s", shown(r))
		}
		var svc, method string
		if !isNull(n.Service) && json.Unmarshal(n.Service, &svc) != nil {
			return nil, bad(".service", "want a string, got %s", shown(n.Service))
		}
		if !isNull(n.Method) && json.Unmarshal(n.Method, &method) != nil {
			return nil, bad(".method", "want a string, got %s", shown(n.Method))
		}
		var name string
		switch {
		case svc == "" && method != "":
			return nil, bad("", "want a service with the method %q (an empty service means every method, and takes no method)", method)
		case svc == "":
			name = "*"
		case method == "":
			name = "/" + svc + "/*"
		default:
			if strings.ContainsRune(method, '*') {
				return nil, bad(".method", "want a method name, got %q: leave method out for every method of the service", method)
			}
			name = "/" + svc + "/" + method
		}
		key, _, err := methodName(name)
		if err != nil || strings.ContainsAny(svc, "/*") {
			return nil, bad("", "want a service like \"package.Service\" and a method like \"Method\", without '/', '*' or spaces, got %s", shown(r))
		}
		if prev, dup := where[key]; dup {
			return nil, bad("", "%s is also named by methodConfig[%d]: a name may appear once", name, prev)
		}
		where[key] = i
		names = append(names, name)
	}
	return names, nil
}

// parseRetryPolicy reads the retryPolicy of methodConfig[i].
func parseRetryPolicy(raw json.RawMessage, i int) (retry.Config, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("watertightgrpc: service config methodConfig[%d].retryPolicy%s: %s", i, field, fmt.Sprintf(format, args...))
	}
	var rp struct {
		MaxAttempts          json.RawMessage `json:"maxAttempts"`
		InitialBackoff       json.RawMessage `json:"initialBackoff"`
		MaxBackoff           json.RawMessage `json:"maxBackoff"`
		BackoffMultiplier    json.RawMessage `json:"backoffMultiplier"`
		RetryableStatusCodes json.RawMessage `json:"retryableStatusCodes"`
	}
	if json.Unmarshal(raw, &rp) != nil {
		return retry.Config{}, bad("", "want an object, got %s", shown(raw))
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{
		{"maxAttempts", rp.MaxAttempts}, {"initialBackoff", rp.InitialBackoff}, {"maxBackoff", rp.MaxBackoff},
		{"backoffMultiplier", rp.BackoffMultiplier}, {"retryableStatusCodes", rp.RetryableStatusCodes},
	} {
		if isNull(f.raw) {
			return retry.Config{}, bad("."+f.name, "missing: gRPC's retryPolicy requires maxAttempts, initialBackoff, maxBackoff, backoffMultiplier and retryableStatusCodes")
		}
	}

	attempts, ok := parseAttempts(rp.MaxAttempts)
	if !ok {
		return retry.Config{}, bad(".maxAttempts", "want an integer >= 2 (the first attempt included), got %s", shown(rp.MaxAttempts))
	}
	var initial, maxB time.Duration
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		d    *time.Duration
	}{{"initialBackoff", rp.InitialBackoff, &initial}, {"maxBackoff", rp.MaxBackoff, &maxB}} {
		var s string
		if json.Unmarshal(f.raw, &s) != nil {
			return retry.Config{}, bad("."+f.name, "want a duration like \"0.1s\", got %s", shown(f.raw))
		}
		d, err := parseDuration(s)
		if err != nil {
			return retry.Config{}, bad("."+f.name, "want a duration %s, got %s", err, shown(f.raw))
		}
		*f.d = d
	}
	mult, err := strconv.ParseFloat(string(rp.BackoffMultiplier), 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return retry.Config{}, bad(".backoffMultiplier", "want a number >= 1, got %s", shown(rp.BackoffMultiplier))
	case math.IsInf(mult, 0) || math.IsNaN(mult):
		return retry.Config{}, bad(".backoffMultiplier", "want a finite number >= 1, got %s", shown(rp.BackoffMultiplier))
	case mult <= 0:
		return retry.Config{}, bad(".backoffMultiplier", "want a number > 0 (and >= 1 here), got %s", shown(rp.BackoffMultiplier))
	case mult < 1:
		return retry.Config{}, bad(".backoffMultiplier", "want a number >= 1: watertight's backoff does not shrink (gRPC allows > 0), got %s", shown(rp.BackoffMultiplier))
	}
	set, err := parseCodes(rp.RetryableStatusCodes, bad)
	if err != nil {
		return retry.Config{}, err
	}

	// gRPC's n-th retry waits random(0, min(initial·mult^(n-1), max));
	// backoff's Full jitter draws from [0, min(Cap, Base·mult^n)]: Base is
	// initial/mult. Base above Cap (a maxBackoff below initialBackoff, which
	// gRPC allows) waits up to Cap every time, as gRPC does.
	base := initial
	if f := float64(initial) / mult; f < float64(initial) {
		base = max(time.Duration(f), 1)
	}
	b, err := backoff.New(backoff.Config{Jitter: backoff.Full, Base: min(base, maxB), Cap: maxB, Multiplier: mult})
	if err != nil { // not reached: every field was checked
		return retry.Config{}, bad("", "%v", err)
	}
	return retry.Config{MaxAttempts: attempts, Backoff: b, Retryable: set.retryable}, nil
}

// parseAttempts reads maxAttempts: a JSON integer >= 2, capped at
// maxServiceConfigAttempts.
func parseAttempts(raw json.RawMessage) (int, bool) {
	s := string(raw)
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false // a string, a negative number, anything else
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false // a fraction or an exponent
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil { // too large for 64 bits: still above the cap
		return maxServiceConfigAttempts, true
	}
	if n < 2 {
		return 0, false
	}
	return int(min(n, maxServiceConfigAttempts)), true
}

// maxSeconds is the most whole seconds a time.Duration holds.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// parseDuration parses a duration in protobuf's JSON form: decimal seconds,
// at most nine digits after the point, with an "s" suffix ("1s", "0.1s",
// "1.000000001s"). It must be > 0. The error says what is wanted.
func parseDuration(s string) (time.Duration, error) {
	syntax := errors.New(`like "0.1s" (decimal seconds and an "s")`)
	num, ok := strings.CutSuffix(s, "s")
	if !ok {
		return 0, syntax
	}
	neg := strings.HasPrefix(num, "-")
	if neg {
		num = num[1:]
	}
	whole, frac, dot := strings.Cut(num, ".")
	if !digits(whole) || dot && !digits(frac) || len(frac) > 9 {
		return 0, syntax
	}
	var secs int64
	for i := 0; i < len(whole); i++ {
		secs = secs*10 + int64(whole[i]-'0')
		if secs > maxSeconds {
			return 0, fmt.Errorf("of at most %ds", maxSeconds)
		}
	}
	var nanos int64
	for i := 0; i < 9; i++ {
		nanos *= 10
		if i < len(frac) {
			nanos += int64(frac[i] - '0')
		}
	}
	if secs == maxSeconds && nanos > math.MaxInt64%int64(time.Second) {
		return 0, fmt.Errorf("of at most %ds", maxSeconds)
	}
	d := time.Duration(secs)*time.Second + time.Duration(nanos)
	if neg || d <= 0 {
		return 0, errors.New("> 0")
	}
	return d, nil
}

// digits reports whether s is one or more decimal digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// codeNames are the status codes by their service-config names.
var codeNames = map[string]codes.Code{
	"CANCELLED": codes.Canceled, "UNKNOWN": codes.Unknown, "INVALID_ARGUMENT": codes.InvalidArgument,
	"DEADLINE_EXCEEDED": codes.DeadlineExceeded, "NOT_FOUND": codes.NotFound, "ALREADY_EXISTS": codes.AlreadyExists,
	"PERMISSION_DENIED": codes.PermissionDenied, "RESOURCE_EXHAUSTED": codes.ResourceExhausted,
	"FAILED_PRECONDITION": codes.FailedPrecondition, "ABORTED": codes.Aborted, "OUT_OF_RANGE": codes.OutOfRange,
	"UNIMPLEMENTED": codes.Unimplemented, "INTERNAL": codes.Internal, "UNAVAILABLE": codes.Unavailable,
	"DATA_LOSS": codes.DataLoss, "UNAUTHENTICATED": codes.Unauthenticated,
}

// parseCodes reads retryableStatusCodes: a non-empty array of code names
// or numbers, OK excluded.
func parseCodes(raw json.RawMessage, bad func(field, format string, args ...any) error) (codeSet, error) {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return 0, bad(".retryableStatusCodes", "want a non-empty array of status codes like [\"UNAVAILABLE\"], got %s", shown(raw))
	}
	var set codeSet
	for j, r := range list {
		var c codes.Code
		var name string
		ok := false
		if json.Unmarshal(r, &name) == nil {
			c, ok = codeNames[strings.ToUpper(name)]
		} else if n, err := strconv.ParseUint(string(r), 10, 32); err == nil && n >= 1 && n <= 16 {
			c, ok = codes.Code(n), true
		}
		if !ok {
			return 0, bad(fmt.Sprintf(".retryableStatusCodes[%d]", j), "want a status code other than OK, by name (\"UNAVAILABLE\") or number (1 to 16), got %s", shown(r))
		}
		set |= 1 << c
	}
	return set, nil
}

// codeSet is a set of status codes, one bit per code (1 to 16).
type codeSet uint32

// retryable is the Retryable of a parsed retryPolicy: the error's status
// code is in the set, the error does not carry the overloaded signal, and
// it is not a DEADLINE_EXCEEDED at the caller's own deadline (which
// classifyAttempt marks not transient). Errors without a gRPC status are
// not retried.
func (s codeSet) retryable(err error) bool {
	if err == nil || watertight.IsOverloaded(err) || watertight.IsRejection(err) || !hasStatus(err) {
		return false
	}
	c := status.Code(err)
	if c >= 32 || s&(1<<c) == 0 {
		return false
	}
	if c == codes.DeadlineExceeded {
		var ae *attemptError
		if errors.As(err, &ae) && !ae.transient {
			return false // the caller's own deadline
		}
	}
	return true
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// shown is raw for an error message, shortened past 60 bytes.
func shown(raw json.RawMessage) string {
	const n = 60
	if len(raw) == 0 {
		return "nothing"
	}
	if len(raw) > n {
		return strconv.Quote(string(raw[:n])) + "..."
	}
	return string(raw)
}

// ParseRetryThrottling reads the retryThrottling of a gRPC service config
// (gRFC A6) into a *budget.RetryThrottle, for ClientConfig.RetryThrottle, so
// that the config keeps the meaning it has in grpc-go: a token count that
// starts at maxTokens, loses one for each attempt that fails with a
// retryable code (or a pushback that says not to retry) and gains
// tokenRatio for each call that succeeds; while it holds maxTokens/2 or
// less, calls are not retried. What it reads, as grpc-go does:
//
//   - retryThrottling.maxTokens: a number in (0, 1000];
//   - retryThrottling.tokenRatio: a number > 0.
//
// Both are required, and both are kept to three decimals, digits beyond
// dropped, as gRPC keeps them (a tokenRatio of 0.1239 is 0.123; one below
// 0.001 is an error). It returns nil, and no error, when the config has no
// retryThrottling (a nil throttle is disabled). The other fields are not
// read (see ParseServiceConfig). One throttle serves one ClientConn (one
// server name, in gRPC's terms): share it between the interceptors of that
// connection only. To give it a name or a listener, build one with
// budget.NewRetryThrottle from the result's Config.
func ParseRetryThrottling(js []byte) (*budget.RetryThrottle, error) {
	var sc struct {
		RetryThrottling json.RawMessage `json:"retryThrottling"`
	}
	if isNull(bytes.TrimSpace(js)) {
		return nil, errors.New("watertightgrpc: service config: want a JSON object, got nothing")
	}
	if err := json.Unmarshal(js, &sc); err != nil {
		return nil, fmt.Errorf("watertightgrpc: service config: want a JSON object: %w", err)
	}
	if isNull(sc.RetryThrottling) {
		return nil, nil
	}
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("watertightgrpc: service config retryThrottling%s: %s", field, fmt.Sprintf(format, args...))
	}
	var rt struct {
		MaxTokens  json.RawMessage `json:"maxTokens"`
		TokenRatio json.RawMessage `json:"tokenRatio"`
	}
	if json.Unmarshal(sc.RetryThrottling, &rt) != nil {
		return nil, bad("", "want an object {\"maxTokens\": ..., \"tokenRatio\": ...}, got %s", shown(sc.RetryThrottling))
	}
	maxM, ok := parseMilli(rt.MaxTokens)
	if !ok || maxM <= 0 || maxM > 1_000_000 {
		return nil, bad(".maxTokens", "want a number in (0, 1000] (at least 0.001: three decimals are kept), got %s", shown(rt.MaxTokens))
	}
	ratioM, ok := parseMilli(rt.TokenRatio)
	if !ok || ratioM <= 0 {
		return nil, bad(".tokenRatio", "want a number > 0 (at least 0.001: three decimals are kept), got %s", shown(rt.TokenRatio))
	}
	return budget.NewRetryThrottle(budget.RetryThrottleConfig{
		MaxTokens:  float64(maxM) / 1000,
		TokenRatio: float64(min(ratioM, maxM)) / 1000,
	})
}

// parseMilli reads a JSON number exactly and returns it in thousandths,
// digits beyond the third dropped (toward zero). It reports false for
// anything but a number, and for a number too large for the result.
func parseMilli(raw json.RawMessage) (int64, bool) {
	var n json.Number
	raw = bytes.TrimSpace(raw)
	if isNull(raw) || raw[0] == '"' || json.Unmarshal(raw, &n) != nil || n == "" {
		return 0, false
	}
	if len(n) > 64 { // keeps big.Rat from expanding an exponent like 1e999999999
		return 0, false
	}
	_, exp, _ := strings.Cut(strings.ToLower(string(n)), "e")
	if e, err := strconv.Atoi(exp); exp != "" && (err != nil || e > 20 || e < -400) {
		if err == nil && e < -400 {
			return 0, true
		}
		return 0, false
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return 0, false
	}
	r.Mul(r, big.NewRat(1000, 1))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() {
		return 0, false
	}
	return q.Int64(), true
}
