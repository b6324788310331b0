#!/usr/bin/env bash
# Measures `watertight proxy` against nginx and a plain httputil.ReverseProxy,
# in one run on loopback, all in front of the same small backend.
#
#   bash bench/gateway/run.sh            (from the repository root; as root,
#                                         it installs nginx and wrk from
#                                         Debian if they are missing)
#
# Configurations: nothing (wrk straight to the backend), nginx (one worker
# per core, keep-alive to the backend), plainproxy (bench/cmd/plainproxy:
# ReverseProxy with a buffer pool) and watertight (bench/gateway/gateway.yaml:
# a route with every protection on: incoming deadlines and shedding, a
# bulkhead, a timeout and a per-try timeout, retries under a budget, the
# balancer with outlier ejection, a breaker per host, a fallback); then the
# same route with one more feature each: +tenants (gateway-tenants.yaml:
# fair shares per X-Tier in place of the bulkhead, wrk sending X-Tier:
# premium), +hedging (gateway-hedge.yaml: hedged reads at the route's p95)
# and +idempotency (gateway-idempotency.yaml: wrk POSTs, each with a new
# Idempotency-Key, run once through the in-memory store). For each
# number of connections (64 and 256), the configurations run in turn, REPEATS
# times (default 3), interleaved so that drift hits all alike; each run is
# DURATION long (default 10s) with wrk -t1. Reported per configuration:
# requests/s, wrk's p50 and p99, the latency added to "nothing"'s, and the
# proxy's CPU time per request (user + system, from /proc/PID/stat of the
# proxy's processes, over the run): medians of the repeats. Then the
# resident memory of each proxy holding IDLE (default 10000) idle keep-alive
# connections (bench/cmd/idleconns), and the latency each adds at a fixed
# rate, RATE_SHARE (default 0.25) of nginx's saturation throughput
# (bench/cmd/rateload, open loop: wrk's closed loop cannot hold a rate).
#
# The machine's two cores are shared by wrk, the proxy and the backend: the
# requests/s are the loopback ceiling of that sharing, not a proxy's
# capacity; the CPU per request is the comparable figure.
set -euo pipefail

repeats=${REPEATS:-3}
duration=${DURATION:-10s}
idle=${IDLE:-10000}
# The share of nginx's saturation throughput the fixed-rate runs send.
# Issue 19 asks for half; on a 2-core machine that runs the load generator
# too, half saturates every proxy (nginx's p50 rose to 0.9 s on 2026-12-04),
# so the default is a quarter.
rate_share=${RATE_SHARE:-0.25}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

need() {
	if ! command -v "$1" >/dev/null; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			echo "== installing $2 from Debian" >&2
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1 ||
				{ apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null; }
		else
			echo "bench/gateway/run.sh: needs $1 (Debian: apt-get install $2)" >&2
			exit 1
		fi
	fi
}
need wrk wrk
need nginx nginx-light

echo "== building" >&2
(cd "$root/bench" && go build -o "$work/gwbackend" ./cmd/gwbackend && go build -o "$work/plainproxy" ./cmd/plainproxy && go build -o "$work/idleconns" ./cmd/idleconns && go build -o "$work/rateload" ./cmd/rateload)
(cd "$root/cmd/watertight" && go build -o "$work/watertight" .)

ulimit -n 65536 2>/dev/null || true
backend=127.0.0.1:9100
"$work/gwbackend" -addr $backend & pids+=($!)
"$work/plainproxy" -addr 127.0.0.1:9200 -upstream $backend & pids+=($!)
plain_pid=$!
"$work/watertight" proxy --config "$root/bench/gateway/gateway.yaml" --watch 0 2>"$work/watertight.log" & pids+=($!)
wt_pid=$!
declare -A extra_pid
for v in tenants hedge idempotency; do
	"$work/watertight" proxy --config "$root/bench/gateway/gateway-$v.yaml" --watch 0 2>"$work/watertight-$v.log" & pids+=($!)
	extra_pid[$v]=$!
done
cat >"$work/idempotency.lua" <<'LUA'
-- A POST with a new Idempotency-Key each time: wrk starts every run
-- with the same random seed, so the run's start time is in the key too
-- (a key of an earlier run would be replayed, or refused as forgotten).
math.randomseed(os.time())
local start, n = os.time(), 0
request = function()
  n = n + 1
  return wrk.format("POST", "/", {["Idempotency-Key"] = string.format('"%d-%d-%d"', start, math.random(1, 2^31), n)}, "x")
end
LUA
cat >"$work/nginx.conf" <<EOF
worker_processes auto;
worker_rlimit_nofile 65536;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  upstream backend { server $backend; keepalive 256; }
  server {
    listen 127.0.0.1:9300 backlog=4096;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
EOF
nginx -c "$work/nginx.conf" -p "$work"
for i in $(seq 100); do
	curl -fsS -o /dev/null http://127.0.0.1:9100/ && curl -fsS -o /dev/null http://127.0.0.1:9200/ &&
		curl -fsS -o /dev/null http://127.0.0.1:9300/ && curl -fsS -o /dev/null http://127.0.0.1:9400/ &&
		curl -fsS -o /dev/null http://127.0.0.1:9410/ && curl -fsS -o /dev/null http://127.0.0.1:9420/ &&
		curl -fsS -o /dev/null -H X-Tier:premium http://127.0.0.1:9430/ && break
	sleep 0.1
done
nginx_pids() { echo "$(cat "$work/nginx.pid") $(pgrep -P "$(cat "$work/nginx.pid")" | tr '\n' ' ')"; }

# cpu_ticks PID... : user + system clock ticks of the processes.
cpu_ticks() {
	local t=0 p
	for p in "$@"; do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo $t
}
hz=$(getconf CLK_TCK)

declare -A port=([nothing]=9100 [nginx]=9300 [plainproxy]=9200 [watertight]=9400 [+tenants]=9430 [+hedging]=9410 [+idempotency]=9420)
configs=(nothing nginx plainproxy watertight +tenants +hedging +idempotency)
base_configs=(nothing nginx plainproxy watertight) # the fixed-rate runs' (GETs)
# wrk's arguments beside the URL, per configuration.
declare -A wrkargs=([+tenants]="-H X-Tier:premium" [+idempotency]="-s $work/idempotency.lua")
results="$work/results.tsv"
: >"$results"
for conns in 64 256; do
	for r in $(seq "$repeats"); do
		for c in "${configs[@]}"; do
			case $c in
			nothing) procs="" ;;
			nginx) procs=$(nginx_pids) ;;
			plainproxy) procs=$plain_pid ;;
			watertight) procs=$wt_pid ;;
			+tenants) procs=${extra_pid[tenants]} ;;
			+hedging) procs=${extra_pid[hedge]} ;;
			+idempotency) procs=${extra_pid[idempotency]} ;;
			esac
			before=0
			[ -n "$procs" ] && before=$(cpu_ticks $procs)
			# shellcheck disable=SC2086
			out=$(wrk -t1 -c"$conns" -d"$duration" --latency ${wrkargs[$c]:-} "http://127.0.0.1:${port[$c]}/")
			after=0
			[ -n "$procs" ] && after=$(cpu_ticks $procs)
			reqs=$(echo "$out" | awk '/requests in/ {print $1}')
			rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
			p50=$(echo "$out" | awk '$1=="50%" {print $2}')
			p99=$(echo "$out" | awk '$1=="99%" {print $2}')
			errs=$(echo "$out" | awk '/Non-2xx|Socket errors/ {print}' | tr '\n' ' ')
			cpu_us=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$reqs" 'BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n; else print "nan" }')
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$conns" "$c" "$rps" "$p50" "$p99" "$cpu_us" "$errs" >>"$results"
			echo "== c=$conns run $r $c: $rps req/s, p50 $p50, p99 $p99, $cpu_us CPU-us/req $errs" >&2
		done
	done
done

# Latency added at a fixed rate: RATE_SHARE of nginx's saturation
# throughput (its median requests/s at 64 connections above), open loop
# (bench/cmd/rateload), so that a proxy that falls behind shows as latency.
nginx_sat=$(awk -F'\t' '$1==64 && $2=="nginx" {print $3}' "$results" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
rate=$(awk -v r="$nginx_sat" -v f="$rate_share" 'BEGIN {printf "%d", r*f}')
fixed="$work/fixed.tsv"
: >"$fixed"
for r in $(seq "$repeats"); do
	for c in "${base_configs[@]}"; do
		line=$("$work/rateload" -url "http://127.0.0.1:${port[$c]}/" -rate "$rate" -d "$duration")
		p50=$(echo "$line" | sed 's/.*p50_ms=\([0-9.]*\).*/\1/')
		p99=$(echo "$line" | sed 's/.*p99_ms=\([0-9.]*\).*/\1/')
		errs=$(echo "$line" | sed 's/.*errors=\([0-9]*\).*/\1/')
		printf '%s\t%s\t%s\t%s\n' "$c" "$p50" "$p99" "$errs" >>"$fixed"
		echo "== fixed rate $rate/s run $r $c: $line" >&2
	done
done

# Idle keep-alive connections: resident memory of each proxy holding them.
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
declare -A rss
for c in plainproxy watertight nginx; do
	"$work/idleconns" -addr "127.0.0.1:${port[$c]}" -n "$idle" -hold 3s >"$work/idle.out" 2>&1 &
	ic=$!
	sleep 2.5
	case $c in
	nginx) total=0; for p in $(nginx_pids); do total=$((total + $(rss_kib "$p"))); done; rss[$c]=$total ;;
	plainproxy) rss[$c]=$(rss_kib "$plain_pid") ;;
	watertight) rss[$c]=$(rss_kib "$wt_pid") ;;
	esac
	wait "$ic" || { echo "idleconns against $c failed:" >&2; cat "$work/idle.out" >&2; }
	echo "== $c holding $(cat "$work/idle.out" | tail -1): RSS ${rss[$c]} KiB" >&2
done

# Medians, as a markdown table.
to_ms() { awk '{ v=$1; if (v ~ /us$/) { sub(/us$/,"",v); v/=1000 } else if (v ~ /ms$/) { sub(/ms$/,"",v) } else if (v ~ /s$/) { sub(/s$/,"",v); v*=1000 }; printf "%.3f", v }'; }
median() { sort -g | awk '{a[NR]=$1} END { if (NR % 2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2 }'; }
echo
echo "| connections | configuration | requests/s | p50 (ms) | p99 (ms) | added p50 (ms) | added p99 (ms) | proxy CPU per request (µs) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
vals() { awk -F'\t' -v n="$1" -v c="$2" -v k="$3" '$1==n && $2==c {print $k}' "$results"; }
ms() { while read -r v; do echo "$v" | to_ms; echo; done; }
for conns in 64 256; do
	base50=$(vals "$conns" nothing 4 | ms | median)
	base99=$(vals "$conns" nothing 5 | ms | median)
	for c in "${configs[@]}"; do
		rps=$(vals "$conns" "$c" 3 | median)
		p50=$(vals "$conns" "$c" 4 | ms | median)
		p99=$(vals "$conns" "$c" 5 | ms | median)
		cpu=$(vals "$conns" "$c" 6 | median)
		a50=$(awk -v a="$p50" -v b="$base50" 'BEGIN {printf "%.3f", a-b}')
		a99=$(awk -v a="$p99" -v b="$base99" 'BEGIN {printf "%.3f", a-b}')
		if [ "$c" = nothing ]; then a50=—; a99=—; cpu=—; fi
		echo "| $conns | $c | $rps | $p50 | $p99 | $a50 | $a99 | $cpu |"
	done
done
echo
for conns in 64 256; do
	plain=$(vals "$conns" plainproxy 6 | median)
	nginx=$(vals "$conns" nginx 6 | median)
	for c in watertight +tenants +hedging +idempotency; do
		cpu=$(vals "$conns" "$c" 6 | median)
		awk -v n="$conns" -v c="$c" -v a="$cpu" -v p="$plain" -v g="$nginx" 'BEGIN {printf "- %d connections, %s: %.2f× the plain ReverseProxy'"'"'s CPU per request, %.2f× nginx'"'"'s\n", n, c, a/p, a/g}'
	done
done
echo
echo "At a fixed $rate requests/s ($rate_share of nginx's $nginx_sat at 64 connections), open loop (bench/cmd/rateload):"
echo
echo "| configuration | p50 (ms) | p99 (ms) | added p50 (ms) | added p99 (ms) | errors |"
echo "| --- | --- | --- | --- | --- | --- |"
fvals() { awk -F'\t' -v c="$1" -v k="$2" '$1==c {print $k}' "$fixed"; }
f50=$(fvals nothing 2 | median)
f99=$(fvals nothing 3 | median)
for c in "${base_configs[@]}"; do
	p50=$(fvals "$c" 2 | median)
	p99=$(fvals "$c" 3 | median)
	errs=$(fvals "$c" 4 | awk '{s+=$1} END {print s+0}')
	a50=$(awk -v a="$p50" -v b="$f50" 'BEGIN {printf "%.3f", a-b}')
	a99=$(awk -v a="$p99" -v b="$f99" 'BEGIN {printf "%.3f", a-b}')
	if [ "$c" = nothing ]; then a50=—; a99=—; fi
	echo "| $c | $p50 | $p99 | $a50 | $a99 | $errs |"
done
echo
echo "| proxy | RSS holding $idle idle keep-alive connections (MiB) |"
echo "| --- | --- |"
for c in nginx plainproxy watertight; do
	awk -v k="${rss[$c]}" -v c=$c 'BEGIN {printf "| %s | %.1f |\n", c, k/1024}'
done
echo
echo "(bash bench/gateway/run.sh, $(date -u +%F), REPEATS=$repeats DURATION=$duration, $(nproc) cores, $(go version | awk '{print $3}'), nginx $(nginx -v 2>&1 | sed 's/.*\///'), wrk -t1)"
