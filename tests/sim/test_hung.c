/* test_hung.c: a node that accepts connections and reads requests but
 * never answers. Requests to it fail at their deadline (RCP_ERR_TIMEOUT),
 * the timeouts make the client look at the topology again (a forced
 * refresh), and requests to the other node go on being answered while the
 * hung node's are still waiting. */
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

int main(void)
{
    TCase *tc = tcase_create("hung");
    RCPTEST_ADD(tc, hung_node, hung_conn_io_timeout);
    return sim_run("sim-hung", tc);
}
