package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/watertight-go/watertight/contrib/watertightconfig"
)

func configUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  watertight config check [--quiet] FILE ...   (flags before or after the files)
  watertight config watch FILE

Checks configuration files of named breakers, bulkheads, retry policies,
budgets and timeouts (YAML or JSON; docs/configuration.md is the reference)
and prints what each instance resolves to: every field, after the defaults
section and the package defaults, each commented with where its value comes
from. The output is itself a valid file.

On errors, prints every one of them, as FILE:LINE: FIELD: RULE, on stderr.

Flags:
  --quiet    print nothing for a valid file

Exit status: 0 when every file is valid, 2 when one is not (or for a usage
error).

watch loads FILE into a registry, as a service would, and reloads it on
every SIGHUP until interrupted, printing what each reload did: the
instances kept (same objects, state intact), changed (rebuilt), added and
removed — or, for an invalid file, its errors, and that the old
configuration stays. Exit status 2 if FILE is invalid at the start.

`)
}

// runConfig is `watertight config`.
func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		configUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		configUsage(stdout)
		return exitOK
	case "check":
		return runConfigCheck(args[1:], stdout, stderr)
	case "watch":
		return runConfigWatch(ctx, args[1:], stdout, stderr, syscall.SIGHUP)
	}
	fmt.Fprintf(stderr, "watertight config: unknown command %q (commands: check, watch; see watertight config -h)\n", args[0])
	return exitUsage
}

func runConfigCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watertight config check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	quiet := fs.Bool("quiet", false, "")
	// Flags before or after the file names, as for watertight lab.
	var paths []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				configUsage(stdout)
				return exitOK
			}
			fmt.Fprintf(stderr, "watertight config check: %s (see watertight config -h)\n", strings.Replace(err.Error(), " -", " --", 1))
			return exitUsage
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		paths = append(paths, rest[0])
		rest = rest[1:]
	}
	if len(paths) == 0 {
		fmt.Fprintln(stderr, "watertight config check: name a file to check (see watertight config -h)")
		return exitUsage
	}
	code := exitOK
	for i, path := range paths {
		f, err := watertightconfig.Load(path)
		if err != nil {
			code = exitUsage
			var es watertightconfig.Errors
			if !errors.As(err, &es) {
				fmt.Fprintf(stderr, "watertight config check: %v\n", err)
				continue
			}
			for _, e := range es {
				fmt.Fprintln(stderr, e)
			}
			n := "1 error"
			if len(es) != 1 {
				n = fmt.Sprintf("%d errors", len(es))
			}
			fmt.Fprintf(stderr, "watertight config check: %s: invalid, %s\n", path, n)
			continue
		}
		if instances(f) == 0 {
			// Valid, but a service loading it gets nothing: say so, even
			// with --quiet.
			fmt.Fprintf(stderr, "watertight config check: %s: defines nothing: no breakers, bulkheads, retries, budgets, timeouts or hedges (a defaults section alone makes no instance; see docs/configuration.md)\n", path)
		}
		if *quiet {
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := f.Write(stdout); err != nil {
			fmt.Fprintf(stderr, "watertight config check: %v\n", err)
			return exitFailed
		}
	}
	return code
}

// runConfigWatch is `watertight config watch FILE`: it reloads FILE on each
// of sigs until ctx ends.
func runConfigWatch(ctx context.Context, args []string, stdout, stderr io.Writer, sigs ...os.Signal) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "watertight config watch: name one file to watch (see watertight config -h)")
		return exitUsage
	}
	path := args[0]
	f, err := watertightconfig.Load(path)
	if err != nil {
		printConfigErrors(stderr, "watertight config watch", path, err)
		return exitUsage
	}
	reg, err := watertightconfig.NewRegistry(f, watertightconfig.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "watertight config watch: %v\n", err)
		return exitUsage
	}
	var mu sync.Mutex // the reload callback runs in the watcher's goroutine
	mu.Lock()
	stop := watertightconfig.WatchSignals(ctx, reg, path, func(c watertightconfig.Changes, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			printConfigErrors(stdout, "reload rejected, the old configuration stays", path, err)
			return
		}
		fmt.Fprintf(stdout, "reloaded %s: kept %s; changed %s; added %s; removed %s\n", path,
			names(c.Kept), names(c.Changed), names(c.Added), names(c.Removed))
	}, sigs...)
	// Printed once the signals are caught: a signal sent after this line
	// reloads.
	fmt.Fprintf(stdout, "watching %s: %s; send SIGHUP (kill -HUP %d) to reload, ^C to stop\n", path, describeFile(f), os.Getpid())
	mu.Unlock()
	<-ctx.Done()
	stop()
	return exitOK
}

// printConfigErrors prints every error of a configuration file.
func printConfigErrors(w io.Writer, prefix, path string, err error) {
	var es watertightconfig.Errors
	if !errors.As(err, &es) {
		fmt.Fprintf(w, "%s: %v\n", prefix, err)
		return
	}
	for _, e := range es {
		fmt.Fprintln(w, e)
	}
	fmt.Fprintf(w, "%s: %s: %d error(s)\n", prefix, path, len(es))
}

// instances is how many named instances f defines.
func instances(f *watertightconfig.File) int {
	return len(f.Breakers) + len(f.Bulkheads) + len(f.Retries) + len(f.Budgets) + len(f.Timeouts) + len(f.Hedges)
}

// describeFile counts a file's instances by kind.
func describeFile(f *watertightconfig.File) string {
	return fmt.Sprintf("%d breakers, %d bulkheads, %d retries, %d budgets, %d timeouts, %d hedges",
		len(f.Breakers), len(f.Bulkheads), len(f.Retries), len(f.Budgets), len(f.Timeouts), len(f.Hedges))
}

func names(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
