#!/usr/bin/env bash
# bench/ab-instructions.sh OLD_BUILD_DIR NEW_BUILD_DIR
#
# Instructions per request (callgrind) of two builds, cluster GET 64 B on a
# local cluster, sync 1 thread and async depth 16: (Ir of 4000 requests -
# Ir of 2000) / 2000, so start-up and the cluster's bootstrap cancel out.
set -u
OLD=$1 NEW=$2
cd "$(dirname "$0")/.."
T=${TMPDIR:-/tmp}
dir=$(mktemp -d "$T/cg-cluster.XXXXXX")
seed=$(tests/scripts/cluster.sh start --dir "$dir" 2>$T/cg-cluster.$$.err | tail -1)
$NEW/bench/rcp-bench -s "$seed" --preload -d 64 --key-maximum 10000 -n 1 -t 1 >/dev/null 2>&1
for mode in sync async; do
  extra=""; [ $mode = async ] && extra="--async-depth 16"
  for b in old new; do
    bin=$OLD/bench/rcp-bench; [ $b = new ] && bin=$NEW/bench/rcp-bench
    for n in 2000 4000; do
      valgrind --tool=callgrind --callgrind-out-file=$T/cg-$mode-$b-$n.out $bin -s "$seed" --ratio 0:1 -d 64 --key-maximum 10000 -n $n -t 1 $extra >/dev/null 2>&1
    done
    a=$(callgrind_annotate $T/cg-$mode-$b-2000.out 2>/dev/null | grep -m1 'PROGRAM TOTALS' | awk '{gsub(",","",$1); print $1}')
    c=$(callgrind_annotate $T/cg-$mode-$b-4000.out 2>/dev/null | grep -m1 'PROGRAM TOTALS' | awk '{gsub(",","",$1); print $1}')
    echo "$mode $b $(( (c - a) / 2000 )) instructions/request"
  done
done
tests/scripts/cluster.sh stop "$dir" >/dev/null 2>&1
