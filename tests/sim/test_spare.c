/* test_spare.c: a spare connection (option spare_conns, lib/conn_spare.c)
 * that fails under the request it carries. Thread A's sync GET is held
 * on the handle's connection (connection 0), so thread B's sync GET
 * spills to the spare (connection 1), and the node then closes the
 * spare, answers it with garbage, or never answers. B gets a clear error
 * of its own (the request was written: never "not sent", never A's
 * reply), A's reply is untouched, the handle reports no disconnect (its
 * own connection is fine), the spare reconnects and carries requests
 * again, and close is prompt with a spare that hangs. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "sim.h"

struct call {
    pthread_t th;
    rcp_conn *c;
    char key[16];
    rcp_reply *r;
};

static void *call_main(void *arg)
{
    struct call *k = arg;
    k->r = rcp_conn_command(k->c, "GET %s", k->key);
    return NULL;
}

static void call_start(struct call *k, rcp_conn *c, const char *key)
{
    k->c = c;
    k->r = NULL;
    snprintf(k->key, sizeof k->key, "%s", key);
    ck_assert_int_eq(pthread_create(&k->th, NULL, call_main, k), 0);
}

/* Joins the call; its reply must be the string want. */
static void call_expect_string(struct call *k, const char *want)
{
    char d[256];
    pthread_join(k->th, NULL);
    ck_assert_ptr_nonnull(k->r);
    ck_assert_msg(k->r->type == RCP_REPLY_STRING && strcmp(k->r->str, want) == 0,
                  "GET %s: want \"%s\", got %s", k->key, want, rcptest_describe(k->r, d, sizeof d));
    rcp_reply_free(k->r);
}

/* Joins the call; its reply must be the error err. */
static void call_expect_error(struct call *k, int err)
{
    char d[256];
    pthread_join(k->th, NULL);
    ck_assert_ptr_nonnull(k->r);
    ck_assert_msg(k->r->type == RCP_REPLY_ERROR && k->r->err == err, "GET %s: want %s, got %s",
                  k->key, rcp_strerror(err), rcptest_describe(k->r, d, sizeof d));
    ck_assert_msg(k->r->str && strstr(k->r->str, "127.0.0.1"), "the error names the node: %s",
                  k->r->str ? k->r->str : "(none)");
    rcp_reply_free(k->r);
}

static atomic_int disconnected;

static void on_event(const rcp_event *ev, void *data)
{
    (void)data;
    if (ev->type == RCP_EVENT_DISCONNECTED)
        atomic_fetch_add(&disconnected, 1);
}

/* The connection (accept order) that the command `line` arrived on. */
static int conn_of(sim_node *n, const char *line)
{
    sim_cmd cmd;
    for (size_t i = 0; sim_log_at(n, i, &cmd) == 0; i++)
        if (strcmp(cmd.line, line) == 0)
            return cmd.conn;
    return -1;
}

static void wait_conns(sim_node *n, int want)
{
    uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(5000) * 1000000ull;
    while (sim_conns(n) < want && rcptest_now_ns() < until)
        rcptest_sleep_ms(2);
    ck_assert_int_ge(sim_conns(n), want);
    /* The client finished its connect before the node accepted it; give
     * its loop the moment to see that. */
    rcptest_sleep_ms(rcptest_scale(50));
}

/* A's GET aN held on connection 0 until B's GET bN has arrived (on the
 * spare once one is open); the scenario loaded by the caller says how
 * both are answered. Returns with both calls running. */
static void held_pair(sim_node *n, rcp_conn *c, struct call *a, struct call *b, int round)
{
    char ka[8], kb[8], line[16];
    snprintf(ka, sizeof ka, "a%d", round);
    snprintf(kb, sizeof kb, "b%d", round);
    snprintf(line, sizeof line, "GET %s", ka);
    call_start(a, c, ka);
    ck_assert_uint_ge(sim_wait_count(n, line, 1, rcptest_scale(5000)), 1);
    call_start(b, c, kb);
}

static rcp_conn *open_with_spare(sim_node **np, int request_timeout_ms, int io_timeout_ms)
{
    sim_node *n = sim_new(NULL);
    rcp_conn_options o;
    rcp_conn *c = NULL;
    char err[512] = "";
    struct call a, b;

    ck_assert_ptr_nonnull(n);
    *np = n;
    atomic_store(&disconnected, 0);
    sim_loadf(n, "%s", sim_prelude);
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.spare_conns = 1;
    o.request_timeout_ms = request_timeout_ms;
    o.io_timeout_ms = io_timeout_ms;
    o.reconnect_min_ms = 5;
    o.reconnect_max_ms = 20;
    o.event_cb = on_event;
    ck_assert_msg(rcp_conn_open(&o, &c, err, sizeof err) == RCP_OK, "%s", err);

    /* Round 0: no spare yet. B queues behind A on connection 0 and has
     * the spare opened meanwhile (A is held until it is: its reply
     * carries B's request on, as A writes for those queued behind). */
    sim_loadf(n, "expect GET a0\naccept\nuse 0\nsend \"$2\\r\\nA0\\r\\n\"\n"
                 "expect GET b0\nsend \"$2\\r\\nB0\\r\\n\"\n");
    held_pair(n, c, &a, &b, 0);
    call_expect_string(&a, "A0");
    call_expect_string(&b, "B0");
    sim_assert_done(n, rcptest_scale(5000));
    ck_assert_int_eq(conn_of(n, "GET b0"), 0);
    ck_assert_int_eq(sim_conns(n), 2);
    rcptest_sleep_ms(rcptest_scale(50)); /* see wait_conns */
    return c;
}

/* After round 1 broke the spare: it reconnects (connection 2) and
 * carries B's request of round 2; A's stays on connection 0. */
static void spare_serves_again(sim_node *n, rcp_conn *c)
{
    struct call a, b;
    rcp_conn_stats st;
    wait_conns(n, 3);
    sim_loadf(n, "expect GET a2\nexpect GET b2\nsend \"$2\\r\\nB2\\r\\n\"\n"
                 "use 0\nsend \"$2\\r\\nA2\\r\\n\"\n");
    held_pair(n, c, &a, &b, 2);
    call_expect_string(&b, "B2");
    call_expect_string(&a, "A2");
    sim_assert_done(n, rcptest_scale(5000));
    ck_assert_int_eq(conn_of(n, "GET a2"), 0);
    ck_assert_int_eq(conn_of(n, "GET b2"), 2);
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    ck_assert_uint_eq(st.spare_requests, 2);
    ck_assert_int_eq(atomic_load(&disconnected), 0);
}

/* Round 1 on a handle with a spare: the node does `script` to B's GET on
 * the spare while A waits on connection 0. B gets `code`, A its reply
 * from connection 0, and the spare serves again. */
static void spare_fails(const char *script, int code)
{
    sim_node *n;
    rcp_conn *c = open_with_spare(&n, rcptest_scale(3000), rcptest_scale(1000));
    struct call a, b;
    sim_loadf(n, "expect GET a1\nexpect GET b1\n%suse 0\nsend \"$2\\r\\nA1\\r\\n\"\n", script);
    held_pair(n, c, &a, &b, 1);
    call_expect_error(&b, code);
    call_expect_string(&a, "A1");
    sim_assert_done(n, rcptest_scale(5000));
    ck_assert_int_eq(conn_of(n, "GET a1"), 0);
    ck_assert_int_eq(conn_of(n, "GET b1"), 1);
    spare_serves_again(n, c);
    rcp_conn_close(c);
    sim_free(n);
}

/* The node reads B's GET on the spare and closes it, no reply. */
START_TEST(spare_closed_under_request)
{
    spare_fails("close\n", RCP_ERR_IO);
}
END_TEST

/* The spare answers B with bytes that are no RESP: a protocol error for
 * B, the spare dropped (the node sees it closed), A untouched. */
START_TEST(spare_garbage_reply)
{
    spare_fails("send \"?garbage\\r\\n\"\nexpect-close\n", RCP_ERR_PROTOCOL);
}
END_TEST

/* The spare never answers B: B times out at its own deadline while A is
 * answered; the I/O timeout then drops the spare, which reconnects. */
START_TEST(spare_hung)
{
    sim_node *n;
    rcp_conn *c = open_with_spare(&n, rcptest_scale(500), rcptest_scale(1500));
    struct call a, b;
    sim_loadf(n, "expect GET a1\nexpect GET b1\nuse 0\nsend \"$2\\r\\nA1\\r\\n\"\n");
    held_pair(n, c, &a, &b, 1);
    call_expect_string(&a, "A1");
    call_expect_error(&b, RCP_ERR_TIMEOUT);
    sim_assert_done(n, rcptest_scale(5000));
    ck_assert_int_eq(conn_of(n, "GET b1"), 1);
    spare_serves_again(n, c);
    rcp_conn_close(c);
    sim_free(n);
}
END_TEST

/* Close while B's request hangs on the spare, with an 8 s deadline
 * (scaled) and no I/O timeout: B's call ends with RCP_ERR_CLOSED and
 * close returns, both well before it (the spares used to be interrupted
 * only after every call had left the handle: at B's deadline). The
 * deadline stays short enough for an allocation-failure rerun whose
 * spare never opens (A then waits it out: tests/allocfail). */
START_TEST(close_with_hung_spare)
{
    sim_node *n;
    rcp_conn *c = open_with_spare(&n, rcptest_scale(8000), 0);
    struct call a, b;
    uint64_t t0, close_ns;
    sim_loadf(n, "expect GET a1\nexpect GET b1\nuse 0\nsend \"$2\\r\\nA1\\r\\n\"\n");
    held_pair(n, c, &a, &b, 1);
    call_expect_string(&a, "A1");
    sim_assert_done(n, rcptest_scale(5000));
    ck_assert_int_eq(conn_of(n, "GET b1"), 1);
    t0 = rcptest_now_ns();
    rcp_conn_close(c); /* waits for B's call to leave the handle */
    close_ns = rcptest_now_ns() - t0;
    call_expect_error(&b, RCP_ERR_CLOSED);
    /* Bounds a hang, measures nothing: B's deadline is 4 times as far. */
    ck_assert_msg(close_ns < (uint64_t)rcptest_scale(2000) * 1000000ull,
                  "close took %llu ms with a hung spare", (unsigned long long)(close_ns / 1000000));
    sim_free(n);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("spare");
    RCPTEST_ADD(tc, spare_closed_under_request, spare_garbage_reply, spare_hung,
                close_with_hung_spare);
    return sim_run("sim-spare", tc);
}
