package redisstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight-go/watertight/idempotency"
	"github.com/watertight-go/watertight/idempotency/storetest"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// startCluster starts a Redis Cluster of n masters of the test's own, on
// free ports of 127.0.0.1: each node gets an equal range of the hash slots,
// the first one meets the others, and startCluster returns the nodes'
// addresses once every node reports cluster_state:ok. Without redis-server
// the test is skipped, or fails under WATERTIGHT_REQUIRE_REDIS=1.
func startCluster(t *testing.T, n int) []string {
	t.Helper()
	dir := t.TempDir()
	addrs := make([]string, n)
	nodes := make([]*redis.Client, n)
	for i := range n {
		// The port is known only once started: the config file is named
		// after the node's index instead.
		r := startOwnRedis(t, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(i)+".conf"),
			"--cluster-node-timeout", "5000", "--dir", dir)
		addrs[i] = r.addr()
		nodes[i] = newClient(t, r.addr(), timeout)
	}
	ctx := context.Background()
	for i, c := range nodes {
		first, last := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			t.Fatalf("node %s: CLUSTER ADDSLOTSRANGE %d %d: %v", addrs[i], first, last, err)
		}
	}
	for _, a := range addrs[1:] {
		host, port, _ := strings.Cut(a, ":")
		if err := nodes[0].Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
			t.Fatalf("CLUSTER MEET %s: %v", a, err)
		}
	}
	eventually(t, 30*time.Second, "every node to report cluster_state:ok", func() bool {
		for _, c := range nodes {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	return addrs
}

// newClusterClient returns a cluster client of addrs, with the tests'
// timeouts and no retries; it is closed when the test ends.
func newClusterClient(t *testing.T, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:           addrs,
		DialTimeout:     timeout,
		ReadTimeout:     timeout,
		WriteTimeout:    timeout,
		DisableIdentity: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// On a Redis Cluster the store keeps the same contract: each of its
// operations touches one key, so each script runs on the node that holds
// the key's slot. The conformance suite runs against a cluster of three
// masters through a redis.ClusterClient, and the keys it wrote are checked
// to be spread over the nodes, so that the cluster was really used.
func TestConformanceCluster(t *testing.T) {
	addrs := startCluster(t, 3)
	client := newClusterClient(t, addrs)
	storetest.Run(t, func(t *testing.T) idempotency.Store {
		return newStoreWithPrefix(t, client, fmt.Sprintf("watertight-test:%s:", t.Name()))
	})

	// Keys of one store land on every node.
	s := newStoreWithPrefix(t, client, "watertight-test:spread:")
	ctx := context.Background()
	for i := range 60 {
		if _, err := s.Claim(ctx, "key-"+strconv.Itoa(i), "fp", time.Minute, time.Hour); err != nil {
			t.Fatalf("Claim key-%d: %v", i, err)
		}
	}
	for _, a := range addrs {
		n, err := newClient(t, a, timeout).DBSize(ctx).Result()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", a, err)
		}
		if n == 0 {
			t.Errorf("node %s holds no key: the keys did not spread over the cluster", a)
		}
	}
}
