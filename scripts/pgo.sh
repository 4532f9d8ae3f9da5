#!/usr/bin/env bash
# A profile-guided (PGO) release build of the gateway binary: built once with
# `-Cprofile-generate`, trained by `crates/gateway/benches/pgo_train.rs` (coding agents of every
# API shape, SDK calls and account switches through the instrumented binary over simulated
# providers), and built again with `-Cprofile-use` on what the training ran. The compiler lays
# the hot paths out together and inlines by measured frequency: fewer instructions and far
# fewer instruction-cache misses per request (docs/performance.md, "A profile-guided build").
#
#   scripts/pgo.sh                          # -> target/pgo/release/context-relay-gateway
#   TRAIN_SECS=120 scripts/pgo.sh
#   PGO_OUT=/usr/local/bin scripts/pgo.sh   # and copies the binary there
#
# Needs llvm-profdata of the LLVM that rustc uses (`rustc -vV` names it): `rustup component add
# llvm-tools` installs it beside the toolchain; Debian's `llvm-N` packages (N the major
# version) work as well. LLVM_PROFDATA=PATH picks one. A clean run takes two release builds of
# the gateway, a debug build of the training program, and TRAIN_SECS (60).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
TRAIN_SECS=${TRAIN_SECS:-60}
WORK=$HERE/target/pgo-work
die() { echo "pgo.sh: $*" >&2; exit 1; }

rustc_info=$(rustc -vV) || die "rustc not found"
major=$(sed -n 's/^LLVM version: \([0-9]*\).*/\1/p' <<<"$rustc_info")
host=$(sed -n 's/^host: //p' <<<"$rustc_info")
[[ -n $major && -n $host ]] || die "could not read rustc's LLVM version and host from rustc -vV"

# llvm-profdata of LLVM $major: the profile format follows LLVM's major version.
profdata=""
for candidate in "${LLVM_PROFDATA:-}" \
  "$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata" \
  "llvm-profdata-$major" "/usr/lib/llvm-$major/bin/llvm-profdata" llvm-profdata; do
  [[ -n $candidate ]] || continue
  command -v "$candidate" >/dev/null 2>&1 || continue
  version=$("$candidate" --version 2>/dev/null || true)
  if [[ $version == *"LLVM version $major."* ]]; then
    profdata=$candidate
    break
  fi
done
[[ -n $profdata ]] || die "no llvm-profdata of LLVM $major (rustc's): run \`rustup component add \
llvm-tools\` or install Debian's llvm-$major, or set LLVM_PROFDATA"
echo "pgo.sh: llvm-profdata: $profdata" >&2
# The flags are added to RUSTFLAGS (which replaces any `build.rustflags` of a Cargo config);
# CARGO_ENCODED_RUSTFLAGS would override them, and a space in the path would split them.
[[ -z ${CARGO_ENCODED_RUSTFLAGS:-} ]] || die "CARGO_ENCODED_RUSTFLAGS is set: put the flags in RUSTFLAGS"
[[ $WORK != *[[:space:]]* ]] || die "the checkout's path holds a space: $WORK"

flags=${RUSTFLAGS:-}

echo "pgo.sh: 1/4 the instrumented build" >&2
RUSTFLAGS="$flags -Cprofile-generate=$WORK/profraw" cargo build --release --locked \
  --manifest-path "$HERE/Cargo.toml" -p context-relay-gateway --bin context-relay-gateway \
  --target-dir "$WORK/target"
# The build scripts, instrumented too, wrote profiles of their own as they ran: not the gateway's.
rm -rf "$WORK/profraw"
mkdir -p "$WORK/profraw"

echo "pgo.sh: 2/4 the training run ($TRAIN_SECS s)" >&2
# The training program's own speed does not matter (the profile counts what the gateway ran):
# a debug build, the quicker to make.
cargo bench --locked --manifest-path "$HERE/Cargo.toml" -p context-relay-gateway --profile dev \
  --bench pgo_train -- --gateway "$WORK/target/release/context-relay-gateway" --secs "$TRAIN_SECS"
compgen -G "$WORK/profraw/*.profraw" >/dev/null || die "the training run wrote no profile"

echo "pgo.sh: 3/4 the profile" >&2
"$profdata" merge -o "$WORK/gateway.profdata" "$WORK/profraw"

echo "pgo.sh: 4/4 the build on the profile" >&2
RUSTFLAGS="$flags -Cprofile-use=$WORK/gateway.profdata" cargo build --release --locked \
  --manifest-path "$HERE/Cargo.toml" -p context-relay-gateway --bin context-relay-gateway \
  --target-dir "$HERE/target/pgo"

bin=$HERE/target/pgo/release/context-relay-gateway
if [[ -n ${PGO_OUT:-} ]]; then
  install -D -m 0755 "$bin" "$PGO_OUT/context-relay-gateway"
  bin=$PGO_OUT/context-relay-gateway
fi
echo "pgo.sh: built $bin" >&2
