#!/bin/sh
# Slurm TaskProlog (slurm.conf: TaskProlog=/usr/local/lib/pjw/slurm/pjw-task-prolog.sh), for
# nodes with GPUs. slurmstepd runs it as the job's user before each task and sets the variables
# it prints (`export NAME=VALUE`): `pjw slurm task-prolog` prints the GPU variables pjw gives
# the job (CUDA_VISIBLE_DEVICES counted from 0 inside pjw's device fence, PJW_GPUS, …), which
# replace Slurm's gres index. It never fails the task; without GPUs it prints nothing.
# /etc/default/pjw (or $PJW_WLM_ENV) may set PJW (the binary) and PJW_SOCKET.
env_file=${PJW_WLM_ENV:-/etc/default/pjw}
# shellcheck disable=SC1090
[ -r "$env_file" ] && . "$env_file"
export PJW_SOCKET
exec "${PJW:-/usr/local/bin/pjw}" slurm task-prolog
