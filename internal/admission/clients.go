package admission

import (
	"errors"
	"math"
	"runtime"
	"sync/atomic"

	"github.com/watertight-go/watertight/internal/keyed"
)

// Clients counts the requests each client has in flight, for up to
// maxClients clients, and refuses a client's request beyond maxPerClient
// (the adapters' per-client limits). A client's count is one atomic add on
// arrival and one on departure; a new client takes the table's lock once.
// When the table is full and a new client needs room, the least recently
// seen idle client (nothing in flight) is dropped; a client's count is never
// dropped while it has requests in flight, so a client never has two counts
// at once.
//
// When every client in a full table has requests in flight, the clients
// that find no room share one overflow count, limited to maxPerClient as if
// they were one client: opening more clients than the table holds never
// lifts the limit, it only makes the newcomers share one client's share.
// Such requests are counted (Overflowed). A new client looks for room among
// at most clientSweep clients, under the table's lock, so that a flood of
// new clients against a full table of busy ones costs each request a bounded
// sweep; a request that finds none idle there goes to the overflow count,
// and the next sweep goes on from where it stopped. It is safe for
// concurrent use.
type Clients struct {
	max        int // requests in flight per client
	m          *keyed.Map[*ClientCount]
	overflow   ClientCount   // shared by the clients that found the table full of busy ones
	overflowed atomic.Uint64 // requests admitted through overflow
}

// errClientsFull is keyed.Map.Get's answer when every client in the table
// has requests in flight.
var errClientsFull = errors.New("admission: client table full")

// clientSweep is the most clients one new client examines for room.
const clientSweep = 256

// clientEvicted is the count of a dropped client: so negative that adding
// any number of arrivals to it leaves it negative.
const clientEvicted = math.MinInt64 / 2

// ClientCount is one client's requests in flight. It fills a cache line,
// so that two clients' counts, written by every request, do not share one.
type ClientCount struct {
	n atomic.Int64 // clientEvicted once the table has dropped it
	_ [56]byte
}

// DefaultMaxClients is the client bound of a table made with maxClients 0:
// the adapters' default (HandlerConfig.MaxClients, ServerConfig.MaxClients).
const DefaultMaxClients = 10000

// NewClients returns a table that allows maxPerClient (> 0) requests in
// flight per client, for up to maxClients clients: DefaultMaxClients if
// maxClients is 0, no bound if it is negative, as the adapters' MaxClients
// fields say.
func NewClients(maxPerClient, maxClients int) *Clients {
	switch {
	case maxClients == 0:
		maxClients = DefaultMaxClients
	case maxClients < 0:
		maxClients = -1
	}
	return &Clients{
		max: maxPerClient,
		m: keyed.New(maxClients,
			func(string) (*ClientCount, error) { return new(ClientCount), nil },
			func(c *ClientCount) bool { return c.n.CompareAndSwap(0, clientEvicted) }).LimitSweep(clientSweep),
	}
}

// Max returns the limit of requests in flight per client.
func (t *Clients) Max() int { return t.max }

// Enter counts a request of client id. It reports ok false, counting
// nothing, when the client already has Max requests in flight, or when the
// table is full of busy clients and the overflow count (shared by every
// client that found no room) has Max in flight. Otherwise the caller must
// call Leave on the count returned when the request is done. overflow
// reports that the request went to the overflow count, admitted or not.
func (t *Clients) Enter(id string) (c *ClientCount, overflow, ok bool) {
	for {
		c, err := t.m.Get(id, errClientsFull)
		if err != nil {
			c = &t.overflow
			if c.n.Add(1) > int64(t.max) {
				c.n.Add(-1)
				return nil, true, false
			}
			t.overflowed.Add(1)
			return c, true, true
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
			return nil, false, false
		}
		return c, false, true
	}
}

// Overflowed returns the number of requests admitted through the overflow
// count so far: requests of clients that found the table full of busy
// clients.
func (t *Clients) Overflowed() uint64 { return t.overflowed.Load() }

// OverflowInFlight returns the requests in flight through the overflow
// count.
func (t *Clients) OverflowInFlight() int64 { return t.overflow.n.Load() }

// Leave uncounts a request counted by Enter.
func (c *ClientCount) Leave() { c.n.Add(-1) }

// Range calls f with each client in the table and its count of requests in
// flight, until f returns false; the overflow count is not among them. A count may be negative for a client
// dropped during the walk.
func (t *Clients) Range(f func(id string, inFlight int64) bool) {
	t.m.Range(func(id string, c *ClientCount) bool {
		n := c.n.Load()
		if n < 0 {
			n = -1
		}
		return f(id, n)
	})
}
