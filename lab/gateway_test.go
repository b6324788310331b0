package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func init() {
	// A run without Options.Executable (the seed sweep) builds the
	// watertight command for itself.
	gwExecutableForTests = func() (string, func(), error) {
		dir, err := os.MkdirTemp("", "watertight-lab-test-")
		if err != nil {
			return "", nil, err
		}
		exe, err := gwBuild(dir)
		if err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
		return exe, func() { os.RemoveAll(dir) }, nil
	}
}

// gwBuild builds the watertight command into dir (without -race: the
// children's timing should not pay for the detector) and returns its path.
// It needs the repository's go.work, which ties the command's module to
// this one.
func gwBuild(dir string) (string, error) {
	goBin, err := exec.LookPath("go") // go test puts its own first on PATH
	if err != nil {
		return "", fmt.Errorf("no go command to build the watertight command with: %w", err)
	}
	exe := filepath.Join(dir, "watertight")
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	cmd := exec.Command(goBin, "build", "-o", exe, "./cmd/watertight")
	cmd.Dir = ".." // the repository's root, with go.work
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/watertight (from the repository's root, with its go.work): %v\n%s", err, out)
	}
	return exe, nil
}

// gwTestBinary builds the watertight command for one test.
func gwTestBinary(t *testing.T) string {
	t.Helper()
	start := time.Now()
	exe, err := gwBuild(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built the watertight command in %v", time.Since(start).Round(100*time.Millisecond))
	return exe
}

// TestGatewayProcesses builds the watertight command once and runs the
// tests that start its processes: the quick scenario, the files it writes
// checked by the gateway, and every way out of a run leaving no process
// behind (a gateway that fails to start, a cancelled run, a killed lab).
func TestGatewayProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the watertight command and runs the gateway and its backends as processes for about 30 s")
	}
	exe := gwTestBinary(t)
	t.Run("Quick", func(t *testing.T) { testGatewayQuick(t, exe) })
	t.Run("ConfigsCheck", func(t *testing.T) { testGatewayConfigsCheck(t, exe) })
	t.Run("FailedStartLeavesNoProcess", func(t *testing.T) { testGatewayFailedStart(t, exe) })
	t.Run("CancelledLeavesNoProcess", func(t *testing.T) { testGatewayCancelled(t, exe) })
	t.Run("ChildrenDieWithTheLab", func(t *testing.T) { testGatewayKilledLab(t, exe) })
}

// testGatewayQuick runs the quick gateway scenario — five kinds of
// process, six runs — and holds it to its own checks: the protected
// gateway keeps catalog and payment, the empty one loses them, premium
// keeps its latency beside a noisy free tier (and does not without
// tenants), hedging cuts the tail for few extra requests. A machine too
// loaded to keep time (the load generator paused, or a 1 ms timer beside it
// late) skips, saying what would have failed. Every child process must be
// gone afterwards.
func testGatewayQuick(t *testing.T, exe string) {
	s, err := Lookup("gateway")
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	probe := startTimerProbe()
	start := time.Now()
	res, err := s.Run(t.Context(), Options{Seed: 1, Quick: true, Progress: &syncWriter{w: &progress}, Executable: exe})
	probe.stop()
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	load, _ := os.ReadFile("/proc/loadavg") // the other work on the machine, where there is one
	t.Logf("took %v; load average %s\n%s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(load)), progress.String())
	for _, tb := range res.Tables {
		t.Log(tb.Title)
		for _, r := range tb.Rows {
			t.Log("  ", strings.Join(r, " | "))
		}
	}
	doc, ok := res.JSON.(gwJSON)
	if !ok {
		t.Fatalf("JSON is %T, want gwJSON", res.JSON)
	}
	if len(doc.Storefront) != 6 || len(doc.Hedge) != 2 || len(doc.Noise) < 3 {
		t.Errorf("got %d storefront rows, %d hedge rows, %d noise rows; want 6, 2 and at least 3", len(doc.Storefront), len(doc.Hedge), len(doc.Noise))
	}
	if want := 8; doc.TenantsSkipped != "" && len(doc.Tenants) != want/2 || doc.TenantsSkipped == "" && len(doc.Tenants) != want {
		t.Errorf("got %d tenants rows, want %d (2 configs × 2 phases × 2 tiers)", len(doc.Tenants), want)
	}
	for _, name := range []string{"unprotected", "protected", "one-bulkhead", "hedge"} {
		if !strings.Contains(doc.Configs[name], "routes:") {
			t.Errorf("no gateway file for %s in the JSON document", name)
		}
	}
	if len(res.Checks) != 11 && !(doc.TenantsSkipped != "" && len(res.Checks) == 10) {
		t.Errorf("got %d checks, want 11", len(res.Checks))
	}
	var failed []string
	for _, c := range res.Checks {
		t.Logf("check %v: %s%s", c.OK, c.Name, checkNumbers(c))
		if !c.OK {
			failed = append(failed, c.Name+checkNumbers(c))
		}
	}
	if len(failed) > 0 {
		why := gatewayStarved(doc)
		if why == "" {
			why = probe.starved()
		}
		if why != "" {
			t.Skipf("machine too loaded for a real-time measurement (%s); would have failed:\n%s", why, strings.Join(failed, "\n"))
		}
		t.Errorf("%d checks failed:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	if kids := gwChildren(t, os.Getpid()); len(kids) > 0 {
		t.Errorf("child processes left after the run: %v", kids)
	}
	goleak.VerifyNone(t)
}

// gatewayStarved says why the machine did not keep up during a run of the
// gateway scenario, or "": the load generator sent a request of a run whose
// checks hold it to a latency (not the unprotected one's, whose load
// generator has a collapse to carry) more than 50 ms late, or the protected
// run's healthy catalog or payment already missed (before any stall).
func gatewayStarved(doc gwJSON) string {
	var why []string
	for _, n := range doc.Noise {
		if n.Run != "unprotected" && n.LagMaxMs > 50 {
			why = append(why, fmt.Sprintf("%s: the load generator was paused for up to %.0f ms", n.Run, n.LagMaxMs))
		}
	}
	for _, r := range doc.Storefront {
		if r.Config == "protected" && r.Route != "recommendation" && (r.WarmupSuccessRate < 0.99 || r.WarmupP99Ms > 100) {
			why = append(why, fmt.Sprintf("healthy %s: success %.2f%%, p99 %.0f ms", r.Route, 100*r.WarmupSuccessRate, r.WarmupP99Ms))
		}
	}
	return strings.Join(why, "; ")
}

// syncWriter is a writer safe for concurrent use.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// gwChildren returns the process ids of the live (not zombie) processes
// whose parent is parent, from /proc; it skips the test elsewhere than on
// Linux.
func gwChildren(t *testing.T, parent int) []int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("counts child processes through /proc (Linux)")
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid, ok := gwProcStat(pid); ok && ppid == parent && state != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// gwProcStat reads a process's state and parent from /proc/PID/stat.
func gwProcStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0], ppid, err == nil
}

// gwAlive reports whether pid is a live process (a zombie is not).
func gwAlive(pid int) bool {
	state, _, ok := gwProcStat(pid)
	return ok && state != "Z"
}

// testGatewayCancelled: a run cancelled while its processes serve (the
// CLI's ^C) returns, and has killed and waited for every child.
func testGatewayCancelled(t *testing.T, exe string) {
	if runtime.GOOS != "linux" {
		t.Skip("counts child processes through /proc (Linux)")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// Cancel once the first gateway serves: three backends and the gateway
	// are then running.
	var seen []int
	w := &lineWriter{fn: func(line string) {
		if strings.Contains(line, "through the gateway") && seen == nil {
			seen = gwChildren(t, os.Getpid())
			cancel()
		}
	}}
	s, _ := Lookup("gateway")
	_, err := s.Run(ctx, Options{Seed: 1, Quick: true, Progress: w, Executable: exe})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: got %v, want context.Canceled", err)
	}
	if len(seen) != 4 {
		t.Errorf("while the first run served, %d child processes (%v), want 4 (three backends and the gateway)", len(seen), seen)
	}
	if kids := gwChildren(t, os.Getpid()); len(kids) > 0 {
		t.Errorf("child processes left after the cancelled run: %v", kids)
	}
	for _, pid := range seen {
		if gwAlive(pid) {
			t.Errorf("process %d still alive", pid)
		}
	}
	goleak.VerifyNone(t)
}

// lineWriter calls fn with each whole line written to it, in the writer's
// goroutine.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	fn  func(string)
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.buf[:i])
		l.buf = l.buf[i+1:]
		l.fn(line)
	}
}

// testGatewayKilledLab: when the lab's process is killed (SIGKILL: no
// deferred function runs), its backends and gateway die too (Pdeathsig;
// the backends also see their stdin end). The lab is this test binary, run
// again as TestGatewayHelperProcess.
func testGatewayKilledLab(t *testing.T, exe string) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig, and /proc to see the processes, are Linux's")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGatewayHelperProcess$")
	// The killed lab cannot remove its temporary folder: it makes it here.
	cmd.Env = append(os.Environ(), "WATERTIGHT_GATEWAY_HELPER="+exe, "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			for _, s := range strings.Fields(f) {
				n, _ := strconv.Atoi(s)
				pids = append(pids, n)
			}
			break
		}
	}
	cmd.Process.Kill()
	io.Copy(io.Discard, out)
	cmd.Wait()
	if len(pids) != 4 {
		t.Fatalf("the helper reported %d children (%v), want 4; its stderr:\n%s", len(pids), pids, stderr.String())
	}
	// The kernel kills them as their parent dies; watch them go.
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for gwAlive(pid) && time.Now().Before(deadline) {
			runtime.Gosched()
			time.Sleep(10 * time.Millisecond) // waiting on the kernel, not on a goroutine of this test
		}
		if gwAlive(pid) {
			t.Errorf("process %d outlived the lab by 10 s", pid)
			if pr, err := os.FindProcess(pid); err == nil {
				pr.Kill()
			}
		}
	}
}

// TestGatewayHelperProcess is the lab that testGatewayKilledLab kills: it runs the scenario and, once the first gateway serves, prints
// its children's ids and waits to be killed. Skipped unless run so.
func TestGatewayHelperProcess(t *testing.T) {
	exe := os.Getenv("WATERTIGHT_GATEWAY_HELPER")
	if exe == "" {
		t.Skip("the helper process of TestGatewayProcesses/ChildrenDieWithTheLab")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &lineWriter{fn: func(line string) {
		if strings.Contains(line, "through the gateway") {
			var b strings.Builder
			for _, pid := range gwChildren(t, os.Getpid()) {
				fmt.Fprintf(&b, " %d", pid)
			}
			fmt.Printf("PIDS%s\n", b.String())
			select {} // until killed
		}
	}}
	s, _ := Lookup("gateway")
	s.Run(ctx, Options{Seed: 1, Quick: true, Progress: w, Executable: exe})
	t.Fatal("the run ended before its gateway served")
}

// testGatewayFailedStart: a gateway that refuses its file fails the run
// with its log's tail in the error, and the backends started before it are
// stopped.
func testGatewayFailedStart(t *testing.T, exe string) {
	procs := &gwProcs{exe: exe, dir: t.TempDir()}
	b, err := procs.backend("catalog", "--latency", "1ms")
	if err != nil {
		t.Fatal(err)
	}
	_, err = procs.gateway(t.Context(), "bad", func(listen, admin string) string {
		return fmt.Sprintf("listeners: {public: {address: %s}}\nadmin: {address: %s}\nupstreams: {a: {hosts: [%s]}}\nroutes: {r: {upstream: nope}}\n", listen, admin, b.addr)
	})
	if err == nil {
		t.Fatal("a file naming a missing upstream: no error")
	}
	for _, want := range []string{"bad's log", `no upstream named "nope"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if err := procs.alive(); err != nil {
		t.Errorf("the backend exited by itself: %v", err)
	}
	pids := procs.pids()
	procs.stopAll()
	if len(pids) != 1 {
		t.Errorf("%d processes left to stop, want the backend alone: %v", len(pids), pids)
	}
	if runtime.GOOS == "linux" {
		if kids := gwChildren(t, os.Getpid()); len(kids) > 0 {
			t.Errorf("child processes left: %v", kids)
		}
	}
	goleak.VerifyNone(t)
}

// testGatewayConfigsCheck: every file the scenario writes is one the
// gateway accepts (`watertight proxy --check`), quick and full.
func testGatewayConfigsCheck(t *testing.T, exe string) {
	dir := t.TempDir()
	ups := [3]string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	for _, quick := range []bool{false, true} {
		p := gwParamsFor(Options{Seed: 1, Quick: quick})
		files := map[string]func(string, string) string{
			"unprotected": gwStorefrontConfig(p, false, ups),
			"protected":   gwStorefrontConfig(p, true, ups),
			"tenants":     gwTenantsConfig(p, ups[0], true),
			"bulkhead":    gwTenantsConfig(p, ups[0], false),
			"hedge":       gwHedgeConfig(p, [2]string{ups[0], ups[1]}),
		}
		for name, f := range files {
			path := filepath.Join(dir, fmt.Sprintf("%s-%v.yaml", name, quick))
			if err := os.WriteFile(path, []byte(f("127.0.0.1:8080", "127.0.0.1:9901")), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(exe, "proxy", "--check", path).CombinedOutput()
			if err != nil {
				t.Errorf("%s (quick %v): watertight proxy --check: %v\n%s", name, quick, err, out)
			}
		}
	}
}

// TestGatewayFiles: what each file says, as the summary and docs say it.
func TestGatewayFiles(t *testing.T) {
	p := gwParamsFor(Options{Seed: 1})
	ups := [3]string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	empty := gwStorefrontConfig(p, false, ups)("127.0.0.1:8080", "127.0.0.1:9901")
	for _, absent := range []string{"bulkhead", "breaker", "fallback", "timeout: 2"} {
		if strings.Contains(empty, absent+":") {
			t.Errorf("the empty file has %s:\n%s", absent, empty)
		}
	}
	if strings.Count(empty, "timeout: off") != 3 || strings.Count(empty, "retry: none") != 3 {
		t.Errorf("the empty file should turn the default timeout and retries off on each route:\n%s", empty)
	}
	prot := gwStorefrontConfig(p, true, ups)("127.0.0.1:8080", "127.0.0.1:9901")
	for _, want := range []string{"breaker: per-host", "bulkhead: catalog", "bulkhead: payment", "bulkhead: recommendation", "timeout: 400ms", "timeout: 250ms", `fallback: {status: 200, body: '{"items":[]}'`} {
		if !strings.Contains(prot, want) {
			t.Errorf("the protected file lacks %q:\n%s", want, prot)
		}
	}
	// Little's law and Erlang: 150/s × 200 ms = 30 in flight; 10 ms and
	// 20 ms make 1.5 and 3.
	for i, want := range []int{9, 12, 52} {
		if got := gwSize(p, i).permits; got != want {
			t.Errorf("%s: %d permits, want %d", sfRoutes[i].name, got, want)
		}
	}
	ten := gwTenantsConfig(p, ups[0], true)("127.0.0.1:8080", "127.0.0.1:9901")
	if !strings.Contains(ten, "tenants: {key: header X-Tier, max_concurrent: 30, shares: {premium: 3, free: 1}}") || strings.Contains(ten, "bulkhead") {
		t.Errorf("tenants file:\n%s", ten)
	}
	one := gwTenantsConfig(p, ups[0], false)("127.0.0.1:8080", "127.0.0.1:9901")
	if !strings.Contains(one, "tiers: {max_concurrent: 30, max_wait: 100ms}") || !strings.Contains(one, "bulkhead: tiers") || strings.Contains(one, "tenants:") {
		t.Errorf("one-bulkhead file:\n%s", one)
	}
	if got := p.freeShareRate(); got != 60 {
		t.Errorf("free tier's share: %v req/s, want 60 (30 permits × 1/5 over 100 ms)", got)
	}
	hg := gwHedgeConfig(p, [2]string{ups[0], ups[1]})("127.0.0.1:8080", "127.0.0.1:9901")
	if !strings.Contains(hg, "hedges:\n  reads: {percentile: 0.97, min_delay: 10ms}") || strings.Count(hg, "hedge: reads") != 1 {
		t.Errorf("hedge file:\n%s", hg)
	}
}

// TestGatewaySchedules: the arrivals are the seed's, in order, numbered per
// route, at the rates asked.
func TestGatewaySchedules(t *testing.T) {
	p := gwParamsFor(Options{Seed: 7, Quick: true})
	a, b := gwStorefrontSchedule(p), gwStorefrontSchedule(p)
	if len(a) != len(b) {
		t.Fatalf("same seed, %d and %d arrivals", len(a), len(b))
	}
	next := map[int]uint64{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, arrival %d differs: %+v vs %+v", i, a[i], b[i])
		}
		if i > 0 && a[i].at < a[i-1].at {
			t.Fatalf("arrival %d out of order", i)
		}
		if a[i].id != next[a[i].route] {
			t.Fatalf("arrival %d of route %d has id %d, want %d", i, a[i].route, a[i].id, next[a[i].route])
		}
		next[a[i].route]++
	}
	want := p.rate * (p.warmup + p.stalled).Seconds()
	for r, n := range next {
		if float64(n) < 0.8*want || float64(n) > 1.2*want {
			t.Errorf("route %d: %d arrivals, want about %.0f", r, n, want)
		}
	}
	arr := gwPoisson(nil, 1, 2, 300, time.Second, 3*time.Second, 0)
	if len(arr) < 500 || len(arr) > 700 || arr[0].at < time.Second || arr[len(arr)-1].at >= 3*time.Second {
		t.Errorf("300/s over [1s, 3s): %d arrivals from %v to %v", len(arr), arr[0].at, arr[len(arr)-1].at)
	}
	if c := gwStorefrontSchedule(gwParamsFor(Options{Seed: 8, Quick: true})); len(c) == len(a) && c[0] == a[0] {
		t.Error("another seed gave the same schedule")
	}
}

// TestGatewayNeedsExecutable: without the watertight command, the run says
// what it needs.
func TestGatewayNeedsExecutable(t *testing.T) {
	saved := gwExecutableForTests
	gwExecutableForTests = nil
	defer func() { gwExecutableForTests = saved }()
	_, _, err := gwExecutable(Options{})
	if err == nil || !strings.Contains(err.Error(), "Options.Executable") {
		t.Errorf("got %v, want an error naming Options.Executable", err)
	}
	exe, done, err := gwExecutable(Options{Executable: "/bin/watertight"})
	if err != nil || exe != "/bin/watertight" {
		t.Errorf("got %q, %v", exe, err)
	}
	done()
}

// gwHedgeDecided reports whether the seed of p alone puts the hedged
// route's p99.9 on a stall: whether, among the hedged route's requests
// that the statistics count, at least as many stall on both hosts (no
// hedge can help those) as the p99.9 reaches into the tail. The draws are
// the backends' (gwBackend.latency), from the seed, the host's name and
// the request's number.
func gwHedgeDecided(p gwParams) (decided bool, doubles, n int) {
	var arr []gwArrival
	for i := range gwHedgeRoutes {
		arr = gwPoisson(arr, p.seed, 0x4ed6+uint64(i), p.hedgeRate, 0, p.hedgeLoad, i)
	}
	host := func(name string) *gwBackend {
		return newGWBackend(gwBackendConfig{name: name, rareRate: p.hedgeRareRate, rare: p.hedgeRare, seed: p.seed})
	}
	a, b := host("hedge-host-a"), host("hedge-host-b")
	for _, x := range gwSort(arr) {
		if x.route != 0 || x.at < p.settle {
			continue
		}
		n++
		id := strconv.FormatUint(x.id, 10)
		if a.latency(id) == p.hedgeRare && b.latency(id) == p.hedgeRare {
			doubles++
		}
	}
	tail := n - int(math.Ceil(0.999*float64(n))) + 1 // the p99.9 is the tail-th largest
	return doubles >= tail, doubles, n
}

// TestGatewayHedgeSeedsDoNotDecideTheTail: with 1% of stalls on each host,
// a hedged request stalls when both hosts do, 1 in 10,000; the hedged
// route's p99.9 measures the hedge only if its requests are enough that
// those double stalls stay out of its tail. At 300 req/s they are for
// seeds 1–20 (the seed sweep's) quick and full, and for all but a few of
// seeds 1–500 (1–200 under -race); at 250 req/s the quick run's p99.9 is
// its largest request, and about one seed in nine is decided by its luck
// alone.
func TestGatewayHedgeSeedsDoNotDecideTheTail(t *testing.T) {
	seeds := uint64(500)
	if raceEnabled {
		seeds = 200
	}
	count := func(p gwParams) (decided int) {
		for seed := uint64(1); seed <= seeds; seed++ {
			p.seed = seed
			d, doubles, n := gwHedgeDecided(p)
			if !d {
				continue
			}
			decided++
			if seed <= quickSeeds && p.hedgeRate == gwParamsFor(Options{}).hedgeRate {
				t.Errorf("quick %v, seed %d: %d of the %d hedged requests stall on both hosts: the seed decides the p99.9", p.quick, seed, doubles, n)
			}
		}
		return decided
	}
	for _, quick := range []bool{true, false} {
		decided := count(gwParamsFor(Options{Quick: quick}))
		t.Logf("quick %v: %d of seeds 1–%d decided by their double stalls", quick, decided, seeds)
		if decided*50 > int(seeds) {
			t.Errorf("quick %v: %d of seeds 1–%d decided by their double stalls, want at most 2%%", quick, decided, seeds)
		}
	}
	// The same count catches too few requests.
	p := gwParamsFor(Options{Quick: true})
	p.hedgeRate = 250
	if decided := count(p); decided*20 < int(seeds) {
		t.Errorf("at 250 req/s, %d of seeds 1–%d decided, want at least 5%% (about one in nine)", decided, seeds)
	}
}

// gwFakeRun is a run whose requests of each route took the latencies given
// (one per request, scheduled 1 ms apart from the start).
func gwFakeRun(name string, lat map[int][]time.Duration, ok func(route int, d time.Duration) bool) *gwRun {
	r := &gwRun{name: name}
	for route, ds := range lat {
		for k, d := range ds {
			at := time.Duration(k) * time.Millisecond
			r.sched = append(r.sched, gwArrival{at: at, route: route, id: uint64(k)})
			r.samples = append(r.samples, gwSample{at: at, lat: d, status: 200, ok: ok(route, d)})
		}
	}
	return r
}

// TestGatewayReportTenants: the tenants lines from known samples — a
// premium tier slower by half once free is noisy fails the 1.2× line and
// passes the control's; a run the gateway refused is reported as not run,
// with the gateway's words, and the control still counts.
func TestGatewayReportTenants(t *testing.T) {
	p := gwParamsFor(Options{Seed: 1})
	p.settle = 0
	half := int(p.tenantPhase / time.Millisecond) // requests per phase, 1 ms apart
	steady := make([]time.Duration, 2*half)
	slower := make([]time.Duration, 2*half)
	for k := range steady {
		steady[k] = 100 * time.Millisecond
		slower[k] = 100 * time.Millisecond
		if k >= half {
			slower[k] = 150 * time.Millisecond
		}
	}
	all := func(int, time.Duration) bool { return true }
	var runs [2]*gwRun
	runs[0] = gwFakeRun("tenants", map[int][]time.Duration{0: steady, 1: slower}, all)
	runs[1] = gwFakeRun("one-bulkhead", map[int][]time.Duration{0: slower, 1: slower}, all)
	res, doc := &Result{}, &gwJSON{}
	gwReportTenants(p, runs, res, doc)
	want := []bool{true, true, true} // tenants p99, premium success, the control
	if len(res.Checks) != 3 {
		t.Fatalf("%d checks, want 3", len(res.Checks))
	}
	for i, c := range res.Checks {
		if c.OK != want[i] {
			t.Errorf("check %q: %v, want %v (%s)", c.Name, c.OK, want[i], checkNumbers(c))
		}
	}
	if v := res.Checks[2].Value; v != 1.5 {
		t.Errorf("control ratio %v, want 1.5", v)
	}
	runs[0], runs[1] = runs[1], runs[0] // premium slower with tenants, steady without
	runs[0].name, runs[1].name = "tenants", "one-bulkhead"
	res = &Result{}
	gwReportTenants(p, runs, res, doc)
	for i, c := range res.Checks {
		if c.OK == (i != 1) { // the ratio and the control fail, success holds
			t.Errorf("swapped: check %q: %v (%s)", c.Name, c.OK, checkNumbers(c))
		}
	}
	runs[0] = &gwRun{name: "tenants", skipped: "watertight proxy: gateway: route tiers: is not built yet"}
	res, doc = &Result{}, &gwJSON{}
	gwReportTenants(p, runs, res, doc)
	if len(res.Checks) != 2 || !strings.Contains(res.Checks[0].Name, "NOT RUN") || !res.Checks[0].OK || !strings.Contains(res.Checks[0].Detail, "is not built yet") {
		t.Errorf("skipped tenants: checks %+v", res.Checks)
	}
	if doc.TenantsSkipped == "" || len(doc.Tenants) != 4 {
		t.Errorf("skipped tenants: JSON %q with %d rows, want the reason and the control's 4 rows", doc.TenantsSkipped, len(doc.Tenants))
	}
}
