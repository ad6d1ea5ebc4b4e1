#!/bin/sh
# count-tests.sh LOG SKIPS LABEL: add up libtest's "test result:" lines in LOG, take the skips
# recorded in SKIPS (lines "binary<TAB>test<TAB>reason", from testkit's skip!) out of the passed
# count, list them, and print "LABEL: N passed, M failed, K skipped". Exits 1 when a test
# failed. Used by scripts/test-summary.sh on the host and by the guests' runners.
log=${1:?usage: count-tests.sh LOG SKIPS LABEL}
skips=${2:?}
label=${3:-tests}
[ -f "$skips" ] || : > "$skips"
set -- $(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
     END { printf "%d %d %d\n", p, f, g }' "$log")
passed=$1; failed=$2; ignored=$3
# grep -c prints 0 and exits 1 when nothing was skipped: no "|| echo 0" (that made "0\n0").
skipped=$(grep -c . "$skips" 2>/dev/null); skipped=${skipped:-0}
passed=$((passed - skipped))
echo
if [ "$((skipped + ignored))" -gt 0 ]; then
  echo "$label skipped, with their reasons:"
  sort "$skips" | awk -F '\t' '{ printf "  %s %s: %s\n", $1, $2, $3 }'
  [ "$ignored" = 0 ] || echo "  ($ignored #[ignore] tests, not run)"
fi
echo "$label: $passed passed, $failed failed, $((skipped + ignored)) skipped"
[ "$failed" = 0 ]
