#!/usr/bin/env bash
# bench/ab-builds.sh OLD_RCP_BENCH NEW_RCP_BENCH [REPS] [SECONDS]
#
# Two builds of the library side by side on one local cluster (3 masters,
# 1 replica each), interleaved run by run: GET 64 B ops/s of rcpipe (sync
# 1/4/64 threads, async 1x64 and 4x16 in flight) for both builds, and of
# the classic client (sync 1/4/64) as the in-run baseline. Prints one line
# per run: label, ops/s, commands per write, server CPU us per op.
set -u
OLD=$1 NEW=$2 REPS=${3:-3} T=${4:-3}
cd "$(dirname "$0")/.."
seed=$(tests/scripts/cluster.sh start 2>${TMPDIR:-/tmp}/ab-cluster.$$.err | tail -1)
dir=$(grep -o 'DIR=.*' ${TMPDIR:-/tmp}/ab-cluster.$$.err | head -1 | cut -d= -f2)
[ -z "$dir" ] && dir=$(sed -n 's/.*directory \(.*\)$/\1/p' ${TMPDIR:-/tmp}/ab-cluster.$$.err | head -1)
echo "seed=$seed dir=$dir" >&2
$NEW -s "$seed" --preload -d 64 --key-maximum 10000 -n 1 -t 1 >/dev/null 2>&1
run() { # label bin args...
  local label=$1 bin=$2; shift 2
  local j=/tmp/ab-$$.json
  timeout 60 $bin -s "$seed" --ratio 0:1 -d 64 --key-maximum 10000 --test-time $T --json-out-file $j "$@" >/dev/null 2>&1
  python3 -c "import json; d=json.load(open('$j')); print('$label', round(d['ops_per_sec']), 'cpw', d.get('commands_per_write'), 'srvcpu', d.get('server_cpu_us_per_op'))" 2>/dev/null || echo "$label FAIL"
}
for r in $(seq 1 $REPS); do
  for t in 1 4 64; do
    run "rep$r classic t$t" $NEW --client classic -t $t
    run "rep$r old t$t" $OLD -t $t
    run "rep$r new t$t" $NEW -t $t
  done
  for m in "1 64" "4 16"; do set -- $m
    run "rep$r old a$1x$2" $OLD -t $1 --async-depth $2
    run "rep$r new a$1x$2" $NEW -t $1 --async-depth $2
  done
done
tests/scripts/cluster.sh stop "$dir" >/dev/null 2>&1
