/* test_freeze.c: a connected but hung server (SIGSTOP). Requests time out
 * instead of hanging; with RCP_QUEUE_FAIL a flood of sends is mostly
 * refused at once, so client memory stays bounded; once the server runs
 * again (SIGCONT) requests succeed and late replies never reach the wrong
 * caller. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define REQUEST_TIMEOUT_MS 200
#define IO_TIMEOUT_MS 1000
#define MAX_INFLIGHT 1000
#define FLOOD 100000

static rcpt_server srv;
static rcp_conn *conn;

static void open_conn(int policy)
{
    rcp_conn_options o;

    rcpt_options(&o, &srv);
    o.request_timeout_ms = REQUEST_TIMEOUT_MS;
    o.io_timeout_ms = IO_TIMEOUT_MS;
    o.queue_policy = policy;
    o.max_inflight = MAX_INFLIGHT;
    o.reconnect_min_ms = 10;
    o.reconnect_max_ms = 200;
    o.connect_timeout_ms = 500;
    conn = rcpt_conn_open_ok(&o);
}

struct freq {
    rcp_future f;
    atomic_int calls;
    atomic_int err;
    atomic_int type;
};

static atomic_long resolved;

static void freq_resolve(rcp_future *f, rcp_reply *reply)
{
    struct freq *q = f->data;

    atomic_store(&q->type, reply ? reply->type : -1);
    atomic_store(&q->err, reply ? reply->err : -1);
    atomic_fetch_add(&q->calls, 1);
    atomic_fetch_add(&resolved, 1);
}

static int frozen_failure(int err)
{
    return err == RCP_ERR_TIMEOUT || err == RCP_ERR_IO || err == RCP_ERR_NOT_SENT ||
           err == RCP_ERR_QUEUE_FULL;
}

/* After SIGCONT: bounded wait for a PING to succeed, then 200 ECHOs must
 * each get their own reply (late replies of timed-out requests discarded). */
static void check_recovers(void)
{
    int64_t deadline = rcptest_now_ms() + 10000;
    char d[256];
    int i;

    for (;;) {
        rcp_reply *r = rcp_conn_command(conn, "PING");
        int ok = rcpt_is_status(r, "PONG");

        ck_assert_msg(ok || (r->type == RCP_REPLY_ERROR && frozen_failure(r->err)),
                      "PING after SIGCONT: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        if (ok)
            break;
        ck_assert_msg(rcptest_now_ms() < deadline, "no success within 10 s of SIGCONT");
        rcptest_sleep_ms(10);
    }
    for (i = 0; i < 200; i++) {
        char tok[32];
        rcp_reply *r;

        snprintf(tok, sizeof tok, "after-%d", i);
        r = rcp_conn_command(conn, "ECHO %s", tok);
        ck_assert_msg(rcpt_is_cstring(r, tok), "ECHO %d after SIGCONT: %s", i,
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
}

START_TEST(test_freeze_flood_and_timeouts)
{
    struct freq *q = calloc(FLOOD, sizeof *q);
    long accepted = 0;
    long queue_full = 0;
    long not_sent = 0;
    long by_err[RCP_ERR__COUNT] = {0};
    int64_t t_end;
    int64_t deadline;
    rcp_conn_stats st;
    int i;

    ck_assert_ptr_nonnull(q);
    open_conn(RCP_QUEUE_FAIL);
    {
        rcp_reply *r = rcp_conn_command(conn, "PING");
        ck_assert(rcpt_is_status(r, "PONG"));
        rcp_reply_free(r);
    }
    ck_assert_int_eq(rcpt_server_pause(&srv), 0);
    atomic_store(&resolved, 0);

    /* the flood: at most max_inflight can be outstanding, the rest must be
     * refused at once rather than queued in client memory */
    for (i = 0; i < FLOOD; i++) {
        const char *argv[2] = {"ECHO", "x"};
        int rc;

        q[i].f.resolve = freq_resolve;
        q[i].f.data = &q[i];
        rc = rcp_conn_send_argv(conn, &q[i].f, 2, argv, NULL);
        if (rc == RCP_OK) {
            accepted++;
        } else {
            q[i].f.resolve = NULL; /* marks "refused" */
            if (rc == RCP_ERR_QUEUE_FULL)
                queue_full++;
            else if (rc == RCP_ERR_NOT_SENT)
                not_sent++;
            else
                ck_abort_msg("send %d while frozen: unexpected %d (%s)", i, rc, rcp_strerror(rc));
        }
    }
    t_end = rcptest_now_ms();
    fprintf(stderr, "freeze flood: accepted=%ld queue_full=%ld not_sent=%ld\n", accepted,
            queue_full, not_sent);
    ck_assert_msg(accepted >= 1, "nothing accepted");
    ck_assert_msg(queue_full >= 1, "no send was refused with QUEUE_FULL (accepted %ld)", accepted);
    ck_assert_msg(accepted <= FLOOD / 2,
                  "%ld of %d sends accepted while the server was frozen: client memory is not "
                  "bounded by max_inflight=%d",
                  accepted, FLOOD, MAX_INFLIGHT);

    /* every accepted request resolves while the server is still frozen:
     * with an error, since the server cannot have answered */
    deadline = rcptest_now_ms() + 15000;
    while (atomic_load(&resolved) < accepted && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(5);
    ck_assert_msg(atomic_load(&resolved) == accepted,
                  "only %ld of %ld accepted requests resolved %lld ms after the flood",
                  atomic_load(&resolved), accepted, (long long)(rcptest_now_ms() - t_end));
    for (i = 0; i < FLOOD; i++) {
        int calls = atomic_load(&q[i].calls);
        if (q[i].f.resolve == NULL) {
            ck_assert_msg(calls == 0, "refused send %d: callback called", i);
            continue;
        }
        ck_assert_msg(calls == 1, "request %d: callback called %d times", i, calls);
        ck_assert_msg(atomic_load(&q[i].type) == RCP_REPLY_ERROR &&
                          frozen_failure(atomic_load(&q[i].err)),
                      "request %d resolved with type %d err %d (%s) by a frozen server", i,
                      atomic_load(&q[i].type), atomic_load(&q[i].err),
                      rcp_strerror(atomic_load(&q[i].err)));
        by_err[atomic_load(&q[i].err)]++;
    }
    ck_assert_msg(by_err[RCP_ERR_TIMEOUT] >= accepted / 2,
                  "only %ld of %ld accepted requests timed out (IO %ld, NOT_SENT %ld)",
                  by_err[RCP_ERR_TIMEOUT], accepted, by_err[RCP_ERR_IO], by_err[RCP_ERR_NOT_SENT]);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    ck_assert_uint_ge(st.timeouts, (uint64_t)by_err[RCP_ERR_TIMEOUT]);

    /* sync calls while frozen, long enough to pass io_timeout_ms: each one
     * returns within its deadline plus slack. (They may be refused at once
     * with QUEUE_FULL: timed-out requests still hold their in-flight slots
     * until the server answers or the connection is dropped.) */
    {
        int64_t until = rcptest_now_ms() + IO_TIMEOUT_MS + 500;
        int calls = 0;
        while (rcptest_now_ms() < until || calls < 3) {
            if (calls > 0)
                rcptest_sleep_ms(5); /* pacing only: refusals come back at once */
            char d[256];
            int64_t t0 = rcptest_now_ms();
            rcp_reply *r = rcp_conn_command(conn, "GET %s", "k");
            int64_t dt = rcptest_now_ms() - t0;

            ck_assert_msg(r->type == RCP_REPLY_ERROR && frozen_failure(r->err),
                          "sync GET on a frozen server: %s", rcptest_describe(r, d, sizeof d));
            ck_assert_msg(dt < REQUEST_TIMEOUT_MS + 2000, "sync GET took %lld ms", (long long)dt);
            rcp_reply_free(r);
            calls++;
            ck_assert_int_lt(calls, 1000);
        }
    }

    ck_assert_int_eq(rcpt_server_resume(&srv), 0);
    check_recovers();
    free(q);
}
END_TEST

/* RCP_QUEUE_BLOCK: a sender that finds no room waits, but only up to its
 * deadline; nothing hangs. */
START_TEST(test_freeze_block_policy_bounded)
{
    enum { N = MAX_INFLIGHT + 20 };
    struct freq *q = calloc(N, sizeof *q);
    long accepted = 0;
    long refused_timeout = 0;
    int64_t t0;
    int64_t deadline;
    int i;

    ck_assert_ptr_nonnull(q);
    open_conn(RCP_QUEUE_BLOCK);
    ck_assert_int_eq(rcpt_server_pause(&srv), 0);
    atomic_store(&resolved, 0);
    t0 = rcptest_now_ms();
    for (i = 0; i < N; i++) {
        const char *argv[2] = {"ECHO", "y"};
        int64_t s0 = rcptest_now_ms();
        int rc;

        q[i].f.resolve = freq_resolve;
        q[i].f.data = &q[i];
        rc = rcp_conn_send_argv(conn, &q[i].f, 2, argv, NULL);
        ck_assert_msg(rcptest_now_ms() - s0 < REQUEST_TIMEOUT_MS + 2000, "send %d blocked %lld ms",
                      i, (long long)(rcptest_now_ms() - s0));
        if (rc == RCP_OK) {
            accepted++;
        } else {
            q[i].f.resolve = NULL;
            ck_assert_msg(rc == RCP_ERR_TIMEOUT || rc == RCP_ERR_NOT_SENT ||
                              rc == RCP_ERR_QUEUE_FULL,
                          "send %d: %s", i, rcp_strerror(rc));
            if (rc == RCP_ERR_TIMEOUT)
                refused_timeout++;
        }
    }
    /* N sends with a 200 ms deadline each cannot take much longer than a
     * few deadlines when room frees up as requests time out */
    fprintf(stderr, "block policy: accepted=%ld refused(timeout)=%ld in %lld ms\n", accepted,
            refused_timeout, (long long)(rcptest_now_ms() - t0));
    deadline = rcptest_now_ms() + 15000;
    while (atomic_load(&resolved) < accepted && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(5);
    ck_assert_msg(atomic_load(&resolved) == accepted, "resolved %ld of %ld",
                  atomic_load(&resolved), accepted);
    for (i = 0; i < N; i++) {
        if (q[i].f.resolve == NULL) {
            ck_assert_int_eq(atomic_load(&q[i].calls), 0);
            continue;
        }
        ck_assert_int_eq(atomic_load(&q[i].calls), 1);
        ck_assert_msg(frozen_failure(atomic_load(&q[i].err)), "request %d: err %d", i,
                      atomic_load(&q[i].err));
    }
    ck_assert_int_eq(rcpt_server_resume(&srv), 0);
    check_recovers();
    free(q);
}
END_TEST

/* Many sync callers stuck on a frozen server: all return in bounded time. */
struct sworker {
    pthread_t th;
    long max_ms;
    int bad;
    int n;
};

static void *sworker_main(void *arg)
{
    struct sworker *w = arg;
    int i;

    for (i = 0; i < w->n; i++) {
        int64_t t0 = rcptest_now_ms();
        rcp_reply *r = rcp_conn_command(conn, "INCR %s", "frozen");
        long dt = (long)(rcptest_now_ms() - t0);

        if (dt > w->max_ms)
            w->max_ms = dt;
        if (!(r->type == RCP_REPLY_ERROR && frozen_failure(r->err)))
            w->bad++;
        rcp_reply_free(r);
    }
    return NULL;
}

START_TEST(test_freeze_sync_threads)
{
    struct sworker w[16];
    int i;

    open_conn(RCP_QUEUE_FAIL);
    ck_assert_int_eq(rcpt_server_pause(&srv), 0);
    memset(w, 0, sizeof w);
    for (i = 0; i < 16; i++) {
        w[i].n = 5;
        ck_assert_int_eq(pthread_create(&w[i].th, NULL, sworker_main, &w[i]), 0);
    }
    for (i = 0; i < 16; i++) {
        pthread_join(w[i].th, NULL);
        ck_assert_msg(w[i].bad == 0, "thread %d: %d non-error replies from a frozen server", i,
                      w[i].bad);
        ck_assert_msg(w[i].max_ms < REQUEST_TIMEOUT_MS + 2000, "thread %d: a call took %ld ms", i,
                      w[i].max_ms);
    }
    ck_assert_int_eq(rcpt_server_resume(&srv), 0);
    check_recovers();
    {
        /* no INCR was executed twice: each was either never run or run once;
         * none of them can have been acknowledged, so the count is at most
         * the number sent */
        char d[256];
        rcp_reply *r = rcp_conn_command(conn, "GET %s", "frozen");
        ck_assert_msg(rcptest_is_nil(r) ||
                          (r->type == RCP_REPLY_STRING && atoll(r->str) >= 0 && atoll(r->str) <= 80),
                      "frozen counter: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
}
END_TEST

/* Sync callers in full flow when the server stops: whoever is on the
 * socket then (a lone caller, or a caller handed the lead with others'
 * requests written behind its own) times out, and so do the callers
 * behind it; the late replies, read after SIGCONT, must never reach the
 * wrong caller. Each ECHO carries its thread and sequence number. */
struct eworker {
    pthread_t th;
    int id;
    atomic_int *stop;
    long ok, failed, bad;
    char first_bad[300];
};

static void *eworker_main(void *arg)
{
    struct eworker *w = arg;
    long j;

    for (j = 0; !atomic_load(w->stop); j++) {
        char tok[48], d[200];
        rcp_reply *r;

        snprintf(tok, sizeof tok, "t%d-%ld", w->id, j);
        r = rcp_conn_command(conn, "ECHO %s", tok);
        if (rcpt_is_cstring(r, tok)) {
            w->ok++;
        } else if (r->type == RCP_REPLY_ERROR && frozen_failure(r->err)) {
            w->failed++;
        } else if (w->bad++ == 0) {
            snprintf(w->first_bad, sizeof w->first_bad, "%s: %s", tok,
                     rcptest_describe(r, d, sizeof d));
        }
        rcp_reply_free(r);
    }
    return NULL;
}

START_TEST(test_freeze_sync_threads_in_flow)
{
    struct eworker w[16];
    atomic_int stop;
    rcp_conn_stats st;
    long ok = 0, failed = 0;
    int i;

    open_conn(RCP_QUEUE_BLOCK);
    atomic_store(&stop, 0);
    memset(w, 0, sizeof w);
    for (i = 0; i < 16; i++) {
        w[i].id = i;
        w[i].stop = &stop;
        ck_assert_int_eq(pthread_create(&w[i].th, NULL, eworker_main, &w[i]), 0);
    }
    rcptest_sleep_ms(300);
    ck_assert_int_eq(rcpt_server_pause(&srv), 0);
    rcptest_sleep_ms(REQUEST_TIMEOUT_MS * 2);
    ck_assert_int_eq(rcpt_server_resume(&srv), 0);
    rcptest_sleep_ms(300);
    atomic_store(&stop, 1);
    for (i = 0; i < 16; i++) {
        pthread_join(w[i].th, NULL);
        ck_assert_msg(w[i].bad == 0, "thread %d: %ld wrong replies; first: %s", i, w[i].bad,
                      w[i].first_bad);
        ok += w[i].ok;
        failed += w[i].failed;
    }
    ck_assert_msg(failed > 0, "no call failed while the server was stopped (%ld ok)", ok);
    ck_assert_msg(ok > 16, "only %ld calls succeeded around the freeze", ok);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    ck_assert_msg(st.leads > 0, "no caller was handed the lead (%llu replies)",
                  (unsigned long long)st.replies);
    check_recovers();
}
END_TEST

static void add_tests(TCase *tc)
{
    rcpt_fixture(tc, &srv, &conn, NULL);
    RCPTEST_ADD(tc, test_freeze_flood_and_timeouts, test_freeze_block_policy_bounded,
                test_freeze_sync_threads, test_freeze_sync_threads_in_flow);
}

int main(void)
{
    return rcpt_main_case("freeze", "sigstop", 90, add_tests);
}
