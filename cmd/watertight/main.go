// Command watertight is watertight's command line.
//
//	watertight lab [scenario ...] [flags]
//
// runs the lab's scenarios — simulations and experiments that reproduce
// what the literature says about each pattern, with the shipped packages —
// prints a table per scenario and writes a report with charts (see
// `watertight lab -h`).
//
//	watertight config check FILE ...
//
// validates configuration files of named breakers, bulkheads, retry
// policies, budgets and timeouts and prints what each instance resolves to
// (see docs/configuration.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first ^C has cancelled the context, a second one kills the
	// process the default way.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
