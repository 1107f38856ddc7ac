/* test_spare.c: spare connections for sync callers (option spare_conns,
 * lib/conn_spare.c). A few sync threads on one handle: a caller behind
 * one other takes an idle spare instead of sleeping in the queue; every
 * caller still gets its own reply, the spares stay within the option, a
 * handle that carried a CLIENT command (via the sync or the async API)
 * never uses them, a thread's sync request never overtakes its own
 * async request, and many sync threads are dealt over the connection
 * and its spares (lanes) unless the handle has carried an async
 * request. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NTHREADS 4
#define MANY_THREADS 64
#define NCOUNTERS 3

static rcpt_server srv;
static rcp_conn *conn;

static void open_conn(int spare_conns)
{
    rcp_conn_options o;
    rcpt_options(&o, &srv);
    o.request_timeout_ms = 30000; /* a sanitized build on 2 busy cores is slow */
    o.spare_conns = spare_conns;
    conn = rcpt_conn_open_ok(&o);
}

static int iterations(int normal)
{
    return rcptest_sanitized() ? normal / 4 : normal;
}

struct worker {
    pthread_t th;
    int id, iters;
    long long incr[NCOUNTERS];
    int bad;
    char first_bad[512];
};

static void note_bad(struct worker *w, const char *what, const rcp_reply *r)
{
    char d[256];
    if (w->bad++ == 0)
        snprintf(w->first_bad, sizeof w->first_bad, "thread %d: %s: %s", w->id, what,
                 rcptest_describe(r, d, sizeof d));
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (int j = 0; j < w->iters; j++) {
        char key[48], val[64];
        int c = (j + w->id) % NCOUNTERS;
        rcp_reply *r;

        snprintf(key, sizeof key, "sp_%d_%d", w->id, j);
        snprintf(val, sizeof val, "v_%d_%d%s", w->id, j, (j & 1) ? "" : "-longer");
        r = rcp_conn_command(conn, "SET %s %s", key, val);
        if (!rcpt_is_status(r, "OK"))
            note_bad(w, "SET", r);
        rcp_reply_free(r);
        r = rcp_conn_command(conn, "GET %s", key);
        if (!rcpt_is_cstring(r, val))
            note_bad(w, "GET (its own value)", r);
        rcp_reply_free(r);
        r = rcp_conn_command(conn, "INCR spctr_%d", c);
        if (r->type != RCP_REPLY_INTEGER || r->err != RCP_OK || r->integer < 1)
            note_bad(w, "INCR", r);
        else
            w->incr[c]++;
        rcp_reply_free(r);
    }
    return NULL;
}

/* nthreads sync threads, iters rounds each of SET, GET (its own value)
 * and INCR; every reply checked, the counters and the key count after. */
static rcp_conn_stats run_threads(int nthreads, int iters, long long keys_before)
{
    struct worker w[MANY_THREADS];
    long long want[NCOUNTERS] = {0};
    rcp_conn_stats st;
    char d[256];
    rcp_reply *r;

    memset(w, 0, sizeof w);
    ck_assert_int_le(nthreads, MANY_THREADS);
    for (int i = 0; i < nthreads; i++) {
        w[i].id = i;
        w[i].iters = iters;
        ck_assert_int_eq(pthread_create(&w[i].th, NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(w[i].th, NULL);
    for (int i = 0; i < nthreads; i++) {
        ck_assert_msg(w[i].bad == 0, "%d bad replies; first: %s", w[i].bad, w[i].first_bad);
        for (int c = 0; c < NCOUNTERS; c++)
            want[c] += w[i].incr[c];
    }
    for (int c = 0; c < NCOUNTERS; c++) {
        char s[32];
        snprintf(s, sizeof s, "%lld", want[c]);
        r = rcp_conn_command(conn, "GET spctr_%d", c);
        ck_assert_msg(rcpt_is_cstring(r, s), "counter %d: want %s, got %s", c, s,
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    r = rcp_conn_command(conn, "DBSIZE");
    ck_assert_msg(rcptest_is_int(r, keys_before + (long long)nthreads * iters + NCOUNTERS),
                  "DBSIZE: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    ck_assert_uint_ge(st.requests, (uint64_t)nthreads * iters * 3);
    ck_assert_uint_eq(st.timeouts, 0);
    ck_assert_uint_eq(st.disconnects, 0);
    return st;
}

static rcp_conn_stats run(int iters, long long keys_before)
{
    return run_threads(NTHREADS, iters, keys_before);
}

/* Clients the server has, seen from a connection of the test's own
 * (which it counts too). */
static long long server_clients(void)
{
    rcp_conn_options o;
    rcp_conn *probe;
    rcp_reply *r;
    long long n = -1;
    const char *p;

    rcpt_options(&o, &srv);
    probe = rcpt_conn_open_ok(&o);
    r = rcp_conn_command(probe, "INFO clients");
    ck_assert_int_eq(r->type, RCP_REPLY_STRING);
    p = strstr(r->str, "connected_clients:");
    ck_assert_ptr_nonnull(p);
    n = atoll(p + strlen("connected_clients:"));
    rcp_reply_free(r);
    rcp_conn_close(probe);
    return n;
}

START_TEST(test_few_threads_take_spares)
{
    rcp_conn_stats st;
    long long clients;
    open_conn(2);
    st = run(iterations(3000), 0);
    /* Four threads always busy on one connection: callers behind one
     * other are the common case, and the first of them opened a spare. */
    ck_assert_msg(st.spare_requests > 0, "no request went on a spare (requests %llu, leads %llu)",
                  (unsigned long long)st.requests, (unsigned long long)st.leads);
    ck_assert_uint_le(st.spare_requests, st.requests);
    clients = server_clients();
    /* the handle's own, at most 2 spares, the probe */
    ck_assert_msg(clients >= 2 && clients <= 4, "the server has %lld clients", clients);
}
END_TEST

START_TEST(test_spares_off)
{
    rcp_conn_stats st;
    open_conn(0);
    st = run(iterations(1000), 0);
    ck_assert_uint_eq(st.spare_requests, 0);
    ck_assert_int_eq(server_clients(), 2);
}
END_TEST

/* An async request's future: done, and whether the reply was +OK. */
struct ok_fut {
    rcp_future f; /* first: the callback gets &f */
    atomic_int done;
    int ok;
};

static void ok_resolve(rcp_future *f, rcp_reply *r)
{
    struct ok_fut *s = (struct ok_fut *)f;
    s->ok = rcpt_is_status(r, "OK");
    atomic_store(&s->done, 1); /* last: the owner's memory may go */
}

/* SELECT and the like are refused on a handle (they would change the
 * state of a connection every caller shares), so spares and the handle's
 * own connection always agree on the database. */
START_TEST(test_select_refused)
{
    rcp_reply *r;
    open_conn(3);
    r = rcp_conn_command(conn, "SELECT 1");
    ck_assert(rcpt_is_client_error(r, RCP_ERR_UNSUPPORTED));
    rcp_reply_free(r);
}
END_TEST

/* A CLIENT command sets state of the handle's connection that the spares
 * would not have (a name, tracking ...): it turns them off for good. how:
 * 0 through the sync API, 1 through the async one. */
static void client_case(int how)
{
    rcp_conn_stats st;
    rcp_reply *r;
    char d[256];

    open_conn(3);
    if (how == 0) {
        r = rcp_conn_command(conn, "CLIENT SETNAME spare-test");
        ck_assert_msg(rcpt_is_status(r, "OK"), "%s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    } else {
        struct ok_fut s;
        int64_t deadline = rcptest_now_ms() + 30000;
        memset(&s, 0, sizeof s);
        s.f.resolve = ok_resolve;
        ck_assert_int_eq(rcp_conn_send(conn, &s.f, "client setname spare-test"), RCP_OK);
        while (!atomic_load(&s.done) && rcptest_now_ms() < deadline)
            rcptest_sleep_ms(1);
        ck_assert(atomic_load(&s.done) && s.ok);
    }
    st = run(iterations(1000), 0);
    ck_assert_uint_eq(st.spare_requests, 0);
    ck_assert_int_eq(server_clients(), 2);
}

START_TEST(test_client_turns_spares_off)
{
    client_case(0);
}
END_TEST

START_TEST(test_async_client_turns_spares_off)
{
    client_case(1);
}
END_TEST

/* Many sync threads: they are dealt over the handle's connection and its
 * spares (lanes), each with a batching chain of its own, so most requests
 * go on spares (without lanes about 2% do: a caller that finds exactly one
 * request outstanding). Every reply is still its caller's, and the server
 * sees at most the handle's connection and its spares. */
START_TEST(test_many_threads_take_lanes)
{
    rcp_conn_stats st;
    long long clients;
    open_conn(3);
    st = run_threads(MANY_THREADS, iterations(400), 0);
    ck_assert_msg(st.spare_requests * 10 >= st.requests * 3,
                  "%llu of %llu requests on spares: the lanes were not used",
                  (unsigned long long)st.spare_requests, (unsigned long long)st.requests);
    clients = server_clients();
    ck_assert_msg(clients >= 2 && clients <= 5, "the server has %lld clients", clients);
}
END_TEST

/* A handle that has carried an async request deals no lanes: a thread's
 * sync call on a spare could pass its own async request on the handle's
 * connection. Only the spill (exactly one request outstanding) remains. */
START_TEST(test_async_handle_no_lanes)
{
    struct ok_fut one;
    rcp_conn_stats st;
    int64_t deadline;
    open_conn(3);
    memset(&one, 0, sizeof one);
    one.f.resolve = ok_resolve;
    ck_assert_int_eq(rcp_conn_send(conn, &one.f, "SET lanes_async x"), RCP_OK);
    deadline = rcptest_now_ms() + 30000;
    while (!atomic_load(&one.done) && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(1);
    ck_assert(atomic_load(&one.done) && one.ok);
    st = run_threads(MANY_THREADS, iterations(400), 1);
    ck_assert_msg(st.spare_requests * 10 < st.requests * 3,
                  "%llu of %llu requests on spares after an async request",
                  (unsigned long long)st.spare_requests, (unsigned long long)st.requests);
}
END_TEST

/* A thread's sync request must not overtake its own async request: with
 * that one outstanding the caller queues behind it, it does not spill.
 * Another thread's sync calls keep the connection busy meanwhile. */
static atomic_int bg_stop;

static void *bg_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&bg_stop)) {
        rcp_reply *r = rcp_conn_command(conn, "PING");
        rcp_reply_free(r);
    }
    return NULL;
}

START_TEST(test_own_async_not_overtaken)
{
    pthread_t bg;
    int n = iterations(4000), wrong = 0, notok = 0;
    char first[300] = "";
    struct ok_fut *sets = calloc((size_t)n, sizeof *sets);
    int64_t deadline;

    ck_assert_ptr_nonnull(sets);
    open_conn(3);
    atomic_store(&bg_stop, 0);
    ck_assert_int_eq(pthread_create(&bg, NULL, bg_main, NULL), 0);
    for (int i = 0; i < n; i++) {
        char val[32], d[256];
        rcp_reply *r;
        snprintf(val, sizeof val, "%d", i);
        sets[i].f.resolve = ok_resolve;
        ck_assert_int_eq(rcp_conn_send(conn, &sets[i].f, "SET order %s", val), RCP_OK);
        r = rcp_conn_command(conn, "GET order");
        if (!rcpt_is_cstring(r, val) && wrong++ == 0)
            snprintf(first, sizeof first, "after SET %d, GET gave %s", i,
                     rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    atomic_store(&bg_stop, 1);
    pthread_join(bg, NULL);
    deadline = rcptest_now_ms() + 30000;
    for (int i = 0; i < n; i++) {
        while (!atomic_load(&sets[i].done) && rcptest_now_ms() < deadline)
            rcptest_sleep_ms(1);
        notok += !(atomic_load(&sets[i].done) && sets[i].ok);
    }
    ck_assert_msg(wrong == 0, "%d of %d GETs overtook their SET; first: %s", wrong, n, first);
    ck_assert_int_eq(notok, 0);
    free(sets);
}
END_TEST

static void add_tests(TCase *tc)
{
    rcpt_fixture(tc, &srv, &conn, NULL);
    RCPTEST_ADD(tc, test_few_threads_take_spares, test_spares_off, test_own_async_not_overtaken,
                test_select_refused, test_client_turns_spares_off,
                test_async_client_turns_spares_off, test_many_threads_take_lanes,
                test_async_handle_no_lanes);
}

int main(void)
{
    return rcpt_main_case("spare", "spare-conns", 120, add_tests);
}
