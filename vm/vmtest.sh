#!/bin/sh
# The VM test tier: boot a qemu guest with two NUMA nodes and pure cgroup v2 (VM_CGROUP=v2, the
# default) or pure cgroup v1 (VM_CGROUP=v1: the v1 hierarchies mounted as a legacy distribution
# does, no cgroup2 at all), run pjw's test executables (the host's build) inside it, print the guest's output
# and the skipped tests and one line "VM-busybox-v2: N passed, M failed, K skipped" (or
# "VM-busybox-v1: ...").
#
# usage: vm/vmtest.sh <dir>   <dir> holds the test executables (one per file), plus pjw,
#                                 pjw-full and pjw-wl: the host's debug build, which vm/build.sh
#                                 collects (the initramfs carries glibc for them).
# Env: VM_TIMEOUT (s, default 1800), VM_WORK (cache, default /var/tmp/pjw-vm),
#      VM_INJECT_FAILURE=1 (the guest also runs a step that fails; the tier must then fail),
#      VM_ONLY=PATTERN (only the test executables matching it, e.g. 'numa-*'),
#      VM_TEST_FILTER=NAME (only the test of that exact name in each executable run),
#      VM_KERNEL_ARGS (appended to the guest kernel's command line, e.g. 'loglevel=7' to see
#      every kernel message),
#      VM_CGROUP=v2|v1 (the guest's cgroup layout, default v2).
#
# The kernel, one busybox initramfs per layout (initrd-busybox-v2.gz, initrd-busybox-v1.gz) and
# qemu are set up once and cached in VM_WORK; every run gets its own directory
# VM_WORK/runs/<stamp> with the share, the console log and the summary.
# A guest that panics, hangs (timeout) or prints no exit marker is a failure. A guest whose kernel
# locks up (softlockup_panic: a CPU stuck in the kernel for 60 s) panics at once, with its stack on
# the console, instead of sitting out VM_TIMEOUT; such a tier boots once more and says so in its
# summary line, the first console kept beside the second (observed in CI: under software
# emulation two CPUs stuck for 1,600 s, the guest's tests idle). The stack such a panic showed
# next: a CPU stuck, in the first test of a fresh guest, on the patch site of a static branch in
# the slab allocator (kmem_cache_alloc_node, during a connect). The first job cgroups of a boot
# flip static keys (memory cgroup accounting on, cpusets in use), each flip rewrites kernel text
# on every CPU, and under TCG with 16 vCPUs a vCPU can be left spinning there. Not pjw's code;
# the retry is the containment.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bins=${1:?usage: vmtest.sh <dir-with-test-executables>}
W=${VM_WORK:-/var/tmp/pjw-vm}
mkdir -p "$W"
cg=${VM_CGROUP:-v2}
case $cg in
  v2) cmdline='cgroup_no_v1=all psi=1' ;;
  # v1: the v1 controllers stay available (no cgroup_no_v1); swap accounting on, so the memory
  # controller has memory.memsw.* on kernels that do not count swap by default.
  v1) cmdline='psi=1 swapaccount=1' ;;
  *) echo "vmtest: VM_CGROUP must be v1 or v2, not '$cg'" >&2; exit 2 ;;
esac
# The tier's name: in the initramfs's /etc/pjw-guest (tests read it, testkit::skip; guest-init.sh
# mounts the cgroup layout it names) and in the summary line.
tier=busybox-$cg
initrd=$W/initrd-$tier.gz
# glibc as the host has it (vm/guest-libs), for the test executables of the host's build (vm/build.sh checks
# that they link nothing else); a newer libc on the host makes a new initramfs.
guest_libs=$(grep -v '^#' "$here/guest-libs")

setup() {
  need=""
  command -v qemu-system-x86_64 >/dev/null || need="$need qemu-system-x86"
  dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need="$need busybox-static"
  command -v cpio >/dev/null || need="$need cpio"
  [ -x /usr/bin/setpriv ] || need="$need util-linux"
  if [ -n "$need" ]; then
    echo "vmtest: installing$need"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >/dev/null 2>&1 || {
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >/dev/null
    }
  fi
  if [ ! -f "$W/vmlinux" ] || [ ! -f "$W/modules/9p.ko" ]; then
    rm -rf "$W/k" "$W/modules" "$W"/*.deb
    # The kernel linux-image-amd64 currently points to (else the one known to work).
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
    pkg=${pkg:-linux-image-6.1.0-56-amd64}
    echo "vmtest: one-time setup in $W: $pkg"
    (cd "$W" && { apt-get download -q "$pkg" >/dev/null 2>&1 || { apt-get update -qq && apt-get download -q "$pkg" >/dev/null; }; } \
      && dpkg-deb -x "$pkg"_*.deb k)
    kv=${pkg#linux-image-}
    # PVH boot of the uncompressed vmlinux is several times faster than the bzImage under TCG.
    python3 -c "import lzma,sys;d=open(sys.argv[1],'rb').read();open(sys.argv[2],'wb').write(lzma.LZMADecompressor().decompress(d[d.find(b'\xfd7zXZ\0'):]))" \
      "$W/k/boot/vmlinuz-$kv" "$W/vmlinux.new"
    M=$W/k/lib/modules/$kv/kernel
    mkdir -p "$W/modules.new"
    cp $M/drivers/virtio/virtio_ring.ko $M/drivers/virtio/virtio.ko $M/drivers/virtio/virtio_pci_*dev.ko \
       $M/drivers/virtio/virtio_pci.ko $M/fs/netfs/netfs.ko $M/fs/fscache/fscache.ko $M/net/9p/9pnet.ko \
       $M/net/9p/9pnet_virtio.ko $M/fs/9p/9p.ko "$W/modules.new/"
    mv "$W/modules.new" "$W/modules"; mv "$W/vmlinux.new" "$W/vmlinux"
    rm -rf "$W/k" "$W"/*.deb "$W"/initrd*.gz
  fi
  # What goes into the initramfs, by content (not by date: two checkouts share this cache, and
  # an older checkout's initramfs can be newer than this one's scripts).
  stamp=$( { cat "$here/guest-init.sh" "$here/vmtest.sh" /bin/busybox /usr/bin/setpriv $guest_libs 2>/dev/null; echo "$tier $guest_libs"; } | sha256sum | cut -c1-16)
  if [ ! -f "$initrd" ] || [ "$(cat "$initrd.stamp" 2>/dev/null)" != "$stamp" ]; then
    root=$W/root-$tier-$$
    rm -rf "$root"; mkdir -p "$root/bin" "$root/lib" "$root/etc"
    cp /bin/busybox "$root/bin/"; cp "$W"/modules/*.ko "$root/lib/"
    # util-linux's setpriv (busybox's has no --reuid): the multi-user tests run jobs as other
    # users with it. Dynamically linked: its libraries and loader come along.
    if [ -x /usr/bin/setpriv ]; then
      cp /usr/bin/setpriv "$root/bin/"
      ldd /usr/bin/setpriv | grep -o '/[^ ]*' | while read -r lib; do
        mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"
      done
    fi
    # glibc's loader and the libraries pjw and its test executables link (the host's own
    # build, vm/build.sh, which checks that they need no other).
    for lib in $guest_libs; do
      mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"
    done
    # A minimal user database, as on any real machine (pjw names users with getpwuid).
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
    echo "$tier" > "$root/etc/pjw-guest"
    cp "$here/guest-init.sh" "$root/init"; chmod +x "$root/init"
    (cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$initrd.new.$$"
    mv "$initrd.new.$$" "$initrd"; echo "$stamp" > "$initrd.stamp"; rm -rf "$root"
  fi
}
# One setup at a time: two tiers (or engineers) starting together must not build the same cache.
exec 9>"$W/.setup.lock"
flock 9
setup
flock -u 9; exec 9>&-

run=$W/runs/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$run/share/bin"
# VM_ONLY: a shell pattern of the test executables to run (the self-check runs one), else all.
if [ -n "${VM_ONLY:-}" ]; then
  cp "$bins/pjw" "$bins/pjw-full" "$bins/pjw-wl" "$run/share/bin/"
  for f in "$bins"/$VM_ONLY; do [ -f "$f" ] && cp "$f" "$run/share/bin/"; done
else
  # The test executables vm/guest-tests gives this tier (a name's line lists v2 or v1).
  cp "$bins/pjw" "$bins/pjw-full" "$bins/pjw-wl" "$run/share/bin/"
  for t in $(awk -v t="$cg" '!/^#/ && NF { for (i = 2; i <= NF; i++) if ($i == t) print $1 }' "$here/guest-tests"); do
    for f in "$bins/$t"-*; do [ -f "$f" ] && cp "$f" "$run/share/bin/"; done
  done
fi
cp "$here/guest-run.sh" "$run/share/run.sh"
echo "${VM_INJECT_FAILURE:-0}" > "$run/share/inject-failure"
printf '%s\n' "${VM_TEST_FILTER:-}" > "$run/share/test-filter"
# Some tests read files of the source tree by their build-time path (golden files): the guest
# mounts the tree read-only at the same path.
src=$(cd "$here/.." && pwd); echo "$src" > "$run/share/srcdir"
ls "$W"/runs | sort | head -n -5 | while read -r old; do rm -rf "${W:?}/runs/$old"; done   # keep 5

acc="-accel tcg -cpu max,vendor=GenuineIntel"
if [ -w /dev/kvm ] && grep -qE 'vmx|svm' /proc/cpuinfo && [ "${VM_KVM:-0}" = 1 ]; then
  acc="-accel kvm -cpu host,+topoext"     # opt-in: /dev/kvm on some hosts cannot run stock kernels
fi
# The guest's first line ("cgroup.controllers: ...") must appear within VM_BOOT_TIMEOUT: under
# software emulation on a loaded host a boot can stall before init runs (observed once: BIOS
# output, then nothing for 900 s). Such a boot is stopped and tried once more; a guest that got
# as far as running tests is never restarted, so a test that hangs still fails the tier.
boot_limit=${VM_BOOT_TIMEOUT:-240}
boot() {
  rm -f "$run/console.raw"; : > "$run/console.raw"
  # shellcheck disable=SC2086
  timeout "${VM_TIMEOUT:-1800}" qemu-system-x86_64 $acc -m 2G -smp 16,sockets=2,cores=4,threads=2 \
    -object memory-backend-ram,id=m0,size=1G -object memory-backend-ram,id=m1,size=1G \
    -numa node,nodeid=0,cpus=0-7,memdev=m0 -numa node,nodeid=1,cpus=8-15,memdev=m1 \
    -kernel "$W/vmlinux" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1 oops=panic softlockup_panic=1 watchdog_thresh=30 $cmdline ${VM_KERNEL_ARGS:-}" \
    -display none -nodefaults -no-reboot -serial file:"$run/console.raw" -monitor none \
    -virtfs local,path="$run/share",mount_tag=host,security_model=none \
    -virtfs local,path="$src",mount_tag=src,security_model=none,readonly=on \
    -device isa-debug-exit,iobase=0xf4,iosize=4 </dev/null >/dev/null 2>"$run/qemu.err" &
  qpid=$!   # our own `timeout`, which passes a TERM on to its qemu
  waited=0
  while kill -0 "$qpid" 2>/dev/null && ! grep -q '^cgroup.controllers:' "$run/console.raw"; do
    if [ "$waited" -ge "$boot_limit" ]; then
      kill "$qpid" 2>/dev/null; wait "$qpid" 2>/dev/null
      return 200
    fi
    sleep 2; waited=$((waited + 2))
  done
  wait "$qpid"
}
start=$(date +%s)
set +e
lockup=""; stalls=0
for try in 1 2 3; do
  echo "vmtest: booting the $tier guest (log: $run/console.log, timeout ${VM_TIMEOUT:-1800} s, boot ${boot_limit} s)"
  boot; qrc=$?
  if [ "$qrc" = 200 ]; then
    echo "vmtest: the guest did not reach init within ${boot_limit} s (try $try); console so far:"
    tr -d '\r' < "$run/console.raw" | tail -5
    stalls=$((stalls + 1)); [ "$stalls" -lt 2 ] && continue
    break
  fi
  # A kernel lockup before the guest's exit marker: keep that console, show where the kernel was
  # stuck, and boot once more (once only: a second lockup fails the tier).
  if [ -z "$lockup" ] && ! grep -q '^@@EXIT_CODE=' "$run/console.raw" \
     && grep -q 'soft lockup' "$run/console.raw"; then
    tr -d '\r' < "$run/console.raw" > "$run/console-lockup.log"
    lockup="$run/console-lockup.log"
    echo "vmtest: the guest kernel locked up (try $try, after $(( $(date +%s) - start )) s); its console's last 60 lines:"
    tail -60 "$lockup"
    echo "vmtest: booting again; the tier's line will say so"
    continue
  fi
  break
done
tr -d '\r' < "$run/console.raw" > "$run/console.log"
set -e
end=$(date +%s)
grep -v '^@@EXIT_CODE=' "$run/console.log" || true
code=$(sed -n 's/^@@EXIT_CODE=\([0-9]*\)$/\1/p' "$run/console.log" | tail -1)
summary=$(grep '^VM-[a-z0-9-]*: [0-9]* passed, [0-9]* failed' "$run/console.log" | tail -1 || true)
if [ -z "$code" ]; then
  case $qrc in
    124) why="timed out after ${VM_TIMEOUT:-1800} s" ;;
    200) why="the guest did not reach init within ${boot_limit} s, twice" ;;
    *) why="no exit marker (panic or crash; qemu status $qrc)" ;;
  esac
  cat "$run/qemu.err" >&2
  summary="VM-$tier: FAILED, $why"
  code=1
elif [ -z "$summary" ]; then
  summary="VM-$tier: FAILED, no summary from the guest"
  [ "$code" != 0 ] || code=1
fi
[ -z "$lockup" ] || summary="$summary (after a guest kernel lockup on an earlier boot: $lockup)"
echo "$summary (guest exit $code, $((end - start)) s)" | tee "$run/summary"
exit "$code"
