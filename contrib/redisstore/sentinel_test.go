package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/idempotency/storetest"
)

// sentinelMaster is the name under which the sentinels monitor the master.
const sentinelMaster = "watertight"

// sentinelProc is a redis-server in sentinel mode, of the test's own.
type sentinelProc struct {
	port int
	cmd  *exec.Cmd
	out  bytes.Buffer
}

func (s *sentinelProc) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// kill stops the sentinel with SIGKILL and waits for it to exit.
func (s *sentinelProc) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// sentinelSetup is a master, its replica and three sentinels that monitor
// the master, all on 127.0.0.1.
type sentinelSetup struct {
	master, replica *redisServer
	sentinels       []*sentinelProc
}

func (sd *sentinelSetup) sentinelAddrs() []string {
	addrs := make([]string, len(sd.sentinels))
	for i, s := range sd.sentinels {
		addrs[i] = s.addr()
	}
	return addrs
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startSentinels starts a master, a replica of it (--replicaof) and three
// sentinels (quorum 2, down-after-milliseconds 500, failover-timeout 3 s),
// each on a free port of 127.0.0.1 and killed when the test ends. It
// returns once the replica is in sync and every sentinel sees the master,
// the replica and the two other sentinels. Without redis-server the test
// is skipped, or fails under WATERTIGHT_REQUIRE_REDIS=1 (as startOwnRedis).
func startSentinels(t *testing.T) *sentinelSetup {
	t.Helper()
	ctx := context.Background()
	// Diskless sync without the default 5 s delay, so the replica syncs at
	// once; each server gets a directory of its own for the RDB files that
	// a replica writes when it syncs.
	master := startOwnRedis(t, "--dir", t.TempDir(), "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
	replica := startOwnRedis(t, "--dir", t.TempDir(), "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	sd := &sentinelSetup{master: master, replica: replica}

	// The sentinels learn the replicas from the master's INFO, which they
	// read at once when they connect and then only every 10 s: start them
	// once the master lists the replica as online.
	mc := newClient(t, master.addr(), timeout)
	eventually(t, 10*time.Second, "the replica did not sync with the master", func() bool {
		info, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "port="+strconv.Itoa(replica.port)+",state=online")
	})

	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err) // startOwnRedis found it
	}
	dir := t.TempDir()
	for i := range 3 {
		s := &sentinelProc{port: freePort(t)}
		// Sentinel rewrites its configuration file: it must be writable.
		conf := filepath.Join(dir, "sentinel-"+strconv.Itoa(i)+".conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %[3]s 500\n"+
			"sentinel failover-timeout %[3]s 3000\n",
			s.port, dir, sentinelMaster, master.port)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s.cmd = exec.Command(bin, conf, "--sentinel")
		s.cmd.Stdout = &s.out
		s.cmd.Stderr = &s.out
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.kill()
			if t.Failed() {
				t.Logf("sentinel %s said:\n%s", s.addr(), s.out.String())
			}
		})
		sd.sentinels = append(sd.sentinels, s)
	}

	clients := make([]*redis.SentinelClient, len(sd.sentinels))
	for i, s := range sd.sentinels {
		clients[i] = newSentinelClient(t, s.addr())
	}
	// The sentinels find each other through the master's hello channel,
	// where each one publishes every 2 s.
	eventually(t, 20*time.Second, "the sentinels did not see the master, the replica and each other", func() bool {
		for _, c := range clients {
			m, err := c.Master(ctx, sentinelMaster).Result()
			if err != nil || m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return false
			}
			rs, err := c.Replicas(ctx, sentinelMaster).Result()
			if err != nil || len(rs) != 1 || rs[0]["flags"] != "slave" ||
				rs[0]["port"] != strconv.Itoa(replica.port) || rs[0]["master-link-status"] != "ok" {
				return false
			}
		}
		return true
	})
	return sd
}

// newSentinelClient returns a client of the sentinel at addr, closed when
// the test ends.
func newSentinelClient(t *testing.T, addr string) *redis.SentinelClient {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, DialTimeout: timeout, ReadTimeout: timeout,
		WriteTimeout: timeout, DialerRetries: 1, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newFailoverClient returns a Sentinel failover client of the setup's
// master with d as its dial, read and write timeouts and no retries (as
// newClient); it is closed when the test ends.
func newFailoverClient(t *testing.T, sd *sentinelSetup, d time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:      sentinelMaster,
		SentinelAddrs:   sd.sentinelAddrs(),
		DialTimeout:     d,
		ReadTimeout:     d,
		WriteTimeout:    d,
		DialerRetries:   1,
		MaxRetries:      -1,
		DisableIdentity: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The conformance suite through a Sentinel failover client, which finds
// the master by asking the sentinels; the keys are checked to be on the
// master and, replicated, on the replica.
func TestConformanceSentinel(t *testing.T) {
	sd := startSentinels(t)
	client := newFailoverClient(t, sd, timeout)
	storetest.Run(t, func(t *testing.T) idempotency.Store {
		return newStoreWithPrefix(t, client, fmt.Sprintf("watertight-test:%s:", t.Name()))
	})

	ctx := context.Background()
	n, err := newClient(t, sd.master.addr(), timeout).DBSize(ctx).Result()
	if err != nil || n == 0 {
		t.Fatalf("DBSIZE on the master: %d, %v; want the suite's keys there", n, err)
	}
}

// The master dies and the sentinels promote its replica. Meanwhile every
// store call fails promptly with an error; afterwards the same store, on
// the same failover client, works again: the records completed before the
// failover replay, the claims held before it are still held (and their
// owners can still complete them), and new keys can be claimed and
// completed.
func TestSentinelFailover(t *testing.T) {
	sd := startSentinels(t)
	// Short timeouts, as in the outage tests: a dead master must show as
	// an error quickly.
	client := newFailoverClient(t, sd, outageTimeout)
	s := newStoreWithPrefix(t, client, "failover:")
	ctx := context.Background()

	const n = 5
	var keys []string // every key written before the failover
	held := make([]idempotency.Claim, n)
	for i := range n {
		done := "done-" + strconv.Itoa(i)
		c := mustClaim(t, s, done, "fp", lockTTL, idempotency.Claimed)
		if err := s.Complete(ctx, done, c.Token, sampleRecord("fp"), ttl); err != nil {
			t.Fatalf("Complete(%q): %v", done, err)
		}
		key := "held-" + strconv.Itoa(i)
		held[i] = mustClaim(t, s, key, "fp-"+strconv.Itoa(i), lockTTL, idempotency.Claimed)
		keys = append(keys, done, key)
	}
	// failsPromptly tries to complete and release the key "held" with this
	// token: a held claim, so that a call that did reach a master would
	// succeed and show.
	heldByCheck := mustClaim(t, s, "held", "fp", lockTTL, idempotency.Claimed)
	keys = append(keys, "held")

	// Replication is asynchronous: make sure the replica has everything
	// before the master dies. WAIT counts the replicas that acknowledged
	// the connection's last write, so write a marker and WAIT on the same
	// connection: the replication stream is in order, so the marker's
	// acknowledgement covers the store's writes before it.
	conn := newClient(t, sd.master.addr(), timeout).Conn()
	if err := conn.Set(ctx, "failover:marker", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if acked, err := conn.Wait(ctx, 1, 5*time.Second).Result(); err != nil || acked != 1 {
		t.Fatalf("WAIT 1 5000 on the master: %d, %v; want the replica's acknowledgement", acked, err)
	}
	_ = conn.Close()
	replica := newClient(t, sd.replica.addr(), timeout)
	for _, k := range keys {
		if got, err := replica.Exists(ctx, s.Key(k)).Result(); err != nil || got != 1 {
			t.Fatalf("EXISTS %s on the replica: %d, %v; want 1", s.Key(k), got, err)
		}
	}

	killed := time.Now()
	sd.master.kill()

	errs := map[string]int{}
	probes := 0
	var slowest time.Duration
	probe := func() error {
		probes++
		start := time.Now()
		_, err := s.Claim(ctx, "probe-"+strconv.Itoa(probes), "fp", lockTTL, time.Hour)
		took := time.Since(start)
		if took > prompt {
			t.Errorf("a Claim took %v during the failover, want under %v", took, prompt)
		}
		slowest = max(slowest, took)
		if err != nil {
			errs[err.Error()]++
		}
		return err
	}

	// The master is dead and no replica is promoted yet (that takes the
	// sentinels at least down-after-milliseconds, and a vote): every call
	// fails with an error, promptly, again and again.
	if err := probe(); err == nil {
		t.Fatal("a Claim right after the master died succeeded")
	}
	for range 3 {
		failsPromptly(t, "with the master dead", s, heldByCheck.Token)
	}

	// Until the sentinels report the replica as master, the store keeps
	// failing promptly; then it works again.
	sentinel := newSentinelClient(t, sd.sentinels[0].addr())
	var promoted, working time.Duration
	eventually(t, 30*time.Second, "the sentinels did not promote the replica", func() bool {
		if err := probe(); err == nil && working == 0 {
			working = time.Since(killed)
		}
		addr, err := sentinel.GetMasterAddrByName(ctx, sentinelMaster).Result()
		if err != nil || len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != sd.replica.addr() {
			return false
		}
		promoted = time.Since(killed)
		return true
	})
	eventually(t, 5*time.Second, "the store did not work again after the replica was promoted", func() bool {
		if working != 0 {
			return true
		}
		if probe() == nil {
			working = time.Since(killed)
		}
		return working != 0
	})
	msgs := make([]string, 0, len(errs))
	failed := 0
	for m, c := range errs {
		msgs = append(msgs, fmt.Sprintf("%d× %s", c, m))
		failed += c
	}
	sort.Strings(msgs)
	t.Logf("failover: sentinel reported the replica as master %v after the kill; the store worked again after %v; "+
		"%d of %d probe calls failed meanwhile, the slowest call took %v:\n%s", promoted.Round(time.Millisecond),
		working.Round(time.Millisecond), failed, probes, slowest.Round(time.Microsecond), strings.Join(msgs, "\n"))
	if failed == 0 {
		t.Fatal("no store call failed while the master was down")
	}
	if role, err := replica.Do(ctx, "ROLE").Slice(); err != nil || len(role) == 0 || role[0] != "master" {
		t.Fatalf("ROLE of the old replica: %v, %v; want master", role, err)
	}

	// The records completed before the failover replay, as they were stored.
	for i := range n {
		c := mustClaim(t, s, "done-"+strconv.Itoa(i), "fp", lockTTL, idempotency.Completed)
		sameRecord(t, c.Record, sampleRecord("fp"))
	}
	// The claims held before the failover are still held, with their TTL,
	// and their owners' tokens still own them.
	for i, h := range held {
		key := "held-" + strconv.Itoa(i)
		c := mustClaim(t, s, key, "other", lockTTL, idempotency.InFlight)
		if want := "fp-" + strconv.Itoa(i); c.Fingerprint != want {
			t.Fatalf("Claim(%q) after the failover: fingerprint %q, want %q", key, c.Fingerprint, want)
		}
		// The claim's key lives for the result TTL (mustClaim's hour), its
		// lock still running: above the hour less lockTTL.
		if pttl, err := replica.PTTL(ctx, s.Key(key)).Result(); err != nil || pttl <= time.Hour-lockTTL || pttl > time.Hour {
			t.Fatalf("PTTL %s on the new master: %v, %v; want the claim's TTL, its lock running", s.Key(key), pttl, err)
		}
		if err := s.Complete(ctx, key, h.Token, sampleRecord(c.Fingerprint), ttl); err != nil {
			t.Fatalf("Complete(%q) by its owner after the failover: %v", key, err)
		}
		sameRecord(t, mustClaim(t, s, key, c.Fingerprint, lockTTL, idempotency.Completed).Record, sampleRecord(c.Fingerprint))
	}
	if err := s.Complete(ctx, "held-0", held[0].Token, sampleRecord("fp-0"), ttl); !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("a second Complete of held-0: err = %v, want ErrNotOwner", err)
	}
	// New keys are claimed and completed, on the new master.
	for i := range n {
		key := "after-" + strconv.Itoa(i)
		c := mustClaim(t, s, key, "fp", lockTTL, idempotency.Claimed)
		mustClaim(t, s, key, "fp", lockTTL, idempotency.InFlight)
		if err := s.Complete(ctx, key, c.Token, sampleRecord("fp"), ttl); err != nil {
			t.Fatalf("Complete(%q) after the failover: %v", key, err)
		}
		sameRecord(t, mustClaim(t, s, key, "fp", lockTTL, idempotency.Completed).Record, sampleRecord("fp"))
		if got, err := replica.Exists(ctx, s.Key(key)).Result(); err != nil || got != 1 {
			t.Fatalf("EXISTS %s on the new master: %d, %v; want 1", s.Key(key), got, err)
		}
	}
}
