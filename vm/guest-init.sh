#!/bin/busybox sh
# PID 1 of the test guest: mount proc/sys/dev, cgroup2 (the only cgroup fs) with the controllers
# pjw uses enabled, the host share over 9p; run the share's run.sh; report its exit code on the
# serial console (@@EXIT_CODE=N) and to qemu (isa-debug-exit), power off.
/bin/busybox --install -s /bin; export PATH=/bin
mkdir -p /proc /sys /dev /tmp /mnt; mount -t proc p /proc; mount -t sysfs s /sys; mount -t devtmpfs d /dev
mount -t tmpfs t /tmp
mount -t cgroup2 c /sys/fs/cgroup && echo "+cpuset +memory +cpu +pids +io" > /sys/fs/cgroup/cgroup.subtree_control
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p; do insmod /lib/$m.ko; done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 host /mnt
hostname pjw-vm
# Loopback, as on any real machine (the metrics test serves HTTP on 127.0.0.1).
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up 2>/dev/null
cd /mnt && sh /mnt/run.sh; rc=$?
echo "@@EXIT_CODE=$rc"
printf "\\$(printf %o $rc)" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
poweroff -f
