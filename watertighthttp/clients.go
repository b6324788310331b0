package watertighthttp

import (
	"errors"
	"math"
	"runtime"
	"sync/atomic"

	"github.com/watertight-go/watertight/internal/keyed"
)

// clientTable counts the requests each client has in the Handler
// (HandlerConfig.Client, MaxPerClient), for up to maxClients clients. A
// client's count is one atomic add on arrival and one on departure; a new
// client takes the table's lock once. An idle client (nothing in flight) is
// dropped when the table is full and a new one needs room; a client's
// count is never dropped while it has requests in flight, so a client
// never has two counts at once.
type clientTable struct {
	max int // requests in flight per client
	m   *keyed.Map[*clientCount]
}

// errClientsFull is keyed.Map.Get's answer when every client in the table
// has requests in flight.
var errClientsFull = errors.New("watertighthttp: client table full")

// clientEvicted is the count of a dropped client: so negative that adding
// any number of arrivals to it leaves it negative.
const clientEvicted = math.MinInt64 / 2

// clientCount is one client's requests in flight; clientEvicted once the
// table has dropped it. It fills a cache line, so that two clients'
// counts, written by every request, do not share one.
type clientCount struct {
	n atomic.Int64
	_ [56]byte
}

func newClientTable(maxPerClient, maxClients int) *clientTable {
	return &clientTable{
		max: maxPerClient,
		m: keyed.New(maxClients,
			func(string) (*clientCount, error) { return new(clientCount), nil },
			func(c *clientCount) bool { return c.n.CompareAndSwap(0, clientEvicted) }),
	}
}

// enter counts a request of client id. It reports false, counting nothing,
// when the client already has max requests in flight. Otherwise the caller
// must call leave on the count returned when the request is done, unless
// it is nil: the table was full of busy clients, and the request goes
// uncounted.
func (t *clientTable) enter(id string) (*clientCount, bool) {
	for {
		c, err := t.m.Get(id, errClientsFull)
		if err != nil {
			return nil, true
		}
		n := c.n.Add(1)
		switch {
		case n <= 0:
			// Dropped between the lookup and the add: the table removes it
			// at once, under its lock, and the next lookup finds a live one.
			runtime.Gosched()
			continue
		case n > int64(t.max):
			c.n.Add(-1)
			return nil, false
		}
		return c, true
	}
}

// leave uncounts a request counted by enter.
func (c *clientCount) leave() { c.n.Add(-1) }
