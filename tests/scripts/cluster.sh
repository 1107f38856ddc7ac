#!/usr/bin/env bash
# A local Redis Cluster for tests, the demo and the bench: redis-server
# processes on 127.0.0.1 only, each in its own directory under one cluster
# directory, described by DIR/cluster.env.
#
#   cluster.sh start [--masters N] [--replicas R] [--node-timeout MS] [--dir DIR]
#                    [-- extra redis-server args...]
#       starts N*(1+R) nodes (default 3 masters, 1 replica each, node
#       timeout 1000 ms), creates the cluster, waits until every node
#       agrees that it is up, writes DIR/cluster.env and prints
#       "127.0.0.1:PORT" (the first node, a seed) on stdout. Without --dir
#       a new temporary directory is made; its path is on stderr and in
#       the DIR= line of cluster.env.
#   cluster.sh stop DIR            stops every node recorded in DIR, removes DIR
#   cluster.sh wait-ok DIR [S]     waits (default 30 s) until every live node
#                                  says cluster_state:ok and all agree on the
#                                  slot table
#   cluster.sh reshard DIR FROM_PORT TO_PORT NSLOTS
#                                  moves NSLOTS slots with redis-cli --cluster
#                                  reshard, then waits for agreement
#   cluster.sh rebalance DIR [redis-cli rebalance options...]
#   cluster.sh add-node DIR [MASTER_PORT]
#                                  starts a new node and adds it (an empty
#                                  master, or a replica of MASTER_PORT);
#                                  prints its port
#   cluster.sh del-node DIR PORT   moves the node's slots away (rebalance with
#                                  weight 0), removes it from the cluster
#                                  (redis-cli --cluster del-node); the process
#                                  keeps running, as a lone node, until kill
#                                  or stop
#   cluster.sh kill DIR PORT       SIGKILL that node (its directory is kept)
#   cluster.sh restart DIR PORT    starts it again with the same port, directory
#                                  and nodes.conf, so it rejoins; prints its pid
#   cluster.sh nodes DIR           one line per node: PORT PID ROLE (ROLE is
#                                  master, slave, or down)
#   cluster.sh pause DIR PORT      SIGSTOP that node (it keeps its sockets but
#                                  answers nothing, not even the cluster bus)
#   cluster.sh resume DIR PORT     SIGCONT it again
#   cluster.sh fix DIR             a master that does not count as its own a
#                                  slot the other nodes give it (seen after a
#                                  failover right after a reshard) gets it
#                                  back with CLUSTER ADDSLOTS; then
#                                  redis-cli --cluster fix; then wait-ok
#   cluster.sh failover DIR PORT [force|takeover]
#                                  CLUSTER FAILOVER on that replica (a manual
#                                  failover: the replica waits until it has
#                                  caught up with its master's replication
#                                  stream), then waits (bounded) until it
#                                  says it is a master
#   cluster.sh myid DIR PORT       the node's cluster id
#
# cluster.env (sourceable by bash) holds DIR, MASTERS, REPLICAS, NODE_TIMEOUT,
# PORTS="p1 p2 ..." and PIDS="pid1 pid2 ..." (parallel lists; a pid is 0
# while that node is killed), and the extra server arguments.
#
# Only processes recorded in cluster.env are ever signalled, by pid, and only
# after checking that the pid is still a redis-server on that port. Every
# wait is bounded. Servers run in their own session (setsid), so a test
# runner that kills its process group does not take them down half-way: the
# test harness stops them (tests/cluster/harness.c).
#
# Environment: RCP_REDIS_SERVER or REDIS_SERVER (default: redis-server in
# PATH), REDIS_CLI (default: redis-cli next to the server, or in PATH).
# RCP_CLUSTER_TLS_DIR: a TLS-only cluster (--port 0 --tls-port,
# --tls-cluster yes, --tls-replication yes) presenting server.crt of that
# directory (tests/scripts/tls-certs.sh), and redis-cli speaking TLS to it.
set -euo pipefail

REDIS_SERVER=${RCP_REDIS_SERVER:-${REDIS_SERVER:-redis-server}}
if [ -z "${REDIS_CLI:-}" ]; then
    if [ -x "$(dirname "$REDIS_SERVER")/redis-cli" ]; then
        REDIS_CLI=$(dirname "$REDIS_SERVER")/redis-cli
    else
        REDIS_CLI=redis-cli
    fi
fi

# TLS: the server's and redis-cli's arguments (empty in plain text).
NODE_TLS=()
CLI_TLS=()
if [ -n "${RCP_CLUSTER_TLS_DIR:-}" ]; then
    t=$RCP_CLUSTER_TLS_DIR
    NODE_TLS=(--tls-cluster yes --tls-replication yes --tls-auth-clients no
              --tls-cert-file "$t/server.crt" --tls-key-file "$t/server.key"
              --tls-ca-cert-file "$t/ca.crt")
    CLI_TLS=(--tls --cacert "$t/ca.crt")
fi

START_WAIT_S=10      # one node answering PING
CREATE_TIMEOUT_S=90  # redis-cli --cluster create
RESHARD_TIMEOUT_S=${RCP_RESHARD_TIMEOUT_S:-600}
STOP_GRACE_S=5

# State loaded from cluster.env.
DIR=""
MASTERS=3
REPLICAS=1
NODE_TIMEOUT=1000
PORTS=""
PIDS=""
EXTRA_ARGS=()

die() {
    echo "cluster.sh: $*" >&2
    exit 1
}

now_ms() {
    local s ns
    read -r s ns < <(date '+%s %N')
    echo $((s * 1000 + 10#$ns / 1000000))
}

cli() {
    local port=$1
    shift
    timeout 10 "$REDIS_CLI" ${CLI_TLS[@]+"${CLI_TLS[@]}"} -h 127.0.0.1 -p "$port" "$@"
}

# Ports for the cluster: below the ephemeral range and below 30000, with the
# bus port (port + 10000) free too. Prints N ports.
#
# Each port is also claimed, for the cluster's life, by a directory in
# PORT_CLAIMS naming this cluster's DIR (mkdir: atomic): clusters started
# at the same time (tests run two at a time) never pick the same port, and
# a port stays ours while its node is killed, until restart takes it
# again. cmd_stop releases the claims; a claim whose cluster directory is
# gone (a run that died) is taken over.
PORT_CLAIMS=${RCP_PORT_CLAIMS:-${TMPDIR:-/tmp}/rcpipe-port-claims}
pick_ports() {
    mkdir -p "$PORT_CLAIMS"
    python3 - "$1" "$DIR" "$PORT_CLAIMS" <<'PY'
import os, random, socket, sys
n, owner, claims = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def free(p):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
def claim(p):
    d = os.path.join(claims, str(p))
    for _ in range(2):
        try:
            os.mkdir(d)
        except FileExistsError:
            try:
                with open(os.path.join(d, "owner")) as f:
                    other = f.read().strip()
            except OSError:
                return False  # being claimed right now, or unreadable
            if os.path.isfile(os.path.join(other, "cluster.env")):
                return False
            # stale: its cluster is gone
            try:
                os.unlink(os.path.join(d, "owner"))
                os.rmdir(d)
            except OSError:
                return False
            continue
        with open(os.path.join(d, "owner"), "w") as f:
            f.write(owner + "\n")
        return True
    return False
got = []
rnd = random.Random()
for _ in range(20000):
    if len(got) == n:
        break
    p = rnd.randrange(11000, 19990)
    if p in got or p + 10000 in got or p - 10000 in got:
        continue
    if free(p) and free(p + 10000) and claim(p):
        got.append(p)
if len(got) != n:
    sys.exit("no free ports")
print(" ".join(map(str, got)))
PY
}

# Releases this cluster's claims on those ports.
release_ports() {
    local p d
    for p in "$@"; do
        d=$PORT_CLAIMS/$p
        if [ "$(cat "$d/owner" 2>/dev/null)" = "$DIR" ]; then
            rm -f "$d/owner"
            rmdir "$d" 2>/dev/null || true
        fi
    done
}

write_env() {
    local tmp="$DIR/cluster.env.tmp"
    {
        printf 'DIR=%q\n' "$DIR"
        printf 'MASTERS=%d\n' "$MASTERS"
        printf 'REPLICAS=%d\n' "$REPLICAS"
        printf 'NODE_TIMEOUT=%d\n' "$NODE_TIMEOUT"
        printf 'PORTS="%s"\n' "$PORTS"
        printf 'PIDS="%s"\n' "$PIDS"
        printf 'EXTRA_ARGS=('
        if [ "${#EXTRA_ARGS[@]}" -gt 0 ]; then
            printf ' %q' "${EXTRA_ARGS[@]}"
        fi
        printf ' )\n'
    } >"$tmp"
    mv -f "$tmp" "$DIR/cluster.env"
}

load_env() {
    local d=${1:?cluster directory}
    [ -f "$d/cluster.env" ] || die "$d/cluster.env not found"
    # shellcheck disable=SC1091
    . "$d/cluster.env"
    DIR=$d
}

# The pid recorded for a port ("" if the port is not ours).
pid_of() {
    local want=$1 i=0 p
    local -a ports pids
    read -r -a ports <<<"$PORTS"
    read -r -a pids <<<"$PIDS"
    for p in "${ports[@]}"; do
        if [ "$p" = "$want" ]; then
            echo "${pids[$i]}"
            return 0
        fi
        i=$((i + 1))
    done
    echo ""
}

set_pid() {
    local want=$1 newpid=$2 i=0 p out=""
    local -a ports pids
    read -r -a ports <<<"$PORTS"
    read -r -a pids <<<"$PIDS"
    for p in "${ports[@]}"; do
        if [ "$p" = "$want" ]; then
            out+="$newpid "
        else
            out+="${pids[$i]} "
        fi
        i=$((i + 1))
    done
    PIDS=${out% }
}

# 0 if pid is a live (not zombie) redis-server listening on port.
is_our_server() {
    local pid=$1 port=$2 cmd state
    [ -n "$pid" ] && [ "$pid" != 0 ] || return 1
    [ -r "/proc/$pid/cmdline" ] || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    [ "$state" != Z ] || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    case "$cmd" in
    *redis*:"$port"" "* | *redis*:"$port" | *redis*" $port "* | *redis*" $port") return 0 ;;
    esac
    return 1
}

alive() {
    local pid=$1 stat="" state
    [ -n "$pid" ] && [ "$pid" != 0 ] || return 1
    [ -d "/proc/$pid" ] || return 1
    # The state is the field after "(comm)"; read, not awk: wait-ok asks
    # this of every node on every pass.
    read -r stat <"/proc/$pid/stat" 2>/dev/null || true
    state=${stat##*) }
    state=${state%% *}
    [ -n "$stat" ] && [ -n "$state" ] && [ "$state" != Z ]
}

# Starts one node (no wait). Prints its pid.
spawn_node() {
    local port=$1
    local ndir="$DIR/$port"
    mkdir -p "$ndir"
    local portargs=(--port "$port")
    if [ ${#NODE_TLS[@]} -gt 0 ]; then
        portargs=(--port 0 --tls-port "$port" "${NODE_TLS[@]}")
    fi
    setsid "$REDIS_SERVER" --bind 127.0.0.1 "${portargs[@]}" \
        --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout "$NODE_TIMEOUT" \
        --save '' --appendonly no --daemonize no --repl-diskless-sync-delay 0 \
        --repl-ping-replica-period 1 \
        --dir "$ndir" --logfile "$ndir/redis.log" \
        ${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"} \
        </dev/null >>"$ndir/stdout.log" 2>&1 &
    echo $!
}

# Waits until the node answers, as that process: several clusters may be
# started at once (tests run in parallel), and another one's server that
# took the port first must not pass for ours. 0: up; 1: exited; 2: timed
# out.
wait_ping() {
    local port=$1 pid=$2 deadline
    deadline=$(($(now_ms) + START_WAIT_S * 1000))
    while [ "$(now_ms)" -lt "$deadline" ]; do
        if cli "$port" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$pid"; then
            return 0
        fi
        alive "$pid" || return 1
        sleep 0.05
    done
    return 2
}

# Starts a node on a fresh free port; on a lost race for the port, tries
# another. Appends to PORTS/PIDS and sets NEW_PORT (not a subshell: the
# lists must survive).
NEW_PORT=""
start_new_node() {
    local attempt port pid rc
    for attempt in 1 2 3 4 5; do
        port=$(pick_ports 1)
        pid=$(spawn_node "$port")
        rc=0
        wait_ping "$port" "$pid" || rc=$?
        if [ "$rc" = 0 ]; then
            PORTS=${PORTS:+$PORTS }$port
            PIDS=${PIDS:+$PIDS }$pid
            NEW_PORT=$port
            return 0
        fi
        echo "cluster.sh: node on port $port did not start (attempt $attempt):" >&2
        tail -n 5 "$DIR/$port/redis.log" >&2 2>/dev/null || true
        kill -9 "$pid" 2>/dev/null || true
        rm -rf "${DIR:?}/$port"
        release_ports "$port"
        [ "$rc" = 1 ] || break
    done
    return 1
}

# Starts n nodes at once on fresh free ports, then waits for each (one
# after the other, a node takes about as long to start as to be asked); a
# node that did not start is replaced by start_new_node. Appends to
# PORTS/PIDS like start_new_node.
start_nodes() {
    local n=$1 i rc
    local -a ports pids=()
    read -r -a ports <<<"$(pick_ports "$n")"
    for ((i = 0; i < n; i++)); do
        pids+=("$(spawn_node "${ports[$i]}")")
    done
    for ((i = 0; i < n; i++)); do
        rc=0
        wait_ping "${ports[$i]}" "${pids[$i]}" || rc=$?
        if [ "$rc" = 0 ]; then
            PORTS=${PORTS:+$PORTS }${ports[$i]}
            PIDS=${PIDS:+$PIDS }${pids[$i]}
        else
            echo "cluster.sh: node on port ${ports[$i]} did not start, trying another port:" >&2
            tail -n 5 "$DIR/${ports[$i]}/redis.log" >&2 2>/dev/null || true
            kill -9 "${pids[$i]}" 2>/dev/null || true
            rm -rf "${DIR:?}/${ports[$i]}"
            release_ports "${ports[$i]}"
            start_new_node || return 1
        fi
        write_env
    done
}

# Stops one pid we own: SIGCONT (it may be paused), SIGTERM, SIGKILL after a
# bounded wait.
stop_pid() {
    local pid=$1 port=$2 i
    is_our_server "$pid" "$port" || return 0
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_GRACE_S * 20; i++)); do
        alive "$pid" || return 0
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        alive "$pid" || return 0
        sleep 0.05
    done
    echo "cluster.sh: pid $pid (port $port) did not die" >&2
    return 1
}

# A canonical view of the cluster as one node sees it: node ids, roles,
# masters, slots, and fail flags, sorted; empty if the node does not answer.
view_of() {
    cli "$1" cluster nodes 2>/dev/null | view_from_nodes
}

# The same from CLUSTER NODES lines on stdin (other lines are ignored).
view_from_nodes() {
    awk '
        NF >= 8 {
            flags = $3
            gsub(/myself,?/, "", flags)
            role = (flags ~ /master/) ? "M" : "S"
            fail = (flags ~ /fail\?/) ? "PFAIL" : ((flags ~ /fail/) ? "FAIL" : "")
            if (flags ~ /handshake|noaddr/) fail = fail "HS"
            if (fail == "") fail = "-"
            slots = ""
            for (i = 9; i <= NF; i++) slots = slots " " $i
            print $1, role, $4, fail, slots
        }' | sort
}

# One pass of the wait-ok check. Prints why not, returns 1 when not ok.
check_ok_once() {
    local -a ports pids
    local -A ids=()
    local i=0 p first="" v info lines
    read -r -a ports <<<"$PORTS"
    read -r -a pids <<<"$PIDS"
    for p in "${ports[@]}"; do
        local pid=${pids[$i]}
        i=$((i + 1))
        alive "$pid" || continue
        ! removed "$p" || continue
        # One connection for the three questions (each redis-cli run costs
        # processes, and a pass asks every node).
        info=$(printf 'CLUSTER INFO\nINFO replication\nCLUSTER NODES\n' | cli "$p" 2>/dev/null |
            tr -d '\r' || true)
        lines=$'\n'$info$'\n'
        if [[ $lines != *$'\ncluster_state:ok\n'* ]]; then
            echo "node $p: not cluster_state:ok"
            return 1
        fi
        if [[ $lines != *$'\ncluster_slots_ok:16384\n'* ]]; then
            echo "node $p: not all slots ok: $(grep '^cluster_slots' <<<"$info" | tr '\n' ' ')"
            return 1
        fi
        # A replica that has never finished its first sync cannot be
        # promoted (cluster-replica-validity-factor): not ok until synced.
        if [[ $lines == *$'\nrole:slave\n'* && $lines != *$'\nmaster_link_status:up\n'* ]]; then
            echo "replica $p: link to its master not up"
            return 1
        fi
        v=$(view_from_nodes <<<"$info")
        ids[$p]=$(awk 'NF >= 8 && $3 ~ /myself/ { print $1; exit }' <<<"$info")
        if [ -z "$v" ]; then
            echo "node $p: no CLUSTER NODES"
            return 1
        fi
        if grep -q -e PFAIL -e HS -e '\[' <<<"$v"; then
            echo "node $p: a node in pfail/handshake state or a slot open for migration"
            return 1
        fi
        # A live node must not be flagged failed by anyone.
        if [ -z "$first" ]; then
            first=$v
        elif [ "$v" != "$first" ]; then
            echo "node $p disagrees with node ${ports[0]} about the slot table or flags"
            return 1
        fi
    done
    # Every live node must see every other live node as not failed.
    i=0
    for p in "${ports[@]}"; do
        local pid=${pids[$i]}
        i=$((i + 1))
        alive "$pid" || continue
        ! removed "$p" || continue
        if grep -q "^${ids[$p]:-} .* FAIL" <<<"$first"; then
            echo "live node $p is still flagged as failed"
            return 1
        fi
    done
    [ -n "$first" ] || {
        echo "no live node"
        return 1
    }
    # CLUSTER SLOTS leaves out replicas whose replication offset is still 0
    # (fresh, nothing written yet): clients would not see them. Every
    # healthy replica of a master with slots must be listed.
    local want got
    want=$(awk '$2 == "M" && NF > 4 && $4 == "-" { m[$1] = 1 }
                { role[$1] = $2; master[$1] = $3; fail[$1] = $4 }
                END {
                    n = 0
                    for (id in role) {
                        if (fail[id] != "-") continue
                        if (role[id] == "M" && (id in m)) n++
                        else if (role[id] == "S" && (master[id] in m)) n++
                    }
                    print n
                }' <<<"$first")
    got=0
    for p in "${ports[@]}"; do
        # Ask a live node (the first port may be the killed one).
        if alive "$(pid_of "$p")" && ! removed "$p"; then
            got=$(cli "$p" cluster slots 2>/dev/null | tr -d '\r' | grep -E '^[0-9a-f]{40}$' |
                sort -u | wc -l || true)
            break
        fi
    done
    if [ "$got" != "$want" ]; then
        echo "CLUSTER SLOTS lists $got nodes, $want expected (a replica not yet announced)"
        return 1
    fi
    # A killed node must be seen as failed by everyone (all views are equal
    # by now) and serve no slot: its replica has taken over.
    i=0
    for p in "${ports[@]}"; do
        local pid=${pids[$i]}
        i=$((i + 1))
        alive "$pid" && continue
        ! removed "$p" || continue
        local id
        id=$(conf_id "$p")
        [ -n "$id" ] || continue
        if ! awk -v id="$id" '$1 == id && $4 == "FAIL" && NF == 4 { ok = 1 } END { exit !ok }' \
            <<<"$first"; then
            echo "killed node $p is not yet failed over"
            return 1
        fi
    done
    return 0
}

# A node's own id from its nodes.conf ("" if none yet).
conf_id() {
    awk '$3 ~ /myself/ { print $1; exit }' "$DIR/$1/nodes.conf" 2>/dev/null || true
}

wait_ok() {
    local secs=${1:-30} deadline why=""
    deadline=$(($(now_ms) + secs * 1000))
    while :; do
        if why=$(check_ok_once); then
            return 0
        fi
        if [ "$(now_ms)" -ge "$deadline" ]; then
            echo "cluster.sh: cluster not ok after ${secs}s: $why" >&2
            return 1
        fi
        sleep 0.1
    done
}

node_id() {
    local id
    id=$(cli "$1" cluster myid 2>/dev/null | tr -d '\r')
    [ ${#id} = 40 ] || die "no cluster id from port $1"
    echo "$id"
}

cmd_start() {
    local dir="" n i attempt
    while [ $# -gt 0 ]; do
        case "$1" in
        --masters) MASTERS=${2:?}; shift 2 ;;
        --replicas) REPLICAS=${2:?}; shift 2 ;;
        --node-timeout) NODE_TIMEOUT=${2:?}; shift 2 ;;
        --dir) dir=${2:?}; shift 2 ;;
        --) shift; EXTRA_ARGS=("$@"); break ;;
        *) die "start: unknown option $1" ;;
        esac
    done
    [ "$MASTERS" -ge 3 ] || die "a cluster needs at least 3 masters"
    command -v "$REDIS_SERVER" >/dev/null || die "redis-server not found ($REDIS_SERVER)"
    command -v "$REDIS_CLI" >/dev/null || die "redis-cli not found ($REDIS_CLI)"
    if [ -z "$dir" ]; then
        dir=$(mktemp -d -t rcpipe-cluster.XXXXXX)
    else
        mkdir -p "$dir"
        [ ! -e "$dir/cluster.env" ] || die "$dir already holds a cluster"
    fi
    DIR=$(cd "$dir" && pwd)
    echo "cluster.sh: directory $DIR" >&2
    n=$((MASTERS * (1 + REPLICAS)))
    write_env
    start_nodes "$n" || {
        write_env
        die "could not start the $n nodes (see $DIR)"
    }
    local -a addrs=()
    local p
    for p in $PORTS; do addrs+=("127.0.0.1:$p"); done
    for attempt in 1 2; do
        if timeout "$CREATE_TIMEOUT_S" "$REDIS_CLI" ${CLI_TLS[@]+"${CLI_TLS[@]}"} --cluster create "${addrs[@]}" \
            --cluster-replicas "$REPLICAS" --cluster-yes >"$DIR/create.log" 2>&1; then
            break
        fi
        [ "$attempt" = 2 ] && {
            tail -n 20 "$DIR/create.log" >&2
            die "redis-cli --cluster create failed (see $DIR/create.log)"
        }
        sleep 1
    done
    wait_ok 30 || die "the new cluster did not become ok"
    read -r -a addrs <<<"$PORTS"
    echo "127.0.0.1:${addrs[0]}"
}

cmd_stop() {
    local d=${1:?cluster directory}
    [ -f "$d/cluster.env" ] || die "$d/cluster.env not found: not a cluster directory"
    load_env "$d"
    local -a ports pids
    local i=0 p rc=0
    read -r -a ports <<<"$PORTS"
    read -r -a pids <<<"$PIDS"
    # TERM all first, then wait: stopping in parallel keeps this short.
    for p in "${ports[@]}"; do
        if is_our_server "${pids[$i]}" "$p"; then
            kill -CONT "${pids[$i]}" 2>/dev/null || true
            kill -TERM "${pids[$i]}" 2>/dev/null || true
        fi
        i=$((i + 1))
    done
    i=0
    for p in "${ports[@]}"; do
        stop_pid "${pids[$i]}" "$p" || rc=1
        i=$((i + 1))
    done
    release_ports "${ports[@]}"
    if [ "${RCP_CLUSTER_KEEP:-0}" = 0 ]; then
        rm -rf "${DIR:?}"
    fi
    return "$rc"
}

cmd_kill() {
    local port=${2:?port} pid i
    load_env "${1:?}"
    pid=$(pid_of "$port")
    [ -n "$pid" ] || die "port $port is not a node of this cluster"
    if is_our_server "$pid" "$port"; then
        kill -KILL "$pid"
        for ((i = 0; i < 200; i++)); do
            alive "$pid" || break
            sleep 0.025
        done
        alive "$pid" && die "pid $pid did not die"
    fi
    set_pid "$port" 0
    write_env
}

cmd_restart() {
    local port=${2:?port} pid rc attempt
    load_env "${1:?}"
    pid=$(pid_of "$port")
    [ -n "$pid" ] || die "port $port is not a node of this cluster"
    if is_our_server "$pid" "$port"; then
        die "node $port (pid $pid) is still running"
    fi
    # The port may still be held for a moment by the dead process's sockets.
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
        pid=$(spawn_node "$port")
        rc=0
        wait_ping "$port" "$pid" || rc=$?
        if [ "$rc" = 0 ]; then
            set_pid "$port" "$pid"
            write_env
            echo "$pid"
            return 0
        fi
        kill -9 "$pid" 2>/dev/null || true
        [ "$rc" = 1 ] || break
        echo "cluster.sh: restart of $port failed (attempt $attempt), retrying" >&2
        sleep 0.5
    done
    tail -n 10 "$DIR/$port/redis.log" >&2 || true
    die "could not restart node $port"
}

# After a failed reshard/rebalance: close slots left open (importing /
# migrating) so that the cluster is consistent again.
fix_cluster() {
    local entry
    entry=$(first_live_port)
    echo "cluster.sh: running redis-cli --cluster fix" >&2
    timeout "$RESHARD_TIMEOUT_S" "$REDIS_CLI" ${CLI_TLS[@]+"${CLI_TLS[@]}"} --cluster fix "127.0.0.1:$entry" --cluster-yes \
        >>"$DIR/fix.log" 2>&1 || true
    wait_ok 30 || true
}

# Rebalance is idempotent (it computes the moves from the current state),
# so a failed one is fixed up and tried once more.
rebalance_with_retry() {
    local entry=$1 attempt
    shift
    for attempt in 1 2; do
        if timeout "$RESHARD_TIMEOUT_S" "$REDIS_CLI" ${CLI_TLS[@]+"${CLI_TLS[@]}"} --cluster rebalance "127.0.0.1:$entry" \
            "$@" >>"$DIR/rebalance.log" 2>&1; then
            return 0
        fi
        tail -n 20 "$DIR/rebalance.log" >&2
        fix_cluster
        [ "$attempt" = 2 ] || echo "cluster.sh: retrying the rebalance" >&2
    done
    return 1
}

cmd_reshard() {
    local from=${2:?from port} to=${3:?to port} n=${4:?slot count} fid tid
    load_env "${1:?}"
    [ -n "$(pid_of "$from")" ] || die "$from is not a node of this cluster"
    [ -n "$(pid_of "$to")" ] || die "$to is not a node of this cluster"
    wait_ok 30 || die "cluster not ok before reshard"
    fid=$(node_id "$from")
    tid=$(node_id "$to")
    if ! timeout "$RESHARD_TIMEOUT_S" "$REDIS_CLI" ${CLI_TLS[@]+"${CLI_TLS[@]}"} --cluster reshard "127.0.0.1:$from" \
        --cluster-from "$fid" --cluster-to "$tid" --cluster-slots "$n" \
        --cluster-yes >>"$DIR/reshard.log" 2>&1; then
        tail -n 20 "$DIR/reshard.log" >&2
        fix_cluster
        die "redis-cli --cluster reshard failed (see $DIR/reshard.log)"
    fi
    wait_ok 30 || die "cluster not ok after reshard"
}

cmd_rebalance() {
    local d=${1:?} first
    shift
    load_env "$d"
    wait_ok 30 || die "cluster not ok before rebalance"
    first=$(first_live_port)
    rebalance_with_retry "$first" "$@" ||
        die "redis-cli --cluster rebalance failed (see $DIR/rebalance.log)"
    wait_ok 30 || die "cluster not ok after rebalance"
}

first_live_port() {
    local -a ports pids
    local i=0 p
    read -r -a ports <<<"$PORTS"
    read -r -a pids <<<"$PIDS"
    for p in "${ports[@]}"; do
        if alive "${pids[$i]}" && ! removed "$p"; then
            echo "$p"
            return 0
        fi
        i=$((i + 1))
    done
    die "no live node"
}

# Nodes removed with del-node are listed in DIR/removed; wait-ok and the
# choice of an entry node skip them.
removed() {
    [ -f "$DIR/removed" ] && grep -qx "$1" "$DIR/removed"
}

cmd_add_node() {
    local d=${1:?} master=${2:-} port entry
    load_env "$d"
    wait_ok 30 || die "cluster not ok before add-node"
    entry=$(first_live_port)
    start_new_node || die "could not start a new node"
    port=$NEW_PORT
    write_env
    if [ -n "$master" ]; then
        timeout 60 "$REDIS_CLI" ${CLI_TLS[@]+"${CLI_TLS[@]}"} --cluster add-node "127.0.0.1:$port" "127.0.0.1:$entry" \
            --cluster-slave --cluster-master-id "$(node_id "$master")" \
            >>"$DIR/add-node.log" 2>&1 || die "add-node failed (see $DIR/add-node.log)"
    else
        timeout 60 "$REDIS_CLI" ${CLI_TLS[@]+"${CLI_TLS[@]}"} --cluster add-node "127.0.0.1:$port" "127.0.0.1:$entry" \
            >>"$DIR/add-node.log" 2>&1 || die "add-node failed (see $DIR/add-node.log)"
    fi
    wait_ok 30 || die "cluster not ok after add-node"
    echo "$port"
}

cmd_del_node() {
    local d=${1:?} port=${2:?port} id entry nslots
    load_env "$d"
    [ -n "$(pid_of "$port")" ] || die "$port is not a node of this cluster"
    wait_ok 30 || die "cluster not ok before del-node"
    id=$(node_id "$port")
    nslots=$(cli "$port" cluster nodes | awk '$3 ~ /myself/ {
        n = 0
        for (i = 9; i <= NF; i++) {
            if ($i ~ /^\[/) continue
            k = split($i, r, "-")
            n += (k == 2) ? r[2] - r[1] + 1 : 1
        }
        print n }')
    if [ "${nslots:-0}" -gt 0 ]; then
        rebalance_with_retry "$port" --cluster-weight "$id=0" ||
            die "moving the slots of $port away failed (see $DIR/rebalance.log)"
        wait_ok 30 || die "cluster not ok after emptying $port"
    fi
    echo "$port" >>"$DIR/removed"
    entry=$(first_live_port)
    timeout 60 "$REDIS_CLI" ${CLI_TLS[@]+"${CLI_TLS[@]}"} --cluster del-node "127.0.0.1:$entry" "$id" \
        >>"$DIR/del-node.log" 2>&1 || die "del-node failed (see $DIR/del-node.log)"
    wait_ok 30 || die "cluster not ok after del-node"
}

# The slots a CLUSTER NODES line gives node id (myself if id is empty),
# one per line, sorted.
slots_in_view() {
    awk -v id="$1" '(id == "" && $3 ~ /myself/) || (id != "" && $1 == id) {
        for (i = 9; i <= NF; i++) {
            if ($i ~ /^\[/) continue
            k = split($i, r, "-")
            if (k == 1) r[2] = r[1]
            for (s = r[1]; s <= r[2]; s++) print s
        }
    }' | sort -n
}

adopt_orphan_slots() {
    local -a ports pids
    local i=0 p q id own theirs missing
    read -r -a ports <<<"$PORTS"
    read -r -a pids <<<"$PIDS"
    for p in "${ports[@]}"; do
        i=$((i + 1))
        alive "${pids[$((i - 1))]}" && ! removed "$p" || continue
        id=$(cli "$p" cluster myid 2>/dev/null | tr -d '\r' || true)
        [ ${#id} = 40 ] || continue
        for q in "${ports[@]}"; do
            [ "$q" != "$p" ] || continue
            alive "$(pid_of "$q")" && ! removed "$q" || continue
            theirs=$(cli "$q" cluster nodes 2>/dev/null | slots_in_view "$id" || true)
            [ -n "$theirs" ] && break
        done
        [ -n "${theirs:-}" ] || continue
        own=$(cli "$p" cluster nodes 2>/dev/null | slots_in_view "" || true)
        missing=$(comm -23 <(echo "$theirs" | sort) <(echo "$own" | sort) | sort -n | tr '\n' ' ')
        if [ -n "${missing// /}" ]; then
            echo "cluster.sh: node $p does not serve slots the others give it: $missing" >&2
            # shellcheck disable=SC2086
            if cli "$p" cluster addslots $missing >&2; then
                # For a caller that counts what was lost: the node dropped
                # these slots (and their keys) itself; they come back empty.
                echo "adopted $p $missing"
            fi
        fi
    done
}

# SIGSTOP / SIGCONT one node we own (after the same pid check as kill).
signal_node() {
    local sig=$1 port=$2 pid
    pid=$(pid_of "$port")
    [ -n "$pid" ] || die "port $port is not a node of this cluster"
    is_our_server "$pid" "$port" || die "node $port is not running (pid ${pid:-none})"
    kill "-$sig" "$pid"
}

cmd_failover() {
    local port=${2:?port} how=${3:-} pid reply deadline
    load_env "${1:?}"
    pid=$(pid_of "$port")
    [ -n "$pid" ] || die "port $port is not a node of this cluster"
    is_our_server "$pid" "$port" || die "node $port is not running"
    case "$how" in
    "" | force | takeover) ;;
    *) die "failover: unknown option $how (force or takeover)" ;;
    esac
    [ "$(cli "$port" role 2>/dev/null | head -n 1 | tr -d '\r')" = slave ] ||
        die "node $port is not a replica"
    reply=$(cli "$port" cluster failover ${how:+"$how"} 2>&1 | tr -d '\r' || true)
    [ "$reply" = OK ] || die "CLUSTER FAILOVER on $port: $reply"
    deadline=$(($(now_ms) + 30000))
    while [ "$(now_ms)" -lt "$deadline" ]; do
        if [ "$(cli "$port" role 2>/dev/null | head -n 1 | tr -d '\r' || true)" = master ]; then
            return 0
        fi
        sleep 0.05
    done
    die "node $port is not a master 30 s after CLUSTER FAILOVER"
}

cmd_nodes() {
    load_env "${1:?}"
    local -a ports pids
    local i=0 p role
    read -r -a ports <<<"$PORTS"
    read -r -a pids <<<"$PIDS"
    for p in "${ports[@]}"; do
        role=down
        if alive "${pids[$i]}"; then
            role=$(cli "$p" role 2>/dev/null | head -n 1 | tr -d '\r' || true)
            [ -n "$role" ] || role=down
        fi
        echo "$p ${pids[$i]} $role"
        i=$((i + 1))
    done
}

cmd=${1:-}
shift || true
case "$cmd" in
start) cmd_start "$@" ;;
stop) cmd_stop "$@" ;;
wait-ok)
    load_env "${1:?cluster directory}"
    wait_ok "${2:-30}"
    ;;
reshard) cmd_reshard "$@" ;;
rebalance) cmd_rebalance "$@" ;;
add-node) cmd_add_node "$@" ;;
del-node) cmd_del_node "$@" ;;
kill) cmd_kill "$@" ;;
restart) cmd_restart "$@" ;;
nodes) cmd_nodes "$@" ;;
pause)
    load_env "${1:?cluster directory}"
    signal_node STOP "${2:?port}"
    ;;
resume)
    load_env "${1:?cluster directory}"
    signal_node CONT "${2:?port}"
    ;;
failover) cmd_failover "$@" ;;
fix)
    load_env "${1:?cluster directory}"
    adopt_orphan_slots
    wait_ok 10 2>/dev/null || fix_cluster
    wait_ok 30
    ;;
myid)
    load_env "${1:?cluster directory}"
    node_id "${2:?port}"
    ;;
*)
    sed -n '2,55p' "$0" >&2
    exit 2
    ;;
esac
