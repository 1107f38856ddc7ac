#!/usr/bin/env bash
# Reruns each unit and sim test with its Nth library allocation failing,
# N = 1, 2, 3, ... until a run reaches no injected failure, and classifies
# every run (tests/allocfail/README.md):
#
#   tests/allocfail/run-allocfail.sh BUILD_DIR
#
# BUILD_DIR should be an ASan+UBSan build (leak checking is on here).
# Environment:
#   ALLOCFAIL_TESTS=REGEX   only tests whose name matches (default: all of
#                           the 'unit' and 'sim' suites)
#   ALLOCFAIL_STRIDE=S      N = 1, 1+S, 1+2S, ... (default 1: every N)
#   ALLOCFAIL_BUDGET=SEC    bounded mode: a first run with no failure
#                           counts a test's allocations (C) and times it
#                           (t); the stride is then chosen so that about
#                           SEC/t runs spread evenly over 1..C (stride 1,
#                           the full sweep, when they fit)
#   ALLOCFAIL_MAX_N=M       stop a test's sweep after N > M (reported as
#                           capped, not as complete)
#   ALLOCFAIL_TIMEOUT=T     seconds per test case before a run counts as a
#                           hang (60): a run of a program with K test cases
#                           gets K*T (an injected failure can make several
#                           cases each wait out a bounded deadline)
#   ALLOCFAIL_JOBS=J        tests swept at once (default 2; the strides are
#                           set first, one test at a time, so the runs are
#                           the same as with 1)
#   ALLOCFAIL_STRICT=1      a NULL dereference in a test's own code after
#                           an injected failure counts as a failure too
#
# Run classes. Acceptable: pass (the test survived the failure), assert (a
# check assertion failed: the test saw the error and stopped), null-in-test
# (the test's own code dereferenced the NULL the library returned: the
# test, not the library, lacks a check). Failures: leak, sanitizer (an
# ASan/UBSan report anywhere else), crash (a signal or an early exit with no
# sanitizer report), hang (the run's or check's timeout), and fails-clean (the
# final run, with no failure injected, did not pass). Exits 1 if any run
# failed. Logs of failed runs: BUILD_DIR/allocfail-logs/.
set -uo pipefail

if [ $# -ne 1 ] || [ ! -f "$1/build.ninja" ]; then
    echo "usage: $0 BUILD_DIR   (a configured meson build directory)" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
filter=${ALLOCFAIL_TESTS:-.}
stride_opt=${ALLOCFAIL_STRIDE:-1}
budget=${ALLOCFAIL_BUDGET:-0}
max_n=${ALLOCFAIL_MAX_N:-0}
tmo=${ALLOCFAIL_TIMEOUT:-60}
strict=${ALLOCFAIL_STRICT:-0}

ninja -C "$build" >/dev/null || { echo "allocfail: build failed" >&2; exit 2; }
logs="$build/allocfail-logs"
rm -rf "$logs"
mkdir -p "$logs"
work=$(mktemp -d /tmp/rcp-allocfail.XXXXXX)
trap 'rm -rf "$work"' EXIT

# name, then shell words for env and command, from meson's own test list.
meson introspect "$build" --tests | python3 -c '
import json, re, shlex, sys
for t in json.load(sys.stdin):
    suites = [s.split(":")[-1] for s in t["suite"]]
    if not ("unit" in suites or "sim" in suites) or not re.search(sys.argv[1], t["name"]):
        continue
    env = " ".join(shlex.quote(k + "=" + v) for k, v in t["env"].items())
    print(t["name"] + "\x1f" + env + "\x1f" + " ".join(shlex.quote(c) for c in t["cmd"]))
' "$filter" >"$work/tests"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export CK_DEFAULT_TIMEOUT=$(( tmo / 2 > 5 ? tmo / 2 : 5 ))

# Class of one run from its exit code and output ($1 rc, $2 log).
classify() {
    local rc=$1 log=$2
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || grep -q 'Test timeout expired' "$log"; then
        echo hang
    elif grep -q 'ERROR: LeakSanitizer' "$log"; then
        echo leak
    elif grep -qE 'ERROR: AddressSanitizer|runtime error:' "$log"; then
        # The first stack frame in the project's sources says whose code
        # it was; a NULL dereference in a test's own code is the test not
        # checking what the library returned.
        local frame
        frame=$(grep -m1 -oE ' in [^ ]+ [^ ]*(tests|lib|cluster|include)/[^ :]+' "$log" | awk '{print $3}')
        if [[ "$frame" == *tests/* ]] &&
            grep -qE 'null pointer|SEGV on unknown address 0x0000000000|address 0x000000000[0-9a-f]{3} ' "$log" &&
            [ "$strict" != 1 ]; then
            echo null-in-test
        else
            echo sanitizer
        fi
    elif grep -qE '^[^ ]+:[0-9]+:E:' "$log"; then
        echo crash
    elif [ "$rc" -eq 0 ]; then
        echo pass
    elif grep -qE '^[^ ]+:[0-9]+:F:' "$log"; then
        echo assert
    else
        echo crash
    fi
}

t_start=$(date +%s)

# First, one after the other as before, the timing run of every test that
# sets its stride (bounded mode); then the sweeps, ALLOCFAIL_JOBS (default 2)
# tests at a time: each sweep is the same N = 1, 1+S, 1+2S, ... it would be
# alone (the strides are fixed before any sweep loads the machine), and
# many runs wait on timers (a deadline, a reconnect), so two overlap well.
# That first run, made in every mode, also counts the program's test cases
# (check's "Checks: K"): a run's timeout is K times ALLOCFAIL_TIMEOUT.
i=0
while IFS=$'\x1f' read -r name envs cmd; do
    stride=$stride_opt
    rm -f "$work/report"
    t0=$(date +%s%N)
    eval "env $envs RCP_FAIL_ALLOC_AT=1000000000000000 RCP_FAIL_ALLOC_LOG=$work/report timeout -k 5 $tmo $cmd" \
        >"$work/clean-out" 2>&1
    t0=$(( ($(date +%s%N) - t0) / 1000000 ))
    k=$(grep -aoE 'Checks: [0-9]+' "$work/clean-out" | tail -1 | awk '{print $2}')
    echo "$(( tmo * (${k:-0} > 1 ? ${k:-0} : 1) ))" >"$work/tmo-$i"
    if [ "$budget" -gt 0 ]; then
        c=$(sed -n 's/^count \([0-9]*\).*/\1/p' "$work/report" 2>/dev/null | sort -n | tail -1)
        fit=$(( budget * 1000 / (t0 > 50 ? t0 : 50) ))
        [ "$fit" -lt 1 ] && fit=1
        stride=$(( (${c:-0} + fit - 1) / fit ))
        [ "$stride" -lt 1 ] && stride=1
    fi
    echo "$stride" >"$work/stride-$i"
    i=$((i + 1))
done <"$work/tests"

# One test's sweep (test number, name, env words, command); its counts go to
# $work/result-NUMBER as "runs bad".
sweep() {
    local idx=$1 name=$2 envs=$3 cmd=$4
    local -A cnt=([pass]=0 [assert]=0 [null-in-test]=0 [leak]=0 [sanitizer]=0 [crash]=0 [hang]=0)
    local s_start n runs status maxcount stride run_tmo rep out rc c cls bad=0
    s_start=$(date +%s)
    n=1
    runs=0
    status=complete
    maxcount=0
    stride=$(cat "$work/stride-$idx")
    run_tmo=$(cat "$work/tmo-$idx")
    while :; do
        if [ "$max_n" -gt 0 ] && [ "$n" -gt "$max_n" ]; then
            status="capped at N=$max_n"
            break
        fi
        rep="$work/report-$idx"
        out="$work/out-$idx"
        rm -f "$rep"
        eval "env $envs RCP_FAIL_ALLOC_AT=$n RCP_FAIL_ALLOC_LOG=$rep timeout -k 5 $run_tmo $cmd" \
            >"$out" 2>&1
        rc=$?
        runs=$((runs + 1))
        if ! grep -q '^armed' "$rep" 2>/dev/null; then
            status="hook not linked (tests/allocfail/README.md): not run"
            runs=0
            break
        fi
        c=$(sed -n 's/^count \([0-9]*\).*/\1/p' "$rep" | sort -n | tail -1)
        [ -n "$c" ] && [ "$c" -gt "$maxcount" ] && maxcount=$c
        if ! grep -q '^hit' "$rep"; then
            # No failure injected: the test must pass as it does normally.
            if [ "$rc" -ne 0 ]; then
                cp "$out" "$logs/$name-clean.log"
                echo "  $name: fails with no failure injected (N=$n): $logs/$name-clean.log"
                status="fails-clean"
                bad=$((bad + 1))
            fi
            break
        fi
        cls=$(classify "$rc" "$out")
        cnt[$cls]=$((cnt[$cls] + 1))
        case $cls in
        pass | assert) ;;
        null-in-test)
            cp "$out" "$logs/$name-N$n-$cls.log" ;;
        *)
            cp "$out" "$logs/$name-N$n-$cls.log"
            echo "  $name N=$n: $cls: $logs/$name-N$n-$cls.log"
            bad=$((bad + 1)) ;;
        esac
        n=$((n + stride))
    done
    [ "$stride" -gt 1 ] && [ "$status" = complete ] && status="complete with stride $stride"
    printf 'allocfail %-22s runs=%d allocs<=%d pass=%d assert=%d null-in-test=%d leak=%d sanitizer=%d crash=%d hang=%d %ds %s\n' \
        "$name" "$runs" "$maxcount" "${cnt[pass]}" "${cnt[assert]}" "${cnt[null-in-test]}" \
        "${cnt[leak]}" "${cnt[sanitizer]}" "${cnt[crash]}" "${cnt[hang]}" \
        $(( $(date +%s) - s_start )) "$status"
    echo "$runs $bad" >"$work/result-$idx"
}

jobs=${ALLOCFAIL_JOBS:-2}
i=0
running=0
while IFS=$'\x1f' read -r name envs cmd; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    sweep "$i" "$name" "$envs" "$cmd" </dev/null &
    running=$((running + 1))
    i=$((i + 1))
done <"$work/tests"
wait

total_runs=0
bad_runs=0
for ((k = 0; k < i; k++)); do
    if read -r r b <"$work/result-$k" 2>/dev/null; then
        total_runs=$((total_runs + r))
        bad_runs=$((bad_runs + b))
    else
        echo "  test $k: its sweep left no result" >&2
        bad_runs=$((bad_runs + 1))
    fi
done

echo "allocfail: $total_runs runs in $(( $(date +%s) - t_start ))s, $bad_runs failed" \
    "(stride $stride_opt, budget ${budget}s per test, cap $max_n; 0: none)"
[ "$bad_runs" -eq 0 ]
