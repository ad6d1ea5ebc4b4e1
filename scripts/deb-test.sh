#!/usr/bin/env bash
# Check the Debian package: build it (or take DEB), then its contents (dpkg-deb -c), control
# files (dpkg-deb -I), the maintainer scripts' syntax, and lintian: no E: tag. Warnings are
# printed, not fatal. Ends "deb: N passed, M failed, 0 skipped" like the other tiers.
#
# usage: scripts/deb-test.sh [DEB]
set -uo pipefail
cd "$(dirname "$0")/.."
deb=${1:-}
if [ -z "$deb" ]; then
  deb=$(scripts/build-deb.sh) || { echo "deb: 0 passed, 1 failed, 0 skipped"; exit 1; }
fi
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

contents=$(dpkg-deb -c "$deb")
has() { # MODE PATH
  if grep -qE "^$1 root/root +[0-9]+ [0-9-]+ [0-9:]+ \./$2\$" <<<"$contents"; then ok "$2 ($1)"; else bad "$2 missing or not $1 root/root"; fi
}
has -rwxr-xr-x usr/bin/pjw
has -rwxr-xr-x usr/lib/pjw/pjw-full
has -rw-r--r-- lib/systemd/system/pjw.service
has -rw-r--r-- lib/systemd/system/pjw.slice
has -rwxr-xr-x usr/lib/pjw/pjw-scope
has -rwxr-xr-x usr/lib/pjw/slurm/pjw-prolog.sh
has -rwxr-xr-x usr/lib/pjw/slurm/pjw-epilog.sh
has -rwxr-xr-x usr/lib/pjw/slurm/pjw-task-prolog.sh
has -rw-r--r-- usr/lib/pjw/slurm/pjw_spank.so
has -rw-r--r-- usr/share/doc/pjw/examples/slurm/plugstack.conf
has -rwxr-xr-x usr/lib/pjw/sge/pjw-shepherd.sh
has -rwxr-xr-x usr/lib/pjw/lsf/pjw-job-starter
has -rwxr-xr-x usr/lib/pjw/condor/pjw-job-wrapper
has -rw-r--r-- usr/lib/pjw/pbs/pjw_hook.py
has -rw------- etc/pjw/pjw.toml
has -rw-r--r-- etc/pam.d/pjw-adopt
if dpkg-deb --fsys-tarfile "$deb" | tar -xO ./etc/pam.d/pjw-adopt | grep -q '^session .*pam_exec.so stdout /usr/bin/pjw pam-adopt$'; then ok "the PAM snippet runs /usr/bin/pjw pam-adopt"; else bad "the PAM snippet does not run /usr/bin/pjw pam-adopt"; fi
for p in pjw pjw-run pjw-status pjw-report pjw-check pjw-daemon; do has -rw-r--r-- "usr/share/man/man1/$p.1.gz"; done
has -rw-r--r-- usr/share/man/man5/pjw.toml.5.gz
has -rw-r--r-- usr/share/bash-completion/completions/pjw
has -rw-r--r-- usr/share/zsh/vendor-completions/_pjw
has -rw-r--r-- usr/share/fish/vendor_completions.d/pjw.fish
has -rw-r--r-- usr/share/doc/pjw/copyright
has -rw-r--r-- usr/share/doc/pjw/changelog.Debian.gz
if grep -q '/usr/local' <<<"$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/pjw.service ./usr/lib/pjw/slurm/pjw-prolog.sh)"; then
  bad "the unit or the hooks still name /usr/local"
else
  ok "the unit and hooks name /usr paths"
fi
if dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/pjw/examples/slurm/plugstack.conf | grep -q '^required /usr/lib/pjw/slurm/pjw_spank.so$'; then
  ok "plugstack.conf example names the package's plugin"
else
  bad "plugstack.conf example does not name /usr/lib/pjw/slurm/pjw_spank.so"
fi
# slurmstepd loads only a SPANK plugin of its own major.minor (plugin_version).
tmpso=$(mktemp); dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/pjw/slurm/pjw_spank.so > "$tmpso"
if nm -D --defined-only "$tmpso" | grep -qw plugin_version && nm -D --defined-only "$tmpso" | grep -qw slurm_spank_task_init_privileged; then
  ok "pjw_spank.so exports plugin_version and slurm_spank_task_init_privileged"
else
  bad "pjw_spank.so is not a SPANK plugin"
fi
rm -f "$tmpso"
if dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/pjw.service | grep -q '^Delegate=yes'; then ok "Delegate=yes"; else bad "no Delegate=yes in the unit"; fi

ctl=$(mktemp -d); trap 'rm -rf "$ctl"' EXIT
dpkg-deb -e "$deb" "$ctl"
if [ "$(cat "$ctl/conffiles" | tr '\n' ' ')" = "/etc/pam.d/pjw-adopt /etc/pjw/pjw.toml " ]; then ok "conffiles: /etc/pam.d/pjw-adopt, /etc/pjw/pjw.toml"; else bad "conffiles: $(cat "$ctl/conffiles")"; fi
for s in postinst prerm postrm; do
  if sh -n "$ctl/$s" && [ -x "$ctl/$s" ]; then ok "$s: executable, sh syntax"; else bad "$s"; fi
done
grep -q 'deb-systemd-helper enable' "$ctl/postinst" && ok "postinst enables with deb-systemd-helper" || bad "postinst does not enable"
grep -q 'rm -rf /var/lib/pjw /run/pjw' "$ctl/postrm" && ok "postrm purge removes state and socket" || bad "postrm keeps state"

if command -v lintian >/dev/null; then
  tags=$(lintian --no-tag-display-limit "$deb" 2>&1)
  errors=$(grep -c '^E:' <<<"$tags")
  grep '^[WE]:' <<<"$tags" | sed 's/^/  lintian /'
  if [ "$errors" = 0 ]; then ok "lintian: no errors"; else bad "lintian: $errors error(s)"; fi
else
  bad "lintian is not installed (scripts/install-deps.sh installs it)"
fi
echo "deb: $pass passed, $fail failed, 0 skipped"
[ "$fail" = 0 ]
