#!/bin/sh
# In the systemd guest, as root in an ssh login session: the packaged service installed the way
# the README says (make install; systemctl daemon-reload && systemctl enable --now pjw). alice
# and bob each start a 2-CPU job from their own login (su -); with both running, systemctl
# daemon-reload, restart pjw, stop + start pjw: after each step both jobs still run, in the same
# cgroup, on the same CPUs (systemd issue 40438: systemd rewrites delegated cpusets on reload).
# Then the jobs end with their own exit statuses (3, 4), no job cgroup is left, the service is
# active without errors and its journal has pjw's structured logs; disable --now and clean up.
# Beside them, ssh logins through the shipped PAM snippet join their user's job (guest-ssh.sh).
# usage: guest-service.sh <source-dir>
src=${1:?usage: guest-service.sh <source-dir>}
. "$src/vm/systemd/guest-lib.sh"
session_check
cd "$src" || { fail "no source tree at $src"; echo "=== done"; exit 1; }
d=/var/tmp/pjw-svc
rm -rf "$d"; mkdir -m 1777 "$d"
cg_snapshot /tmp/pjw-cg-before-service

ncpus() { echo "$1" | awk -F, '{ n = 0; for (i = 1; i <= NF; i++) { k = split($i, a, "-"); n += (k == 2 ? a[2] - a[1] + 1 : 1) } print n }'; }
allowed() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null; }
wait_daemon() {   # until the socket answers (bounded)
  i=0
  while [ "$i" -lt 120 ]; do
    [ -S /run/pjw/pjw.sock ] && timeout 20 pjw status >/dev/null 2>&1 && return 0
    sleep 1; i=$((i + 1))
  done
  return 1
}
status_jobs() {   # "id user state cpus" per job, from pjw status --json
  timeout 20 pjw status --json 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
for j in s["jobs"]:
    print(j["id"], j["user"], j["state"], j["cpus"])'
}

log=/tmp/pjw-guest-install.log
timeout 900 make install > "$log" 2>&1; rc=$?
sed 's/^/  | /' "$log" | tail -15
if [ "$rc" = 0 ]; then ok "make install (exit 0)"; else fail "make install exited $rc"; fi
no_compiling "$log" "make install"
check "systemctl daemon-reload && systemctl enable --now pjw" sh -c 'systemctl daemon-reload && systemctl enable --now pjw'
if wait_daemon; then ok "the service's daemon answers on /run/pjw/pjw.sock"; else fail "the service's daemon does not answer on /run/pjw/pjw.sock"; fi
systemctl status pjw --no-pager -l 2>&1 | head -20 | sed 's/^/  | /'
main=$(systemctl show -p MainPID --value pjw)
. "$src/vm/systemd/guest-ssh.sh"
ssh_setup
echo "daemon pid $main, cgroup $(cgroup_of "$main")"

# One job each for alice and bob, from their own login; each waits for its stop file.
start_job() {   # user exit-code
  su - "$1" -c "exec pjw run --cpus 2 --name $1-job -- sh -c 'echo \$\$ > $d/$1.pid; while [ ! -e $d/$1.stop ]; do sleep 1; done; exit $2'" \
    > "$d/$1.out" 2>&1 &
  echo $! > "$d/$1.client"
}
start_job alice 3
start_job bob 4
for u in alice bob; do
  i=0; while [ ! -s "$d/$u.pid" ] && [ "$i" -lt 180 ]; do sleep 1; i=$((i + 1)); done
  if [ -s "$d/$u.pid" ]; then ok "$u's job started"; else fail "$u's job did not start within 180 s: $(cat "$d/$u.out")"; fi
done
timeout 20 pjw status 2>&1 | sed 's/^/  | /'
for u in alice bob; do
  pid=$(cat "$d/$u.pid" 2>/dev/null); cg=$(cgroup_of "$pid")
  eff=$(cat "/sys/fs/cgroup$cg/cpuset.cpus.effective" 2>/dev/null); cpus=$(cat "/sys/fs/cgroup$cg/cpuset.cpus" 2>/dev/null)
  echo "$cg" > "$d/$u.cg"; echo "$eff" > "$d/$u.eff"; echo "$cpus" > "$d/$u.cpus"
  echo "$u's job: pid $pid, owner $(stat -c %U "/proc/$pid" 2>/dev/null), cgroup $cg, cpuset.cpus $cpus, cpuset.cpus.effective $eff, affinity $(allowed "$pid")"
  if [ -n "$eff" ] && [ "$(ncpus "$eff")" = 2 ] && [ "$(allowed "$pid")" = "$eff" ]; then
    ok "$u's job is confined to 2 CPUs ($eff) in $cg"
  else
    fail "$u's job is not confined to 2 CPUs: cgroup $cg, effective '$eff', affinity '$(allowed "$pid")'"
  fi
done
ssh_with_jobs
a=$(cat "$d/alice.eff"); b=$(cat "$d/bob.eff")
if [ -n "$a" ] && [ -n "$b" ] && [ "$(ncpus "$a,$b")" = 4 ] && [ "$(echo "$a,$b" | tr ',' '\n' | sort -u | wc -l)" = "$(echo "$a,$b" | tr ',' '\n' | wc -l)" ]; then
  ok "alice's and bob's CPUs are disjoint ($a / $b)"
else
  fail "alice's and bob's CPUs overlap or are missing ($a / $b)"
fi

# After each systemctl step: both jobs alive, same cgroup, same cpuset, same affinity.
same() {   # step
  for u in alice bob; do
    pid=$(cat "$d/$u.pid" 2>/dev/null); cg=$(cat "$d/$u.cg"); eff0=$(cat "$d/$u.eff"); cpus0=$(cat "$d/$u.cpus")
    now=$(cgroup_of "$pid"); eff=$(cat "/sys/fs/cgroup$now/cpuset.cpus.effective" 2>/dev/null)
    cpus=$(cat "/sys/fs/cgroup$now/cpuset.cpus" 2>/dev/null); aff=$(allowed "$pid")
    if kill -0 "$pid" 2>/dev/null && [ "$now" = "$cg" ] && [ "$eff" = "$eff0" ] && [ "$cpus" = "$cpus0" ] && [ "$aff" = "$eff0" ]; then
      ok "after $1: $u's job still runs in $cg on CPUs $eff (cpuset.cpus $cpus, affinity $aff)"
    else
      fail "after $1: $u's job (pid $pid) alive=$(kill -0 "$pid" 2>/dev/null && echo yes || echo no), cgroup $now (was $cg), effective '$eff' (was '$eff0'), cpuset.cpus '$cpus' (was '$cpus0'), affinity '$aff'"
    fi
  done
}
# The daemon, back, knows both jobs on the same CPUs.
known() {   # step
  j=$(status_jobs)
  echo "$j" | sed 's/^/  | /'
  for u in alice bob; do
    if echo "$j" | awk -v u="$u" -v c="$(cat "$d/$u.eff")" '$2 == u && $3 == "running" && $4 == c { f = 1 } END { exit !f }'; then
      ok "after $1: the daemon lists $u's job running on $(cat "$d/$u.eff")"
    else
      fail "after $1: the daemon does not list $u's job running on $(cat "$d/$u.eff")"
    fi
  done
}

systemctl daemon-reload; sleep 3
same "systemctl daemon-reload"
known "systemctl daemon-reload"
if timeout 120 systemctl restart pjw; then ok "systemctl restart pjw"; else fail "systemctl restart pjw: $(systemctl status pjw --no-pager 2>&1 | tail -5 | tr '\n' ';')"; fi
wait_daemon || fail "the daemon does not answer after the restart"
same "systemctl restart pjw"
known "systemctl restart pjw"
if timeout 120 systemctl stop pjw; then ok "systemctl stop pjw"; else fail "systemctl stop pjw"; fi
st=$(systemctl is-active pjw)
if [ "$st" != active ]; then ok "pjw.service is $st after stop"; else fail "pjw.service still active after stop"; fi
same "systemctl stop pjw (daemon stopped)"
if timeout 120 systemctl start pjw; then ok "systemctl start pjw"; else fail "systemctl start pjw: $(systemctl status pjw --no-pager 2>&1 | tail -5 | tr '\n' ';')"; fi
wait_daemon || fail "the daemon does not answer after the start"
same "systemctl start pjw"
known "systemctl start pjw"
systemctl daemon-reload; sleep 3
same "a second daemon-reload"

# The jobs end; each client (su - user -c 'pjw run ...') gets its own job's exit status.
touch "$d/alice.stop" "$d/bob.stop"
for u in alice:3 bob:4; do
  user=${u%:*}; want=${u#*:}; c=$(cat "$d/$user.client")
  i=0; while kill -0 "$c" 2>/dev/null && [ "$i" -lt 120 ]; do sleep 1; i=$((i + 1)); done
  if kill -0 "$c" 2>/dev/null; then fail "$user's client did not end within 120 s of its job's stop file"; continue; fi
  wait "$c"; rc=$?
  sed 's/^/  | /' "$d/$user.out"
  if [ "$rc" = "$want" ]; then ok "$user's client exited $rc, its job's status"; else fail "$user's client exited $rc, expected $want"; fi
done
for u in alice bob; do
  cg=$(cat "$d/$u.cg")
  i=0; while [ -n "$cg" ] && [ -d "/sys/fs/cgroup$cg" ] && [ "$i" -lt 60 ]; do sleep 1; i=$((i + 1)); done
  if [ -n "$cg" ] && [ ! -d "/sys/fs/cgroup$cg" ]; then ok "$u's job cgroup $cg is gone"; else fail "$u's job cgroup '$cg' is left"; fi
done
j=$(status_jobs)
if [ -z "$j" ]; then ok "the daemon lists no job"; else fail "the daemon still lists jobs: $(echo "$j" | tr '\n' ';')"; fi
ssh_after_jobs
ssh_teardown

# The service: active, no restarts, nothing logged at error level; pjw's own structured logs.
systemctl status pjw --no-pager -l 2>&1 | head -20 | sed 's/^/  | /'
st=$(systemctl is-active pjw); res=$(systemctl show -p Result --value pjw); nr=$(systemctl show -p NRestarts --value pjw)
if [ "$st" = active ] && [ "$res" = success ] && [ "${nr:-0}" = 0 ]; then ok "pjw.service is active (result $res, $nr restarts)"; else fail "pjw.service: $st, result $res, $nr restarts"; fi
errs=$(journalctl -b -u pjw -p err --no-pager -o cat 2>/dev/null)
if [ -z "$errs" ]; then ok "no error in pjw.service's journal"; else fail "errors in pjw.service's journal: $(echo "$errs" | tail -5 | tr '\n' ';')"; fi
# The daemon's own lines: `pjw daemon` execs pjw-full (the lean launch front, decisions.md (cj)),
# so the process that writes them is named pjw-full; systemd's lines about the unit are not.
echo "journalctl -u pjw (pjw's own lines, last 12):"
journalctl -b -u pjw _COMM=pjw-full --no-pager -o short-iso 2>/dev/null | tail -12 | sed 's/^/  | /'
# Under systemd pjw writes journal lines (JOURNAL_STREAM): a level, the target and key=value
# fields, with no timestamp of its own (journald stamps each line) and a <N> priority prefix
# that journald takes as the line's priority.
lines=$(journalctl -b -u pjw _COMM=pjw-full --no-pager -o cat 2>/dev/null)
if echo "$lines" | grep -E '^(INFO|WARN|DEBUG) [a-z_:]+: ' | grep -q '[a-z_]*='; then
  ok "the journal has pjw's structured log lines (level, target, key=value fields)"
else
  fail "no structured log line of pjw in the journal"
fi
if echo "$lines" | grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T|^<[0-9]>'; then
  fail "pjw's journal lines carry their own timestamp or an unparsed <N> prefix: $(echo "$lines" | grep -E '^[0-9]{4}-|^<[0-9]>' | head -1)"
else
  ok "pjw's journal lines have no timestamp of their own and no unparsed priority prefix"
fi
if journalctl -b -u pjw _COMM=pjw-full -p 6..6 --no-pager -o cat 2>/dev/null | grep -q '^INFO '; then
  ok "pjw's INFO lines are at journal priority info"
else
  fail "no pjw INFO line at journal priority info"
fi

# Disable and clean up: nothing of pjw may stay.
check "systemctl disable --now pjw" timeout 120 systemctl disable --now pjw
# The jobs' scope outlives the daemon by design (jobs keep running while pjw is stopped):
# say what is left after disable --now, then stop it as the Makefile's uninstall note says.
left=$(find /sys/fs/cgroup/pjw.slice -mindepth 1 -type d 2>/dev/null)
[ -z "$left" ] || echo "note: after disable --now: $(echo "$left" | tr '\n' ' '); processes: $(cat /sys/fs/cgroup/pjw.slice/pjw-jobs.scope/*/cgroup.procs 2>/dev/null | while read -r p; do ps -o args= -p "$p"; done | tr '\n' ';')"
systemctl stop pjw-jobs.scope 2>/dev/null
make uninstall >/dev/null 2>&1
ssh_uninstalled
rm -rf /etc/pjw /var/lib/pjw "$d"
systemctl daemon-reload
sleep 2
left=$(pjw_processes)
if [ -z "$left" ]; then ok "no pjw process left"; else fail "pjw processes left: $(echo "$left" | tr '\n' ';')"; fi
settle cg_new /tmp/pjw-cg-before-service
left=$(cg_new /tmp/pjw-cg-before-service)
if [ -z "$left" ]; then ok "no cgroup left by the service and its jobs"; else fail "cgroups left: $(echo "$left" | tr '\n' ' ')"; fi
# (pjw-src.service is the guest's own; an empty pjw.slice is systemd's, see guest-lib.sh.)
left=$(systemctl list-units --all --plain --no-legend 'pjw*' 2>/dev/null | grep -v -e '^pjw-src\.service ' -e '^pjw\.slice ')
if [ -z "$left" ]; then ok "no pjw unit left"; else fail "units left: $(echo "$left" | tr '\n' ';')"; fi
echo "=== done"
