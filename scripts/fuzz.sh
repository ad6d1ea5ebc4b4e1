#!/usr/bin/env bash
# `make test-fuzz`: build the fuzz targets of fuzz/ (libFuzzer through libfuzzer-sys, on stable
# Rust: docs/decisions.md (ac)), replay every seed of fuzz/corpus/<target>/ whole, then fuzz each
# target for a bounded time. A crash fails its target: the input is kept in
# fuzz/artifacts/<target>/ and printed. Ends with "fuzz: N passed, M failed, 0 skipped".
#
#   FUZZ_SECONDS=25     time spent fuzzing each target (0: replay the seeds only)
#   FUZZ_TARGETS="proto scontrol"   a subset (default: every target in fuzz/Cargo.toml)
#   FUZZ_MAX_LEN=65536  longest input the fuzzer makes (the seeds replay at full length)
#   FUZZ_SEED=N FUZZ_RUNS=M   a reproducible run: libFuzzer's -seed=N and M inputs per target
#                       instead of FUZZ_SECONDS (make test does this: a gate should give the
#                       same answer for the same tree; the inputs still drift a little, since
#                       coverage feedback sees the targets' own hash seeds. Exploring is
#                       `make test-fuzz`, a new seed each time, which has found three real
#                       parser holes so far)
#   scripts/fuzz.sh TARGET FILE...  re-run one target on given inputs (a crash to reproduce)
#
# New inputs the fuzzer finds go to a temporary directory, not the tree: to keep the good ones,
# `fuzz/target/*/release/TARGET -merge=1 fuzz/corpus/TARGET DIR` (see fuzz/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${FUZZ_SECONDS:-25}
fuzz_seed=${FUZZ_SEED:-}
fuzz_runs=${FUZZ_RUNS:-100000}
max_len=${FUZZ_MAX_LEN:-65536}
all=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^pjw-fuzz$')
targets=${FUZZ_TARGETS:-$all}
n_targets=$(echo $targets | wc -w)

# libFuzzer is C++ (built by libfuzzer-sys's build script): a fresh Debian needs g++.
if ! command -v c++ >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "fuzz: installing g++ (libFuzzer is C++)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
  else
    echo "fuzz: g++ is missing (libFuzzer is C++); install it or run as root" >&2
  fi
fi

# What cargo-fuzz passes with `--sanitizer none`: coverage counters and comparison tracing
# (stable -C flags), cfg(fuzzing), debug assertions and overflow checks. An explicit --target
# keeps build scripts and proc macros uninstrumented.
triple=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
unset CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
bin_dir=$root/fuzz/target/$triple/release
t0=$(date +%s)
echo "fuzz: building $n_targets targets ($triple)"
if ! cargo build --release --locked --manifest-path fuzz/Cargo.toml --target "$triple" \
    --target-dir fuzz/target --bins; then
  echo "fuzz: the targets did not build"
  echo "fuzz: 0 passed, $n_targets failed, 0 skipped"
  exit 1
fi
echo "fuzz: built in $(( $(date +%s) - t0 )) s"

# show_crash TARGET LOG: the crashing input's path and text.
show_crash() {
  local art
  art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$2" | tail -1)
  [ -n "$art" ] || return 0
  # The property that broke (the backtrace above can push it out of the tail).
  grep -m1 -A1 'panicked at' "$2" | sed "s/^/fuzz: $1: /"
  echo "fuzz: $1: crashing input kept in $art ($(wc -c < "$art") bytes):"
  if [ "$(wc -c < "$art")" -le 4096 ]; then od -c "$art" | head -64; else head -c 2048 "$art" | od -c | head -40; echo "  ..."; fi
  echo "fuzz: reproduce with: scripts/fuzz.sh $1 $art"
}

# Reproduce mode: one target, given inputs.
if [ $# -gt 0 ]; then
  t=$1; shift
  exec "$bin_dir/$t" "$@"
fi

passed=0 failed=0 failed_names=()
work=$(mktemp -d /tmp/pjw-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
for t in $targets; do
  bin=$bin_dir/$t
  corpus=fuzz/corpus/$t
  art=fuzz/artifacts/$t
  mkdir -p "$art" "$work/$t"
  log=$work/$t.log
  ok=1
  # 1. Every seed, whole (the fuzzer itself truncates inputs to FUZZ_MAX_LEN).
  seeds=("$corpus"/*)
  if ! timeout 600 "$bin" -artifact_prefix="$art/" -rss_limit_mb=2048 -timeout=20 \
       "${seeds[@]}" >"$log" 2>&1; then
    ok=0; tail -30 "$log"; show_crash "$t" "$log"
    # A seed that crashes is its own artifact.
    grep -o '^Running: .*' "$log" | tail -1 | sed "s/^Running: /fuzz: $t: seed that failed: /"
  fi
  # 2. Fuzz, bounded.
  rate=""
  if [ $ok = 1 ] && [ "$seconds" -gt 0 ]; then
    if [ -n "$fuzz_seed" ]; then bound=(-seed="$fuzz_seed" -runs="$fuzz_runs")
    else bound=(-max_total_time="$seconds"); fi
    if timeout $(( seconds + 600 )) "$bin" "${bound[@]}" -max_len="$max_len" \
         -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$art/" -print_final_stats=1 \
         "$work/$t" "$corpus" >"$log" 2>&1; then
      runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
      secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
      cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
      [ -n "$runs" ] && rate="$runs runs, $(( runs / (${secs:-1} > 0 ? ${secs:-1} : 1) )) exec/s, $cov"
    else
      ok=0; tail -30 "$log"; show_crash "$t" "$log"
    fi
  fi
  if [ $ok = 1 ]; then
    passed=$((passed + 1)); echo "fuzz: $t ok (${#seeds[@]} seeds${rate:+; $rate})"
  else
    failed=$((failed + 1)); failed_names+=("$t"); echo "fuzz: $t FAILED"
  fi
done
[ $failed = 0 ] || echo "fuzz: failed: ${failed_names[*]} (inputs in fuzz/artifacts/)"
echo "fuzz: $passed passed, $failed failed, 0 skipped"
[ $failed = 0 ]
