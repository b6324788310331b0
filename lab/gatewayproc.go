package lab

// The gateway scenario's processes: the backends (`watertight lab-backend`)
// and the gateway (`watertight proxy`), each a child process of the lab.
// Every child is killed and waited for on every way out of a run (stopAll,
// deferred by the run that started it); on Linux a child that outlives the
// lab anyway (the lab was killed) is killed by the kernel (Pdeathsig), and
// a backend also exits when its stdin, a pipe from the lab, ends. A child's
// stderr goes to a log file in the run's temporary folder, whose tail is
// shown when something fails.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process timings.
const (
	gwStartTimeout = 15 * time.Second // a child listens (backend) or says it is ready (gateway)
	gwStopGrace    = 3 * time.Second  // after SIGTERM, before SIGKILL
	gwLogTail      = 15               // lines of a child's log shown on failure
)

// gwProcs are the child processes of one run of the gateway scenario.
type gwProcs struct {
	exe   string // the watertight command
	dir   string // logs and configuration files
	mu    sync.Mutex
	procs []*gwProc
}

// gwProc is one child process.
type gwProc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	stdin   io.WriteCloser // the backends' stdin; nil for the gateway
	done    chan struct{}  // closed once Wait has returned
	waitErr error          // Wait's, once done is closed
	reader  sync.WaitGroup // the goroutine that reads its stdout
	addr    string         // where it listens
	mu      sync.Mutex
	stopped bool // stop was called: its exit is not a failure
}

// start starts exe args as the child called name. With listens, the
// child's stdout is a pipe whose first line start reads ("listening on
// ADDR": a backend), and its stdin a pipe the child watches; otherwise
// stdout goes to the log too.
func (s *gwProcs) start(name string, args []string, listens bool) (*gwProc, error) {
	p := &gwProc{name: name, logPath: filepath.Join(s.dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, fmt.Errorf("gateway: %s: log file: %w", name, err)
	}
	defer logf.Close() // the child has its own copy
	p.cmd = exec.Command(s.exe, args...)
	p.cmd.Stderr = logf
	p.cmd.Stdout = logf
	p.cmd.SysProcAttr = gwSysProcAttr()
	var out, outW *os.File
	if listens {
		if out, outW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("gateway: %s: %w", name, err)
		}
		p.cmd.Stdout = outW
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			out.Close()
			outW.Close()
			return nil, fmt.Errorf("gateway: %s: %w", name, err)
		}
	}
	err = p.cmd.Start()
	if outW != nil {
		outW.Close() // the child's copy stays open while it runs
	}
	if err != nil {
		if out != nil {
			out.Close()
		}
		if p.stdin != nil {
			p.stdin.Close()
		}
		return nil, fmt.Errorf("gateway: starting %s (%s): %w", name, s.exe, err)
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	if out != nil {
		addrc := make(chan error, 1)
		p.reader.Go(func() {
			defer out.Close()
			br := bufio.NewReader(out)
			addr, err := gwReadListening(br)
			p.addr = addr
			addrc <- err
			io.Copy(io.Discard, br) // until the child exits
		})
		timer := time.NewTimer(gwStartTimeout)
		defer timer.Stop()
		select {
		case err = <-addrc:
		case <-timer.C:
			err = fmt.Errorf("did not listen within %v", gwStartTimeout)
		}
		if err != nil {
			s.stop(p)
			return nil, fmt.Errorf("gateway: %s: %w%s", name, err, p.tail())
		}
	}
	return p, nil
}

// backend starts `watertight lab-backend --name NAME args...` and returns
// it once it listens.
func (s *gwProcs) backend(name string, args ...string) (*gwProc, error) {
	return s.start(name, append([]string{"lab-backend", "--name", name, "--stdin-exit"}, args...), true)
}

// errGWNotBuilt is a gateway that refused its file because a part of it
// is not built yet in this version of the gateway.
type errGWNotBuilt struct{ msg string }

func (e errGWNotBuilt) Error() string { return e.msg }

// gwGateway is a running `watertight proxy`.
type gwGateway struct {
	proc  *gwProc
	url   string // the public listener: http://127.0.0.1:PORT
	admin string // the admin listener: http://127.0.0.1:PORT
	file  string // its configuration
}

// gateway writes the configuration config(listen, admin) — two free
// addresses on 127.0.0.1 — to NAME.yaml, runs `watertight proxy --config
// NAME.yaml --watch 0` and returns once its /readyz says ready. A port
// taken between the choice and the gateway's listen is chosen again, up to
// three times. A file the gateway refuses because a part of it is not
// built yet gives an errGWNotBuilt.
func (s *gwProcs) gateway(ctx context.Context, name string, config func(listen, admin string) string) (*gwGateway, error) {
	var err error
	for range 3 {
		var addrs [2]string
		if addrs, err = gwFreeAddrs(); err != nil {
			return nil, err
		}
		g := &gwGateway{url: "http://" + addrs[0], admin: "http://" + addrs[1], file: filepath.Join(s.dir, name+".yaml")}
		if err = os.WriteFile(g.file, []byte(config(addrs[0], addrs[1])), 0o644); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		if g.proc, err = s.start(name, []string{"proxy", "--config", g.file, "--watch", "0"}, false); err != nil {
			return nil, err
		}
		if err = g.waitReady(ctx); err == nil {
			return g, nil
		}
		s.stop(g.proc)
		log := g.proc.log()
		switch {
		case strings.Contains(log, "address already in use"):
			continue // another process took a port: choose again
		case strings.Contains(log, "is not built yet"):
			return nil, errGWNotBuilt{msg: strings.TrimSpace(gwLastLine(log))}
		}
		return nil, fmt.Errorf("gateway: %s: %w%s", name, err, g.proc.tail())
	}
	return nil, fmt.Errorf("gateway: %s: no free ports after three tries: %w", name, err)
}

// waitReady polls the gateway's /readyz until it answers 200.
func (g *gwGateway) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.NewTimer(gwStartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := client.Get(g.admin + "/readyz"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-g.proc.done:
			return fmt.Errorf("exited before it was ready (%v)", g.proc.waitErr)
		case <-deadline.C:
			return fmt.Errorf("not ready within %v", gwStartTimeout)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// gwFreeAddrs returns two addresses on 127.0.0.1 that were free a moment
// ago: both listened on at once, so they differ, then closed.
func gwFreeAddrs() ([2]string, error) {
	var out [2]string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for i := range out {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return out, fmt.Errorf("gateway: choosing a free port: %w", err)
		}
		lns = append(lns, ln)
		out[i] = ln.Addr().String()
	}
	return out, nil
}

// stop ends p: its stdin closed, SIGTERM, and SIGKILL if it has not exited
// gwStopGrace later; it returns once p has been waited for, and forgets it.
func (s *gwProcs) stop(p *gwProc) {
	s.mu.Lock()
	s.procs = slices.DeleteFunc(s.procs, func(q *gwProc) bool { return q == p })
	s.mu.Unlock()
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	if p.stdin != nil {
		p.stdin.Close()
	}
	select {
	case <-p.done:
	default:
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			p.cmd.Process.Kill()
		}
		timer := time.NewTimer(gwStopGrace)
		select {
		case <-p.done:
		case <-timer.C:
			p.cmd.Process.Kill()
			<-p.done
		}
		timer.Stop()
	}
	p.reader.Wait()
}

// stopAll stops every child, the last started first, in parallel.
func (s *gwProcs) stopAll() {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { s.stop(p) })
	}
	wg.Wait()
}

// pids are the process ids of the children started and not yet stopped
// (tests).
func (s *gwProcs) pids() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for _, p := range s.procs {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

// alive returns an error naming each child that exited without being
// asked to, with its log's tail; nil if every child still runs.
func (s *gwProcs) alive() error {
	s.mu.Lock()
	procs := s.procs
	s.mu.Unlock()
	var errs []error
	for _, p := range procs {
		p.mu.Lock()
		stopped := p.stopped
		p.mu.Unlock()
		select {
		case <-p.done:
			if !stopped {
				errs = append(errs, fmt.Errorf("gateway: %s exited during the run (%v)%s", p.name, p.waitErr, p.tail()))
			}
		default:
		}
	}
	return errors.Join(errs...)
}

// tails is the tail of every child's log, for a report of a failure.
func (s *gwProcs) tails() string {
	s.mu.Lock()
	procs := s.procs
	s.mu.Unlock()
	var b strings.Builder
	for _, p := range procs {
		b.WriteString(p.tail())
	}
	return b.String()
}

// log is p's log so far.
func (p *gwProc) log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// tail is the last lines of p's log, as a paragraph to append to an error
// ("" when the log is empty).
func (p *gwProc) tail() string {
	log := strings.TrimRight(p.log(), "\n")
	if log == "" {
		return ""
	}
	lines := strings.Split(log, "\n")
	if len(lines) > gwLogTail {
		lines = lines[len(lines)-gwLogTail:]
	}
	return fmt.Sprintf("\n--- the last lines of %s's log (%s):\n%s", p.name, strings.Join(p.cmd.Args, " "), strings.Join(lines, "\n"))
}

// gwLastLine is the last line of a log that is not empty.
func gwLastLine(log string) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	return lines[len(lines)-1]
}
