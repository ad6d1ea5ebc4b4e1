#!/bin/sh
# The Debian 12 packages Slurm needs in the systemd guest (slurm-wlm, slurm-client, munge and
# whatever of their dependencies the image lacks), for the optional step bench-slurm only: the
# image of build-image.sh stays as CI builds it, and the step installs these into its run's
# throw-away overlay (guest-bench-slurm.sh). Dependencies are resolved by the host's apt against
# the image's own package list (read out of rootfs.img with debugfs, nothing mounted), so exactly
# the missing ones are fetched (11 packages, 3.8 MB, measured 2026-11-25).
#
# usage: vm/systemd/slurm-debs.sh     prints the directory of the .debs ($VM_WORK/systemd/slurm-debs)
# Fetched again only when the image changes (its image.hash is kept beside them).
set -eu
W=${VM_WORK:-/var/tmp/pjw-vm}/systemd
out=$W/slurm-debs
hash=$(cat "$W/image.hash")
if [ "$(cat "$out/image.hash" 2>/dev/null)" = "$hash" ] && [ -n "$(ls "$out"/*.deb 2>/dev/null)" ]; then
  echo "$out"; exit 0
fi
tmp=$(mktemp -d "$W/slurm-debs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
debugfs -R 'cat /var/lib/dpkg/status' "$W/rootfs.img" > "$tmp/status" 2>/dev/null
grep -q '^Package: systemd$' "$tmp/status" || { echo "slurm-debs: cannot read the image's package list" >&2; exit 1; }
mkdir -p "$tmp/debs/partial"
get() {
  apt-get install --download-only -y -q -o Dir::State::status="$tmp/status" \
    -o Dir::Cache::archives="$tmp/debs" -o Debug::NoLocking=1 -o APT::Install-Recommends=false \
    slurm-wlm slurm-client munge > "$tmp/apt.log" 2>&1
}
get || { apt-get update -qq >/dev/null 2>&1; get; } || { tail -5 "$tmp/apt.log" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
mv "$tmp"/debs/*.deb "$out/"
echo "$hash" > "$out/image.hash"
echo "$out"
