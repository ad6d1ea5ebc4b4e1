#!/bin/sh
# The systemd guest's image: a Debian 12 root filesystem (mmdebstrap, from the host's apt
# sources) with systemd as PID 1, sshd, the guest's own kernel and initramfs, two ordinary users
# (alice 1001, bob 1002) and /etc/pjw-guest = systemd-v2, made into an ext4 image without
# mounting anything (mke2fs -d).
#
# usage: vm/systemd/build-image.sh          Env: VM_WORK (default /var/tmp/pjw-vm)
#
# Everything lands in $VM_WORK/systemd: rootfs.img (raw ext4, never written to: every run boots a
# qcow2 overlay on it), vmlinux (the guest kernel uncompressed, for PVH boot), initrd.img, the
# ssh key root, alice and bob accept (id_ed25519), image.hash. The image is rebuilt only when
# this script changes (its sha256 is image.hash). Also installs the host packages it needs.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
W=${VM_WORK:-/var/tmp/pjw-vm}/systemd
mkdir -p "$W"
hash=$(sha256sum "$here/build-image.sh" | cut -d' ' -f1)
if [ -f "$W/rootfs.img" ] && [ -f "$W/vmlinux" ] && [ -f "$W/initrd.img" ] && [ -f "$W/id_ed25519" ] \
   && [ "$(cat "$W/image.hash" 2>/dev/null)" = "$hash" ]; then
  exit 0
fi

need=""
command -v mmdebstrap >/dev/null || need="$need mmdebstrap"
command -v qemu-system-x86_64 >/dev/null || need="$need qemu-system-x86"
command -v qemu-img >/dev/null || need="$need qemu-utils"
command -v mke2fs >/dev/null || need="$need e2fsprogs"
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || need="$need openssh-client"
command -v unshare >/dev/null || need="$need util-linux"
if [ -n "$need" ]; then
  echo "build-image: installing$need"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >/dev/null 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >/dev/null
  }
fi

start=$(date +%s)
echo "build-image: building the Debian 12 systemd guest in $W (a few minutes, once)"
rm -f "$W/image.hash"
tmp=$(mktemp -d "$W/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root

# The host's apt sources (Debian 12 with its security suite), as the host itself uses them.
set --
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -s "$f" ] && grep -q '^[^#]' "$f" && set -- "$@" "$f"
done
[ $# -gt 0 ] || set -- http://deb.debian.org/debian

# A lean package set: what systemd as PID 1 with logind sessions over ssh needs, the guest's
# kernel, and what the demo, the tests and `make install` call. No recommends.
pkgs=systemd,systemd-sysv,dbus,libpam-systemd,openssh-server,linux-image-amd64,initramfs-tools
pkgs=$pkgs,util-linux,procps,iproute2,python3,make,gcc,libc6-dev,kmod
# The package step (guest-deb.sh) reads pjw's man pages: man-db, and dpkg keeps pjw's pages.
pkgs=$pkgs,man-db
# The real-software tests (hpc_tasks: 2 MPI+OpenMP tasks of 2 CPUs): Open MPI with its
# compiler wrapper, and the tools hpc.rs runs (the same set scripts/install-deps.sh gives the
# host).
pkgs=$pkgs,openmpi-bin,libopenmpi-dev,hwloc,stress-ng,sysbench
# mmdebstrap mounts /proc, /sys and /dev in the chroot while it installs (root mode): it runs in
# a private mount namespace of its own, so none of that reaches the host's mount table.
unshare --mount --propagation private -- \
  mmdebstrap --mode=root --variant=minbase --include="$pkgs" \
    --aptopt='Acquire::Retries "3"' --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/man/man1/pjw*' --dpkgopt='path-include=/usr/share/man/man5/pjw*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    bookworm "$root" "$@" 2> "$tmp/mmdebstrap.log" || { tail -30 "$tmp/mmdebstrap.log" >&2; exit 1; }

# --- configuration (plain files in the tree; chroot only for useradd and systemctl enable) ---
echo systemd-v2 > "$root/etc/pjw-guest"        # the tier's name (crates/testkit/src/skip.rs)
echo pjw-systemd > "$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 pjw-systemd\n::1 localhost ip6-localhost\n' > "$root/etc/hosts"
# The shares (vm/systemd/run.sh): the source tree, mounted here and bound at its host path by
# pjw-src.service (the path is on the kernel command line: pjw.src=...), and the host's Rust
# toolchain at the same paths as on the host, so cargo finds the host's build fresh.
o=trans=virtio,version=9p2000.L,msize=512000,nofail
cat > "$root/etc/fstab" <<EOF
/dev/vda / ext4 rw,errors=remount-ro 0 1
pjwsrc /mnt/pjw-src 9p $o 0 0
pjwcargo /root/.cargo 9p $o 0 0
pjwrustup /root/.rustup 9p $o 0 0
EOF
mkdir -p "$root/mnt/pjw-src" "$root/root/.cargo" "$root/root/.rustup"
printf '9pnet_virtio\n9p\n' > "$root/etc/modules-load.d/9p.conf"
cat > "$root/usr/local/sbin/pjw-src-bind" <<'EOF'
#!/bin/sh
for a in $(cat /proc/cmdline); do
  case $a in pjw.src=*) d=${a#pjw.src=}; mkdir -p "$d" && mount --bind /mnt/pjw-src "$d" ;; esac
done
EOF
chmod 0755 "$root/usr/local/sbin/pjw-src-bind"
cat > "$root/etc/systemd/system/pjw-src.service" <<'EOF'
[Unit]
Description=Bind the shared source tree at its host path (pjw.src= on the kernel command line)
RequiresMountsFor=/mnt/pjw-src
Before=ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/pjw-src-bind

[Install]
WantedBy=multi-user.target
EOF
# Network: qemu's user-mode network (restricted to the host's loopback), static address.
cat > "$root/etc/systemd/network/10-qemu.network" <<'EOF'
[Match]
Name=en* eth*

[Network]
Address=10.0.2.15/24
Gateway=10.0.2.2
LinkLocalAddressing=no
IPv6AcceptRA=no
EOF
cat > "$root/etc/ssh/sshd_config.d/pjw.conf" <<'EOF'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
EOF
# Users and the host's key for root, alice and bob.
chroot "$root" useradd -m -u 1001 -U -s /bin/bash alice
chroot "$root" useradd -m -u 1002 -U -s /bin/bash bob
[ -f "$W/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C pjw-systemd-guest -f "$W/id_ed25519"
for h in root home/alice home/bob; do
  u=$(stat -c %u "$root/$h"); g=$(stat -c %g "$root/$h")
  install -d -m 0700 -o "$u" -g "$g" "$root/$h/.ssh"
  install -m 0600 -o "$u" -g "$g" "$W/id_ed25519.pub" "$root/$h/.ssh/authorized_keys"
done
# Boot quickly under emulation: no timers that start work, no waiting for "network online".
chroot "$root" systemctl enable systemd-networkd.service pjw-src.service >/dev/null 2>&1
for u in systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer \
         e2scrub_all.timer e2scrub_reap.service fstrim.timer man-db.timer systemd-timesyncd.service \
         getty@tty1.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$u"
done
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' > "$root/etc/systemd/journald.conf.d/volatile.conf"
rm -f "$root/etc/machine-id"; : > "$root/etc/machine-id"   # first boot makes one (throw-away overlay)

# --- boot files: the guest's own kernel (uncompressed for PVH boot) and initramfs ---
kv=$(ls "$root/boot" | sed -n 's/^vmlinuz-//p' | sort -V | tail -1)
[ -n "$kv" ] && [ -f "$root/boot/initrd.img-$kv" ] || { echo "build-image: no kernel or initramfs in the image" >&2; exit 1; }
python3 -c "import lzma,sys;d=open(sys.argv[1],'rb').read();open(sys.argv[2],'wb').write(lzma.LZMADecompressor().decompress(d[d.find(b'\xfd7zXZ\0'):]))" \
  "$root/boot/vmlinuz-$kv" "$tmp/vmlinux"
cp "$root/boot/initrd.img-$kv" "$tmp/initrd.img"
rm -rf "$root/var/cache/apt/archives"/*.deb "$root/var/lib/apt/lists"/*_Packages

# --- the ext4 image, filled from the tree (no mount) ---
size=$(( $(du -sm "$root" | cut -f1) + 3072 ))   # room for the guest's logs, /tmp and /var
mke2fs -q -t ext4 -L pjw-root -d "$root" "$tmp/rootfs.img" "${size}M"
mv "$tmp/rootfs.img" "$tmp/vmlinux" "$tmp/initrd.img" "$W/"
echo "$kv" > "$W/kernel-version"
echo "$hash" > "$W/image.hash"
echo "build-image: done in $(( $(date +%s) - start )) s (kernel $kv, image ${size} MiB)"
