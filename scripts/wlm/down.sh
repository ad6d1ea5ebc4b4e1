#!/usr/bin/env bash
# Stop what slurm-up.sh or sge-up.sh started: every pid in DIR/pids (SIGTERM, then SIGKILL
# after 10 s), last started first. Only those pids, and only while they are still the
# processes we started (their command matches the name recorded with them).
#
#   down.sh DIR
set -uo pipefail
D=${1:?usage: down.sh DIR}
[ -r "$D/pids" ] || exit 0
mapfile -t lines < <(tac "$D/pids")
alive() { # pid name: still running, and still ours?
  [ -r "/proc/$1/comm" ] && grep -q "^$(printf '%.15s' "$2")" "/proc/$1/comm" &&
    ! awk '{ exit ($3 == "Z" ? 0 : 1) }' "/proc/$1/stat" 2>/dev/null
}
running() { # name: is the daemon of that name from DIR/pids still running?
  local p; p=$(awk -v n="$1" '$1 == n { print $2 }' "$D/pids" | tail -1)
  [ -n "$p" ] && alive "$p" "$1"
}
# Let the manager finish its jobs first (their epilogs end them in pjw).
if [ -r "$D/slurm.conf" ] && running slurmctld; then
  export SLURM_CONF="$D/slurm.conf"
  scancel --quiet --partition=debug 2>/dev/null
  for _ in $(seq 200); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
fi
if [ -r "$D/sge.env" ] && running sge_qmaster; then
  . "$D/sge.env"
  qdel -f -u '*' >/dev/null 2>&1
  for _ in $(seq 200); do [ -z "$(qstat -u '*' 2>/dev/null)" ] && break; sleep 0.1; done
  [ -r "$D/orig/global" ] && qconf -Mconf "$D/orig/global" >/dev/null 2>&1
fi
for l in "${lines[@]}"; do
  set -- $l
  alive "$2" "$1" && kill -TERM "$2" 2>/dev/null
done
for l in "${lines[@]}"; do
  set -- $l
  for _ in $(seq 100); do alive "$2" "$1" || break; sleep 0.1; done
  if alive "$2" "$1"; then
    echo "down: $1 ($2) ignored SIGTERM; killing it" >&2
    kill -KILL "$2" 2>/dev/null
  fi
done
: > "$D/pids"
for k in slurm sge; do
  [ "$(cat /var/tmp/pjw-wlm/$k.dir 2>/dev/null)" = "$D" ] && rm -f /var/tmp/pjw-wlm/$k.dir
done
exit 0
