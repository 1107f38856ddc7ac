/* lib/cmdtable.h: the command table, the library's one source of facts
 * about commands: flags (read-only, write, blocking, connection state,
 * split by slot, ...) and where a command's keys are. Generated from a
 * real server's COMMAND reply plus the facts COMMAND does not state
 * (gen_cmdtable.py, committed as cmdtable_data.inc). Pure functions: no
 * I/O, no lock, no allocation. */
#ifndef RCP_CMDTABLE_H
#define RCP_CMDTABLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "thread_local.h"

enum {
    RCP__CMD_READONLY = 1u << 0, /* may go to a replica; safe to resend after RCP_ERR_IO */
    RCP__CMD_WRITE = 1u << 1,
    RCP__CMD_BLOCKING = 1u << 2,
    RCP__CMD_MULTIKEY = 1u << 3, /* may take more than one key */
    RCP__CMD_NOKEY = 1u << 4,    /* takes no key at all: any master may serve it */
    RCP__CMD_ADMIN = 1u << 5,
    RCP__CMD_PUBSUB = 1u << 6,
    RCP__CMD_NOSCRIPT = 1u << 7,
    RCP__CMD_CONNSTATE = 1u << 8,    /* changes the connection's state: never on a shared pipeline */
    RCP__CMD_BLOCK_OPTION = 1u << 9, /* blocks only with its BLOCK option (XREAD, XREADGROUP) */
    RCP__CMD_SPLIT = 1u << 10,       /* the cluster layer splits it by slot across nodes */
    RCP__CMD_PER_NODE = 1u << 11,    /* keyless, about one node's whole keyspace (DBSIZE, KEYS,
                                      * FLUSHALL...): a cluster handle refuses it as one request */
    RCP__CMD_CACHEABLE = 1u << 12,   /* a read whose reply depends only on its key and arguments:
                                      * the client-side cache may keep it (cluster/cache.c) */
    RCP__CMD_ALL_FLAGS = (1u << 13) - 1 /* every bit above; a new flag moves it */
};

typedef struct rcp__cmd rcp__cmd; /* opaque: one command or subcommand */

/* The command (or "CONTAINER subcommand", e.g. OBJECT ENCODING) named by
 * argv; NULL if unknown. Case-insensitive, binary-safe (argvlen NULL:
 * C strings). */
const rcp__cmd *rcp__cmd_lookup(int argc, const char **argv, const size_t *argvlen);
unsigned rcp__cmd_flags(const rcp__cmd *cmd);
const char *rcp__cmd_name(const rcp__cmd *cmd); /* e.g. "get", "object|encoding" */
/* The i-th table entry in name order (subcommands included), NULL past the
 * end: for tests and tools that walk the whole table. */
const rcp__cmd *rcp__cmd_at(size_t i);

/* Indices into argv of the command's keys, from its key specs (handles
 * EVAL/EVALSHA/FCALL numkeys, XREAD/XREADGROUP ... STREAMS, ZUNIONSTORE-style
 * numkeys, MIGRATE with KEYS, subcommands). Writes at most max indices;
 * returns the number of keys (may exceed max), 0 for none, -1 if argv does
 * not fit the command's syntax (e.g. numkeys larger than the arguments). */
int rcp__cmd_keys(const rcp__cmd *cmd, int argc, const char **argv, const size_t *argvlen,
                  int *idx, int max);

/* 1 when argv[1] is the command's one and only key, argc fits its arity,
 * and nothing in its flags screens it (no connection state, no blocking,
 * not per node): GET, SET, INCR, HGET and most others. Such a command's
 * route needs only argv[1]'s slot; rcp__cmd_keys and rcp__cmd_screen would
 * say the same at several times the cost. 0 otherwise, or cmd NULL. */
int rcp__cmd_key1(const rcp__cmd *cmd, int argc);
/* The bytes the caller spelled a command's name with (up to 16 of them),
 * as rcp__name_key_of reads them: a name of the same length and the same
 * key has the same bytes. */
struct rcp__name_key {
    uint64_t a, b;
    size_t len; /* 0: none */
};

/* Reads s[0..n) (1 <= n <= 16) into k: its first and last 8 (or 4, or
 * single) bytes, which between them cover every byte. */
static inline void rcp__name_key_of(struct rcp__name_key *k, const char *s, size_t n)
{
    k->len = n;
    if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        k->a = a;
        k->b = b;
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        k->a = a;
        k->b = b;
    } else {
        k->a = (unsigned char)s[0] | (uint64_t)(unsigned char)s[n / 2] << 8;
        k->b = (unsigned char)s[n - 1];
    }
}

/* What a thread remembers, in one thread-local object (one address to
 * compute on the request path, not one per variable); cmdtable.c keeps it:
 * - cmd: the last command without subcommands it looked up, so that the
 *   same command again (the common case) skips the lower-casing and the
 *   binary search; key: the bytes its name was spelled with, so that the
 *   same bytes are cmd without the case-folding compare;
 * - k1cmd, k1argc, k1val, k1flags: rcp__cmd_key1's last answer, a
 *   function of cmd and argc only (so the same pair has the same answer),
 *   and k1cmd's flags.
 * Visible here only for rcp__cmd_lookup_key1's inline check. */
struct rcp__cmd_memo {
    const rcp__cmd *cmd;
    struct rcp__name_key key;
    const rcp__cmd *k1cmd;
    int k1argc, k1val;
    unsigned k1flags;
};
extern RCP__THREAD_LOCAL struct rcp__cmd_memo rcp__cmd_memo;

int rcp__cmd_lookup_key1_slow(int argc, const char **argv, const size_t *argvlen,
                              const rcp__cmd **cmd, unsigned *flags);

/* The remembered command if name[0..len) has the bytes it was last
 * spelled with, else NULL: the one compare both look-ups start with. */
static inline const rcp__cmd *rcp__cmd_memo_hit(const char *name, size_t len)
{
    const struct rcp__cmd_memo *m = &rcp__cmd_memo;
    struct rcp__name_key k;
    if (!m->cmd || !len || len != m->key.len)
        return NULL;
    rcp__name_key_of(&k, name, len);
    return k.a == m->key.a && k.b == m->key.b ? m->cmd : NULL;
}

/* rcp__cmd_lookup, rcp__cmd_flags and rcp__cmd_key1 in one call, for a
 * cluster's classification of every request: the command in *cmd, its
 * flags in *flags (0 for NULL), rcp__cmd_key1's answer returned. A
 * thread sending the command it sent last, with as many arguments, gets
 * all three from what the thread remembers: one compare of the name's
 * bytes, inline in the caller, and no call. argvlen NULL (C strings)
 * takes the slow path: a strlen here would cost the common case. */
static inline int rcp__cmd_lookup_key1(int argc, const char **argv, const size_t *argvlen,
                                       const rcp__cmd **cmd, unsigned *flags)
{
    const struct rcp__cmd_memo *m = &rcp__cmd_memo;
    const rcp__cmd *c;
    if (argvlen && argv && argv[0] && argc == m->k1argc &&
        (c = rcp__cmd_memo_hit(argv[0], argvlen[0])) != NULL && c == m->k1cmd) {
        *cmd = c;
        *flags = m->k1flags;
        return m->k1val;
    }
    return rcp__cmd_lookup_key1_slow(argc, argv, argvlen, cmd, flags);
}

/* How a command may travel, from its flags (and, for RCP__CMD_BLOCK_OPTION
 * commands, its arguments): RCP_OK (a shared pipeline carries it),
 * RCP_ERR_BLOCKING_COMMAND or RCP_ERR_UNSUPPORTED (connection state), with
 * *why static text for a refusal. cmd NULL (unknown command): RCP_OK. */
int rcp__cmd_screen(const rcp__cmd *cmd, int argc, const char **argv, const size_t *argvlen,
                    const char **why);

#endif
