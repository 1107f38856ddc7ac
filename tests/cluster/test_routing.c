/* test_routing.c: basic routing on a real 3 masters + 3 replicas cluster.
 *
 * Keys spread over every slot land on the master that owns them (checked
 * from the side with the node's own DBSIZE and with GET on that node);
 * same-slot multi-key commands work through hash tags; a cross-slot SINTER
 * is refused with RCP_ERR_CROSS_SLOT (sync: error reply; async: the send
 * returns the code and never calls back); keyless commands work;
 * rcp_keyslot agrees with CLUSTER KEYSLOT on thousands of binary keys;
 * bootstrap errors name every seed; a handle opened, used and closed on
 * one thread that runs a libevent loop; SETs whose value streams from a
 * source (rcp_source), sync and async, land on each key's master and read
 * back byte-exact through a sink. Only the public API is used. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "harness.h"
#include "rcpipe.h"
#include "rcpipe/libevent.h"

static rcpc_cluster cl;
static rcp_cluster *h;

static void setup(void)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    char err[2048];

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    rcpc_options(&o, &node, cl.seed);
    h = rcpc_open(&o);
}

static void teardown(void)
{
    rcp_cluster_close(h);
    h = NULL;
}

/* Every master serves a share of 2000 keys spread over the slots, and each
 * key is on the master CLUSTER NODES says owns its slot. */
START_TEST(test_set_get_all_slots)
{
    enum { NKEYS = 2000 };
    rcpc_topo t;
    long long before[RCPC_MAX_NODES] = {0};
    int hits[RCPC_MAX_NODES] = {0};
    char d[256];
    int i;

    ck_assert_int_eq(rcpc_topology_any(&cl, &t), 0);
    for (i = 0; i < t.n; i++)
        before[i] = t.node[i].is_master ? rcpc_dbsize(t.node[i].port) : 0;
    for (i = 0; i < NKEYS; i++) {
        char key[64], val[64];
        rcp_reply *r;
        snprintf(key, sizeof key, "route:%d", i);
        snprintf(val, sizeof val, "v%d-%d", i, i * 7);
        r = rcp_cluster_command(h, "SET %s %s", key, val);
        ck_assert_msg(rcpc_is_status(r, "OK"), "SET %s: %s", key, rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        r = rcp_cluster_command(h, "GET %s", key);
        ck_assert_msg(rcpc_is_string(r, val), "GET %s: %s", key, rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        hits[rcpc_slot_owner(&t, rcp_keyslot(key, strlen(key)))]++;
    }
    /* Each key is really on its slot's owner (asked directly, no redirect
     * following on the side connection). */
    for (i = 0; i < NKEYS; i += 97) {
        char key[64], val[64];
        int owner;
        redisReply *rr;
        snprintf(key, sizeof key, "route:%d", i);
        snprintf(val, sizeof val, "v%d-%d", i, i * 7);
        owner = rcpc_slot_owner(&t, rcp_keyslot(key, strlen(key)));
        ck_assert_int_ge(owner, 0);
        rr = rcpc_ask(t.node[owner].port, "GET %s", key);
        ck_assert_msg(rr != NULL && rr->type == REDIS_REPLY_STRING && strcmp(rr->str, val) == 0,
                      "key %s not on its owner %d", key, t.node[owner].port);
        freeReplyObject(rr);
    }
    for (i = 0; i < t.n; i++) {
        long long after;
        if (!t.node[i].is_master)
            continue;
        ck_assert_msg(hits[i] > NKEYS / 10, "master %d owns only %d of the keys", t.node[i].port,
                      hits[i]);
        after = rcpc_dbsize(t.node[i].port);
        ck_assert_msg(after - before[i] >= hits[i] - 5 && after - before[i] <= hits[i] + 5,
                      "master %d: DBSIZE grew by %lld, expected %d", t.node[i].port,
                      after - before[i], hits[i]);
    }
}
END_TEST

/* Multi-key commands on one slot through a hash tag, sync and async. */
START_TEST(test_same_slot_multikey)
{
    char d[256];
    rcp_reply *r;
    int tag;

    for (tag = 0; tag < 50; tag++) {
        char a[64], b[64], c[64];
        snprintf(a, sizeof a, "{user%d}:a", tag);
        snprintf(b, sizeof b, "{user%d}:b", tag);
        snprintf(c, sizeof c, "{user%d}:c", tag);
        r = rcp_cluster_command(h, "MSET %s 1 %s 2 %s 3", a, b, c);
        ck_assert_msg(rcpc_is_status(r, "OK"), "MSET: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        r = rcp_cluster_command(h, "MGET %s %s %s {user%d}:none", a, b, c, tag);
        ck_assert_msg(r != NULL && r->type == RCP_REPLY_ARRAY && r->elements == 4, "MGET: %s",
                      rcptest_describe(r, d, sizeof d));
        ck_assert(rcpc_is_string(r->element[0], "1"));
        ck_assert(rcpc_is_string(r->element[1], "2"));
        ck_assert(rcpc_is_string(r->element[2], "3"));
        ck_assert(rcptest_is_nil(r->element[3]));
        rcp_reply_free(r);
        r = rcp_cluster_command(h, "EXISTS %s %s %s", a, b, c);
        ck_assert_msg(rcptest_is_int(r, 3), "EXISTS: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        r = rcp_cluster_command(h, "DEL %s %s %s", a, b, c);
        ck_assert_msg(rcptest_is_int(r, 3), "DEL: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        r = rcp_cluster_command(h, "EXISTS %s %s", a, b);
        ck_assert_msg(rcptest_is_int(r, 0), "EXISTS after DEL: %s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
}
END_TEST

struct acall {
    rcp_future f;
    atomic_int calls;
    rcp_reply *r;
    int on_driver; /* resolved on the application loop's thread */
};

static void on_resolve(rcp_future *f, rcp_reply *reply)
{
    struct acall *a = f->data;
    a->on_driver = rcpc_on_driver_thread();
    a->r = rcp_reply_keep(reply);
    atomic_fetch_add(&a->calls, 1);
}

/* A cross-slot SINTER (and other commands whose keys span slots, but for the
 * ones split by slot) is refused
 * with RCP_ERR_CROSS_SLOT; the async send returns the code and never calls
 * back. The slots of the two keys differ (checked). */
START_TEST(test_cross_slot)
{
    static const char *const cmds[][4] = {
        {"SINTER", "cross:a", "cross:b", NULL}, /* MGET across slots is split: test_multikey.c */
        {"RENAME", "cross:a", "cross:b", NULL},
        {"SUNIONSTORE", "cross:a", "cross:b", NULL},
    };
    char d[256];
    size_t i;

    ck_assert_uint_ne(rcp_keyslot("cross:a", 7), rcp_keyslot("cross:b", 7));
    for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        int argc = cmds[i][2] ? 3 : 2;
        struct acall a;
        rcp_reply *r = rcp_cluster_command_argv(h, argc, (const char **)cmds[i], NULL);
        int rc;
        ck_assert_msg(r != NULL && r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_CROSS_SLOT &&
                          r->str != NULL && r->len > 0,
                      "%s cross-slot: %s", cmds[i][0], rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);

        memset(&a, 0, sizeof a);
        a.f.resolve = on_resolve;
        a.f.data = &a;
        rc = rcp_cluster_send_argv(h, &a.f, argc, (const char **)cmds[i], NULL);
        ck_assert_msg(rc == RCP_ERR_CROSS_SLOT, "async %s cross-slot: returned %d (%s)", cmds[i][0],
                      rc, rcp_strerror(rc));
        rcptest_sleep_ms(50);
        ck_assert_int_eq(atomic_load(&a.calls), 0);
    }
    /* The same keys behind one hash tag are fine. */
    {
        rcp_reply *r = rcp_cluster_command(h, "MGET {cross}a {cross}b");
        ck_assert_msg(r != NULL && r->type == RCP_REPLY_ARRAY && r->elements == 2, "%s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
}
END_TEST

/* Keyless commands go somewhere sensible and work, sync and async. */
START_TEST(test_keyless)
{
    char d[256];
    rcp_reply *r;
    struct acall a;
    int i;

    for (i = 0; i < 20; i++) {
        r = rcp_cluster_command(h, "PING");
        ck_assert_msg(rcpc_is_status(r, "PONG"), "PING: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        r = rcp_cluster_command(h, "ECHO %s", "hello");
        ck_assert_msg(rcpc_is_string(r, "hello"), "ECHO: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    r = rcp_cluster_command(h, "CLUSTER KEYSLOT %s", "somekey");
    ck_assert_msg(rcptest_is_int(r, (long long)rcp_keyslot("somekey", 7)), "CLUSTER KEYSLOT: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    memset(&a, 0, sizeof a);
    a.f.resolve = on_resolve;
    a.f.data = &a;
    ck_assert_int_eq(rcp_cluster_send(h, &a.f, "PING"), RCP_OK);
    for (i = 0; i < rcptest_scale(500) && atomic_load(&a.calls) == 0; i++)
        rcptest_sleep_ms(10);
    ck_assert_int_eq(atomic_load(&a.calls), 1);
    ck_assert_msg(rcpc_is_status(a.r, "PONG"), "async PING: %s",
                  rcptest_describe(a.r, d, sizeof d));
    /* On the application's loop, callbacks fire on its thread (and with
     * our own I/O threads, never there). */
    ck_assert_int_eq(a.on_driver, strcmp(rcpc_driver(), "libevent") == 0);
    rcp_reply_free(a.r);
}
END_TEST

/* rcp_keyslot against the server's CLUSTER KEYSLOT: hash-tag edge cases and
 * thousands of random binary keys (pipelined on the side connection). */
START_TEST(test_keyslot_matches_server)
{
    static const char *const edge[] = {"", "{", "}", "{}", "{}{a}", "{{a}}", "a{b}c{d}",
                                       "{a", "a}", "}{a}", "foo{}{bar}", "{user1000}.following",
                                       "123456789", "{bar", "a{{b}}"};
    enum { NRANDOM = 3000 };
    rcpc_env e;
    redisContext *ctx;
    unsigned seed = 12345;
    size_t i;

    ck_assert_int_eq(rcpc_env_read(&cl, &e), 0);
    ctx = rcpc_connect(e.port[0]);
    ck_assert(ctx != NULL);
    /* The reference value from the spec. */
    ck_assert_uint_eq(rcp_keyslot("123456789", 9), 0x31C3u % 16384u);
    for (i = 0; i < sizeof edge / sizeof edge[0]; i++)
        redisAppendCommand(ctx, "CLUSTER KEYSLOT %b", edge[i], strlen(edge[i]));
    for (i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        redisReply *r = NULL;
        ck_assert_int_eq(redisGetReply(ctx, (void **)&r), REDIS_OK);
        ck_assert_msg(r->type == REDIS_REPLY_INTEGER &&
                          (unsigned)r->integer == rcp_keyslot(edge[i], strlen(edge[i])),
                      "key \"%s\": server %lld, rcp_keyslot %u", edge[i], r->integer,
                      rcp_keyslot(edge[i], strlen(edge[i])));
        freeReplyObject(r);
    }
    {
        static unsigned char keys[NRANDOM][40];
        static size_t lens[NRANDOM];
        for (i = 0; i < NRANDOM; i++) {
            size_t k;
            seed = seed * 1103515245u + 12345u;
            lens[i] = (seed >> 16) % 40;
            for (k = 0; k < lens[i]; k++) {
                seed = seed * 1103515245u + 12345u;
                /* Plenty of braces so that tags of every shape occur. */
                switch ((seed >> 16) % 8) {
                case 0:
                    keys[i][k] = '{';
                    break;
                case 1:
                    keys[i][k] = '}';
                    break;
                default:
                    keys[i][k] = (unsigned char)(seed >> 8);
                    break;
                }
            }
            redisAppendCommand(ctx, "CLUSTER KEYSLOT %b", keys[i], lens[i]);
        }
        for (i = 0; i < NRANDOM; i++) {
            redisReply *r = NULL;
            unsigned mine = rcp_keyslot((const char *)keys[i], lens[i]);
            ck_assert_int_eq(redisGetReply(ctx, (void **)&r), REDIS_OK);
            ck_assert_msg(r->type == REDIS_REPLY_INTEGER && (unsigned)r->integer == mine,
                          "random key %zu (len %zu): server %lld, rcp_keyslot %u", i, lens[i],
                          r->integer, mine);
            freeReplyObject(r);
        }
    }
    redisFree(ctx);
}
END_TEST

/* Binary keys and values, a large value, a missing key. */
START_TEST(test_binary)
{
    static const char key[] = {'b', 'i', 'n', 0, '\r', '\n', '{', '}', (char)0xff};
    char val[10000];
    const char *argv[3];
    size_t lens[3];
    char d[256];
    rcp_reply *r;
    size_t i;

    for (i = 0; i < sizeof val; i++)
        val[i] = (char)(i * 31);
    argv[0] = "SET";
    argv[1] = key;
    argv[2] = val;
    lens[0] = 3;
    lens[1] = sizeof key;
    lens[2] = sizeof val;
    r = rcp_cluster_command_argv(h, 3, argv, lens);
    ck_assert_msg(rcpc_is_status(r, "OK"), "SET binary: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    argv[0] = "GET";
    lens[0] = 3;
    r = rcp_cluster_command_argv(h, 2, argv, lens);
    ck_assert_msg(r != NULL && r->type == RCP_REPLY_STRING && r->len == sizeof val &&
                      memcmp(r->str, val, sizeof val) == 0,
                  "GET binary: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_cluster_command(h, "GET %s", "no-such-key-here");
    ck_assert_msg(rcptest_is_nil(r), "GET missing: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    /* A server error keeps the server's text. */
    r = rcp_cluster_command(h, "INCR %b", key, sizeof key);
    ck_assert_msg(r != NULL && r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_SERVER &&
                      strstr(r->str, "not an integer") != NULL,
                  "INCR on a non-number: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}
END_TEST

/* Stats and the node list describe the cluster. */
START_TEST(test_stats_nodes)
{
    rcp_cluster_stats st;
    rcp_cluster_node_info nodes[32];
    size_t n, i;
    int masters = 0, in_map = 0;
    rcp_reply *r;

    r = rcp_cluster_command(h, "SET %s %s", "stats:key", "1");
    rcp_reply_free(r);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &st), RCP_OK);
    ck_assert_uint_ge(st.requests, 1);
    ck_assert_uint_ge(st.map_version, 1);
    ck_assert_uint_eq(st.nodes, 6);
    n = rcp_cluster_get_nodes(h, nodes, 32);
    ck_assert_uint_eq(n, 6);
    for (i = 0; i < n; i++) {
        ck_assert_msg(strncmp(nodes[i].addr, "127.0.0.1:", 10) == 0, "addr %s", nodes[i].addr);
        masters += nodes[i].is_master;
        in_map += nodes[i].in_map;
    }
    ck_assert_int_eq(masters, 3);
    ck_assert_int_eq(in_map, 6);
    /* max smaller than the count: fills max, returns the count. */
    ck_assert_uint_eq(rcp_cluster_get_nodes(h, nodes, 2), 6);
    ck_assert_uint_eq(rcp_cluster_get_nodes(h, NULL, 0), 6);
}
END_TEST

/* Bootstrap: dead seeds are named in the error; a dead seed before a live
 * one is skipped. */
START_TEST(test_bootstrap)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    rcp_cluster *c2 = NULL;
    char seeds[128];
    char err[2048] = "";
    int rc;

    rcpc_options(&o, &node, "127.0.0.1:1,127.0.0.1:2");
    node.connect_timeout_ms = 500;
    rc = rcp_cluster_open(&o, &c2, err, sizeof err);
    ck_assert_int_ne(rc, RCP_OK);
    ck_assert(c2 == NULL);
    ck_assert_msg(strstr(err, "127.0.0.1:1") != NULL && strstr(err, "127.0.0.1:2") != NULL,
                  "error does not name both seeds: %s", err);

    snprintf(seeds, sizeof seeds, "127.0.0.1:1,%s", cl.seed);
    o.seeds = seeds;
    rc = rcp_cluster_open(&o, &c2, err, sizeof err);
    ck_assert_msg(rc == RCP_OK && c2 != NULL, "open with one dead seed: %s (%s)", rcp_strerror(rc),
                  err);
    {
        rcp_reply *r = rcp_cluster_command(c2, "PING");
        ck_assert(rcpc_is_status(r, "PONG"));
        rcp_reply_free(r);
    }
    rcp_cluster_close(c2);
}
END_TEST

/* The single-threaded application: one thread opens a handle on its own
 * libevent loop (before the loop runs: the bootstrap does not need it),
 * sends, runs the loop until every callback has fired there, and closes
 * the handle after the loop returned (close runs the loop's pending work
 * itself). A sync call on that thread is refused instead of waiting for
 * the loop it would block. */
#define APP_N 200
struct app {
    struct event_base *base;
    pthread_t self;
    atomic_int done, wrong, elsewhere;
};
struct app_call {
    rcp_future f;
    struct app *app;
    char val[32];
    int get;
};

static void app_on_reply(rcp_future *f, rcp_reply *r)
{
    struct app_call *c = f->data;
    struct app *a = c->app;
    if (!pthread_equal(pthread_self(), a->self))
        atomic_fetch_add(&a->elsewhere, 1);
    if (c->get ? !rcpc_is_string(r, c->val) : !rcpc_is_status(r, "OK"))
        atomic_fetch_add(&a->wrong, 1);
    if (atomic_fetch_add(&a->done, 1) + 1 == 2 * APP_N)
        event_base_loopbreak(a->base);
}

START_TEST(test_app_loop_one_thread)
{
    static struct app_call calls[2 * APP_N];
    rcp_cluster_options o;
    rcp_conn_options node;
    rcp_cluster *c2 = NULL;
    struct app a;
    rcp_loop *loop;
    rcp_reply *r;
    struct timeval limit = {rcptest_scale(20), 0};
    char err[2048] = "", d[256];
    int i;

    memset(&a, 0, sizeof a);
    a.self = pthread_self();
    a.base = event_base_new();
    ck_assert(a.base != NULL);
    loop = rcp_libevent_loop(a.base);
    ck_assert(loop != NULL);
    rcpc_options(&o, &node, cl.seed);
    node.loop = loop;
    ck_assert_msg(rcp_cluster_open(&o, &c2, err, sizeof err) == RCP_OK, "open: %s", err);
    for (i = 0; i < APP_N; i++) {
        struct app_call *s = &calls[2 * i], *g = &calls[2 * i + 1];
        char key[32];
        snprintf(key, sizeof key, "app:%d", i);
        snprintf(s->val, sizeof s->val, "v%d", i);
        snprintf(g->val, sizeof g->val, "v%d", i);
        s->app = g->app = &a;
        g->get = 1;
        s->f.resolve = g->f.resolve = app_on_reply;
        s->f.data = s;
        g->f.data = g;
        ck_assert_int_eq(rcp_cluster_send(c2, &s->f, "SET %s %s", key, s->val), RCP_OK);
        ck_assert_int_eq(rcp_cluster_send(c2, &g->f, "GET %s", key), RCP_OK);
    }
    /* A bounded run: the loop stops when the last reply came, or at the
     * limit (then the counts below say what is missing). */
    event_base_loopexit(a.base, &limit);
    event_base_dispatch(a.base);
    ck_assert_int_eq(atomic_load(&a.done), 2 * APP_N);
    ck_assert_int_eq(atomic_load(&a.wrong), 0);
    ck_assert_int_eq(atomic_load(&a.elsewhere), 0);
    r = rcp_cluster_command(c2, "GET %s", "app:0");
    ck_assert_msg(r != NULL && r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_INVALID,
                  "sync call on the loop's thread: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    rcp_cluster_close(c2);
    rcp_loop_free(loop);
    event_base_free(a.base);
}
END_TEST

/* A group of async GETs waited for with rcp_waitgroup (no spinning), and
 * fire-and-forget writes: they land (with the usual routing), refusals
 * come back at once, and a failure is counted. */
struct wg_call {
    rcp_future f;
    rcp_waitgroup *wg;
    atomic_int *right;
    char want[16];
};

static void wg_on_reply(rcp_future *f, rcp_reply *r)
{
    struct wg_call *c = (struct wg_call *)f;
    if (rcpc_is_string(r, c->want))
        atomic_fetch_add(c->right, 1);
    rcp_waitgroup_done(c->wg);
}

START_TEST(test_forget_and_waitgroup)
{
    static struct wg_call calls[300];
    rcp_waitgroup *wg = rcp_waitgroup_new();
    rcp_cluster_stats st0, st;
    atomic_int right = 0;
    char d[256];
    int i;

    ck_assert_ptr_nonnull(wg);
    rcp_cluster_get_stats(h, &st0);
    for (i = 0; i < 300; i++)
        ck_assert_int_eq(rcp_cluster_send_forget(h, "SET fg:%d v%d", i, i), RCP_OK);
    ck_assert_int_eq(rcp_cluster_send_forget(h, "SUNION fg:1 fg:2"), RCP_ERR_CROSS_SLOT);
    ck_assert_int_eq(rcp_cluster_send_forget(NULL, "PING"), RCP_ERR_INVALID);
    {
        const char *argv[] = {"INCR", "fg:0"}; /* "v0" is not an integer: an error reply */
        ck_assert_int_eq(rcp_cluster_send_forget_argv(h, 2, argv, NULL), RCP_OK);
    }
    /* The SETs were queued first on their masters' pipelines (the default
     * read policy reads masters), so GETs sent now see them. */
    for (i = 0; i < 300; i++) {
        calls[i].f.resolve = wg_on_reply;
        calls[i].wg = wg;
        calls[i].right = &right;
        snprintf(calls[i].want, sizeof calls[i].want, "v%d", i);
        rcp_waitgroup_add(wg, 1);
        if (rcp_cluster_send(h, &calls[i].f, "GET fg:%d", i) != RCP_OK)
            rcp_waitgroup_done(wg);
    }
    ck_assert_int_eq(rcp_waitgroup_wait(wg, rcptest_scale(10000)), RCP_OK);
    ck_assert_int_eq(atomic_load(&right), 300);
    for (i = 0; i < rcptest_scale(500); i++) {
        rcp_cluster_get_stats(h, &st);
        if (st.forgotten_errors > st0.forgotten_errors)
            break;
        rcptest_sleep_ms(10);
    }
    ck_assert_msg(st.forgotten_errors == st0.forgotten_errors + 1, "forgotten errors %llu -> %llu",
                  (unsigned long long)st0.forgotten_errors,
                  (unsigned long long)st.forgotten_errors);
    ck_assert_uint_ge(st.requests, st0.requests + 601);
    {
        rcp_reply *r = rcp_cluster_command(h, "GET fg:0");
        ck_assert_msg(rcpc_is_string(r, "v0"), "%s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    rcp_waitgroup_free(wg);
}
END_TEST

/* Many threads, many keys, async and sync mixed: every reply is the right
 * one. */
#define NTHREADS 8
static atomic_int wrong;

static void *worker(void *arg)
{
    long id = (long)arg;
    int i;

    for (i = 0; i < 300; i++) {
        char key[64], val[64];
        rcp_reply *r;
        snprintf(key, sizeof key, "thr:%ld:%d", id, i);
        snprintf(val, sizeof val, "%ld.%d", id, i);
        r = rcp_cluster_command(h, "SET %s %s", key, val);
        if (!rcpc_is_status(r, "OK"))
            atomic_fetch_add(&wrong, 1);
        rcp_reply_free(r);
        r = rcp_cluster_command(h, "GET %s", key);
        if (!rcpc_is_string(r, val))
            atomic_fetch_add(&wrong, 1);
        rcp_reply_free(r);
    }
    return NULL;
}

START_TEST(test_threads)
{
    pthread_t th[NTHREADS];
    long i;

    atomic_store(&wrong, 0);
    for (i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker, (void *)i), 0);
    for (i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(atomic_load(&wrong), 0);
}
END_TEST

/* A value of `len` bytes whose byte at i depends on i and seed. */
typedef struct pat_source {
    rcp_source s;
    unsigned seed;
} pat_source;

static unsigned char src_pat(uint64_t i, unsigned seed)
{
    return (unsigned char)((i * 131u + seed * 7u) ^ (i >> 11));
}

static ssize_t pat_fn(void *ud, char *buf, size_t cap, uint64_t off)
{
    pat_source *p = ud;
    for (size_t i = 0; i < cap; i++)
        buf[i] = (char)src_pat(off + i, p->seed);
    return (ssize_t)cap;
}

typedef struct pat_sink {
    rcp_sink s;
    unsigned seed;
    uint64_t next;
    int bad;
} pat_sink;

static int pat_sink_fn(void *ud, const char *data, size_t len, uint64_t off, uint64_t total)
{
    pat_sink *k = ud;
    (void)total;
    if (off != k->next)
        k->bad++;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)data[i] != src_pat(off + i, k->seed)) {
            k->bad++;
            break;
        }
    k->next = off + len;
    return 0;
}

typedef struct src_req {
    rcp_future f;
    rcp_waitgroup *wg;
    int ok;
} src_req;

static void src_done(rcp_future *f, rcp_reply *r)
{
    src_req *q = (src_req *)f;
    q->ok = r->type == RCP_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    rcp_waitgroup_done(q->wg);
}

/* Streamed SETs through the cluster handle: one key per master's slots
 * (hash tags), sync and async, read back through a sink; the node that
 * owns the slot holds the key. A multi-key command across slots with a
 * source is refused. */
START_TEST(test_source)
{
    const size_t n = 1024 * 1024 + 3;
    rcpc_topo t;
    char d[256];
    ck_assert_int_eq(rcpc_topology_any(&cl, &t), 0);
    for (unsigned k = 0; k < 6; k++) {
        unsigned slot = (k * 5461u + 17u) % 16384u;
        char key[64];
        const char *set[2] = {"SET", key};
        const char *get[2] = {"GET", key};
        pat_source p;
        pat_sink sk;
        rcp_reply *r;
        snprintf(key, sizeof key, "%ssrc%u", rcpc_slot_tag(slot), k); /* "{tag}": on slot */
        ck_assert_uint_eq(rcp_keyslot(key, strlen(key)), slot);
        memset(&p, 0, sizeof p);
        p.s.kind = RCP_SOURCE_CALLBACK;
        p.s.len = n;
        p.s.fn = pat_fn;
        p.s.ud = &p;
        p.seed = k + 1;
        if (k % 2) {
            src_req q;
            memset(&q, 0, sizeof q);
            q.f.resolve = src_done;
            q.wg = rcp_waitgroup_new();
            rcp_waitgroup_add(q.wg, 1);
            ck_assert_int_eq(rcp_cluster_send_argv_source(h, &q.f, 2, set, NULL, &p.s), RCP_OK);
            ck_assert_int_eq(rcp_waitgroup_wait(q.wg, 30000), RCP_OK);
            rcp_waitgroup_free(q.wg);
            ck_assert_int_eq(q.ok, 1);
        } else {
            r = rcp_cluster_command_argv_source(h, 2, set, NULL, &p.s);
            ck_assert_msg(r->type == RCP_REPLY_STATUS && strcmp(r->str, "OK") == 0, "%s",
                          rcptest_describe(r, d, sizeof d));
            rcp_reply_free(r);
        }
        memset(&sk, 0, sizeof sk);
        sk.s.kind = RCP_SINK_CALLBACK;
        sk.s.fn = pat_sink_fn;
        sk.s.ud = &sk;
        sk.seed = k + 1;
        r = rcp_cluster_command_argv_sink(h, 2, get, NULL, &sk.s);
        ck_assert_msg(r->type == RCP_REPLY_INTEGER && r->integer == (long long)n, "%s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        ck_assert_int_eq(sk.bad, 0);
        ck_assert_uint_eq(sk.next, n);
        {
            int owner = rcpc_slot_owner(&t, slot);
            redisReply *e;
            ck_assert_int_ge(owner, 0);
            e = rcpc_ask(t.node[owner].port, "STRLEN %s", key);
            ck_assert_ptr_nonnull(e);
            ck_assert_int_eq(e->integer, (long long)n);
            freeReplyObject(e);
        }
    }
    {
        const char *mset[4] = {"MSET", "{a}x", "1", "{b}y"};
        pat_source p;
        rcp_reply *r;
        memset(&p, 0, sizeof p);
        p.s.kind = RCP_SOURCE_CALLBACK;
        p.s.len = 3;
        p.s.fn = pat_fn;
        p.s.ud = &p;
        r = rcp_cluster_command_argv_source(h, 4, mset, NULL, &p.s);
        ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_UNSUPPORTED, "%s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        r = rcp_cluster_command_argv_source(h, 2, mset, NULL, NULL);
        ck_assert_int_eq(r->err, RCP_ERR_INVALID);
        rcp_reply_free(r);
    }
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_checked_fixture(tc, setup, teardown);
    RCPTEST_ADD(tc, test_set_get_all_slots, test_same_slot_multikey, test_cross_slot, test_keyless,
                test_keyslot_matches_server, test_binary, test_stats_nodes, test_bootstrap,
                test_app_loop_one_thread, test_forget_and_waitgroup, test_threads, test_source);
}

int main(void)
{
    return rcpc_main(&cl, "routing", 3, 1, NULL, 60, add_tests);
}
