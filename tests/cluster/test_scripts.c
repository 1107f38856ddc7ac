/* test_scripts.c: script objects and functions on a real cluster.
 *
 * The first run of a script falls back from EVALSHA to EVAL (NOSCRIPT) and
 * later runs do not; after SCRIPT FLUSH on every master, and after a
 * manual failover to a replica that never cached the script, runs still
 * succeed by falling back once. The SHA1 is the server's. A read-only
 * script (EVALSHA_RO) reads from the replica under PREFER_REPLICA and may
 * not write; a keyless script runs on some master; keys in two slots are
 * refused.
 * FCALL / FCALL_RO are routed by their first key. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

static rcpc_cluster cl;
static rcp_cluster *h;

static rcp_reply *run1(rcp_script *s, int flags, const char *key, const char *arg)
{
    const char *keys[1] = {key}, *args[1] = {arg};
    return rcp_cluster_script_run(h, s, flags, key ? 1 : 0, keys, NULL, arg ? 1 : 0, args, NULL);
}

static int wait_master(int port, int want, int timeout_ms)
{
    int64_t deadline = rcptest_now_ms() + timeout_ms;
    while (rcpc_role_is_master(port) != want) {
        if (rcptest_now_ms() > deadline)
            return -1;
        rcptest_sleep_ms(50);
    }
    return 0;
}

START_TEST(test_evalsha_fallback)
{
    static const char body[] = "return redis.call('INCR', KEYS[1])";
    rcp_script *s = rcp_script_new(body, sizeof body - 1);
    rcp_node_reply nr[8];
    rcpc_topo t;
    char d[512];
    rcp_reply *r;
    size_t n, i;
    int k, owner, replica = 0;
    const char *flush[] = {"SCRIPT", "FLUSH"};

    ck_assert_ptr_nonnull(s);
    h = rcpc_open_default(&cl);
    rcp_cluster_node_replies_free(nr, rcp_cluster_command_nodes(h, RCP_NODES_ALL, nr, 8, 2, flush, NULL));
    rcp_reply_free(rcp_cluster_command(h, "DEL sc:n"));

    r = run1(s, 0, "sc:n", NULL);
    ck_assert_msg(rcptest_is_int(r, 1), "first run: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_uint_eq(rcp_script_fallbacks(s), 1);
    for (k = 2; k <= 20; k++) {
        r = run1(s, 0, "sc:n", NULL);
        ck_assert_msg(rcptest_is_int(r, k), "run %d: %s", k, rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    ck_assert_uint_eq(rcp_script_fallbacks(s), 1);

    /* Our SHA1 is the server's. */
    {
        const char *load[] = {"SCRIPT", "LOAD", body};
        n = rcp_cluster_command_nodes(h, RCP_NODES_MASTERS, nr, 8, 3, load, NULL);
        ck_assert_uint_eq(n, 3);
        for (i = 0; i < n; i++)
            ck_assert_msg(rcpc_is_string(nr[i].reply, rcp_script_sha1(s)), "%s: %s vs ours %s",
                          nr[i].addr, rcptest_describe(nr[i].reply, d, sizeof d),
                          rcp_script_sha1(s));
        rcp_cluster_node_replies_free(nr, n);
    }

    /* SCRIPT FLUSH everywhere: one more fallback, same results. */
    rcp_cluster_node_replies_free(nr, rcp_cluster_command_nodes(h, RCP_NODES_ALL, nr, 8, 2, flush, NULL));
    r = run1(s, 0, "sc:n", NULL);
    ck_assert_msg(rcptest_is_int(r, 21), "after SCRIPT FLUSH: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_uint_eq(rcp_script_fallbacks(s), 2);

    /* Manual failover of the key's master: its replica never cached the
     * script (EVAL replicates effects, not the script). */
    ck_assert_int_eq(rcpc_topology_any(&cl, &t), 0);
    owner = rcpc_slot_owner(&t, rcp_keyslot("sc:n", 4));
    ck_assert_int_ge(owner, 0);
    for (k = 0; k < t.n; k++)
        if (!t.node[k].is_master && t.node[k].master_port == t.node[owner].port)
            replica = t.node[k].port;
    ck_assert_int_ne(replica, 0);
    ck_assert_msg(rcpc_wait_replicas_synced(&cl, rcptest_scale(15000)) == 0,
                  "replicas not in sync");
    {
        redisReply *rr = rcpc_ask(replica, "CLUSTER FAILOVER");
        ck_assert_msg(rr && rr->type == REDIS_REPLY_STATUS, "CLUSTER FAILOVER failed");
        freeReplyObject(rr);
    }
    ck_assert_msg(wait_master(replica, 1, rcptest_scale(20000)) == 0, "%d not promoted", replica);
    r = run1(s, 0, "sc:n", NULL);
    ck_assert_msg(rcptest_is_int(r, 22), "after the failover: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_uint_eq(rcp_script_fallbacks(s), 3);
    r = run1(s, 0, "sc:n", NULL);
    ck_assert_msg(rcptest_is_int(r, 23), "again: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_uint_eq(rcp_script_fallbacks(s), 3);

    rcp_cluster_close(h);
    h = NULL;
    rcp_script_free(s);
}
END_TEST

START_TEST(test_readonly_keyless_crossslot)
{
    static const char get[] = "return redis.call('GET', KEYS[1])";
    static const char set[] = "return redis.call('SET', KEYS[1], ARGV[1])";
    static const char seven[] = "return 7";
    rcp_script *sg = rcp_script_new(get, sizeof get - 1);
    rcp_script *ss = rcp_script_new(set, sizeof set - 1);
    rcp_script *s7 = rcp_script_new(seven, sizeof seven - 1);
    rcp_cluster_options o;
    rcp_conn_options node;
    const char *keys[2] = {"a", "b"};
    char d[512];
    rcp_reply *r;

    {
        char err[4096];
        ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    }
    rcpc_options(&o, &node, cl.seed);
    o.read_policy = RCP_READ_PREFER_REPLICA;
    h = rcpc_open(&o);

    r = run1(ss, 0, "sc:ro", "hello");
    ck_assert_msg(rcpc_is_status(r, "OK"), "SET script: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_msg(rcpc_wait_replicas_synced(&cl, rcptest_scale(15000)) == 0,
                  "replicas not in sync");
    {
        /* 20 read-only runs under PREFER_REPLICA land on the key's replica
         * (its request counter; a refresh may add one CLUSTER SLOTS). */
        rcpc_topo t;
        rcp_cluster_node_info before, after;
        int owner, k, rep = 0, i;
        ck_assert_int_eq(rcpc_topology_any(&cl, &t), 0);
        owner = rcpc_slot_owner(&t, rcp_keyslot("sc:ro", 5));
        ck_assert_int_ge(owner, 0);
        for (k = 0; k < t.n; k++)
            if (!t.node[k].is_master && t.node[k].master_port == t.node[owner].port)
                rep = t.node[k].port;
        ck_assert_int_ne(rep, 0);
        r = run1(sg, RCP_SCRIPT_READONLY, "sc:ro", NULL); /* loads it there */
        rcp_reply_free(r);
        ck_assert_int_eq(rcpc_node_info(h, rep, &before), 1);
        for (i = 0; i < 20; i++) {
            r = run1(sg, RCP_SCRIPT_READONLY, "sc:ro", NULL);
            ck_assert_msg(rcpc_is_string(r, "hello"), "read-only GET script: %s",
                          rcptest_describe(r, d, sizeof d));
            rcp_reply_free(r);
        }
        ck_assert_int_eq(rcpc_node_info(h, rep, &after), 1);
        ck_assert_msg(after.conn.requests - before.conn.requests >= 20,
                      "replica %d got %llu of 20 read-only script runs", rep,
                      (unsigned long long)(after.conn.requests - before.conn.requests));
    }
    r = run1(ss, RCP_SCRIPT_READONLY, "sc:ro", "x");
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_SERVER,
                  "a read-only script wrote: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    r = run1(s7, 0, NULL, NULL);
    ck_assert_msg(rcptest_is_int(r, 7), "keyless: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    r = rcp_cluster_script_run(h, s7, 0, 2, keys, NULL, 0, NULL, NULL);
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_CROSS_SLOT, "two slots: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_cluster_script_run(h, NULL, 0, 0, NULL, NULL, 0, NULL, NULL);
    ck_assert_int_eq(r->err, RCP_ERR_INVALID);
    rcp_reply_free(r);

    rcp_cluster_close(h);
    h = NULL;
    rcp_script_free(sg);
    rcp_script_free(ss);
    rcp_script_free(s7);
}
END_TEST

START_TEST(test_fcall)
{
    static const char lib[] = "#!lua name=rcptest\n"
                              "redis.register_function('rcp_get', function(keys, args) "
                              "return redis.call('GET', keys[1]) end)\n"
                              "redis.register_function{function_name='rcp_get_ro', "
                              "callback=function(keys, args) return redis.call('GET', keys[1]) end, "
                              "flags={'no-writes'}}\n";
    const char *load[] = {"FUNCTION", "LOAD", "REPLACE", lib};
    rcp_node_reply nr[8];
    char d[512];
    size_t n, i;
    rcp_reply *r;
    int k;

    h = rcpc_open_default(&cl);
    n = rcp_cluster_command_nodes(h, RCP_NODES_MASTERS, nr, 8, 4, load, NULL);
    for (i = 0; i < n; i++)
        ck_assert_msg(rcpc_is_string(nr[i].reply, "rcptest"), "FUNCTION LOAD on %s: %s",
                      nr[i].addr, rcptest_describe(nr[i].reply, d, sizeof d));
    rcp_cluster_node_replies_free(nr, n);
    for (k = 0; k < 50; k++) {
        char key[32], val[32];
        snprintf(key, sizeof key, "fc:%d", k);
        snprintf(val, sizeof val, "v%d", k);
        rcp_reply_free(rcp_cluster_command(h, "SET %s %s", key, val));
        r = rcp_cluster_command(h, k % 2 ? "FCALL rcp_get 1 %s" : "FCALL_RO rcp_get_ro 1 %s", key);
        ck_assert_msg(rcpc_is_string(r, val), "FCALL %s: %s", key,
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

/* rcp_cluster_script: keys and arguments from a format; the first nkeys
 * words are the keys (routed by them), the rest the arguments. Keys in
 * several slots, and nkeys past the words, are refused. */
START_TEST(test_script_format)
{
    static const char body[] = "redis.call('SET', KEYS[1], ARGV[1] .. ARGV[2]) "
                               "return redis.call('GET', KEYS[1])";
    rcp_script *s = rcp_script_new(body, sizeof body - 1);
    char d[512];
    rcp_reply *r;
    int k;

    ck_assert_ptr_nonnull(s);
    h = rcpc_open_default(&cl);
    for (k = 0; k < 50; k++) {
        char key[32], want[48];
        snprintf(key, sizeof key, "sf:%d", k);
        snprintf(want, sizeof want, "v-%d", k * 7);
        r = rcp_cluster_script(h, s, 0, 1, "%s v- %d", key, k * 7);
        ck_assert_msg(rcpc_is_string(r, want), "%s: %s", key, rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        r = rcp_cluster_command(h, "GET %s", key);
        ck_assert_msg(rcpc_is_string(r, want), "GET %s: %s", key, rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    r = rcp_cluster_script(h, s, 0, 3, "%s %s", "a", "b");
    ck_assert_int_eq(r->err, RCP_ERR_INVALID);
    ck_assert_msg(strstr(r->str, "2 words") != NULL, "%s", r->str);
    rcp_reply_free(r);
    r = rcp_cluster_script(h, s, 0, 2, "{x}a b x y"); /* "{x}a" and "b": two slots */
    ck_assert_int_eq(r->err, RCP_ERR_CROSS_SLOT);
    rcp_reply_free(r);
    r = rcp_cluster_script(h, s, 0, -1, "");
    ck_assert_int_eq(r->err, RCP_ERR_INVALID);
    rcp_reply_free(r);
    rcp_cluster_close(h);
    h = NULL;
    rcp_script_free(s);
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_readonly_keyless_crossslot, test_fcall, test_evalsha_fallback,
                test_script_format);
}

int main(void)
{
    return rcpc_main(&cl, "scripts", 3, 1, NULL, 120, add_tests);
}
