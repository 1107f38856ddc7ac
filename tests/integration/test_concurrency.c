/* test_concurrency.c: many threads on ONE shared handle. Every caller must
 * get exactly its own reply (no reply handed to the wrong caller, none lost,
 * none duplicated), through the sync and the async API, with default caps
 * and with tiny batch/in-flight caps that force backpressure. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NTHREADS 64
#define NCOUNTERS 4

static rcpt_server srv;
static rcp_conn *conn;
static int cork; /* the next open_conn's option cork */

static void open_conn(unsigned max_batch_commands, unsigned max_inflight, unsigned batch_delay_us)
{
    rcp_conn_options o;

    rcpt_options(&o, &srv);
    /* Generous: a sanitized build on 2 busy cores is slow, and a timeout
     * here would be reported as a failure, not hidden. */
    o.request_timeout_ms = 30000;
    if (max_batch_commands)
        o.max_batch_commands = max_batch_commands;
    if (max_inflight)
        o.max_inflight = max_inflight;
    o.batch_delay_us = batch_delay_us;
    o.cork = cork;
    cork = 0;
    conn = rcpt_conn_open_ok(&o);
}

static int iterations(int normal)
{
    return rcptest_sanitized() ? normal / 2 : normal;
}

/* ---- sync ---------------------------------------------------------------- */

struct sync_worker {
    pthread_t th;
    int id;
    int iters;
    long long incr_sent[NCOUNTERS];
    int bad;
    char first_bad[512];
};

static void note_bad(struct sync_worker *w, const char *what, const rcp_reply *r)
{
    char d[256];

    if (w->bad++ == 0)
        snprintf(w->first_bad, sizeof w->first_bad, "thread %d: %s: %s", w->id, what,
                 rcptest_describe(r, d, sizeof d));
}

/* Set on the threads that make sync calls: an async callback must never
 * run on one (a sync caller on the socket resolves sync futures only). */
static _Thread_local int on_sync_worker;
static atomic_long a_on_sync_worker;

static void *sync_main(void *arg)
{
    struct sync_worker *w = arg;
    int j;

    on_sync_worker = 1;
    for (j = 0; j < w->iters; j++) {
        char key[48];
        char val[64];
        char ctr[16];
        const char *argv[3];
        size_t argvlen[3];
        rcp_reply *r;
        int c = (j + w->id) % NCOUNTERS;

        snprintf(key, sizeof key, "k_%d_%d", w->id, j);
        snprintf(val, sizeof val, "v_%d_%d_%s", w->id, j, (j & 1) ? "odd" : "even-longer-value");
        argv[0] = "SET";
        argv[1] = key;
        argv[2] = val;
        argvlen[0] = 3;
        argvlen[1] = strlen(key);
        argvlen[2] = strlen(val);
        r = rcp_conn_command_argv(conn, 3, argv, argvlen);
        if (!rcpt_is_status(r, "OK"))
            note_bad(w, "SET", r);
        rcp_reply_free(r);

        r = rcp_conn_command(conn, "GET %s", key);
        if (!rcpt_is_cstring(r, val))
            note_bad(w, "GET (expected own value)", r);
        rcp_reply_free(r);

        snprintf(ctr, sizeof ctr, "ctr_%d", c);
        r = rcp_conn_command(conn, "INCR %s", ctr);
        if (r->type != RCP_REPLY_INTEGER || r->err != RCP_OK || r->integer < 1)
            note_bad(w, "INCR", r);
        else
            w->incr_sent[c]++;
        rcp_reply_free(r);
    }
    return NULL;
}

/* Returns the connection's stats after the run. */
static rcp_conn_stats run_sync(int iters)
{
    struct sync_worker *w = calloc(NTHREADS, sizeof *w);
    long long expect[NCOUNTERS] = {0};
    rcp_conn_stats st;
    int i;
    int c;

    ck_assert_ptr_nonnull(w);
    for (i = 0; i < NTHREADS; i++) {
        w[i].id = i;
        w[i].iters = iters;
        ck_assert_int_eq(pthread_create(&w[i].th, NULL, sync_main, &w[i]), 0);
    }
    for (i = 0; i < NTHREADS; i++)
        pthread_join(w[i].th, NULL);
    for (i = 0; i < NTHREADS; i++) {
        ck_assert_msg(w[i].bad == 0, "%d bad replies; first: %s", w[i].bad, w[i].first_bad);
        for (c = 0; c < NCOUNTERS; c++)
            expect[c] += w[i].incr_sent[c];
    }
    for (c = 0; c < NCOUNTERS; c++) {
        char d[256];
        rcp_reply *r = rcp_conn_command(conn, "GET ctr_%d", c);
        char want[32];

        snprintf(want, sizeof want, "%lld", expect[c]);
        ck_assert_msg(rcpt_is_cstring(r, want), "counter %d: want %s, got %s", c, want,
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    /* every key a thread wrote is there, with its own value */
    {
        char d[256];
        rcp_reply *r = rcp_conn_command(conn, "DBSIZE");
        ck_assert_msg(rcptest_is_int(r, (long long)NTHREADS * iters + NCOUNTERS), "DBSIZE: %s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    ck_assert_uint_ge(st.requests, (uint64_t)NTHREADS * iters * 3);
    ck_assert_uint_ge(st.replies, (uint64_t)NTHREADS * iters * 3);
    ck_assert_uint_eq(st.disconnects, 0);
    ck_assert_uint_eq(st.timeouts, 0);
    ck_assert_uint_eq(st.late_replies, 0);
    free(w);
    return st;
}

START_TEST(test_sync_default_caps)
{
    rcp_conn_stats st;
    open_conn(0, 0, 0);
    st = run_sync(iterations(700));
    /* Leader/follower: callers that queue behind the one on the socket
     * are written and read for by a caller (the lone one, then one of
     * them handed the lead), not by the loop. 64 threads keep a queue
     * behind whoever is on the socket nearly all the time. */
    ck_assert_msg(st.leads > 0, "no caller was handed the lead");
    ck_assert_msg(st.caller_replies >= st.replies / 2,
                  "callers read %llu of %llu replies (leads %llu, from the loop %llu, loop "
                  "wakes %llu)",
                  (unsigned long long)st.caller_replies, (unsigned long long)st.replies,
                  (unsigned long long)st.leads, (unsigned long long)st.loop_leads,
                  (unsigned long long)st.loop_wakes);
}
END_TEST

/* The chain of leading callers breaks whenever the loop must take the
 * socket (here: an async request, whose callback runs on the loop
 * thread). With sync callers queueing all the time the connection is
 * never idle again, so the lone-caller path cannot restart the chain: the
 * loop must hand the socket back to one of them itself, or it would read
 * for every caller from then on, paying a wake per batch. */
static atomic_int lb_stop;
static atomic_long lb_calls;

static void *loop_back_main(void *arg)
{
    struct sync_worker *w = arg;
    char key[32];

    snprintf(key, sizeof key, "lb_%d", w->id);
    while (!atomic_load(&lb_stop)) {
        rcp_reply *r = rcp_conn_command(conn, "INCR %s", key);
        if (r->type != RCP_REPLY_INTEGER || r->err != RCP_OK || r->integer < 1)
            note_bad(w, "INCR", r);
        rcp_reply_free(r);
        atomic_fetch_add(&lb_calls, 1);
    }
    return NULL;
}

struct lb_async {
    rcp_future f; /* first: the callback gets &f */
    atomic_int done;
    int ok;
};

static void lb_async_resolve(rcp_future *f, rcp_reply *r)
{
    struct lb_async *a = (struct lb_async *)f;
    a->ok = rcpt_is_status(r, "PONG");
    atomic_store(&a->done, 1); /* last: the owner's stack frame may go */
}

/* Returns once `n` more sync calls were made (or after a minute: the
 * threads stopped making progress, which the checks after report). */
static void lb_wait_calls(long n)
{
    long until = atomic_load(&lb_calls) + n;
    int64_t deadline = rcptest_now_ms() + 60000;

    while (atomic_load(&lb_calls) < until && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(1);
}

START_TEST(test_sync_lead_comes_back_from_loop)
{
    enum { LB_THREADS = 16 };
    struct sync_worker w[LB_THREADS];
    rcp_conn_stats s0, s1;
    long n = iterations(20000);
    int round, i;

    open_conn(0, 0, 0);
    memset(w, 0, sizeof w);
    atomic_store(&lb_stop, 0);
    atomic_store(&lb_calls, 0);
    for (i = 0; i < LB_THREADS; i++) {
        w[i].id = i;
        ck_assert_int_eq(pthread_create(&w[i].th, NULL, loop_back_main, &w[i]), 0);
    }
    lb_wait_calls(1000);
    for (round = 0; round < 3; round++) {
        struct lb_async a;
        int64_t deadline = rcptest_now_ms() + 30000;

        memset(&a, 0, sizeof a);
        a.f.resolve = lb_async_resolve;
        ck_assert_int_eq(rcp_conn_send(conn, &a.f, "PING"), RCP_OK);
        while (!atomic_load(&a.done) && rcptest_now_ms() < deadline)
            rcptest_sleep_ms(1);
        ck_assert_msg(atomic_load(&a.done) && a.ok, "the async PING was not answered");
        ck_assert_int_eq(rcp_conn_get_stats(conn, &s0), RCP_OK);
        lb_wait_calls(n);
        ck_assert_int_eq(rcp_conn_get_stats(conn, &s1), RCP_OK);
        ck_assert_msg(s1.caller_replies - s0.caller_replies >= (s1.replies - s0.replies) / 2,
                      "round %d, after an async request: callers read %llu of %llu replies "
                      "(leads %llu, from the loop %llu, loop wakes %llu)",
                      round, (unsigned long long)(s1.caller_replies - s0.caller_replies),
                      (unsigned long long)(s1.replies - s0.replies),
                      (unsigned long long)(s1.leads - s0.leads),
                      (unsigned long long)(s1.loop_leads - s0.loop_leads),
                      (unsigned long long)(s1.loop_wakes - s0.loop_wakes));
    }
    atomic_store(&lb_stop, 1);
    for (i = 0; i < LB_THREADS; i++)
        pthread_join(w[i].th, NULL);
    for (i = 0; i < LB_THREADS; i++)
        ck_assert_msg(w[i].bad == 0, "%d bad replies; first: %s", w[i].bad, w[i].first_bad);
    ck_assert_int_eq(s1.timeouts, 0);
    ck_assert_int_eq(s1.disconnects, 0);
}
END_TEST

/* Tiny caps: most threads must wait for room (RCP_QUEUE_BLOCK), batches are
 * split; replies must still go to the right callers. */
START_TEST(test_sync_small_caps)
{
    open_conn(7, 24, 0);
    run_sync(iterations(200));
}
END_TEST

START_TEST(test_sync_batch_delay)
{
    open_conn(0, 0, 200);
    run_sync(iterations(100));
}
END_TEST

/* ---- async ------------------------------------------------------------- */

enum { EXP_OK, EXP_VALUE, EXP_INT };

struct req {
    rcp_future f; /* embedded: the library allocates nothing for us */
    int kind;
    int ctr;
    atomic_int resolved;
    char val[40];
    size_t vlen;
};

struct async_worker {
    pthread_t th;
    int id;
    int pairs;
    struct req *reqs; /* 3 per pair: SET, GET, INCR */
    int send_errors;
    int first_send_error;
    long long incr_sent[NCOUNTERS];
};

static atomic_long a_resolved;
static atomic_long a_good;
static atomic_long a_bad;
static atomic_long a_double;
static atomic_long a_incr_ok[NCOUNTERS];
static char a_first_bad[512];
static atomic_int a_first_bad_taken;

static void async_resolve(rcp_future *f, rcp_reply *reply)
{
    struct req *q = f->data;
    int ok;

    if (atomic_fetch_add(&q->resolved, 1) != 0)
        atomic_fetch_add(&a_double, 1);
    if (on_sync_worker)
        atomic_fetch_add(&a_on_sync_worker, 1);
    switch (q->kind) {
    case EXP_OK:
        ok = rcpt_is_status(reply, "OK");
        break;
    case EXP_VALUE:
        ok = rcpt_is_string(reply, q->val, q->vlen);
        break;
    default:
        ok = reply != NULL && reply->type == RCP_REPLY_INTEGER && reply->err == RCP_OK &&
             reply->integer >= 1;
        if (ok)
            atomic_fetch_add(&a_incr_ok[q->ctr], 1);
        break;
    }
    if (ok) {
        atomic_fetch_add(&a_good, 1);
    } else {
        atomic_fetch_add(&a_bad, 1);
        if (atomic_exchange(&a_first_bad_taken, 1) == 0) {
            char d[256];
            snprintf(a_first_bad, sizeof a_first_bad, "kind %d expected \"%s\": %s", q->kind,
                     q->val, rcptest_describe(reply, d, sizeof d));
        }
    }
    /* last: the owner may free q once it sees this count */
    atomic_fetch_add(&a_resolved, 1);
}

static void *async_main(void *arg)
{
    struct async_worker *w = arg;
    int j;

    for (j = 0; j < w->pairs; j++) {
        struct req *set = &w->reqs[3 * j];
        struct req *get = &w->reqs[3 * j + 1];
        struct req *inc = &w->reqs[3 * j + 2];
        char key[48];
        char ctr[16];
        const char *argv[3];
        size_t argvlen[3];
        int rc;
        int c = (j * 7 + w->id) % NCOUNTERS;

        snprintf(key, sizeof key, "ak_%d_%d", w->id, j);
        snprintf(set->val, sizeof set->val, "av_%d_%d", w->id, j);
        set->vlen = strlen(set->val);
        set->kind = EXP_OK;
        memcpy(get->val, set->val, sizeof get->val);
        get->vlen = set->vlen;
        get->kind = EXP_VALUE;
        inc->kind = EXP_INT;
        inc->ctr = c;
        set->f.resolve = async_resolve;
        set->f.data = set;
        get->f.resolve = async_resolve;
        get->f.data = get;
        inc->f.resolve = async_resolve;
        inc->f.data = inc;

        argv[0] = "SET";
        argv[1] = key;
        argv[2] = set->val;
        argvlen[0] = 3;
        argvlen[1] = strlen(key);
        argvlen[2] = set->vlen;
        rc = rcp_conn_send_argv(conn, &set->f, 3, argv, argvlen);
        if (rc != RCP_OK) {
            if (w->send_errors++ == 0)
                w->first_send_error = rc;
            continue;
        }
        /* same thread, same connection: GET is queued after its SET */
        argv[0] = "GET";
        rc = rcp_conn_send_argv(conn, &get->f, 2, argv, NULL);
        if (rc != RCP_OK) {
            if (w->send_errors++ == 0)
                w->first_send_error = rc;
        }
        snprintf(ctr, sizeof ctr, "actr_%d", c);
        argv[0] = "INCR";
        argv[1] = ctr;
        rc = rcp_conn_send_argv(conn, &inc->f, 2, argv, NULL);
        if (rc != RCP_OK) {
            if (w->send_errors++ == 0)
                w->first_send_error = rc;
        } else {
            w->incr_sent[c]++;
        }
    }
    return NULL;
}

static void run_async(int pairs)
{
    struct async_worker *w = calloc(NTHREADS, sizeof *w);
    long long expect[NCOUNTERS] = {0};
    long total = (long)NTHREADS * pairs * 3;
    int64_t deadline;
    int i;
    int c;

    ck_assert_ptr_nonnull(w);
    atomic_store(&a_resolved, 0);
    atomic_store(&a_good, 0);
    atomic_store(&a_bad, 0);
    atomic_store(&a_double, 0);
    for (c = 0; c < NCOUNTERS; c++)
        atomic_store(&a_incr_ok[c], 0);
    for (i = 0; i < NTHREADS; i++) {
        w[i].id = i;
        w[i].pairs = pairs;
        w[i].reqs = calloc((size_t)pairs * 3, sizeof(struct req));
        ck_assert_ptr_nonnull(w[i].reqs);
        ck_assert_int_eq(pthread_create(&w[i].th, NULL, async_main, &w[i]), 0);
    }
    for (i = 0; i < NTHREADS; i++)
        pthread_join(w[i].th, NULL);
    for (i = 0; i < NTHREADS; i++)
        ck_assert_msg(w[i].send_errors == 0, "thread %d: %d sends refused, first: %s", i,
                      w[i].send_errors, rcp_strerror(w[i].first_send_error));

    /* bounded wait for the I/O loop to resolve everything */
    deadline = rcptest_now_ms() + 60000;
    while (atomic_load(&a_resolved) < total && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(2);
    ck_assert_msg(atomic_load(&a_resolved) == total, "resolved %ld of %ld",
                  atomic_load(&a_resolved), total);
    ck_assert_msg(atomic_load(&a_double) == 0, "%ld futures resolved twice",
                  atomic_load(&a_double));
    ck_assert_msg(atomic_load(&a_bad) == 0, "%ld wrong replies, first: %s", atomic_load(&a_bad),
                  a_first_bad);
    ck_assert_int_eq(atomic_load(&a_good), total);

    for (i = 0; i < NTHREADS; i++) {
        int k;
        for (k = 0; k < pairs * 3; k++)
            ck_assert_int_eq(atomic_load(&w[i].reqs[k].resolved), 1);
        for (c = 0; c < NCOUNTERS; c++)
            expect[c] += w[i].incr_sent[c];
    }
    for (c = 0; c < NCOUNTERS; c++) {
        char d[256];
        char want[32];
        rcp_reply *r = rcp_conn_command(conn, "GET actr_%d", c);

        ck_assert_int_eq(atomic_load(&a_incr_ok[c]), expect[c]);
        snprintf(want, sizeof want, "%lld", expect[c]);
        ck_assert_msg(rcpt_is_cstring(r, want), "counter %d: want %s, got %s", c, want,
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    for (i = 0; i < NTHREADS; i++)
        free(w[i].reqs);
    free(w);
}

START_TEST(test_async_default_caps)
{
    open_conn(0, 0, 0);
    run_async(iterations(700));
}
END_TEST

/* Adaptive corking: requests of other threads held until the first reply
 * byte of the write in flight; every reply still to its own future. */
START_TEST(test_async_cork)
{
    rcp_conn_stats st;
    cork = 1;
    open_conn(0, 0, 0);
    run_async(iterations(700));
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    ck_assert_msg(st.corked > 0, "no request was held (corked 0 of %llu)",
                  (unsigned long long)st.requests);
}
END_TEST

START_TEST(test_sync_cork)
{
    cork = 1;
    open_conn(7, 24, 0);
    run_sync(iterations(200));
}
END_TEST

START_TEST(test_async_small_caps)
{
    open_conn(5, 50, 0);
    run_async(iterations(150));
}
END_TEST

/* Sync and async callers mixed on the same handle at once. */
static void *mixed_sync_main(void *arg)
{
    return sync_main(arg);
}

START_TEST(test_mixed_sync_async)
{
    struct sync_worker sw[8];
    struct async_worker *aw;
    int n = iterations(400);
    long total = 8L * n * 3;
    int64_t deadline;
    int i;

    open_conn(0, 0, 0);
    memset(sw, 0, sizeof sw);
    aw = calloc(8, sizeof *aw);
    ck_assert_ptr_nonnull(aw);
    atomic_store(&a_resolved, 0);
    atomic_store(&a_bad, 0);
    atomic_store(&a_double, 0);
    atomic_store(&a_on_sync_worker, 0);
    for (i = 0; i < 8; i++) {
        sw[i].id = 100 + i;
        sw[i].iters = n;
        aw[i].id = 200 + i;
        aw[i].pairs = n;
        aw[i].reqs = calloc((size_t)n * 3, sizeof(struct req));
        ck_assert_ptr_nonnull(aw[i].reqs);
        ck_assert_int_eq(pthread_create(&sw[i].th, NULL, mixed_sync_main, &sw[i]), 0);
        ck_assert_int_eq(pthread_create(&aw[i].th, NULL, async_main, &aw[i]), 0);
    }
    for (i = 0; i < 8; i++) {
        pthread_join(sw[i].th, NULL);
        pthread_join(aw[i].th, NULL);
    }
    deadline = rcptest_now_ms() + 60000;
    while (atomic_load(&a_resolved) < total && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(2);
    for (i = 0; i < 8; i++) {
        ck_assert_msg(sw[i].bad == 0, "%d bad sync replies; first: %s", sw[i].bad,
                      sw[i].first_bad);
        ck_assert_int_eq(aw[i].send_errors, 0);
    }
    ck_assert_msg(atomic_load(&a_resolved) == total, "resolved %ld of %ld",
                  atomic_load(&a_resolved), total);
    ck_assert_int_eq(atomic_load(&a_double), 0);
    ck_assert_msg(atomic_load(&a_on_sync_worker) == 0,
                  "%ld async callbacks ran on a sync caller's thread",
                  atomic_load(&a_on_sync_worker));
    ck_assert_msg(atomic_load(&a_bad) == 0, "%ld wrong async replies, first: %s",
                  atomic_load(&a_bad), a_first_bad);
    for (i = 0; i < 8; i++)
        free(aw[i].reqs);
    free(aw);
}
END_TEST

static void add_tests(TCase *tc)
{
    rcpt_fixture(tc, &srv, &conn, NULL);
    RCPTEST_ADD(tc, test_sync_default_caps, test_sync_lead_comes_back_from_loop,
                test_sync_small_caps, test_sync_batch_delay, test_async_default_caps,
                test_async_small_caps, test_mixed_sync_async, test_async_cork, test_sync_cork);
}

int main(void)
{
    return rcpt_main_case("concurrency", "shared-handle", 90, add_tests);
}
