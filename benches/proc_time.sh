#!/usr/bin/env bash
# CPU time per request of one or more builds side by side, read from /proc/PID/stat: user and
# system µs per request of the process under test, over a window of wrk load.
#
#   benches/proc_time.sh BODY [TARGET...]
#   HEADER="x-session-id: s1" ROUNDS=3 benches/proc_time.sh /tmp/bodies/xl.json bare old-gw new-gw
#
# BODY: a request body (JSON) POSTed to /v1/chat/completions; the harness's bodies are made by
# `python3 ../shared/perf/lib/gen_bodies.py DIR`. TARGET: `bare` (the harness's bare hyper
# proxy) or the path of a gateway binary (default: this checkout's release build). The targets
# run one after another, ROUNDS times in turn (default 2), so that two builds are compared
# under the same conditions; each gets a fresh state directory and the harness's gateway
# configuration, one tokio worker, pinned to the second core, with the harness's upstream (one
# worker) and wrk (64 connections, `CONNECTIONS`) on the first. After 2 s of warm-up, the
# process's user and system ticks are read before and after `SECONDS_TIMED` (default 8) s of
# load and divided by the requests wrk completed. HEADER: one more request header (the `xl`
# mix is sent with its session header, as agent clients send it).
#
# Unlike the instruction counts (`benches/instructions.sh`), these figures move with the
# machine's load: compare builds within one run, never across runs.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
PERF=${PERF_DIR:-$HERE/../shared/perf}
PERF_TARGET=${PERF_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/context-relay-perf-target}
ROUNDS=${ROUNDS:-2}
TIMED=${SECONDS_TIMED:-8}
CONNECTIONS=${CONNECTIONS:-64}

die() { echo "proc_time.sh: $*" >&2; exit 1; }
[[ $# -ge 1 ]] || die "usage: benches/proc_time.sh BODY [TARGET...]"
BODY=$1
shift
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=("$HERE/target/release/context-relay-gateway")
[[ -f $BODY ]] || die "no body at $BODY"
for tool in wrk taskset python3; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
[[ $(nproc) -ge 2 ]] || die "needs two cores (the target on one, the load on the other)"
for target in "${TARGETS[@]}"; do
  [[ $target == bare || -x $target ]] || die "no gateway binary at $target"
done
CARGO_TARGET_DIR="$PERF_TARGET" cargo build --release --quiet --manifest-path "$PERF/Cargo.toml" \
  || die "cargo build of ../shared/perf failed"

OUT=$(mktemp -d /tmp/proc_time.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# shellcheck source=benches/lib.sh
source "$HERE/benches/lib.sh"

UP_PORT=$(free_port)
taskset -c 0 "$PERF_TARGET/release/perf-upstream" --port "$UP_PORT" --workers 1 >"$OUT/upstream.log" 2>&1 &
PIDS+=("$!")
wait_port "$UP_PORT" || die "the upstream did not start"

# Runs wrk for $2 s against port $1; prints the requests completed (fails on errors).
load() {
  local out
  out=$(BODY_FILE=$BODY EXTRA_HEADERS=${HEADER:-} taskset -c 0 wrk -t1 -c"$CONNECTIONS" -d"$2"s \
    --timeout 10s -s "$PERF/lib/wrk_post.lua" "http://127.0.0.1:$1/v1/chat/completions" 2>&1) \
    || die "wrk failed: $out"
  wrk_requests <<<"$out"
}

# User and system ticks of process $1.
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }

HZ=$(getconf CLK_TCK)
echo "| round | target | requests | user µs / request | system µs / request |"
echo "|---|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
  for target in "${TARGETS[@]}"; do
    port=$(free_port)
    if [[ $target == bare ]]; then
      taskset -c 1 "$PERF_TARGET/release/perf-bare-proxy" --port "$port" \
        --upstream "http://127.0.0.1:$UP_PORT" --workers 1 >"$OUT/target.log" 2>&1 &
    else
      state="$OUT/state-$round-$(basename "$target")"
      mkdir -p "$state"
      sed -e "s|@PORT@|$port|g" -e "s|@UPSTREAM_URL@|http://127.0.0.1:$UP_PORT|g" \
        -e "s|@STATE_DIR@|$state|g" "$PERF/gateway.toml.tmpl" >"$OUT/gateway.toml"
      TOKIO_WORKER_THREADS=1 taskset -c 1 "$target" \
        --config "$OUT/gateway.toml" >"$OUT/target.log" 2>&1 &
    fi
    pid=$!
    PIDS+=("$pid")
    wait_port "$port" || die "$target did not start (see $OUT/target.log)"
    load "$port" 2 >/dev/null
    read -r u0 s0 < <(ticks "$pid")
    requests=$(load "$port" "$TIMED")
    read -r u1 s1 < <(ticks "$pid")
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    python3 -c "
r, hz = $requests, $HZ
print(f'| $round | $target | {r} | {($u1-$u0)/hz*1e6/r:.2f} | {($s1-$s0)/hz*1e6/r:.2f} |')"
  done
done
