#!/bin/sh
# Build static (crt-static glibc) test executables and the pjw, pjw-full, pjw-wl binaries for the VM tier
# into target/vm (apart from the normal build), and collect them into <out-dir>.
# usage: vm/build.sh <out-dir>
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: build.sh <out-dir>}
cd "$root"
export RUSTFLAGS='-C target-feature=+crt-static'
set -- --workspace --target x86_64-unknown-linux-gnu --target-dir target/vm
cargo build --bins "$@"
rm -rf "$out"; mkdir -p "$out"
cargo test --no-run --message-format=json "$@" > "$out.json"
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
for b in pjw pjw-full pjw-wl; do cp target/vm/x86_64-unknown-linux-gnu/debug/$b "$out/"; done
for f in "$out"/*; do
  if file "$f" 2>/dev/null | grep -q 'dynamically linked'; then echo "vm/build.sh: $f is not static" >&2; exit 1; fi
done
