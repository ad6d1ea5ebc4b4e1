# Runs inside the guest (busybox sh), from the share: every test executable in bin/ (not pjw or
# pjw-wl), then "VM: N passed, M failed". Exits non-zero when a test failed, an executable
# failed without a result line, or nothing ran.
export PJW_VM_GUEST=1 PJW_BIN=/mnt/bin/pjw PATH=/mnt/bin:/bin RUST_BACKTRACE=1
echo "cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "cgroup filesystems: $(grep -c cgroup /proc/mounts) ($(awk '$3 ~ /^cgroup/ {print $3}' /proc/mounts | sort -u | tr '\n' ' '))"
echo "numa nodes: $(cat /sys/devices/system/node/online), cpus: $(cat /sys/devices/system/cpu/online)"
src=$(cat /mnt/srcdir)
mkdir -p "$src" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro src "$src" || echo "cannot mount the source tree at $src"
# VM_INJECT_FAILURE=1 on the host: a real test (numa's injected_failure_when_asked) fails.
PJW_VM_INJECT_FAILURE=$(cat /mnt/inject-failure 2>/dev/null); export PJW_VM_INJECT_FAILURE
passed=0; failed=0; ran=0
for t in /mnt/bin/*; do
  name=${t##*/}
  case $name in pjw|pjw-wl) continue ;; esac
  echo "=== $name"
  log=/tmp/$name.log
  "$t" --test-threads=4 --show-output > "$log" 2>&1; rc=$?
  cat "$log"
  set -- $(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log")
  if [ $# -lt 2 ]; then
    echo "=== $name: exit $rc without a test result line"; failed=$((failed + 1))
  else
    passed=$((passed + $1)); failed=$((failed + $2)); ran=$((ran + $1 + $2))
    if [ "$rc" != 0 ] && [ "$2" = 0 ]; then echo "=== $name: exit $rc"; failed=$((failed + 1)); fi
  fi
done
# The tests remove what they create: no cgroup may be left below the root.
left=$(find /sys/fs/cgroup -mindepth 1 -type d | head -5)
if [ -n "$left" ]; then echo "=== cgroups left behind (counted as a failure):"; echo "$left"; failed=$((failed + 1)); fi
echo "VM: $passed passed, $failed failed"
[ "$ran" -gt 0 ] && [ "$failed" = 0 ]
