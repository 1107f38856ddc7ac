/* test_reconnect.c: the server is killed (-9) under load from many threads
 * and restarted on the same port. Requests in flight or sent while it is
 * down fail with a client error (never a wrong reply, never a hang); the
 * handle reconnects by itself and serves requests again. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NTHREADS 16
#define REQUEST_TIMEOUT_MS 2000

static rcpt_server srv;
static rcp_conn *conn;

static atomic_int ev_connected;
static atomic_int ev_disconnected;
static atomic_int ev_connect_failed;
static atomic_int ev_bad;

static void on_event(const rcp_event *ev, void *data)
{
    int *magic = data;

    if (magic == NULL || *magic != 4242 || ev == NULL || ev->host == NULL ||
        ev->port != srv.port || ev->message == NULL)
        atomic_fetch_add(&ev_bad, 1);
    if (ev == NULL)
        return;
    switch (ev->type) {
    case RCP_EVENT_CONNECTED:
        if (ev->err != RCP_OK)
            atomic_fetch_add(&ev_bad, 1);
        atomic_fetch_add(&ev_connected, 1);
        break;
    case RCP_EVENT_DISCONNECTED:
        atomic_fetch_add(&ev_disconnected, 1);
        break;
    case RCP_EVENT_CONNECT_FAILED:
        if (ev->err == RCP_OK)
            atomic_fetch_add(&ev_bad, 1);
        atomic_fetch_add(&ev_connect_failed, 1);
        break;
    case RCP_EVENT_CLOSED:
        break;
    default:
        atomic_fetch_add(&ev_bad, 1);
        break;
    }
}

static int magic = 4242;

static void open_conn(int fast_path)
{
    rcp_conn_options o;

    rcpt_options(&o, &srv);
    o.request_timeout_ms = REQUEST_TIMEOUT_MS;
    o.reconnect_min_ms = 10;
    o.reconnect_max_ms = 200;
    o.connect_timeout_ms = 1000;
    o.fast_path = fast_path;
    o.event_cb = on_event;
    o.event_data = &magic;
    conn = rcpt_conn_open_ok(&o);
}

struct worker {
    pthread_t th;
    int id;
    atomic_long ok;
    atomic_long errs;
    atomic_long wrong;      /* a reply that is not this request's */
    atomic_long unexpected; /* an error code that should not happen here */
    atomic_long max_call_ms;
    atomic_long err_by_code[RCP_ERR__COUNT];
    char first_problem[512];
    atomic_int have_problem;
};

static struct worker workers[NTHREADS];
static atomic_int stop_flag;

static void note_problem(struct worker *w, const char *what, const rcp_reply *r)
{
    if (atomic_exchange(&w->have_problem, 1) == 0) {
        char d[256];
        snprintf(w->first_problem, sizeof w->first_problem, "thread %d: %s: %s", w->id, what,
                 rcptest_describe(r, d, sizeof d));
    }
}

static int allowed_failure(int err)
{
    return err == RCP_ERR_IO || err == RCP_ERR_NOT_SENT || err == RCP_ERR_TIMEOUT ||
           err == RCP_ERR_CLOSED;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    unsigned long seq = 0;

    while (!atomic_load(&stop_flag)) {
        char tok[64];
        int64_t t0;
        long dt;
        rcp_reply *r;

        /* ECHO of a unique token: a reply meant for anyone else (or for an
         * earlier request) can never match. */
        snprintf(tok, sizeof tok, "w%d-%lu", w->id, seq++);
        t0 = rcptest_now_ms();
        if (seq % 3 == 0) {
            const char *argv[2] = {"ECHO", tok};
            r = rcp_conn_command_argv(conn, 2, argv, NULL);
        } else {
            r = rcp_conn_command(conn, "ECHO %s", tok);
        }
        dt = (long)(rcptest_now_ms() - t0);
        if (dt > atomic_load(&w->max_call_ms))
            atomic_store(&w->max_call_ms, dt);
        if (rcpt_is_cstring(r, tok)) {
            atomic_fetch_add(&w->ok, 1);
        } else if (r != NULL && r->type == RCP_REPLY_ERROR && allowed_failure(r->err)) {
            atomic_fetch_add(&w->errs, 1);
            atomic_fetch_add(&w->err_by_code[r->err], 1);
        } else if (r != NULL && r->type == RCP_REPLY_ERROR && r->err != RCP_OK &&
                   r->err != RCP_ERR_SERVER) {
            atomic_fetch_add(&w->unexpected, 1);
            if (r->err > 0 && r->err < RCP_ERR__COUNT)
                atomic_fetch_add(&w->err_by_code[r->err], 1);
            note_problem(w, "unexpected error", r);
        } else {
            atomic_fetch_add(&w->wrong, 1);
            note_problem(w, "wrong reply", r);
        }
        if (r != NULL && r->type == RCP_REPLY_ERROR)
            rcptest_sleep_ms(1); /* pace: the server is down, errors come back fast */
        rcp_reply_free(r);
    }
    return NULL;
}

static long sum_ok(void)
{
    long s = 0;
    int i;

    for (i = 0; i < NTHREADS; i++)
        s += atomic_load(&workers[i].ok);
    return s;
}

static long sum_errs(void)
{
    long s = 0;
    int i;

    for (i = 0; i < NTHREADS; i++)
        s += atomic_load(&workers[i].errs) + atomic_load(&workers[i].unexpected);
    return s;
}

/* Bounded wait until every worker has at least `need` more successes than
 * in `base`. Returns 1 on success. */
static int wait_all_progress(const long *base, long need, int timeout_ms)
{
    int64_t deadline = rcptest_now_ms() + timeout_ms;

    for (;;) {
        int i;
        int all = 1;

        for (i = 0; i < NTHREADS; i++)
            if (atomic_load(&workers[i].ok) < base[i] + need)
                all = 0;
        if (all)
            return 1;
        if (rcptest_now_ms() > deadline)
            return 0;
        rcptest_sleep_ms(5);
    }
}

static void check_workers(void)
{
    long codes[RCP_ERR__COUNT] = {0};
    int i;
    int k;

    for (i = 0; i < NTHREADS; i++) {
        struct worker *w = &workers[i];
        ck_assert_msg(atomic_load(&w->wrong) == 0, "%ld wrong replies; first: %s",
                      atomic_load(&w->wrong), w->first_problem);
        ck_assert_msg(atomic_load(&w->unexpected) == 0, "%ld unexpected errors; first: %s",
                      atomic_load(&w->unexpected), w->first_problem);
        /* a sync call returns within its deadline plus slack: never hangs */
        ck_assert_msg(atomic_load(&w->max_call_ms) < REQUEST_TIMEOUT_MS + 3000,
                      "thread %d: a sync call took %ld ms", i, atomic_load(&w->max_call_ms));
        for (k = 0; k < RCP_ERR__COUNT; k++)
            codes[k] += atomic_load(&w->err_by_code[k]);
    }
    fprintf(stderr, "reconnect: ok=%ld errors: IO=%ld NOT_SENT=%ld TIMEOUT=%ld CLOSED=%ld\n",
            sum_ok(), codes[RCP_ERR_IO], codes[RCP_ERR_NOT_SENT], codes[RCP_ERR_TIMEOUT],
            codes[RCP_ERR_CLOSED]);
}

static void kill_restart_under_load(int fast_path, int cycles)
{
    long base[NTHREADS];
    rcp_conn_stats st;
    int i;
    int cycle;

    open_conn(fast_path);
    atomic_store(&stop_flag, 0);
    memset(workers, 0, sizeof workers);
    for (i = 0; i < NTHREADS; i++) {
        workers[i].id = i;
        ck_assert_int_eq(pthread_create(&workers[i].th, NULL, worker_main, &workers[i]), 0);
    }
    for (i = 0; i < NTHREADS; i++)
        base[i] = 0;
    ck_assert_msg(wait_all_progress(base, 20, 20000), "workers made no progress before the kill");

    for (cycle = 0; cycle < cycles; cycle++) {
        char err[2048];
        long errs_before = sum_errs();
        long ok_at_kill;
        int64_t deadline;
        int connected_before;

        connected_before = atomic_load(&ev_connected);
        ck_assert_int_eq(rcpt_server_kill(&srv), 0);
        ok_at_kill = sum_ok();
        /* while it is down, requests must fail (bounded wait) */
        deadline = rcptest_now_ms() + 10000;
        while (sum_errs() < errs_before + NTHREADS && rcptest_now_ms() < deadline)
            rcptest_sleep_ms(5);
        ck_assert_msg(sum_errs() >= errs_before + NTHREADS,
                      "cycle %d: only %ld errors while the server was down", cycle,
                      sum_errs() - errs_before);
        /* nothing can succeed with no server: at most the replies already
         * received when the kill happened are counted after it */
        ck_assert_msg(sum_ok() <= ok_at_kill + NTHREADS,
                      "cycle %d: %ld successes with no server", cycle, sum_ok() - ok_at_kill);

        ck_assert_msg(rcpt_server_restart(&srv, err, sizeof err) == 0, "%s", err);
        for (i = 0; i < NTHREADS; i++)
            base[i] = atomic_load(&workers[i].ok);
        ck_assert_msg(wait_all_progress(base, 10, 10000),
                      "cycle %d: requests did not succeed again within 10 s of the restart", cycle);
        ck_assert_msg(atomic_load(&ev_connected) > connected_before,
                      "cycle %d: no CONNECTED event after the restart", cycle);
    }

    atomic_store(&stop_flag, 1);
    for (i = 0; i < NTHREADS; i++)
        pthread_join(workers[i].th, NULL);
    check_workers();

    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    ck_assert_msg(st.reconnects >= (uint64_t)cycles, "stats.reconnects = %llu, want >= %d",
                  (unsigned long long)st.reconnects, cycles);
    ck_assert_msg(st.disconnects >= (uint64_t)cycles, "stats.disconnects = %llu, want >= %d",
                  (unsigned long long)st.disconnects, cycles);
    ck_assert_int_ge(atomic_load(&ev_disconnected), cycles);
    ck_assert_int_eq(atomic_load(&ev_bad), 0);

    /* and the handle is healthy: ordered replies again */
    for (i = 0; i < 50; i++) {
        char tok[32];
        char d[256];
        rcp_reply *r;

        snprintf(tok, sizeof tok, "final-%d", i);
        r = rcp_conn_command(conn, "ECHO %s", tok);
        ck_assert_msg(rcpt_is_cstring(r, tok), "after reconnect: %s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
}

START_TEST(test_kill_restart_under_load)
{
    kill_restart_under_load(1, 2);
}
END_TEST

START_TEST(test_kill_restart_under_load_no_fast_path)
{
    kill_restart_under_load(0, 1);
}
END_TEST

/* Async requests in flight when the server dies: each is resolved exactly
 * once, with its own reply or a client error. */
struct areq {
    rcp_future f;
    char tok[24];
    atomic_int calls;
    atomic_int outcome; /* 0 none, 1 own reply, 2 allowed error, 3 wrong */
};

static atomic_long a_resolved;

static void areq_resolve(rcp_future *f, rcp_reply *reply)
{
    struct areq *q = f->data;
    int outcome;

    atomic_fetch_add(&q->calls, 1);
    if (rcpt_is_cstring(reply, q->tok))
        outcome = 1;
    else if (reply != NULL && reply->type == RCP_REPLY_ERROR && allowed_failure(reply->err))
        outcome = 2;
    else
        outcome = 3;
    atomic_store(&q->outcome, outcome);
    atomic_fetch_add(&a_resolved, 1);
}

START_TEST(test_kill_with_async_in_flight)
{
    /* below max_inflight (4096): the sends must not wait for room */
    enum { N = 3000 };
    struct areq *q = calloc(N, sizeof *q);
    long accepted = 0;
    long counts[4] = {0};
    int64_t deadline;
    char err[2048];
    int i;

    ck_assert_ptr_nonnull(q);
    open_conn(1);
    atomic_store(&a_resolved, 0);
    for (i = 0; i < N; i++) {
        const char *argv[3];
        int rc;

        q[i].f.resolve = areq_resolve;
        q[i].f.data = &q[i];
        if (i == 0) {
            /* the server sleeps: nothing after this can be answered before
             * the kill, so every other request must fail */
            argv[0] = "DEBUG";
            argv[1] = "SLEEP";
            argv[2] = "5";
            snprintf(q[i].tok, sizeof q[i].tok, "(sleep)");
            rc = rcp_conn_send_argv(conn, &q[i].f, 3, argv, NULL);
        } else {
            snprintf(q[i].tok, sizeof q[i].tok, "a%d", i);
            argv[0] = "ECHO";
            argv[1] = q[i].tok;
            rc = rcp_conn_send_argv(conn, &q[i].f, 2, argv, NULL);
        }
        ck_assert_msg(rc == RCP_OK, "send %d refused with %s", i, rcp_strerror(rc));
        accepted++;
    }
    /* let the batch reach the server before killing it */
    deadline = rcptest_now_ms() + 5000;
    for (;;) {
        rcp_conn_stats st;
        ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
        if (st.commands_written >= (uint64_t)N || rcptest_now_ms() > deadline)
            break;
        rcptest_sleep_ms(1);
    }
    ck_assert_int_eq(rcpt_server_kill(&srv), 0);

    deadline = rcptest_now_ms() + 20000;
    while (atomic_load(&a_resolved) < accepted && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(2);
    ck_assert_msg(atomic_load(&a_resolved) == accepted, "resolved %ld of %ld accepted",
                  atomic_load(&a_resolved), accepted);
    for (i = 0; i < N; i++) {
        int calls = atomic_load(&q[i].calls);
        ck_assert_msg(calls == 1, "request %d: callback called %d times", i, calls);
        counts[atomic_load(&q[i].outcome)]++;
    }
    ck_assert_msg(counts[3] == 0, "%ld wrong replies", counts[3]);
    ck_assert_msg(counts[2] == N, "%ld of %d requests failed; the server slept until killed",
                  counts[2], (int)N);

    ck_assert_msg(rcpt_server_restart(&srv, err, sizeof err) == 0, "%s", err);
    deadline = rcptest_now_ms() + 10000;
    for (;;) {
        rcp_reply *r = rcp_conn_command(conn, "ECHO %s", "back");
        int ok = rcpt_is_cstring(r, "back");
        char d[256];

        ck_assert_msg(ok || (r->type == RCP_REPLY_ERROR && allowed_failure(r->err)),
                      "after restart: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        if (ok)
            break;
        ck_assert_msg(rcptest_now_ms() < deadline, "no success within 10 s of the restart");
        rcptest_sleep_ms(10);
    }
    free(q);
}
END_TEST

static void add_tests(TCase *tc)
{
    rcpt_fixture(tc, &srv, &conn, rcpt_debug_args);
    RCPTEST_ADD(tc, test_kill_restart_under_load, test_kill_restart_under_load_no_fast_path,
                test_kill_with_async_in_flight);
}

int main(void)
{
    return rcpt_main_case("reconnect", "kill-restart", 90, add_tests);
}
