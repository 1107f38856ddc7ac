/* test_cancel.c: rcp_cluster_cancel against fake nodes (issue 14). A
 * cluster request waits in two places: on its node's connection, or on
 * the refresher's queue for a retry (after TRYAGAIN, or while its node
 * cannot be reached). Cancelled in the queue it is resolved at once with
 * RCP_ERR_CANCELLED and never sent again; cancelled once written (a node
 * that holds its answer) it is resolved at once too, the late answer is
 * dropped, and the next request on that connection gets its own answer.
 * Resolved already: TOO_LATE; NULL: INVALID. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "sim.h"

static char seeds[64];

static rcp_cluster *open_on(sim_node *seed)
{
    rcp_cluster_options o;
    rcp_conn_options no;
    sim_cluster_options(&o, &no, sim_addr(seed, seeds, sizeof seeds));
    o.max_retries = 30; /* the request keeps coming back to the queue */
    return sim_open(&o);
}

/* Resolved before the cancel returned, exactly once, as cancelled. */
static void assert_cancelled(sim_fut *sf)
{
    pthread_mutex_lock(&sf->mu);
    ck_assert_int_eq(sf->calls, 1);
    ck_assert_msg(sf->type == RCP_REPLY_ERROR && sf->err == RCP_ERR_CANCELLED, "got type %d err %d %s",
                  sf->type, sf->err, sf->str);
    pthread_mutex_unlock(&sf->mu);
}

/* Nothing more reaches the node: wait well past the backoff the next
 * attempt would have come after (a missing event cannot be awaited). */
static void assert_no_more(sim_node *n, const char *pattern, size_t seen)
{
    rcptest_sleep_ms(rcptest_scale(400));
    ck_assert_uint_eq(sim_count(n, pattern), seen);
}

/* _i 0: the node answers TRYAGAIN forever; 1: the slot's master is a node
 * nobody listens on (every attempt RCP_ERR_NOT_SENT). Either way the
 * request spends most of its life on the retry queue; cancelled there it
 * is UNSENT. A cancel that meets it between the queue and a resend
 * (TOO_LATE) still stops it: the test accepts that one outcome too, and
 * checks what must hold either way. */
START_TEST(cancel_in_retry_queue)
{
    sim_node *n[1];
    rcp_cluster *cl;
    sim_fut sf;
    size_t seen = 0;
    int res, dead = sim_dead_port();
    size_t stat = _i == 0 ? offsetof(rcp_cluster_stats, retries_tryagain)
                          : offsetof(rcp_cluster_stats, retries_not_sent);

    ck_assert_int_eq(sim_start(n, 1), 0);
    if (_i == 0)
        sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n"
                        "on GET ** => send \"-TRYAGAIN Multiple keys request during rehashing\\r\\n\"\n",
                  sim_prelude);
    else
        sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=%d\n", sim_prelude, dead);
    cl = open_on(n[0]);
    sim_fut_init(&sf, -1);
    ck_assert_int_eq(rcp_cluster_send(cl, &sf.f, "GET %s", "k"), RCP_OK);
    /* Three attempts refused: the next waits 40 ms on the queue, then 80...
     * A request that failed instead (an injected allocation failure in
     * the allocfail reruns) stops the wait at once. */
    {
        uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(5000) * 1000000ull;
        int calls;
        while (sim_wait_stat(cl, stat, 3, 5) < 3) {
            pthread_mutex_lock(&sf.mu);
            calls = sf.calls;
            pthread_mutex_unlock(&sf.mu);
            ck_assert_msg(!calls, "the request ended before three retries: %s \"%s\"",
                          rcp_err_name(sf.err), sf.str);
            ck_assert_msg(rcptest_now_ns() < until, "three retries not seen in time");
        }
    }
    if (_i == 0)
        seen = sim_count(n[0], "GET k");
    res = rcp_cluster_cancel(cl, &sf.f);
    ck_assert_msg(res == RCP_CANCEL_UNSENT || res == RCP_CANCEL_TOO_LATE, "cancel: %d", res);
    if (res == RCP_CANCEL_TOO_LATE)
        ck_assert_int_eq(sim_fut_wait(&sf, rcptest_scale(5000)), 0);
    assert_cancelled(&sf);
    ck_assert_int_eq(rcp_cluster_cancel(cl, &sf.f), RCP_CANCEL_TOO_LATE);
    if (_i == 0)
        assert_no_more(n[0], "GET k", seen);
    pthread_mutex_lock(&sf.mu);
    ck_assert_int_eq(sf.calls, 1);
    pthread_mutex_unlock(&sf.mu);
    rcp_cluster_close(cl);
    sim_fut_destroy(&sf);
    sim_free_all(n, 1);
}
END_TEST

/* Written to a node that holds its answer: WRITTEN, resolved at once; the
 * answer, when it comes, is dropped and the next request on the same
 * connection gets its own. */
START_TEST(cancel_written)
{
    sim_node *n[1];
    rcp_cluster *cl;
    sim_fut a, b;
    rcp_cluster_stats st;

    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n"
                    "expect GET a\nexpect GET b\nsend \"$5\\r\\nfor-a\\r\\n\" \"$5\\r\\nfor-b\\r\\n\"\n",
              sim_prelude);
    cl = open_on(n[0]);
    sim_fut_init(&a, -1);
    ck_assert_int_eq(rcp_cluster_send(cl, &a.f, "GET %s", "a"), RCP_OK);
    ck_assert_uint_eq(sim_wait_count(n[0], "GET a", 1, rcptest_scale(5000)), 1);
    ck_assert_int_eq(rcp_cluster_cancel(cl, &a.f), RCP_CANCEL_WRITTEN);
    assert_cancelled(&a);
    sim_fut_init(&b, -1);
    ck_assert_int_eq(rcp_cluster_send(cl, &b.f, "GET %s", "b"), RCP_OK);
    ck_assert_int_eq(sim_fut_wait(&b, rcptest_scale(5000)), 0);
    ck_assert_msg(b.type == RCP_REPLY_STRING && strcmp(b.str, "for-b") == 0, "b got %d %s", b.type,
                  b.str);
    sim_assert_done(n[0], rcptest_scale(3000));
    assert_cancelled(&a); /* not called again by its late answer */
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    rcp_cluster_close(cl);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_free_all(n, 1);
}
END_TEST

/* Resolved already: TOO_LATE, no second call. NULL: INVALID. A zeroed
 * future never sent: TOO_LATE (nothing to take back). */
START_TEST(cancel_too_late_and_invalid)
{
    sim_node *n[1];
    rcp_cluster *cl;
    sim_fut a, never;

    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\non GET ** => send \"$2\\r\\nok\\r\\n\"\n",
              sim_prelude);
    cl = open_on(n[0]);
    sim_fut_init(&a, -1);
    ck_assert_int_eq(rcp_cluster_send(cl, &a.f, "GET %s", "a"), RCP_OK);
    ck_assert_int_eq(sim_fut_wait(&a, rcptest_scale(5000)), 0);
    ck_assert_int_eq(rcp_cluster_cancel(cl, &a.f), RCP_CANCEL_TOO_LATE);
    ck_assert_int_eq(a.calls, 1);
    ck_assert_int_eq(rcp_cluster_cancel(NULL, &a.f), RCP_CANCEL_INVALID);
    ck_assert_int_eq(rcp_cluster_cancel(cl, NULL), RCP_CANCEL_INVALID);
    sim_fut_init(&never, -1);
    ck_assert_int_eq(rcp_cluster_cancel(cl, &never.f), RCP_CANCEL_TOO_LATE);
    ck_assert_int_eq(never.calls, 0);
    rcp_cluster_close(cl);
    sim_fut_destroy(&a);
    sim_fut_destroy(&never);
    sim_free_all(n, 1);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("cancel");
    tcase_add_loop_test(tc, cancel_in_retry_queue, 0, 2);
    RCPTEST_ADD(tc, cancel_written, cancel_too_late_and_invalid);
    return sim_run("sim-cancel", tc);
}
