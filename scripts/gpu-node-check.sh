#!/usr/bin/env bash
# On a node with real NVIDIA GPUs, check what the test suite can only fake: discovery from the
# real sysfs and /dev, the device fence with a real driver, and NVML sampling of a busy GPU.
# Starts a private daemon (socket and state in a temp dir, cgroups below this script's own
# cgroup), runs a few jobs, prints one "ok:"/"FAIL:"/"note:" line per check, leaves nothing.
#
#   scripts/gpu-node-check.sh [PJW] [OUT_DIR]
#
# PJW defaults to target/release/pjw (copied elsewhere, pjw-full goes beside it or in
# ../lib/pjw: the launch front execs it for every subcommand but run); OUT_DIR (default: a temp
# dir) receives the daemon's log, pjw topology, status/report/metrics captures and a summary. Needs root, python3 with torch
# (for the busy-GPU job; without it the NVML utilisation check is skipped), nvidia-smi.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PJW=${1:-$root/target/release/pjw}
"$PJW" --version >/dev/null 2>&1 || { echo "gpu-node-check: $PJW --version failed (a build, or pjw-full beside it or in ../lib/pjw?)" >&2; exit 1; }
OUT=${2:-$(mktemp -d /tmp/pjw-gpucheck-out.XXXXXX)}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/pjw-gpucheck.XXXXXX)
sub="pjw-gpucheck-$$"
# The cgroup parent: below this script's own cgroup by default; PJW_CHECK_PARENT=/NAME (a path
# from each hierarchy's root) where this cgroup's parent does not delegate cpuset (pure v2
# containers often don't), so that the daemon enables the controllers from the root down.
PARENT=${PJW_CHECK_PARENT:-self/$sub}
export PJW_SOCKET=$W/pjw.sock
fails=0
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
ok() { say "ok: $*"; }
bad() { say "FAIL: $*"; fails=$((fails + 1)); }
note() { say "note: $*"; }
daemon_pid=""
cleanup() {
  set +e
  if [ -n "$daemon_pid" ]; then
    for j in $("$PJW" status --json 2>/dev/null | sed -n 's/.*"id": "\([^"]*\)".*/\1/p'); do
      "$PJW" kill "$j" >/dev/null 2>&1
    done
    sleep 0.5
    kill -TERM "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null
  fi
  cut -d: -f3- /proc/self/cgroup | sort -u | while read -r path; do
    for mnt in /sys/fs/cgroup /sys/fs/cgroup/*; do
      d="$mnt${path%/}/$sub"
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
  done
  case $PARENT in /*) for mnt in /sys/fs/cgroup /sys/fs/cgroup/*; do
    [ -d "$mnt$PARENT" ] && find "$mnt$PARENT" -depth -type d -exec rmdir {} \; 2>/dev/null; done ;; esac
  rm -rf "$W"
}
trap cleanup EXIT

{
  echo "== uname"; uname -a
  echo "== nvidia-smi -L"; nvidia-smi -L 2>&1
  echo "== cgroup mounts"; grep cgroup /proc/self/mountinfo
  echo "== /proc/self/cgroup"; cat /proc/self/cgroup
  echo "== root cgroup.controllers / subtree_control"; cat /sys/fs/cgroup/cgroup.controllers /sys/fs/cgroup/cgroup.subtree_control 2>&1
  echo "== own parent's controllers"; p=$(dirname "/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup | head -1)"); cat "$p/cgroup.controllers" "$p/cgroup.subtree_control" 2>&1
  echo "== /dev/nvidia*"; ls -l /dev/nvidia* 2>&1
  echo "== display-class PCI functions"
  for d in /sys/bus/pci/devices/*; do
    case $(cat "$d/class" 2>/dev/null) in 0x03*) echo "$d $(cat "$d/vendor") $(cat "$d/class") numa=$(cat "$d/numa_node" 2>/dev/null) cpus=$(cat "$d/local_cpulist" 2>/dev/null)";; esac
  done
  echo "== /proc/driver/nvidia/gpus"; ls /proc/driver/nvidia/gpus 2>&1
  echo "== libnvidia-ml"; ldconfig -p | grep -i nvidia-ml
  echo "== nproc"; nproc; grep Cpus_allowed_list /proc/self/status
} > "$OUT/env.txt" 2>&1

[ "$(id -u)" = 0 ] || { bad "must run as root"; exit 1; }
[ -x "$PJW" ] || { bad "no pjw binary at $PJW"; exit 1; }

# 1. Discovery.
"$PJW" topology > "$OUT/topology.txt" 2>&1
if grep -qi 'gpu' "$OUT/topology.txt"; then ok "pjw topology lists GPUs: $(grep -i gpu "$OUT/topology.txt" | head -3 | tr '\n' ' ')"
else bad "pjw topology lists no GPU (see topology.txt, env.txt)"; fi

# 2. A private daemon with profiles every second.
cat > "$W/pjw.toml" <<EOF
[profile]
interval = 1
[metrics]
listen = "127.0.0.1:19810"
EOF
"$PJW" daemon --config "$W/pjw.toml" --socket "$PJW_SOCKET" --state-dir "$W/state" \
  --cgroup-parent "$PARENT" --log-format text > "$OUT/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do "$PJW" status >/dev/null 2>&1 && break; sleep 0.1; done
if ! "$PJW" status >/dev/null 2>&1; then bad "the daemon did not start: $(tail -5 "$OUT/daemon.log" | tr '\n' ' ')"; exit 1; fi
sleep 1
grep -m1 'gpus found' "$OUT/daemon.log" >/dev/null && ok "daemon: $(grep -m1 -o 'gpus found.*' "$OUT/daemon.log")" || bad "daemon logged no 'gpus found'"
if grep -q 'NVML not available' "$OUT/daemon.log"; then bad "daemon: $(grep -m1 'NVML not available' "$OUT/daemon.log")"; else ok "daemon: NVML loaded (no 'NVML not available')"; fi
"$PJW" status > "$OUT/status-idle.txt" 2>&1

# 3. The fence: a job without GPUs cannot open the GPU; a job with one can, and sees one.
dev=$(ls /dev/nvidia[0-9]* 2>/dev/null | head -1)
if [ -n "$dev" ]; then
  out=$("$PJW" run -q -c 1 -- sh -c "exec 3<$dev && echo opened" 2>&1); rc=$?
  if [ $rc != 0 ] && printf '%s' "$out" | grep -qi 'not permitted'; then ok "a CPU-only job is refused $dev: $out"
  else bad "a CPU-only job opening $dev: rc=$rc $out"; fi
  out=$("$PJW" run -q -c 1 --gpus 1 -- nvidia-smi -L 2>&1); rc=$?
  if [ $rc = 0 ] && [ "$(printf '%s\n' "$out" | grep -c '^GPU ')" -ge 1 ]; then ok "a 1-GPU job runs nvidia-smi: $out"
  else bad "a 1-GPU job's nvidia-smi: rc=$rc $out"; fi
  out=$("$PJW" run -q -c 1 -- nvidia-smi -L 2>&1); rc=$?
  note "a CPU-only job's nvidia-smi -L: rc=$rc $(printf '%s' "$out" | head -2 | tr '\n' ' ')"
  out=$("$PJW" run -q -c 1 --gpus 1 -- env 2>&1 | grep -E '^(CUDA_VISIBLE_DEVICES|PJW_GPUS|CUDA_DEVICE_ORDER)=' | tr '\n' ' ')
  note "a 1-GPU job's variables: $out"
else
  bad "no /dev/nvidiaN on this node"
fi

# 4. NVML: a busy GPU job's utilisation and memory in status, metrics and its report.
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  cat > "$W/busy.py" <<'EOF'
import time, torch
a = torch.randn(8192, 8192, device="cuda"); b = torch.randn(8192, 8192, device="cuda")
keep = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")  # 4 GiB held
t = time.time()
while time.time() - t < 12:
    c = a @ b
torch.cuda.synchronize(); print("busy done")
EOF
  "$PJW" run -q -c 2 --gpus 1 -n gpubusy -- python3 "$W/busy.py" > "$OUT/busy.txt" 2>&1 &
  bp=$!
  sleep 8
  "$PJW" status > "$OUT/status-busy.txt" 2>&1
  "$PJW" status --json > "$OUT/status-busy.json" 2>&1
  grep -iE 'util|gpu' "$OUT/status-busy.txt" | head -5 > "$OUT/status-busy-gpu.txt"
  if grep -Eq '"gpu_util": *[1-9]' "$OUT/status-busy.json"; then ok "status shows the busy GPU's NVML readings: $(grep -Eo '"gpu_(util|mem)": *[0-9.]+' "$OUT/status-busy.json" | head -2 | tr '\n' ' ')"
  else bad "status shows no GPU utilisation above 0 while busy (status-busy.json)"; fi
  if command -v curl >/dev/null; then curl -s http://127.0.0.1:19810/metrics > "$OUT/metrics-busy.txt"
  else python3 -c 'import urllib.request;print(urllib.request.urlopen("http://127.0.0.1:19810/metrics").read().decode())' > "$OUT/metrics-busy.txt" 2>&1; fi
  grep -i gpu "$OUT/metrics-busy.txt" | grep -v '^#' | head -6 | sed 's/^/metrics: /' | tee -a "$OUT/summary.txt"
  wait $bp; rc=$?
  [ $rc = 0 ] && ok "the busy GPU job ran (torch in pjw's fence)" || bad "the busy GPU job: rc=$rc $(tail -3 "$OUT/busy.txt")"
  sleep 2
  "$PJW" report -n gpubusy > "$OUT/report-busy.txt" 2>&1
  "$PJW" report -n gpubusy --format json > "$OUT/report-busy.json" 2>&1
  "$PJW" report -n gpubusy --series --plot "$OUT/gpubusy.png" > "$OUT/report-series.txt" 2>&1
  grep -i gpu "$OUT/report-busy.txt" | head -5 | sed 's/^/report: /' | tee -a "$OUT/summary.txt"
  if grep -Eq '"gpu_util_mean": *[1-9]' "$OUT/report-busy.json"; then ok "the report has the job's GPU utilisation: $(grep -Eo '"gpu_(util_mean|util_max|mem[a-z_]*)": *[0-9.]+' "$OUT/report-busy.json" | tr '\n' ' ')"
  else bad "the report has no GPU utilisation (report-busy.json)"; fi
else
  note "python3 with torch and a GPU is not here: the busy-GPU NVML check did not run"
fi

echo "== daemon log (GPU and NVML lines)" >> "$OUT/summary.txt"
grep -iE 'gpu|nvml|error|warn' "$OUT/daemon.log" | head -40 >> "$OUT/summary.txt"
say "gpu-node-check: $fails failed"
exit $((fails > 0))
