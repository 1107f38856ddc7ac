/* test_adapter.c: rcp_conn on the application's own event loop (libevent
 * 2 through rcpipe/libevent.h; libuv 1 through rcpipe/libuv.h when built
 * with it) against a real server: callbacks on the loop thread, sends from
 * the loop thread and from other threads (the cross-thread wake), sync
 * calls from other threads and their refusal on the loop thread, close
 * with requests in flight (on the loop thread and from another one), a
 * refused connect, a server restart. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "harness.h"
#include "rcpipe.h"
#include "rcpipe/libevent.h"
#ifdef RCPT_WITH_LIBUV
#include "rcpipe/libuv.h"
#endif

static rcpt_server srv;
static struct event_base *base;
static rcp_loop *loop;
static rcp_conn *conn;
static pthread_t loop_thread; /* the test's main thread runs the base */

/* Counted by every callback: any call off the loop thread is a failure. */
static atomic_int off_thread;
static atomic_int connected_events;

static void on_event(const rcp_event *ev, void *data)
{
    (void)data;
    if (!pthread_equal(pthread_self(), loop_thread))
        atomic_fetch_add(&off_thread, 1);
    if (ev->type == RCP_EVENT_CONNECTED)
        atomic_fetch_add(&connected_events, 1);
}

static void open_on_loop(int port)
{
    rcp_conn_options o;
    char err[512] = "";
    int rc;
    rcpt_options(&o, &srv);
    if (port)
        o.port = port;
    o.loop = loop;
    o.event_cb = on_event;
    o.request_timeout_ms = 10000;
    rc = rcp_conn_open(&o, &conn, err, sizeof err);
    ck_assert_msg(rc == RCP_OK, "rcp_conn_open: %d (%s): %s", rc, rcp_strerror(rc), err);
}

static void setup(void)
{
    char err[2048];
    ck_assert_msg(rcpt_server_start(&srv, NULL, err, sizeof err) == 0, "%s", err);
    loop_thread = pthread_self();
    atomic_store(&off_thread, 0);
    atomic_store(&connected_events, 0);
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    loop = rcp_libevent_loop(base);
    ck_assert_ptr_nonnull(loop);
}

static void teardown(void)
{
    /* On the loop's thread, the loop not running: close does its pass. */
    rcp_conn_close(conn);
    conn = NULL;
    rcp_loop_free(loop);
    loop = NULL;
    event_base_free(base);
    base = NULL;
    rcpt_server_stop(&srv);
}

/* ---- running the loop until a condition, with a bound -------------- */

typedef int (*cond_fn)(void *arg);
typedef struct runner {
    cond_fn done;
    void *arg;
    int64_t until;
    int timed_out;
    void (*tick)(void *arg); /* optional: called on every check, on the loop thread */
} runner;

static void on_check(evutil_socket_t fd, short what, void *p)
{
    runner *r = p;
    (void)fd;
    (void)what;
    if (r->tick)
        r->tick(r->arg);
    if (r->done(r->arg))
        event_base_loopbreak(base);
    else if (rcptest_now_ms() > r->until) {
        r->timed_out = 1;
        event_base_loopbreak(base);
    }
}

/* Runs the base until done(arg), checked every 5 ms by an event of the
 * application's own, at most timeout_ms. Returns 1 if done. */
static int run_until(cond_fn done, void *arg, void (*tick)(void *), int timeout_ms)
{
    runner r = {done, arg, rcptest_now_ms() + rcptest_scale(timeout_ms), 0, tick};
    struct timeval every = {0, 5000};
    struct event *ev = event_new(base, -1, EV_PERSIST, on_check, &r);
    event_add(ev, &every);
    event_base_dispatch(base);
    event_free(ev);
    return !r.timed_out && done(arg);
}

/* ---- futures ---------------------------------------------------------- */

typedef struct counter {
    atomic_int replies, errors, closed, other;
    int expect;
} counter;

typedef struct req {
    rcp_future f;
    counter *cnt;
    atomic_int calls; /* resolved exactly once */
} req;

static void on_reply(rcp_future *f, rcp_reply *r)
{
    req *q = (req *)f;
    if (!pthread_equal(pthread_self(), loop_thread))
        atomic_fetch_add(&off_thread, 1);
    atomic_fetch_add(&q->calls, 1);
    if (r->type != RCP_REPLY_ERROR)
        atomic_fetch_add(&q->cnt->replies, 1);
    else if (r->err == RCP_ERR_CLOSED)
        atomic_fetch_add(&q->cnt->closed, 1);
    else
        atomic_fetch_add(&q->cnt->errors, 1);
}

static int all_resolved(void *arg)
{
    counter *c = arg;
    return atomic_load(&c->replies) + atomic_load(&c->errors) + atomic_load(&c->closed) >=
           c->expect;
}

static req *reqs_new(int n, counter *c)
{
    req *q = calloc((size_t)n, sizeof(*q));
    ck_assert_ptr_nonnull(q);
    for (int i = 0; i < n; i++) {
        q[i].f.resolve = on_reply;
        q[i].cnt = c;
    }
    return q;
}

static void check_once(req *q, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(atomic_load(&q[i].calls) == 1, "request %d resolved %d times", i,
                      atomic_load(&q[i].calls));
}

/* ---- tests ------------------------------------------------------------ */

/* Sends queued before the loop ever ran wait behind the connect; replies
 * and the CONNECTED event come on the loop thread. */
START_TEST(adapter_sends_from_loop_thread)
{
    enum { N = 200 };
    counter c = {0};
    req *q;
    c.expect = N;
    q = reqs_new(N, &c);
    open_on_loop(0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(i % 2 ? rcp_conn_send(conn, &q[i].f, "GET %s", "ad:k")
                               : rcp_conn_send(conn, &q[i].f, "SET %s %d", "ad:k", i),
                         RCP_OK);
    ck_assert_msg(run_until(all_resolved, &c, NULL, 10000), "replies %d errors %d",
                  atomic_load(&c.replies), atomic_load(&c.errors));
    ck_assert_int_eq(atomic_load(&c.replies), N);
    ck_assert_int_eq(atomic_load(&connected_events), 1);
    ck_assert_int_eq(atomic_load(&off_thread), 0);
    check_once(q, N);
    free(q);
}
END_TEST

typedef struct sender {
    pthread_t th;
    req *q;
    int n;
    atomic_int *refused;
} sender;

static void *send_thread(void *p)
{
    sender *s = p;
    for (int i = 0; i < s->n; i++)
        if (rcp_conn_send(conn, &s->q[i].f, "INCR %s", "ad:ctr") != RCP_OK)
            atomic_fetch_add(s->refused, 1);
    return NULL;
}

/* t threads, each sending `per` requests of q (t * per of them). */
static void start_senders(sender *s, int t, req *q, int per, atomic_int *refused)
{
    for (int i = 0; i < t; i++) {
        s[i].q = q + i * per;
        s[i].n = per;
        s[i].refused = refused;
        ck_assert_int_eq(pthread_create(&s[i].th, NULL, send_thread, &s[i]), 0);
    }
}

/* Four other threads send while the loop runs: every send wakes the loop
 * (or rides on a pending wake), every reply runs on the loop thread. */
START_TEST(adapter_sends_from_other_threads)
{
    enum { T = 4 };
    int per = rcptest_sanitized() ? 300 : 2000;
    counter c = {0};
    atomic_int refused = 0;
    sender s[T];
    req *q;
    c.expect = T * per;
    q = reqs_new(T * per, &c);
    open_on_loop(0);
    start_senders(s, T, q, per, &refused);
    ck_assert_msg(run_until(all_resolved, &c, NULL, 20000), "replies %d errors %d refused %d",
                  atomic_load(&c.replies), atomic_load(&c.errors), atomic_load(&refused));
    for (int t = 0; t < T; t++)
        pthread_join(s[t].th, NULL);
    ck_assert_int_eq(atomic_load(&refused), 0);
    ck_assert_int_eq(atomic_load(&c.replies), T * per);
    ck_assert_int_eq(atomic_load(&off_thread), 0);
    check_once(q, T * per);
    free(q);
}
END_TEST

typedef struct syncer {
    pthread_t th;
    atomic_int done, bad;
    int n;
} syncer;

static void *sync_thread(void *p)
{
    syncer *s = p;
    char key[32];
    for (int i = 0; i < s->n; i++) {
        rcp_reply *r;
        snprintf(key, sizeof key, "ad:s%d", i % 10);
        r = rcp_conn_command(conn, "SET %s %d", key, i);
        if (!rcpt_is_status(r, "OK"))
            atomic_fetch_add(&s->bad, 1);
        rcp_reply_free(r);
        r = rcp_conn_command(conn, "GET %s", key);
        if (!r || r->type != RCP_REPLY_STRING || atoi(r->str) != i)
            atomic_fetch_add(&s->bad, 1);
        rcp_reply_free(r);
    }
    atomic_store(&s->done, 1);
    return NULL;
}

static int syncer_done(void *p)
{
    return atomic_load(&((syncer *)p)->done);
}

/* Sync calls from another thread while the loop runs (the lone caller's
 * own I/O, and through the loop when it must). */
START_TEST(adapter_sync_from_other_thread)
{
    syncer s;
    memset(&s, 0, sizeof s);
    s.n = rcptest_sanitized() ? 200 : 1000;
    open_on_loop(0);
    ck_assert_int_eq(pthread_create(&s.th, NULL, sync_thread, &s), 0);
    ck_assert_msg(run_until(syncer_done, &s, NULL, 20000), "sync thread did not finish");
    pthread_join(s.th, NULL);
    ck_assert_int_eq(atomic_load(&s.bad), 0);
    ck_assert_int_eq(atomic_load(&off_thread), 0);
}
END_TEST

typedef struct refusal {
    rcp_future f;
    atomic_int seen;
    int err;
} refusal;

static void on_reply_try_sync(rcp_future *f, rcp_reply *r)
{
    refusal *rf = (refusal *)f;
    rcp_reply *s = rcp_conn_command(conn, "PING");
    (void)r;
    rf->err = s && s->type == RCP_REPLY_ERROR ? s->err : -1;
    rcp_reply_free(s);
    atomic_store(&rf->seen, 1);
}

static int after_loop_err;

static int refusal_seen(void *p)
{
    return atomic_load(&((refusal *)p)->seen) && after_loop_err;
}

/* Only once rcpipe has called in on this thread (before that it cannot
 * know the thread, and the call would wait for good). */
static void try_sync_from_app_event(void *p)
{
    if (atomic_load(&((refusal *)p)->seen) && !after_loop_err) {
        rcp_reply *s = rcp_conn_command(conn, "PING");
        after_loop_err = s && s->type == RCP_REPLY_ERROR ? s->err : -1;
        rcp_reply_free(s);
    }
}

/* A sync call on the loop thread would wait for the loop it blocks: it is
 * refused, inside rcpipe's callbacks and in the application's own. */
START_TEST(adapter_sync_refused_on_loop_thread)
{
    refusal rf;
    memset(&rf, 0, sizeof rf);
    rf.f.resolve = on_reply_try_sync;
    after_loop_err = 0;
    open_on_loop(0);
    ck_assert_int_eq(rcp_conn_send(conn, &rf.f, "PING"), RCP_OK);
    ck_assert(run_until(refusal_seen, &rf, try_sync_from_app_event, 10000));
    ck_assert_int_eq(rf.err, RCP_ERR_INVALID);
    ck_assert_int_eq(after_loop_err, RCP_ERR_INVALID);
}
END_TEST

typedef struct closer {
    req *q;
    int n, sent, closed_ok;
} closer;

static void close_from_app_event(void *p)
{
    closer *cl = p;
    if (cl->sent)
        return;
    for (int i = 0; i < cl->n; i++)
        ck_assert_int_eq(rcp_conn_send(conn, &cl->q[i].f, "INCR %s", "ad:close"), RCP_OK);
    cl->sent = 1;
    /* In the application's own callback on the loop thread: allowed. */
    rcp_conn_close(conn);
    conn = NULL;
    cl->closed_ok = 1;
}

static int closer_done(void *p)
{
    return ((closer *)p)->closed_ok;
}

/* Close on the loop thread with requests in flight: each is resolved once,
 * with its reply or RCP_ERR_CLOSED, before close returns. */
START_TEST(adapter_close_with_requests_in_flight)
{
    enum { N = 500 };
    counter c = {0};
    closer cl;
    c.expect = N;
    cl.q = reqs_new(N, &c);
    cl.n = N;
    cl.sent = cl.closed_ok = 0;
    open_on_loop(0);
    {
        /* Connected first, so that some are written when close comes. */
        counter c0 = {0};
        req first = {{0}, NULL, 0};
        first.f.resolve = on_reply;
        first.cnt = &c0;
        c0.expect = 1;
        ck_assert_int_eq(rcp_conn_send(conn, &first.f, "PING"), RCP_OK);
        ck_assert(run_until(all_resolved, &c0, NULL, 10000));
        ck_assert_int_eq(atomic_load(&c0.replies), 1);
    }
    ck_assert(run_until(closer_done, &cl, close_from_app_event, 10000));
    ck_assert_msg(all_resolved(&c), "replies %d closed %d errors %d", atomic_load(&c.replies),
                  atomic_load(&c.closed), atomic_load(&c.errors));
    ck_assert_int_eq(atomic_load(&c.errors), 0);
    ck_assert_int_eq(atomic_load(&off_thread), 0);
    check_once(cl.q, N);
    free(cl.q);
}
END_TEST

typedef struct remote_closer {
    pthread_t th;
    req *q;
    int n;
    atomic_int done, refused;
} remote_closer;

static void *close_thread(void *p)
{
    remote_closer *rc = p;
    for (int i = 0; i < rc->n; i++)
        if (rcp_conn_send(conn, &rc->q[i].f, "INCR %s", "ad:rclose") != RCP_OK)
            atomic_fetch_add(&rc->refused, 1);
    rcp_conn_close(conn); /* another thread, while the loop runs */
    atomic_store(&rc->done, 1);
    return NULL;
}

static int remote_closed(void *p)
{
    return atomic_load(&((remote_closer *)p)->done);
}

/* Close from another thread while the loop runs: the loop does the
 * closing pass, every request is resolved once, on the loop thread. */
START_TEST(adapter_close_from_other_thread)
{
    enum { N = 300 };
    counter c = {0};
    remote_closer rc;
    memset(&rc, 0, sizeof rc);
    c.expect = N;
    rc.q = reqs_new(N, &c);
    rc.n = N;
    open_on_loop(0);
    ck_assert_int_eq(pthread_create(&rc.th, NULL, close_thread, &rc), 0);
    ck_assert(run_until(remote_closed, &rc, NULL, 10000));
    pthread_join(rc.th, NULL);
    conn = NULL;
    ck_assert_int_eq(atomic_load(&rc.refused), 0);
    ck_assert_msg(all_resolved(&c), "replies %d closed %d errors %d", atomic_load(&c.replies),
                  atomic_load(&c.closed), atomic_load(&c.errors));
    ck_assert_int_eq(atomic_load(&c.errors), 0);
    ck_assert_int_eq(atomic_load(&off_thread), 0);
    check_once(rc.q, N);
    free(rc.q);
}
END_TEST

static int connect_failed;
static void on_event_count_fail(const rcp_event *ev, void *data)
{
    (void)data;
    if (ev->type == RCP_EVENT_CONNECT_FAILED)
        connect_failed++;
    on_event(ev, NULL);
}

static int failed_once(void *p)
{
    (void)p;
    return connect_failed > 0;
}

/* Nothing listens: the failed connect is an event on the loop thread, the
 * queued request fails as never sent, later sends fail fast. */
START_TEST(adapter_connect_refused)
{
    rcp_conn_options o;
    counter c = {0};
    req *q;
    char err[256];
    int port = srv.port;
    c.expect = 1;
    q = reqs_new(2, &c);
    rcpt_server_stop(&srv);
    rcp_conn_options_init(&o);
    o.host = "127.0.0.1";
    o.port = port;
    o.loop = loop;
    o.event_cb = on_event_count_fail;
    o.reconnect_min_ms = 50;
    connect_failed = 0;
    ck_assert_int_eq(rcp_conn_open(&o, &conn, err, sizeof err), RCP_OK);
    ck_assert_int_eq(rcp_conn_send(conn, &q[0].f, "PING"), RCP_OK);
    ck_assert(run_until(failed_once, NULL, NULL, 10000));
    ck_assert(run_until(all_resolved, &c, NULL, 10000));
    ck_assert_int_eq(atomic_load(&c.errors), 1);
    ck_assert_int_eq(rcp_conn_send(conn, &q[1].f, "PING"), RCP_ERR_NOT_SENT);
    ck_assert_int_eq(atomic_load(&off_thread), 0);
    free(q);
}
END_TEST

typedef struct probe {
    req q;
    counter c;
    int inflight;
} probe;

/* On every check: keep one PING in flight; done once one succeeds after
 * the restart. */
static void probe_tick(void *p)
{
    probe *pr = p;
    if (pr->inflight && atomic_load(&pr->q.calls)) {
        pr->inflight = 0;
        atomic_store(&pr->q.calls, 0);
    }
    if (!pr->inflight && atomic_load(&pr->c.replies) == 0 &&
        rcp_conn_send(conn, &pr->q.f, "PING") == RCP_OK)
        pr->inflight = 1;
}

static int probe_ok(void *p)
{
    return atomic_load(&((probe *)p)->c.replies) > 0;
}

/* The server dies and comes back: the connection reconnects by itself on
 * the application's loop (reconnect timer through the adapter's timer). */
START_TEST(adapter_reconnect_after_restart)
{
    probe pr;
    char err[2048];
    memset(&pr, 0, sizeof pr);
    pr.q.f.resolve = on_reply;
    pr.q.cnt = &pr.c;
    open_on_loop(0);
    ck_assert(run_until(probe_ok, &pr, probe_tick, 10000));
    ck_assert_int_eq(rcpt_server_kill(&srv), 0);
    atomic_store(&pr.c.replies, 0);
    /* Let it notice, fail and retry a few times before the server is back. */
    run_until(probe_ok, &pr, probe_tick, 1000);
    ck_assert_msg(rcpt_server_restart(&srv, err, sizeof err) == 0, "%s", err);
    ck_assert(run_until(probe_ok, &pr, probe_tick, 15000));
    ck_assert_int_ge(atomic_load(&connected_events), 2);
    ck_assert_int_eq(atomic_load(&off_thread), 0);
}
END_TEST

#ifdef RCPT_WITH_LIBUV
static uv_loop_t uvl;
static int uv_done;

static void uv_check(uv_timer_t *t)
{
    counter *c = t->data;
    if (all_resolved(c)) {
        uv_done = 1;
        uv_stop(t->loop);
    }
}

/* The same loop-thread and cross-thread sends, on libuv. */
START_TEST(adapter_libuv_sends)
{
    enum { T = 2 };
    int per = rcptest_sanitized() ? 200 : 1000;
    counter c = {0};
    atomic_int refused = 0;
    sender s[T];
    uv_timer_t check;
    rcp_loop *ul;
    rcp_conn_options o;
    char err[256];
    req *q;
    /* This test brings its own loop: drop the libevent one. */
    rcp_loop_free(loop);
    loop = NULL;
    ck_assert_int_eq(uv_loop_init(&uvl), 0);
    ul = rcp_libuv_loop(&uvl);
    ck_assert_ptr_nonnull(ul);
    c.expect = T * per + 1;
    q = reqs_new(T * per + 1, &c);
    rcpt_options(&o, &srv);
    o.loop = ul;
    o.event_cb = on_event;
    ck_assert_int_eq(rcp_conn_open(&o, &conn, err, sizeof err), RCP_OK);
    ck_assert_int_eq(rcp_conn_send(conn, &q[T * per].f, "PING"), RCP_OK);
    start_senders(s, T, q, per, &refused);
    uv_timer_init(&uvl, &check);
    check.data = &c;
    uv_timer_start(&check, uv_check, 5, 5);
    uv_done = 0;
    uv_run(&uvl, UV_RUN_DEFAULT);
    for (int t = 0; t < T; t++)
        pthread_join(s[t].th, NULL);
    ck_assert(uv_done);
    ck_assert_int_eq(atomic_load(&refused), 0);
    ck_assert_int_eq(atomic_load(&c.replies), T * per + 1);
    ck_assert_int_eq(atomic_load(&off_thread), 0);
    check_once(q, T * per + 1);
    rcp_conn_close(conn);
    conn = NULL;
    rcp_loop_free(ul);
    uv_close((uv_handle_t *)&check, NULL);
    uv_run(&uvl, UV_RUN_DEFAULT); /* the adapter's handles finish closing */
    ck_assert_int_eq(uv_loop_close(&uvl), 0);
    free(q);
}
END_TEST
#endif

static void add_tests(TCase *tc)
{
    tcase_add_checked_fixture(tc, setup, teardown);
    RCPTEST_ADD(tc, adapter_sends_from_loop_thread, adapter_sends_from_other_threads,
                adapter_sync_from_other_thread, adapter_sync_refused_on_loop_thread,
                adapter_close_with_requests_in_flight, adapter_close_from_other_thread,
                adapter_connect_refused, adapter_reconnect_after_restart);
#ifdef RCPT_WITH_LIBUV
    RCPTEST_ADD(tc, adapter_libuv_sends);
#endif
}

int main(void)
{
    return rcpt_main_case("adapter", "libevent", 60, add_tests);
}
