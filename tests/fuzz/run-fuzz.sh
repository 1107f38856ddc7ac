#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each, in parallel (niced), from a
# temporary copy of the committed seed corpus (the committed one is never
# grown). Builds the targets first (clang, -Dfuzz=true) if needed.
#
#   tests/fuzz/run-fuzz.sh SECONDS [BUILD_DIR]      (BUILD_DIR: build-fuzz)
#
# Environment: FUZZ_RUNS=N also stops each target after N executions;
# FUZZ_TARGETS="reply cmd" runs only those; FUZZ_JOBS=N runs at most N
# targets at once (default: the number of cores).
#
# Prints one line per target (executions, coverage, features, corpus) and
# exits non-zero if any target crashed, leaked, timed out or ran out of
# memory; the reproducer is kept in BUILD_DIR/fuzz-artifacts/ (add it to
# tests/fuzz/corpus/TARGET/ so that the fuzz-replay suite replays it).
set -euo pipefail

if [ $# -lt 1 ] || ! [[ "$1" =~ ^[0-9]+$ ]]; then
    echo "usage: $0 SECONDS [BUILD_DIR]" >&2
    exit 2
fi
secs=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$src/build-fuzz}
targets=${FUZZ_TARGETS:-reply slots redirect cmd}
jobs=${FUZZ_JOBS:-$(nproc)}

if [ ! -f "$build/build.ninja" ]; then
    CC=clang meson setup "$build" "$src" -Dfuzz=true >/dev/null
fi
if ! meson introspect "$build" --buildoptions | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
sys.exit(0 if o.get("fuzz") else 1)'; then
    meson configure "$build" -Dfuzz=true >/dev/null
fi
exes=()
for t in $targets; do exes+=("tests/fuzz/fuzz_$t"); done
ninja -C "$build" "${exes[@]}" >/dev/null

work=$(mktemp -d /tmp/rcp-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
art="$build/fuzz-artifacts"
mkdir -p "$art"

run_one() {
    local t=$1
    mkdir -p "$work/$t/corpus"
    cp "$src/tests/fuzz/corpus/$t/"* "$work/$t/corpus/"
    local rc=0
    nice -n 10 "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" \
        ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$art/$t-" \
        "$work/$t/corpus" >"$work/$t/log" 2>&1 || rc=$?
    echo "$rc" >"$work/$t/rc"
}

start=$(date +%s)
running=0
for t in $targets; do
    run_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait

failed=0
for t in $targets; do
    log="$work/$t/log"
    rc=$(cat "$work/$t/rc")
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    tsec=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '(DONE|pulse|NEW|REDUCE|INITED).*cov:' "$log" | tail -1 || true)
    cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.*corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
    status=ok
    if [ "$rc" -ne 0 ]; then
        status="CRASH (exit $rc)"
        failed=1
    fi
    printf 'fuzz %-8s execs=%s exec/s=%s cov=%s ft=%s corpus=%s %s\n' "$t" "${execs:-?}" \
        "${tsec:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$status"
    if [ "$rc" -ne 0 ]; then
        grep -E 'ERROR|fuzz check failed|runtime error|SUMMARY|Test unit written' "$log" | head -20 |
            sed 's/^/    /'
        cp "$log" "$art/$t.log"
        echo "    full log: $art/$t.log" >&2
    fi
done
echo "fuzz: ${secs}s per target, wall time $(( $(date +%s) - start ))s"
exit "$failed"
