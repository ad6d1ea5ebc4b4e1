#!/usr/bin/env bash
# `make test`: every tier, each summed up as "TIER: N passed, M failed, K skipped" with its
# skipped tests and their reasons, then the self-checks (a failing guest test fails its tier; a
# component make test provides, when missing on the host, fails its test instead of skipping;
# a client that lost its exit status fails the chaos gate),
# then the tiers' lines again and one grand total. Every tier runs even when an earlier one
# failed; the exit status is non-zero when any tier or self-check failed.
#
# Tiers: host (unit, property, fake trees, root tests on the real cgroupfs, live Slurm, Grid
# Engine, PostgreSQL, tmux), readme (README's figures against the results files),
# busybox-v2 (pure cgroup v2, 2 NUMA nodes), busybox-v1 (pure v1),
# systemd-v2 (Debian 12 with systemd, tests from an ssh login session, the packaged service);
# fuzz (the protocol decoder and the workload managers' parsers, bounded).
# TEST_TIERS="host busybox-v2 ..." runs a subset.
set -uo pipefail
cd "$(dirname "$0")/.."
tiers=${TEST_TIERS:-host readme fuzz busybox-v2 busybox-v1 systemd-v2 selfcheck}
logs=$(mktemp -d /tmp/pjw-test-all.XXXXXX)
trap 'rm -rf "$logs"' EXIT
status=0
lines=()
start_all=$(date +%s)

# run_tier NAME CMD...: run CMD, keep its summary line (or a failure line when it printed none).
run_tier() {
  local name=$1; shift
  local t0; t0=$(date +%s)
  echo; echo "======== tier $name: $*"
  "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -E '^[A-Za-z0-9-]+: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$logs/$name.log" | tail -1)
  [ -n "$line" ] || line="$name: 0 passed, 1 failed, 0 skipped (no summary; exit $rc)"
  if [ "$rc" != 0 ]; then
    status=1
    if printf '%s' "$line" | grep -qE ' 0 failed'; then line="$line (but exit $rc: counted as 1 failed)"; fi
  fi
  lines+=("$line  [$(( $(date +%s) - t0 )) s]")
}

for t in $tiers; do
  case $t in
    host) run_tier host scripts/test-summary.sh --workspace ;;
    # No figure in README.md typed by hand (generated blocks current, the rest cited).
    readme) run_tier readme scripts/readme-check.sh ;;
    # Reproducible in the gate (a fixed seed and count); `make test-fuzz` alone explores.
    fuzz) run_tier fuzz env FUZZ_SEED="${FUZZ_SEED:-1}" FUZZ_RUNS="${FUZZ_RUNS:-100000}" make -s test-fuzz ;;
    busybox-v2) run_tier busybox-v2 make -s test-vm ;;
    busybox-v1) run_tier busybox-v1 make -s test-vm-v1 ;;
    systemd-v2) run_tier systemd-v2 make -s test-vm-systemd ;;
    selfcheck)
      echo; echo "======== self-checks"
      if make -s test-vm-selfcheck && scripts/skip-selfcheck.sh && scripts/chaos-selfcheck.sh; then
        lines+=("selfcheck: ok (an injected guest failure fails its tier; a missing provided component fails its test; a client that lost its exit status fails the chaos gate)")
      else
        status=1; lines+=("selfcheck: FAILED")
      fi ;;
    *) echo "test-all: unknown tier $t" >&2; status=1 ;;
  esac
done

echo
echo "======== summary ($(( $(date +%s) - start_all )) s)"
printf '%s\n' "${lines[@]}"
# One grand total over the tiers (self-checks are not tests of pjw and are not counted). It is a
# sum of test runs, not of distinct tests: the guest tiers run the host's root tests again, each
# counted once per tier that ran it; the line says which tiers it adds.
printf '%s\n' "${lines[@]}" | awk '{ for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^skipped/) s += $i } }
  $1 ~ /:$/ && $1 != "selfcheck:" { t = t (t == "" ? "" : " + ") substr($1, 1, length($1) - 1) }
  END { printf "all tiers: %d passed, %d failed, %d skipped (test runs summed over %s: a test run in several tiers counts once per tier)\n", p, f, s, t }'
exit $status
