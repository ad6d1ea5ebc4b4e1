#!/bin/sh
# In the systemd guest, as root in an ssh login session: the Debian package (make deb, built on
# the host into target/deb) installed as an admin would: apt install ./pjw_*.deb. Then the
# service is active and answers, `pjw check` passes and fails naming a controller taken from
# the job parent's subtree_control, an ordinary user's `pjw run -- true` works, `man pjw-run`
# renders, bash completes `pjw r` to run, report, resume; systemctl reload changes vcpus and refuses
# an invalid file in the journal; an upgrade (the same package again)
# restarts the daemon and leaves a running job alone; purge leaves no cgroup, socket or state.
# usage: guest-deb.sh <source-dir>
src=${1:?usage: guest-deb.sh <source-dir>}
. "$src/vm/systemd/guest-lib.sh"
session_check
deb=$(ls "$src"/target/deb/pjw_*.deb 2>/dev/null | tail -n1)
if [ -z "$deb" ]; then fail "no target/deb/pjw_*.deb (run.sh builds it for the deb step)"; echo "=== done"; exit 1; fi
# The step installs into the guest's /usr: the make install of the service and reserve steps
# (which run before it by default) must be gone; they end with make uninstall.
if [ -e /usr/local/bin/pjw ] || [ -e /etc/systemd/system/pjw.service ]; then
  fail "a make install is present (/usr/local/bin/pjw or /etc/systemd/system/pjw.service): the steps before this one must make uninstall"
  echo "=== done"; exit 1
fi
d=/var/tmp/pjw-deb
rm -rf "$d"; mkdir -m 1777 "$d"
cg_snapshot /tmp/pjw-cg-before-deb
wait_daemon() {
  i=0
  while [ "$i" -lt 120 ]; do
    [ -S /run/pjw/pjw.sock ] && timeout 20 pjw status >/dev/null 2>&1 && return 0
    sleep 1; i=$((i + 1))
  done
  return 1
}

cp "$deb" "$d/"
# The lean image drops every man page (dpkg path-exclude=/usr/share/man/*, build-image.sh) and with
# them the man1/man5 directories; it re-includes pjw's pages but dpkg does not make their
# directories. An admin's machine has them.
mkdir -p /usr/share/man/man1 /usr/share/man/man5
log=/tmp/pjw-deb-install.log
(cd "$d" && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y "./$(basename "$deb")") > "$log" 2>&1; rc=$?
sed 's/^/  | /' "$log" | tail -8
if [ "$rc" = 0 ]; then ok "apt install ./$(basename "$deb")"; else fail "apt install exited $rc"; fi
if [ "$(systemctl is-active pjw)" = active ]; then ok "systemctl is-active pjw = active"; else fail "pjw is $(systemctl is-active pjw)"; fi
check "the service is enabled" systemctl is-enabled --quiet pjw
if wait_daemon; then ok "the daemon answers on /run/pjw/pjw.sock"; else fail "no daemon on /run/pjw/pjw.sock"; fi
check "/etc/pjw/pjw.toml is mode 600" sh -c '[ "$(stat -c %a /etc/pjw/pjw.toml)" = 600 ]'

# The preflight, as the service sees it (the parent pjw-scope wrote for it).
pjw check > "$d/check.out" 2>&1; rc=$?
sed 's/^/  | /' "$d/check.out"
if [ "$rc" = 0 ]; then ok "pjw check exits 0"; else fail "pjw check exited $rc"; fi
parent=$(sed -n 's/^PJW_CGROUP_PARENT=//p' /run/pjw/cgroup-parent.env)
pdir=/sys/fs/cgroup$parent
if [ -d "$pdir" ] && echo -cpuset > "$pdir/cgroup.subtree_control" 2>/dev/null; then
  pjw check > "$d/check2.out" 2>&1; rc=$?
  grep '^FAIL' "$d/check2.out" | sed 's/^/  | /'
  if [ "$rc" = 1 ] && grep -q '^FAIL  controller-cpuset .*echo +cpuset' "$d/check2.out"; then
    ok "pjw check fails naming cpuset and the fix when the parent lacks it"
  else
    fail "pjw check with cpuset taken from $pdir exited $rc: $(grep cpuset "$d/check2.out")"
  fi
  echo +cpuset > "$pdir/cgroup.subtree_control" || fail "cannot give cpuset back to $pdir"
else
  fail "cannot take cpuset from $pdir/cgroup.subtree_control"
fi

if su - alice -c 'pjw run -- true' > "$d/alice.out" 2>&1; then ok "alice's pjw run -- true"; else fail "alice's pjw run -- true: $(cat "$d/alice.out")"; fi
if MANPAGER=cat MANWIDTH=100 man pjw-run 2>"$d/man.err" | grep -q -- '--backfill-only'; then
  ok "man pjw-run renders"
else
  fail "man pjw-run: $(cat "$d/man.err")"
fi
check "man 5 pjw.toml renders" sh -c 'MANPAGER=cat man 5 pjw.toml | grep -q vcpus'
got=$(bash -c '. /usr/share/bash-completion/completions/pjw; COMP_WORDS=(pjw r); COMP_CWORD=1; COMP_LINE="pjw r"; COMP_POINT=5; _pjw pjw r pjw; printf "%s\n" "${COMPREPLY[@]}"' | sort | tr '\n' ' ')
if [ "$got" = "report resume run " ]; then ok "bash completes pjw r to: $got"; else fail "bash completes pjw r to: $got"; fi

# systemctl reload: vcpus changes live; an invalid file changes nothing and the journal says why
# (at priority err: the daemon's lines carry journald priorities).
cp /etc/pjw/pjw.toml "$d/pjw.toml.orig"
vcpus_now() { timeout 20 pjw status --json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["vcpus"])'; }
sed -i '1i vcpus = 7' /etc/pjw/pjw.toml   # top level: before the file's first [section]
systemctl reload pjw
i=0; while [ "$(vcpus_now)" != 7 ] && [ "$i" -lt 60 ]; do sleep 1; i=$((i + 1)); done
if [ "$(vcpus_now)" = 7 ]; then ok "systemctl reload pjw: pjw status shows vcpus 7"; else fail "after reload vcpus is $(vcpus_now)"; fi
sed -i 's/^vcpus = 7$/vcpus = 0/' /etc/pjw/pjw.toml
systemctl reload pjw
i=0; while ! journalctl -u pjw -p err --no-pager 2>/dev/null | grep -q 'reload refused'; do
  [ "$i" -lt 60 ] || break; sleep 1; i=$((i + 1))
done
if journalctl -u pjw -p err --no-pager | grep -q 'reload refused: the config is invalid'; then
  ok "an invalid config on reload is refused in the journal (priority err)"
else
  fail "no 'reload refused' at priority err in the journal"
fi
journalctl -u pjw --no-pager -n 3 | sed 's/^/  | /'
if [ "$(vcpus_now)" = 7 ]; then ok "the invalid config changed nothing (vcpus 7)"; else fail "vcpus is $(vcpus_now) after an invalid reload"; fi
cp "$d/pjw.toml.orig" /etc/pjw/pjw.toml
systemctl reload pjw

# Upgrade (the same package again): the daemon restarts, bob's running job is left alone.
su - bob -c "exec pjw run --cpus 1 --name bob-job -- sh -c 'echo \$\$ > $d/bob.pid; while [ ! -e $d/bob.stop ]; do sleep 1; done; exit 4'" > "$d/bob.out" 2>&1 &
client=$!
i=0; while [ ! -s "$d/bob.pid" ] && [ "$i" -lt 180 ]; do sleep 1; i=$((i + 1)); done
jpid=$(cat "$d/bob.pid" 2>/dev/null)
before=$(systemctl show -p MainPID --value pjw)
jcg=$(cgroup_of "$jpid")
(cd "$d" && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --reinstall "./$(basename "$deb")") > "$log" 2>&1 || fail "apt reinstall: $(tail -3 "$log")"
wait_daemon || fail "no daemon after the upgrade"
after=$(systemctl show -p MainPID --value pjw)
if [ -n "$jpid" ] && [ "$before" != "$after" ] && kill -0 "$jpid" 2>/dev/null && [ "$(cgroup_of "$jpid")" = "$jcg" ]; then
  ok "upgrade restarted the daemon ($before -> $after); bob's job $jpid runs on in $jcg"
else
  fail "upgrade: daemon $before -> $after, job ${jpid:-none} $(kill -0 "$jpid" 2>/dev/null && echo alive || echo gone) in $(cgroup_of "$jpid")"
fi
touch "$d/bob.stop"
wait "$client"; rc=$?
if [ "$rc" = 4 ]; then ok "bob's job ended with its own status (4)"; else fail "bob's job exited $rc: $(cat "$d/bob.out")"; fi

# Purge: no service, cgroup, socket or state left; the config goes too (policy: on purge).
(DEBIAN_FRONTEND=noninteractive timeout 600 apt-get purge -y pjw) > "$log" 2>&1 || fail "apt purge: $(tail -3 "$log")"
settle sh -c 'systemctl is-active --quiet pjw-jobs.scope && echo up'
check "no pjw process left" sh -c '[ -z "$(ps -eo comm= | grep -x -e pjw -e pjw-full -e pjw-wl)" ]'
check "no socket (/run/pjw gone)" sh -c '[ ! -e /run/pjw ]'
check "no state (/var/lib/pjw gone)" sh -c '[ ! -e /var/lib/pjw ]'
check "no config (/etc/pjw gone)" sh -c '[ ! -e /etc/pjw ]'
check "pjw-jobs.scope is gone" sh -c '! systemctl is-active --quiet pjw-jobs.scope'
settle cg_new /tmp/pjw-cg-before-deb
left=$(cg_new /tmp/pjw-cg-before-deb)
if [ -z "$left" ]; then ok "no cgroup left behind"; else fail "cgroups left: $(echo "$left" | tr '\n' ' ')"; fi
rm -rf "$d"
echo "=== done"
