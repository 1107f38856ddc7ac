#!/usr/bin/env bash
# Start or stop one local redis-server for tests, the demo and the bench.
#
#   redis-node.sh start [extra redis-server args...]
#       starts redis-server on 127.0.0.1 on a free port in a new temporary
#       directory, waits until it answers PING, and prints
#       "PORT PID DIR" on stdout.
#   redis-node.sh stop PID DIR
#       stops that process (only that pid) and removes DIR.
#
# Only processes this script started are ever signalled, by pid.
set -euo pipefail

REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}

free_port() {
    python3 - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

cmd=${1:-}
shift || true
case "$cmd" in
start)
    dir=$(mktemp -d -t rcpipe-redis.XXXXXX)
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --dir "$dir" \
            --save '' --appendonly no --daemonize no \
            --logfile "$dir/redis.log" "$@" >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 1 100); do
            if "$REDIS_CLI" -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
                echo "$port $pid $dir"
                exit 0
            fi
            if ! kill -0 "$pid" 2>/dev/null; then break; fi
            sleep 0.05
        done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    echo "redis-node.sh: could not start redis-server (see $dir/redis.log)" >&2
    exit 1
    ;;
stop)
    pid=${1:?pid}
    dir=${2:?dir}
    if kill -0 "$pid" 2>/dev/null; then
        kill -CONT "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    case "$dir" in
    */rcpipe-redis.*) rm -rf "$dir" ;;
    esac
    ;;
*)
    echo "usage: $0 start [redis-server args...] | stop PID DIR" >&2
    exit 2
    ;;
esac
