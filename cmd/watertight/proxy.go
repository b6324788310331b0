package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/watertight-go/watertight/contrib/watertightconfig"
	"github.com/watertight-go/watertight/gateway"
)

func proxyUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  watertight proxy --config FILE   run the gateway until interrupted (SIGINT, SIGTERM)
  watertight proxy --check FILE    validate a gateway configuration file and exit

The file holds the library's sections (breakers, bulkheads, retries,
budgets...) and the gateway's own: listeners, admin, upstreams and routes.
Every problem is reported as FILE:LINE: path: rule. On SIGHUP, and when
the file changes, the gateway reloads it, keeping the state of what did not
change (breakers, ejected hosts, budgets, permits in flight); a bad file is
refused and logged, and the old configuration stays. On SIGINT or SIGTERM
it stops taking connections and drains the requests in flight (up to 30s).
The admin listener (127.0.0.1:9901 by default) serves /metrics, /healthz,
/readyz, /config and /state. See docs/gateway.md.

Flags:
  --config FILE     the configuration to run
  --check FILE      only validate FILE
  --watch DURATION  how often to look for a change of the file (default 2s;
                    0: reload on SIGHUP only)
`)
}

// runProxy is `watertight proxy`.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watertight proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config := fs.String("config", "", "")
	check := fs.String("check", "", "")
	watch := fs.Duration("watch", 2*time.Second, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			proxyUsage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "watertight proxy: %s (see watertight proxy -h)\n", strings.Replace(err.Error(), " -", " --", 1))
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "watertight proxy: unexpected argument %q: name the file with --config or --check (see watertight proxy -h)\n", fs.Arg(0))
		return exitUsage
	case (*config == "") == (*check == ""):
		fmt.Fprintln(stderr, "watertight proxy: give either --config FILE (run) or --check FILE (validate) (see watertight proxy -h)")
		return exitUsage
	}
	path := *config + *check
	cfg, err := gateway.Load(path)
	if err != nil {
		var es watertightconfig.Errors
		if !errors.As(err, &es) {
			fmt.Fprintf(stderr, "watertight proxy: %v\n", err)
			return exitUsage
		}
		for _, e := range es {
			fmt.Fprintln(stderr, e)
		}
		fmt.Fprintf(stderr, "%s: %d error(s)\n", path, len(es))
		return exitUsage
	}
	if *check != "" {
		fmt.Fprintf(stdout, "%s: ok: %d listener(s), %d upstream(s), %d route(s)\n", path, len(cfg.Listeners), len(cfg.Upstreams), len(cfg.Routes))
		return exitOK
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if *watch < 0 {
		fmt.Fprintf(stderr, "watertight proxy: --watch must be >= 0 (0: reload on SIGHUP only), got %v\n", *watch)
		return exitUsage
	}
	interval := *watch
	if interval == 0 {
		interval = -1 // gateway.Options: negative is SIGHUP only
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: log, ConfigPath: path, WatchInterval: interval})
	if err != nil {
		fmt.Fprintf(stderr, "watertight proxy: %v\n", err)
		return exitFailed
	}
	if err := g.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "watertight proxy: %v\n", err)
		return exitFailed
	}
	return exitOK
}
