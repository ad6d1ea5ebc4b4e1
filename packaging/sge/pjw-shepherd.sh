#!/bin/sh
# Grid Engine shepherd_cmd wrapper (qconf -mconf: shepherd_cmd /usr/local/lib/pjw/sge/pjw-shepherd.sh).
# sge_execd runs it as root in the job's spool directory (active_jobs/<job>.<task>/), with no
# job variables in its environment: `pjw sge shepherd` reads ./config (job_id, job_owner,
# pe_slots) and ./environment, registers the job with the pjw daemon, joins the job's cgroups
# and execs sge_shepherd in this same process, so the shepherd and the job it starts (as its
# owner) run in the job's CPU set and the job ends in pjw when they are gone.
env_file=${PJW_WLM_ENV:-/etc/default/pjw}
# shellcheck disable=SC1090
[ -r "$env_file" ] && . "$env_file"
export PJW_SOCKET
exec "${PJW:-/usr/local/bin/pjw}" sge shepherd -- "${SGE_SHEPHERD:-/usr/lib/gridengine/sge_shepherd}" "$@"
