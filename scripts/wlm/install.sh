#!/usr/bin/env bash
# Install the Debian packages of the live workload-manager tests: Slurm (slurm-wlm, munge) and
# Son of Grid Engine (gridengine-master/exec/client, preseeded). Idempotent: quiet when they are
# there. Daemons are NOT started here (a policy-rc.d keeps the packages' init scripts from
# starting them): the tests start their own and stop them by pid.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "wlm/install: must run as root" >&2; exit 1; }

# The Slurm and Grid Engine tests run in parallel and both call this: one installs, the other
# waits for it (debconf's database and dpkg take one writer at a time), then finds all there.
exec 9>/var/lock/pjw-wlm-install.lock
flock -w 1200 9 || { echo "wlm/install: another install holds /var/lock/pjw-wlm-install.lock" >&2; exit 1; }

need=()
# libslurm-dev and libjson-c-dev: slurm-up.sh builds pjw's SPANK plugin (make spank).
for p in slurm-wlm slurm-client munge libslurm-dev libjson-c-dev gridengine-master gridengine-exec gridengine-client; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0

H=$(hostname)
for p in gridengine-common gridengine-client gridengine-master gridengine-exec; do
  echo "$p shared/gridengineconfig boolean true
$p shared/gridenginecell string default
$p shared/gridenginemaster string $H"
done | debconf-set-selections

# Keep postinst scripts from starting daemons (no systemd here; init.d scripts would).
ours=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && ours=1
fi
trap '[ $ours = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT

log=/var/tmp/pjw-wlm-install.log
echo "wlm/install: installing ${need[*]} (log: $log)"
export DEBIAN_FRONTEND=noninteractive
apt_get() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }
if ! apt_get install -y -q "${need[@]}" >"$log" 2>&1; then
  apt_get update -q >>"$log" 2>&1
  apt_get install -y -q "${need[@]}" >>"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
fi
