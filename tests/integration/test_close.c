/* test_close.c: rcp_conn_close with requests in flight. When close returns
 * every accepted future has been resolved exactly once, with its own reply
 * or RCP_ERR_CLOSED / IO / NOT_SENT; sync calls already in progress on other
 * threads return; close never hangs, even on a frozen or dead server. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "rcpipe.h"

static rcpt_server srv;
static rcp_conn *conn;

static atomic_int ev_closed;

static void on_event(const rcp_event *ev, void *data)
{
    (void)data;
    if (ev != NULL && ev->type == RCP_EVENT_CLOSED)
        atomic_fetch_add(&ev_closed, 1);
}

static void setup(void)
{
    atomic_store(&ev_closed, 0);
    rcpt_server_start_ok(&srv, rcpt_debug_args);
}

static void teardown(void)
{
    rcpt_teardown(&srv, &conn);
}

static void open_conn(unsigned max_inflight, int request_timeout_ms)
{
    rcp_conn_options o;

    rcpt_options(&o, &srv);
    o.max_inflight = max_inflight;
    o.request_timeout_ms = request_timeout_ms;
    o.reconnect_max_ms = 200;
    o.event_cb = on_event;
    conn = rcpt_conn_open_ok(&o);
}

struct creq {
    rcp_future f;
    char tok[24];
    int expect_ok_status; /* DEBUG SLEEP answers +OK */
    atomic_int calls;
    atomic_int outcome; /* 1 own reply, 2 allowed error, 3 wrong */
    atomic_int err;
};

static void creq_resolve(rcp_future *f, rcp_reply *reply)
{
    struct creq *q = f->data;
    int outcome;

    if (q->expect_ok_status ? rcpt_is_status(reply, "OK") : rcpt_is_cstring(reply, q->tok))
        outcome = 1;
    else if (reply != NULL && reply->type == RCP_REPLY_ERROR &&
             (reply->err == RCP_ERR_CLOSED || reply->err == RCP_ERR_IO ||
              reply->err == RCP_ERR_NOT_SENT))
        outcome = 2;
    else
        outcome = 3;
    atomic_store(&q->err, reply ? reply->err : -1);
    atomic_store(&q->outcome, outcome);
    atomic_fetch_add(&q->calls, 1);
}

/* Sends n requests (the first a DEBUG SLEEP when sleep_arg is set), all
 * accepted. */
static void send_all(struct creq *q, int n, const char *sleep_arg)
{
    int i;

    for (i = 0; i < n; i++) {
        const char *argv[3];
        int rc;

        q[i].f.resolve = creq_resolve;
        q[i].f.data = &q[i];
        if (i == 0 && sleep_arg != NULL) {
            argv[0] = "DEBUG";
            argv[1] = "SLEEP";
            argv[2] = sleep_arg;
            q[i].expect_ok_status = 1;
            rc = rcp_conn_send_argv(conn, &q[i].f, 3, argv, NULL);
        } else {
            snprintf(q[i].tok, sizeof q[i].tok, "c%d", i);
            argv[0] = "ECHO";
            argv[1] = q[i].tok;
            rc = rcp_conn_send_argv(conn, &q[i].f, 2, argv, NULL);
        }
        ck_assert_msg(rc == RCP_OK, "send %d: %s", i, rcp_strerror(rc));
    }
}

/* Right after close: each exactly once, no wrong reply. Returns how many
 * got an error. */
static long check_all_resolved(struct creq *q, int n)
{
    long errors = 0;
    int i;

    for (i = 0; i < n; i++) {
        int calls = atomic_load(&q[i].calls);
        int outcome = atomic_load(&q[i].outcome);

        ck_assert_msg(calls == 1, "request %d: resolved %d times by the time close returned", i,
                      calls);
        ck_assert_msg(outcome != 3, "request %d: wrong reply/error (err %d %s)", i,
                      atomic_load(&q[i].err), rcp_strerror(atomic_load(&q[i].err)));
        if (outcome == 2)
            errors++;
    }
    return errors;
}

START_TEST(test_close_with_slow_request_in_flight)
{
    enum { N = 3000 };
    struct creq *q = calloc(N, sizeof *q);
    long errors;

    ck_assert_ptr_nonnull(q);
    open_conn(4096, 30000);
    send_all(q, N, "1");
    rcp_conn_close(conn);
    conn = NULL;
    errors = check_all_resolved(q, N);
    /* the server sleeps 200 ms before answering anything: close came first */
    ck_assert_msg(errors >= 1, "no request was cut short by close");
    ck_assert_int_eq(atomic_load(&ev_closed), 1);
    free(q);
}
END_TEST

START_TEST(test_close_many_in_flight)
{
    enum { N = 12000 };
    struct creq *q = calloc(N, sizeof *q);

    ck_assert_ptr_nonnull(q);
    open_conn(16384, 30000);
    send_all(q, N, NULL);
    rcp_conn_close(conn);
    conn = NULL;
    check_all_resolved(q, N);
    free(q);
}
END_TEST

/* Nothing can be answered: close must not wait for the server. */
START_TEST(test_close_on_frozen_server)
{
    enum { N = 2000 };
    struct creq *q = calloc(N, sizeof *q);
    int64_t t0;
    long errors;

    ck_assert_ptr_nonnull(q);
    open_conn(4096, 60000);
    ck_assert_int_eq(rcpt_server_pause(&srv), 0);
    send_all(q, N, NULL);
    t0 = rcptest_now_ms();
    rcp_conn_close(conn);
    conn = NULL;
    ck_assert_msg(rcptest_now_ms() - t0 < 5000, "close on a frozen server took %lld ms",
                  (long long)(rcptest_now_ms() - t0));
    errors = check_all_resolved(q, N);
    ck_assert_int_eq(errors, N);
    ck_assert_int_eq(rcpt_server_resume(&srv), 0);
    free(q);
}
END_TEST

/* Server gone, handle reconnecting in the background: close still returns. */
START_TEST(test_close_while_reconnecting)
{
    enum { N = 500 };
    struct creq *q = calloc(N, sizeof *q);
    int64_t t0;
    int64_t deadline;
    rcp_conn_stats st;
    int i;

    ck_assert_ptr_nonnull(q);
    open_conn(4096, 60000);
    ck_assert_int_eq(rcpt_server_kill(&srv), 0);
    /* bounded wait until the loss is noticed */
    deadline = rcptest_now_ms() + 10000;
    do {
        rcp_reply *r = rcp_conn_command(conn, "PING");
        rcp_reply_free(r);
        ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
        if (st.disconnects >= 1)
            break;
        rcptest_sleep_ms(5);
    } while (rcptest_now_ms() < deadline);
    ck_assert_uint_ge(st.disconnects, 1);
    for (i = 0; i < N; i++) {
        const char *argv[2];
        int rc;

        snprintf(q[i].tok, sizeof q[i].tok, "r%d", i);
        argv[0] = "ECHO";
        argv[1] = q[i].tok;
        q[i].f.resolve = creq_resolve;
        q[i].f.data = &q[i];
        rc = rcp_conn_send_argv(conn, &q[i].f, 2, argv, NULL);
        if (rc != RCP_OK) {
            ck_assert_msg(rc == RCP_ERR_NOT_SENT, "send while reconnecting: %s", rcp_strerror(rc));
            q[i].f.resolve = NULL;
        }
    }
    t0 = rcptest_now_ms();
    rcp_conn_close(conn);
    conn = NULL;
    ck_assert_msg(rcptest_now_ms() - t0 < 5000, "close while reconnecting took %lld ms",
                  (long long)(rcptest_now_ms() - t0));
    for (i = 0; i < N; i++) {
        int calls = atomic_load(&q[i].calls);
        if (q[i].f.resolve == NULL) {
            ck_assert_int_eq(calls, 0);
            continue;
        }
        ck_assert_msg(calls == 1, "request %d resolved %d times", i, calls);
        ck_assert_int_eq(atomic_load(&q[i].outcome), 2);
    }
    free(q);
}
END_TEST

/* Sync callers blocked inside a call when close begins: they return. */
struct syncer {
    pthread_t th;
    int id;
    atomic_int done;
    int outcome; /* 1 own reply, 2 allowed error, 3 wrong */
    char what[256];
};

static void *syncer_main(void *arg)
{
    struct syncer *s = arg;
    char tok[32];
    rcp_reply *r;

    snprintf(tok, sizeof tok, "sync-%d", s->id);
    r = rcp_conn_command(conn, "ECHO %s", tok);
    if (rcpt_is_cstring(r, tok))
        s->outcome = 1;
    else if (r->type == RCP_REPLY_ERROR &&
             (r->err == RCP_ERR_CLOSED || r->err == RCP_ERR_IO || r->err == RCP_ERR_NOT_SENT))
        s->outcome = 2;
    else
        s->outcome = 3;
    rcptest_describe(r, s->what, sizeof s->what);
    rcp_reply_free(r);
    atomic_store(&s->done, 1);
    return NULL;
}

START_TEST(test_close_with_sync_callers_waiting)
{
    enum { T = 8 };
    struct syncer s[T];
    struct creq sleeper;
    rcp_conn_stats st;
    uint64_t base;
    int64_t deadline;
    int i;

    memset(s, 0, sizeof s);
    memset(&sleeper, 0, sizeof sleeper);
    open_conn(4096, 30000);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    base = st.requests;
    send_all(&sleeper, 1, "1");
    for (i = 0; i < T; i++) {
        s[i].id = i;
        ck_assert_int_eq(pthread_create(&s[i].th, NULL, syncer_main, &s[i]), 0);
    }
    /* every sync call has been accepted (is in progress) before close */
    deadline = rcptest_now_ms() + 10000;
    for (;;) {
        ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
        if (st.requests >= base + 1 + T)
            break;
        ck_assert_msg(rcptest_now_ms() < deadline, "sync calls not accepted: %llu of %d",
                      (unsigned long long)(st.requests - base), T + 1);
        rcptest_sleep_ms(1);
    }
    rcp_conn_close(conn);
    conn = NULL;
    for (i = 0; i < T; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 10;
        ck_assert_msg(pthread_timedjoin_np(s[i].th, NULL, &ts) == 0,
                      "sync caller %d still blocked 10 s after close", i);
        ck_assert_msg(s[i].outcome == 1 || s[i].outcome == 2, "sync caller %d: %s", i,
                      s[i].what);
    }
    ck_assert_int_eq(atomic_load(&sleeper.calls), 1);
    ck_assert_int_ne(atomic_load(&sleeper.outcome), 3);
}
END_TEST

START_TEST(test_close_idle)
{
    int64_t t0;

    open_conn(4096, 5000);
    t0 = rcptest_now_ms();
    rcp_conn_close(conn);
    conn = NULL;
    ck_assert_msg(rcptest_now_ms() - t0 < 3000, "closing an idle handle took %lld ms",
                  (long long)(rcptest_now_ms() - t0));
    ck_assert_int_eq(atomic_load(&ev_closed), 1);
    rcp_conn_close(NULL);
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_checked_fixture(tc, setup, teardown);
    RCPTEST_ADD(tc, test_close_with_slow_request_in_flight, test_close_many_in_flight,
                test_close_on_frozen_server, test_close_while_reconnecting,
                test_close_with_sync_callers_waiting, test_close_idle);
}

int main(void)
{
    return rcpt_main_case("close", "close-in-flight", 60, add_tests);
}
