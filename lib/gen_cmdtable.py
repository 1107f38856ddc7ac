#!/usr/bin/env python3
"""gen_cmdtable.py: writes lib/cmdtable_data.inc, rcpipe's command table,
from the COMMAND reply of a running redis-server (7.0 or later).

It is the library's only source of command facts: key positions, read-only,
blocking, and the facts COMMAND does not state, which are kept below
(OVERLAY): which commands change the state of the connection they run on
(refused on a shared pipeline), which block only with an option, which
multi-key commands the cluster layer splits by slot, and which keyless
commands are about one node's whole keyspace.

The table is data: it is generated once per supported server version and
committed, so building rcpipe never needs a server. To regenerate it (from the
source root, in bash; Debian's redis-server 7.0.15 made the committed copy):

    read PORT PID DIR < <(tests/scripts/redis-node.sh start)
    python3 lib/gen_cmdtable.py 127.0.0.1 "$PORT" > lib/cmdtable_data.inc
    tests/scripts/redis-node.sh stop "$PID" "$DIR"

Only the Python standard library is used: a tiny RESP2 client over a socket.
What each entry holds, and how lib/cmdtable.c reads it, is described in
cmdtable.c. Commands whose key specs a generic reader cannot follow (begin
search or find keys of type "unknown", or the "incomplete" flag) must have a
hand-written reader in cmdtable.c; they are listed in SPECIAL below, and any
other such command is reported on stderr so a new server version does not
slip through unnoticed.
"""

import socket
import sys

# Commands with a hand-written key reader in cmdtable.c (name -> C constant).
SPECIAL = {
    "sort": "SPECIAL_SORT",
    "migrate": "SPECIAL_MIGRATE",
}

# Commands whose only non-generic key spec names no routable key: SORT_RO's
# BY/GET patterns name keys through the content of the sorted key (cluster
# mode refuses them anyway). The generic reader skips "unknown" specs.
IGNORE_UNKNOWN = {"sort_ro"}

# Facts COMMAND does not give, by command name ("container|sub" for a
# subcommand), OR-ed into the generated flags.
OVERLAY = {}
# Connection state: a shared pipelined connection cannot carry them (the
# state would leak into every other caller's requests, or the replies
# would stop matching the requests one to one).
for name in ("multi", "exec", "discard", "watch", "unwatch", "subscribe", "psubscribe",
             "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe", "monitor", "sync",
             "psync", "quit", "reset", "hello", "select", "auth", "readonly", "readwrite",
             "client|reply"):
    OVERLAY[name] = ["RCP__CMD_CONNSTATE"]
# Block the connection until the server's own timeout, although COMMAND
# does not flag them "blocking".
for name in ("wait", "waitaof"):
    OVERLAY[name] = ["RCP__CMD_BLOCKING"]
# Flagged "blocking" by COMMAND, but block only with their BLOCK option.
for name in ("xread", "xreadgroup"):
    OVERLAY[name] = ["RCP__CMD_BLOCK_OPTION"]
# Multi-key commands the cluster layer splits by slot and merges.
for name in ("mget", "mset", "del", "unlink", "exists", "touch"):
    OVERLAY[name] = ["RCP__CMD_SPLIT"]
# Reads whose reply depends only on their key's value and their own
# arguments (no randomness, no clock, no cursor): the client-side cache
# (cluster/cache.c) may keep their replies until the server invalidates
# the key. EXISTS only with one key (the cache checks).
for name in ("get", "strlen", "getrange", "substr", "exists", "type",
             "hget", "hmget", "hgetall", "hlen", "hexists", "hstrlen", "hkeys", "hvals",
             "smembers", "scard", "sismember", "smismember",
             "lrange", "llen", "lindex",
             "zrange", "zrangebyscore", "zrangebylex", "zrevrange", "zrevrangebyscore",
             "zrevrangebylex", "zscore", "zmscore", "zcard", "zcount", "zlexcount", "zrank",
             "zrevrank",
             "getbit", "bitcount", "bitpos"):
    OVERLAY.setdefault(name, []).append("RCP__CMD_CACHEABLE")
# Keyless commands about a node's whole keyspace: through a cluster
# handle's ordinary call they would act on one master only, where the
# caller almost surely meant the cluster (rcp_cluster_command_nodes runs
# them on every master; rcp_cluster_scan_* scans the cluster).
for name in ("flushall", "flushdb", "keys", "dbsize", "scan"):
    OVERLAY[name] = ["RCP__CMD_PER_NODE"]

# COMMAND flag -> rcpipe flag bit.
FLAG_MAP = {
    "readonly": "RCP__CMD_READONLY",
    "write": "RCP__CMD_WRITE",
    "blocking": "RCP__CMD_BLOCKING",
    "admin": "RCP__CMD_ADMIN",
    "pubsub": "RCP__CMD_PUBSUB",
    "noscript": "RCP__CMD_NOSCRIPT",
}


class RespError(Exception):
    pass


def read_reply(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise RespError("connection closed or truncated reply")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body.decode()
    if kind == b"-":
        raise RespError("server error: " + body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        n = int(body)
        if n < 0:
            return None
        data = f.read(n + 2)
        if len(data) != n + 2:
            raise RespError("truncated bulk string")
        return data[:-2].decode()
    if kind == b"*":
        n = int(body)
        if n < 0:
            return None
        return [read_reply(f) for _ in range(n)]
    raise RespError("unexpected reply type %r" % kind)


def command(sock, f, *args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    sock.sendall(b"".join(out))
    return read_reply(f)


def as_map(flat):
    """RESP2 sends maps as flat [k1, v1, k2, v2, ...] arrays."""
    if not isinstance(flat, list) or len(flat) % 2:
        raise RespError("expected a map-like array, got %r" % (flat,))
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Spec:
    """One key spec, reduced to what cmdtable.c needs."""

    def __init__(self, raw):
        m = as_map(raw)
        bs = as_map(m["begin_search"])
        fk = as_map(m["find_keys"])
        self.flags = m.get("flags") or []
        self.incomplete = "incomplete" in self.flags
        self.bs_type = bs["type"]
        bspec = as_map(bs["spec"]) if bs.get("spec") else {}
        self.keyword = None
        if self.bs_type == "index":
            self.bs_arg = bspec["index"]
        elif self.bs_type == "keyword":
            self.keyword = bspec["keyword"]
            self.bs_arg = bspec["startfrom"]
        else:
            self.bs_arg = 0
        self.fk_type = fk["type"]
        fspec = as_map(fk["spec"]) if fk.get("spec") else {}
        if self.fk_type == "range":
            self.fk = (fspec["lastkey"], fspec["keystep"], fspec["limit"])
        elif self.fk_type == "keynum":
            self.fk = (fspec["keynumidx"], fspec["firstkey"], fspec["keystep"])
        else:
            self.fk = (0, 0, 0)

    def generic(self):
        return (not self.incomplete and self.bs_type in ("index", "keyword")
                and self.fk_type in ("range", "keynum"))

    def multi(self):
        """Can this spec alone yield more than one key?"""
        if self.fk_type == "keynum":
            return True
        if self.fk_type == "range":
            return self.fk[0] < 0 or self.fk[0] >= max(self.fk[1], 1)
        return False

    def c_init(self):
        bs = {"index": "BS_INDEX", "keyword": "BS_KEYWORD"}.get(self.bs_type, "BS_UNKNOWN")
        fk = {"range": "FK_RANGE", "keynum": "FK_KEYNUM"}.get(self.fk_type, "FK_UNKNOWN")
        kw = c_string(self.keyword) if self.keyword is not None else "NULL"
        return "{%s, %d, %s, %s, %d, %d, %d}" % (bs, self.bs_arg, kw, fk, *self.fk)


class Cmd:
    def __init__(self, raw, warnings):
        # [name, arity, flags, first, last, step, acl, tips, key specs, subcommands]
        self.name = raw[0].lower()
        self.arity = raw[1]
        self.flags = raw[2] or []
        self.first, self.last, self.step = raw[3], raw[4], raw[5]
        self.specs = [Spec(s) for s in (raw[8] if len(raw) > 8 and raw[8] else [])]
        self.subs = [Cmd(s, warnings) for s in (raw[9] if len(raw) > 9 and raw[9] else [])]
        self.special = SPECIAL.get(self.name, "SPECIAL_NONE")
        if (self.special == "SPECIAL_NONE" and self.name not in IGNORE_UNKNOWN
                and not all(s.generic() for s in self.specs)):
            warnings.append("%s: key spec the generic reader cannot follow; "
                            "add a reader to cmdtable.c and to SPECIAL" % self.name)
        if not self.specs and self.first > 0:
            warnings.append("%s: legacy key positions but no key specs" % self.name)

    def c_flags(self):
        bits = [FLAG_MAP[f] for f in self.flags if f in FLAG_MAP]
        bits += [b for b in OVERLAY.get(self.name, []) if b not in bits]
        usable = [s for s in self.specs if s.generic()]
        if not self.specs:
            bits.append("RCP__CMD_NOKEY")
        elif self.special != "SPECIAL_NONE":
            bits.append("RCP__CMD_MULTIKEY")
        elif len(usable) > 1 or any(s.multi() for s in usable):
            bits.append("RCP__CMD_MULTIKEY")
        return " | ".join(bits) if bits else "0"


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: %s HOST PORT > lib/cmdtable_data.inc\n" % argv[0])
        return 2
    sock = socket.create_connection((argv[1], int(argv[2])), timeout=10)
    f = sock.makefile("rb")
    info = command(sock, f, "INFO", "server")
    version = "unknown"
    for line in info.splitlines():
        if line.startswith("redis_version:"):
            version = line.split(":", 1)[1].strip()
    raw = command(sock, f, "COMMAND")
    sock.close()

    warnings = []
    cmds = []
    for r in raw:
        c = Cmd(r, warnings)
        cmds.append(c)
        cmds.extend(c.subs)
    # One array sorted by byte order of the full name ("container|sub"),
    # which is what cmdtable.c's binary search compares with strcmp.
    cmds.sort(key=lambda c: c.name.encode())
    for w in warnings:
        sys.stderr.write("gen_cmdtable.py: warning: " + w + "\n")

    specs = []
    out = []
    out.append("/* lib/cmdtable_data.inc: GENERATED by lib/gen_cmdtable.py from the\n"
               " * COMMAND reply of redis-server %s. Do not edit by hand: see\n"
               " * gen_cmdtable.py for how to regenerate it. Included by cmdtable.c only. */\n"
               % version)
    rows = []
    for c in cmds:
        first_spec = len(specs)
        specs.extend(c.specs)
        rows.append("    {%s, %d, %s, %d, %d, %d, %s, %d, %d, %d},\n" % (
            c_string(c.name), c.arity, c.c_flags(), c.first, c.last, c.step,
            c.special, first_spec, len(c.specs), len(c.subs)))
    out.append("\n#define RCP_CMDTABLE_VERSION %s\n" % c_string(version))
    out.append("\n/* {begin search, index or startfrom, keyword, find keys, a, b, c}:\n"
               " * range (lastkey, keystep, limit), keynum (keynumidx, firstkey, keystep). */\n")
    out.append("static const struct keyspec keyspecs[] = {\n")
    for i, s in enumerate(specs):
        out.append("    %s, /* %d */\n" % (s.c_init(), i))
    out.append("};\n")
    out.append("\n/* {name, arity, flags, first, last, step, special, first spec, specs,\n"
               " * subcommands}, sorted by name. */\n")
    out.append("static const struct rcp__cmd cmds[] = {\n")
    out.extend(rows)
    out.append("};\n")
    sys.stdout.write("".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
