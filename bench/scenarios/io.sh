#!/usr/bin/env bash
# fair I/O (issue 17): two jobs reading the same disk. A reference job reads its file with direct
# I/O (dd iflag=direct: no page cache) alone, then beside a neighbour job that reads its own file
# in a loop: with no pjw setting, with pjw's I/O weight (reference 1000, neighbour 10), and with
# an io.max/blkio.throttle read limit on the neighbour. Then a job limited to IO_BPS reads and
# writes with direct I/O: does the limit hold it within 10%?
# The disk is the one behind /var/tmp (the files live in this scenario's $WORK there). A weight
# only acts where the disk's scheduler weighs cgroups (BFQ; v2 io.weight also with io.cost):
# the scheduler is reported beside the figures, which are reported whatever they show.
# Anchor: no peer limits or weighs a job's block I/O (Slurm, PBS, HTCondor, Flux, kubelet).
SCENARIO=io
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"

REPS=${IO_REPS:-$([ "$QUICK" = 1 ] && echo 2 || echo 5)}
MIB=${IO_MIB:-$([ "$QUICK" = 1 ] && echo 256 || echo 1024)}   # the reference's file
BPS_MIB=${IO_BPS_MIB:-100}                                     # the throttle test's limit, MiB/s
T_MIB=${IO_T_MIB:-$((BPS_MIB * 3))}                            # ... and what it moves (~3 s)
NB_LIMIT_MIB=${IO_NB_LIMIT_MIB:-50}                            # the neighbour's read limit

dev=$(findmnt -no MAJ:MIN -T "$WORK" | tr -d ' ')
name=$(basename "$(readlink -f "/sys/dev/block/$dev")")
# A partition's limits go on its disk (as pjw resolves a path).
[ -e "/sys/dev/block/$dev/partition" ] && { dev=$(cat "/sys/dev/block/$dev/../dev"); name=$(basename "$(readlink -f "/sys/dev/block/$dev")"); }
sched=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "/sys/block/$name/queue/scheduler" 2>/dev/null || echo unknown)
mode=$([ -e /sys/fs/cgroup/cgroup.controllers ] && echo "cgroup v2" || echo "cgroup v1 blkio")
echo "io: disk $name ($dev), scheduler $sched, $mode" > "$BENCH_OUT/raw/io.txt"

step 1 6 "files ($MIB MiB each, direct I/O)"
dd if=/dev/zero of="$WORK/ref" bs=1M count="$MIB" oflag=direct status=none
dd if=/dev/zero of="$WORK/nb" bs=1M count="$MIB" oflag=direct status=none
start_daemon 'cpus = "0-1"' 'vcpus = 4'

# MB/s (10^6 bytes) of one dd, from its stderr ("N bytes ... copied, T s, ...").
rate() { LC_ALL=C sed -n 's/^\([0-9]*\) bytes.* copied, \([0-9.e+-]*\) s.*/\1 \2/p' | awk '{ if ($2 > 0) printf "%.1f\n", $1 / $2 / 1e6 }'; }

# ref_read ARGS...: one read of the reference file as a pjw job with ARGS; MB/s.
ref_read() { "$PJW" run -q "$@" -- dd if="$WORK/ref" of=/dev/null bs=1M iflag=direct 2>&1 </dev/null | rate; }

# with_neighbour NB-ARGS -- REF-ARGS: REPS reads of the reference beside a looping neighbour.
with_neighbour() {
  local nb=() ref=() seen=0 a
  for a in "$@"; do if [ "$a" = -- ]; then seen=1; elif [ $seen = 0 ]; then nb+=("$a"); else ref+=("$a"); fi; done
  spawn "$PJW" run -q --job-id nb "${nb[@]}" -- sh -c "while :; do dd if='$WORK/nb' of=/dev/null bs=1M iflag=direct status=none; done" </dev/null >/dev/null 2>&1
  local nbpid=$!
  for _ in $(seq 100); do "$PJW" status --json | grep -q '"id": "nb"' && break; sleep 0.05; done
  sleep 0.5
  for _ in $(seq "$REPS"); do ref_read "${ref[@]}"; done
  "$PJW" kill nb >/dev/null 2>&1 || true
  wait "$nbpid" 2>/dev/null || true
}

step 2 6 "reference alone"
alone=$(for _ in $(seq "$REPS"); do ref_read; done)
step 3 6 "beside a neighbour, no pjw setting"
plain=$(with_neighbour --)
step 4 6 "beside a neighbour, weights 1000 / 10"
weighted=$(with_neighbour --io-weight 10 -- --io-weight 1000)
step 5 6 "beside a neighbour limited to $NB_LIMIT_MIB MiB/s"
limited=$(with_neighbour --io-max "$WORK rbps=${NB_LIMIT_MIB}M" --)

step 6 6 "throttle: $BPS_MIB MiB/s, direct reads and writes"
lim=$(calc "printf \"%.1f\", $BPS_MIB * 1048576 / 1e6")
t_read=$(for _ in $(seq "$REPS"); do
  "$PJW" run -q --io-max "$WORK rbps=${BPS_MIB}M" -- dd if="$WORK/ref" of=/dev/null bs=1M count="$T_MIB" iflag=direct 2>&1 </dev/null | rate
done)
t_write=$(for _ in $(seq "$REPS"); do
  "$PJW" run -q --io-max "$WORK wbps=${BPS_MIB}M" -- dd if=/dev/zero of="$WORK/w" bs=1M count="$T_MIB" oflag=direct 2>&1 </dev/null | rate
done)
stop_daemon
rm -f "$WORK/ref" "$WORK/nb" "$WORK/w"

{ echo "alone: $alone" ; echo "plain: $plain"; echo "weighted: $weighted"; echo "limited: $limited"
  echo "throttle read: $t_read"; echo "throttle write: $t_write"; } | tr '\n' ' ' | sed 's/ \+/ /g' >> "$BENCH_OUT/raw/io.txt"
echo >> "$BENCH_OUT/raw/io.txt"

# "mean ± ci" and its parts.
fmt() { stats | awk '{printf "%.0f ± %.0f", $2, $4}'; }
part() { stats | awk -v k="$1" '{print (k == "m") ? $2 : $4}'; }
a_m=$(part m <<<"$alone")
l_m=$(part m <<<"$limited"); l_c=$(part c <<<"$limited")
frac_l=$(calc "printf \"%.2f\", $l_m / $a_m")
row "reference job's direct read, MB/s ($REPS reps each; disk $name, $sched, $mode): alone $(fmt <<<"$alone"); beside a reading neighbour $(fmt <<<"$plain"); with weights 1000/10 $(fmt <<<"$weighted"); neighbour limited to $NB_LIMIT_MIB MiB/s $(fmt <<<"$limited") (${frac_l} of alone)" \
  "no peer limits or weighs a job's block I/O (Slurm, PBS, HTCondor, Flux, kubelet)" \
  "limiting the neighbour gives the reference ≥ 80% of its throughput alone" \
  "$(verdict_ge "$l_m" "$l_c" "$(calc "print 0.8 * $a_m")")" "fair I/O: neighbour"
r_m=$(part m <<<"$t_read"); r_c=$(part c <<<"$t_read")
w_m=$(part m <<<"$t_write"); w_c=$(part c <<<"$t_write")
row "a job limited to $BPS_MIB MiB/s ($lim MB/s) moving $T_MIB MiB with direct I/O: reads $(fmt <<<"$t_read") MB/s, writes $(fmt <<<"$t_write") MB/s" \
  "io.max / blkio.throttle, which pjw now sets per job" "within 10% of the limit (95% bound)" \
  "$(verdict_all "$(verdict_le "$(calc "print ($r_m > $lim) ? $r_m - $lim : $lim - $r_m")" "$r_c" "$(calc "print 0.1 * $lim")")" \
                 "$(verdict_le "$(calc "print ($w_m > $lim) ? $w_m - $lim : $lim - $w_m")" "$w_c" "$(calc "print 0.1 * $lim")")")" \
  "fair I/O: throttle"
case $sched in
  bfq) ;;
  *) note "the weights act only where the disk's scheduler weighs cgroups (BFQ; on cgroup v2 io.weight also with io.cost): $name uses $sched here, so the weighted run shows what the kernel does without them — no difference is expected, and none is claimed." ;;
esac
