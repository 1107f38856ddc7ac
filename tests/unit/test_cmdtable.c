/* Unit tests: the generated command table (order, lookup, subcommands,
 * flags) and key extraction for every kind of key spec, including the
 * hand-written SORT and MIGRATE readers and malformed argument lists. */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"
#include "logic.h"

#define ARGV(...) ((const char *[]){__VA_ARGS__})
#define NARGS(...) ((int)(sizeof(ARGV(__VA_ARGS__)) / sizeof(const char *)))
/* The key indices of a command as text ("1 3"), "-1" for a syntax error,
 * "unknown" when lookup fails. */
#define KS(...) keystr(NARGS(__VA_ARGS__), ARGV(__VA_ARGS__))
#define LOOKUP(...) rcp__cmd_lookup(NARGS(__VA_ARGS__), ARGV(__VA_ARGS__), NULL)

static const char *keystr(int argc, const char **argv)
{
    static char buf[256];
    int idx[32], n, i;
    size_t pos = 0;
    const rcp__cmd *c = rcp__cmd_lookup(argc, argv, NULL);

    if (!c)
        return "unknown";
    n = rcp__cmd_keys(c, argc, argv, NULL, idx, 32);
    if (n < 0)
        return "-1";
    ck_assert_int_le(n, 32);
    buf[0] = '\0';
    for (i = 0; i < n; i++)
        pos += (size_t)snprintf(buf + pos, sizeof buf - pos, i ? " %d" : "%d", idx[i]);
    return buf;
}

START_TEST(table_sorted_and_complete)
{
    const rcp__cmd *c, *prev = NULL;
    size_t i, n = 0, subs = 0;

    for (i = 0; (c = rcp__cmd_at(i)) != NULL; i++) {
        const char *name = rcp__cmd_name(c);
        const char *bar = strchr(name, '|');
        char first[64];
        const rcp__cmd *found;

        if (prev)
            ck_assert_msg(strcmp(rcp__cmd_name(prev), name) < 0, "%s before %s",
                          rcp__cmd_name(prev), name);
        /* Every entry is reachable through lookup: the binary search agrees
         * with the order. */
        if (bar) {
            ck_assert_uint_lt((size_t)(bar - name), sizeof first);
            memcpy(first, name, (size_t)(bar - name));
            first[bar - name] = '\0';
            found = rcp__cmd_lookup(2, ARGV(first, bar + 1), NULL);
            subs++;
        } else {
            found = rcp__cmd_lookup(1, ARGV(name), NULL);
        }
        ck_assert_ptr_eq(found, c);
        prev = c;
        n++;
    }
    ck_assert_uint_gt(n, 300); /* 7.0 has ~240 commands and ~140 subcommands */
    ck_assert_uint_gt(subs, 100);
}
END_TEST

/* The table's command spelled s (n bytes), ignoring case, or NULL: the
 * oracle for the remembered look-up. */
static const rcp__cmd *by_scan(const char *s, size_t n)
{
    const rcp__cmd *c;
    size_t i;
    for (i = 0; (c = rcp__cmd_at(i)) != NULL; i++)
        if (strlen(rcp__cmd_name(c)) == n && strncasecmp(rcp__cmd_name(c), s, n) == 0 &&
            !strchr(rcp__cmd_name(c), '|'))
            return c;
    return NULL;
}

/* The thread remembers the bytes its last command was spelled with: a
 * name differing from them in any one byte is looked up afresh. Every
 * command of up to 16 bytes, each byte changed in turn. */
START_TEST(lookup_remembered_spelling)
{
    const rcp__cmd *c;
    size_t i, j, n, tried = 0;
    char up[32], alt[32];
    for (i = 0; (c = rcp__cmd_at(i)) != NULL; i++) {
        n = strlen(rcp__cmd_name(c));
        if (n > 16 || strchr(rcp__cmd_name(c), '|'))
            continue;
        for (j = 0; j < n; j++)
            up[j] = (char)toupper((unsigned char)rcp__cmd_name(c)[j]);
        for (j = 0; j < n; j++) {
            ck_assert_ptr_eq(rcp__cmd_lookup(1, ARGV(up), (size_t[]){n}), c);
            ck_assert_ptr_eq(rcp__cmd_lookup(1, ARGV(up), (size_t[]){n}), c); /* remembered */
            memcpy(alt, up, n);
            alt[j] = alt[j] == 'Q' ? 'Z' : 'Q';
            ck_assert_ptr_eq(rcp__cmd_lookup(1, ARGV(alt), (size_t[]){n}), by_scan(alt, n));
            alt[j] = '\0';
            ck_assert_ptr_null(rcp__cmd_lookup(1, ARGV(alt), (size_t[]){n}));
            tried++;
        }
    }
    ck_assert_uint_gt(tried, 1000);
    /* rcp__cmd_key1 remembers its last answer: per command and argc. */
    c = LOOKUP("get", "k");
    ck_assert_int_eq(rcp__cmd_key1(c, 2), 1);
    ck_assert_int_eq(rcp__cmd_key1(c, 3), 0);
    ck_assert_int_eq(rcp__cmd_key1(c, 2), 1);
    ck_assert_int_eq(rcp__cmd_key1(LOOKUP("set", "k", "v"), 2), 0);
    ck_assert_int_eq(rcp__cmd_key1(LOOKUP("set", "k", "v"), 3), 1);
    ck_assert_int_eq(rcp__cmd_key1(NULL, 3), 0);
    ck_assert_int_eq(rcp__cmd_key1(LOOKUP("mget", "a", "b"), 3), 0);
    ck_assert_int_eq(rcp__cmd_key1(c, 2), 1);
}
END_TEST

START_TEST(lookup)
{
    const rcp__cmd *get = LOOKUP("get", "k");

    ck_assert_ptr_nonnull(get);
    ck_assert_str_eq(rcp__cmd_name(get), "get");
    ck_assert_ptr_eq(LOOKUP("GET", "k"), get);
    ck_assert_ptr_eq(LOOKUP("gEt", "k"), get);
    /* The thread's last command is remembered: names that share its
     * prefix, or that it is a prefix of, are still told apart. */
    ck_assert_ptr_null(LOOKUP("ge", "k"));
    ck_assert_ptr_eq(LOOKUP("GET", "k"), get);
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("GETEX", "k")), "getex");
    ck_assert_ptr_eq(LOOKUP("get", "k"), get);
    ck_assert_ptr_null(LOOKUP("gets", "k"));
    ck_assert_ptr_eq(LOOKUP("get", "k"), get);
    ck_assert_ptr_null(rcp__cmd_lookup(1, ARGV("get|x"), NULL));
    ck_assert_ptr_null(LOOKUP("nosuchcommand"));
    ck_assert_ptr_null(LOOKUP(""));
    ck_assert_ptr_null(LOOKUP("object|encoding", "k")); /* the server would not know it */
    ck_assert_ptr_null(rcp__cmd_lookup(0, ARGV("get"), NULL));
    ck_assert_ptr_null(rcp__cmd_lookup(1, NULL, NULL));
    ck_assert_ptr_null(rcp__cmd_lookup(1, ARGV(NULL), NULL));
    ck_assert_ptr_null(LOOKUP("getgetgetgetgetgetgetgetgetgetgetgetgetgetgetgetgetgetgetgetgetg"));

    /* Binary-safe with lengths: a NUL inside the name is not a name. */
    ck_assert_ptr_null(rcp__cmd_lookup(1, ARGV("get\0x"), (size_t[]){5}));
    ck_assert_ptr_eq(rcp__cmd_lookup(1, ARGV("GETX"), (size_t[]){3}), get);

    /* Containers and subcommands. */
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("OBJECT", "ENCODING", "k")), "object|encoding");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("object", "Encoding", "k")), "object|encoding");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("OBJECT")), "object");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("OBJECT", "nosuch", "k")), "object");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("OBJECT", "encoding|x", "k")), "object");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("XINFO", "STREAM", "k")), "xinfo|stream");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("CONFIG", "GET", "maxmemory")), "config|get");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("CLUSTER", "KEYSLOT", "k")), "cluster|keyslot");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("CLUSTER", "SLOTS")), "cluster|slots");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("MEMORY", "USAGE", "k")), "memory|usage");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("SCRIPT", "LOAD", "return 1")), "script|load");
    ck_assert_str_eq(rcp__cmd_name(LOOKUP("FUNCTION", "LOAD", "code")), "function|load");
    /* A command without subcommands ignores argv[1]. */
    ck_assert_ptr_eq(LOOKUP("get", "encoding"), get);
    ck_assert_ptr_eq(rcp__cmd_lookup(2, ARGV("OBJECT", NULL), NULL), LOOKUP("OBJECT"));

    ck_assert_uint_eq(rcp__cmd_flags(NULL), 0);
    ck_assert_ptr_null(rcp__cmd_name(NULL));
    ck_assert_ptr_null(rcp__cmd_at((size_t)-1));
}
END_TEST

static unsigned flags_of(const char *name)
{
    const rcp__cmd *c = rcp__cmd_lookup(1, ARGV(name), NULL);
    ck_assert_msg(c != NULL, "%s not found", name);
    return rcp__cmd_flags(c);
}

static unsigned sub_flags(const char *name, const char *sub)
{
    const rcp__cmd *c = rcp__cmd_lookup(2, ARGV(name, sub), NULL);
    ck_assert_msg(c != NULL && strchr(rcp__cmd_name(c), '|'), "%s %s not found", name, sub);
    return rcp__cmd_flags(c);
}

START_TEST(flags)
{
    ck_assert_uint_eq(flags_of("get") & (RCP__CMD_READONLY | RCP__CMD_WRITE | RCP__CMD_MULTIKEY |
                                         RCP__CMD_NOKEY),
                      RCP__CMD_READONLY);
    ck_assert(flags_of("set") & RCP__CMD_WRITE);
    ck_assert(!(flags_of("set") & (RCP__CMD_READONLY | RCP__CMD_MULTIKEY)));
    ck_assert(flags_of("mget") & RCP__CMD_MULTIKEY);
    ck_assert(flags_of("mset") & RCP__CMD_MULTIKEY);
    ck_assert(flags_of("del") & RCP__CMD_MULTIKEY);
    ck_assert(flags_of("eval") & RCP__CMD_MULTIKEY);
    ck_assert(flags_of("lmove") & RCP__CMD_MULTIKEY);
    ck_assert(flags_of("sort") & RCP__CMD_MULTIKEY);
    ck_assert(!(flags_of("sort_ro") & RCP__CMD_MULTIKEY));
    ck_assert(flags_of("blpop") & RCP__CMD_BLOCKING);
    ck_assert(flags_of("blmove") & RCP__CMD_BLOCKING);
    ck_assert(flags_of("xread") & RCP__CMD_BLOCKING);
    ck_assert(flags_of("xread") & RCP__CMD_READONLY);
    ck_assert(!(flags_of("lpop") & RCP__CMD_BLOCKING));
    ck_assert(flags_of("ping") & RCP__CMD_NOKEY);
    ck_assert(flags_of("info") & RCP__CMD_NOKEY);
    ck_assert(!(flags_of("get") & RCP__CMD_NOKEY));
    ck_assert(flags_of("publish") & RCP__CMD_PUBSUB);
    ck_assert(flags_of("ssubscribe") & RCP__CMD_PUBSUB);
    ck_assert(!(flags_of("ssubscribe") & RCP__CMD_NOKEY));
    ck_assert(flags_of("multi") & RCP__CMD_NOSCRIPT);
    ck_assert(flags_of("shutdown") & RCP__CMD_ADMIN);
    ck_assert(sub_flags("config", "set") & RCP__CMD_ADMIN);
    ck_assert(sub_flags("cluster", "slots") & RCP__CMD_NOKEY);
    ck_assert(sub_flags("cluster", "keyslot") & RCP__CMD_NOKEY);
    ck_assert(sub_flags("object", "encoding") & RCP__CMD_READONLY);
    ck_assert(!(sub_flags("object", "encoding") & RCP__CMD_NOKEY));
}
END_TEST

START_TEST(keys_simple)
{
    ck_assert_str_eq(KS("GET", "k"), "1");
    ck_assert_str_eq(KS("SET", "k", "v"), "1");
    ck_assert_str_eq(KS("SET", "k", "v", "EX", "10", "GET"), "1");
    ck_assert_str_eq(KS("MGET", "a", "b", "c"), "1 2 3");
    ck_assert_str_eq(KS("MSET", "a", "1", "b", "2"), "1 3");
    ck_assert_str_eq(KS("MSETNX", "a", "1"), "1");
    ck_assert_str_eq(KS("DEL", "a", "b"), "1 2");
    ck_assert_str_eq(KS("UNLINK", "a"), "1");
    ck_assert_str_eq(KS("EXISTS", "a", "b", "a"), "1 2 3");
    ck_assert_str_eq(KS("TOUCH", "a", "b"), "1 2");
    ck_assert_str_eq(KS("BLPOP", "a", "b", "0"), "1 2");
    ck_assert_str_eq(KS("LMOVE", "a", "b", "LEFT", "RIGHT"), "1 2");
    ck_assert_str_eq(KS("LCS", "a", "b"), "1 2");
    ck_assert_str_eq(KS("RENAME", "a", "b"), "1 2");
    ck_assert_str_eq(KS("OBJECT", "ENCODING", "k"), "2");
    ck_assert_str_eq(KS("MEMORY", "USAGE", "k"), "2");
    ck_assert_str_eq(KS("MEMORY", "USAGE", "k", "SAMPLES", "5"), "2");
    ck_assert_str_eq(KS("XINFO", "STREAM", "k"), "2");
    ck_assert_str_eq(KS("XINFO", "STREAM", "k", "FULL"), "2");
    ck_assert_str_eq(KS("SSUBSCRIBE", "c1", "c2"), "1 2");
    /* No key. */
    ck_assert_str_eq(KS("PING"), "");
    ck_assert_str_eq(KS("INFO"), "");
    ck_assert_str_eq(KS("INFO", "server"), "");
    ck_assert_str_eq(KS("CLUSTER", "SLOTS"), "");
    ck_assert_str_eq(KS("CLUSTER", "KEYSLOT", "k"), "");
    ck_assert_str_eq(KS("OBJECT", "nosuch", "k"), ""); /* the container has no key */
    ck_assert_str_eq(KS("nosuch", "k"), "unknown");
}
END_TEST

START_TEST(keys_arity)
{
    ck_assert_str_eq(KS("GET"), "-1");
    ck_assert_str_eq(KS("GET", "a", "b"), "-1");
    ck_assert_str_eq(KS("SET", "k"), "-1");
    ck_assert_str_eq(KS("MGET"), "-1");
    ck_assert_str_eq(KS("MSET", "a", "1", "b"), "-1"); /* odd pairs */
    ck_assert_str_eq(KS("OBJECT"), "-1");
    ck_assert_str_eq(KS("OBJECT", "ENCODING"), "-1");
    ck_assert_str_eq(KS("BLPOP", "a"), "-1");
}
END_TEST

START_TEST(keys_numkeys)
{
    ck_assert_str_eq(KS("EVAL", "return 1", "2", "k1", "k2", "a1"), "3 4");
    ck_assert_str_eq(KS("EVAL", "return 1", "0"), "");
    ck_assert_str_eq(KS("EVAL", "return 1", "0", "a1"), "");
    ck_assert_str_eq(KS("EVAL", "script", "5", "k1"), "-1");
    ck_assert_str_eq(KS("EVAL", "script", "x", "k1"), "-1");
    ck_assert_str_eq(KS("EVAL", "script", "-1", "k1"), "-1");
    ck_assert_str_eq(KS("EVAL", "script", "", "k1"), "-1");
    ck_assert_str_eq(KS("EVAL", "script", "99999999999999999999999", "k1"), "-1");
    ck_assert_str_eq(KS("EVAL", "script", "2147483647", "k1"), "-1");
    ck_assert_str_eq(KS("EVALSHA", "abc", "1", "k"), "3");
    ck_assert_str_eq(KS("EVAL_RO", "s", "1", "k"), "3");
    ck_assert_str_eq(KS("EVALSHA_RO", "abc", "2", "k", "l"), "3 4");
    ck_assert_str_eq(KS("FCALL", "f", "1", "k", "arg"), "3");
    ck_assert_str_eq(KS("FCALL_RO", "f", "2", "a", "b"), "3 4");
    ck_assert_str_eq(KS("ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"), "1 3 4");
    ck_assert_str_eq(KS("ZUNIONSTORE", "d", "3", "a", "b"), "-1");
    ck_assert_str_eq(KS("ZINTERSTORE", "d", "1", "a"), "1 3");
    ck_assert_str_eq(KS("ZDIFFSTORE", "d", "2", "a", "b"), "1 3 4");
    ck_assert_str_eq(KS("ZUNION", "2", "a", "b"), "2 3");
    ck_assert_str_eq(KS("ZUNION", "2", "a", "b", "WITHSCORES"), "2 3");
    ck_assert_str_eq(KS("ZUNION", "3", "a", "b"), "-1");
    ck_assert_str_eq(KS("ZINTERCARD", "2", "a", "b", "LIMIT", "1"), "2 3");
    ck_assert_str_eq(KS("SINTERCARD", "1", "a"), "2");
    ck_assert_str_eq(KS("LMPOP", "2", "a", "b", "LEFT"), "2 3");
    ck_assert_str_eq(KS("LMPOP", "2", "a", "b", "LEFT", "COUNT", "3"), "2 3");
    ck_assert_str_eq(KS("ZMPOP", "1", "z", "MIN"), "2");
    ck_assert_str_eq(KS("BLMPOP", "0", "2", "a", "b", "LEFT"), "3 4");
    ck_assert_str_eq(KS("BZMPOP", "1.5", "1", "z", "MAX"), "3");
}
END_TEST

START_TEST(keys_streams)
{
    ck_assert_str_eq(KS("XREAD", "STREAMS", "k1", "0"), "2");
    ck_assert_str_eq(KS("XREAD", "COUNT", "2", "STREAMS", "k1", "k2", "0", "0"), "4 5");
    ck_assert_str_eq(KS("xread", "block", "0", "streams", "k1", "$"), "4");
    ck_assert_str_eq(KS("XREAD", "STREAMS", "STREAMS", "0"), "2"); /* a stream named STREAMS */
    ck_assert_str_eq(KS("XREAD", "STREAMS", "k1", "k2", "0"), "-1"); /* unbalanced */
    ck_assert_str_eq(KS("XREAD", "COUNT", "1", "STREAMS"), "-1");
    ck_assert_str_eq(KS("XREAD", "COUNT", "1", "k1"), ""); /* no STREAMS: server says syntax */
    ck_assert_str_eq(KS("XREADGROUP", "GROUP", "g", "c", "STREAMS", "k1", ">"), "5");
    ck_assert_str_eq(KS("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "BLOCK", "0", "NOACK",
                        "STREAMS", "a", "b", ">", ">"),
                     "10 11");
    /* The search starts after GROUP's two arguments: a group named STREAMS
     * is not mistaken for the keyword. */
    ck_assert_str_eq(KS("XREADGROUP", "GROUP", "STREAMS", "c", "STREAMS", "k", ">"), "5");
}
END_TEST

START_TEST(keys_migrate)
{
    ck_assert_str_eq(KS("MIGRATE", "h", "6379", "k", "0", "5000"), "3");
    ck_assert_str_eq(KS("MIGRATE", "h", "6379", "k", "0", "5000", "COPY", "REPLACE"), "3");
    ck_assert_str_eq(KS("MIGRATE", "h", "6379", "", "0", "5000", "KEYS", "a", "b"), "7 8");
    ck_assert_str_eq(
        KS("MIGRATE", "h", "6379", "", "0", "5000", "COPY", "REPLACE", "KEYS", "a", "b"),
        "9 10");
    /* A password spelled KEYS does not fool the reader. */
    ck_assert_str_eq(KS("MIGRATE", "h", "6379", "", "0", "5000", "AUTH", "KEYS", "KEYS", "a"),
                     "9");
    ck_assert_str_eq(
        KS("MIGRATE", "h", "6379", "", "0", "5000", "AUTH2", "u", "KEYS", "keys", "KEYS", "a"),
        "10 11");
    ck_assert_str_eq(KS("MIGRATE", "h", "6379", "k", "0", "5000", "KEYS", "a"), "-1");
    ck_assert_str_eq(KS("MIGRATE", "h", "6379", "k", "0", "5000", "BOGUS"), "-1");
    ck_assert_str_eq(KS("MIGRATE", "h", "6379", "k", "0", "5000", "AUTH"), "-1");
    ck_assert_str_eq(KS("MIGRATE", "h", "6379", "k", "0"), "-1");
}
END_TEST

START_TEST(keys_sort_geo)
{
    ck_assert_str_eq(KS("SORT", "k"), "1");
    ck_assert_str_eq(KS("SORT", "k", "BY", "w_*", "LIMIT", "0", "10", "GET", "#", "GET", "o_*",
                        "DESC", "ALPHA", "STORE", "dst"),
                     "1 14");
    ck_assert_str_eq(KS("SORT", "k", "GET", "STORE"), "1"); /* a pattern named STORE */
    ck_assert_str_eq(KS("SORT", "k", "STORE"), "-1");
    ck_assert_str_eq(KS("SORT", "k", "LIMIT", "0"), "-1");
    ck_assert_str_eq(KS("SORT", "k", "BOGUS"), "-1");
    ck_assert_str_eq(KS("SORT_RO", "k", "BY", "x", "ASC"), "1");
    ck_assert_str_eq(KS("GEORADIUS", "k", "1", "2", "3", "km"), "1");
    ck_assert_str_eq(KS("GEORADIUS", "k", "1", "2", "3", "km", "WITHDIST", "STORE", "d"), "1 8");
    ck_assert_str_eq(KS("GEORADIUS", "k", "1", "2", "3", "km", "STOREDIST", "d2"), "1 7");
    ck_assert_str_eq(KS("GEORADIUS", "k", "1", "2", "3", "km", "STORE"), "-1");
    ck_assert_str_eq(KS("GEORADIUSBYMEMBER", "k", "m", "3", "km", "STORE", "d"), "1 6");
    ck_assert_str_eq(KS("GEORADIUS_RO", "k", "1", "2", "3", "km"), "1");
    ck_assert_str_eq(KS("GEOSEARCHSTORE", "d", "s", "FROMMEMBER", "m", "BYRADIUS", "1", "km"),
                     "1 2");
}
END_TEST

START_TEST(keys_buffer_and_lengths)
{
    const char **argv = ARGV("MGET", "a", "b", "c");
    const rcp__cmd *c = rcp__cmd_lookup(4, argv, NULL);
    int idx[1] = {-7};
    size_t lens[] = {4, 1, 1, 1};

    /* More keys than room: the first max are written, all are counted. */
    ck_assert_int_eq(rcp__cmd_keys(c, 4, argv, NULL, idx, 1), 3);
    ck_assert_int_eq(idx[0], 1);
    ck_assert_int_eq(rcp__cmd_keys(c, 4, argv, NULL, NULL, 0), 3);
    ck_assert_int_eq(rcp__cmd_keys(c, 4, argv, lens, idx, -5), 3);
    ck_assert_int_eq(rcp__cmd_keys(NULL, 4, argv, NULL, idx, 1), -1);
    ck_assert_int_eq(rcp__cmd_keys(c, 0, argv, NULL, idx, 1), -1);
    ck_assert_int_eq(rcp__cmd_keys(c, 4, NULL, NULL, idx, 1), -1);

    /* Binary numkeys via lengths: "1x" cut to "1". */
    {
        const char **ev = ARGV("EVAL", "s", "1x", "k");
        size_t evl[] = {4, 1, 1, 1};
        const rcp__cmd *e = rcp__cmd_lookup(4, ev, evl);
        ck_assert_int_eq(rcp__cmd_keys(e, 4, ev, evl, idx, 1), 1);
        ck_assert_int_eq(idx[0], 3);
        ck_assert_int_eq(rcp__cmd_keys(e, 4, ev, NULL, idx, 1), -1);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cmdtable");
    TCase *tc = rcptest_tcase(s, "core", 0);

    RCPTEST_ADD(tc, table_sorted_and_complete, lookup, lookup_remembered_spelling, flags, keys_simple, keys_arity, keys_numkeys,
                keys_streams, keys_migrate, keys_sort_geo, keys_buffer_and_lengths);
    return rcptest_run(s) ? 1 : 0;
}
