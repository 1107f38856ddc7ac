#!/usr/bin/env bash
# perf-run.sh: rcpipe against the classic request/response client (hiredis, a
# connection per thread), GET-only, 64-byte values, 10001 preloaded keys, on
# one local redis-server started for the purpose, for 1, 4, 16 and 64
# application threads. Each pair of runs is repeated (interleaved, order
# alternating) and the means are printed as a markdown table on stdout,
# ratios rcpipe/classic taken within the same invocation.
#
#   bench/perf-run.sh PATH/TO/rcp-bench [options]
#     --cluster            on a local cluster of 3 masters with 1 replica each
#                          (tests/scripts/cluster.sh) instead of one node:
#                          rcpipe is one rcp_cluster handle, classic a hiredis
#                          connection per thread per master
#     --test-time S        seconds per run (default 5)
#     --threads "LIST"     thread counts (default "1 4 16 64")
#     --reps N             repetitions of each pair (default 2)
#     --rcpipe-args "..."  extra rcp-bench options for the rcpipe runs only
#                          (e.g. "--batch-delay-us 50 --no-fast-path")
#     --keep DIR           keep every run's JSON and output in DIR
#
# Only the redis-servers this script starts are ever stopped (by pid).
set -euo pipefail

usage() {
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
bench=$1
shift
test_time=5
threads="1 4 16 64"
reps=2
rcpipe_args=""
keep=""
cluster=0
while [ $# -gt 0 ]; do
    case "$1" in
    --cluster) cluster=1; shift ;;
    --test-time) test_time=${2:?--test-time needs a value}; shift 2 ;;
    --threads) threads=${2:?--threads needs a value}; shift 2 ;;
    --reps) reps=${2:?--reps needs a value}; shift 2 ;;
    --rcpipe-args) rcpipe_args=${2?--rcpipe-args needs a value}; shift 2 ;;
    --keep) keep=${2:?--keep needs a directory}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "perf-run.sh: unknown option '$1'" >&2; usage ;;
    esac
done
if [ ! -x "$bench" ]; then
    echo "perf-run.sh: '$bench' is not an executable (build it: ninja -C build)" >&2
    exit 2
fi
case "$bench" in /*) ;; *) bench=$PWD/$bench ;; esac

here=$(cd "$(dirname "$0")" && pwd)
node="$here/../tests/scripts/redis-node.sh"
cluster_sh="$here/../tests/scripts/cluster.sh"
if [ -n "$keep" ]; then
    mkdir -p "$keep"
    out=$(cd "$keep" && pwd)
else
    out=$(mktemp -d -t rcp-perf.XXXXXX)
fi

pid=""
dir=""
cldir=""
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    if [ -n "$pid" ]; then
        "$node" stop "$pid" "$dir" || true
        pid=""
    fi
    if [ -n "$cldir" ]; then
        # cluster.sh writes cluster.env as soon as it starts a node, so
        # this also stops the nodes of a half-made cluster.
        if [ -f "$cldir/cluster.env" ]; then
            "$cluster_sh" stop "$cldir" >/dev/null || true
        fi
        rm -rf "$cldir"
        cldir=""
    fi
    if [ -z "$keep" ]; then
        rm -rf "$out"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$cluster" = 1 ]; then
    cldir=$(mktemp -d -t rcp-perf-cluster.XXXXXX)
    echo "perf-run.sh: starting a cluster (3 masters, 1 replica each) in $cldir" >&2
    server=$("$cluster_sh" start --masters 3 --replicas 1 --dir "$cldir")
    echo "perf-run.sh: cluster seed $server; results in $out" >&2
else
    started=$("$node" start)
    read -r port pid dir <<<"$started"
    server="127.0.0.1:$port"
    echo "perf-run.sh: redis-server pid $pid on $server; results in $out" >&2
fi

common=(-s "$server" --ratio 0:1 -d 64 --key-minimum 0 --key-maximum 10000)
"$bench" "${common[@]}" --client classic -t 1 -n 1 --preload >/dev/null

failed=0
run_one() { # client threads rep
    local client=$1 t=$2 rep=$3 extra=()
    local base="$out/$client-t$t-r$rep"
    if [ "$client" = rcpipe ] && [ -n "$rcpipe_args" ]; then
        # shellcheck disable=SC2206 # word splitting is the point
        extra=($rcpipe_args)
    fi
    echo "perf-run.sh: $client, $t threads, run $rep of $reps" >&2
    if ! "$bench" "${common[@]}" --client "$client" -t "$t" --test-time "$test_time" \
        --json-out-file "$base.json" "${extra[@]}" >"$base.txt" 2>&1; then
        echo "perf-run.sh: FAILED: $client, $t threads, run $rep (see below)" >&2
        tail -n 5 "$base.txt" >&2 || true
        rm -f "$base.json"
        failed=1
    fi
}

for t in $threads; do
    for rep in $(seq 1 "$reps"); do
        # Alternate the order so that drift favours neither client.
        if [ $((rep % 2)) -eq 1 ]; then
            run_one classic "$t" "$rep"
            run_one rcpipe "$t" "$rep"
        else
            run_one rcpipe "$t" "$rep"
            run_one classic "$t" "$rep"
        fi
    done
done

redis_version=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
# $threads is split on purpose: one argument per thread count.
# shellcheck disable=SC2086
python3 - "$out" "$reps" "$test_time" "$redis_version" "$rcpipe_args" "$cluster" $threads <<'PY'
import json, os, sys, statistics, platform, datetime

out, reps, test_time, redis_version, rcpipe_args, cluster = sys.argv[1:7]
threads = [int(t) for t in sys.argv[7:]]
reps = int(reps)
cluster = cluster == "1"

def load(client, t, rep):
    p = os.path.join(out, f"{client}-t{t}-r{rep}.json")
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else None

def fmt(v, nd=1):
    return "n/a" if v is None else f"{v:,.{nd}f}"

def ratio_cell(num, den, pairs):
    if num is None or den is None or den == 0:
        return "n/a"
    cell = f"{num / den:.2f}×"
    rs = [a / b for a, b in pairs if a is not None and b]
    if len(rs) > 1:
        cell += f" ({min(rs):.2f}–{max(rs):.2f})"
    return cell

where = "cluster (3 masters, 1 replica each)" if cluster else "one node"
print(f"### rcpipe vs classic on a {where}: GET, 64 B values, 10001 keys, "
      f"{test_time} s per run, mean of {reps} interleaved runs")
print()
if cluster:
    topo = ("3 masters + 3 replicas on 127.0.0.1; rcpipe: one rcp_cluster handle, "
            "classic: a hiredis connection per thread per master; "
            "srv CPU summed over the masters")
else:
    topo = "one node on 127.0.0.1"
print(f"redis-server {redis_version}, {topo}; {os.cpu_count()} CPUs; "
      f"{platform.system()} {platform.release()}; "
      f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}"
      + (f"; rcpipe options: `{rcpipe_args}`" if rcpipe_args else ""))
print()
cols = ["threads", "classic ops/s", "rcpipe ops/s", "ops/s ratio",
        "classic srv CPU µs/op", "rcpipe srv CPU µs/op", "srv CPU ratio",
        "classic p50/p99 µs", "rcpipe p50/p99 µs", "rcpipe futex wakes/op",
        "classic ctx sw/op", "rcpipe ctx sw/op", "rcpipe cmds/write"]
print("| " + " | ".join(cols) + " |")
print("|" + "|".join("---:" for _ in cols) + "|")
missing = 0
for t in threads:
    c = [load("classic", t, r) for r in range(1, reps + 1)]
    p = [load("rcpipe", t, r) for r in range(1, reps + 1)]
    missing += sum(1 for x in c + p if x is None)
    def m(runs, key):
        return mean([x.get(key) for x in runs if x is not None])
    def pairs(key):
        return [(b.get(key), a.get(key)) for a, b in zip(c, p)
                if a is not None and b is not None]
    c_ops, p_ops = m(c, "ops_per_sec"), m(p, "ops_per_sec")
    c_cpu, p_cpu = m(c, "server_cpu_us_per_op"), m(p, "server_cpu_us_per_op")
    row = [
        str(t),
        fmt(c_ops, 0), fmt(p_ops, 0), ratio_cell(p_ops, c_ops, pairs("ops_per_sec")),
        fmt(c_cpu, 2), fmt(p_cpu, 2), ratio_cell(p_cpu, c_cpu, pairs("server_cpu_us_per_op")),
        f"{fmt(m(c, 'p50_us'))} / {fmt(m(c, 'p99_us'))}",
        f"{fmt(m(p, 'p50_us'))} / {fmt(m(p, 'p99_us'))}",
        fmt(m(p, "futex_wakes_per_op"), 2),
        fmt(m(c, "ctx_switches_per_op"), 2), fmt(m(p, "ctx_switches_per_op"), 2),
        fmt(m(p, "commands_per_write"), 1),
    ]
    print("| " + " | ".join(row) + " |")
if cluster:
    runs = [load(cl, t, r) for cl in ("classic", "rcpipe") for t in threads
            for r in range(1, reps + 1)]
    runs = [x for x in runs if x is not None]
    moved = sum(x.get("cluster_moved") or 0 for x in runs)
    ask = sum(x.get("cluster_ask") or 0 for x in runs)
    rep_cpu = {cl: mean([x.get("replica_cpu_us_per_op") for x in runs
                         if x.get("client") == cl])
               for cl in ("classic", "rcpipe")}
    print()
    print(f"Redirects over all runs: MOVED {moved}, ASK {ask}. Replicas' CPU per request "
          f"(mean): classic {fmt(rep_cpu['classic'], 3)} µs, "
          f"rcpipe {fmt(rep_cpu['rcpipe'], 3)} µs.")
if missing:
    print()
    print(f"{missing} run(s) failed and are left out of the means.")
PY

exit "$failed"
