#!/bin/sh
# In the systemd guest, as root in an ssh login session: `make demo` runs to the end and leaves
# nothing behind (no pjw-* cgroups, /tmp/pjw-demo.*, pjw processes or pjw-demo* units).
# usage: guest-demo.sh <source-dir>
src=${1:?usage: guest-demo.sh <source-dir>}
. "$src/vm/systemd/guest-lib.sh"
session_check
cd "$src" || { fail "no source tree at $src"; echo "=== done"; exit 1; }

log=/tmp/pjw-guest-demo.log
cg_snapshot /tmp/pjw-cg-before-demo
# The guest's figures (emulated, loaded) stay in the guest: the source tree is the host's, shared.
results=/tmp/pjw-guest-demo-results
mkdir -p "$results"
PJW_DEMO_RESULTS=$results timeout 1500 make demo > "$log" 2>&1; rc=$?
sed 's/^/  | /' "$log"
if [ "$rc" = 0 ]; then ok "make demo ran to the end (exit 0)"; else fail "make demo exited $rc"; fi
no_compiling "$log" "make demo"
if ls "$results"/*-demo.md >/dev/null 2>&1; then ok "make demo kept its figures in $results, not in the shared tree"; else fail "make demo wrote no results file to $results"; fi

sleep 1
left=$(stray_pjw_cgroups)
if [ -z "$left" ]; then ok "make demo left no pjw-* cgroup"; else fail "make demo left cgroups: $(echo "$left" | tr '\n' ' ')"; fi
settle cg_new /tmp/pjw-cg-before-demo
left=$(cg_new /tmp/pjw-cg-before-demo)
if [ -z "$left" ]; then ok "make demo left no new cgroup"; else fail "make demo left new cgroups: $(echo "$left" | tr '\n' ' ')"; fi
left=$(ls -d /tmp/pjw-demo.* 2>/dev/null)
if [ -z "$left" ]; then ok "make demo left no /tmp/pjw-demo.*"; else fail "make demo left $(echo "$left" | tr '\n' ' ')"; fi
left=$(pjw_processes)
if [ -z "$left" ]; then ok "make demo left no pjw process"; else fail "make demo left processes: $(echo "$left" | tr '\n' ';')"; fi
left=$(systemctl list-units --all --plain --no-legend 'pjw-demo*' 2>/dev/null)
if [ -z "$left" ]; then ok "make demo left no pjw-demo* unit"; else fail "make demo left units: $(echo "$left" | tr '\n' ';')"; fi
echo "=== done"
