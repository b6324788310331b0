#!/usr/bin/env bash
# Runs the side-by-side benchmarks and prints a markdown table of medians.
#
#   bash bench/run.sh [count]     (from the repository root; count defaults to 5)
#
# The …Overhead benchmarks run 3 times for OVERHEAD_TIME (default 8s) each,
# whatever count is.
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

# The …Overhead benchmarks measure a few percent against a noise of about
# ±1.5% per 4 seconds (bench/overhead_test.go): they get runs of their own,
# of overhead_time each (8s unless OVERHEAD_TIME says otherwise), three of
# them.
overhead_time=${OVERHEAD_TIME:-8s}

status=0
go test -run '^$' -bench . -skip 'Overhead' -benchmem -cpu 2 -count "$count" . 2>&1 | tee results.txt >&2 || status=$?
go test -run '^$' -bench 'Overhead' -benchmem -cpu 2 -benchtime "$overhead_time" -count 3 . 2>&1 | tee -a results.txt >&2 || status=$?
go run ./cmd/benchtable < results.txt || status=1
exit "$status"
