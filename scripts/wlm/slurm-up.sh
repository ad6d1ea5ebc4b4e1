#!/usr/bin/env bash
# Start a private single-node Slurm for the live tests: munged, slurmctld and slurmd, all in
# the foreground as children of this script's caller's session, their pids in DIR/pids (one
# "name pid" a line, written as each starts) for slurm-down.sh. Nothing global is touched:
# config, state, logs and the munge socket live in DIR; clients find them with
# SLURM_CONF=DIR/slurm.conf. Prolog/Epilog are pjw's (packaging/slurm), reading PJW_WLM_ENV.
# With GPU_DIR, the node has GPUs: one gres gpu per GPU_DIR/nvidiaN character device (the test
# makes them with mknod), declared in DIR/gres.conf in N order (GresTypes=gpu, Gres=gpu:COUNT
# on the node) and pjw's TaskProlog sets the jobs' GPU variables; without it, no gres and no
# TaskProlog, as before. Every run writes its config afresh. pjw's SPANK plugin
# (packaging/slurm/spank, built here by `make spank`) is in DIR/plugstack.conf as `required`,
# talking to the env file's PJW_SOCKET: every task joins its pjw job before it execs.
# PJW_SPANK=optional loads it `optional`; PJW_SPANK=0 leaves it out (tasks are then found by
# adoption alone, docs/wlm/adoption.md). PJW_EPILOG=0 leaves pjw's Epilog out: jobs then end in
# pjw only by their lease (the lease test).
#
#   [PJW_SPANK=required|optional|0] [PJW_EPILOG=0] slurm-up.sh DIR PJW_WLM_ENV_FILE [GPU_DIR]
set -euo pipefail
D=${1:?usage: slurm-up.sh DIR PJW_WLM_ENV_FILE [GPU_DIR]}
ENVF=${2:?usage: slurm-up.sh DIR PJW_WLM_ENV_FILE [GPU_DIR]}
GPU_DIR=${3:-}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
H=$(hostname)
"$REPO/scripts/wlm/install.sh"
# A run killed before its down.sh left its daemons: stop them (their pids are in its DIR).
mkdir -p /var/tmp/pjw-wlm
if [ -r /var/tmp/pjw-wlm/slurm.dir ]; then
  old=$(cat /var/tmp/pjw-wlm/slurm.dir)
  [ "$old" != "$D" ] && [ -r "$old/pids" ] && "$REPO/scripts/wlm/down.sh" "$old"
fi
echo "$D" > /var/tmp/pjw-wlm/slurm.dir
mkdir -p "$D"/state "$D"/spool "$D"/log
: > "$D/pids"

# munge: a private daemon, socket and key in DIR (munged insists on its owner and modes).
install -d -m 0711 -o munge -g munge "$D/munge"
dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
chown munge:munge "$D/munge/munge.key"; chmod 0400 "$D/munge/munge.key"
setpriv --reuid munge --regid munge --init-groups \
  munged -F --socket="$D/munge/munge.sock" --key-file="$D/munge/munge.key" \
    --pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" \
    --seed-file="$D/munge/munged.seed" > "$D/log/munged.out" 2>&1 &
echo "munged $!" >> "$D/pids"
for _ in $(seq 100); do [ -S "$D/munge/munge.sock" ] && break; sleep 0.1; done
[ -S "$D/munge/munge.sock" ] || { echo "slurm-up: munged did not start" >&2; cat "$D/log/munged.out" >&2; exit 1; }

for s in prolog epilog task-prolog; do
  printf '#!/bin/sh\nPJW_WLM_ENV=%s exec %s/packaging/slurm/pjw-%s.sh\n' "$ENVF" "$REPO" "$s" > "$D/$s.sh"
  chmod 755 "$D/$s.sh"
done

# The SPANK plugin, built from this tree (a no-op when it is up to date).
SPANK=${PJW_SPANK:-required}
SOCK=$(sed -n 's/^PJW_SOCKET=//p' "$ENVF" | tail -n 1)
case $SPANK in
  required|optional)
    make -C "$REPO" --no-print-directory -s spank >/dev/null
    [ -f "$REPO/target/spank/pjw_spank.so" ] || { echo "slurm-up: the SPANK plugin was not built (make spank)" >&2; exit 1; }
    echo "$SPANK $REPO/target/spank/pjw_spank.so socket=${SOCK:-/run/pjw/pjw.sock}" > "$D/plugstack.conf" ;;
  0) echo "# PJW_SPANK=0: no plugin; tasks are adopted after exec" > "$D/plugstack.conf" ;;
  *) echo "slurm-up: PJW_SPANK=$SPANK is not required, optional or 0" >&2; exit 1 ;;
esac

MEM=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
CPUS=$(nproc --all)
# Fake GPUs: gres.conf File= lines in the order of their numbers, which is the gres index
# SLURM_JOB_GPUS names (and the order pjw's [gpus] devices must be declared in).
GRES_TYPES= NODE_GRES=
rm -f "$D/gres.conf"
if [ -n "$GPU_DIR" ]; then
  n=0
  for f in $(ls "$GPU_DIR" | sed -n 's/^nvidia\([0-9][0-9]*\)$/\1/p' | sort -n); do
    [ -c "$GPU_DIR/nvidia$f" ] || { echo "slurm-up: $GPU_DIR/nvidia$f is not a character device" >&2; exit 1; }
    echo "Name=gpu File=$GPU_DIR/nvidia$f" >> "$D/gres.conf"
    n=$((n+1))
  done
  [ $n -gt 0 ] || { echo "slurm-up: no nvidiaN devices in $GPU_DIR" >&2; exit 1; }
  GRES_TYPES="GresTypes=gpu
TaskProlog=$D/task-prolog.sh"
  NODE_GRES="Gres=gpu:$n"
fi
# The recommended pjw settings (packaging/slurm/slurm.conf): Slurm tracks processes by
# parentage and sets no affinity and no cgroups of its own, so pjw's cpusets are the only ones.
cat > "$D/slurm.conf" <<EOC
ClusterName=pjwtest
SlurmctldHost=$H
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.sock
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
Prolog=$D/prolog.sh
$([ "${PJW_EPILOG:-1}" = 0 ] || echo "Epilog=$D/epilog.sh")
PrologFlags=Alloc
PlugStackConfig=$D/plugstack.conf
ReturnToService=2
MpiDefault=none
$GRES_TYPES
NodeName=$H CPUs=$CPUS RealMemory=$((MEM-100)) $NODE_GRES State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOC
export SLURM_CONF="$D/slurm.conf"
cd "$D"
slurmctld -D -i > log/slurmctld.out 2>&1 &
echo "slurmctld $!" >> "$D/pids"
slurmd -D > log/slurmd.out 2>&1 &
echo "slurmd $!" >> "$D/pids"
for _ in $(seq 600); do
  sinfo -h -o %T 2>/dev/null | grep -q '^idle' && exit 0
  sleep 0.1
done
echo "slurm-up: the node did not become idle within 60 s" >&2
tail -5 log/slurmctld.log log/slurmd.log >&2 || true
exit 1
