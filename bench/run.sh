#!/usr/bin/env bash
# Runs the side-by-side benchmarks and prints a markdown table of medians.
#
#   bash bench/run.sh [count]     (from the repository root; count defaults to 5)
#
# The raw `go test` output is saved to bench/results.txt and echoed to
# standard error as it comes; the table (median ns/op, B/op and allocs/op per
# benchmark, and each one's ns/op as a multiple of watertight's) goes to
# standard output. Needs nothing but Go. Exits non-zero if a benchmark failed,
# after printing the table of those that ran.
set -u
set -o pipefail

count=${1:-5}
cd "$(dirname "$0")" || exit 1

status=0
go test -run '^$' -bench . -benchmem -cpu 2 -count "$count" . 2>&1 | tee results.txt >&2 || status=$?
go run ./cmd/benchtable < results.txt || status=1
exit "$status"
