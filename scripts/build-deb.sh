#!/usr/bin/env bash
# Build the Debian package of pjw with dpkg-deb (docs/decisions.md (ah)): target/deb/pjw_VERSION_ARCH.deb.
# Needs the release binary (make deb builds it first). Paths in the unit and the hooks are the
# package's (/usr/bin/pjw, /usr/lib/pjw) instead of make install's /usr/local ones.
#
# usage: scripts/build-deb.sh [BINARY]     (default target/release/pjw); prints the .deb's path
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/pjw}
[ -x "$bin" ] || { echo "build-deb: no $bin (run make release)" >&2; exit 1; }
[ -x "$(dirname "$bin")/pjw-full" ] || { echo "build-deb: no pjw-full beside $bin (run make release)" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
revision=1
arch=$(dpkg --print-architecture)
out=target/deb
root=$out/pjw_${version}-${revision}_${arch}
rm -rf "$root"
mkdir -p "$root/DEBIAN"

# Directories 0755 and files 0644/0755 whatever the umask; root:root by --root-owner-group.
umask 022
ins() { install -D -m "$1" "$2" "$root/$3"; }
# The same file with make install's /usr/local paths turned into the package's.
ins_usr() { ins "$1" "$2" "$3"; sed -i 's#/usr/local/#/usr/#g' "$root/$3"; }

ins 0755 "$bin" usr/bin/pjw
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/pjw"
# The full command line the launch front execs (docs/decisions.md (cj)).
ins 0755 "$(dirname "$bin")/pjw-full" usr/lib/pjw/pjw-full
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/lib/pjw/pjw-full"

ins_usr 0644 packaging/pjw.service lib/systemd/system/pjw.service
ins 0644 packaging/pjw.slice lib/systemd/system/pjw.slice
sed -i 's#^Documentation=.*#Documentation=man:pjw(1) man:pjw.toml(5) file:/usr/share/doc/pjw/README.md.gz#' \
  "$root/lib/systemd/system/pjw.service"
ins 0755 scripts/pjw-scope usr/lib/pjw/pjw-scope
for f in slurm/pjw-prolog.sh slurm/pjw-epilog.sh slurm/pjw-task-prolog.sh sge/pjw-shepherd.sh lsf/pjw-job-starter condor/pjw-job-wrapper; do
  ins_usr 0755 "packaging/$f" "usr/lib/pjw/$f"
done
ins_usr 0644 packaging/pbs/pjw_hook.py usr/lib/pjw/pbs/pjw_hook.py
# The Slurm SPANK plugin, built against this machine's Slurm headers (make spank): slurmstepd
# loads plugins of its own major.minor release only, so the package is for this Slurm.
make --no-print-directory -s spank >/dev/null
[ -f target/spank/pjw_spank.so ] || {
  echo "build-deb: no target/spank/pjw_spank.so: make spank needs libslurm-dev and libjson-c-dev (scripts/install-deps.sh)" >&2
  exit 1
}
ins 0644 target/spank/pjw_spank.so usr/lib/pjw/slurm/pjw_spank.so
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/lib/pjw/slurm/pjw_spank.so"
# Examples to merge into the managers' own files, not run.
ins_usr 0644 packaging/slurm/slurm.conf usr/share/doc/pjw/examples/slurm/slurm.conf
ins 0644 packaging/slurm/cgroup.conf usr/share/doc/pjw/examples/slurm/cgroup.conf
ins_usr 0644 packaging/slurm/plugstack.conf usr/share/doc/pjw/examples/slurm/plugstack.conf

# The config: a conffile, root's only (central.url may hold a password).
ins 0600 packaging/pjw.toml etc/pjw/pjw.toml
# ssh adoption, inert until /etc/pam.d/sshd includes it (docs/wlm/adoption.md).
ins_usr 0644 packaging/pam/pjw-adopt etc/pam.d/pjw-adopt
printf '/etc/pam.d/pjw-adopt\n/etc/pjw/pjw.toml\n' > "$root/DEBIAN/conffiles"

# Man pages and completions from the binary's clap definition.
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
"$bin" generate man "$gen/man"
for sh in bash zsh fish; do "$bin" generate completions "$sh" --dir "$gen/comp" >/dev/null; done
for p in "$gen"/man/*.1; do ins 0644 "$p" "usr/share/man/man1/$(basename "$p")"; done
ins 0644 "$gen/man/pjw.toml.5" usr/share/man/man5/pjw.toml.5
gzip -9n "$root"/usr/share/man/man*/*
ins 0644 "$gen/comp/pjw.bash" usr/share/bash-completion/completions/pjw
ins 0644 "$gen/comp/_pjw" usr/share/zsh/vendor-completions/_pjw
ins 0644 "$gen/comp/pjw.fish" usr/share/fish/vendor_completions.d/pjw.fish

doc=usr/share/doc/pjw
ins 0644 packaging/deb/copyright "$doc/copyright"
for f in README.md docs/config.md docs/security.md; do ins 0644 "$f" "$doc/$(basename "$f")"; done
ins 0644 packaging/deb/changelog "$doc/changelog.Debian"
gzip -9n "$root/$doc/changelog.Debian" "$root/$doc/README.md" "$root/$doc/config.md" "$root/$doc/security.md"

for s in postinst prerm postrm; do ins 0755 "packaging/deb/$s" "DEBIAN/$s"; done

# Depends from the binaries' shared libraries (the front's and pjw-full's), as dh_shlibdeps would.
shl=$(mktemp -d)
mkdir -p "$shl/debian"
printf 'Source: pjw\n\nPackage: pjw\nArchitecture: any\n' > "$shl/debian/control"
# (The plugin's spank_* and slurm_* symbols come from slurmstepd, which loads it.)
depends=$(cd "$shl" && dpkg-shlibdeps -O "$OLDPWD/$root/usr/bin/pjw" "$OLDPWD/$root/usr/lib/pjw/pjw-full" "$OLDPWD/$root/usr/lib/pjw/slurm/pjw_spank.so" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
rm -rf "$shl"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: pjw
Version: ${version}-${revision}
Architecture: ${arch}
Maintainer: pjw maintainers <maintainers@users.noreply.a-seed-030b2e28.example>
Installed-Size: ${size}
Depends: ${depends:-libc6}
Recommends: systemd
Suggests: slurmd | gridengine-exec
Section: admin
Priority: optional
Description: process jail warden: every batch job on its own CPU set
 pjw runs on every compute node of a batch cluster and jails each job, with
 everything it starts, in its own exclusive set of CPUs and NUMA memory with
 cgroups (v2, hybrid or v1). A node queue with priorities, preemption and
 backfill, a memory governor that freezes jobs before the node swaps or
 kills, and per-job profiles in a local store.
 .
 This package holds the pjw command and daemon (pjw.service), its man pages
 and completions, and hooks for Slurm (with a SPANK plugin that jails each
 task before it execs), Grid Engine, PBS, LSF and HTCondor.
CONTROL
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

deb=$out/pjw_${version}-${revision}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
