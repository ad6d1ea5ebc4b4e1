#!/bin/sh
# In the systemd guest, as root in an ssh login session: a site reserving CPUs for the system.
# A drop-in gives the slice pjw's jobs live in AllowedCPUs=4-15; after a restart of pjw,
# `pjw status --json` shows the pool following it and jobs land there; without the drop-in the
# pool is the whole machine again. The service is installed as the README says and removed after.
# usage: guest-reserve.sh <source-dir>
src=${1:?usage: guest-reserve.sh <source-dir>}
. "$src/vm/systemd/guest-lib.sh"
session_check
cd "$src" || { fail "no source tree at $src"; echo "=== done"; exit 1; }
cg_snapshot /tmp/pjw-cg-before-reserve
reserved=4-15
all=$(cat /sys/devices/system/cpu/online)

wait_daemon() {
  i=0
  while [ "$i" -lt 120 ]; do
    [ -S /run/pjw/pjw.sock ] && timeout 20 pjw status >/dev/null 2>&1 && return 0
    sleep 1; i=$((i + 1))
  done
  return 1
}
pool() { timeout 20 pjw status --json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["cpus"])'; }
# Whether every CPU of list $1 is in list $2.
within() {
  python3 - "$1" "$2" <<'PY'
import sys
def parse(s):
    out = set()
    for part in s.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            out.update(range(int(a), int(b or a) + 1))
    return out
sys.exit(0 if parse(sys.argv[1]) and parse(sys.argv[1]) <= parse(sys.argv[2]) else 1)
PY
}

timeout 900 make install > /tmp/pjw-guest-install2.log 2>&1 || { tail -15 /tmp/pjw-guest-install2.log; fail "make install"; }
check "systemctl daemon-reload && systemctl enable --now pjw" sh -c 'systemctl daemon-reload && systemctl enable --now pjw'
wait_daemon || fail "the service's daemon does not answer"
p=$(pool)
echo "pool with no reservation: $p (cpus online $all)"

# The slice pjw's jobs live in: the innermost *.slice of a job's cgroup.
jobcg=$(timeout 120 pjw run --cpus 1 -- sed -n 's/^0:://p' /proc/self/cgroup)
slice=$(echo "$jobcg" | tr '/' '\n' | grep '\.slice$' | tail -1)
slicedir=$(echo "$jobcg" | sed "s|\(.*/$slice\)/.*|\1|")
echo "a job's cgroup: $jobcg; its slice: $slice ($slicedir)"
if [ -n "$slice" ]; then ok "pjw's jobs live in $slice"; else fail "no slice in a job's cgroup path '$jobcg'"; fi

mkdir -p "/etc/systemd/system/$slice.d"
printf '# A site keeping CPUs 0-3 for the system.\n[Slice]\nAllowedCPUs=%s\n' "$reserved" > "/etc/systemd/system/$slice.d/50-pjw-reserve.conf"
systemctl daemon-reload
eff=$(cat "/sys/fs/cgroup$slicedir/cpuset.cpus.effective" 2>/dev/null)
echo "$slice: AllowedCPUs=$(systemctl show -p AllowedCPUs --value "$slice"), cpuset.cpus.effective $eff"
if timeout 120 systemctl restart pjw && wait_daemon; then ok "systemctl restart pjw with $slice on $reserved"; else fail "systemctl restart pjw with $slice on $reserved: $(systemctl status pjw --no-pager 2>&1 | tail -5 | tr '\n' ';')"; fi
p=$(pool)
timeout 20 pjw status 2>&1 | tail -3 | sed 's/^/  | /'
if [ "$p" = "$reserved" ]; then ok "pjw status --json: the pool follows $slice's AllowedCPUs ($p)"; else fail "pjw status --json: pool '$p', expected $reserved ($slice's AllowedCPUs; slice effective '$eff')"; fi
got=$(timeout 120 pjw run --cpus 4 -- sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
if [ -n "$got" ] && within "$got" "$reserved"; then ok "a 4-CPU job runs on $got, inside $reserved"; else fail "a 4-CPU job ran on '$got', not inside $reserved"; fi
got=$(timeout 120 pjw run --cpus 12 -- sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
if [ "$got" = "$reserved" ]; then ok "a 12-CPU job gets exactly $reserved"; else fail "a 12-CPU job ran on '$got', expected $reserved"; fi

# The reservation lifted: the pool is the whole machine again.
rm -rf "/etc/systemd/system/$slice.d/50-pjw-reserve.conf"
rmdir "/etc/systemd/system/$slice.d" 2>/dev/null
systemctl daemon-reload
timeout 120 systemctl restart pjw && wait_daemon
# systemd 252 does not write the slice's cpuset back when AllowedCPUs= goes away (the old value
# stays in cpuset.cpus until set again): the pool must follow what the slice really allows.
eff=$(cat "/sys/fs/cgroup$slicedir/cpuset.cpus.effective" 2>/dev/null)
echo "without the drop-in: $slice AllowedCPUs='$(systemctl show -p AllowedCPUs --value "$slice")', cpuset.cpus '$(cat "/sys/fs/cgroup$slicedir/cpuset.cpus" 2>/dev/null)', effective $eff"
[ "$eff" = "$all" ] || echo "note: systemd left $slice's cpuset at $eff after the drop-in was removed"
p=$(pool)
if [ "$p" = "$eff" ]; then ok "without the drop-in the pool follows the slice's cpuset again ($p)"; else fail "without the drop-in the pool is '$p', the slice's effective cpuset $eff"; fi
j=$(timeout 20 pjw status --json 2>/dev/null | python3 -c 'import json, sys; print(" ".join(j["id"] for j in json.load(sys.stdin)["jobs"]))')
if [ -z "$j" ]; then ok "the daemon lists no job at the end"; else fail "the daemon still lists jobs at the end: $j"; fi

check "systemctl disable --now pjw" timeout 120 systemctl disable --now pjw
systemctl stop pjw-jobs.scope 2>/dev/null
make uninstall >/dev/null 2>&1
rm -rf /etc/pjw /var/lib/pjw
systemctl daemon-reload
sleep 2
settle cg_new /tmp/pjw-cg-before-reserve
left=$(cg_new /tmp/pjw-cg-before-reserve)
if [ -z "$left" ]; then ok "no cgroup left"; else fail "cgroups left: $(echo "$left" | tr '\n' ' ')"; fi
left=$(pjw_processes)
if [ -z "$left" ]; then ok "no pjw process left"; else fail "pjw processes left: $(echo "$left" | tr '\n' ';')"; fi
echo "=== done"
