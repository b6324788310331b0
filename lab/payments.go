package lab

// The payments scenario: a payment endpoint behind a flaky network. The
// server makes the charge, then the network loses the response (the
// connection drops before the client reads it), so the client sees a
// transport error and retries. Two configurations of the same client (the
// watertighthttp Transport, retrying up to payAttempts times) and server:
//
//   - no-keys: the client retries the POST anyway (it marks the call
//     idempotent, as a naive client does); the server has no way to tell a
//     retry from a new payment, so every lost response is a double charge;
//   - idempotency-keys: the client sends one Idempotency-Key per payment on
//     every attempt (retry.WithIdempotencyKey with idempotency.NewKey), and
//     the server runs watertighthttp's idempotency middleware over an
//     in-memory store, so a retry of a charge that was made gets the stored
//     answer replayed.
//
// Which exchanges lose their request or response is decided by a hash of the
// seed, the payment and the exchange's number for that payment, so both
// configurations meet the same losses and the counts are exact for a seed.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight-go/watertight/backoff"
	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/retry"
	"github.com/watertight-go/watertight/watertighthttp"
)

func init() {
	Register(Scenario{
		Name:        "payments",
		Description: "a payment endpoint behind a network that loses responses after the charge: retries without keys double-charge, with idempotency keys every payment is made exactly once",
		Run:         runPayments,
	})
}

const (
	payNoKeys = "no-keys"
	payKeys   = "idempotency-keys"
)

type payParams struct {
	payments    int
	clients     int     // concurrent client goroutines
	lossRate    float64 // share of responses lost after the charge
	preLossRate float64 // share of requests lost before the server sees them
	attempts    int
}

func payParamsFor(quick bool) payParams {
	p := payParams{payments: 2000, clients: 16, lossRate: 0.2, preLossRate: 0.05, attempts: 10}
	if quick {
		p.payments = 400
	}
	return p
}

// payTally is one configuration's outcome.
type payTally struct {
	payments      int
	charges       atomic.Int64 // handler executions that charged
	clientOK      atomic.Int64 // payments the client saw succeed
	clientFailed  atomic.Int64
	lostResponses atomic.Int64 // responses the network dropped after the charge
	lostRequests  atomic.Int64 // requests dropped before the server
	replays       atomic.Int64
	attempts      atomic.Int64
	mu            sync.Mutex
	perPayment    map[string]int // charges per payment id
}

func (t *payTally) doubleCharges() (orders, extra int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.perPayment {
		if n > 1 {
			orders++
			extra += n - 1
		}
	}
	return orders, extra
}

func (t *payTally) lost() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	lost := 0
	for i := 0; i < t.payments; i++ {
		if t.perPayment[payID(i)] == 0 {
			lost++
		}
	}
	return lost
}

func payID(i int) string { return "pay-" + strconv.Itoa(i) }

func runPayments(ctx context.Context, opts Options) (*Result, error) {
	p := payParamsFor(opts.Quick)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	start := time.Now()
	configs := []string{payNoKeys, payKeys}
	tallies := map[string]*payTally{}
	for _, cfg := range configs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "payments: %s: %d payments\n", cfg, p.payments)
		t, err := payRun(ctx, cfg, p, opts.Seed)
		if err != nil {
			return nil, err
		}
		tallies[cfg] = t
	}
	return payResult(p, configs, tallies, time.Since(start)), nil
}

// payLose decides, from the seed, whether the network loses this attempt's
// request (before) or response (after): the same for both configurations.
func payLose(seed uint64, payment string, attempt int, salt uint64, rate float64) bool {
	h := seed ^ salt
	for _, c := range []byte(payment) {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	h = (h ^ uint64(attempt)) * 0x9e3779b97f4a7c15
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return float64(h>>11)/(1<<53) < rate
}

// payNetwork is the flaky network in front of the server: it drops some
// requests before the server sees them and some responses after the server
// answered (the charge is made, the client never hears of it). A dropped
// exchange closes the connection without an answer.
type payNetwork struct {
	next  http.Handler
	seed  uint64
	p     payParams
	tally *payTally

	mu        sync.Mutex
	exchanges map[string]int // per payment
}

func (n *payNetwork) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Lab-Payment")
	// The nth exchange of a payment meets the same fate in both
	// configurations. (Counting exchanges, not the X-Request-Attempt
	// header: net/http's own transport may resend a request that carries
	// an Idempotency-Key on a fresh connection, with the same header.)
	n.mu.Lock()
	n.exchanges[id]++
	attempt := n.exchanges[id]
	n.mu.Unlock()
	if payLose(n.seed, id, attempt, 0x5eed1, n.p.preLossRate) {
		n.tally.lostRequests.Add(1)
		payDrop(w)
		return
	}
	rec := httptest.NewRecorder()
	n.next.ServeHTTP(rec, r)
	if payLose(n.seed, id, attempt, 0x5eed2, n.p.lossRate) {
		n.tally.lostResponses.Add(1)
		payDrop(w)
		return
	}
	if rec.Header().Get(watertighthttp.HeaderIdempotentReplayed) != "" {
		n.tally.replays.Add(1)
	}
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// payDrop closes the connection without answering: the client's transport
// sees the connection end (an io.EOF-like transport error) and may retry.
func payDrop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// payServer is the payment service: each execution of the handler charges.
type payServer struct{ tally *payTally }

func (s *payServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Payment string `json:"payment"`
		Amount  int    `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Payment == "" {
		http.Error(w, "bad payment", http.StatusBadRequest)
		return
	}
	s.tally.charges.Add(1)
	s.tally.mu.Lock()
	s.tally.perPayment[body.Payment]++
	n := s.tally.perPayment[body.Payment]
	s.tally.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"payment":%q,"charge":%d,"status":"charged"}`, body.Payment, n)
}

func payRun(ctx context.Context, cfg string, p payParams, seed uint64) (*payTally, error) {
	tally := &payTally{payments: p.payments, perPayment: map[string]int{}}
	var h http.Handler = &payServer{tally: tally}
	if cfg == payKeys {
		var err error
		h, err = watertighthttp.NewIdempotencyHandler(h, watertighthttp.IdempotencyConfig{
			Name:  "payments",
			Scope: watertighthttp.SharedScope, // one client in the lab; a real service scopes by caller
			// A duplicate that arrives while the first is running (the
			// client gave up on a slow answer) waits for the result.
			WaitInFlight: true,
		})
		if err != nil {
			return nil, err
		}
	}
	srv := httptest.NewServer(&payNetwork{next: h, seed: seed, p: p, tally: tally, exchanges: map[string]int{}})
	defer srv.Close()
	base := &http.Transport{MaxIdleConnsPerHost: p.clients}
	defer base.CloseIdleConnections()
	bo, err := backoff.New(backoff.Config{Base: 100 * time.Microsecond, Cap: time.Millisecond})
	if err != nil {
		return nil, err
	}
	tr, err := watertighthttp.NewTransport(watertighthttp.TransportConfig{
		Base: base,
		Retry: retry.Config{
			MaxAttempts: p.attempts,
			Backoff:     bo,
		},
	})
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: tr}

	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range p.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= p.payments || ctx.Err() != nil {
					return
				}
				if payOnce(ctx, cfg, client, srv.URL, payID(i), tally) {
					tally.clientOK.Add(1)
				} else {
					tally.clientFailed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return tally, ctx.Err()
}

func payOnce(ctx context.Context, cfg string, client *http.Client, url, id string, tally *payTally) bool {
	switch cfg {
	case payNoKeys:
		ctx = retry.Idempotent(ctx) // the naive client: retries a POST anyway
	case payKeys:
		ctx = retry.WithIdempotencyKey(ctx, idempotency.NewKey()) // one key per payment, on every attempt
	}
	body := fmt.Sprintf(`{"payment":%q,"amount":100}`, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charge", strings.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Lab-Payment", id)
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

type payJSON struct {
	Scenario string          `json:"scenario"`
	Results  []payJSONResult `json:"results"`
}

type payJSONResult struct {
	Config        string `json:"config"`
	Payments      int    `json:"payments"`
	Charges       int64  `json:"charges"`
	DoubleCharges int    `json:"double_charges"`
	ExtraCharges  int    `json:"extra_charges"`
	PaymentsLost  int    `json:"payments_lost"`
	ClientOK      int64  `json:"client_ok"`
	ClientFailed  int64  `json:"client_failed"`
	LostResponses int64  `json:"lost_responses"`
	LostRequests  int64  `json:"lost_requests"`
	Replays       int64  `json:"replays"`
}

func payResult(p payParams, configs []string, tallies map[string]*payTally, took time.Duration) *Result {
	res := &Result{Scenario: "payments"}
	res.Summary = fmt.Sprintf("A payment endpoint on 127.0.0.1 behind a flaky network: %.0f%% of requests are lost before the server sees them "+
		"and %.0f%% of responses are lost after the charge is made (the connection drops; which attempts are lost is fixed by the seed, "+
		"so both configurations meet the same losses). %d payments from %d concurrent clients through the watertighthttp Transport, "+
		"which retries a transport error up to %d attempts. no-keys: the client retries the POST anyway (marked idempotent, as a naive "+
		"client does) and the server cannot tell a retry from a new payment. idempotency-keys: one Idempotency-Key per payment on every "+
		"attempt, and the server runs watertighthttp's idempotency middleware over the in-memory store, which replays the stored answer "+
		"of a charge that was made. Took %v.",
		100*p.preLossRate, 100*p.lossRate, p.payments, p.clients, p.attempts, took.Round(100*time.Millisecond))
	tbl := Table{
		Title:  "Charges made per payment",
		Header: []string{"config", "payments", "charges", "double-charged payments", "extra charges", "payments lost", "client saw success", "responses lost", "replays"},
	}
	doc := payJSON{Scenario: "payments"}
	for _, cfg := range configs {
		t := tallies[cfg]
		orders, extra := t.doubleCharges()
		lost := t.lost()
		tbl.Rows = append(tbl.Rows, []string{
			cfg, strconv.Itoa(t.payments), strconv.FormatInt(t.charges.Load(), 10), strconv.Itoa(orders), strconv.Itoa(extra),
			strconv.Itoa(lost), strconv.FormatInt(t.clientOK.Load(), 10), strconv.FormatInt(t.lostResponses.Load(), 10),
			strconv.FormatInt(t.replays.Load(), 10),
		})
		doc.Results = append(doc.Results, payJSONResult{
			Config: cfg, Payments: t.payments, Charges: t.charges.Load(), DoubleCharges: orders, ExtraCharges: extra,
			PaymentsLost: lost, ClientOK: t.clientOK.Load(), ClientFailed: t.clientFailed.Load(),
			LostResponses: t.lostResponses.Load(), LostRequests: t.lostRequests.Load(), Replays: t.replays.Load(),
		})
	}
	res.Tables = []Table{tbl}
	res.JSON = doc
	naive, keyed := doc.Results[0], doc.Results[1]
	res.Checks = []Check{
		AtLeast("without keys, retries double-charge (the losses after a charge become extra charges): payments charged more than once",
			float64(naive.DoubleCharges), 1, "", fmt.Sprintf("%d extra charges", naive.ExtraCharges)),
		AtMost("with idempotency keys: payments charged more than once", float64(keyed.DoubleCharges), 0, "",
			fmt.Sprintf("%d charges for %d payments, %d replays", keyed.Charges, keyed.Payments, keyed.Replays)),
		AtMost("with idempotency keys: payments lost (never charged)", float64(keyed.PaymentsLost), 0, "", ""),
		AtMost("with idempotency keys: payments not answered OK", float64(int64(keyed.Payments)-keyed.ClientOK), 0, "",
			fmt.Sprintf("%d of %d answered OK", keyed.ClientOK, keyed.Payments)),
	}
	return res
}
