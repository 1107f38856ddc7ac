/* test_sharedmap.c: every kind of request goes through the one set of
 * retry rules (cluster/retry.c), so a MOVED that a blocking command, a
 * transaction, a WATCH or a subscriber meets fixes routing for every other
 * request too.
 *
 * Each case: two fake nodes whose every CLUSTER SLOTS answer says node 0
 * owns all slots (a stale view that refreshes never correct), while node 0
 * redirects the key's slot to node 1. After the one redirect, a plain GET
 * must go straight to node 1: only the MOVED, recorded in the shared map,
 * can have told the handle so. */
#include <check.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sim.h"

#define KEY "foo"

static char seeds[64];

static rcp_cluster *open_stale(sim_node **n)
{
    rcp_cluster_options o;
    rcp_conn_options no;
    ck_assert_int_eq(sim_start(n, 2), 0);
    for (int i = 0; i < 2; i++)
        sim_loadf(n[i], "%son CLUSTER SLOTS => slots 0-16383=$P0\n", sim_prelude);
    sim_cluster_options(&o, &no, sim_addr(n[0], seeds, sizeof seeds));
    return sim_open(&o);
}

/* The plain GET after the redirect: answered by node 1, never asked of
 * node 0; the handle counted the MOVED. */
static void get_goes_to_new_owner(rcp_cluster *cl, sim_node **n)
{
    rcp_cluster_stats st;
    rcp_reply *r;
    sim_loadf(n[1], "expect GET " KEY "\nsend \"$3\\r\\nnew\\r\\n\"\n");
    r = rcp_cluster_command(cl, "GET %s", KEY);
    ck_assert_msg(r->type == RCP_REPLY_STRING && strcmp(r->str, "new") == 0,
                  "GET after the redirect: type %d err %d \"%s\"", r->type, r->err,
                  r->str ? r->str : "");
    rcp_reply_free(r);
    ck_assert_uint_eq(sim_count(n[0], "GET " KEY), 0);
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    ck_assert_uint_ge(st.moved, 1);
    sim_assert_done(n[0], rcptest_scale(5000));
    sim_assert_done(n[1], rcptest_scale(5000));
}

START_TEST(blocking_command_moved_patches_map)
{
    sim_node *n[2];
    rcp_cluster *cl = open_stale(n);
    unsigned s = rcp_keyslot(KEY, 3);
    rcp_reply *r;
    sim_loadf(n[0], "expect BLPOP " KEY " 1\nsend \"-MOVED %u 127.0.0.1:$P1\\r\\n\"\n", s);
    sim_loadf(n[1], "expect BLPOP " KEY " 1\nsend \"*2\\r\\n$3\\r\\nfoo\\r\\n$3\\r\\nbar\\r\\n\"\n");
    r = rcp_cluster_command(cl, "BLPOP %s 1", KEY);
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 2, "BLPOP: type %d err %d \"%s\"",
                  r->type, r->err, r->str ? r->str : "");
    rcp_reply_free(r);
    get_goes_to_new_owner(cl, n);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

START_TEST(transaction_moved_patches_map)
{
    sim_node *n[2];
    rcp_cluster *cl = open_stale(n);
    unsigned s = rcp_keyslot(KEY, 3);
    rcp_txn *t = rcp_txn_new(cl);
    rcp_reply *r;
    sim_loadf(n[0], "expect MULTI\nsend \"+OK\\r\\n\"\n"
                    "expect SET " KEY " v\nsend \"-MOVED %u 127.0.0.1:$P1\\r\\n\"\n"
                    "expect EXEC\nsend \"-EXECABORT Transaction discarded because of: MOVED %u "
                    "127.0.0.1:$P1\\r\\n\"\n", s, s);
    sim_loadf(n[1], "expect MULTI\nsend \"+OK\\r\\n\"\n"
                    "expect SET " KEY " v\nsend \"+QUEUED\\r\\n\"\n"
                    "expect EXEC\nsend \"*1\\r\\n+OK\\r\\n\"\n");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(rcp_txn_add(t, "SET %s v", KEY), RCP_OK);
    r = rcp_txn_exec(t);
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 1, "EXEC: type %d err %d \"%s\"",
                  r->type, r->err, r->str ? r->str : "");
    rcp_reply_free(r);
    rcp_txn_free(t);
    get_goes_to_new_owner(cl, n);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

START_TEST(watch_moved_patches_map)
{
    sim_node *n[2];
    rcp_cluster *cl = open_stale(n);
    unsigned s = rcp_keyslot(KEY, 3);
    rcp_txn *t = rcp_txn_new(cl);
    const char *keys[] = {KEY};
    rcp_reply *r;
    sim_loadf(n[0], "expect WATCH " KEY "\nsend \"-MOVED %u 127.0.0.1:$P1\\r\\n\"\n", s);
    sim_loadf(n[1], "expect WATCH " KEY "\nsend \"+OK\\r\\n\"\n");
    ck_assert_ptr_nonnull(t);
    r = rcp_txn_watch(t, 1, keys, NULL);
    ck_assert_msg(r->type == RCP_REPLY_STATUS, "WATCH: type %d err %d \"%s\"", r->type, r->err,
                  r->str ? r->str : "");
    rcp_reply_free(r);
    rcp_txn_free(t); /* unwatched: the connection closes */
    get_goes_to_new_owner(cl, n);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

static void no_messages(const rcp_pubsub_msg *m, void *data)
{
    (void)m;
    (void)data;
}

/* A subscriber's SSUBSCRIBE answered with MOVED: the subscription goes to
 * the new owner, and the MOVED is in the shared map for the next GET. */
START_TEST(subscriber_moved_patches_map)
{
    sim_node *n[2];
    rcp_cluster *cl = open_stale(n);
    unsigned s = rcp_keyslot(KEY, 3);
    rcp_pubsub_options po;
    rcp_pubsub *ps = NULL;
    char err[256] = "";
    /* "{foo}ch" hashes as "foo": the key's slot. */
    sim_loadf(n[0], "expect SSUBSCRIBE {foo}ch\nsend \"-MOVED %u 127.0.0.1:$P1\\r\\n\"\n", s);
    sim_loadf(n[1], "expect SSUBSCRIBE {foo}ch\n"
                    "send \"*3\\r\\n$10\\r\\nssubscribe\\r\\n$7\\r\\n{foo}ch\\r\\n:1\\r\\n\"\n");
    rcp_pubsub_options_init(&po);
    po.msg_cb = no_messages;
    ck_assert_msg(rcp_pubsub_open(cl, &po, &ps, err, sizeof err) == RCP_OK, "%s", err);
    ck_assert_int_eq(rcp_pubsub_ssubscribe(ps, "{foo}ch", 7), RCP_OK);
    get_goes_to_new_owner(cl, n);
    rcp_pubsub_close(ps);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

typedef struct got {
    pthread_mutex_t mu;
    int n;
    char last[64];
} got;

static void count_messages(const rcp_pubsub_msg *m, void *data)
{
    got *g = data;
    pthread_mutex_lock(&g->mu);
    g->n++;
    snprintf(g->last, sizeof g->last, "%.*s", (int)m->message_len, m->message);
    pthread_mutex_unlock(&g->mu);
}

/* A subscriber's connection (lib's push connection): the confirmation of
 * an SSUBSCRIBE and an unasked message arrive in order; the node
 * drops the connection; lib reconnects it and the subscriber subscribes
 * again by itself; a message after that arrives too. */
START_TEST(subscriber_reconnects_and_resubscribes)
{
    sim_node *n[2];
    rcp_cluster *cl = open_stale(n);
    rcp_pubsub_options po;
    rcp_pubsub *ps = NULL;
    got g = {PTHREAD_MUTEX_INITIALIZER, 0, ""};
    char err[256] = "";
    uint64_t until;
    static const char confirm[] =
        "send \"*3\\r\\n$10\\r\\nssubscribe\\r\\n$7\\r\\n{foo}ch\\r\\n:1\\r\\n\"\n";
    static const char msg1[] = "send \"*3\\r\\n$8\\r\\nsmessage\\r\\n$7\\r\\n{foo}ch\\r\\n"
                               "$3\\r\\none\\r\\n\"\n";
    static const char msg2[] = "send \"*3\\r\\n$8\\r\\nsmessage\\r\\n$7\\r\\n{foo}ch\\r\\n"
                               "$3\\r\\ntwo\\r\\n\"\n";
    sim_loadf(n[0], "expect SSUBSCRIBE {foo}ch\n%s%sclose\nexpect SSUBSCRIBE {foo}ch\n%s%s", confirm,
              msg1, confirm, msg2);
    rcp_pubsub_options_init(&po);
    po.msg_cb = count_messages;
    po.msg_data = &g;
    ck_assert_msg(rcp_pubsub_open(cl, &po, &ps, err, sizeof err) == RCP_OK, "%s", err);
    ck_assert_int_eq(rcp_pubsub_ssubscribe(ps, "{foo}ch", 7), RCP_OK);
    sim_assert_done(n[0], rcptest_scale(5000));
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(3000) * 1000000ull;
    for (;;) {
        int k;
        pthread_mutex_lock(&g.mu);
        k = g.n;
        pthread_mutex_unlock(&g.mu);
        if (k >= 2 || rcptest_now_ns() > until)
            break;
        rcptest_sleep_ms(5);
    }
    ck_assert_int_eq(g.n, 2);
    ck_assert_str_eq(g.last, "two");
    ck_assert_uint_eq(sim_count(n[0], "SSUBSCRIBE {foo}ch"), 2);
    ck_assert_int_ge(sim_conns(n[0]), 2);
    rcp_pubsub_close(ps);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

/* A WATCH whose connection the server drops: the transaction is not run
 * (NOT_SENT: watch again), and freeing it returns (its connection, which
 * never reconnects, is closed although its session already ended). */
static atomic_int lost_events;

static void count_lost(const rcp_event *ev, void *data)
{
    (void)data;
    if (ev->type == RCP_EVENT_DISCONNECTED)
        atomic_fetch_add(&lost_events, 1);
}

START_TEST(watch_connection_lost)
{
    sim_node *n[2];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    uint64_t until;
    rcp_txn *t;
    const char *keys[] = {KEY};
    rcp_reply *r;
    ck_assert_int_eq(sim_start(n, 2), 0);
    for (int i = 0; i < 2; i++)
        sim_loadf(n[i], "%son CLUSTER SLOTS => slots 0-16383=$P0\n", sim_prelude);
    sim_cluster_options(&o, &no, sim_addr(n[0], seeds, sizeof seeds));
    atomic_store(&lost_events, 0);
    o.event_cb = count_lost;
    cl = sim_open(&o);
    t = rcp_txn_new(cl);
    sim_loadf(n[0], "expect WATCH " KEY "\nsend \"+OK\\r\\n\"\nclose\n");
    ck_assert_ptr_nonnull(t);
    r = rcp_txn_watch(t, 1, keys, NULL);
    ck_assert_int_eq(r->type, RCP_REPLY_STATUS);
    rcp_reply_free(r);
    sim_assert_done(n[0], rcptest_scale(5000));
    /* The client must have seen the close before EXEC goes out; if EXEC
     * met the closing socket it would honestly be "written, outcome
     * unknown" (RCP_ERR_IO), which is not what this test is about. */
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(2000) * 1000000ull;
    while (atomic_load(&lost_events) == 0 && rcptest_now_ns() < until)
        rcptest_sleep_ms(2);
    /* Heard although the WATCH's caller had the socket (fast path) when
     * the close came with its reply: the loop reads the hang-up once the
     * caller hands the socket back. */
    ck_assert_int_eq(atomic_load(&lost_events), 1);
    ck_assert_int_eq(rcp_txn_add(t, "SET %s v", KEY), RCP_OK);
    r = rcp_txn_exec(t);
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_NOT_SENT, "EXEC: %d %d %s",
                  r->type, r->err, r->str ? r->str : "");
    rcp_reply_free(r);
    rcp_txn_free(t);
    ck_assert_uint_eq(sim_count(n[0], "MULTI"), 0);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

/* The same rules give a blocking command the retry-later treatment a
 * plain request gets: TRYAGAIN twice, then the value. */
START_TEST(blocking_command_tryagain_retried)
{
    sim_node *n[2];
    rcp_cluster *cl = open_stale(n);
    rcp_cluster_stats st;
    rcp_reply *r;
    sim_loadf(n[0], "expect BLPOP " KEY " 1\nsend \"-TRYAGAIN Multiple keys request during "
                    "rehashing of slot\\r\\n\"\n"
                    "expect BLPOP " KEY " 1\nsend \"-TRYAGAIN again\\r\\n\"\n"
                    "expect BLPOP " KEY " 1\nsend \"*2\\r\\n$3\\r\\nfoo\\r\\n$3\\r\\nbar\\r\\n\"\n");
    r = rcp_cluster_command(cl, "BLPOP %s 1", KEY);
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 2, "BLPOP: type %d err %d \"%s\"",
                  r->type, r->err, r->str ? r->str : "");
    rcp_reply_free(r);
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    ck_assert_uint_eq(st.retries_tryagain, 2);
    sim_assert_done(n[0], rcptest_scale(5000));
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("sharedmap");
    RCPTEST_ADD(tc, blocking_command_moved_patches_map, transaction_moved_patches_map,
                watch_connection_lost, subscriber_moved_patches_map,
                subscriber_reconnects_and_resubscribes,
                watch_moved_patches_map, blocking_command_tryagain_retried);
    return sim_run("sim-sharedmap", tc);
}
