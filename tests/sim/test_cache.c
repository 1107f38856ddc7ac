/* test_cache.c: the client-side cache's rules (issue 15) against a fake
 * node that decides what every connection hears and when, so that each
 * race the rules are about can be staged instead of hoped for.
 *
 * The node plays a one-node cluster that speaks tracking the RESP2 way:
 * CLIENT ID answers 42, SUBSCRIBE __redis__:invalidate confirms, CLIENT
 * TRACKING ON REDIRECT 42 answers +OK. The handle's first GET goes the
 * ordinary way and makes the invalidation connection; once the node's
 * tracking is armed (rcp_cluster_node_info.cache_tracking), reads are
 * fetched with their PTTL and stored. Each test then checks one rule:
 *
 * - hit_needs_no_server: a stored reply is served again without a byte on
 *   the wire (the node's GET count does not move), hits/misses counted.
 * - invalidation_wins_over_read_in_flight: the node holds a GET's reply,
 *   pushes an invalidation of its key on the invalidation connection, and
 *   only then answers: the caller gets that reply, but the next GET goes
 *   to the node (it was not stored). Without the pending entry the next
 *   GET would be a hit of the old value and the script would wait in vain.
 * - own_write_drops_before_send: a SET through the handle; the next GET
 *   goes to the node.
 * - flush_and_lost_invalidation_connection: a null invalidation (FLUSHALL)
 *   drops the node's entries; then the invalidation connection is closed:
 *   nothing is served or stored until it is back, subscribed and the
 *   tracking re-pointed at its new id (CLIENT TRACKING ON REDIRECT 43).
 * - expiry_bounds: PTTL 150 ms: a hit at once, a miss once it has passed;
 *   the TTL cap (client_cache_ttl_ms 150) bounds a key without expiry the
 *   same way. Sleeps are lower bounds only (the entry must be gone after
 *   them), never a measure of speed. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "sim.h"

static char seeds[64];

static const char tracking_rules[] =
    "on CLUSTER SLOTS => slots 0-16383=$P0\n"
    "on CLIENT ID => send \":42\\r\\n\"\n"
    "on SUBSCRIBE __redis__:invalidate => send "
    "\"*3\\r\\n$9\\r\\nsubscribe\\r\\n$20\\r\\n__redis__:invalidate\\r\\n:1\\r\\n\"\n"
    "on CLIENT TRACKING ON REDIRECT * => send \"+OK\\r\\n\"\n";

static const char inval_k[] =
    "\"*3\\r\\n$7\\r\\nmessage\\r\\n$20\\r\\n__redis__:invalidate\\r\\n*1\\r\\n$1\\r\\nk\\r\\n\"";

static rcp_cluster *open_cache(sim_node *seed, int ttl_ms)
{
    rcp_cluster_options o;
    rcp_conn_options no;
    sim_cluster_options(&o, &no, sim_addr(seed, seeds, sizeof seeds));
    o.client_cache_bytes = 1 << 20;
    if (ttl_ms)
        o.client_cache_ttl_ms = ttl_ms;
    return sim_open(&o);
}

static int tracking(rcp_cluster *h)
{
    rcp_cluster_node_info ni;
    return rcp_cluster_get_nodes(h, &ni, 1) >= 1 && ni.cache_tracking;
}

static void get_is(rcp_cluster *h, const char *key, const char *want)
{
    rcp_reply *r = rcp_cluster_command(h, "GET %s", key);
    ck_assert_msg(r && r->type == RCP_REPLY_STRING && strcmp(r->str, want) == 0,
                  "GET %s: want \"%s\", got type %d \"%s\"", key, want, r ? r->type : -1,
                  r && r->str ? r->str : "");
    rcp_reply_free(r);
}

static rcp_cluster_stats stats(rcp_cluster *h)
{
    rcp_cluster_stats st;
    ck_assert_int_eq(rcp_cluster_get_stats(h, &st), RCP_OK);
    return st;
}

/* Reads of another key ("arm") the ordinary way until the node's
 * tracking is armed: the first makes the invalidation connection, and a
 * later one makes it again if that failed (an injected allocation
 * failure in the allocfail reruns). The last of them may have been
 * stored (its reply came after the arm): a test counts entries from
 * what there is when this returns. The node answers PTTL with -1 unless
 * a test's own rule says otherwise; GETs of k are each test's to answer. */
static rcp_cluster *armed(sim_node *n, int ttl_ms)
{
    rcp_cluster *h;
    uint64_t until;
    sim_loadf(n, "%s%son PTTL * => send \":-1\\r\\n\"\non GET arm => send \"$1\\r\\na\\r\\n\"\n",
              sim_prelude, tracking_rules);
    h = open_cache(n, ttl_ms);
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(2000) * 1000000ull;
    while (!tracking(h) && rcptest_now_ns() < until) {
        rcp_reply_free(rcp_cluster_command(h, "GET arm"));
        rcptest_sleep_ms(20);
    }
    ck_assert_msg(tracking(h), "the node's tracking was never armed");
    ck_assert_uint_ge(sim_count(n, "CLIENT TRACKING ON REDIRECT 42"), 1);
    return h;
}

/* The connection number of the invalidation connection (the one that
 * sent SUBSCRIBE). */
static int inv_conn(sim_node *n)
{
    size_t i, len = sim_log_len(n);
    sim_cmd c;
    for (i = 0; i < len; i++)
        if (sim_log_at(n, i, &c) == 0 && strncmp(c.line, "SUBSCRIBE", 9) == 0)
            return c.conn;
    ck_abort_msg("no SUBSCRIBE on any connection");
    return -1;
}

START_TEST(hit_needs_no_server)
{
    sim_node *n[1];
    rcp_cluster *h;
    size_t gets;
    uint64_t hits, entries;
    rcp_cluster_stats st;
    ck_assert_int_eq(sim_start(n, 1), 0);
    h = armed(n[0], 0);
    entries = stats(h).cache_entries; /* "arm" may be one */
    sim_loadf(n[0], "on GET k => send \"$2\\r\\nv1\\r\\n\"\n");
    sim_assert_done(n[0], rcptest_scale(2000));
    get_is(h, "k", "v1"); /* fetched with its PTTL, stored */
    ck_assert_uint_ge(sim_count(n[0], "PTTL k"), 1);
    gets = sim_count(n[0], "GET k");
    hits = stats(h).cache_hits;
    get_is(h, "k", "v1");
    get_is(h, "k", "v1");
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets);
    st = stats(h);
    ck_assert_uint_eq(st.cache_hits, hits + 2);
    ck_assert_uint_ge(st.cache_misses, 1);
    ck_assert_uint_eq(st.cache_entries, entries + 1);
    ck_assert_uint_gt(st.cache_bytes, 0);
    rcp_cluster_close(h);
    sim_free_all(n, 1);
}
END_TEST

START_TEST(invalidation_wins_over_read_in_flight)
{
    sim_node *n[1];
    rcp_cluster *h;
    rcp_cluster_stats st;
    int inv, data;
    ck_assert_int_eq(sim_start(n, 1), 0);
    h = armed(n[0], 0);
    inv = inv_conn(n[0]);
    data = inv == 0 ? 1 : 0;
    /* The next GET k is the script's: its reply waits for the
     * invalidation to have been read by the client. */
    sim_loadf(n[0],
              "expect GET k\n"
              "use %d\n"
              "send %s\n"
              "stall 200\n"
              "use %d\n"
              "send \"$2\\r\\nv1\\r\\n\"\n"
              "expect GET k\n"
              "send \"$2\\r\\nv2\\r\\n\"\n",
              inv, inval_k, data);
    get_is(h, "k", "v1"); /* the caller gets the reply... */
    get_is(h, "k", "v2"); /* ...but it was not kept */
    sim_assert_done(n[0], rcptest_scale(2000));
    st = stats(h);
    ck_assert_uint_eq(st.cache_invalidations, 1);
    ck_assert_uint_eq(st.cache_hits, 0);
    rcp_cluster_close(h);
    sim_free_all(n, 1);
}
END_TEST

START_TEST(own_write_drops_before_send)
{
    sim_node *n[1];
    rcp_cluster *h;
    rcp_reply *r;
    size_t gets;
    ck_assert_int_eq(sim_start(n, 1), 0);
    h = armed(n[0], 0);
    sim_loadf(n[0], "on x1 GET k => send \"$2\\r\\nv1\\r\\n\"\n");
    sim_assert_done(n[0], rcptest_scale(2000));
    get_is(h, "k", "v1");
    get_is(h, "k", "v1"); /* a hit */
    gets = sim_count(n[0], "GET k");
    /* After the SET, the GET must reach the node: the entry went before
     * the SET was sent. */
    sim_loadf(n[0], "expect SET k v2\nsend \"+OK\\r\\n\"\nexpect GET k\nsend \"$2\\r\\nv2\\r\\n\"\n");
    r = rcp_cluster_command(h, "SET k v2");
    ck_assert_msg(r && r->type == RCP_REPLY_STATUS, "SET: %s", r && r->str ? r->str : "?");
    rcp_reply_free(r);
    get_is(h, "k", "v2");
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets + 1);
    sim_assert_done(n[0], rcptest_scale(2000));
    rcp_cluster_close(h);
    sim_free_all(n, 1);
}
END_TEST

START_TEST(flush_and_lost_invalidation_connection)
{
    sim_node *n[1];
    rcp_cluster *h;
    size_t gets;
    int inv;
    uint64_t until;
    ck_assert_int_eq(sim_start(n, 1), 0);
    h = armed(n[0], 0);
    inv = inv_conn(n[0]);
    sim_loadf(n[0], "on GET k => send \"$2\\r\\nv1\\r\\n\"\n");
    sim_assert_done(n[0], rcptest_scale(2000));
    get_is(h, "k", "v1");
    get_is(h, "k", "v1"); /* a hit */
    /* A null invalidation: the node flushed. */
    sim_loadf(n[0],
              "use %d\nsend \"*3\\r\\n$7\\r\\nmessage\\r\\n$20\\r\\n__redis__:invalidate\\r\\n"
              "*-1\\r\\n\"\n",
              inv);
    sim_assert_done(n[0], rcptest_scale(2000));
    gets = sim_count(n[0], "GET k");
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(2000) * 1000000ull;
    while (stats(h).cache_invalidations < 1 && rcptest_now_ns() < until)
        rcptest_sleep_ms(2);
    get_is(h, "k", "v1");
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets + 1);
    get_is(h, "k", "v1"); /* stored again: tracking stayed armed */
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets + 1);
    /* The invalidation connection is lost; its successor gets id 43. */
    sim_loadf(n[0], "on CLIENT ID => send \":43\\r\\n\"\nuse %d\nclose\n", inv);
    sim_assert_done(n[0], rcptest_scale(2000));
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(2000) * 1000000ull;
    while (tracking(h) && rcptest_now_ns() < until)
        rcptest_sleep_ms(2);
    /* Not a hit from here on until tracking is back (it may be back
     * already: the reconnect is quick; either way this GET goes out). */
    gets = sim_count(n[0], "GET k");
    get_is(h, "k", "v1");
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets + 1);
    ck_assert_uint_ge(sim_wait_count(n[0], "CLIENT TRACKING ON REDIRECT 43", 1,
                                     rcptest_scale(2000)),
                      1);
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(2000) * 1000000ull;
    while (!tracking(h) && rcptest_now_ns() < until)
        rcptest_sleep_ms(5);
    ck_assert_msg(tracking(h), "tracking not re-armed after the invalidation connection came back");
    rcp_cluster_close(h);
    sim_free_all(n, 1);
}
END_TEST

START_TEST(expiry_bounds)
{
    sim_node *n[1];
    rcp_cluster *h;
    size_t gets;
    ck_assert_int_eq(sim_start(n, 1), 0);
    h = armed(n[0], _i == 0 ? 0 : 150);
    sim_loadf(n[0], "on GET k => send \"$2\\r\\nv1\\r\\n\"\n");
    if (_i == 0) /* the key's own expiry, 150 ms after the PTTL was read */
        sim_loadf(n[0], "on PTTL k => send \":150\\r\\n\"\n");
    /* else no expiry on the server; the handle's cap is 150 ms */
    sim_assert_done(n[0], rcptest_scale(2000));
    get_is(h, "k", "v1");
    gets = sim_count(n[0], "GET k");
    get_is(h, "k", "v1");
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets); /* a hit */
    rcptest_sleep_ms(300);
    get_is(h, "k", "v1");
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets + 1); /* expired: fetched again */
    rcp_cluster_close(h);
    sim_free_all(n, 1);
}
END_TEST

static void get_mode_is(rcp_cluster *h, int mode, const char *want)
{
    const char *argv[2] = {"GET", "k"};
    rcp_reply *r = rcp_cluster_command_argv_cache(h, mode, 0, 2, argv, NULL);
    ck_assert_msg(r && r->type == RCP_REPLY_STRING && strcmp(r->str, want) == 0,
                  "GET k (mode %d): got type %d \"%s\"", mode, r ? r->type : -1,
                  r && r->str ? r->str : "");
    rcp_reply_free(r);
}

/* Per request: RCP_CACHE_BYPASS always asks the node and stores nothing;
 * on a handle with client_cache_optin only RCP_CACHE_USE is cached. */
START_TEST(request_modes)
{
    sim_node *n[1];
    rcp_cluster *h;
    size_t gets;
    uint64_t entries;
    const char *argv[2] = {"GET", "k"};
    rcp_reply *r;
    ck_assert_int_eq(sim_start(n, 1), 0);
    h = armed(n[0], 0);
    entries = stats(h).cache_entries; /* "arm" may be one */
    sim_loadf(n[0], "on GET k => send \"$2\\r\\nv1\\r\\n\"\n");
    sim_assert_done(n[0], rcptest_scale(2000));
    gets = sim_count(n[0], "GET k");
    get_mode_is(h, RCP_CACHE_BYPASS, "v1");
    get_mode_is(h, RCP_CACHE_BYPASS, "v1");
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets + 2);
    ck_assert_uint_eq(stats(h).cache_entries, entries);
    get_mode_is(h, RCP_CACHE_DEFAULT, "v1"); /* stored */
    get_mode_is(h, RCP_CACHE_BYPASS, "v1");  /* still asks */
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets + 4);
    get_mode_is(h, RCP_CACHE_USE, "v1");     /* a hit */
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets + 4);
    r = rcp_cluster_command_argv_cache(h, 7, 0, 2, argv, NULL);
    ck_assert_msg(r && r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_INVALID, "mode 7 taken");
    rcp_reply_free(r);
    rcp_cluster_close(h);
    sim_free_all(n, 1);
}
END_TEST

START_TEST(request_modes_optin)
{
    sim_node *n[1];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *h;
    size_t gets;
    uint64_t until;
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%s%son PTTL * => send \":-1\\r\\n\"\non GET k => send \"$2\\r\\nv1\\r\\n\"\n",
              sim_prelude, tracking_rules);
    sim_cluster_options(&o, &no, sim_addr(n[0], seeds, sizeof seeds));
    o.client_cache_bytes = 1 << 20;
    o.client_cache_optin = 1;
    h = sim_open(&o);
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(2000) * 1000000ull;
    while (!tracking(h) && rcptest_now_ns() < until) {
        get_mode_is(h, RCP_CACHE_USE, "v1"); /* makes the invalidation connection */
        rcptest_sleep_ms(20);
    }
    ck_assert_msg(tracking(h), "the node's tracking was never armed");
    gets = sim_count(n[0], "GET k");
    get_is(h, "k", "v1");
    get_is(h, "k", "v1");
    ck_assert_uint_eq(sim_count(n[0], "GET k"), gets + 2); /* not opted in: not cached */
    get_mode_is(h, RCP_CACHE_USE, "v1");
    get_mode_is(h, RCP_CACHE_USE, "v1");
    ck_assert_uint_le(sim_count(n[0], "GET k"), gets + 3); /* the second at least a hit */
    ck_assert_uint_ge(stats(h).cache_hits, 1);
    rcp_cluster_close(h);
    sim_free_all(n, 1);
}
END_TEST

/* Broadcast tracking with a prefix: the arm is CLIENT TRACKING OFF then
 * ON ... BCAST PREFIX user: (the same prefixes twice on one connection
 * would overlap); keys with the prefix are cached, others never are. */
START_TEST(bcast_prefixes)
{
    sim_node *n[1];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *h;
    const char *prefixes[1] = {"user:"};
    size_t gets;
    uint64_t until;
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0],
              "%s%son CLIENT TRACKING OFF => send \"+OK\\r\\n\"\n"
              "on CLIENT TRACKING ON REDIRECT 42 BCAST PREFIX user: => send \"+OK\\r\\n\"\n"
              "on PTTL * => send \":-1\\r\\n\"\n"
              "on GET user:1 => send \"$2\\r\\nv1\\r\\n\"\n"
              "on GET other => send \"$2\\r\\nv9\\r\\n\"\n",
              sim_prelude, tracking_rules);
    sim_cluster_options(&o, &no, sim_addr(n[0], seeds, sizeof seeds));
    o.client_cache_bytes = 1 << 20;
    o.client_cache_bcast = 1;
    o.client_cache_prefixes = prefixes;
    o.client_cache_nprefixes = 1;
    h = sim_open(&o);
    get_is(h, "user:1", "v1");
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(2000) * 1000000ull;
    while (!tracking(h) && rcptest_now_ns() < until) {
        rcp_reply_free(rcp_cluster_command(h, "GET user:1"));
        rcptest_sleep_ms(20);
    }
    ck_assert_msg(tracking(h), "the node's tracking was never armed");
    ck_assert_uint_ge(sim_count(n[0], "CLIENT TRACKING OFF"), 1);
    ck_assert_uint_eq(sim_count(n[0], "CLIENT TRACKING ON REDIRECT 42"), 0);
    get_is(h, "user:1", "v1");
    gets = sim_count(n[0], "GET user:1");
    get_is(h, "user:1", "v1");
    ck_assert_uint_eq(sim_count(n[0], "GET user:1"), gets); /* a hit */
    get_is(h, "other", "v9");
    get_is(h, "other", "v9");
    ck_assert_uint_eq(sim_count(n[0], "GET other"), 2);
    ck_assert_uint_eq(sim_count(n[0], "PTTL other"), 0);
    rcp_cluster_close(h);
    /* Overlapping prefixes, or prefixes without bcast: refused at open. */
    {
        const char *bad[2] = {"user:", "user:1"};
        rcp_cluster *h2 = NULL;
        char err[512];
        o.client_cache_prefixes = bad;
        o.client_cache_nprefixes = 2;
        ck_assert_int_eq(rcp_cluster_open(&o, &h2, err, sizeof err), RCP_ERR_INVALID);
        ck_assert_msg(strstr(err, "overlap") != NULL, "%s", err);
        o.client_cache_nprefixes = 1;
        o.client_cache_bcast = 0;
        ck_assert_int_eq(rcp_cluster_open(&o, &h2, err, sizeof err), RCP_ERR_INVALID);
        o.client_cache_bcast = 1;
        o.client_cache_bytes = 1000;
        ck_assert_int_eq(rcp_cluster_open(&o, &h2, err, sizeof err), RCP_ERR_INVALID);
        ck_assert_msg(strstr(err, "client_cache_bytes") != NULL, "%s", err);
    }
    sim_free_all(n, 1);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("cache");
    RCPTEST_ADD(tc, hit_needs_no_server, invalidation_wins_over_read_in_flight,
                own_write_drops_before_send, flush_and_lost_invalidation_connection, request_modes,
                request_modes_optin, bcast_prefixes);
    tcase_add_loop_test(tc, expiry_bounds, 0, 2);
    return sim_run("sim-cache", tc);
}
