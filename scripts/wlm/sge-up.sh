#!/usr/bin/env bash
# Start a single-host Son of Grid Engine for the live tests: sge_qmaster and sge_execd of the
# Debian packages' `default` cell, in the foreground (SGE_ND) as children of this script's
# caller's session, their pids in DIR/pids for down.sh. The cell's global config is saved to
# DIR/orig/global and restored by down.sh; shepherd_cmd is DIR/shepherd.sh, which runs
# pjw's wrapper (packaging/sge) with PJW_WLM_ENV. Clients source DIR/sge.env.
#
#   sge-up.sh DIR PJW_WLM_ENV_FILE
set -euo pipefail
D=${1:?usage: sge-up.sh DIR PJW_WLM_ENV_FILE}
ENVF=${2:?usage: sge-up.sh DIR PJW_WLM_ENV_FILE}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
H=$(hostname)
"$REPO/scripts/wlm/install.sh"
# A run killed before its down.sh left its daemons: stop them (their pids are in its DIR).
mkdir -p /var/tmp/pjw-wlm
if [ -r /var/tmp/pjw-wlm/sge.dir ]; then
  old=$(cat /var/tmp/pjw-wlm/sge.dir)
  [ "$old" != "$D" ] && [ -r "$old/pids" ] && "$REPO/scripts/wlm/down.sh" "$old"
fi
echo "$D" > /var/tmp/pjw-wlm/sge.dir
mkdir -p "$D/log"
touch "$D/pids"
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
printf 'export SGE_ROOT=%s SGE_CELL=%s\n' "$SGE_ROOT" "$SGE_CELL" > "$D/sge.env"
# 127.0.0.1 reverse-resolves to "localhost", not $H: commlib refuses the connection unless
# the two are aliases.
echo "$H localhost" > "$SGE_ROOT/$SGE_CELL/common/host_aliases"
if qconf -sh >/dev/null 2>&1; then
  echo "sge-up: a qmaster already answers for cell $SGE_CELL; not ours to use" >&2
  exit 1
fi
SGE_ND=1 /usr/sbin/sge_qmaster > "$D/log/qmaster.out" 2>&1 &
echo "sge_qmaster $!" >> "$D/pids"
for _ in $(seq 300); do qconf -sh >/dev/null 2>&1 && break; sleep 0.1; done
qconf -sh >/dev/null 2>&1 || { echo "sge-up: qmaster did not come up" >&2; cat "$D/log/qmaster.out" >&2; exit 1; }

printf '#!/bin/sh\nPJW_WLM_ENV=%s exec %s/packaging/sge/pjw-shepherd.sh "$@"\n' "$ENVF" "$REPO" > "$D/shepherd.sh"
chmod 755 "$D/shepherd.sh"
chmod o+x "$D"

qconf -ah "$H" >/dev/null 2>&1 || true
qconf -as "$H" >/dev/null 2>&1 || true
W="$D/cfg"; mkdir -p "$W"
# What down.sh restores; a shepherd_cmd left by an earlier run that was killed is dropped.
mkdir -p "$D/orig"
qconf -sconf | awk '$1 == "shepherd_cmd" && $2 != "none" && system("test -x " $2) != 0 { $0 = "shepherd_cmd none" } { print }' > "$D/orig/global"
mkdir -p "$W/g"
sed -e 's/^min_uid .*/min_uid 0/' -e 's/^min_gid .*/min_gid 0/' \
    -e "s#^shepherd_cmd .*#shepherd_cmd $D/shepherd.sh#" "$D/orig/global" > "$W/g/global"
grep -q '^shepherd_cmd' "$W/g/global" || echo "shepherd_cmd $D/shepherd.sh" >> "$W/g/global"
qconf -Mconf "$W/g/global" >/dev/null   # the file's name must be the config's name
qconf -ssconf | sed -e 's/^schedule_interval .*/schedule_interval 0:0:1/' \
  -e 's/^flush_submit_sec .*/flush_submit_sec 1/' -e 's/^flush_finish_sec .*/flush_finish_sec 1/' > "$W/sched"
qconf -Msconf "$W/sched" >/dev/null
printf 'group_name @allhosts\nhostlist %s\n' "$H" > "$W/hg"
qconf -Mhgrp "$W/hg" >/dev/null 2>&1 || qconf -Ahgrp "$W/hg" >/dev/null
printf 'pe_name smp\nslots 999\nuser_lists NONE\nxuser_lists NONE\nstart_proc_args NONE\nstop_proc_args NONE\nallocation_rule $pe_slots\ncontrol_slaves FALSE\njob_is_first_task TRUE\nurgency_slots min\naccounting_summary FALSE\nqsort_args NONE\n' > "$W/pe"
qconf -Mp "$W/pe" >/dev/null 2>&1 || qconf -Ap "$W/pe" >/dev/null
SLOTS=$(nproc --all)
{ EDITOR=cat qconf -aq tmpl 2>/dev/null || true; } | sed -e 's/^qname .*/qname all.q/' -e 's/^hostlist .*/hostlist @allhosts/' \
  -e "s/^slots .*/slots $SLOTS/" -e 's/^load_thresholds .*/load_thresholds NONE/' -e 's/^pe_list .*/pe_list smp/' \
  -e 's/^shell .*/shell \/bin\/sh/' > "$W/q"
qconf -Mq "$W/q" >/dev/null 2>&1 || qconf -Aq "$W/q" >/dev/null
qmod -cq all.q >/dev/null 2>&1 || true

# execd reads shepherd_cmd only when it starts: configure first, start it last.
SGE_ND=1 /usr/sbin/sge_execd > "$D/log/execd.out" 2>&1 &
echo "sge_execd $!" >> "$D/pids"
for _ in $(seq 300); do
  qstat -f -q all.q 2>/dev/null | grep -q "all.q@" && ! qstat -f -q all.q 2>/dev/null | grep -q ' au\| u ' && exit 0
  sleep 0.1
done
echo "sge-up: execd did not report within 30 s" >&2
qstat -f >&2 || true; cat "$D/log/execd.out" >&2 || true
exit 1
