/* test_retries.c: TRYAGAIN, CLUSTERDOWN, LOADING and MASTERDOWN answered a
 * few times, then success: the request is retried with a backoff that
 * grows (each gap at least the library's nominal 10, 20, 40 ms), on both
 * the sync and async paths; past max_retries the server's error is handed
 * over as is; -READONLY from a demoted master makes the client ask for a
 * new map and the write lands on the new master. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define KEY "foo"
#define RETRIES 3

static const char *kinds[] = {"TRYAGAIN Multiple keys request during rehashing of slot",
                              "CLUSTERDOWN The cluster is down",
                              "LOADING Redis is loading the dataset in memory",
                              "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."};

static char seeds[64];

static rcp_cluster *open_on(sim_node *seed, int max_retries)
{
    rcp_cluster_options o;
    rcp_conn_options no;
    sim_cluster_options(&o, &no, sim_addr(seed, seeds, sizeof seeds));
    if (max_retries >= 0)
        o.max_retries = max_retries;
    return sim_open(&o);
}

static uint64_t retries_of(const rcp_cluster_stats *st, int kind)
{
    switch (kind) {
    case 0: return st->retries_tryagain;
    case 1: return st->retries_clusterdown;
    case 2: return st->retries_loading;
    default: return st->retries_masterdown;
    }
}

/* _i: kind = _i % 4, async path when _i >= 4. */
START_TEST(retry_then_success)
{
    int kind = _i % 4, async = _i >= 4;
    sim_node *n[1];
    rcp_cluster *cl;
    rcp_cluster_stats st;
    sim_cmd c[RETRIES + 1];
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n", sim_prelude);
    for (int k = 0; k < RETRIES; k++)
        sim_loadf(n[0], "expect GET " KEY "\nsend \"-%s\\r\\n\"\n", kinds[kind]);
    sim_loadf(n[0], "expect GET " KEY "\nsend \"$2\\r\\nok\\r\\n\"\n");
    cl = open_on(n[0], -1);
    if (async) {
        sim_fut sf;
        sim_fut_init(&sf, 0);
        ck_assert_int_eq(rcp_cluster_send(cl, &sf.f, "GET %s", KEY), RCP_OK);
        ck_assert_int_eq(sim_fut_wait(&sf, rcptest_scale(5000)), 0);
        ck_assert_msg(sf.type == RCP_REPLY_STRING && strcmp(sf.str, "ok") == 0, "got %d %s", sf.type,
                      sf.str);
        ck_assert_int_eq(sf.calls, 1);
        sim_fut_destroy(&sf);
    } else {
        rcp_reply *r = rcp_cluster_command(cl, "GET %s", KEY);
        ck_assert_msg(r->type == RCP_REPLY_STRING && strcmp(r->str, "ok") == 0, "got %d %s", r->type,
                      r->str ? r->str : "");
        rcp_reply_free(r);
    }
    sim_assert_done(n[0], rcptest_scale(3000));
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    ck_assert_uint_eq(retries_of(&st, kind), RETRIES);

    /* The attempts as the node saw them: each gap at least the nominal
     * backoff (10 ms doubling; 10% slack for clock granularity), so the
     * gaps grow. An upper bound would be a benchmark: none. */
    for (size_t i = 0, k = 0; i < sim_log_len(n[0]) && k <= RETRIES; i++) {
        sim_cmd e;
        ck_assert_int_eq(sim_log_at(n[0], i, &e), 0);
        if (strcmp(e.line, "GET " KEY) == 0)
            c[k++] = e;
    }
    for (int k = 1; k <= RETRIES; k++) {
        uint64_t gap = c[k].t_ns - c[k - 1].t_ns, nominal = 10000000ull << (k - 1);
        ck_assert_msg(gap >= nominal * 9 / 10, "attempt %d came %llu us after the previous, want >= %llu",
                      k, (unsigned long long)(gap / 1000), (unsigned long long)(nominal / 1000));
    }
    rcp_cluster_close(cl);
    sim_free_all(n, 1);
}
END_TEST

/* More refusals than max_retries: the last server error, as it came. */
START_TEST(retries_exhausted)
{
    int kind = _i;
    sim_node *n[1];
    rcp_cluster *cl;
    rcp_reply *r;
    const int max = 2;
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\non GET ** => send \"-%s\\r\\n\"\n",
              sim_prelude, kinds[kind]);
    cl = open_on(n[0], max);
    r = rcp_cluster_command(cl, "GET %s", KEY);
    ck_assert_int_eq(r->type, RCP_REPLY_ERROR);
    ck_assert_int_eq(r->err, RCP_ERR_SERVER);
    ck_assert_str_eq(r->str, kinds[kind]);
    rcp_reply_free(r);
    ck_assert_uint_eq(sim_count(n[0], "GET " KEY), max + 1);
    rcp_cluster_close(cl);
    sim_free_all(n, 1);
}
END_TEST

/* Node 0 is the master, then says -READONLY (it was demoted) and, when
 * asked, names node 1 as the new master. The write must land on node 1:
 * only a refresh can tell the client so (there is no MOVED). */
START_TEST(readonly_triggers_refresh)
{
    sim_node *n[2];
    rcp_cluster *cl;
    rcp_cluster_stats st;
    rcp_reply *r;
    ck_assert_int_eq(sim_start(n, 2), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n"
                    "expect SET " KEY " bar\n"
                    "send \"-READONLY You can't write against a read only replica.\\r\\n\"\n"
                    "on CLUSTER SLOTS => slots 0-16383=$P1,$P0\n"
                    "on SET ** => send \"-READONLY You can't write against a read only replica.\\r\\n\"\n",
              sim_prelude);
    sim_loadf(n[1], "%son CLUSTER SLOTS => slots 0-16383=$P1,$P0\nexpect SET " KEY " bar\nsend \"+OK\\r\\n\"\n",
              sim_prelude);
    cl = open_on(n[0], -1);
    r = rcp_cluster_command(cl, "SET %s bar", KEY);
    ck_assert_msg(r->type == RCP_REPLY_STATUS && strcmp(r->str, "OK") == 0, "got %d %s", r->type,
                  r->str ? r->str : "");
    rcp_reply_free(r);
    sim_assert_done(n[0], rcptest_scale(3000));
    sim_assert_done(n[1], rcptest_scale(3000));
    ck_assert_uint_ge(sim_count(n[0], "CLUSTER SLOTS") + sim_count(n[1], "CLUSTER SLOTS"), 2);
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    ck_assert_uint_ge(st.retries_readonly, 1);
    ck_assert_uint_ge(st.refreshes_forced, 1);
    ck_assert_uint_ge(st.map_version, 2);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("retries");
    tcase_add_loop_test(tc, retry_then_success, 0, 8);
    tcase_add_loop_test(tc, retries_exhausted, 0, 4);
    RCPTEST_ADD(tc, readonly_triggers_refresh);
    return sim_run("sim-retries", tc);
}
