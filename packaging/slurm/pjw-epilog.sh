#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/usr/local/lib/pjw/slurm/pjw-epilog.sh).
# slurmd runs it as root after the job: `pjw slurm epilog` ends the job in pjw (kills what is
# left of it, removes its cgroups) and returns once its cgroups are gone. A job pjw does not
# know is not an error.
env_file=${PJW_WLM_ENV:-/etc/default/pjw}
# shellcheck disable=SC1090
[ -r "$env_file" ] && . "$env_file"
export PJW_SOCKET
exec "${PJW:-/usr/local/bin/pjw}" slurm epilog
