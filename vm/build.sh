#!/bin/sh
# Collect the test executables the busybox guests run, and the pjw, pjw-full and pjw-wl binaries,
# into <out-dir>: the host's own debug build (the one `make test-host` ran), not a second one.
# The guests' initramfs carries glibc's loader and the libraries these executables link
# (vmtest.sh), as the systemd guest's Debian has them. Until 2026-11-28 this was a separate
# static (crt-static) build of the whole workspace into target/vm: about 3.5 minutes of every
# cold `make test` for the same code.
# usage: vm/build.sh <out-dir>
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: build.sh <out-dir>}
cd "$root"
# pjw-wl is another package's binary: cargo test --no-run does not build it (as make test-host's
# build step does).
cargo build --workspace --bins
rm -rf "$out"; mkdir -p "$out"
cargo test --workspace --no-run --message-format=json > "$out.json"
# Test executables: compiler-artifact messages with profile.test = true and an executable.
# Only the root tests of vm/guest-tests: the pure ones run on the host tier.
python3 - "$out.json" "$out" "$root/vm/guest-tests" <<'PY'
import json, os, shutil, sys
# Those a busybox guest runs (v2 or v1 on their line); vmtest.sh picks its tier's.
want = {f[0] for f in (l.split() for l in open(sys.argv[3]) if not l.startswith("#")) if f and {"v2", "v1"} & set(f[1:])}
n = 0
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if (m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable")
            and m.get("target", {}).get("name") in want and "test" in m.get("target", {}).get("kind", [])):
        shutil.copy2(m["executable"], sys.argv[2])
        n += 1
print(f"vm/build.sh: {n} test executables")
PY
rm -f "$out.json"
for b in pjw pjw-full pjw-wl; do cp target/debug/$b "$out/"; done
# Every library they load must be one the initramfs carries (vm/guest-libs).
carried=$(grep -v '^#' "$root/vm/guest-libs" | xargs -n1 basename)
for f in "$out"/*; do
  extra=$(ldd "$f" 2>/dev/null | awk '/=>/ {print $1}' | grep -vxF "$carried" || true)
  if [ -n "$extra" ]; then echo "vm/build.sh: $f needs $extra, which the guest lacks" >&2; exit 1; fi
done
