#!/usr/bin/env bash
# run-chaos.sh SECONDS [BUILD_DIR] [chaos options...]
#
# Builds the chaos soak if needed (BUILD_DIR, default build-chaos at the top
# of the source tree: configured with meson if it does not exist yet),
# starts a local cluster of 3 masters + 3 replicas with
# tests/scripts/cluster.sh (node timeout 2000 ms, emptied masters stay
# masters), runs tests/chaos/chaos against it for SECONDS and stops the
# cluster however the run ends. Exits with the program's status: 0 only if
# nothing acknowledged was lost (outside failover windows), nothing was
# applied twice and every request was resolved. Options after BUILD_DIR go
# to the program (--threads N, --rate OPS, --seed N, --no-chaos).
#
# RCP_CLUSTER_KEEP=1 keeps the cluster directory (node logs, reshard logs).
set -euo pipefail

secs=${1:?usage: run-chaos.sh SECONDS [BUILD_DIR] [chaos options...]}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$root/build-chaos}
shift
[ $# -gt 0 ] && shift
case "$build" in
/*) ;;
*) build=$(pwd)/$build ;;
esac

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" >/dev/null
fi
ninja -C "$build" tests/chaos/chaos >/dev/null

# Sanitizer builds: leak checking on, stop at the first report. Harmless
# for a plain build.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export RCP_SOURCE_ROOT=$root

work=$(mktemp -d -t rcpipe-chaos.XXXXXX)
cleanup() {
    bash "$root/tests/scripts/cluster.sh" stop "$work/cluster" >/dev/null 2>&1 || true
    if [ "${RCP_CLUSTER_KEEP:-0}" = 0 ]; then
        rm -rf "$work"
    else
        echo "run-chaos.sh: kept $work" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# RCPTEST_TLS=1: the cluster speaks TLS only, with certificates made here;
# the chaos program (the cluster harness's TLS mode) trusts the same CA.
if [ "${RCPTEST_TLS:-0}" = 1 ]; then
    bash "$root/tests/scripts/tls-certs.sh" "$work/certs" >/dev/null
    export RCP_CLUSTER_TLS_DIR=$work/certs RCPTEST_TLS_CERTS_DIR=$work/certs
fi
bash "$root/tests/scripts/cluster.sh" start --node-timeout 2000 --dir "$work/cluster" \
    -- --cluster-allow-replica-migration no >/dev/null

rc=0
"$build/tests/chaos/chaos" --dir "$work/cluster" --seconds "$secs" "$@" || rc=$?
exit "$rc"
