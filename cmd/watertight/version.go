package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

const versionUsage = `Usage:
  watertight version

Prints the version of the watertight command's module — the one go install
recorded (v1.2.3, or a pseudo-version), "(devel)" for a build from a
checkout — and the Go version it was built with.

`

// runVersion is `watertight version`.
func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprint(stdout, versionUsage)
			return exitOK
		}
		fmt.Fprintf(stderr, "watertight version: takes no arguments, got %q (see watertight help version)\n", args[0])
		return exitUsage
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(info, ok, runtime.Version()))
	return exitOK
}

// versionLine is what `watertight version` prints: "watertight VERSION
// (GOVERSION)", VERSION the main module's version from the build
// information, or "(devel)" when it has none.
func versionLine(info *debug.BuildInfo, ok bool, goVersion string) string {
	v := ""
	if ok && info != nil {
		v = info.Main.Version
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("watertight %s %s", v, goVersion)
}
