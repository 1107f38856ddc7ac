#!/usr/bin/env bash
# Smoke test of rcp-bench (meson test --suite bench): so the tool cannot rot.
#
#   smoke.sh PATH/TO/rcp-bench
#
# Starts one redis-server (tests/scripts/redis-node.sh) and a 3-master,
# 0-replica cluster (tests/scripts/cluster.sh), runs the tool for a fraction
# of a second in every mode (sync rcpipe and classic, --async-depth,
# --pipeline, --rate-limiting, key patterns, --count-allocs, --stream) on
# both, --big-thread on each (also held to a byte rate: --big-rate), the
# client cache with a writer on the cluster, and
# checks: exit 0, "ALL STATS" printed, the JSON parses, ops > 0, errors 0,
# hits + misses == gets, the mode and the keys each option adds, and that
# --big-rate keeps the big thread under its cap (plus one value). Then that
# --stream SETs store the bench's pattern (read back with GET, sync on the
# node and async on the cluster) and that two 32 MiB ones raise the peak RSS
# by less than 16 MiB over two 1 KiB ones. Then checks
# with DBSIZE that the key patterns and seeds choose the keys they promise,
# and that bad options exit 2. Then, when rcp-bench has TLS, a TLS-only
# 3-master cluster (certificates made by tests/scripts/tls-certs.sh): rcpipe
# sync (with --preload), async and classic over --tls, and a wrong CA
# refused. Every server is stopped on exit.
#
# This measures nothing: the runs are too short and the machine is shared.
set -euo pipefail

BENCH=${1:?usage: smoke.sh PATH/TO/rcp-bench}
HERE=$(cd "$(dirname "$0")" && pwd)
SCRIPTS=$HERE/../tests/scripts
REDIS_CLI=${REDIS_CLI:-redis-cli}
T=${SMOKE_TEST_TIME:-0.6}

tmp=$(mktemp -d -t rcp-bench-smoke.XXXXXX)
node_pid="" node_dir="" cl_dir="" tls_dir=""
cleanup() {
    if [ -n "$node_pid" ]; then "$SCRIPTS/redis-node.sh" stop "$node_pid" "$node_dir" || true; fi
    if [ -n "$cl_dir" ]; then "$SCRIPTS/cluster.sh" stop "$cl_dir" >/dev/null 2>&1 || true; fi
    if [ -n "$tls_dir" ]; then
        RCP_CLUSTER_TLS_DIR=$tmp/certs "$SCRIPTS/cluster.sh" stop "$tls_dir" >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
    echo "smoke: FAIL: $*" >&2
    exit 1
}

"$SCRIPTS/redis-node.sh" start >"$tmp/node"
read -r node_port node_pid node_dir <"$tmp/node"
[ -n "$node_dir" ] || fail "redis-node.sh start printed '$(cat "$tmp/node")'"
cl_dir=$tmp/cluster
seed=$("$SCRIPTS/cluster.sh" start --masters 3 --replicas 0 --dir "$cl_dir" 2>"$tmp/cluster.log") ||
    fail "cluster.sh start: $(cat "$tmp/cluster.log")"
single=127.0.0.1:$node_port
echo "smoke: node $single, cluster seed $seed"

runs=0
# The loop-based modes exist only where rcp-bench was built with the
# libraries (its --help is the same either way; a probe tells).
have_libevent="" loops=""
probe() { "$BENCH" -s "$single" -t 1 -n 1 --async-depth 1 "$@" >/dev/null 2>&1; }
probe --client classic && have_libevent=1
probe --event-loop libevent && loops="$loops libevent"
probe --event-loop libuv && loops="$loops libuv"
# run NAME EXPECTED_MODE [rcp-bench options...]: one short run, checked.
run() {
    local name=$1 mode=$2 out=$tmp/run.txt json=$tmp/run.json rc=0
    shift 2
    runs=$((runs + 1))
    rm -f "$json"
    "$BENCH" -t 3 --key-maximum 999 --test-time "$T" --json-out-file "$json" "$@" \
        >"$out" 2>"$tmp/run.err" || rc=$?
    if [ "$rc" != 0 ]; then
        cat "$out" "$tmp/run.err" >&2
        fail "$name: exit $rc ($*)"
    fi
    grep -q '^ALL STATS$' "$out" || fail "$name: no ALL STATS table"
    grep -q '^Totals ' "$out" || fail "$name: no Totals row"
    python3 - "$json" "$name" "$mode" "$*" <<'PY' || fail "$name: JSON check ($*)"
import json, sys
path, name, mode, args = sys.argv[1:5]
with open(path) as f:
    d = json.load(f)
def check(cond, what):
    if not cond:
        sys.exit(f"smoke: {name}: {what}")
for k in ("client", "threads", "ops_per_sec", "p50_us", "p99_us", "server_cpu_us_per_op",
          "sets", "gets", "totals", "series", "mode", "async_depth", "pipeline",
          "rate_limit_per_thread", "offered_ops_per_sec", "key_pattern", "allocs_per_op",
          "bytes_per_sec", "value_bytes", "peak_rss_kb", "stream", "big_thread",
          "client_cache_bytes", "cache_hits", "cache_misses", "cache_invalidations",
          "cache_evictions", "cache_bytes", "cache_hit_ratio", "writer_ops"):
    check(k in d, f"key {k} missing")
# The client cache: counted for rcpipe on a cluster (0 when off), null elsewhere.
if d["client"] == "rcpipe" and d["cluster"]:
    check(d["cache_hits"] is not None, "cache_hits null for rcpipe on a cluster")
    if "--client-cache-bytes" in args:
        check(d["cache_hits"] > 0, f"cache on but cache_hits {d['cache_hits']} "
              f"(misses {d['cache_misses']})")
        check(0 < d["cache_hit_ratio"] <= 1, f"cache_hit_ratio {d['cache_hit_ratio']}")
    else:
        check(d["cache_hits"] == 0 and d["cache_bytes"] == 0, "cache counted while off")
else:
    check(d["cache_hits"] is None, "cache_hits without a cluster handle")
if "--writer-rate" in args:
    check(d["writer_ops"] > 0 and d["writer_errors"] == 0,
          f"writer_ops {d['writer_ops']}, writer_errors {d['writer_errors']}")
else:
    check(d["writer_ops"] == 0, "writer_ops without --writer-rate")
check(d["peak_rss_kb"] is not None and d["peak_rss_kb"] > 0, "peak_rss_kb missing")
if d["sets"]["ops"] or d["gets"]["hits"]:
    check(d["value_bytes"] > 0 and d["bytes_per_sec"] > 0, "no value bytes counted")
check(d["stream"] == ("--stream" in args), f"stream {d['stream']}")
if "--big-thread" in args:
    bt = d["big_thread"]
    check(bt is not None and bt["ops"] > 0 and bt["value_bytes"] > 0, f"big_thread {bt}")
    if "--big-rate" in args:
        # --big-rate MBPS: a request starts only once the bytes before it fit
        # the rate, so the run moves at most MBPS x its time plus one value
        # (5% for the clock); and the cap must not starve the thread either.
        a = args.split()
        cap = float(a[a.index("--big-rate") + 1]) * 1e6
        check(bt["rate_cap_bytes_per_sec"] == cap, f"rate_cap_bytes_per_sec {bt}")
        limit = cap * 1.05 + bt["size"] / d["test_time_s"]
        check(bt["bytes_per_sec"] <= limit,
              f"big thread at {bt['bytes_per_sec']:.0f} B/s, over its cap {cap:.0f} "
              f"(limit {limit:.0f} with one value)")
        check(bt["bytes_per_sec"] >= cap * 0.3,
              f"big thread at {bt['bytes_per_sec']:.0f} B/s, far under its cap {cap:.0f}")
    else:
        check(bt["rate_cap_bytes_per_sec"] is None, "rate_cap_bytes_per_sec without --big-rate")
else:
    check(d["big_thread"] is None, "big_thread without --big-thread")
check(d["ops"] > 0, "no request completed")
check(d["errors"] == 0, f"{d['errors']} errors")
check(d["mode"] == mode, f"mode {d['mode']}, expected {mode}")
g, s, t = d["gets"], d["sets"], d["totals"]
check(g["hits"] + g["misses"] == g["ops"], f"hits {g['hits']} + misses {g['misses']} != gets {g['ops']}")
check(s["ops"] + g["ops"] == t["ops"] == d["ops"], "sets + gets != totals")
check(t["kb_per_sec"] > 0, "no bytes counted")
check(sum(x["ops"] for x in d["series"]) == d["ops"], "the series does not add up to ops")
if "--rate-limiting" in args:
    check(d["offered_ops_per_sec"] == d["rate_limit_per_thread"] * d["threads"], "offered rate")
else:
    check(d["offered_ops_per_sec"] is None, "offered rate without --rate-limiting")
if "--count-allocs" in args:
    check(d["allocs_per_op"] is not None and d["allocs_per_op"] >= 0, "allocs_per_op missing")
else:
    check(d["allocs_per_op"] is None, "allocs_per_op without --count-allocs")
if "--preload" in args:
    check(g["misses"] == 0, f"{g['misses']} GETs missed right after --preload")
if d["cluster"]:
    check(d["cluster_masters"] == 3, "expected 3 masters")
check(d["tls"] == ("--tls" in args), f"tls {d['tls']}")
PY
}

for target in "$single" "$seed"; do
    run "sync rcpipe ($target)" sync -s "$target" --preload
    run "sync classic ($target)" sync -s "$target" --client classic
    run "async 16 ($target)" async -s "$target" --async-depth 16
    run "pipeline 8 rcpipe ($target)" pipeline -s "$target" --pipeline 8
    run "pipeline 8 classic ($target)" pipeline -s "$target" --pipeline 8 --client classic
    run "rate limited sync ($target)" sync -s "$target" --rate-limiting 300
    run "rate limited async ($target)" async -s "$target" --rate-limiting 300 --async-depth 4
    run "key patterns S:G ($target)" sync -s "$target" --key-pattern S:G --ratio 1:1
    run "count allocs ($target)" async -s "$target" --count-allocs --async-depth 8
    run "async callback refill ($target)" async -s "$target" --async-depth 8 --refill callback
    run "series ($target)" sync -s "$target" --rate-limiting 300 --series 5:15
    run "series classic ($target)" sync -s "$target" --rate-limiting 300 --series 2:4 --client classic
    run "stream sync ($target)" sync -s "$target" --stream --ratio 1:3 -d 4096
    run "stream async ($target)" async -s "$target" --stream --async-depth 8 -d 4096
    if [ -n "$have_libevent" ]; then
        run "classic async ($target)" async -s "$target" --async-depth 8 --client classic
    fi
done
# rcpipe on the application's loop: one node now; a cluster handle may
# still refuse the node option `loop`, and must then say so clearly.
for l in $loops; do
    run "event loop $l (single)" async -s "$single" --async-depth 8 --event-loop "$l"
    rc=0
    "$BENCH" -s "$seed" -t 2 --test-time "$T" --async-depth 8 --event-loop "$l" \
        >"$tmp/el.txt" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        grep -q "refuses the node option .loop." "$tmp/el.txt" ||
            fail "event loop $l (cluster): exit $rc without the refusal message: $(tail -3 "$tmp/el.txt")"
    else
        grep -q '^ALL STATS$' "$tmp/el.txt" || fail "event loop $l (cluster): no ALL STATS"
    fi
done
run "cluster mode forced" sync -s "$seed" --cluster-mode --key-pattern G
run "big thread rcpipe" sync -s "$seed" --big-thread 262144 --ratio 1:3 --stream
run "big thread classic" sync -s "$single" --big-thread 262144 --ratio 0:1 --client classic
run "big thread held to a rate" sync -s "$seed" --big-thread 1048576 --big-rate 8 --ratio 0:1 \
    --stream --test-time 1.5
run "big thread classic held" sync -s "$single" --big-thread 1048576 --big-rate 8 --ratio 0:1 \
    --client classic --test-time 1.5

# --stream SETs send their value from a generating source: what the server
# stored must be the pattern a plain SET sends ("0123...xyz" repeated), at
# a length that is no multiple of 36 and takes several 64 KiB chunks; and
# a 32 MiB value must not cost the bench 32 MiB (no copy of it anywhere).
check_values() { # PORT PREFIX SIZE KEYS [redis-cli options...]
    local port=$1 prefix=$2 size=$3 n=$4 i
    shift 4
    for i in $(seq 0 $((n - 1))); do
        "$REDIS_CLI" -h 127.0.0.1 -p "$port" "$@" GET "$prefix$i" >"$tmp/value" ||
            fail "GET $prefix$i"
        python3 - "$tmp/value" "$size" <<'PY' || fail "streamed SET: $prefix$i holds other bytes than the pattern"
import sys
path, size = sys.argv[1], int(sys.argv[2])
got = open(path, "rb").read()
want = (b"0123456789abcdefghijklmnopqrstuvwxyz" * (size // 36 + 1))[:size] + b"\n"
if got != want:
    sys.exit(f"smoke: {len(got) - 1} bytes read back, {size} sent; first difference at "
             f"{next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}")
PY
    done
}
streamed_sets() { # NAME JSON rcp-bench options...: SETs only, every key written
    local name=$1 json=$2
    shift 2
    "$BENCH" --ratio 1:0 --key-pattern S --stream --json-out-file "$json" "$@" \
        >"$tmp/ss.txt" 2>&1 || fail "$name: exit status ($(tail -2 "$tmp/ss.txt"))"
    python3 - "$json" "$name" <<'PY' || fail "$name: JSON check"
import json, sys
d = json.load(open(sys.argv[1]))
s = d["sets"]
if not (d["stream"] and d["errors"] == 0 and s["ops"] > 0 and
        d["value_bytes"] == s["ops"] * d["data_size"]):
    sys.exit(f"smoke: {sys.argv[2]}: stream {d['stream']}, errors {d['errors']}, "
             f"{s['ops']} SETs, value_bytes {d['value_bytes']}")
PY
}
size=200003
streamed_sets "streamed SETs sync (single)" "$tmp/ss1.json" -s "$single" -t 1 -n 5 -d "$size" \
    --key-minimum 0 --key-maximum 4 --key-prefix ssync-
check_values "$node_port" ssync- "$size" 5
streamed_sets "streamed SETs async (cluster)" "$tmp/ss2.json" -s "$seed" -t 2 -n 10 -d "$size" \
    --key-minimum 0 --key-maximum 19 --key-prefix sasync- --async-depth 4
check_values "${seed##*:}" sasync- "$size" 20 -c
# The peak against the same run with 1 KiB values: the process's own
# memory (a sanitizer's runtime: TSan's alone is near 20 MiB) cancels out.
big=$((32 * 1024 * 1024))
streamed_sets "streamed 1 KiB SETs" "$tmp/ss0.json" -s "$single" -t 1 -n 2 -d 1024 \
    --key-minimum 0 --key-maximum 0 --key-prefix sbig-
streamed_sets "streamed 32 MiB SETs" "$tmp/ss3.json" -s "$single" -t 1 -n 2 -d "$big" \
    --key-minimum 0 --key-maximum 0 --key-prefix sbig-
check_values "$node_port" sbig- "$big" 1
python3 - "$tmp/ss0.json" "$tmp/ss3.json" <<'PY' || fail "streamed 32 MiB SETs held the value"
import json, sys
small, big = (json.load(open(p))["peak_rss_kb"] for p in sys.argv[1:3])
if big - small >= 16 * 1024:
    sys.exit(f"smoke: two streamed 32 MiB SETs: peak RSS {big} KiB, {big - small} KiB more "
             f"than with 1 KiB values (>= 16 MiB)")
PY
"$REDIS_CLI" -h 127.0.0.1 -p "$node_port" DEL sbig-0 >/dev/null
# The client cache (rcpipe, cluster, sync): GETs of ~100 hot keys, preloaded,
# must be served from it; a writer on its own handle SETs the same keys.
# Longer than the others: tracking is armed a few ms after the first read.
run "client cache" sync -s "$seed" --preload --ratio 0:1 --key-pattern G --key-stddev 20 \
    --client-cache-bytes 1048576 --writer-rate 200 --test-time 1.5

# Key choice, counted with DBSIZE on the single node (SETs only, one thread).
dbsize() { "$REDIS_CLI" -h 127.0.0.1 -p "$node_port" dbsize; }
flush() { "$REDIS_CLI" -h 127.0.0.1 -p "$node_port" flushall >/dev/null; }
sets() { "$BENCH" -s "$single" -t 1 --ratio 1:0 "$@" >/dev/null 2>&1 || fail "sets $*"; }

flush
sets -n 300 --key-minimum 0 --key-maximum 299 --key-pattern S
[ "$(dbsize)" = 300 ] || fail "--key-pattern S: 300 SETs over 300 keys made $(dbsize) keys, not 300"
flush
sets -n 300 --key-minimum 0 --key-maximum 999999 --key-pattern G --key-stddev 5
n=$(dbsize)
[ "$n" -le 60 ] || fail "--key-pattern G with stddev 5: $n distinct keys of 300 SETs (expected <= 60)"
flush
sets -n 300 --key-minimum 0 --key-maximum 999999 --key-pattern R
n=$(dbsize)
[ "$n" -ge 290 ] || fail "--key-pattern R: only $n distinct keys of 300 SETs over a million"
sets -n 300 --key-minimum 0 --key-maximum 999999 --key-pattern R
[ "$(dbsize)" = "$n" ] || fail "default seed: a second run chose other keys ($(dbsize) != $n)"
sets -n 300 --key-minimum 0 --key-maximum 999999 --key-pattern R --distinct-client-seed
m=$(dbsize)
[ "$m" -ge $((n + 290)) ] || fail "--distinct-client-seed: the run chose the same keys ($m keys after, $n before)"

# Bad options exit 2 (before any connection).
bad() {
    local rc=0
    "$BENCH" -s "$single" "$@" >/dev/null 2>&1 || rc=$?
    [ "$rc" = 2 ] || fail "'$*' exited $rc, expected 2"
}
bad --key-pattern Q
bad --key-pattern R:Q
bad --key-pattern RS
bad --async-depth 0
bad --pipeline 0
bad --pipeline 4 --async-depth 4
bad --async-depth 4 --client classic --refill callback
bad --async-depth 4 --client classic --rate-limiting 10
bad --event-loop libevent
bad --event-loop epoll --async-depth 4
bad --event-loop libevent --async-depth 4 --client classic
bad --refill sometimes --async-depth 4
bad --refill callback --async-depth 2048 -t 3
bad --series 5:15
bad --series 15:5 --rate-limiting 10
bad --series 5:15 --rate-limiting 10 --async-depth 4
bad --count-allocs --client classic
bad --stream --client classic
bad --big-thread 1024 -t 1
bad --big-thread 1024 --async-depth 4
bad --big-thread 0
bad --big-rate 10
bad --big-thread 1024 --big-rate 0
bad --big-thread 1024 --big-rate fast
bad --rate-limiting 0
bad --rate-limiting 100 --pipeline 4
bad --key-stddev 0
bad --key-median 5000 --key-maximum 100
bad --cacert "$BENCH"
bad --tls-skip-verify
bad --tls --cert "$BENCH"
bad --tls --key "$BENCH"
bad --tls --cacert "$tmp/no-such-file"
bad --tls --async-depth 4 --client classic
bad --client-cache-bytes 1000
bad --client-cache-bytes 1048576 --client classic
bad --client-cache-bytes 1048576 --async-depth 4
bad --client-cache-bytes 1048576 --pipeline 4
bad --client-cache-bytes 1048576 --stream
bad --client-cache-ttl-ms 100
# these two ask the node first: it is not a cluster
bad --client-cache-bytes 1048576 -n 1
bad --writer-rate 10 -n 1
bad --writer-rate 10 --count-allocs

# TLS: only where rcp-bench was built with it (a probe tells: without TLS
# --tls is refused before connecting, with it the connect to port 1 fails).
rc=0
"$BENCH" -s 127.0.0.1:1 --tls -t 1 -n 1 >"$tmp/probe.txt" 2>&1 || rc=$?
if [ "$rc" = 2 ] && grep -q "built without TLS" "$tmp/probe.txt"; then
    echo "smoke: TLS part skipped: $(head -1 "$tmp/probe.txt")"
    echo "smoke: OK ($runs runs, key choice and bad options checked; no TLS)"
    exit 0
fi
"$SCRIPTS/tls-certs.sh" "$tmp/certs" >/dev/null
tls_dir=$tmp/tls-cluster
tls_seed=$(RCP_CLUSTER_TLS_DIR=$tmp/certs "$SCRIPTS/cluster.sh" start --masters 3 --replicas 0 \
    --dir "$tls_dir" 2>"$tmp/tls-cluster.log") ||
    fail "cluster.sh start (TLS): $(cat "$tmp/tls-cluster.log")"
echo "smoke: TLS-only cluster seed $tls_seed"
tls=(--tls --cacert "$tmp/certs/ca.crt")
run "tls sync rcpipe" sync -s "$tls_seed" "${tls[@]}" --test-time 1 --preload
run "tls async rcpipe" async -s "$tls_seed" "${tls[@]}" --test-time 1 --async-depth 16
run "tls sync classic" sync -s "$tls_seed" "${tls[@]}" --test-time 1 --client classic
run "tls pipeline classic" pipeline -s "$tls_seed" "${tls[@]}" --client classic --pipeline 8
for l in $loops; do
    run "tls event loop $l" async -s "$tls_seed" "${tls[@]}" --async-depth 8 --event-loop "$l"
done
rc=0
"$BENCH" -s "$tls_seed" --tls --cacert "$tmp/certs/other-ca.crt" -t 1 -n 1 >"$tmp/tls.txt" 2>&1 ||
    rc=$?
[ "$rc" = 1 ] && grep -q "did not verify" "$tmp/tls.txt" ||
    fail "--tls with the wrong CA: exit $rc, $(tail -1 "$tmp/tls.txt")"
rc=0
"$BENCH" -s "$tls_seed" -t 1 -n 1 >"$tmp/tls.txt" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q -- "--tls" "$tmp/tls.txt" ||
    fail "a TLS-only cluster without --tls: exit $rc, $(tail -1 "$tmp/tls.txt")"

echo "smoke: OK ($runs runs, key choice, bad options and TLS checked)"
