#!/bin/sh
# In the systemd guest (optional step `bench-slurm`: VM_SYSTEMD_CPUS=2 vm/systemd/run.sh
# bench-slurm): the isolation and turnaround scenarios with Slurm's own confinement live beside
# plain, taskset, FIFO and pjw in the same run (issue 14). On the host Slurm cannot use its cgroup
# plugins (it would make cgroups outside the bench's own), so its row there is task/affinity only;
# here systemd is PID 1 on pure cgroup v2 and Slurm 22.05's cgroup/v2 plugin works.
#
# Slurm comes from Debian 12's packages, shipped by run.sh into /var/tmp/pjw-slurm-debs (resolved
# against the image's own package list, vm/systemd/slurm-debs.sh) and installed into this run's
# throw-away overlay: the image itself stays as CI builds it. Started by its own systemd units
# (slurmd.service has Delegate=yes), a single node with the guest's CPUs:
#   slurm.conf   SelectType=select/cons_tres (CR_Core_Memory), TaskPlugin=task/cgroup,task/affinity,
#                ProctrackType=proctrack/cgroup
#   cgroup.conf  CgroupPlugin=cgroup/v2, ConstrainCores=yes
# Before the bench, a check that Slurm really confines: two jobs at once, each printing its
# /proc/self/cgroup (below slurmd's <node>_slurmstepd.scope), its cgroup's cpuset.cpus.effective and its affinity;
# the two must be on different CPUs. The bench's Slurm row prints the same probe (isolation.sh).
# The results file goes to the shared tree's bench/results/<time>-isolation-turnaround.md.
# usage: guest-bench-slurm.sh <source-dir>
src=${1:?usage: guest-bench-slurm.sh <source-dir>}
. "$src/vm/systemd/guest-lib.sh"
session_check
cd "$src" || { fail "no source tree at $src"; echo "=== done"; exit 1; }
debs=/var/tmp/pjw-slurm-debs

# --- install (offline: the guest reaches no network) ---
if command -v slurmd >/dev/null; then
  ok "Slurm already installed: $(slurmd -V)"
elif [ -n "$(ls "$debs"/*.deb 2>/dev/null)" ]; then
  # No daemon starts from a postinst: the units are started below with this run's config.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d
  s=$(date +%s)
  if DEBIAN_FRONTEND=noninteractive dpkg -i "$debs"/*.deb > /tmp/pjw-slurm-dpkg.log 2>&1; then
    ok "Slurm installed from $(ls "$debs"/*.deb | wc -l) Debian packages in $(( $(date +%s) - s )) s: $(slurmd -V)"
  else
    fail "dpkg -i of the Slurm packages failed: $(tail -5 /tmp/pjw-slurm-dpkg.log | tr '\n' ' ')"
  fi
  rm -f /usr/sbin/policy-rc.d
else
  fail "no Slurm packages in $debs (run.sh ships them for this step)"
fi
command -v slurmd >/dev/null || { echo "=== done"; exit 1; }

# --- configure and start (munge, slurmctld, slurmd by their units) ---
[ -s /etc/munge/munge.key ] || su munge -s /bin/sh -c 'mungekey -c'
node=$(slurmd -C | head -1 | sed 's/ UpTime=.*//')
mem=$(echo "$node" | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
node=$(echo "$node" | sed "s/RealMemory=[0-9]*/RealMemory=$((mem - 200))/")
mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=pjwguest
SlurmctldHost=$(hostname)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MpiDefault=none
$node State=UNKNOWN
PartitionName=debug Nodes=$(hostname) Default=YES MaxTime=INFINITE State=UP
EOF
cat > /etc/slurm/cgroup.conf <<'EOF'
CgroupPlugin=cgroup/v2
ConstrainCores=yes
EOF
echo "slurm.conf node: $node"
if systemctl start munge.service slurmctld.service slurmd.service; then
  ok "munge, slurmctld and slurmd started by systemd"
else
  fail "systemctl start munge slurmctld slurmd failed"
fi
export SLURM_CONF=/etc/slurm/slurm.conf
i=0
while [ "$i" -lt 120 ] && ! sinfo -h -o %T 2>/dev/null | grep -q '^idle'; do sleep 1; i=$((i + 1)); done
if sinfo -h -o %T 2>/dev/null | grep -q '^idle'; then
  ok "the node is idle in Slurm after $i s ($(scontrol show config | awk -F' *= *' '$1 == "TaskPlugin" || $1 == "ProctrackType" || $1 == "SelectType" {printf "%s=%s ", $1, $2}'))"
else
  fail "the node did not become idle within 120 s: $(sinfo -h 2>&1 | head -2 | tr '\n' ' ')"
  tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log 2>/dev/null | sed 's/^/  | /'
fi
echo "slurmd's cgroup: $(cgroup_of "$(systemctl show -p MainPID --value slurmd.service)")"

# --- does Slurm confine? Two one-CPU jobs at once, each reporting where it is ---
probe='cg=$(sed -n "s/^0:://p" /proc/self/cgroup); echo "$SLURM_JOB_ID cgroup=$cg cpuset.cpus.effective=$(cat /sys/fs/cgroup$cg/cpuset.cpus.effective 2>/dev/null || echo -) affinity=$(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"; sleep 3'
timeout 120 srun -n1 -c1 --cpu-bind=cores sh -c "$probe" > /tmp/pjw-probe.1 2>&1 &
p1=$!
timeout 120 srun -n1 -c1 --cpu-bind=cores sh -c "$probe" > /tmp/pjw-probe.2 2>&1 &
p2=$!
wait "$p1"; wait "$p2"
sed 's/^/slurm probe: /' /tmp/pjw-probe.1 /tmp/pjw-probe.2
c1=$(sed -n 's/.*cpuset.cpus.effective=\([^ ]*\).*/\1/p' /tmp/pjw-probe.1)
c2=$(sed -n 's/.*cpuset.cpus.effective=\([^ ]*\).*/\1/p' /tmp/pjw-probe.2)
case "$(cat /tmp/pjw-probe.1 /tmp/pjw-probe.2)" in
  *cgroup=/system.slice/*_slurmstepd.scope/job_*cgroup=/system.slice/*_slurmstepd.scope/job_*)
    ok "both srun jobs run in their own cgroups below slurmd's <node>_slurmstepd.scope" ;;
  *) fail "the srun jobs are not in Slurm's job cgroups" ;;
esac
if [ -n "$c1" ] && [ -n "$c2" ] && [ "$c1" != - ] && [ "$c1" != "$c2" ] \
   && [ "$(cat /sys/devices/system/cpu/online)" != "$c1" ]; then
  ok "Slurm's cpusets fence the two jobs apart (cpuset.cpus.effective $c1 and $c2)"
else
  fail "the two jobs' cpusets do not separate them ($c1 / $c2)"
fi

# --- the bench: isolation and turnaround with this Slurm live ---
log=/tmp/pjw-guest-bench-slurm.log
BENCH_NO_BUILD=1 BENCH_SAVE=1 BENCH_SLURM_CONF=/etc/slurm/slurm.conf \
  timeout 3000 bench/run.sh ${VM_BENCH_SCENARIOS:-isolation turnaround} > "$log" 2>&1; rc=$?
sed 's/^/  | /' "$log"
if [ "$rc" = 0 ]; then ok "bench/run.sh ${VM_BENCH_SCENARIOS:-isolation turnaround} ran to the end"; else fail "bench/run.sh exited $rc"; fi
file=$(sed -n 's/^wrote //p' "$log" | tail -1)
if [ -n "$file" ] && [ -f "$file" ]; then ok "results file $file"; else fail "no results file written"; fi
# Every Slurm row of the scenarios that ran must be measured, with task/cgroup where the row names
# its plugins (isolation, sysbench, openmp).
rows=$(grep '^| [^|]*Slurm' "$log" | grep -v '^| launch' || true)
if [ -z "$rows" ]; then
  fail "no Slurm row in the results"
else
  echo "$rows" | while IFS= read -r row; do
    what=$(echo "$row" | cut -d'|' -f2 | sed 's/^ *//; s/ *$//')
    case $row in
      *"not measured"*) fail "Slurm row not measured: $what: $(echo "$row" | cut -d'|' -f3)" ;;
      *task/none*|*"(task/affinity)"*) fail "the Slurm row is not task/cgroup's: $what" ;;
      *) ok "Slurm measured beside pjw: $what: $(echo "$row" | cut -d'|' -f3 | cut -c1-160)" ;;
    esac
  done
fi

systemctl stop slurmd.service slurmctld.service munge.service
# Slurm's own scope (<node>_slurmstepd.scope, the node being pjw-systemd) outlives slurmd by design.
left=$(stray_pjw_cgroups | grep -v '/system\.slice/[^/]*_slurmstepd\.scope$' || true)
if [ -z "$left" ]; then ok "the bench left no pjw-* cgroup"; else fail "the bench left cgroups: $(echo "$left" | tr '\n' ' ')"; fi
left=$(find /sys/fs/cgroup/system.slice/*_slurmstepd.scope -mindepth 1 -type d -name 'job_*' 2>/dev/null)
if [ -z "$left" ]; then ok "Slurm left no job cgroup"; else fail "Slurm left job cgroups: $(echo "$left" | tr '\n' ' ')"; fi
echo "=== done"
