package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/watertight-go/watertight/contrib/config"
)

func configUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  watertight config check [--quiet] FILE ...

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

`)
}

// runConfig is `watertight config`.
func runConfig(args []string, stdout, stderr io.Writer) int {
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
	}
	fmt.Fprintf(stderr, "watertight config: unknown command %q (commands: check; see watertight config -h)\n", args[0])
	return exitUsage
}

func runConfigCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watertight config check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	quiet := fs.Bool("quiet", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			configUsage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "watertight config check: %v (see watertight config -h)\n", err)
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "watertight config check: name a file to check (see watertight config -h)")
		return exitUsage
	}
	code := exitOK
	for i, path := range fs.Args() {
		f, err := config.Load(path)
		if err != nil {
			code = exitUsage
			var es config.Errors
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
