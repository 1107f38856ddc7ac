#!/usr/bin/env bash
# The whole test suite: unit tests, integration tests against real
# redis-server processes (each test starts its own on free ports), in a
# plain build with warnings as errors, then under ASan+UBSan and TSan.
#
# RCP_SKIP_SANITIZERS=1 runs only the plain build (for a quick local run;
# CI never sets it).
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
      build-tsan/meson-logs/testlog-tsan.json)
rm -f "${logs[@]}"
trap 'summary "${logs[@]}"' EXIT

run build-ci "" -Dwerror=true
if [ "${RCP_SKIP_SANITIZERS:-0}" != 1 ]; then
    run build-asan asan -Db_sanitize=address,undefined -Db_lundef=false
    run build-tsan tsan -Db_sanitize=thread -Db_lundef=false
fi
