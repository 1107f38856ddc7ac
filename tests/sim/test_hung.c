/* test_hung.c: a node that accepts connections and reads requests but
 * never answers. Requests to it fail at their deadline (RCP_ERR_TIMEOUT),
 * the timeouts make the client look at the topology again (a forced
 * refresh), and requests to the other node go on being answered while the
 * hung node's are still waiting. A full queue with RCP_QUEUE_FAIL is
 * refused at once, and a sync call's own deadline is honoured. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define HUNG_KEY "bar" /* slot 5061: node 0 */
#define LIVE_KEY "foo" /* slot 12182: node 1 */
#define WAITING 10
#define LIVE 20

/* Two fake masters, each serving half the slots, and cluster options
 * seeded with the first (a0 holds the seed's address). */
static void start_two(sim_node **n, rcp_cluster_options *o, rcp_conn_options *no, char *a0,
                      size_t a0len)
{
    ck_assert_int_eq(sim_start(n, 2), 0);
    for (int i = 0; i < 2; i++)
        sim_loadf(n[i], "%son CLUSTER SLOTS => slots 0-8191=$P0 8192-16383=$P1\n", sim_prelude);
    sim_cluster_options(o, no, sim_addr(n[0], a0, a0len));
}

START_TEST(hung_node)
{
    sim_node *n[2];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    sim_fut quick, slow[WAITING];
    char a0[64];
    int done_early = 0;

    ck_assert_int_eq(sim_start(n, 2), 0);
    for (int i = 0; i < 2; i++)
        sim_loadf(n[i], "%son CLUSTER SLOTS => slots 0-8191=$P0 8192-16383=$P1\n"
                        "on GET ** => send \"$4\\r\\nlive\\r\\n\"\n",
                  sim_prelude);
    sim_cluster_options(&o, &no, sim_addr(n[0], a0, sizeof a0));
    cl = sim_open(&o);
    sim_loadf(n[0], "on ** => hang\n");
    ck_assert_int_eq(sim_wait(n[0], rcptest_scale(2000)), 0);

    /* A short deadline fires. */
    sim_fut_init(&quick, rcptest_scale(200));
    ck_assert_int_eq(rcp_cluster_send(cl, &quick.f, "GET %s", HUNG_KEY), RCP_OK);
    ck_assert_int_eq(sim_fut_wait(&quick, rcptest_scale(5000)), 0);
    ck_assert_int_eq(quick.err, RCP_ERR_TIMEOUT);
    ck_assert_uint_ge(sim_count(n[0], "GET " HUNG_KEY), 1);

    /* The timeout counts as node trouble: a forced refresh. */
    ck_assert_uint_ge(sim_wait_stat(cl, offsetof(rcp_cluster_stats, refreshes_forced), 1,
                                    rcptest_scale(3000)),
                      1);

    /* Requests stuck on the hung node do not hold up the live one. */
    for (int i = 0; i < WAITING; i++) {
        sim_fut_init(&slow[i], rcptest_scale(2000));
        ck_assert_int_eq(rcp_cluster_send(cl, &slow[i].f, "GET %s", HUNG_KEY), RCP_OK);
    }
    for (int i = 0; i < LIVE; i++) {
        rcp_reply *r = rcp_cluster_command(cl, "GET %s", LIVE_KEY);
        ck_assert_msg(r->type == RCP_REPLY_STRING && strcmp(r->str, "live") == 0, "live node: %d %s",
                      r->err, r->str ? r->str : "");
        rcp_reply_free(r);
    }
    for (int i = 0; i < WAITING; i++) {
        pthread_mutex_lock(&slow[i].mu);
        done_early += slow[i].calls;
        pthread_mutex_unlock(&slow[i].mu);
    }
    ck_assert_msg(done_early == 0, "%d requests to the hung node were resolved before their deadline",
                  done_early);
    for (int i = 0; i < WAITING; i++) {
        ck_assert_int_eq(sim_fut_wait(&slow[i], rcptest_scale(10000)), 0);
        ck_assert_msg(slow[i].err == RCP_ERR_TIMEOUT || slow[i].err == RCP_ERR_IO, "err %d %s",
                      slow[i].err, slow[i].str);
    }
    ck_assert_uint_eq(sim_count(n[1], "GET " LIVE_KEY), LIVE);
    rcp_cluster_close(cl);
    for (int i = 0; i < WAITING; i++) {
        ck_assert_int_eq(slow[i].calls, 1);
        sim_fut_destroy(&slow[i]);
    }
    ck_assert_int_eq(quick.calls, 1);
    sim_fut_destroy(&quick);
    sim_free_all(n, 2);
}
END_TEST

/* A single connection to a node that never answers: the request's
 * deadline fires, then the I/O timeout drops the connection. */
START_TEST(hung_conn_io_timeout)
{
    sim_node *n = sim_new(NULL);
    rcp_conn_options o;
    rcp_conn *c = NULL;
    rcp_conn_stats st;
    rcp_reply *r;
    char err[512] = "";
    uint64_t until;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "on ** => hang\n");
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.request_timeout_ms = rcptest_scale(200);
    o.io_timeout_ms = rcptest_scale(400);
    o.reconnect_min_ms = 5;
    ck_assert_msg(rcp_conn_open(&o, &c, err, sizeof err) == RCP_OK, "%s", err);
    r = rcp_conn_command(c, "GET x");
    ck_assert_int_eq(r->err, RCP_ERR_TIMEOUT);
    rcp_reply_free(r);
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(5000) * 1000000ull;
    do {
        ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
        if (st.disconnects >= 1)
            break;
        rcptest_sleep_ms(5);
    } while (rcptest_now_ns() < until);
    ck_assert_uint_ge(st.disconnects, 1);
    ck_assert_uint_ge(st.timeouts, 1);
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(2000) * 1000000ull;
    while (sim_conns_closed_by_peer(n) < 1 && rcptest_now_ns() < until)
        rcptest_sleep_ms(2); /* the node sees the close a moment later */
    ck_assert_int_ge(sim_conns_closed_by_peer(n), 1);
    rcp_conn_close(c);
    sim_free(n);
}
END_TEST

/* The cluster send contract is the connection's: with RCP_QUEUE_FAIL, a
 * send that finds the node's queue full returns RCP_ERR_QUEUE_FULL and its
 * future is never called; the requests accepted before are resolved once
 * (at their deadline). A sync call's own deadline ends it well before the
 * handle's request timeout. */
START_TEST(queue_full_returned_and_call_deadline)
{
    sim_node *n[2];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    sim_fut held[4], refused;
    rcp_reply *r;
    char a0[64];
    uint64_t t0, took_ms;

    start_two(n, &o, &no, a0, sizeof a0);
    no.max_inflight = 4;
    no.queue_policy = RCP_QUEUE_FAIL;
    no.request_timeout_ms = rcptest_scale(3000);
    no.io_timeout_ms = 0;
    cl = sim_open(&o);
    sim_loadf(n[0], "on ** => hang\n");
    ck_assert_int_eq(sim_wait(n[0], rcptest_scale(2000)), 0);

    for (int i = 0; i < 4; i++) {
        sim_fut_init(&held[i], rcptest_scale(1000));
        ck_assert_int_eq(rcp_cluster_send(cl, &held[i].f, "GET %s", HUNG_KEY), RCP_OK);
    }
    sim_fut_init(&refused, rcptest_scale(1000));
    ck_assert_int_eq(rcp_cluster_send(cl, &refused.f, "GET %s", HUNG_KEY), RCP_ERR_QUEUE_FULL);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(sim_fut_wait(&held[i], rcptest_scale(10000)), 0);
        ck_assert_int_eq(held[i].err, RCP_ERR_TIMEOUT);
    }

    /* A sync call with 200 ms of its own, on the other node, hung now too
     * (the first one's queue stays full: its timed-out requests still
     * wait for replies that never come): a timeout long before the
     * handle's 3 s. */
    sim_loadf(n[1], "on ** => hang\n");
    ck_assert_int_eq(sim_wait(n[1], rcptest_scale(2000)), 0);
    t0 = rcptest_now_ns();
    r = rcp_cluster_command_timeout(cl, rcptest_scale(200), "GET %s", LIVE_KEY);
    took_ms = (rcptest_now_ns() - t0) / 1000000ull;
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_TIMEOUT, "err %d %s", r->err,
                  r->str ? r->str : "");
    rcp_reply_free(r);
    ck_assert_msg(took_ms < (uint64_t)rcptest_scale(3000) / 2,
                  "the call's 200 ms deadline was not used: it took %llu ms",
                  (unsigned long long)took_ms);
    {
        const char *argv[] = {"GET", LIVE_KEY};
        r = rcp_cluster_command_argv_timeout(cl, rcptest_scale(200), 2, argv, NULL);
        ck_assert_int_eq(r->err, RCP_ERR_TIMEOUT);
        rcp_reply_free(r);
    }
    rcp_cluster_close(cl);
    pthread_mutex_lock(&refused.mu);
    ck_assert_int_eq(refused.calls, 0);
    pthread_mutex_unlock(&refused.mu);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(held[i].calls, 1);
        sim_fut_destroy(&held[i]);
    }
    sim_fut_destroy(&refused);
    sim_free_all(n, 2);
}
END_TEST

/* Close returns promptly whatever the nodes do: a refresh stuck on nodes
 * that never answer CLUSTER SLOTS, requests stuck on a hung node, a
 * blocking command waiting: all are ended by close, not waited out. */
START_TEST(close_is_prompt_with_hung_nodes)
{
    sim_node *n[2];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    sim_fut quick, stuck[3];
    char a0[64];
    uint64_t t0, took_ms;

    start_two(n, &o, &no, a0, sizeof a0);
    no.request_timeout_ms = rcptest_scale(10000);
    no.connect_timeout_ms = rcptest_scale(3000); /* a refresh waits up to 4 s for an answer */
    cl = sim_open(&o);
    sim_loadf(n[1], "on CLUSTER SLOTS => hang\non PING => hang\n");
    sim_loadf(n[0], "on ** => hang\n");
    ck_assert_int_eq(sim_wait(n[0], rcptest_scale(2000)), 0);
    ck_assert_int_eq(sim_wait(n[1], rcptest_scale(2000)), 0);
    /* A timeout forces a refresh, which hangs on either node. */
    sim_fut_init(&quick, rcptest_scale(100));
    ck_assert_int_eq(rcp_cluster_send(cl, &quick.f, "GET %s", HUNG_KEY), RCP_OK);
    ck_assert_int_eq(sim_fut_wait(&quick, rcptest_scale(5000)), 0);
    ck_assert_int_eq(quick.err, RCP_ERR_TIMEOUT);
    {
        /* The bootstrap asked node 0; the forced refresh asks either. */
        uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(3000) * 1000000ull;
        size_t c = 0;
        while (rcptest_now_ns() < until &&
               (c = sim_count(n[0], "CLUSTER SLOTS") + sim_count(n[1], "CLUSTER SLOTS")) < 2)
            rcptest_sleep_ms(5);
        ck_assert_uint_ge(c, 2);
    }
    for (int i = 0; i < 3; i++) {
        sim_fut_init(&stuck[i], 0);
        ck_assert_int_eq(rcp_cluster_send(cl, &stuck[i].f, "GET %s", HUNG_KEY), RCP_OK);
    }
    t0 = rcptest_now_ns();
    rcp_cluster_close(cl);
    took_ms = (rcptest_now_ns() - t0) / 1000000ull;
    ck_assert_msg(took_ms < (uint64_t)rcptest_scale(1000), "close took %llu ms",
                  (unsigned long long)took_ms);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(stuck[i].calls, 1);
        ck_assert_msg(stuck[i].err == RCP_ERR_CLOSED || stuck[i].err == RCP_ERR_IO, "err %d %s",
                      stuck[i].err, stuck[i].str);
        sim_fut_destroy(&stuck[i]);
    }
    sim_fut_destroy(&quick);
    sim_free_all(n, 2);
}
END_TEST

/* Sends GET <key> with a 200 ms deadline on c and asserts it times out
 * at that deadline (well under 1 s), not when `what` ends. */
static void times_out_on_time(rcp_conn *c, sim_fut *f, const char *key, const char *what)
{
    uint64_t t0, took_ms;
    sim_fut_init(f, rcptest_scale(200));
    t0 = rcptest_now_ns();
    ck_assert_int_eq(rcp_conn_send(c, &f->f, "GET %s", key), RCP_OK);
    ck_assert_int_eq(sim_fut_wait(f, rcptest_scale(10000)), 0);
    took_ms = (rcptest_now_ns() - t0) / 1000000ull;
    ck_assert_int_eq(f->err, RCP_ERR_TIMEOUT);
    ck_assert_msg(took_ms < (uint64_t)rcptest_scale(1000),
                  "timed out after %llu ms: when %s, not at its own deadline",
                  (unsigned long long)took_ms, what);
}

/* A request queued behind a lone caller (a sync call doing its own I/O on
 * an idle connection) whose deadline comes before the lone caller's: it
 * times out at its own deadline, not when the lone caller gives up. */
static void *lone_caller(void *arg)
{
    rcp_reply *r = rcp_conn_command((rcp_conn *)arg, "GET lone");
    rcp_reply_free(r);
    return NULL;
}

START_TEST(short_deadline_behind_lone_caller)
{
    sim_node *n = sim_new(NULL);
    rcp_conn_options o;
    rcp_conn *c = NULL;
    pthread_t th;
    sim_fut f;
    char err[512] = "";
    ck_assert_ptr_nonnull(n);
    /* The node holds the lone caller's GET until the test lets it go. */
    sim_loadf(n, "expect GET lone\n");
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.request_timeout_ms = rcptest_scale(6000);
    o.io_timeout_ms = 0;
    ck_assert_msg(rcp_conn_open(&o, &c, err, sizeof err) == RCP_OK, "%s", err);
    ck_assert_int_eq(pthread_create(&th, NULL, lone_caller, c), 0);
    ck_assert_int_eq(sim_wait(n, rcptest_scale(2000)), 0);
    times_out_on_time(c, &f, "short", "the lone caller gave up");
    sim_loadf(n, "send \"$1\\r\\nx\\r\\n\"\nexpect GET short\nsend \"$1\\r\\ny\\r\\n\"\n");
    pthread_join(th, NULL);
    sim_assert_done(n, rcptest_scale(5000));
    rcp_conn_close(c);
    sim_fut_destroy(&f);
    sim_free(n);
}
END_TEST

/* A node that holds the connection's handshake (CLIENT SETNAME) with a
 * request queued behind it, which rang the loop: a request sent then with
 * a short deadline times out at that deadline, not when the handshake
 * ends (the loop, rung once for the queue, must be rung again for a
 * sooner deadline). */
START_TEST(short_deadline_behind_handshake)
{
    sim_node *n = sim_new(NULL);
    rcp_conn_options o;
    rcp_conn *c = NULL;
    sim_fut a, b;
    char err[512] = "";
    ck_assert_ptr_nonnull(n);
    /* The open's handshake is answered; the node then closes the
     * connection and holds the next one's. */
    sim_loadf(n, "on x1 CLIENT SETNAME ** => send \"+OK\\r\\n\"\naccept\n");
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.client_name = "t";
    o.connect_timeout_ms = rcptest_scale(6000);
    o.request_timeout_ms = rcptest_scale(6000);
    o.io_timeout_ms = 0;
    o.reconnect_min_ms = 5;
    o.reconnect_max_ms = 20;
    ck_assert_msg(rcp_conn_open(&o, &c, err, sizeof err) == RCP_OK, "%s", err);
    sim_loadf(n, "close\nexpect CLIENT SETNAME **\n");
    ck_assert_int_eq(sim_wait(n, rcptest_scale(2000)), 0); /* the handshake is held */
    sim_fut_init(&a, -1);
    ck_assert_int_eq(rcp_conn_send(c, &a.f, "GET a"), RCP_OK);
    rcptest_sleep_ms(50); /* the loop has seen it, and sleeps again */
    times_out_on_time(c, &b, "b", "the handshake ended");
    sim_loadf(n, "send \"+OK\\r\\n\"\nexpect GET a\nsend \"$1\\r\\nx\\r\\n\"\n");
    ck_assert_int_eq(sim_fut_wait(&a, rcptest_scale(10000)), 0);
    ck_assert_msg(a.type == RCP_REPLY_STRING && strcmp(a.str, "x") == 0, "a: %d %s", a.type,
                  a.str);
    sim_assert_done(n, rcptest_scale(5000));
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_free(n);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("hung");
    RCPTEST_ADD(tc, short_deadline_behind_handshake, short_deadline_behind_lone_caller, close_is_prompt_with_hung_nodes,
                queue_full_returned_and_call_deadline, hung_node, hung_conn_io_timeout);
    return sim_run("sim-hung", tc);
}
