#!/usr/bin/env bash
# bench/server_bench.sh [BUILD_DIR]: the HTTP server's speed, measured in one run.
#  1. wrk (--latency) against GET /health and GET /v1/models: requests/s and p99.
#  2. The server's overhead per request (parse, route, queue, batch, replica, respond):
#     server_overhead_bench times POST /v1/prism/echo (echo engine, zero delay) one request
#     at a time, minus a bare loopback TCP ping-pong of the same bytes, and reports it against
#     the lightest model call, a MiniLM-L6 embedding of one 8-token sentence timed in the same
#     run. Target: < 5%.
# Needs the prism and server_overhead_bench targets built in BUILD_DIR (default: build).
# Knobs (environment): DURATION (default 5s), CONNECTIONS (default 64), THREADS (wrk, default 1).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
prism="$build/prism"
yardstick="$build/bench/server_overhead_bench"
duration="${DURATION:-5s}"
connections="${CONNECTIONS:-64}"
wrk_threads="${THREADS:-1}"
for f in "$prism" "$yardstick"; do
  [ -x "$f" ] || { echo "missing $f: cmake --build $build --target prism server_overhead_bench" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "wrk not found (Debian package wrk)" >&2; exit 1; }

work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/prism.toml" <<'TOML'
[server]
host = "127.0.0.1"
port = 0
[server.limits]
max_connections = 4096

[[deployment]]
name = "echo"
task = "echo"
[deployment.batching]
queue_capacity = 4096
TOML
cat >"$work/echo.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model": "echo", "input": "A short sentence of about eight tokens."}'
LUA

# The server logs its bound port once it serves; PRISM_THREADS=1: the echo engine needs no
# OpenMP pool, and wrk needs a core of its own.
PRISM_THREADS=1 "$prism" serve --config "$work/prism.toml" >"$work/log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  port="$(grep -oP 'serving .* on http://[^:]+:\K[0-9]+' "$work/log" || true)"
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "${port:-}" ] || { echo "prism serve did not start:" >&2; cat "$work/log" >&2; exit 1; }
url="http://127.0.0.1:$port"

# wrk output → "requests/s  p50  p99" (latencies in µs).
summarize() {
  awk '
    function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1e6; return v }
    /^ +50%/ { p50 = us($2) } /^ +99%/ { p99 = us($2) } /^Requests\/sec:/ { rps = $2 }
    /Non-2xx/ { bad = $NF } /Socket errors/ { errors = $0 }
    END { printf "%10.0f %10.1f %10.1f %s%s\n", rps, p50, p99, (bad ? "  non-2xx: " bad : ""), (errors ? "  " errors : "") }'
}

echo "prism server bench: $(nproc) cores, wrk -t$wrk_threads -d$duration, server PRISM_THREADS=1"
printf "%-44s %10s %10s %10s\n" "route (connections)" "req/s" "p50 us" "p99 us"
for route in /health /v1/models; do
  line="$(wrk -t"$wrk_threads" -c"$connections" -d"$duration" --latency "$url$route" | summarize)"
  printf "%-44s %s\n" "GET $route ($connections)" "$line"
done
line="$(wrk -t"$wrk_threads" -c"$connections" -d"$duration" --latency -s "$work/echo.lua" "$url/v1/prism/echo" | summarize)"
printf "%-44s %s\n" "POST /v1/prism/echo ($connections)" "$line"

echo
# The yardstick and the overhead, measured now against the idle server.
"$yardstick" --port "$port"
