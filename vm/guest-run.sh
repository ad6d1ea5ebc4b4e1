# Runs inside the guest (busybox sh), from the share: every test executable in bin/ (not pjw,
# pjw-full or pjw-wl), then the skipped tests with their reasons and "VM-<tier>: N passed, M failed,
# K skipped" (scripts/count-tests.sh). Exits non-zero when a test failed, an executable failed
# without a result line, or nothing ran. The guest's /etc/pjw-guest names its tier; tests read it
# (testkit::skip), never an environment variable.
export PJW_BIN=/mnt/bin/pjw PATH=/mnt/bin:/bin RUST_BACKTRACE=1
tier=$(cat /etc/pjw-guest 2>/dev/null || echo guest)
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  echo "cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
else
  echo "cgroup.controllers: none (cgroup v1: $(ls /sys/fs/cgroup | tr '\n' ' '))"
fi
echo "cgroup filesystems: $(grep -c cgroup /proc/mounts) ($(awk '$3 ~ /^cgroup/ {print $3}' /proc/mounts | sort -u | tr '\n' ' '))"
echo "numa nodes: $(cat /sys/devices/system/node/online), cpus: $(cat /sys/devices/system/cpu/online)"
echo "tier: $tier; /proc/self/cgroup: $(tr '\n' ' ' < /proc/self/cgroup)"
src=$(cat /mnt/srcdir)
mkdir -p "$src" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro src "$src" || echo "cannot mount the source tree at $src"
# VM_INJECT_FAILURE=1 on the host: a real test (numa's injected_failure_when_asked) fails.
PJW_VM_INJECT_FAILURE=$(cat /mnt/inject-failure 2>/dev/null); export PJW_VM_INJECT_FAILURE
# VM_TEST_FILTER on the host: only the test of that exact name (the self-check runs one).
filter=$(cat /mnt/test-filter 2>/dev/null)
export PJW_SKIP_LOG=/tmp/skips; : > "$PJW_SKIP_LOG"
# One cgroup that lives through every test, with the cpuset and memory controllers on. The
# kernel turns on static keys (cpusets in use, socket and kmem accounting) when the first such
# cgroup appears and off when the last goes, rewriting its own text on every CPU each time.
# Under TCG, one such rewrite left a vCPU spinning (a soft lockup at the first test of a fresh
# guest). With this cgroup held, the keys flip once, here, before any test runs.
keep=pjw-vm-keep
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then keeps=/sys/fs/cgroup/$keep
else keeps="/sys/fs/cgroup/cpuset/$keep /sys/fs/cgroup/memory/$keep"; fi
for k in $keeps; do mkdir "$k" || echo "cannot make the keep cgroup $k"; done
all=/tmp/all.log; : > "$all"
extra=0; ran=0
for t in /mnt/bin/*; do
  name=${t##*/}
  case $name in pjw|pjw-full|pjw-wl) continue ;; esac
  echo "=== $name"
  log=/tmp/$name.log
  if [ -n "$filter" ]; then "$t" --exact "$filter" --test-threads=4 --show-output > "$log" 2>&1; rc=$?
  else "$t" --test-threads=4 --show-output > "$log" 2>&1; rc=$?; fi
  cat "$log"; cat "$log" >> "$all"
  set -- $(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log")
  if [ $# -lt 2 ]; then
    echo "=== $name: exit $rc without a test result line"; extra=$((extra + 1))
  else
    ran=$((ran + $1 + $2))
    if [ "$rc" != 0 ] && [ "$2" = 0 ]; then echo "=== $name: exit $rc"; extra=$((extra + 1)); fi
  fi
done
for k in $keeps; do rmdir "$k" || echo "cannot remove the keep cgroup $k"; done
# The tests remove what they create: no cgroup may be left below the roots.
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then left=$(find /sys/fs/cgroup -mindepth 1 -type d | head -5)
else left=$(find /sys/fs/cgroup -mindepth 2 -type d | head -5); fi   # v1: below each hierarchy
if [ -n "$left" ]; then echo "=== cgroups left behind (counted as a failure):"; echo "$left"; extra=$((extra + 1)); fi
# Failures outside libtest's counts (crashed executables, leftovers) join the failed count.
i=0; while [ "$i" -lt "$extra" ]; do echo "test result: FAILED. 0 passed; 1 failed; 0 ignored" >> "$all"; i=$((i + 1)); done
sh "$src/scripts/count-tests.sh" "$all" "$PJW_SKIP_LOG" "VM-$tier"; ok=$?
[ "$ran" -gt 0 ] && [ "$ok" = 0 ]
