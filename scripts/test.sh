#!/usr/bin/env bash
# Runs every module's tests with -race, then each fuzz target for a few
# seconds. This is the README's test command; .ci/run calls it.
#   FUZZTIME=5s bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-5s}

# Every module in the repository (the root and the nested ones).
mapfile -t modules < <(find . -name go.mod -not -path '*/testdata/*' -printf '%h\n' | sort)

for m in "${modules[@]}"; do
	echo "== go test -race ./... in $m"
	(cd "$m" && go test -race -count=1 ./...)
done

for m in "${modules[@]}"; do
	(
		cd "$m"
		for pkg in $(go list ./...); do
			for f in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
				echo "== fuzz $pkg $f for $fuzztime"
				go test -run '^$' -fuzz "^${f}\$" -fuzztime "$fuzztime" "$pkg"
			done
		done
	)
done
echo "== all tests passed"
