#!/usr/bin/env bash
# The whole test suite: unit tests, integration tests against real
# redis-server processes (each test starts its own on free ports), in a
# plain build with warnings as errors, then under ASan+UBSan and TSan.
#
# Then the install as a user gets it (a temporary prefix, every example
# built with pkg-config alone, two run against a local cluster), and the
# hardening layers (docs/testing.md): the unit suite under
# valgrind memcheck, each fuzz target for RCP_FUZZ_SECONDS (default 60),
# the allocation-failure reruns of the unit and sim suites (bounded:
# ALLOCFAIL_BUDGET seconds per test program), and the chaos soak for
# RCP_CHAOS_SECONDS (default 120), then once more on a TLS-only cluster
# (RCPTEST_TLS=1) for RCP_CHAOS_TLS_SECONDS (default 45). Each counts as one
# test in the closing line.
#
# RCP_SKIP_SANITIZERS=1 runs only the plain build and its tests (for a quick
# local run; CI never sets it).
set -euo pipefail
cd "$(dirname "$0")/../.."

tests/scripts/install-deps.sh

run() {
    local dir=$1 setup=$2
    shift 2
    if [ ! -d "$dir" ]; then
        meson setup "$dir" "$@"
    fi
    ninja -C "$dir"
    if [ -n "$setup" ]; then
        meson test -C "$dir" --setup="$setup" --print-errorlogs --num-processes 2
    else
        meson test -C "$dir" --print-errorlogs --num-processes 2
    fi
}

# Count results from meson's JSON logs, whatever happens, and print the
# plain closing line.
summary() {
    python3 - "$@" <<'PY'
import json, sys
ok = bad = 0
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line).get("result")
                if r in ("OK", "EXPECTEDFAIL"):
                    ok += 1
                else:
                    bad += 1
    except FileNotFoundError:
        pass
print(f"tests: {ok} passed, {bad} failed")
PY
}
logs=(build-ci/meson-logs/testlog.json build-asan/meson-logs/testlog-asan.json
      build-tsan/meson-logs/testlog-tsan.json build-ci/meson-logs/testlog-valgrind.json
      build-ci/meson-logs/hardening.json)
rm -f "${logs[@]}"
trap 'summary "${logs[@]}"' EXIT

# A hardening step: run it, record OK/FAIL in the same JSON-lines form as
# meson's logs, and stop at the first failure like meson test does.
step() {
    local name=$1 rc=0 t0=$SECONDS
    shift
    echo "== $name: $*"
    "$@" || rc=$?
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    if [ $rc -eq 0 ]; then
        echo "{\"name\": \"$name\", \"result\": \"OK\"}" >>build-ci/meson-logs/hardening.json
    else
        echo "{\"name\": \"$name\", \"result\": \"FAIL\"}" >>build-ci/meson-logs/hardening.json
        exit $rc
    fi
}

run build-ci "" -Dwerror=true
if [ "${RCP_SKIP_SANITIZERS:-0}" != 1 ]; then
    run build-asan asan -Db_sanitize=address,undefined -Db_lundef=false
    run build-tsan tsan -Db_sanitize=thread -Db_lundef=false
    mkdir -p build-ci/meson-logs
    step install tests/scripts/install-test.sh
    step valgrind-unit meson test -C build-ci --suite unit --suite fuzz-replay --print-errorlogs \
        --logbase testlog-valgrind \
        --wrap='valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite -q' \
        --timeout-multiplier 4
    step fuzz tests/fuzz/run-fuzz.sh "${RCP_FUZZ_SECONDS:-60}" build-fuzz
    step allocfail env ALLOCFAIL_BUDGET="${ALLOCFAIL_BUDGET:-15}" ALLOCFAIL_TIMEOUT=30 \
        tests/allocfail/run-allocfail.sh build-asan
    step chaos tests/chaos/run-chaos.sh "${RCP_CHAOS_SECONDS:-120}" build-ci
    step chaos-tls env RCPTEST_TLS=1 tests/chaos/run-chaos.sh "${RCP_CHAOS_TLS_SECONDS:-45}" build-ci
fi
