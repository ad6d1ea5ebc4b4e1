#!/bin/sh
# In the systemd guest, as root in an ssh login session: ssh logins join their user's job
# through the shipped PAM snippet (packaging/pam/pjw-adopt, docs/wlm/adoption.md), over the real
# sshd with pam_systemd in its session stack. make install, the service on, `@include
# pjw-adopt` at the end of /etc/pam.d/sshd; alice starts a 2-CPU job. Then `ssh alice@` puts
# the session's shell in that job's cgroup, on its CPUs, and what the session leaves running
# dies with the job; bob (no job) lands outside every job (login_without_job = "outside", the
# default), and after `systemctl reload pjw` with "refuse" is refused, while alice and root
# still log in; root is never adopted. Everything is undone at the end.
# usage: guest-ssh.sh <source-dir>
src=${1:?usage: guest-ssh.sh <source-dir>}
. "$src/vm/systemd/guest-lib.sh"
session_check
cd "$src" || { fail "no source tree at $src"; echo "=== done"; exit 1; }
d=/var/tmp/pjw-ssh
rm -rf "$d"; mkdir -m 1777 "$d"
cg_snapshot /tmp/pjw-cg-before-ssh
allowed() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null; }
wait_daemon() {
  i=0
  while [ "$i" -lt 120 ]; do
    [ -S /run/pjw/pjw.sock ] && timeout 20 pjw status >/dev/null 2>&1 && return 0
    sleep 1; i=$((i + 1))
  done
  return 1
}

log=/tmp/pjw-guest-ssh-install.log
timeout 900 make install > "$log" 2>&1; rc=$?
if [ "$rc" = 0 ]; then ok "make install (exit 0)"; else fail "make install exited $rc: $(tail -5 "$log" | tr '\n' ';')"; fi
no_compiling "$log" "make install"
check "make install put the PAM snippet at /etc/pam.d/pjw-adopt, running /usr/local/bin/pjw" \
  grep -q '^session .*pam_exec.so stdout /usr/local/bin/pjw pam-adopt$' /etc/pam.d/pjw-adopt
check "systemctl enable --now pjw" sh -c 'systemctl daemon-reload && systemctl enable --now pjw'
if wait_daemon; then ok "the service's daemon answers"; else fail "the service's daemon does not answer"; fi

# The line docs/wlm/adoption.md says to add, after pam_systemd's (common-session).
cp /etc/pam.d/sshd "$d/sshd.orig"
echo '@include pjw-adopt' >> /etc/pam.d/sshd
check "/etc/pam.d/sshd includes pjw-adopt last, after common-session" \
  sh -c 'grep -q "^@include common-session" /etc/pam.d/sshd && [ "$(grep -v -e "^#" -e "^\$" /etc/pam.d/sshd | tail -1)" = "@include pjw-adopt" ]'
# A key of this step for alice, bob and root, removed at the end.
key=$d/key
ssh-keygen -q -t ed25519 -N '' -C pjw-ssh-step -f "$key"
for h in /home/alice /home/bob /root; do
  mkdir -p "$h/.ssh"; cat "$key.pub" >> "$h/.ssh/authorized_keys"
done
chmod 0644 "$key.pub"
on() {   # user command...: ssh to this guest as user (stdin closed), its output
  u=$1; shift
  timeout 120 ssh -i "$key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o BatchMode=yes -o ConnectTimeout=30 "$u@127.0.0.1" "$@" < /dev/null
}

# alice's job: 2 CPUs, until its stop file.
su - alice -c "exec pjw run --cpus 2 --name alice-job -- sh -c 'echo \$\$ > $d/alice.pid; while [ ! -e $d/alice.stop ]; do sleep 1; done'" \
  > "$d/alice.out" 2>&1 &
client=$!
i=0; while [ ! -s "$d/alice.pid" ] && [ "$i" -lt 180 ]; do sleep 1; i=$((i + 1)); done
main=$(cat "$d/alice.pid" 2>/dev/null)
jobcg=$(cgroup_of "$main")
jobcpus=$(allowed "$main")
case $jobcg in
  */job-*) ok "alice's job runs in $jobcg on CPUs $jobcpus" ;;
  *) fail "alice's job did not start: $(cat "$d/alice.out")" ;;
esac

# alice logs in: the session's shell is in her job's cgroup, on its CPUs.
out=$(on alice 'echo "cgroup $(sed -n "s/^0:://p" /proc/self/cgroup)"; echo "cpus $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"; echo "sshd $(sed -n "s/^0:://p" /proc/$PPID/cgroup)"' 2>&1); rc=$?
echo "$out" | sed 's/^/  | /'
cg=$(echo "$out" | sed -n 's/^cgroup //p'); cpus=$(echo "$out" | sed -n 's/^cpus //p')
if [ "$rc" = 0 ] && [ -n "$jobcg" ] && [ "$cg" = "$jobcg" ] && [ "$cpus" = "$jobcpus" ]; then
  ok "ssh alice@guest: the session's shell is in her job's cgroup $cg on its CPUs $cpus"
else
  fail "ssh alice@guest (exit $rc): the shell is in '$cg' on '$cpus', her job in '$jobcg' on '$jobcpus'"
fi
if echo "$out" | grep -q "^sshd $jobcg\$"; then ok "the session's sshd process is in the job too"; else fail "the session's sshd process is not in the job: $(echo "$out" | grep '^sshd')"; fi
# What the session leaves running is the job's: it dies with the job.
on alice "setsid sh -c 'echo \$\$ > $d/left.pid; exec sleep 600' > /dev/null 2>&1 < /dev/null &" ; rc=$?
i=0; while [ ! -s "$d/left.pid" ] && [ "$i" -lt 60 ]; do sleep 1; i=$((i + 1)); done
left=$(cat "$d/left.pid" 2>/dev/null)
if [ "$rc" = 0 ] && [ -n "$left" ] && [ "$(cgroup_of "$left")" = "$jobcg" ]; then
  ok "a process alice's ssh session left running is in her job"
else
  fail "the process alice's session left (pid '$left', exit $rc) is in '$(cgroup_of "$left")', not $jobcg"
fi

# bob has no job: outside every job by default (a logind session scope), not in alice's.
out=$(on bob 'sed -n "s/^0:://p" /proc/self/cgroup' 2>&1); rc=$?
case "$rc:$out" in
  0:/user.slice/user-*.slice/session-*.scope) ok "ssh bob@guest (no job, login_without_job = outside): the session is outside every job ($out)" ;;
  *) fail "ssh bob@guest (no job): exit $rc, cgroup '$out'" ;;
esac
# root: never adopted.
out=$(on root 'sed -n "s/^0:://p" /proc/self/cgroup' 2>&1); rc=$?
case "$rc:$out" in
  0:/user.slice/user-0.slice/session-*.scope) ok "ssh root@guest: never adopted ($out)" ;;
  *) fail "ssh root@guest: exit $rc, cgroup '$out'" ;;
esac

# The node refuses logins without a job (live on reload): bob is refused, alice and root are not.
sed -i 's/^#login_without_job = "outside"$/login_without_job = "refuse"/' /etc/pjw/pjw.toml
check "login_without_job = \"refuse\" in /etc/pjw/pjw.toml" grep -q '^login_without_job = "refuse"$' /etc/pjw/pjw.toml
systemctl reload pjw
i=0; while ! journalctl -b -u pjw --no-pager -o cat 2>/dev/null | grep -q 'config reloaded.*adopt.login_without_job' && [ "$i" -lt 30 ]; do sleep 1; i=$((i + 1)); done
check "the daemon reloaded adopt.login_without_job" sh -c 'journalctl -b -u pjw --no-pager -o cat | grep -q "config reloaded.*adopt.login_without_job"'
out=$(on bob 'echo in' 2>&1); rc=$?
if [ "$rc" != 0 ] && ! echo "$out" | grep -q '^in$'; then
  ok "ssh bob@guest with login_without_job = refuse: refused (exit $rc: $(echo "$out" | tail -1))"
else
  fail "ssh bob@guest with login_without_job = refuse: let in (exit $rc: $out)"
fi
if journalctl -b -u pjw --no-pager -o cat | grep -q 'login refused: no running job'; then ok "the daemon logged the refusal"; else fail "no refusal in the daemon's journal"; fi
out=$(on alice 'sed -n "s/^0:://p" /proc/self/cgroup' 2>&1); rc=$?
if [ "$rc" = 0 ] && [ "$out" = "$jobcg" ]; then ok "alice, with a job, still logs in, into it"; else fail "alice with refuse: exit $rc, '$out'"; fi
out=$(on root 'echo in' 2>&1); rc=$?
if [ "$rc" = 0 ] && [ "$out" = in ]; then ok "root still logs in"; else fail "root with refuse: exit $rc, '$out'"; fi

# The job ends: the process the ssh session left dies with it.
touch "$d/alice.stop"
i=0; while kill -0 "$client" 2>/dev/null && [ "$i" -lt 120 ]; do sleep 1; i=$((i + 1)); done
i=0; while [ -n "$left" ] && kill -0 "$left" 2>/dev/null && [ "$i" -lt 60 ]; do sleep 1; i=$((i + 1)); done
if [ -n "$left" ] && ! kill -0 "$left" 2>/dev/null; then ok "the process alice's ssh session left ended with her job"; else fail "pid '$left' outlived alice's job"; fi
i=0; while [ -n "$jobcg" ] && [ -d "/sys/fs/cgroup$jobcg" ] && [ "$i" -lt 60 ]; do sleep 1; i=$((i + 1)); done
if [ -n "$jobcg" ] && [ ! -d "/sys/fs/cgroup$jobcg" ]; then ok "alice's job cgroup is gone"; else fail "alice's job cgroup '$jobcg' is left"; fi

# Undo: the PAM line, the keys, the service, the install.
cp "$d/sshd.orig" /etc/pam.d/sshd
for h in /home/alice /home/bob /root; do sed -i '/ pjw-ssh-step$/d' "$h/.ssh/authorized_keys"; done
check "systemctl disable --now pjw" timeout 120 systemctl disable --now pjw
systemctl stop pjw-jobs.scope 2>/dev/null
make uninstall >/dev/null 2>&1
check "make uninstall removed /etc/pam.d/pjw-adopt" [ ! -e /etc/pam.d/pjw-adopt ]
rm -rf /etc/pjw /var/lib/pjw "$d"
systemctl daemon-reload
sleep 2
left=$(pjw_processes)
if [ -z "$left" ]; then ok "no pjw process left"; else fail "pjw processes left: $(echo "$left" | tr '\n' ';')"; fi
settle cg_new /tmp/pjw-cg-before-ssh
left=$(cg_new /tmp/pjw-cg-before-ssh)
if [ -z "$left" ]; then ok "no cgroup left by the step"; else fail "cgroups left: $(echo "$left" | tr '\n' ' ')"; fi
echo "=== done"
