#!/usr/bin/env bash
# cork-curve.sh: adaptive corking (option cork) against no corking, in the
# same run, on a local cluster (3 masters + 3 replicas) started for the
# purpose. Every shape runs REPS times with the two variants interleaved,
# order alternating; one line per run on stdout (TSV), then the ranges.
#
#   bench/cork-curve.sh PATH/TO/rcp-bench [SECONDS_PER_RUN] [REPS]
#
# Columns: shape, cork (0/1), rep, ops/s, p50 us, p99 us, commands per
# write, server CPU us per op (masters), loop wakes per op, corked sends
# per op. docs/tuning.md ("Choosing cork") shows a run.
set -euo pipefail
bench=$(realpath "$1")
secs=${2:-5}
reps=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/rcp-cork.XXXXXX)
trap '"$src/tests/scripts/cluster.sh" stop "$dir/cluster" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
seed=$("$src/tests/scripts/cluster.sh" start --replicas 1 --dir "$dir/cluster" 2>/dev/null | tail -1)
"$bench" -s "$seed" -t 1 -n 1 --preload --key-maximum 10000 -d 64 >/dev/null 2>&1

shapes=(
    "sync-t1|-t 1"
    "sync-t16|-t 16"
    "sync-t64|-t 64"
    "open-t16-2k|-t 16 --rate-limiting 2000"
    "async-t1-d16|-t 1 --async-depth 16"
    "async-t4-d16|-t 4 --async-depth 16"
    "async-t4-d16-cb|-t 4 --async-depth 16 --refill callback"
)
printf 'shape\tcork\trep\tops\tp50\tp99\tcmd_per_write\tserver_us_op\tloop_wakes_op\tcorked_op\n'
for s in "${shapes[@]}"; do
    name=${s%%|*}
    args=${s#*|}
    for ((r = 1; r <= reps; r++)); do
        order="0 1"
        [ $((r % 2)) -eq 0 ] && order="1 0"
        for c in $order; do
            flag=""
            [ "$c" = 1 ] && flag=--cork
            # shellcheck disable=SC2086 # the shape's arguments are words
            "$bench" -s "$seed" $args $flag --ratio 0:1 -d 64 --key-maximum 10000 \
                --test-time "$secs" --json-out-file "$dir/r.json" >/dev/null 2>&1
            python3 - "$dir/r.json" "$name" "$c" "$r" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
f = lambda k: d.get(k) if d.get(k) is not None else float("nan")
print("\t".join([sys.argv[2], sys.argv[3], sys.argv[4], "%.0f" % f("ops_per_sec"),
                 "%.0f" % f("p50_us"), "%.0f" % f("p99_us"), "%.2f" % f("commands_per_write"),
                 "%.2f" % f("server_cpu_us_per_op"), "%.3f" % f("loop_wakes_per_op"),
                 "%.3f" % f("corked_per_op")]))
PY
        done
    done
done | tee "$dir/runs.tsv"
echo
echo "ranges (min-max over the reps), cork 0 | cork 1:"
python3 - "$dir/runs.tsv" <<'PY'
import sys, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = collections.OrderedDict()
for r in rows:
    by.setdefault(r[0], {"0": [], "1": []})[r[1]].append(r)
cols = ["ops", "p50", "p99", "cmd/write", "srv us/op", "loop wakes/op"]
print("| shape | " + " | ".join(cols) + " |")
print("|---|" + "---|" * len(cols))
for name, v in by.items():
    cells = []
    for i in range(3, 9):
        def rng(rs):
            xs = [float(x[i]) for x in rs]
            fmt = "%.0f" if i < 6 else ("%.2f" if i < 8 else "%.3f")
            return (fmt % min(xs)) + "-" + (fmt % max(xs))
        cells.append(rng(v["0"]) + " / " + rng(v["1"]))
    print("| " + name + " | " + " | ".join(cells) + " |")
PY
