/* test_timeout.c: a request's deadline on a healthy connection. A slow
 * reply (DEBUG SLEEP) resolves its future with RCP_ERR_TIMEOUT; the late
 * reply, when it comes, is discarded and counted, the connection is kept,
 * and the next requests get their own replies. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

static rcpt_server srv;
static rcp_conn *conn;

static void open_conn(int request_timeout_ms, int fast_path)
{
    rcp_conn_options o;

    rcpt_options(&o, &srv);
    o.request_timeout_ms = request_timeout_ms;
    o.fast_path = fast_path;
    conn = rcpt_conn_open_ok(&o);
}

struct treq {
    rcp_future f;
    atomic_int calls;
    atomic_int type;
    atomic_int err;
    atomic_llong at_ms;
};

static void treq_resolve(rcp_future *f, rcp_reply *reply)
{
    struct treq *q = f->data;

    atomic_store(&q->type, reply ? reply->type : -1);
    atomic_store(&q->err, reply ? reply->err : -1);
    atomic_store(&q->at_ms, (long long)rcptest_now_ms());
    atomic_fetch_add(&q->calls, 1);
}

/* Future timeout_ms overrides the connection's request_timeout_ms. */
START_TEST(test_future_timeout_async)
{
    struct treq q;
    rcp_conn_stats before;
    rcp_conn_stats after;
    const char *argv[3] = {"DEBUG", "SLEEP", "0.5"};
    int64_t t0;
    int64_t deadline;
    int i;

    memset(&q, 0, sizeof q);
    open_conn(10000, 1);
    rcpt_expect_echo(conn, "warm");
    ck_assert_int_eq(rcp_conn_get_stats(conn, &before), RCP_OK);

    q.f.resolve = treq_resolve;
    q.f.data = &q;
    q.f.timeout_ms = 100;
    t0 = rcptest_now_ms();
    ck_assert_int_eq(rcp_conn_send_argv(conn, &q.f, 3, argv, NULL), RCP_OK);
    deadline = t0 + 5000;
    while (atomic_load(&q.calls) == 0 && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(2);
    ck_assert_int_eq(atomic_load(&q.calls), 1);
    ck_assert_msg(atomic_load(&q.type) == RCP_REPLY_ERROR && atomic_load(&q.err) == RCP_ERR_TIMEOUT,
                  "DEBUG SLEEP 0.5 with a 100 ms deadline: type %d err %d (%s)",
                  atomic_load(&q.type), atomic_load(&q.err), rcp_strerror(atomic_load(&q.err)));
    /* it was resolved by the deadline, not by the server's reply */
    ck_assert_msg(atomic_load(&q.at_ms) - t0 < 500, "resolved after %lld ms",
                  (long long)(atomic_load(&q.at_ms) - t0));

    /* the next requests get their own replies (not the sleep's +OK) */
    for (i = 0; i < 20; i++) {
        char tok[32];
        snprintf(tok, sizeof tok, "next-%d", i);
        rcpt_expect_echo(conn, tok);
    }
    ck_assert_int_eq(atomic_load(&q.calls), 1);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &after), RCP_OK);
    ck_assert_uint_ge(after.late_replies - before.late_replies, 1);
    ck_assert_uint_ge(after.timeouts - before.timeouts, 1);
    ck_assert_uint_eq(after.disconnects, before.disconnects);
    ck_assert_uint_eq(after.reconnects, before.reconnects);
}
END_TEST

/* The sync API uses the connection's request_timeout_ms. */
static void sync_timeout(int fast_path)
{
    rcp_conn_stats before;
    rcp_conn_stats after;
    char d[256];
    rcp_reply *r;
    int64_t t0;
    int64_t dt;

    open_conn(100, fast_path);
    rcpt_expect_echo(conn, "warm");
    ck_assert_int_eq(rcp_conn_get_stats(conn, &before), RCP_OK);
    t0 = rcptest_now_ms();
    r = rcp_conn_command(conn, "DEBUG SLEEP %s", "0.5");
    dt = rcptest_now_ms() - t0;
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_TIMEOUT), "sync DEBUG SLEEP 0.5: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_msg(dt < 500, "sync call returned after %lld ms, deadline 100 ms", (long long)dt);

    /* the next one waits behind the sleeping server, beyond 100 ms: may
     * time out too; within a bounded number of tries one gets its own
     * reply, never the sleep's */
    {
        int64_t deadline = rcptest_now_ms() + 5000;
        int got = 0;
        int n = 0;
        while (!got) {
            char tok[32];
            snprintf(tok, sizeof tok, "after-%d", n++);
            r = rcp_conn_command(conn, "ECHO %s", tok);
            if (rcpt_is_cstring(r, tok))
                got = 1;
            else
                ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_TIMEOUT), "ECHO after timeout: %s",
                              rcptest_describe(r, d, sizeof d));
            rcp_reply_free(r);
            ck_assert_msg(got || rcptest_now_ms() < deadline, "no own reply within 5 s");
        }
    }
    rcpt_expect_echo(conn, "once-more");
    ck_assert_int_eq(rcp_conn_get_stats(conn, &after), RCP_OK);
    ck_assert_uint_ge(after.late_replies - before.late_replies, 1);
    ck_assert_uint_ge(after.timeouts - before.timeouts, 1);
    ck_assert_uint_eq(after.disconnects, before.disconnects);
}

START_TEST(test_sync_timeout_fast_path)
{
    sync_timeout(1);
}
END_TEST

START_TEST(test_sync_timeout_no_fast_path)
{
    sync_timeout(0);
}
END_TEST

/* timeout_ms < 0: no deadline even when the connection has a short one. */
START_TEST(test_future_no_deadline)
{
    struct treq q;
    const char *argv[3] = {"DEBUG", "SLEEP", "0.3"};
    int64_t deadline;

    memset(&q, 0, sizeof q);
    open_conn(50, 1);
    q.f.resolve = treq_resolve;
    q.f.data = &q;
    q.f.timeout_ms = -1;
    ck_assert_int_eq(rcp_conn_send_argv(conn, &q.f, 3, argv, NULL), RCP_OK);
    deadline = rcptest_now_ms() + 5000;
    while (atomic_load(&q.calls) == 0 && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(2);
    ck_assert_int_eq(atomic_load(&q.calls), 1);
    ck_assert_msg(atomic_load(&q.type) == RCP_REPLY_STATUS && atomic_load(&q.err) == RCP_OK,
                  "DEBUG SLEEP 0.3 with no deadline: type %d err %d (%s)", atomic_load(&q.type),
                  atomic_load(&q.err), rcp_strerror(atomic_load(&q.err)));
}
END_TEST

/* Many timed-out requests in a row, then fresh ones: replies never shift. */
START_TEST(test_many_timeouts_then_ordered)
{
    enum { N = 200 };
    struct treq *q = calloc(N, sizeof *q);
    const char *sleep_argv[3] = {"DEBUG", "SLEEP", "0.3"};
    struct treq sleeper;
    rcp_conn_stats st;
    int64_t deadline;
    int i;

    ck_assert_ptr_nonnull(q);
    memset(&sleeper, 0, sizeof sleeper);
    open_conn(10000, 1);
    sleeper.f.resolve = treq_resolve;
    sleeper.f.data = &sleeper;
    sleeper.f.timeout_ms = 50;
    ck_assert_int_eq(rcp_conn_send_argv(conn, &sleeper.f, 3, sleep_argv, NULL), RCP_OK);
    for (i = 0; i < N; i++) {
        const char *argv[2] = {"ECHO", "late"};
        q[i].f.resolve = treq_resolve;
        q[i].f.data = &q[i];
        q[i].f.timeout_ms = 50;
        ck_assert_int_eq(rcp_conn_send_argv(conn, &q[i].f, 2, argv, NULL), RCP_OK);
    }
    deadline = rcptest_now_ms() + 5000;
    for (i = 0; i < N; i++) {
        while (atomic_load(&q[i].calls) == 0 && rcptest_now_ms() < deadline)
            rcptest_sleep_ms(2);
        ck_assert_int_eq(atomic_load(&q[i].calls), 1);
        ck_assert_msg(atomic_load(&q[i].err) == RCP_ERR_TIMEOUT, "request %d: err %d (%s)", i,
                      atomic_load(&q[i].err), rcp_strerror(atomic_load(&q[i].err)));
    }
    for (i = 0; i < 50; i++) {
        char tok[32];
        snprintf(tok, sizeof tok, "fresh-%d", i);
        rcpt_expect_echo(conn, tok);
    }
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    ck_assert_uint_ge(st.late_replies, N + 1);
    ck_assert_uint_eq(st.disconnects, 0);
    free(q);
}
END_TEST

static void add_tests(TCase *tc)
{
    rcpt_fixture(tc, &srv, &conn, rcpt_debug_args);
    RCPTEST_ADD(tc, test_future_timeout_async, test_sync_timeout_fast_path,
                test_sync_timeout_no_fast_path, test_future_no_deadline,
                test_many_timeouts_then_ordered);
}

int main(void)
{
    return rcpt_main_case("timeout", "request-timeout", 60, add_tests);
}
