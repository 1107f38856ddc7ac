#!/usr/bin/env bash
# The main job: install what is missing, build, start a local Redis Cluster
# (3 masters, 1 replica each, on free ports of 127.0.0.1), and run the
# cluster demo: 16 threads sharing one rcp_cluster handle for 12 seconds
# while 2000 slots are resharded between two masters underneath them. The
# demo prints the handle's counters each second (redirects followed, map
# version) and checks at the end that every INCR was counted exactly once.
# Everything it started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

tests/scripts/install-deps.sh
if [ ! -d build ]; then
    meson setup build >/dev/null
fi
ninja -C build >/dev/null

dir=$(mktemp -d -t rcpipe-demo.XXXXXX)
rmdir "$dir"
reshard_pid=
cleanup() {
    if [ -n "$reshard_pid" ]; then
        wait "$reshard_pid" 2>/dev/null || true
    fi
    tests/scripts/cluster.sh stop "$dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "starting a local cluster (3 masters + 3 replicas) ..."
seed=$(tests/scripts/cluster.sh start --dir "$dir" 2>/dev/null)
# shellcheck disable=SC1091
. "$dir/cluster.env"
# shellcheck disable=SC2153
read -r -a ports <<<"$PORTS"
echo "cluster up, seed $seed; resharding 2000 slots from :${ports[0]} to :${ports[1]} during the run"
( sleep 2; tests/scripts/cluster.sh reshard "$dir" "${ports[0]}" "${ports[1]}" 2000 >/dev/null 2>&1 ) &
reshard_pid=$!
./build/docs/examples/rcpipe-cluster-demo "$seed" 16 12
