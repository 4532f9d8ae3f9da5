#!/usr/bin/env bash
# Instructions per request, counted with callgrind, for the bare hyper proxy of ../shared/perf,
# the floor proxy (examples/floor_proxy.rs) and the gateway, on the perf harness's mixes.
#
#   benches/instructions.sh                 # MIXES="small large", 10 s of counted load each
#   MIXES=small SECONDS_COUNTED=20 benches/instructions.sh
#   GATEWAY_BIN=target/pgo/release/context-relay-gateway benches/instructions.sh   # another build
#   GATEWAY_CONFIG_TEMPLATE=relay-off.toml.tmpl benches/instructions.sh   # another configuration
#       of the gateway (the harness's template with @PORT@, @UPSTREAM_URL@ and @STATE_DIR@;
#       the bare and floor proxies keep theirs)
#
# Each process under test runs under `valgrind --tool=callgrind --instr-atstart=no` with one
# tokio worker, behind the harness's upstream (not under valgrind). After a warm-up, counting
# is switched on (`callgrind_control -i on`), wrk sends the mix's body over 64 connections
# (`CONNECTIONS`, as the perf harness does),
# counting is switched off, and the instructions counted are divided by the requests wrk
# completed. Unlike CPU time, the figure does not move with the machine's load. It is high by
# the work spent on the requests still in flight when wrk stops (counted, not completed): at
# most `CONNECTIONS` requests' worth, so the window is long enough for a few thousand
# requests: 10 s (`SECONDS_COUNTED`), and six times that for `xl`, whose requests are 1 MiB
# each (at 10 s the gateway completed about 500 of them under valgrind and the floor proxy
# about 300: up to +12 % and +20 %).
#
# Under valgrind the CPU has no SHA extensions (`is_x86_feature_detected!("sha")` is false
# there, true on these machines), so `sha2` hashes in software: about 35 000 instructions per
# request of the session fingerprint, in the floor and the gateway alike, that the machine
# does with SHA-NI in a small fraction of them. The second table leaves out what callgrind
# counts inside `sha2::sha256::compress256`, which is nearer what the machine runs.
#
# The same callgrind files count heap allocations per request (the calls into the allocator,
# `benches/alloc_calls.py`): the last table, for the three targets side by side.
#
# Needs valgrind and wrk (Debian: apt-get install valgrind wrk), python3, and ../shared/perf.
# Prints one line per target and mix, and a table at the end.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
PERF=${PERF_DIR:-$HERE/../shared/perf}
MIXES=${MIXES:-small large}
COUNTED=${SECONDS_COUNTED:-10}
CONNECTIONS=${CONNECTIONS:-64}
WARMUP=${WARMUP_SECONDS:-3}
OUT=${OUT_DIR:-$(mktemp -d /tmp/instructions.XXXXXX)}
PERF_TARGET=${PERF_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/context-relay-perf-target}
# The gateway binary counted: this checkout's release build (built here) unless GATEWAY_BIN
# names another (e.g. scripts/pgo.sh's).
GATEWAY_BIN=${GATEWAY_BIN:-$HERE/target/release/context-relay-gateway}
GATEWAY_TEMPLATE=${GATEWAY_CONFIG_TEMPLATE:-$PERF/gateway.toml.tmpl}

die() { echo "instructions.sh: $*" >&2; exit 1; }
for tool in valgrind callgrind_control wrk python3; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install valgrind wrk python3)"
done
[[ -f $PERF/run.sh ]] || die "no perf harness at $PERF (set PERF_DIR)"
[[ -f $GATEWAY_TEMPLATE ]] || die "no gateway configuration template at $GATEWAY_TEMPLATE"

echo "building (release): the gateway, the floor proxy, the harness's upstream and bare proxy" >&2
(cd "$HERE" && cargo build --release --quiet -p context-relay-gateway --bin context-relay-gateway \
  && cargo build --release --quiet --example floor_proxy) || die "cargo build failed"
CARGO_TARGET_DIR="$PERF_TARGET" cargo build --release --quiet --manifest-path "$PERF/Cargo.toml" \
  || die "cargo build of ../shared/perf failed"

mkdir -p "$OUT/bodies" "$OUT/logs"
python3 "$PERF/lib/gen_bodies.py" "$OUT/bodies" >/dev/null

# shellcheck source=benches/lib.sh
source "$HERE/benches/lib.sh"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

UP_PORT=$(free_port)
"$PERF_TARGET/release/perf-upstream" --port "$UP_PORT" --workers 1 >"$OUT/logs/upstream.log" 2>&1 &
PIDS+=("$!")
wait_port "$UP_PORT" || die "the upstream did not start"
UPSTREAM_URL="http://127.0.0.1:$UP_PORT"

# The command of a target, listening on $1.
command_of() {
  local name=$1 port=$2 config="$OUT/$1.toml" template="$PERF/gateway.toml.tmpl"
  [[ $name == gateway ]] && template=$GATEWAY_TEMPLATE
  mkdir -p "$OUT/state-$name"
  sed -e "s|@PORT@|$port|g" -e "s|@UPSTREAM_URL@|$UPSTREAM_URL|g" -e "s|@STATE_DIR@|$OUT/state-$name|g" \
    "$template" >"$config"
  case $name in
    bare) echo "$PERF_TARGET/release/perf-bare-proxy --port $port --upstream $UPSTREAM_URL --workers 1" ;;
    floor) echo "$HERE/target/release/examples/floor_proxy --config $config" ;;
    gateway) echo "$GATEWAY_BIN --config $config" ;;
  esac
}

# Runs wrk against $1 with body $2 for $3 seconds; prints the requests completed. The xl mix
# is a late turn of an agent session and carries its session id in a header, as in run.sh.
load() {
  local out extra=""
  [[ $(basename "$2") == xl.json ]] && extra="x-session-id: perf-xl-session"
  out=$(BODY_FILE=$2 EXTRA_HEADERS=$extra wrk -t1 -c"$CONNECTIONS" -d"$3"s --timeout 10s -s "$PERF/lib/wrk_post.lua" \
    "http://127.0.0.1:$1/v1/chat/completions" 2>&1) || die "wrk failed: $out"
  wrk_requests <<<"$out"
}

declare -A RESULT SOFT_SHA ALLOCS
for mix in $MIXES; do
  body="$OUT/bodies/$mix.json"
  [[ -f $body ]] || die "no body for mix $mix"
  for target in bare floor gateway; do
    port=$(free_port)
    cg="$OUT/callgrind.$target.$mix.out"
    # shellcheck disable=SC2046
    env TOKIO_WORKER_THREADS=1 RUST_LOG=info valgrind --tool=callgrind --instr-atstart=no \
      --callgrind-out-file="$cg" $(command_of "$target" "$port") \
      >"$OUT/logs/$target.$mix.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_port "$port" || die "$target did not start (see $OUT/logs/$target.$mix.log)"
    load "$port" "$body" "$WARMUP" >/dev/null
    callgrind_control -i on "$pid" >/dev/null 2>&1
    counted=$COUNTED
    [[ $mix == xl ]] && counted=$((COUNTED * 6))
    requests=$(load "$port" "$body" "$counted")
    callgrind_control -i off "$pid" >/dev/null 2>&1
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    total=$(grep -E '^totals:' "$cg" | head -1 | awk '{print $2}')
    [[ -n $total && $requests -gt 0 ]] || die "no count for $target on $mix"
    per=$(( total / requests ))
    RESULT[$target.$mix]=$per
    sha=$(callgrind_annotate --inclusive=yes "$cg" 2>/dev/null \
      | awk '/sha2::sha256::compress256/ && !done {gsub(",", "", $1); print $1; done = 1}')
    SOFT_SHA[$target.$mix]=$(( ${sha:-0} / requests ))
    ALLOCS[$target.$mix]=$(python3 "$HERE/benches/alloc_calls.py" "$cg" "$requests")
    echo "$mix $target: $per instructions per request ($requests requests, $total instructions; software SHA-256 ${SOFT_SHA[$target.$mix]}; ${ALLOCS[$target.$mix]} allocations)" >&2
  done
done

echo
echo "| mix | bare | floor | gateway | gateway / floor | gateway / bare |"
echo "|---|---|---|---|---|---|"
for mix in $MIXES; do
  b=${RESULT[bare.$mix]} f=${RESULT[floor.$mix]} g=${RESULT[gateway.$mix]}
  python3 -c "print(f'| $mix | {$b:,} | {$f:,} | {$g:,} | {$g/$f:.2f}× | {$g/$b:.2f}× |')"
done
echo
echo "Without software SHA-256 (see the header):"
echo
echo "| mix | bare | floor | gateway | gateway / floor | gateway / bare |"
echo "|---|---|---|---|---|---|"
for mix in $MIXES; do
  b=$(( RESULT[bare.$mix] - SOFT_SHA[bare.$mix] ))
  f=$(( RESULT[floor.$mix] - SOFT_SHA[floor.$mix] ))
  g=$(( RESULT[gateway.$mix] - SOFT_SHA[gateway.$mix] ))
  python3 -c "print(f'| $mix | {$b:,} | {$f:,} | {$g:,} | {$g/$f:.2f}× | {$g/$b:.2f}× |')"
done
echo
echo "Heap allocations per request (calls into the allocator):"
echo
echo "| mix | bare | floor | gateway |"
echo "|---|---|---|---|"
for mix in $MIXES; do
  echo "| $mix | ${ALLOCS[bare.$mix]} | ${ALLOCS[floor.$mix]} | ${ALLOCS[gateway.$mix]} |"
done
echo "(results and callgrind files in $OUT)"
