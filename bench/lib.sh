# shellcheck shell=bash
# Shared by bench/run.sh and every bench/scenarios/*.sh (sourced, not run).
#
# A scenario script sets SCENARIO, sources this file, and then:
#   - starts private daemons with start_daemon (cgroups only below this process's own cgroup,
#     `--cgroup-parent self/<unique name>`), background processes with spawn (tracked by PID);
#   - reports progress with step I N TEXT (working on part I of N);
#   - adds table rows with row MEASURED ANCHOR GOAL RESULT [LABEL] and notes with note TEXT;
#   - may write SVG plots into $BENCH_OUT/plots.
# On exit, even a failed one, cleanup stops the daemons, kills the processes it started (by
# PID), kills what is left in its cgroups, removes them depth first, turns off and removes its
# swap file, and prints the scenario's own table.
set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PJW=${PJW:-$BENCH_ROOT/target/release/pjw}
WL=${WL:-$BENCH_ROOT/target/release/pjw-wl}
# shellcheck disable=SC2034 # read by the scenarios
QUICK=${BENCH_QUICK:-0}
# Where rows, notes, raw samples and plots go; run.sh shares one directory between scenarios.
if [ -z "${BENCH_OUT:-}" ]; then
  BENCH_OUT=$(mktemp -d /var/tmp/pjw-bench-out.XXXXXX)
  BENCH_STANDALONE=1
fi
mkdir -p "$BENCH_OUT/plots" "$BENCH_OUT/raw"
BENCH_INDEX=${BENCH_INDEX:-1}
BENCH_TOTAL=${BENCH_TOTAL:-1}
BENCH_T0=${BENCH_T0:-$EPOCHREALTIME}

# A scenario that runs no daemon (central: its own load generator) sets BENCH_NEEDS_PJW=0.
if [ "${BENCH_NEEDS_PJW:-1}" != 0 ] && { [ ! -x "$PJW" ] || [ ! -x "$WL" ]; }; then
  echo "bench: build first (make bench does): cargo build --release --workspace --bins" >&2; exit 1
fi
[ "$(id -u)" = 0 ] || { echo "bench: must run as root (pjw manages cgroups)" >&2; exit 1; }

WORK=$(mktemp -d "/var/tmp/pjw-bench-$SCENARIO.XXXXXX")
DAEMON_PID=""
DAEMON_LOG=$WORK/daemon.log
SUBS=()     # cgroup sub-parents this scenario's daemons used
BGPIDS=()   # background processes this scenario started
SWAPFILE=""
ROWS=$BENCH_OUT/rows.tsv
NOTES=$BENCH_OUT/notes.md
touch "$ROWS" "$NOTES"
SCEN_ROWS=$WORK/rows.tsv
: > "$SCEN_ROWS"

# ---------------------------------------------------------------------------------------------
# Progress: one line, rewritten in place on a terminal; plain lines otherwise.

step() {
  local i=$1 n=$2 text=$3
  local frac width=24 filled el
  frac=$(awk -v a="$BENCH_INDEX" -v t="$BENCH_TOTAL" -v i="$i" -v n="$n" 'BEGIN{f=(a-1+(n>0?(i-1)/n:0))/t; if(f>1)f=1; print f}')
  filled=$(awk -v f="$frac" -v w="$width" 'BEGIN{printf "%d", f*w+0.5}')
  el=$(awk -v a="$BENCH_T0" -v b="$EPOCHREALTIME" 'BEGIN{s=int(b-a); printf "%d:%02d", s/60, s%60}')
  local bar
  bar=$(printf '%*s' "$filled" '' | tr ' ' '#')$(printf '%*s' "$((width - filled))" '' | tr ' ' '.')
  if [ -t 2 ]; then
    printf '\r\033[K[%s] %s %d/%d %s: %s' "$bar" "$el" "$BENCH_INDEX" "$BENCH_TOTAL" "$SCENARIO" "$text" >&2
  else
    printf '[%s] %s %d/%d %s: %s\n' "$bar" "$el" "$BENCH_INDEX" "$BENCH_TOTAL" "$SCENARIO" "$text" >&2
  fi
}
step_done() { [ -t 2 ] && printf '\r\033[K' >&2 || true; }

# ---------------------------------------------------------------------------------------------
# Results.

# row MEASURED ANCHOR GOAL RESULT [LABEL]: one table row (LABEL defaults to the scenario).
row() {
  printf '%s\t%s\t%s\t%s\t%s\n' "${5:-$SCENARIO}" "$1" "$2" "$3" "$4" | tee -a "$ROWS" >> "$SCEN_ROWS"
}
note() { printf -- '- **%s**: %s\n' "$SCENARIO" "$*" >> "$NOTES"; }

# print_table FILE: a Markdown table of TSV rows.
print_table() {
  printf '| scenario | measured | anchor | pjw'"'"'s goal | result |\n|---|---|---|---|---|\n'
  awk -F'\t' '{printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5}' "$1"
}

# ---------------------------------------------------------------------------------------------
# Numbers.

# http_get URL: the body on stdout; curl where it is installed, else python3 (the systemd guest's
# lean image has python3 but no curl).
http_get() {
  if command -v curl >/dev/null; then curl -s "$1"
  else python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1" 2>/dev/null; fi
}
now() { printf '%s\n' "$EPOCHREALTIME"; }
# nap SECONDS: sleep without starting a process (bash's read, with a timeout, on a FIFO nobody
# writes). A timed loop's pacing then takes nothing from the jobs it times: an external `sleep`
# is a fork and an exec, about 1 ms of CPU each here, which a FIFO runner's rows do not pay.
NAP_FD=""
nap() {
  if [ -z "$NAP_FD" ]; then
    [ -p "$WORK/nap.fifo" ] || mkfifo "$WORK/nap.fifo"
    exec {NAP_FD}<>"$WORK/nap.fifo"
  fi
  read -r -t "$1" -u "$NAP_FD" _ || true
}
# stats: numbers on stdin -> "n mean sd ci95 median min max" (ci95: half-width, Student t).
stats() {
  sort -g | awk '
    { x[NR]=$1; s+=$1 }
    END {
      n=NR; if (n==0) { print "0 0 0 0 0 0 0"; exit }
      m=s/n; for (i=1;i<=n;i++) v+=(x[i]-m)^2
      sd=(n>1)?sqrt(v/(n-1)):0
      split("12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042", t, " ")
      tv=(n-1>=1 && n-1<=30)?t[n-1]:1.96
      ci=(n>1)?tv*sd/sqrt(n):0
      med=(n%2)?x[(n+1)/2]:(x[n/2]+x[n/2+1])/2
      printf "%d %.6g %.6g %.6g %.6g %.6g %.6g\n", n, m, sd, ci, med, x[1], x[n]
    }'
}
median() { stats | awk '{print $5}'; }
# Verdicts on the 95% bound in the unfavourable direction, not the mean (run.sh's header):
#   verdict_le VALUE CI GOAL   a figure that must be at most GOAL
#   verdict_ge VALUE CI GOAL   a figure that must be at least GOAL
# met when the unfavourable bound meets the goal, short when even the favourable one misses it,
# "within noise" in between.
verdict_le() { calc "v = $1; c = $2; g = $3; print (v + c <= g) ? \"met\" : (v - c > g) ? \"short\" : \"within noise\""; }
verdict_ge() { calc "v = $1; c = $2; g = $3; print (v - c >= g) ? \"met\" : (v + c < g) ? \"short\" : \"within noise\""; }
# verdict_all V...: short if any is short, else within noise if any is, else met.
verdict_all() {
  local v r=met
  for v in "$@"; do
    case $v in short) r=short ;; "within noise") [ "$r" = short ] || r="within noise" ;; esac
  done
  echo "$r"
}
calc() { awk "BEGIN{ $1 }" </dev/null; }
cpu_secs() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f\n", ($14+$15)/hz}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# CPU seconds of all live threads of a process, in ns resolution (schedstat).
cpu_secs_fine() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.6f\n", s / 1e9}'; }
rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$1/status"; }
# Private (anonymous + dirty) memory of a process in KiB, from smaps_rollup.
private_kib() { awk '/^Private_(Clean|Dirty):/{s+=$2} END{print s+0}' "/proc/$1/smaps_rollup"; }
# Wall-clock seconds of an RFC 3339 timestamp from the daemon log.
log_secs() { date -d "$1" +%s.%N; }

# ---------------------------------------------------------------------------------------------
# Daemons, background processes, cgroups.

# bench_parent SUB: the daemon's --cgroup-parent: self/SUB, or SUB in the bench's delegated scope
# pjw-bench-<pid>.scope where systemd runs on pure cgroup v2 (scripts/pjw-scope; a login
# session's own cgroup cannot hold job cgroups there). The scope is stopped on exit.
BENCH_SCOPE=""
BENCH_PARENT=""
bench_parent() {   # sets BENCH_PARENT (not in a subshell: BENCH_SCOPE must stick)
  if [ -z "$BENCH_SCOPE" ] && "$BENCH_ROOT/scripts/pjw-scope" --needed; then
    BENCH_SCOPE=$("$BENCH_ROOT/scripts/pjw-scope" --watch $$ "pjw-bench-$$")
  fi
  if [ -n "$BENCH_SCOPE" ]; then BENCH_PARENT="$BENCH_SCOPE/$1"; else BENCH_PARENT="self/$1"; fi
}

# start_daemon CONFIG-LINE...: a private daemon on $WORK/pjw.sock below bench_parent <unique>.
start_daemon() {
  stop_daemon
  local sub="pjw-bench-$SCENARIO-$$-$RANDOM"
  SUBS+=("$sub")
  export PJW_SOCKET=$WORK/pjw.sock
  printf '%s\n' "$@" > "$WORK/pjw.toml"
  : > "$DAEMON_LOG"
  bench_parent "$sub"
  "$PJW" daemon --config "$WORK/pjw.toml" --socket "$PJW_SOCKET" --state-dir "$WORK/state-$sub" \
    --cgroup-parent "$BENCH_PARENT" 2>>"$DAEMON_LOG" &
  DAEMON_PID=$!
  DAEMON_SUB=$sub
  for _ in $(seq 500); do
    if "$PJW" status >/dev/null 2>&1; then
      [ -z "${BENCH_PARENT_CPU_SHARES:-}" ] || parent_cpu_shares "$BENCH_PARENT_CPU_SHARES"
      return 0
    fi
    kill -0 "$DAEMON_PID" 2>/dev/null || break
    sleep 0.02
  done
  echo "bench: the daemon did not start:" >&2; cat "$DAEMON_LOG" >&2; exit 1
}

# An experiment, not pjw's behaviour: give the daemon's parent cgroup the CPU weight of SHARES/1024
# plain processes (cpu.shares on v1; cpu.weight, 100 per 1024, on v2). pjw leaves the default
# (1024 / 100: all jobs together weigh as much as one process outside pjw). BENCH_PARENT_CPU_SHARES.
parent_cpu_shares() {
  local d
  for d in $(cgroup_dirs "$DAEMON_SUB"); do
    [ -w "$d/cpu.shares" ] && echo "$1" > "$d/cpu.shares"
    [ -w "$d/cpu.weight" ] && echo "$(( $1 * 100 / 1024 ))" > "$d/cpu.weight"
  done
  return 0
}

# Kill every job of the current daemon, then stop it (SIGTERM).
stop_daemon() {
  [ -n "$DAEMON_PID" ] || return 0
  local j
  for j in $("$PJW" status --json 2>/dev/null | sed -n 's/^ *"id": "\([^"]*\)".*/\1/p'); do
    "$PJW" kill "$j" >/dev/null 2>&1 || true
  done
  sleep 0.3
  kill -TERM "$DAEMON_PID" 2>/dev/null || true
  wait "$DAEMON_PID" 2>/dev/null || true
  DAEMON_PID=""
}

# spawn CMD...: start CMD in the background and remember its PID (in $!, as usual).
spawn() { "$@" & BGPIDS+=("$!"); }
# spawn_group CMD...: the same in a process group of its own (setsid), for commands that start
# children of their own; kill_group PID ends the whole group.
PGROUPS=()
spawn_group() { setsid "$@" & PGROUPS+=("$!"); }
kill_group() { kill -KILL -- "-$1" 2>/dev/null || true; { wait "$1"; } 2>/dev/null || true; }

# The directories of cgroup SUB below this process's cgroup (or in the bench's scope), one per
# hierarchy that has it.
cgroup_dirs() {
  local sub=$1
  if [ -n "$BENCH_SCOPE" ]; then echo "/sys/fs/cgroup$BENCH_SCOPE/$sub"; return; fi
  BENCH_SELF_CG=$(cat /proc/$$/cgroup) awk -v sub_="$sub" '
    BEGIN {
      n = split(ENVIRON["BENCH_SELF_CG"], lines, "\n")
      for (i = 1; i <= n; i++) {
        split(lines[i], f, ":")
        ctl = f[2]; p = lines[i]; sub(/^[^:]*:[^:]*:/, "", p)
        if (ctl == "") v2 = p; else { m = split(ctl, c, ","); for (k = 1; k <= m; k++) path[c[k]] = p }
      }
    }
    $0 ~ / - cgroup2? / {
      split($0, halves, " - "); split(halves[2], t, " ")
      mnt = $5; root = $4
      if (t[1] == "cgroup2") p = v2
      else { p = ""; m = split(t[3], o, ","); for (k = 1; k <= m; k++) if (o[k] in path) p = path[o[k]] }
      if (p == "" && t[1] != "cgroup2") next
      if (root != "/" && index(p, root) == 1) p = substr(p, length(root) + 1)
      if (p == "/") p = ""
      print mnt p "/" sub_
    }' /proc/self/mountinfo | sort -u
}

# Thaw, empty (kill the processes inside: all started by this scenario) and remove SUB's cgroups.
remove_cgroups() {
  local sub=$1 d c pid
  for d in $(cgroup_dirs "$sub"); do
    [ -d "$d" ] || continue
    # Deepest first.
    while read -r c; do
      [ -w "$c/freezer.state" ] && echo THAWED > "$c/freezer.state" 2>/dev/null || true
      [ -w "$c/cgroup.freeze" ] && echo 0 > "$c/cgroup.freeze" 2>/dev/null || true
      if [ -r "$c/cgroup.procs" ]; then
        while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done < "$c/cgroup.procs"
      fi
    done < <(find "$d" -depth -type d 2>/dev/null)
    while read -r c; do
      for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$c" 2>/dev/null && break; sleep 0.1; done
    done < <(find "$d" -depth -type d 2>/dev/null)
  done
}

enable_swap() { # enable_swap SIZE: a swap file in $WORK, removed on exit
  SWAPFILE=$WORK/swap
  fallocate -l "$1" "$SWAPFILE"
  chmod 600 "$SWAPFILE"
  mkswap "$SWAPFILE" >/dev/null
  swapon "$SWAPFILE"
}
disable_swap() {
  [ -n "$SWAPFILE" ] || return 0
  swapoff "$SWAPFILE" 2>/dev/null || true
  rm -f "$SWAPFILE"
  SWAPFILE=""
}

# ---------------------------------------------------------------------------------------------
# Slurm, for the baseline rows: a live Slurm is measured, never typed in.
#
# slurm_live: 0 when srun answers, with SLURM_CONF exported; otherwise 1 and SLURM_WHY says why
# (for a "not measured (...)" row). BENCH_SLURM_CONF=FILE uses a running Slurm's configuration;
# BENCH_SLURM=up starts a private one (scripts/wlm/slurm-up.sh in $WORK, its Prolog and Epilog
# no-ops: Slurm alone, without pjw) unless another of the project's is up (the live tests'
# Slurm is theirs: the bench neither shares nor stops it), and cleanup stops it by its pids.
BENCH_SLURM_DIR=""
BENCH_SLURM_OK=""
SLURM_WHY=""
slurm_live() {
  [ -z "$SLURM_WHY" ] || return 1
  [ -z "$BENCH_SLURM_OK" ] || return 0
  if ! command -v srun >/dev/null; then
    SLURM_WHY="Slurm is not installed here (no srun; scripts/wlm/install.sh installs it)"; return 1
  fi
  if [ -n "${BENCH_SLURM_CONF:-}" ]; then
    export SLURM_CONF=$BENCH_SLURM_CONF
  elif [ "${BENCH_SLURM:-}" = up ]; then
    # A slurmctld the previous scenario stopped may linger as a zombie until PID 1 reaps it:
    # only a live one is another Slurm.
    if [ -e /var/tmp/pjw-wlm/slurm.dir ] || pgrep -x --runstates RSDT slurmctld >/dev/null 2>&1; then
      SLURM_WHY="another Slurm is up on this machine (the live tests'?: $(cat /var/tmp/pjw-wlm/slurm.dir 2>/dev/null || echo "no marker") slurmctld pid $(pgrep -x --runstates RSDT slurmctld 2>/dev/null | head -1)), which the bench neither shares nor stops"; return 1
    fi
    BENCH_SLURM_DIR=$WORK/slurm
    mkdir -p "$BENCH_SLURM_DIR"; chmod 755 "$WORK" "$BENCH_SLURM_DIR"
    # The hooks exec "$PJW slurm prolog": /bin/true makes them no-ops, and PJW_SPANK=0 leaves
    # pjw's SPANK plugin out of plugstack.conf (it refuses a task no pjw daemon takes): Slurm alone.
    printf 'PJW=/bin/true\n' > "$BENCH_SLURM_DIR/env"
    if ! PJW_SPANK=0 "$BENCH_ROOT/scripts/wlm/slurm-up.sh" "$BENCH_SLURM_DIR" "$BENCH_SLURM_DIR/env" > "$WORK/slurm-up.log" 2>&1; then
      SLURM_WHY="scripts/wlm/slurm-up.sh failed: $(tail -1 "$WORK/slurm-up.log")"; return 1
    fi
    export SLURM_CONF=$BENCH_SLURM_DIR/slurm.conf
  else
    SLURM_WHY="no live Slurm given to the bench (BENCH_SLURM_CONF=slurm.conf of a running one, or BENCH_SLURM=up to start a private one)"; return 1
  fi
  if ! timeout 30 srun -n1 /bin/true >/dev/null 2>"$WORK/srun.err"; then
    SLURM_WHY="srun -n1 /bin/true failed with SLURM_CONF=$SLURM_CONF: $(head -c 160 "$WORK/srun.err" | tr '\n' ' ')"; return 1
  fi
  BENCH_SLURM_OK=1
  return 0
}

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  [ -z "$BENCH_SLURM_DIR" ] || "$BENCH_ROOT/scripts/wlm/down.sh" "$BENCH_SLURM_DIR" >/dev/null 2>&1
  stop_daemon
  local p s
  for p in "${PGROUPS[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
  for p in "${BGPIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${BGPIDS[@]}"; do wait "$p" 2>/dev/null; done
  for s in "${SUBS[@]}"; do remove_cgroups "$s"; done
  # The delegated scope (systemd + pure v2): stopping it kills what is left in it and removes it.
  [ -z "$BENCH_SCOPE" ] || "$BENCH_ROOT/scripts/pjw-scope" --stop "pjw-bench-$$"
  disable_swap
  step_done
  if [ $rc -ne 0 ]; then
    row "failed (exit $rc)" "" "" "short"
    echo "bench: scenario $SCENARIO failed (exit $rc)" >&2
  fi
  echo
  echo "## $SCENARIO"
  print_table "$SCEN_ROWS"
  [ -n "${BENCH_STANDALONE:-}" ] && echo "(raw samples and plots: $BENCH_OUT)"
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# fill_node N PROCS [CMD...]: submit N jobs to the current daemon (ids fill-1..N), each running
# PROCS sleeping processes once started (or CMD); as many run as `vcpus` allows, the rest wait
# in the queue. Returns when the daemon knows all N. Their client PIDs are in FILL_PIDS.
FILL_PIDS=()
fill_node() {
  local n=$1 procs=$2 i cmd
  if [ $# -gt 2 ]; then shift 2; cmd=("$@")
  elif [ "$procs" -le 1 ]; then cmd=(sleep 3600)
  else cmd=(sh -c "for i in \$(seq $((procs - 1))); do sleep 3600 & done; wait"); fi
  for i in $(seq "$n"); do
    "$PJW" run -q --job-id "fill-$i" -- "${cmd[@]}" </dev/null >/dev/null 2>&1 &
    FILL_PIDS+=("$!"); BGPIDS+=("$!")
    [ $((i % 100)) = 0 ] && step "$i" "$n" "submitting jobs: $i/$n"
  done
  local have=0
  for _ in $(seq 600); do
    have=$("$PJW" status --json | grep -c '"id": "fill-' || true)
    [ "$have" -ge "$n" ] && return 0
    sleep 0.2
  done
  echo "bench: only $have of $n jobs reached the daemon" >&2
  return 1
}
# Withdraw and end the jobs fill_node made (closing a waiting client withdraws its job; the
# daemon kills what is left in a job's cgroups when its main process exits).
drain_node() {
  local p
  for p in "${FILL_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${FILL_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  FILL_PIDS=()
}
