#!/usr/bin/env bash
# Runs every module's tests with -race, then each fuzz target for a few
# seconds. This is the README's test command; .ci/run calls it.
#   FUZZTIME=5s bash scripts/test.sh
#
# The Redis store's tests (contrib/redisstore) need a real Redis: give its
# address in WATERTIGHT_REDIS_ADDR, or have redis-server on PATH and this
# script starts a throwaway one on 127.0.0.1 (no persistence) and stops it
# at the end. Without either, those tests are skipped — unless
# WATERTIGHT_REQUIRE_REDIS=1 (as in CI), which makes them fail instead.
#
# The PostgreSQL tests (watertightsql/pgtest) likewise need a real server:
# give its URL in WATERTIGHT_POSTGRES_DSN, or have PostgreSQL installed
# (Debian's postgresql: /usr/lib/postgresql/<version>/bin) and this script
# starts a throwaway one on 127.0.0.1 (fsync off; as the postgres user when
# run as root) and stops it at the end. Without either, those tests are
# skipped — unless WATERTIGHT_REQUIRE_POSTGRES=1 (as in CI).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-5s}

redis_pid=""
redis_dir=""
redis_note="" # what the summary says of the Redis tests when they did not run
stop_redis() {
	if [ -n "$redis_pid" ]; then
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
		redis_pid=""
	fi
	if [ -n "$redis_dir" ]; then
		rm -rf "$redis_dir"
		redis_dir=""
	fi
}

pg_dir=""
pg_ctl_bin=""
pg_as=()     # the command prefix that runs PostgreSQL's binaries as their user
pg_note=""   # what the summary says of the PostgreSQL tests when they did not run
stop_postgres() {
	if [ -n "$pg_dir" ]; then
		if [ -n "$pg_ctl_bin" ] && [ -f "$pg_dir/data/postmaster.pid" ]; then
			"${pg_as[@]}" "$pg_ctl_bin" -D "$pg_dir/data" -m immediate -w stop >/dev/null 2>&1 || true
		fi
		rm -rf "$pg_dir"
		pg_dir=""
	fi
}
trap 'stop_redis; stop_postgres' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# redis_ping PORT: does a Redis on 127.0.0.1:PORT answer PING?
redis_ping() {
	if command -v redis-cli >/dev/null; then
		[ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]
	else
		(
			exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
			printf 'PING\r\n' >&3
			IFS= read -r -t 1 reply <&3 || exit 1
			[[ $reply == +PONG* ]]
		) 2>/dev/null
	fi
}

# start_redis: starts redis-server on a free port of 127.0.0.1 and exports
# WATERTIGHT_REDIS_ADDR; returns 1 if it cannot.
start_redis() {
	redis_dir=$(mktemp -d)
	local try port
	for try in 1 2 3 4 5 6 7 8 9 10; do
		port=$((20000 + RANDOM % 40000))
		# Taken if something accepts a connection there.
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			continue
		fi
		redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
			--daemonize no --dir "$redis_dir" >"$redis_dir/redis.log" 2>&1 &
		redis_pid=$!
		local i
		for i in $(seq 1 100); do # up to about 10 s
			if redis_ping "$port"; then
				export WATERTIGHT_REDIS_ADDR="127.0.0.1:$port"
				echo "== redis-server started on $WATERTIGHT_REDIS_ADDR (pid $redis_pid); stopped when the tests end"
				return 0
			fi
			if ! kill -0 "$redis_pid" 2>/dev/null; then
				break # exited: most likely the port was taken meanwhile
			fi
			sleep 0.1
		done
		echo "redis-server on port $port did not answer PING; its log:" >&2
		cat "$redis_dir/redis.log" >&2 || true
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
		redis_pid=""
	done
	return 1
}

if [ -n "${WATERTIGHT_REDIS_ADDR:-}" ]; then
	echo "== using the Redis at WATERTIGHT_REDIS_ADDR=$WATERTIGHT_REDIS_ADDR"
elif command -v redis-server >/dev/null; then
	if ! start_redis; then
		echo "could not start redis-server: the Redis store tests will be skipped (or fail under WATERTIGHT_REQUIRE_REDIS=1)" >&2
		redis_note="the Redis store tests (redis-server did not start)"
	fi
elif [ "${WATERTIGHT_REQUIRE_REDIS:-}" = 1 ]; then
	echo "== redis-server is not installed and WATERTIGHT_REDIS_ADDR is unset, but" \
		"WATERTIGHT_REQUIRE_REDIS=1: the Redis store tests (contrib/redisstore) will fail" >&2
else
	redis_note="the Redis store tests (redis-server is not installed)"
	echo "== note: redis-server is not installed and WATERTIGHT_REDIS_ADDR is unset:" \
		"the Redis store tests (contrib/redisstore) will be skipped" \
		"(install Debian's redis-server, or set WATERTIGHT_REDIS_ADDR=host:port)"
fi

# postgres_bin: the directory of the newest installed PostgreSQL's server
# binaries (Debian puts them in /usr/lib/postgresql/<version>/bin, off PATH),
# or of an initdb on PATH; nothing when there is none.
postgres_bin() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
		echo "$d"
	elif command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
		dirname "$(command -v initdb)"
	fi
}

# start_postgres BIN: starts a throwaway PostgreSQL from the binaries in BIN
# on a free port of 127.0.0.1 (trust authentication, no fsync, no Unix
# socket) and exports WATERTIGHT_POSTGRES_DSN; returns 1 if it cannot.
# initdb and postgres refuse to run as root: as root, they run as the
# postgres user (Debian's package creates it).
start_postgres() {
	local bin=$1
	pg_as=()
	if [ "$(id -u)" = 0 ]; then
		if ! id postgres >/dev/null 2>&1; then
			echo "running as root, and there is no postgres user to run PostgreSQL as" >&2
			return 1
		fi
		pg_as=(runuser -u postgres --)
	fi
	pg_dir=$(mktemp -d)
	if [ "${#pg_as[@]}" -gt 0 ]; then
		chown postgres "$pg_dir"
	fi
	if ! "${pg_as[@]}" "$bin/initdb" -D "$pg_dir/data" -U postgres --auth=trust --no-sync \
		-E UTF8 --locale=C >"$pg_dir/initdb.log" 2>&1; then
		echo "initdb failed; its log:" >&2
		cat "$pg_dir/initdb.log" >&2
		return 1
	fi
	pg_ctl_bin="$bin/pg_ctl"
	local try port
	for try in 1 2 3 4 5 6 7 8 9 10; do
		port=$((20000 + RANDOM % 40000))
		# Taken if something accepts a connection there.
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			continue
		fi
		if "${pg_as[@]}" "$pg_ctl_bin" -D "$pg_dir/data" -l "$pg_dir/postgres.log" -w -t 30 \
			-o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
			start >/dev/null 2>&1; then
			export WATERTIGHT_POSTGRES_DSN="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
			echo "== PostgreSQL ($("$bin/postgres" --version)) started on 127.0.0.1:$port; stopped when the tests end"
			return 0
		fi
		echo "PostgreSQL did not start on port $port; its log:" >&2
		cat "$pg_dir/postgres.log" >&2 || true
	done
	return 1
}

pg_bin=$(postgres_bin)
if [ -n "${WATERTIGHT_POSTGRES_DSN:-}" ]; then
	echo "== using the PostgreSQL at WATERTIGHT_POSTGRES_DSN"
elif [ -n "$pg_bin" ]; then
	if ! start_postgres "$pg_bin"; then
		echo "could not start PostgreSQL: the PostgreSQL tests will be skipped (or fail under WATERTIGHT_REQUIRE_POSTGRES=1)" >&2
		pg_note="the PostgreSQL tests (PostgreSQL did not start)"
	fi
elif [ "${WATERTIGHT_REQUIRE_POSTGRES:-}" = 1 ]; then
	echo "== PostgreSQL is not installed and WATERTIGHT_POSTGRES_DSN is unset, but" \
		"WATERTIGHT_REQUIRE_POSTGRES=1: the PostgreSQL tests (watertightsql/pgtest) will fail" >&2
else
	pg_note="the PostgreSQL tests (PostgreSQL is not installed)"
	echo "== note: PostgreSQL is not installed and WATERTIGHT_POSTGRES_DSN is unset:" \
		"the PostgreSQL tests (watertightsql/pgtest) will be skipped" \
		"(install Debian's postgresql, or set WATERTIGHT_POSTGRES_DSN=postgres://...)"
fi

# Every module in the repository (the root and the nested ones).
mapfile -t modules < <(find . -name go.mod -not -path '*/testdata/*' -printf '%h\n' | sort)

start=$SECONDS
for m in "${modules[@]}"; do
	echo "== go test -race ./... in $m"
	(cd "$m" && go test -race -count=1 ./...)
done
tests_took=$((SECONDS - start))

# fuzz_one fuzzes target $2 of package $1 for $fuzztime. Go's fuzzing
# coordinator can end a run that found nothing with a bare "context deadline
# exceeded" when -fuzztime runs out while a worker is mid-call on a busy
# machine (golang/go#75804): no failing input is written, and a rerun is
# clean. On this 2-core VM it hit one run in ten or so. Such a run is
# retried, three times at most; any other failure — a written failing
# input, a panic, a test error — fails at once, and so does a fourth flake
# in a row.
fuzz_one() {
	local pkg=$1 f=$2 out status try
	for try in 1 2 3 4; do
		echo "== fuzz $pkg $f for $fuzztime"
		out=$(mktemp)
		status=0
		go test -run '^$' -fuzz "^${f}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$out" || status=$?
		if [ "$status" -eq 0 ]; then
			rm -f "$out"
			return 0
		fi
		if [ "$try" -lt 4 ] && grep -q 'context deadline exceeded' "$out" &&
			! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$out"; then
			echo "== $f: the fuzzing coordinator's end-of-time race (no failing input was written); once more"
			rm -f "$out"
			continue
		fi
		rm -f "$out"
		return "$status"
	done
}

fuzzed=0
start=$SECONDS
for m in "${modules[@]}"; do
	cd "$m"
	for pkg in $(go list ./...); do
		for f in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
			fuzz_one "$pkg" "$f"
			fuzzed=$((fuzzed + 1))
		done
	done
	cd - >/dev/null
done
fuzz_took=$((SECONDS - start))
skipped="$redis_note"
if [ -n "$pg_note" ]; then
	skipped="${skipped:+$skipped, }$pg_note"
fi
echo "== all tests passed: go test -race in ${#modules[@]} modules (${tests_took}s), then $fuzzed fuzz targets for $fuzztime each (${fuzz_took}s); skipped: ${skipped:-nothing}"
