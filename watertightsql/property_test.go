package watertightsql_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/watertightsql"
	"pgregory.net/rapid"
)

// shareModel is the reference model of the shares: a counter per share and
// a map from keys to shares.
type shareModel struct {
	maxOpen int
	caps    map[string]int // share name ("" for the default share) → size
	inUse   map[string]int
	refuse  bool // keys outside Shares are refused
	shares  map[string]int
}

// newShareModel works out the shares Config would give, or reports that
// New must refuse it.
func newShareModel(maxOpen int, shares map[string]int, def int) (*shareModel, bool) {
	m := &shareModel{maxOpen: maxOpen, caps: map[string]int{}, inUse: map[string]int{}, shares: shares}
	sum := 0
	for k, n := range shares {
		m.caps[k] = n
		sum += n
	}
	switch {
	case sum > maxOpen:
		return nil, false
	case def < 0:
		m.refuse = true
	case def == 0:
		if sum == maxOpen {
			return nil, false
		}
		m.caps[""] = maxOpen - sum
	default:
		if sum+def > maxOpen {
			return nil, false
		}
		m.caps[""] = def
	}
	return m, true
}

// shareOf returns the share a key uses, or false when it is refused.
func (m *shareModel) shareOf(key string) (string, bool) {
	if _, ok := m.shares[key]; ok {
		return key, true
	}
	return "", !m.refuse
}

// held is an open Rows or Tx of the test, and the share it holds.
type held struct {
	share  string
	rows   *watertightsql.Rows
	tx     *watertightsql.Tx
	cancel context.CancelFunc // the context's: a transaction lives as long as it
}

// TestSharesModel runs random configurations and random sequences of
// statements, open rows and transactions against the model: a statement
// gets a connection exactly when the model's share has room, the DB's
// snapshot and the pool's connections in use match the model after every
// step, and database/sql never makes a statement wait (its context would
// end first, and the outcome would not match).
func TestSharesModel(t *testing.T) {
	keys := []string{"a", "b", "c", "", "x", "y"}
	rapid.Check(t, func(rt *rapid.T) {
		maxOpen := rapid.IntRange(1, 6).Draw(rt, "maxOpen")
		shares := map[string]int{}
		for _, k := range []string{"a", "b", "c"} {
			if rapid.Bool().Draw(rt, "has "+k) {
				shares[k] = rapid.IntRange(1, 4).Draw(rt, "share "+k)
			}
		}
		def := rapid.IntRange(-1, 3).Draw(rt, "DefaultShare")
		f := newFakeDB()
		pool := f.open(maxOpen)
		db, err := watertightsql.New(pool, watertightsql.Config{Shares: shares, DefaultShare: def, MaxWait: -1})
		m, valid := newShareModel(maxOpen, shares, def)
		if (err == nil) != valid {
			pool.Close()
			rt.Fatalf("New(maxOpen %d, shares %v, default %d) = %v; the model says valid = %v", maxOpen, shares, def, err, valid)
		}
		if !valid {
			pool.Close()
			return
		}
		defer db.Close()
		var open []held
		defer func() {
			for _, h := range open {
				if h.rows != nil {
					h.rows.Close()
				} else {
					h.tx.Rollback()
				}
				h.cancel()
			}
		}()
		ctxFor := func(key string) (context.Context, context.CancelFunc) {
			return context.WithTimeout(watertightsql.WithKey(context.Background(), key), 5*time.Second)
		}
		// take checks the outcome of a statement that wants a connection of
		// key's share against the model, and reports whether it got one.
		take := func(rt *rapid.T, key string, err error) (string, bool) {
			share, ok := m.shareOf(key)
			switch {
			case !ok:
				if !errors.Is(err, watertightsql.ErrUnknownKey) {
					rt.Fatalf("key %q has no share: got %v, want ErrUnknownKey", key, err)
				}
				return "", false
			case m.inUse[share] == m.caps[share]:
				if !errors.Is(err, bulkhead.ErrFull) {
					rt.Fatalf("key %q: share %q full (%d): got %v, want bulkhead.ErrFull", key, share, m.caps[share], err)
				}
				return "", false
			case err != nil:
				rt.Fatalf("key %q: share %q has room (%d of %d): got %v", key, share, m.inUse[share], m.caps[share], err)
			}
			return share, true
		}
		pick := func(rt *rapid.T) int {
			if len(open) == 0 {
				rt.Skip("nothing open")
			}
			return rapid.IntRange(0, len(open)-1).Draw(rt, "which")
		}
		drop := func(i int) {
			m.inUse[open[i].share]--
			open[i].cancel()
			open = slices.Delete(open, i, i+1)
		}
		rt.Repeat(map[string]func(*rapid.T){
			"query": func(rt *rapid.T) {
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				ctx, cancel := ctxFor(key)
				rows, err := db.QueryContext(ctx, "rows 2 q")
				share, ok := take(rt, key, err)
				if !ok {
					cancel()
					return
				}
				m.inUse[share]++
				open = append(open, held{share: share, rows: rows, cancel: cancel})
			},
			"begin": func(rt *rapid.T) {
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				ctx, cancel := ctxFor(key)
				tx, err := db.BeginTx(ctx, nil)
				share, ok := take(rt, key, err)
				if !ok {
					cancel()
					return
				}
				m.inUse[share]++
				open = append(open, held{share: share, tx: tx, cancel: cancel})
			},
			"exec": func(rt *rapid.T) {
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				ctx, cancel := ctxFor(key)
				defer cancel()
				_, err := db.ExecContext(ctx, "ok e")
				take(rt, key, err)
			},
			"close": func(rt *rapid.T) {
				i := pick(rt)
				h := open[i]
				var err error
				switch {
				case h.rows != nil:
					err = h.rows.Close()
				case rapid.Bool().Draw(rt, "commit"):
					err = h.tx.Commit()
				default:
					err = h.tx.Rollback()
				}
				if err != nil {
					rt.Fatal(err)
				}
				drop(i)
			},
			"read to the end": func(rt *rapid.T) {
				i := pick(rt)
				if open[i].rows == nil {
					rt.Skip("a transaction")
				}
				for open[i].rows.Next() {
				}
				drop(i)
			},
			"": func(rt *rapid.T) {
				s := db.Snapshot()
				total := 0
				for _, sh := range s.Shares {
					name := sh.Key
					if sh.MaxConcurrent != m.caps[name] || sh.Active != m.inUse[name] {
						rt.Fatalf("share %q: size %d, %d held; the model says %d and %d", name, sh.MaxConcurrent, sh.Active, m.caps[name], m.inUse[name])
					}
					total += sh.Active
				}
				if len(s.Shares) != len(m.caps) {
					rt.Fatalf("%d shares, the model has %v", len(s.Shares), slices.Sorted(maps.Keys(m.caps)))
				}
				if s.Pool.InUse != total || total > maxOpen {
					rt.Fatalf("the pool has %d connections in use, the shares hold %d of %d", s.Pool.InUse, total, maxOpen)
				}
			},
		})
	})
}
