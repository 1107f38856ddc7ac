/* test_cancel.c: rcp_conn_cancel against a real server (issue 14).
 *
 * To keep requests unwritten for as long as a test needs, the server is
 * stopped (SIGSTOP) and a request much larger than the socket buffers on
 * both sides (a 32 MiB SET) is sent first: its flush is taken alone, part
 * of it sits in the socket, the rest in the writer's buffer, and every
 * request sent after it waits in the pending queue until the server reads
 * again. Then: pending requests cancelled never run (an INCR counts
 * them); the half-written SET cancelled is WRITTEN, runs, and its late
 * reply is dropped without desynchronising the replies that follow; a
 * cancel from a callback on the I/O thread; cancels racing each other and
 * the replies from several threads, each future resolved exactly once. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define FILLER_BYTES (32u * 1024 * 1024)

static rcpt_server srv;
static rcp_conn *conn;

struct creq {
    rcp_future f;
    atomic_int calls;
    atomic_int err;     /* the reply's err (0 for a server reply) */
    atomic_int type;
    atomic_llong ival;  /* an integer reply's value */
    rcp_waitgroup *wg;
    /* cancel_from_callback: a future to cancel when this one resolves,
     * and what that cancel said */
    rcp_future *victim;
    atomic_int victim_result;
};

static void creq_resolve(rcp_future *f, rcp_reply *r)
{
    struct creq *q = f->data;
    atomic_store(&q->type, r->type);
    atomic_store(&q->err, r->type == RCP_REPLY_ERROR ? r->err : 0);
    if (r->type == RCP_REPLY_INTEGER)
        atomic_store(&q->ival, r->integer);
    if (q->victim)
        atomic_store(&q->victim_result, rcp_conn_cancel(conn, q->victim));
    atomic_fetch_add(&q->calls, 1);
    rcp_waitgroup_done(q->wg);
}

static void creq_init(struct creq *q, rcp_waitgroup *wg)
{
    memset(q, 0, sizeof *q);
    q->f.resolve = creq_resolve;
    q->f.data = q;
    q->f.timeout_ms = -1; /* the server is stopped on purpose */
    q->wg = wg;
    atomic_init(&q->victim_result, 99);
}

static void send_argv_ok(struct creq *q, int argc, const char **argv, const size_t *lens)
{
    rcp_waitgroup_add(q->wg, 1);
    ck_assert_int_eq(rcp_conn_send_argv(conn, &q->f, argc, argv, lens), RCP_OK);
}

static void send_incr(struct creq *q, const char *key)
{
    const char *argv[2] = {"INCR", key};
    send_argv_ok(q, 2, argv, NULL);
}

static void open_conn(void)
{
    rcp_conn_options o;
    rcpt_options(&o, &srv);
    o.request_timeout_ms = -1;
    o.io_timeout_ms = -1; /* the server is stopped for as long as a test wants */
    conn = rcpt_conn_open_ok(&o);
}

static long long get_int(const char *key)
{
    char d[256];
    long long v = -1;
    rcp_reply *r = rcp_conn_command(conn, "GET %s", key);
    ck_assert_msg(r->type == RCP_REPLY_NIL || rcp_reply_int(r, &v) == RCP_OK, "GET %s: %s", key,
                  rcptest_describe(r, d, sizeof d));
    if (r->type == RCP_REPLY_NIL)
        v = 0;
    rcp_reply_free(r);
    return v;
}

/* Wait until the client has written at least n bytes more than `since`
 * says (the server being stopped, they sit in its socket). */
static void wait_written(const rcp_conn_stats *since, uint64_t n)
{
    int64_t limit = rcptest_now_ms() + rcptest_scale(5000);
    rcp_conn_stats st;
    for (;;) {
        ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
        if (st.bytes_out - since->bytes_out >= n)
            return;
        ck_assert_msg(rcptest_now_ms() < limit, "%llu bytes not written after 5 s",
                      (unsigned long long)n);
        sched_yield();
    }
}

static char *filler;

/* Stop the server and send the 32 MiB SET that blocks the writer: every
 * request sent after it stays unwritten until the server is resumed. */
static void stall(struct creq *big)
{
    static const size_t lens[3] = {3, 6, FILLER_BYTES};
    const char *argv[3] = {"SET", "filler", NULL};
    rcp_conn_stats st0;
    if (!filler) {
        filler = malloc(FILLER_BYTES);
        ck_assert_ptr_nonnull(filler);
        memset(filler, 'x', FILLER_BYTES);
    }
    argv[2] = filler;
    ck_assert_int_eq(rcpt_server_pause(&srv), 0);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st0), RCP_OK);
    send_argv_ok(big, 3, argv, lens);
    /* Its first bytes are out: the writer has taken it, alone (it is over
     * max_batch_bytes), and cannot finish it. */
    wait_written(&st0, 1);
}

static void resume_and_wait(rcp_waitgroup *wg)
{
    ck_assert_int_eq(rcpt_server_resume(&srv), 0);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, rcptest_scale(20000)), RCP_OK);
}

/* Queued behind the stalled writer: every other INCR cancelled is UNSENT,
 * resolved at once (before the call returns) with RCP_ERR_CANCELLED, and
 * never runs; the rest run. The half-written SET is WRITTEN: resolved at
 * once too, it runs all the same, and its late reply is dropped while the
 * replies after it still go to their own requests. */
START_TEST(test_unsent_never_run_written_runs)
{
    enum { N = 200 };
    struct creq big, *q = calloc(N, sizeof *q);
    rcp_waitgroup *wg = rcp_waitgroup_new();
    rcp_conn_stats before, after;
    int i, res;

    ck_assert_ptr_nonnull(q);
    open_conn();
    rcpt_expect_echo(conn, "warm");
    ck_assert_int_eq(rcp_conn_get_stats(conn, &before), RCP_OK);
    creq_init(&big, wg);
    stall(&big);
    for (i = 0; i < N; i++) {
        creq_init(&q[i], wg);
        send_incr(&q[i], "c1");
    }
    for (i = 0; i < N; i += 2) {
        res = rcp_conn_cancel(conn, &q[i].f);
        ck_assert_msg(res == RCP_CANCEL_UNSENT, "INCR %d behind the stalled writer: %d", i, res);
        ck_assert_int_eq(atomic_load(&q[i].calls), 1); /* on this thread, already */
        ck_assert_int_eq(atomic_load(&q[i].err), RCP_ERR_CANCELLED);
        /* a second cancel of the same future finds nothing */
        ck_assert_int_eq(rcp_conn_cancel(conn, &q[i].f), RCP_CANCEL_TOO_LATE);
    }
    res = rcp_conn_cancel(conn, &big.f);
    ck_assert_msg(res == RCP_CANCEL_WRITTEN, "the half-written SET: %d", res);
    ck_assert_int_eq(atomic_load(&big.calls), 1);
    ck_assert_int_eq(atomic_load(&big.err), RCP_ERR_CANCELLED);

    resume_and_wait(wg);
    for (i = 0; i < N; i++) {
        ck_assert_int_eq(atomic_load(&q[i].calls), 1);
        if (i % 2 == 0)
            continue;
        /* the replies stayed in step: the k-th INCR that ran saw k */
        ck_assert_msg(atomic_load(&q[i].type) == RCP_REPLY_INTEGER &&
                          atomic_load(&q[i].ival) == i / 2 + 1,
                      "INCR %d: type %d value %lld", i, atomic_load(&q[i].type),
                      (long long)atomic_load(&q[i].ival));
    }
    ck_assert_int_eq(atomic_load(&big.calls), 1);
    ck_assert_int_eq(get_int("c1"), N / 2);
    {
        /* WRITTEN: it may run, and here it did */
        rcp_reply *r = rcp_conn_command(conn, "STRLEN filler");
        ck_assert(rcptest_is_int(r, FILLER_BYTES));
        rcp_reply_free(r);
    }
    ck_assert_int_eq(rcp_conn_get_stats(conn, &after), RCP_OK);
    ck_assert_uint_eq(after.late_replies - before.late_replies, 1);
    ck_assert_uint_eq(after.disconnects, before.disconnects);
    rcp_waitgroup_free(wg);
    free(q);
}
END_TEST

/* A request written whole (its bytes left the client) is WRITTEN: it
 * runs, and the connection goes on with the right replies. */
START_TEST(test_written_whole)
{
    struct creq a;
    rcp_waitgroup *wg = rcp_waitgroup_new();
    rcp_conn_stats st0;
    const char *argv[2] = {"INCR", "c2"};
    int res;

    open_conn();
    rcpt_expect_echo(conn, "warm");
    ck_assert_int_eq(rcpt_server_pause(&srv), 0);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st0), RCP_OK);
    creq_init(&a, wg);
    send_argv_ok(&a, 2, argv, NULL);
    /* Its bytes are in the server's socket once bytes_out says so (the
     * server cannot answer meanwhile: stopped). */
    wait_written(&st0, 22 /* "*2\r\n$4\r\nINCR\r\n$2\r\nc2\r\n" */);
    res = rcp_conn_cancel(conn, &a.f);
    ck_assert_int_eq(res, RCP_CANCEL_WRITTEN);
    ck_assert_int_eq(atomic_load(&a.err), RCP_ERR_CANCELLED);
    resume_and_wait(wg);
    rcpt_expect_echo(conn, "after");
    ck_assert_int_eq(get_int("c2"), 1);
    ck_assert_int_eq(atomic_load(&a.calls), 1);
    rcp_waitgroup_free(wg);
}
END_TEST

/* Resolved already: TOO_LATE, and the callback is not called again.
 * Bad arguments and foreign futures: INVALID. */
START_TEST(test_too_late_and_invalid)
{
    struct creq a, never;
    rcp_waitgroup *wg = rcp_waitgroup_new();
    rcp_conn *other;
    rcp_conn_options o;
    const char *argv[1] = {"PING"};

    open_conn();
    creq_init(&a, wg);
    send_argv_ok(&a, 1, argv, NULL);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, rcptest_scale(5000)), RCP_OK);
    ck_assert_int_eq(rcp_conn_cancel(conn, &a.f), RCP_CANCEL_TOO_LATE);
    ck_assert_int_eq(atomic_load(&a.calls), 1);
    ck_assert_int_eq(atomic_load(&a.type), RCP_REPLY_STATUS);

    ck_assert_int_eq(rcp_conn_cancel(NULL, &a.f), RCP_CANCEL_INVALID);
    ck_assert_int_eq(rcp_conn_cancel(conn, NULL), RCP_CANCEL_INVALID);
    creq_init(&never, wg);
    ck_assert_int_eq(rcp_conn_cancel(conn, &never.f), RCP_CANCEL_INVALID);
    rcpt_options(&o, &srv);
    other = rcpt_conn_open_ok(&o);
    ck_assert_int_eq(rcp_conn_cancel(other, &a.f), RCP_CANCEL_INVALID);
    rcp_conn_close(other);
    ck_assert_int_eq(atomic_load(&never.calls), 0);
    rcp_waitgroup_free(wg);
}
END_TEST

/* A callback on the I/O thread cancels a request queued behind the
 * stalled writer: no deadlock, the victim resolved exactly once with
 * RCP_ERR_CANCELLED, nested in the callback. The callback is that of a
 * request whose deadline passes while the server is stopped, so it runs
 * while the victim is certainly still unwritten. */
START_TEST(test_cancel_from_callback)
{
    struct creq big, timer, victim, self;
    rcp_waitgroup *wg = rcp_waitgroup_new(), *twg = rcp_waitgroup_new();
    const char *ping[1] = {"PING"};

    open_conn();
    rcpt_expect_echo(conn, "warm");
    creq_init(&big, wg);
    stall(&big);
    creq_init(&timer, twg);
    timer.f.timeout_ms = 50;
    creq_init(&victim, wg);
    creq_init(&self, wg);
    timer.victim = &victim.f;
    send_argv_ok(&timer, 1, ping, NULL);
    send_incr(&victim, "c3");
    /* the callback of a cancelled one cancels itself: it is being
     * resolved, so that is too late */
    self.victim = &self.f;
    send_argv_ok(&self, 1, ping, NULL);
    ck_assert_int_eq(rcp_conn_cancel(conn, &self.f), RCP_CANCEL_UNSENT);
    ck_assert_int_eq(atomic_load(&self.victim_result), RCP_CANCEL_TOO_LATE);

    /* the timer's callback runs on the I/O thread while the server sleeps */
    ck_assert_int_eq(rcp_waitgroup_wait(twg, rcptest_scale(5000)), RCP_OK);
    ck_assert_int_eq(atomic_load(&timer.err), RCP_ERR_TIMEOUT);
    ck_assert_int_eq(atomic_load(&timer.victim_result), RCP_CANCEL_UNSENT);
    ck_assert_int_eq(atomic_load(&victim.calls), 1);
    ck_assert_int_eq(atomic_load(&victim.err), RCP_ERR_CANCELLED);
    resume_and_wait(wg);
    ck_assert_int_eq(get_int("c3"), 0);
    ck_assert_int_eq(atomic_load(&victim.calls), 1);
    rcp_waitgroup_free(wg);
    rcp_waitgroup_free(twg);
}
END_TEST

/* Several threads cancel the same futures while the server, resumed,
 * answers them: for each future at most one cancel wins (UNSENT or
 * WRITTEN), its callback runs exactly once, with RCP_ERR_CANCELLED iff a
 * cancel won; what ran is exactly what was not cancelled UNSENT. */
enum { RACE_N = 2000, RACE_THREADS = 4 };

struct race {
    struct creq *q;
    atomic_int *won; /* per future: cancels that won */
    atomic_int unsent, written;
    pthread_barrier_t go;
    int offset;
};

static struct race race;

static void *race_thread(void *arg)
{
    int t = (int)(intptr_t)arg, i;
    pthread_barrier_wait(&race.go);
    for (i = 0; i < RACE_N; i++) {
        /* each thread walks the futures from a different point */
        int k = (i + t * (RACE_N / RACE_THREADS)) % RACE_N;
        if (k % 3 == 2)
            continue; /* left alone: they run */
        switch (rcp_conn_cancel(conn, &race.q[k].f)) {
        case RCP_CANCEL_UNSENT:
            atomic_fetch_add(&race.won[k], 1);
            atomic_fetch_add(&race.unsent, 1);
            break;
        case RCP_CANCEL_WRITTEN:
            atomic_fetch_add(&race.won[k], 1);
            atomic_fetch_add(&race.written, 1);
            break;
        case RCP_CANCEL_TOO_LATE:
            break;
        default:
            abort();
        }
    }
    return NULL;
}

START_TEST(test_concurrent_cancels)
{
    struct creq big;
    rcp_waitgroup *wg = rcp_waitgroup_new();
    pthread_t th[RACE_THREADS];
    int i, unsent;

    open_conn();
    rcpt_expect_echo(conn, "warm");
    race.q = calloc(RACE_N, sizeof *race.q);
    race.won = calloc(RACE_N, sizeof *race.won);
    ck_assert(race.q && race.won);
    creq_init(&big, wg);
    stall(&big);
    for (i = 0; i < RACE_N; i++) {
        creq_init(&race.q[i], wg);
        send_incr(&race.q[i], "c4");
    }
    pthread_barrier_init(&race.go, NULL, RACE_THREADS + 1);
    for (i = 0; i < RACE_THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, race_thread, (void *)(intptr_t)i), 0);
    /* the server wakes while the threads cancel: replies race the cancels */
    pthread_barrier_wait(&race.go);
    ck_assert_int_eq(rcpt_server_resume(&srv), 0);
    for (i = 0; i < RACE_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&race.go);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, rcptest_scale(20000)), RCP_OK);

    for (i = 0; i < RACE_N; i++) {
        int won = atomic_load(&race.won[i]);
        ck_assert_int_eq(atomic_load(&race.q[i].calls), 1);
        ck_assert_int_le(won, 1);
        ck_assert_msg((atomic_load(&race.q[i].err) == RCP_ERR_CANCELLED) == (won == 1),
                      "INCR %d: %d cancels won, err %d", i, won, atomic_load(&race.q[i].err));
    }
    unsent = atomic_load(&race.unsent);
    ck_assert_int_gt(unsent, 0); /* the stall held them: some were certainly queued */
    /* UNSENT never ran; WRITTEN ones were written and ran, the connection
     * being kept */
    ck_assert_int_eq(get_int("c4"), RACE_N - unsent);
    rcpt_expect_echo(conn, "after");
    free(race.q);
    free(race.won);
    rcp_waitgroup_free(wg);
}
END_TEST

static void add_tests(TCase *tc)
{
    rcpt_fixture(tc, &srv, &conn, NULL);
    RCPTEST_ADD(tc, test_unsent_never_run_written_runs, test_written_whole,
                test_too_late_and_invalid, test_cancel_from_callback, test_concurrent_cancels);
}

int main(void)
{
    return rcpt_main_case("cancel", "cancel", 120, add_tests);
}
