# ssh logins join their user's job (docs/wlm/adoption.md), checked in the systemd guest over the
# real sshd with pam_systemd in its session stack, through the PAM snippet `make install` ships
# (packaging/pam/pjw-adopt). Sourced by guest-service.sh, which has installed the service and
# runs alice's and bob's jobs: sharing its install, service and jobs keeps the tier's time down.
#   ssh_setup        `@include pjw-adopt` at the end of /etc/pam.d/sshd; a key for the logins
#   ssh_with_jobs    alice's session's shell (and sshd) in her job's cgroup, on its CPUs, and
#                    what it leaves running too; bob's in his own job, never alice's
#   ssh_after_jobs   what alice's session left died with her job; alice, now without a job, is
#                    left outside (login_without_job = "outside", the default); after
#                    `systemctl reload pjw` with "refuse" she is refused, root is neither
#                    refused nor adopted
#   ssh_teardown     the PAM line and the keys taken out again
#   ssh_uninstalled  make uninstall removed the snippet
# Uses guest-lib.sh's ok/fail/check/cgroup_of and the service step's $d/USER.cg and .eff.
# Each login costs seconds under emulation (sshd, PAM, logind, pjw twice): five logins prove
# the points, one per user and phase (alice's first also leaves the process), and no wait is a
# fixed time: each polls for its event every 0.05-0.1 s (the reload and the refusal in the
# daemon's journal, followed into a file rather than read whole each time).

ssh_secs=0
ssh_key=/var/tmp/pjw-ssh-key
ssh_left=""

ssh_on() {   # user command...: ssh to this guest as user (stdin closed), its output
  _u=$1; shift
  timeout 120 ssh -i "$ssh_key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o LogLevel=ERROR -o BatchMode=yes -o ConnectTimeout=30 -o GSSAPIAuthentication=no \
    -o PreferredAuthentications=publickey "$_u@127.0.0.1" "$@" < /dev/null
}

ssh_setup() {
  _s=$(date +%s)
  check "make install put the PAM snippet at /etc/pam.d/pjw-adopt, running /usr/local/bin/pjw" \
    grep -q '^session .*pam_exec.so stdout /usr/local/bin/pjw pam-adopt$' /etc/pam.d/pjw-adopt
  cp /etc/pam.d/sshd /var/tmp/pjw-sshd.orig
  # The line docs/wlm/adoption.md says to add: last, after pam_systemd's common-session.
  echo '@include pjw-adopt' >> /etc/pam.d/sshd
  check "/etc/pam.d/sshd includes pjw-adopt last, after common-session" \
    sh -c 'grep -q "^@include common-session" /etc/pam.d/sshd && [ "$(grep -v -e "^#" -e "^\$" /etc/pam.d/sshd | tail -1)" = "@include pjw-adopt" ]'
  rm -f "$ssh_key" "$ssh_key.pub"
  ssh-keygen -q -t ed25519 -N '' -C pjw-ssh-check -f "$ssh_key"
  for _h in /home/alice /home/bob /root; do
    mkdir -p "$_h/.ssh"; cat "$ssh_key.pub" >> "$_h/.ssh/authorized_keys"
  done
  ssh_secs=$((ssh_secs + $(date +%s) - _s))
}

ssh_with_jobs() {
  _s=$(date +%s)
  _acg=$(cat "$d/alice.cg"); _aeff=$(cat "$d/alice.eff"); _bcg=$(cat "$d/bob.cg")
  # One login: where the shell, its sshd and a process it leaves running (setsid, its pid
  # written before the session ends) are.
  _out=$(ssh_on alice "echo \"cgroup \$(sed -n 's/^0:://p' /proc/self/cgroup)\"; echo \"cpus \$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)\"; echo \"sshd \$(sed -n 's/^0:://p' /proc/\$PPID/cgroup)\"; setsid sh -c 'echo \$\$ > $d/left.pid; exec sleep 600' > /dev/null 2>&1 < /dev/null & i=0; while [ ! -s $d/left.pid ] && [ \$i -lt 600 ]; do sleep 0.05; i=\$((i + 1)); done" 2>&1); _rc=$?
  echo "$_out" | sed 's/^/  | /'
  _cg=$(echo "$_out" | sed -n 's/^cgroup //p'); _cpus=$(echo "$_out" | sed -n 's/^cpus //p')
  if [ "$_rc" = 0 ] && [ -n "$_acg" ] && [ "$_cg" = "$_acg" ] && [ "$_cpus" = "$_aeff" ]; then
    ok "ssh alice@guest: the session's shell is in her job's cgroup $_cg, on its CPUs $_cpus"
  else
    fail "ssh alice@guest (exit $_rc): the shell is in '$_cg' on '$_cpus'; her job is in '$_acg' on '$_aeff'"
  fi
  if echo "$_out" | grep -qx "sshd $_acg"; then ok "alice's session's sshd process is in her job too"; else fail "alice's session's sshd process is not in her job: $(echo "$_out" | grep '^sshd')"; fi
  # What the session leaves running is the job's (it must die with it: ssh_after_jobs).
  ssh_left=$(cat "$d/left.pid" 2>/dev/null)
  if [ -n "$ssh_left" ] && [ "$(cgroup_of "$ssh_left")" = "$_acg" ]; then
    ok "a process alice's ssh session left running is in her job"
  else
    fail "the process alice's session left (pid '$ssh_left') is in '$(cgroup_of "$ssh_left")', not $_acg"
  fi
  _out=$(ssh_on bob 'sed -n "s/^0:://p" /proc/self/cgroup' 2>&1); _rc=$?
  if [ "$_rc" = 0 ] && [ -n "$_bcg" ] && [ "$_out" = "$_bcg" ]; then
    ok "ssh bob@guest: in his own job ($_out), not alice's"
  else
    fail "ssh bob@guest (exit $_rc): in '$_out'; his job is '$_bcg', alice's '$_acg'"
  fi
  ssh_secs=$((ssh_secs + $(date +%s) - _s))
}

ssh_after_jobs() {
  _s=$(date +%s)
  _i=0; while [ -n "$ssh_left" ] && kill -0 "$ssh_left" 2>/dev/null && [ "$_i" -lt 600 ]; do sleep 0.1; _i=$((_i + 1)); done
  if [ -n "$ssh_left" ] && ! kill -0 "$ssh_left" 2>/dev/null; then ok "the process alice's ssh session left ended with her job"; else fail "pid '$ssh_left' outlived alice's job"; fi
  # No job now: outside every job by default (her logind session scope).
  _out=$(ssh_on alice 'sed -n "s/^0:://p" /proc/self/cgroup' 2>&1); _rc=$?
  case "$_rc:$_out" in
    0:/user.slice/user-1001.slice/session-*.scope) ok "ssh alice@guest without a job (login_without_job = outside): outside every job ($_out)" ;;
    *) fail "ssh alice@guest without a job: exit $_rc, cgroup '$_out'" ;;
  esac
  # The node refuses logins without a job, live on reload: alice is refused, root is not.
  cp /etc/pjw/pjw.toml /var/tmp/pjw-ssh.toml
  sed -i 's/^#login_without_job = "outside"$/login_without_job = "refuse"/' /etc/pjw/pjw.toml
  check "login_without_job = \"refuse\" in /etc/pjw/pjw.toml" grep -q '^login_without_job = "refuse"$' /etc/pjw/pjw.toml
  # Wait for the daemon's line, not a fixed time: its journal followed into a file from before
  # the reload, the file polled (no journal read per poll).
  _since=$(date +%s)
  journalctl -u pjw --since "@$_since" -f -o cat > "$d/reload.log" 2>/dev/null &
  _j=$!
  systemctl reload pjw
  _i=0
  while ! grep -q 'config reloaded.*adopt.login_without_job' "$d/reload.log" && [ "$_i" -lt 300 ]; do sleep 0.1; _i=$((_i + 1)); done
  if grep -q 'config reloaded.*adopt.login_without_job' "$d/reload.log"; then ok "the daemon reloaded adopt.login_without_job"; else fail "no 'config reloaded' of adopt.login_without_job within 30 s"; fi
  _out=$(ssh_on alice 'echo in' 2>&1); _rc=$?
  if [ "$_rc" != 0 ] && ! echo "$_out" | grep -qx in; then
    ok "ssh alice@guest without a job, login_without_job = refuse: refused (exit $_rc)"
  else
    fail "ssh alice@guest without a job, login_without_job = refuse: let in (exit $_rc: $_out)"
  fi
  _i=0
  while ! grep -q 'login refused: no running job' "$d/reload.log" && [ "$_i" -lt 100 ]; do sleep 0.1; _i=$((_i + 1)); done
  kill "$_j" 2>/dev/null; wait "$_j" 2>/dev/null
  if grep -q 'login refused: no running job' "$d/reload.log"; then ok "the daemon logged the refusal"; else fail "no refusal in the daemon's journal"; fi
  # Root has no job either: with refuse it is let in (the snippet skips root) and never adopted.
  _out=$(ssh_on root 'sed -n "s/^0:://p" /proc/self/cgroup' 2>&1); _rc=$?
  case "$_rc:$_out" in
    0:/user.slice/user-0.slice/session-*.scope) ok "ssh root@guest with refuse: let in, never adopted ($_out)" ;;
    *) fail "ssh root@guest with refuse: exit $_rc, cgroup '$_out'" ;;
  esac
  cp /var/tmp/pjw-ssh.toml /etc/pjw/pjw.toml
  systemctl reload pjw
  ssh_secs=$((ssh_secs + $(date +%s) - _s))
}

ssh_teardown() {
  _s=$(date +%s)
  cp /var/tmp/pjw-sshd.orig /etc/pam.d/sshd
  for _h in /home/alice /home/bob /root; do sed -i '/ pjw-ssh-check$/d' "$_h/.ssh/authorized_keys"; done
  rm -f "$ssh_key" "$ssh_key.pub" /var/tmp/pjw-sshd.orig /var/tmp/pjw-ssh.toml
  ssh_secs=$((ssh_secs + $(date +%s) - _s))
  echo "ssh logins: $ssh_secs s of this step"
}

ssh_uninstalled() {
  check "make uninstall removed /etc/pam.d/pjw-adopt" [ ! -e /etc/pam.d/pjw-adopt ]
}
