# Shared by the systemd guest's checks (vm/systemd/guest-*.sh), sourced, POSIX sh. Every check
# prints one line "ok: ..." or "FAIL: ..."; vm/systemd/run.sh counts them. A script that ran to
# its end prints "=== done" last (its absence counts as a failure on the host).
export PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C.UTF-8

ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; }
# check DESCRIPTION COMMAND...: ok when the command succeeds.
check() { _what=$1; shift; if "$@"; then ok "$_what"; else fail "$_what"; fi; }

# The checks run as root in a real login (sshd, PAM, logind): say where this shell is.
session_check() {
  line=$(grep '^0::' /proc/self/cgroup)
  echo "test shell /proc/self/cgroup: $line"
  case $line in
    0::/user.slice/user-0.slice/session-*.scope) ok "the test shell is in root's logind session scope (${line#0::})" ;;
    *) fail "the test shell is not in a logind session scope: $line" ;;
  esac
  echo "cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers); cgroup mounts: $(awk '$3 ~ /^cgroup/ {print $2 " " $3}' /proc/mounts | tr '\n' ' ')"
  echo "cpus $(cat /sys/devices/system/cpu/online), numa nodes $(cat /sys/devices/system/node/online), systemd $(systemctl --version | head -1 | cut -d' ' -f2), kernel $(uname -r)"
}

# cgroup directories named pjw-* anywhere, except those of the installed service (its unit, its
# slice and scopes); one per line.
stray_pjw_cgroups() {
  find /sys/fs/cgroup -mindepth 1 -type d -name 'pjw-*' 2>/dev/null \
    | grep -v -e '^/sys/fs/cgroup/system.slice/pjw.service' -e '^/sys/fs/cgroup/pjw.slice/pjw-jobs.scope' || true
}

# Processes of pjw's binaries (pjw, pjw-full, pjw-wl), "pid comm args", except the service's daemon.
pjw_processes() {
  main=$(systemctl show -p MainPID --value pjw.service 2>/dev/null || echo 0)
  ps -eo pid=,comm=,args= | awk -v m="${main:-0}" '($2 == "pjw" || $2 == "pjw-full" || $2 == "pjw-wl") && $1 != m'
}

# A cgroup's path (as in /proc/PID/cgroup) of a process, or nothing.
cgroup_of() { sed -n 's/^0:://p' "/proc/$1/cgroup" 2>/dev/null; }

# cargo must find the host's build fresh: a "Compiling" line means it rebuilt in the guest.
no_compiling() {
  if grep -q '^ *Compiling ' "$1"; then
    fail "cargo compiled in the guest ($2): the host's build was not fresh here: $(grep -m3 '^ *Compiling ' "$1" | tr -s ' ' | tr '\n' ';')"
  else
    ok "cargo found the host's build fresh ($2)"
  fi
}

# systemd removes an emptied scope asynchronously: give it (under emulation) up to 20 s.
settle() { i=0; while [ "$i" -lt 20 ] && [ -n "$("$@")" ]; do sleep 1; i=$((i + 1)); done; }

# Every cgroup directory now, and later the ones that are new since (other logins' session
# scopes and user managers aside): what a step left behind, whatever its name. pjw.slice itself
# is systemd's: started for the first scope in it, it stays active when empty (stopping it would
# kill the service's jobs), so an empty pjw.slice is no leftover.
cg_snapshot() { find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort > "$1"; }
cg_new() {
  find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort | comm -13 "$1" - \
    | grep -v -e '/session-[0-9]*\.scope$' -e '/user@[0-9]*\.service' -e '^/sys/fs/cgroup/user\.slice/user-[0-9]*\.slice$' -e '^/sys/fs/cgroup/pjw\.slice$' || true
}
