#!/usr/bin/env bash
# `make test`'s readme tier: no figure in README.md is typed by hand.
# 1. The generated blocks (the Performance table, the demo table) are what
#    scripts/bench-readme.sh makes of their results files (--check).
# 2. Every other figure is a number of a results file its paragraph cites, or a specification
#    scripts/readme-check.py lists (a default, a limit, a size in an example).
# 3. Self-check: a README with a figure typed by hand, and one quoting a figure its cited results
#    file does not hold, must both fail check 2.
# Ends "readme: N passed, M failed, 0 skipped"; exits 1 on a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
pass=0
fail=0
check() {
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "readme: ok: $what"
  else fail=$((fail + 1)); echo "readme: FAILED: $what"; fi
}
check "generated blocks are current" scripts/bench-readme.sh --check
check "every other figure comes from a results file it cites" python3 scripts/readme-check.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=$(find bench/results -maxdepth 1 -name '*Z.md' | sort | tail -1)
printf '# x\n\nThe reference job took 1.98 s alone.\n' > "$tmp/typed.md"
printf '# x\n\nIt took 123.456 s ([run](%s)).\n' "$results" > "$tmp/wrong.md"
must_fail() { ! python3 scripts/readme-check.py "$1" > "$tmp/out" 2>&1 && grep -q "$2" "$tmp/out"; }
check "self-check: a figure typed by hand fails" must_fail "$tmp/typed.md" "'1.98 s' is typed by hand"
check "self-check: a figure its results file lacks fails" must_fail "$tmp/wrong.md" "'123.456 s' is in none"
echo "readme: $pass passed, $fail failed, 0 skipped"
[ "$fail" = 0 ]
