#!/usr/bin/env bash
# The demonstration behind `make demo`: a CPU-bound reference job alone, beside a noisy
# neighbour without pjw, and both under pjw. The neighbour asks for one CPU but starts two busy
# processes per CPU of the node. Prints the run times (median of DEMO_REPS rounds) and slowdowns,
# and keeps them in a results file, bench/results/<date>T<time>Z-demo.md (never overwritten; the
# machine, its load and the build beside the figures; marked NOT PUBLISHABLE when the machine
# was loaded), from which scripts/bench-readme.sh makes README's demo table.
#
# It starts a private daemon (socket and state in a temp dir, cgroups below this script's own
# cgroup — or, where systemd runs on pure cgroup v2, in a delegated scope pjw-demo-<pid>.scope
# made by scripts/pjw-scope, since a login session's own cgroup cannot hold them), and on exit —
# also on failure or Ctrl-C — kills what it started and removes the daemon's cgroups and files.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
PJW=${PJW:-$root/target/release/pjw}
WL=${WL:-$root/target/release/pjw-wl}
REPS=${DEMO_REPS:-5}
SECONDS_PER_RUN=${DEMO_SECONDS:-2}

[ -x "$PJW" ] && [ -x "$WL" ] || { echo "demo: build first (make demo does): $PJW, $WL" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then
  echo "demo: pjw's daemon manages cgroups and must run as root" >&2
  exit 1
fi

work=$(mktemp -d /tmp/pjw-demo.XXXXXX)
sub="pjw-demo-$$"
scope=""
if "$root/scripts/pjw-scope" --needed; then
  scope=$sub
  parent="$("$root/scripts/pjw-scope" --watch $$ "$scope")/demo"
else
  parent="self/$sub"
fi
export PJW_SOCKET=$work/pjw.sock
daemon_pid=""
noisy_pgid=""

cleanup() {
  set +e
  if [ -n "$noisy_pgid" ]; then kill -KILL -- "-$noisy_pgid" 2>/dev/null; fi
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    # Jobs the demo started and that are still running (after a failure) are killed first.
    for j in $("$PJW" status --json 2>/dev/null | sed -n 's/.*"id": "\([^"]*\)".*/\1/p'); do
      "$PJW" kill "$j" >/dev/null 2>&1
    done
    sleep 0.3
    kill -TERM "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  # The daemon removes its parent cgroups when it stops with no jobs; after a failure, remove
  # what is left of ours (only directories named after this script's pid, created by its daemon).
  cut -d: -f3- /proc/self/cgroup | sort -u | while read -r path; do
    for mnt in /sys/fs/cgroup /sys/fs/cgroup/*; do
      d="$mnt${path%/}/$sub"
      if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null; fi
    done
  done
  # The delegated scope (systemd + pure v2): stopping it ends its holder and removes it.
  if [ -n "$scope" ]; then "$root/scripts/pjw-scope" --stop "$scope"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$PJW" daemon --socket "$PJW_SOCKET" --state-dir "$work/state" --cgroup-parent "$parent" 2>"$work/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do
  [ -S "$PJW_SOCKET" ] && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/daemon.log" >&2; exit 1; }
  sleep 0.05
done
[ -S "$PJW_SOCKET" ] || { echo "demo: daemon did not start" >&2; cat "$work/daemon.log" >&2; exit 1; }

ncpu=$("$PJW" status --json | sed -n 's/.*"total_cpus": \([0-9]*\).*/\1/p')
busy=$((2 * ncpu))
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date -u +%s)
iters=$("$WL" calibrate "$SECONDS_PER_RUN")
echo "pjw demo on $(hostname): $ncpu CPUs for jobs; reference = $iters iterations (about ${SECONDS_PER_RUN} s alone);"
echo "noisy neighbour = $busy busy processes (asked for 1 CPU); median of $REPS rounds"
echo

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
alone=(); plain=(); jailed=()
for r in $(seq "$REPS"); do
  printf 'round %d/%d: alone' "$r" "$REPS"
  alone+=("$("$WL" spin "$iters")")

  printf ', plain neighbour'
  # Same session as the reference (as jobs started by one batch daemon are: with CFS autogroup a
  # separate session would get its own fair share), own process group so it can be killed whole.
  set -m
  "$WL" burn "$busy" >/dev/null 2>&1 &
  noisy_pgid=$!
  set +m
  sleep 0.3
  plain+=("$("$WL" spin "$iters")")
  kill -KILL -- "-$noisy_pgid" 2>/dev/null || true
  { wait "$noisy_pgid"; } 2>/dev/null || true
  noisy_pgid=""

  printf ', under pjw\n'
  # In a quiet subshell: the job is killed at the end of the round (SIGKILL), and bash reports
  # a child that dies of a signal ("Killed") on its own stderr.
  # (`; true` keeps the subshell from exec'ing the client, so it is not the one killed.)
  ( "$PJW" run --cpus 1 --job-id "noisy-$r" --name noisy -- "$WL" burn "$busy" >/dev/null; true ) 2>/dev/null &
  noisy_client=$!
  for _ in $(seq 100); do "$PJW" status --json | grep -q "\"noisy-$r\"" && break; sleep 0.02; done
  sleep 0.3
  if [ "$r" = 1 ]; then
    ( sleep 0.5; echo; echo "pjw status while the jailed reference runs:"; "$PJW" status | sed 's/^/  /'; echo ) &
    status_pid=$!
  fi
  jailed+=("$("$PJW" run --cpus 1 --job-id "ref-$r" --name reference -- "$WL" spin "$iters")")
  [ "$r" = 1 ] && wait "$status_pid"
  "$PJW" kill "noisy-$r" >/dev/null 2>&1 || true
  { wait "$noisy_client"; } 2>/dev/null || true
done

a=$(printf '%s\n' "${alone[@]}" | median)
p=$(printf '%s\n' "${plain[@]}" | median)
j=$(printf '%s\n' "${jailed[@]}" | median)
echo
load1=$(cut -d' ' -f1-3 /proc/loadavg)
awk -v a="$a" -v p="$p" -v j="$j" -v al="${alone[*]}" -v pl="${plain[*]}" -v jl="${jailed[*]}" 'BEGIN {
  sp = (p / a - 1) * 100; sj = (j / a - 1) * 100
  printf "%-44s %10s %10s   %s\n", "scenario", "median s", "slowdown", "runs (s)"
  printf "%-44s %10.3f %10s   %s\n", "reference alone", a, "", al
  printf "%-44s %10.3f %+9.1f%%   %s\n", "with noisy neighbour, no pjw", p, sp, pl
  printf "%-44s %10.3f %+9.1f%%   %s\n", "with noisy neighbour, both under pjw", j, sj, jl
  print ""
  ok = (sj <= 3 && sp >= 20)
  printf "jailed slowdown %+.1f%% (goal <= 3%%), plain slowdown %+.1f%% (expected >= 20%%): %s\n", sj, sp, ok ? "as expected" : "NOT as expected"
}'

# The results file: what README's demo table is generated from (scripts/bench-readme.sh).
# PJW_DEMO_RESULTS names another folder (a guest's demo keeps its figures out of the shared tree).
results=${PJW_DEMO_RESULTS:-$root/bench/results}
if [ -d "$results" ] && [ -w "$results" ]; then
  name=$(date -u -d "@$t0" +%Y-%m-%dT%H%M%SZ)-demo.md
  ncpus_host=$(nproc)
  loaded=$(awk -v a="${load0%% *}" -v b="${load1%% *}" -v n="$ncpus_host" 'BEGIN { print (a > 0.25 * n || b > 0.25 * n) ? 1 : 0 }')
  build=release
  [ "$PJW" = "$root/target/release/pjw" ] || build="$PJW (not the release build make demo uses)"
  commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  [ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit with uncommitted changes"
  set -o noclobber
  if ! {
    echo "# Demo — $(date -u -d "@$t0" '+%Y-%m-%d %H:%M:%S') UTC"
    echo
    echo "\`make demo\` (scripts/demo.sh) on $(hostname): $ncpus_host CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), Linux $(uname -r), $ncpu CPUs for jobs. Commit $commit, build: $build. Reference job: $iters iterations (about $SECONDS_PER_RUN s alone); noisy neighbour: $busy busy processes (asked for 1 CPU); $REPS rounds, medians (no confidence bound)."
    echo
    echo "Load: load average $load0 (1, 5, 15 min) at the start and $load1 at the end, on $ncpus_host CPUs."
    echo
    if [ "$loaded" = 1 ]; then
      echo "**NOT PUBLISHABLE: machine loaded (load average ${load0%% *} at the start, ${load1%% *} at the end on $ncpus_host CPUs).** Other work shared the CPUs the reference job ran on: the slowdowns carry its noise."
    else
      echo "The machine was idle by this demo's measure (load average at most a quarter of the CPUs at both ends)."
    fi
    echo
    awk -v a="$a" -v p="$p" -v j="$j" -v al="${alone[*]}" -v pl="${plain[*]}" -v jl="${jailed[*]}" 'BEGIN {
      sp = (p / a - 1) * 100; sj = (j / a - 1) * 100
      print "| scenario | run time (median) | slowdown | rounds (s) |"
      print "|---|---|---|---|"
      printf "| reference alone | %.3f s |  | %s |\n", a, al
      printf "| with the noisy neighbour, no pjw | %.3f s | %+.1f%% | %s |\n", p, sp, pl
      printf "| with the noisy neighbour, both under pjw | %.3f s | %+.1f%% | %s |\n", j, sj, jl
      print ""
      ok = (sj <= 3 && sp >= 20)
      printf "Jailed slowdown %+.1f%% (goal ≤ 3%%), plain slowdown %+.1f%% (expected ≥ 20%%): %s.\n", sj, sp, ok ? "as expected" : "NOT as expected"
    }'
  } > "$results/$name"; then
    echo "demo: $results/$name exists; not overwritten" >&2
  else
    echo "figures kept in $results/$name"
  fi
fi
