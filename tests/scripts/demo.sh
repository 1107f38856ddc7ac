#!/usr/bin/env bash
# The main job: install what is missing, build, start a local Redis on a
# free port on 127.0.0.1, run the demo (32 threads sharing one handle),
# stop the server.
set -euo pipefail
cd "$(dirname "$0")/../.."

tests/scripts/install-deps.sh
if [ ! -d build ]; then
    meson setup build >/dev/null
fi
ninja -C build >/dev/null

read -r port pid dir < <(tests/scripts/redis-node.sh start)
trap 'tests/scripts/redis-node.sh stop "$pid" "$dir"' EXIT
echo "redis-server started on 127.0.0.1:$port (pid $pid)"
./build/docs/examples/rcpipe-demo 127.0.0.1 "$port" 32 2000
