/* lib/cmdtable.c: what the library knows about each command: its flags
 * (read-only, write, blocking, connection state, split by slot, ...) and
 * where its keys are. Owns the command table, the key-spec reader and the
 * screening of what a shared pipeline may carry. The connection (lib/)
 * screens with it; the cluster layer routes with it (keys and slots).
 *
 * The table itself is data generated from a real server's COMMAND reply
 * (cmdtable_data.inc, committed). To regenerate it, from the source root
 * (bash):
 *
 *     read PORT PID DIR < <(tests/scripts/redis-node.sh start)
 *     python3 lib/gen_cmdtable.py 127.0.0.1 "$PORT" > lib/cmdtable_data.inc
 *     tests/scripts/redis-node.sh stop "$PID" "$DIR"
 *
 * Keys are found with Redis 7's key specs, read generically: a begin search
 * (a fixed index, or a keyword searched forward or, for a negative start,
 * backward) followed by a find-keys rule (a range up to a fixed or
 * end-relative last key, possibly cut by a limit factor, or a count read
 * from a numkeys argument). The two commands whose specs are "unknown" or
 * "incomplete" (SORT, MIGRATE) have small readers of their own below. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "cmdtable.h"
#include "format.h"
#include "rcpipe/common.h"

enum { BS_UNKNOWN, BS_INDEX, BS_KEYWORD };
enum { FK_UNKNOWN, FK_RANGE, FK_KEYNUM };
enum { SPECIAL_NONE, SPECIAL_SORT, SPECIAL_MIGRATE };

struct keyspec {
    signed char bs;      /* BS_* */
    short bs_arg;        /* BS_INDEX: the index; BS_KEYWORD: startfrom (< 0: backward from
                            argc + startfrom) */
    const char *keyword; /* BS_KEYWORD, upper case as the server lists it */
    signed char fk;      /* FK_* */
    short a, b, c;       /* FK_RANGE: lastkey, keystep, limit;
                            FK_KEYNUM: keynumidx, firstkey, keystep */
};

struct rcp__cmd {
    const char *name;    /* lower case; "container|sub" for a subcommand */
    int arity;           /* > 0: exactly that many arguments; < 0: at least -arity */
    unsigned flags;      /* RCP__CMD_* */
    int first, last, step; /* legacy key positions, kept for reference */
    int special;         /* SPECIAL_*: a hand-written key reader */
    unsigned short spec0, nspecs; /* this command's slice of keyspecs[] */
    unsigned short nsubs; /* > 0: a container such as OBJECT or XINFO */
};

#include "cmdtable_data.inc"
#include "thread_local.h"

#define NCMDS (sizeof cmds / sizeof cmds[0])

/* Longer than any command name ("container|sub"), so a longer argument is
 * simply unknown. */
#define NAME_BUF 64

static size_t arg_len(const char **argv, const size_t *argvlen, int i)
{
    if (!argv[i])
        return 0;
    return argvlen ? argvlen[i] : strlen(argv[i]);
}

/* Appends the lower-cased argument to buf at *pos; 0 if it cannot be a
 * command name (too long, NUL or '|' inside: '|' would let "object|encoding"
 * typed by a caller match a subcommand the server would not know). */
static int append_lower(char *buf, size_t *pos, const char *s, size_t n)
{
    size_t i;
    if (!s || n >= NAME_BUF - *pos)
        return 0;
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\0' || ch == '|')
            return 0;
        buf[(*pos)++] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    }
    buf[*pos] = '\0';
    return 1;
}

static const rcp__cmd *find(const char *name)
{
    size_t lo = 0, hi = NCMDS;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, cmds[mid].name);
        if (c == 0)
            return &cmds[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* What this thread remembers (cmdtable.h, struct rcp__cmd_memo). */
RCP__THREAD_LOCAL struct rcp__cmd_memo rcp__cmd_memo;

/* The name (lower case in the table) equals s[0..n) ignoring ASCII case. */
static int same_name(const char *name, const char *s, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 'A' && ch <= 'Z')
            ch = (unsigned char)(ch - 'A' + 'a');
        if (!name[i] || (unsigned char)name[i] != ch)
            return 0;
    }
    return name[n] == '\0';
}

/* rcp__cmd_memo.cmd if argv[0] has the same bytes as last time, else NULL. */
static inline const rcp__cmd *last_hit(int argc, const char **argv, const size_t *argvlen)
{
    if (!rcp__cmd_memo.cmd || argc < 1 || !argv || !argv[0])
        return NULL;
    return rcp__cmd_memo_hit(argv[0], arg_len(argv, argvlen, 0));
}

const rcp__cmd *rcp__cmd_lookup(int argc, const char **argv, const size_t *argvlen)
{
    char buf[NAME_BUF];
    size_t pos = 0, len0;
    const rcp__cmd *cmd, *sub, *last = last_hit(argc, argv, argvlen);

    if (last)
        return last;
    if (argc < 1 || !argv || !argv[0])
        return NULL;
    len0 = arg_len(argv, argvlen, 0);
    last = rcp__cmd_memo.cmd;
    if (last && same_name(last->name, argv[0], len0)) {
        if (len0 && len0 <= 16)
            rcp__name_key_of(&rcp__cmd_memo.key, argv[0], len0);
        return last; /* never a container: those are not remembered */
    }
    if (!append_lower(buf, &pos, argv[0], len0))
        return NULL;
    cmd = find(buf);
    if (cmd && cmd->nsubs == 0) {
        rcp__cmd_memo.cmd = cmd;
        rcp__cmd_memo.key.len = 0;
        if (len0 && len0 <= 16)
            rcp__name_key_of(&rcp__cmd_memo.key, argv[0], len0);
    }
    if (!cmd || cmd->nsubs == 0 || argc < 2)
        return cmd;
    /* A container without a known subcommand is still a command the server
     * knows (it answers with an error or help), so hand back the container. */
    buf[pos++] = '|';
    if (!append_lower(buf, &pos, argv[1], arg_len(argv, argvlen, 1)))
        return cmd;
    sub = find(buf);
    return sub ? sub : cmd;
}

unsigned rcp__cmd_flags(const rcp__cmd *cmd)
{
    return cmd ? cmd->flags : 0;
}

const char *rcp__cmd_name(const rcp__cmd *cmd)
{
    return cmd ? cmd->name : NULL;
}

const rcp__cmd *rcp__cmd_at(size_t i)
{
    return i < NCMDS ? &cmds[i] : NULL;
}

/* Where found key indices go: the first max are stored, all are counted. */
struct keys_out {
    int *idx;
    int max;
    int n;
};

static void add_key(struct keys_out *o, long i)
{
    if (o->idx && o->n < o->max)
        o->idx[o->n] = (int)i;
    o->n++;
}

static int arg_is(const char **argv, const size_t *argvlen, int i, const char *word)
{
    size_t n = strlen(word);
    return argv[i] && arg_len(argv, argvlen, i) == n && strncasecmp(argv[i], word, n) == 0;
}

/* A numkeys argument: a plain decimal integer; -1 if it is not one. Values
 * above the argument count are clamped to it, which is enough to reject
 * them and keeps the arithmetic that follows from overflowing. */
static long parse_count(const char *s, size_t n, long cap)
{
    long v = 0;
    size_t i;
    if (!s || n == 0 || n > 20)
        return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (v <= cap)
            v = v * 10 + (s[i] - '0');
    }
    return v > cap ? cap + 1 : v;
}

/* One key spec applied to argv: 0 when it yields no key (an optional
 * keyword absent, an index past the end), -1 when argv breaks its rule. */
static int spec_keys(const struct keyspec *ks, int argc, const char **argv, const size_t *argvlen,
                     struct keys_out *o)
{
    long begin, i;

    switch (ks->bs) {
    case BS_INDEX:
        begin = ks->bs_arg;
        if (begin >= argc)
            return 0;
        break;
    case BS_KEYWORD:
        begin = -1;
        if (ks->bs_arg >= 0) {
            for (i = ks->bs_arg; i < argc && begin < 0; i++)
                if (arg_is(argv, argvlen, (int)i, ks->keyword))
                    begin = i + 1;
        } else {
            for (i = (long)argc + ks->bs_arg; i >= 1 && begin < 0; i--)
                if (arg_is(argv, argvlen, (int)i, ks->keyword))
                    begin = i + 1;
        }
        if (begin < 0)
            return 0;
        break;
    default:
        /* Unknown begin search: the command's own reader covers it, or (see
         * gen_cmdtable.py) it names no routable key. */
        return 0;
    }

    if (ks->fk == FK_RANGE) {
        long step = ks->b > 0 ? ks->b : 1, last;
        if (ks->a >= 0) {
            last = begin + ks->a;
            if (last >= argc)
                return -1;
        } else {
            /* Keys run to an end-relative last argument, possibly only the
             * first 1/limit of them (XREAD: streams, then as many ids). The
             * span must divide evenly, or the command is malformed (an odd
             * MSET, an unbalanced XREAD). */
            long span = (long)argc + ks->a - begin + 1;
            if (span <= 0)
                return -1;
            if (ks->c > 1) {
                if (span % ks->c)
                    return -1;
                span /= ks->c;
            }
            if (span % step)
                return -1;
            last = begin + span - 1;
        }
        for (i = begin; i <= last; i += step)
            add_key(o, i);
        return 0;
    }
    if (ks->fk == FK_KEYNUM) {
        long numidx = begin + ks->a, first = begin + ks->b, step = ks->c > 0 ? ks->c : 1, num;
        if (numidx >= argc)
            return -1;
        num = parse_count(argv[numidx], arg_len(argv, argvlen, (int)numidx), argc);
        if (num < 0)
            return -1;
        if (num == 0)
            return 0;
        /* Written so that a huge numkeys cannot overflow. */
        if (first >= argc || num - 1 > ((long)argc - 1 - first) / step)
            return -1;
        for (i = 0; i < num; i++)
            add_key(o, first + i * step);
        return 0;
    }
    return 0;
}

/* An option word of SORT or MIGRATE and how many arguments follow it;
 * KEY_FOLLOWS: one, a key; REST_KEYS: every remaining argument is a key. */
enum { KEY_FOLLOWS = -1, REST_KEYS = -2 };
struct option_word {
    const char *word;
    int args;
};

static const struct option_word sort_options[] = {
    {"ASC", 0}, {"DESC", 0}, {"ALPHA", 0}, {"LIMIT", 2}, {"BY", 1}, {"GET", 1},
    {"STORE", KEY_FOLLOWS}, {NULL, 0},
};

static const struct option_word migrate_options[] = {
    {"COPY", 0}, {"REPLACE", 0}, {"AUTH", 1}, {"AUTH2", 2}, {"KEYS", REST_KEYS}, {NULL, 0},
};

/* Walks the options from argv[i] in order, adding the keys they name. 0,
 * or -1 for an unknown word or an option cut short. *rest says whether a
 * REST_KEYS option ended the walk. */
static int walk_options(int argc, const char **argv, const size_t *argvlen, int i,
                        const struct option_word *opts, struct keys_out *o, int *rest)
{
    *rest = 0;
    while (i < argc) {
        const struct option_word *w = opts;
        while (w->word && !arg_is(argv, argvlen, i, w->word))
            w++;
        if (!w->word)
            return -1;
        if (w->args == REST_KEYS) {
            for (i = i + 1; i < argc; i++)
                add_key(o, i);
            *rest = 1;
            return 0;
        }
        if (w->args == KEY_FOLLOWS) {
            if (i + 1 >= argc)
                return -1;
            add_key(o, i + 1);
            i += 2;
            continue;
        }
        if (i + w->args >= argc)
            return -1;
        i += 1 + w->args;
    }
    return 0;
}

/* SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC]
 * [ALPHA] [STORE destination]: the key and, with STORE, the destination.
 * The server marks STORE "unknown" because the word may also be a pattern;
 * walking the options in order tells them apart. */
static int sort_keys(int argc, const char **argv, const size_t *argvlen, struct keys_out *o)
{
    int rest;
    add_key(o, 1);
    return walk_options(argc, argv, argvlen, 2, sort_options, o, &rest);
}

/* MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user
 * pw] [KEYS key ...]: the server's spec searches KEYS backward and is
 * "incomplete" (a password spelled KEYS fools it); walking the options
 * forward does not get fooled. With KEYS the single-key argument must be
 * "" (the server refuses anything else) and every remaining argument is a
 * key; without, the single key is the key. */
static int migrate_keys(int argc, const char **argv, const size_t *argvlen, struct keys_out *o)
{
    int rest;
    if (walk_options(argc, argv, argvlen, 6, migrate_options, o, &rest) < 0)
        return -1;
    if (rest)
        return arg_len(argv, argvlen, 3) != 0 ? -1 : 0;
    add_key(o, 3);
    return 0;
}

int rcp__cmd_keys(const rcp__cmd *cmd, int argc, const char **argv, const size_t *argvlen,
                  int *idx, int max)
{
    struct keys_out o;
    unsigned s;

    if (!cmd || argc < 1 || !argv)
        return -1;
    if (cmd->arity >= 0 ? argc != cmd->arity : argc < -cmd->arity)
        return -1;
    o.idx = idx;
    o.max = max > 0 ? max : 0;
    o.n = 0;
    switch (cmd->special) {
    case SPECIAL_SORT:
        if (sort_keys(argc, argv, argvlen, &o) < 0)
            return -1;
        return o.n;
    case SPECIAL_MIGRATE:
        if (migrate_keys(argc, argv, argvlen, &o) < 0)
            return -1;
        return o.n;
    default:
        break;
    }
    /* Keys come in spec order (for ZUNIONSTORE: the destination, then the
     * sources). No two 7.0 specs can name the same argument, so no index is
     * reported twice. */
    for (s = 0; s < cmd->nspecs; s++)
        if (spec_keys(&keyspecs[cmd->spec0 + s], argc, argv, argvlen, &o) < 0)
            return -1;
    return o.n;
}

static int key1_of(const rcp__cmd *cmd, int argc)
{
    const struct keyspec *ks;
    if (!cmd || cmd->nspecs != 1 || cmd->special != SPECIAL_NONE || argc < 2 ||
        (cmd->flags & (RCP__CMD_CONNSTATE | RCP__CMD_BLOCKING | RCP__CMD_BLOCK_OPTION |
                       RCP__CMD_PER_NODE)))
        return 0;
    if (cmd->arity >= 0 ? argc != cmd->arity : argc < -cmd->arity)
        return 0;
    ks = &keyspecs[cmd->spec0];
    return ks->bs == BS_INDEX && ks->bs_arg == 1 && ks->fk == FK_RANGE && ks->a == 0;
}

int rcp__cmd_key1(const rcp__cmd *cmd, int argc)
{
    if (cmd != rcp__cmd_memo.k1cmd || argc != rcp__cmd_memo.k1argc || !cmd) {
        rcp__cmd_memo.k1val = key1_of(cmd, argc);
        rcp__cmd_memo.k1cmd = cmd;
        rcp__cmd_memo.k1argc = argc;
        rcp__cmd_memo.k1flags = cmd ? cmd->flags : 0;
    }
    return rcp__cmd_memo.k1val;
}

/* rcp__cmd_lookup_key1 (cmdtable.h) when the thread's memory does not
 * answer. */
int rcp__cmd_lookup_key1_slow(int argc, const char **argv, const size_t *argvlen,
                              const rcp__cmd **cmd, unsigned *flags)
{
    const rcp__cmd *c = rcp__cmd_lookup(argc, argv, argvlen);
    *cmd = c;
    *flags = rcp__cmd_flags(c);
    return rcp__cmd_key1(c, argc);
}

int rcp__cmd_screen(const rcp__cmd *cmd, int argc, const char **argv, const size_t *argvlen,
                    const char **why)
{
    int i;
    if (!cmd)
        return RCP_OK; /* unknown (a module's command?): nothing known against it */
    if (cmd->flags & RCP__CMD_CONNSTATE) {
        *why = "command refused: it changes the state of the connection, which is shared "
               "by every caller of this handle (use the handle's options for AUTH/SELECT-like "
               "settings; transactions and pub/sub need a dedicated connection)";
        return RCP_ERR_UNSUPPORTED;
    }
    if (cmd->flags & RCP__CMD_BLOCK_OPTION) {
        for (i = 1; i < argc; i++) {
            size_t l = arg_len(argv, argvlen, i);
            if (rcp__arg_is(argv[i], l, "STREAMS"))
                break;
            if (rcp__arg_is(argv[i], l, "BLOCK")) {
                *why = "blocking command refused: its BLOCK option would stall every request "
                       "queued behind it on this shared pipelined connection";
                return RCP_ERR_BLOCKING_COMMAND;
            }
        }
        return RCP_OK;
    }
    if (cmd->flags & RCP__CMD_BLOCKING) {
        *why = "blocking command refused: it would stall every request queued behind it "
               "on this shared pipelined connection";
        return RCP_ERR_BLOCKING_COMMAND;
    }
    return RCP_OK;
}
