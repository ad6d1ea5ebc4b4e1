#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/usr/local/lib/pjw/slurm/pjw-prolog.sh, PrologFlags=Alloc).
# slurmd runs it as root on the node, before the job's first task, with SLURM_JOB_ID,
# SLURM_JOB_USER, SLURMD_NODENAME… but no PATH and no word of the job's CPUs: `pjw slurm
# prolog` asks `scontrol show job -d` and registers the job with the pjw daemon, which gives it
# its own CPU set and adopts the processes slurmstepd starts for it (SLURM_JOB_ID).
# A non-zero exit makes Slurm drain the node and requeue the job: pjw could not jail it.
# /etc/default/pjw (or $PJW_WLM_ENV) may set PJW (the binary) and PJW_SOCKET.
env_file=${PJW_WLM_ENV:-/etc/default/pjw}
# shellcheck disable=SC1090
[ -r "$env_file" ] && . "$env_file"
export PJW_SOCKET
exec "${PJW:-/usr/local/bin/pjw}" slurm prolog
