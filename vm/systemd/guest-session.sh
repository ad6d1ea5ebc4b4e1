#!/bin/sh
# In the systemd guest, first, over an ssh login as root: the machine is what the tier claims
# (systemd as PID 1, pure cgroup v2, 16 CPUs in 2 NUMA nodes, the guest marker, the shares, no
# network beyond the host's forwarded port) and this shell sits in a logind session scope.
# usage: guest-session.sh <source-dir>
src=${1:?usage: guest-session.sh <source-dir>}
. "$src/vm/systemd/guest-lib.sh"
session_check
check "systemd is PID 1" [ "$(cat /proc/1/comm)" = systemd ]
st=$(systemctl is-system-running 2>/dev/null)
if [ "$st" = running ]; then ok "systemctl is-system-running: running"
else fail "systemctl is-system-running: $st (failed units: $(systemctl list-units --failed --plain --no-legend | tr '\n' ';'))"; fi
check "pure cgroup v2 (cgroup2 is the only cgroup filesystem)" [ "$(awk '$3 ~ /^cgroup/ {print $3}' /proc/mounts | sort -u)" = cgroup2 ]
check "16 CPUs in 2 NUMA nodes" [ "$(cat /sys/devices/system/cpu/online)/$(cat /sys/devices/system/node/online)" = 0-15/0-1 ]
check "the guest marker says systemd-v2" [ "$(cat /etc/pjw-guest)" = systemd-v2 ]
check "the source tree is shared at $src" [ -f "$src/Makefile" ] && [ -f "$src/Cargo.toml" ]
v=$(cargo --version 2>&1) && ok "the host's cargo runs here ($v)" || fail "cargo does not run here: $v"
if timeout 10 python3 -c 'import socket; socket.create_connection(("151.101.2.132", 80), timeout=5)' 2>/dev/null; then
  fail "the guest reaches an outside address (the network should be restricted)"
else
  ok "the guest reaches no outside address (restrict=on)"
fi
echo "=== done"
