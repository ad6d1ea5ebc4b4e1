#!/bin/busybox sh
# PID 1 of the test guest: mount proc/sys/dev, the cgroup layout /etc/pjw-guest names, the host
# share over 9p; run the share's run.sh; report its exit code on the serial console
# (@@EXIT_CODE=N) and to qemu (isa-debug-exit), power off.
#   busybox-v2: cgroup2, the only cgroup fs, with the controllers pjw uses enabled.
#   busybox-v1: the v1 hierarchies as a legacy distribution mounts them (a tmpfs at
#               /sys/fs/cgroup, one hierarchy per directory, cpu and cpuacct co-mounted with
#               their symlinks), and no cgroup2 at all.
/bin/busybox --install -s /bin; export PATH=/bin
mkdir -p /proc /sys /dev /tmp /mnt; mount -t proc p /proc; mount -t sysfs s /sys; mount -t devtmpfs d /dev
mount -t tmpfs t /tmp
case $(cat /etc/pjw-guest 2>/dev/null) in
  *-v1)
    mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
    for h in cpuset cpu,cpuacct memory freezer pids blkio devices; do
      mkdir /sys/fs/cgroup/$h && mount -t cgroup -o $h cgroup /sys/fs/cgroup/$h || echo "cannot mount the v1 hierarchy $h"
    done
    ln -s cpu,cpuacct /sys/fs/cgroup/cpu; ln -s cpu,cpuacct /sys/fs/cgroup/cpuacct ;;
  *)
    mount -t cgroup2 c /sys/fs/cgroup && echo "+cpuset +memory +cpu +pids +io" > /sys/fs/cgroup/cgroup.subtree_control ;;
esac
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p; do insmod /lib/$m.ko; done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 host /mnt
hostname pjw-vm
# Loopback, as on any real machine (the metrics test serves HTTP on 127.0.0.1).
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up 2>/dev/null
cd /mnt && sh /mnt/run.sh; rc=$?
echo "@@EXIT_CODE=$rc"
printf "\\$(printf %o $rc)" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
poweroff -f
