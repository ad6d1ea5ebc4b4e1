#!/bin/sh
# The systemd guest tier (make test-vm-systemd): boot the Debian 12 guest of build-image.sh
# (systemd as PID 1, pure cgroup v2, 16 vCPUs in two NUMA nodes) and, each step over its own ssh
# login as root (a logind session-N.scope), run the guest-side checks of vm/systemd/guest-*.sh:
#   session  the guest is what the tier claims; the shell is in a logind session scope
#   demo     `make demo` runs to the end and leaves nothing behind
#   tests    the root tests of vm/guest-tests (the host's build, target/debug/deps)
#   service  the packaged service: `make install`, enable --now, two users' jobs through
#            daemon-reload, restart, stop + start (same CPUs, own exit statuses, nothing left);
#            ssh logins through the shipped PAM snippet over the real sshd (guest-ssh.sh): each
#            user's session in their own job (cgroup, CPUs; what it leaves dies with the job),
#            root never adopted; without a job outside, then refused after a reload with
#            login_without_job = "refuse"
#   reserve  a slice with AllowedCPUs=: pjw's pool follows it
#   deb      the Debian package of make deb (built on the host after the release build): apt
#            install ./pjw_*.deb, the service active, pjw check, a user's pjw run, man pjw-run,
#            bash completion, systemctl reload, an upgrade with a job running, then purge leaves
#            nothing behind (75 s in the guest after service and reserve, and 15 s to build
#            the package; measured 2026-11-25)
#   bench    (optional) the launch benchmark with systemd as PID 1: pjw, bare fork/exec and
#            `systemd-run --scope` side by side; a results file in bench/results
#   bench-numa (optional, make bench-vm-numa) the NUMA-spanning thread balancing bench
#            (bench/scenarios/bind-numa.sh) on the guest's two nodes; a results file in
#            bench/results, with the host's load sampled every 2 s beside it (the guest's own
#            load says nothing of the emulator's host)
#   bench-slurm (optional; best with VM_SYSTEMD_CPUS=2, the bench's 2-CPU shape) the isolation
#            and turnaround benchmarks beside a live Slurm with task/cgroup, proctrack/cgroup,
#            cgroup/v2 and cons_tres: Slurm's Debian packages (vm/systemd/slurm-debs.sh) are
#            installed into this run's overlay only, never into the image; a results file in
#            bench/results
# Each check prints "ok: ..." or "FAIL: ..."; the tests print libtest's counts. The tier ends
# with "VM-systemd-v2: N passed, M failed, K skipped" and exits non-zero on any failure, a
# timeout or a missing summary.
#
# usage: vm/systemd/run.sh [step ...]     (default: session demo tests service reserve deb)
# Env: VM_WORK (default /var/tmp/pjw-vm), VM_SYSTEMD_TIMEOUT (s, the whole guest, default 5400),
#      VM_DEMO_REPS (the demo's rounds in the guest, default 2: its timings under emulation
#      are not judged, only that it runs to the end and cleans up),
#      VM_HOST_BUILD=0 (skip the host's build: debugging this script only),
#      VM_BOOT_TIMEOUT (s, until ssh answers, default 600), VM_STEP_TIMEOUT (s per step, 1800),
#      VM_SYSTEMD_CPUS (default 16: 2 sockets x 4 cores x 2 threads in 2 NUMA nodes, what the
#      session step checks; any other N: one socket of N single-thread cores, one NUMA node),
#      VM_BENCH_SCENARIOS (bench-slurm's scenarios, default "isolation turnaround"),
#      VM_TESTS (the tests step runs only these executables of vm/guest-tests, e.g. "hpc_tasks":
#      to check one test file in the guest; a full tier runs them all).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
W=${VM_WORK:-/var/tmp/pjw-vm}/systemd
steps=${*:-session demo tests service reserve deb}
label=VM-systemd-v2
total_limit=${VM_SYSTEMD_TIMEOUT:-5400}   # not VM_TIMEOUT: the Makefile exports that for the busybox tier
boot_limit=${VM_BOOT_TIMEOUT:-600}
step_limit=${VM_STEP_TIMEOUT:-1800}

"$here/build-image.sh"

# The host builds everything the guest runs; cargo in the guest must find it fresh.
cd "$src"
# Steps that run only benchmarks need the release binaries alone.
only_bench=1
for st in $steps; do case $st in session|bench|bench-numa|bench-slurm) ;; *) only_bench=0 ;; esac; done
if [ "${VM_HOST_BUILD:-1}" = 1 ] && [ "$only_bench" = 1 ]; then
echo "$label: building on the host (release binaries)"
cargo build --release --workspace --bins
elif [ "${VM_HOST_BUILD:-1}" = 1 ]; then
echo "$label: building on the host (release binaries, test executables)"
cargo build --release --workspace --bins
# Debug binaries too (pjw-wl is another package's: cargo test --no-run does not build it, and the
# tests run it from target/debug), as make test-host's build step does.
cargo build --workspace --bins
cargo test --workspace --no-run --message-format=json > "$W/tests.json.tmp"
mv "$W/tests.json.tmp" "$W/tests.json"
case " $steps " in *" deb "*) scripts/build-deb.sh ;; esac
fi   # VM_HOST_BUILD=0: reuse the last build (only to debug this script)

[ -f "$W/tests.json" ] || : > "$W/tests.json"
run=$W/runs/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$run"
ls "$W/runs" | sort | head -n -5 | while read -r old; do rm -rf "${W:?}/runs/$old"; done   # keep 5
# The test executables, like vm/build.sh collects them (here the ordinary dynamic ones).
# Only the root tests vm/guest-tests gives this tier: the pure ones run on the host tier.
python3 - "$W/tests.json" "$here/../guest-tests" > "$run/tests.list" <<'PY'
import json, os, sys
want = {f[0] for f in (l.split() for l in open(sys.argv[2]) if not l.startswith("#")) if f and "systemd" in f[1:]}
only = os.environ.get("VM_TESTS", "").split()
if only:
    want &= set(only)
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if (m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test")
            and m.get("executable") and m.get("target", {}).get("name") in want
            and "test" in m.get("target", {}).get("kind", [])):
        print(m["executable"] + "\t" + os.path.dirname(m["manifest_path"]))
PY
echo "$label: $(wc -l < "$run/tests.list") test executables; run directory $run"

qemu-img create -q -f qcow2 -b "$W/rootfs.img" -F raw "$run/overlay.qcow2"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
key=$W/id_ed25519
SSH="ssh -i $key -p $port -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=15 -o ServerAliveCountMax=8"

qpid=""
stop_guest() {
  [ -z "${spid:-}" ] || kill "$spid" 2>/dev/null || true
  [ -n "$qpid" ] || return 0
  if kill -0 "$qpid" 2>/dev/null; then
    # A clean shutdown first; qemu exits by itself when the guest powers off.
    timeout 30 $SSH root@127.0.0.1 'systemctl poweroff' >/dev/null 2>&1 || true
    i=0
    while kill -0 "$qpid" 2>/dev/null && [ "$i" -lt 120 ]; do sleep 1; i=$((i + 1)); done
    if kill -0 "$qpid" 2>/dev/null; then
      echo "$label: the guest did not power off within 120 s; stopping qemu (pid $qpid)"
      kill "$qpid" 2>/dev/null || true
      sleep 3
      kill -KILL "$qpid" 2>/dev/null || true
    fi
  fi
  wait "$qpid" 2>/dev/null || true
  qpid=""
}
trap 'stop_guest' EXIT
trap 'exit 130' INT TERM

kv=$(cat "$W/kernel-version")
vcpus=${VM_SYSTEMD_CPUS:-16}
if [ "$vcpus" = 16 ]; then
  shape="16 vCPUs in 2 NUMA nodes"
  topo="-smp 16,sockets=2,cores=4,threads=2 -object memory-backend-ram,id=m0,size=2G -object memory-backend-ram,id=m1,size=2G -numa node,nodeid=0,cpus=0-7,memdev=m0 -numa node,nodeid=1,cpus=8-15,memdev=m1"
else
  shape="$vcpus vCPUs (one socket of single-thread cores, one NUMA node)"
  topo="-smp $vcpus,sockets=1,cores=$vcpus,threads=1"
fi
echo "$label: booting Debian 12 ($kv) with systemd, $shape (console: $run/console.log)"
boot_start=$(date +%s)
# Software emulation (no usable KVM here). The user-mode network is restricted: the guest
# reaches nothing; only the host's loopback port forwards to its sshd.
timeout "$total_limit" qemu-system-x86_64 -accel tcg -cpu max,vendor=GenuineIntel \
  -m 4G $topo \
  -kernel "$W/vmlinux" -initrd "$W/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0 psi=1 systemd.unified_cgroup_hierarchy=1 panic=-1 pjw.src=$src" \
  -drive file="$run/overlay.qcow2",if=virtio,format=qcow2,cache=unsafe \
  -netdev user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:22 -device virtio-net-pci,netdev=n0 \
  -virtfs local,path="$src",mount_tag=pjwsrc,security_model=none \
  -virtfs local,path=/root/.cargo,mount_tag=pjwcargo,security_model=none \
  -virtfs local,path=/root/.rustup,mount_tag=pjwrustup,security_model=none \
  -display none -nodefaults -no-reboot -serial file:"$run/console.log" -monitor none \
  </dev/null >/dev/null 2>"$run/qemu.err" &
qpid=$!

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
up=0
while [ $(( $(date +%s) - boot_start )) -lt "$boot_limit" ] && kill -0 "$qpid" 2>/dev/null; do
  if timeout 30 $SSH root@127.0.0.1 true 2>/dev/null; then up=1; break; fi
  sleep 5
done
if [ "$up" != 1 ]; then
  echo "$label: no ssh within $boot_limit s; console:"; tail -30 "$run/console.log"; cat "$run/qemu.err"
  echo "$label: FAILED, the guest did not come up (ssh) within $boot_limit s" | tee "$run/summary"
  exit 1
fi
echo "$label: ssh up after $(( $(date +%s) - boot_start )) s"

# One ssh login per step; the guest scripts run from the shared source tree.
step() {
  name=$1; shift
  echo "=== $name"
  s=$(date +%s)
  set +e
  # In the background and waited for: a signal to this script is then handled at once (sh
  # runs traps only between foreground commands), and the trap stops the guest.
  : > "$run/$name.log"
  timeout "$step_limit" $SSH root@127.0.0.1 "$@" < /dev/null > "$run/$name.log" 2>&1 &
  spid=$!
  tail -f --pid="$spid" "$run/$name.log" &
  tpid=$!
  wait "$spid"
  wait "$tpid"
  set -e
  echo "=== $name: $(( $(date +%s) - s )) s"
}
for st in $steps; do
  case $st in
    tests)
      $SSH root@127.0.0.1 "cat > /tmp/pjw-tests.list" < "$run/tests.list" || true
      step tests "sh $src/vm/systemd/guest-tests.sh $src /tmp/pjw-tests.list $label" ;;
    bench-slurm)
      # Slurm's packages for this run's overlay only (the image stays as CI builds it).
      debs=$("$here/slurm-debs.sh")
      tar -C "$debs" -cf - . | $SSH root@127.0.0.1 'mkdir -p /var/tmp/pjw-slurm-debs && tar -C /var/tmp/pjw-slurm-debs -xf -' \
        || fail "could not copy the Slurm packages into the guest"
      # The host's shape and load as the step begins, for the results file's emulation warning.
      host="the host $(hostname), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) when the step began"
      # The commit measured, from the host's git (a worktree's git directory is not shared).
      commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates bench ':!bench/results' || echo ' (with uncommitted changes)')"
      step "$st" "VM_BENCH_SCENARIOS='${VM_BENCH_SCENARIOS:-isolation turnaround}' BENCH_HOST='$host' BENCH_COMMIT='$commit' sh $src/vm/systemd/guest-bench-slurm.sh $src" ;;
    session|demo|service|reserve|deb|bench)
      step "$st" "DEMO_REPS=${VM_DEMO_REPS:-2} sh $src/vm/systemd/guest-$st.sh $src" ;;
    bench-numa)
      # The host's load beside the guest's bench, in the shared tree (target/ is not tracked):
      # "EPOCH LOAD1 RUNNABLE-THREADS-OUTSIDE-QEMU" every 2 s.
      hl=$src/target/vm-host-load-$$.txt
      : > "$hl"
      ( while :; do
          echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg) $(ps -eL -o stat=,pid=,comm= | awk -v q="$qpid" '$1 ~ /^R/ && $2 != q && $3 != "ps" { n++ } END { print n + 0 }')"
          sleep 2
        done ) >> "$hl" 2>/dev/null &
      hpid=$!
      commit="$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$src" diff --quiet HEAD -- crates bench ':!bench/results' 2>/dev/null || echo ' with uncommitted changes')"
      step "$st" "BENCH_COMMIT='$commit' BENCH_HOST_LOAD_FILE=$hl BENCH_HOST_CPUS=$(nproc) BENCH_VM_NOTE='Measured in a qemu guest under software emulation (TCG: 16 vCPUs on $(nproc) host CPUs, two emulated NUMA nodes): remote memory costs no more than local there, so the time row cannot show a NUMA gain; the placement row shows where threads ran relative to their pages.' sh $src/vm/systemd/guest-$st.sh $src"
      kill "$hpid" 2>/dev/null || true
      wait "$hpid" 2>/dev/null || true
      rm -f "$hl" ;;
    *) fail "unknown step $st" ;;
  esac
done
stop_guest

# The summary: the checks' ok/FAIL lines and the test executables' counts.
ok=0; bad=$fails; tp=0; tf=0; tk=0; missing=""
for st in $steps; do
  f=$run/$st.log
  [ -f "$f" ] || { missing="$missing $st"; continue; }
  ok=$((ok + $(grep -c '^ok: ' "$f" || true)))
  bad=$((bad + $(grep -c '^FAIL: ' "$f" || true)))
  if [ "$st" = tests ]; then
    line=$(grep "^$label: [0-9]* passed, [0-9]* failed, [0-9]* skipped" "$f" | tail -1 || true)
    if [ -z "$line" ]; then missing="$missing tests(summary)"; continue; fi
    set -- $(echo "$line" | sed 's/.*: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped.*/\1 \2 \3/')
    tp=$1; tf=$2; tk=$3
  elif ! grep -q '^=== done' "$f"; then
    missing="$missing $st(end)"
  fi
done
if [ -n "$missing" ]; then
  echo "FAIL: no result from:$missing (timeout or the guest went away)"
  bad=$((bad + 1))
fi
echo "$label: checks $ok ok, $bad failed; test executables $tp passed, $tf failed, $tk skipped (run $run)"
echo "$label: $((ok + tp)) passed, $((bad + tf)) failed, $tk skipped" | tee "$run/summary"
[ "$bad" = 0 ] && [ "$tf" = 0 ] && [ -z "$missing" ]
