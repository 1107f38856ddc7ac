/* test_spare.c: a spare connection (option spare_conns, lib/conn_spare.c)
 * that fails under the request it carries. Thread A's sync GET is held
 * on the handle's connection (connection 0), so thread B's sync GET
 * spills to the spare (connection 1), and the node then closes the
 * spare, answers it with garbage, or never answers. B gets a clear error
 * of its own (the request was written: never "not sent", never A's
 * reply), A's reply is untouched, the handle reports no disconnect (its
 * own connection is fine), the spare reconnects and carries requests
 * again, and close is prompt with a spare that hangs. Then lanes (64
 * callers inside the handle): a lane's spare dropped under its queued
 * callers, and a lane's spare stuck in its handshake. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "sim.h"

struct call {
    pthread_t th;
    rcp_conn *c;
    const char *cmd; /* GET or ECHO */
    char key[16];
    rcp_reply *r;
};

static void *call_main(void *arg)
{
    struct call *k = arg;
    k->r = rcp_conn_command(k->c, "%s %s", k->cmd, k->key);
    return NULL;
}

static void call_start_cmd(struct call *k, rcp_conn *c, const char *cmd, const char *key)
{
    k->c = c;
    k->r = NULL;
    k->cmd = cmd;
    snprintf(k->key, sizeof k->key, "%s", key);
    ck_assert_int_eq(pthread_create(&k->th, NULL, call_main, k), 0);
}

static void call_start(struct call *k, rcp_conn *c, const char *key)
{
    call_start_cmd(k, c, "GET", key);
}

/* Joins the call; its reply must be the string want. */
static void call_expect_string(struct call *k, const char *want)
{
    char d[256];
    pthread_join(k->th, NULL);
    ck_assert_ptr_nonnull(k->r);
    ck_assert_msg(k->r->type == RCP_REPLY_STRING && strcmp(k->r->str, want) == 0,
                  "%s %s: want \"%s\", got %s", k->cmd, k->key, want,
                  rcptest_describe(k->r, d, sizeof d));
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

static rcp_conn *open_with_spare(sim_node **np, int request_timeout_ms, int io_timeout_ms,
                                 const char *pre, const char *client_name)
{
    sim_node *n = sim_new(NULL);
    rcp_conn_options o;
    rcp_conn *c = NULL;
    char err[512] = "";
    struct call a, b;

    ck_assert_ptr_nonnull(n);
    *np = n;
    atomic_store(&disconnected, 0);
    sim_loadf(n, "%s%s", sim_prelude, pre ? pre : "");
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.client_name = client_name;
    o.spare_conns = 1;
    o.request_timeout_ms = request_timeout_ms;
    o.io_timeout_ms = io_timeout_ms;
    o.reconnect_min_ms = 5;
    o.reconnect_max_ms = 20;
    /* Past every request's deadline: a held handshake outlasts them. */
    o.connect_timeout_ms = rcptest_scale(10000);
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
    rcp_conn *c = open_with_spare(&n, rcptest_scale(3000), rcptest_scale(1000), NULL, NULL);
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
    rcp_conn *c = open_with_spare(&n, rcptest_scale(500), rcptest_scale(1500), NULL, NULL);
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
    rcp_conn *c = open_with_spare(&n, rcptest_scale(8000), 0, NULL, NULL);
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

/* Lanes (lib/conn_spare.c): with 32 or more calls inside the handle,
 * sync callers are dealt over its connection and its spare. LANE_THREADS
 * callers each send `cmd` with their own key (PREFIX N) while the node
 * answers no such command yet, so all of them are inside at once and
 * about half of those dealt queue on the spare's lane (not written yet:
 * the spare's first caller waits there for its reply). */
#define LANE_THREADS 64

static struct call lane_calls[LANE_THREADS];

static void lanes_start(rcp_conn *c, const char *cmd, const char *prefix)
{
    char key[16];
    for (int i = 0; i < LANE_THREADS; i++) {
        snprintf(key, sizeof key, "%s%d", prefix, i);
        call_start_cmd(&lane_calls[i], c, cmd, key);
    }
    rcptest_sleep_ms(rcptest_scale(300)); /* every call inside the handle */
}

/* Joins the callers; each must have its own key back (the node's echo). */
static void lanes_expect_echo(void)
{
    char want[16];
    for (int i = 0; i < LANE_THREADS; i++) {
        snprintf(want, sizeof want, "%s", lane_calls[i].key);
        call_expect_string(&lane_calls[i], want);
    }
}

/* How many `cmd`s arrived on connection conn, or on any but 0 (-1). */
static size_t cmds_on(sim_node *n, const char *cmd, int conn)
{
    sim_cmd sc;
    size_t k = 0, len = strlen(cmd);
    for (size_t i = 0; sim_log_at(n, i, &sc) == 0; i++)
        k += (conn < 0 ? sc.conn != 0 : sc.conn == conn) && strncmp(sc.line, cmd, len) == 0 &&
             sc.line[len] == ' ';
    return k;
}

/* The spare of a lane drops while callers are queued on it: the node
 * holds every GET, closes the spare, then answers the rest with their
 * keys. The one GET written on the spare fails with RCP_ERR_IO (it may
 * have run); the callers queued there unsent go on to the handle's own
 * connection (they were answered RCP_ERR_NOT_SENT before: 16 of 64 in
 * this scenario, on a handle that never disconnected), so every other
 * caller gets its own value. Then the spare is back and carries its
 * lane: with ECHO held the same way and then answered, at least 8 of 64
 * callers were served on it. */
START_TEST(lane_spare_closed_under_callers)
{
    sim_node *n;
    rcp_conn *c = open_with_spare(&n, rcptest_scale(5000), 0, NULL, NULL);
    rcp_conn_stats st;
    uint64_t until, spare_before;
    int io = 0;
    char d[256];

    lanes_start(c, "GET", "t");
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(5000) * 1000000ull;
    while (cmds_on(n, "GET", 1) < 1 && rcptest_now_ns() < until)
        rcptest_sleep_ms(5);
    ck_assert_msg(cmds_on(n, "GET", 1) >= 1, "no GET reached the spare");
    sim_loadf(n, "use 1\nclose\non GET * => echo\n");
    for (int i = 0; i < LANE_THREADS; i++) {
        struct call *k = &lane_calls[i];
        char line[32];
        pthread_join(k->th, NULL);
        ck_assert_ptr_nonnull(k->r);
        snprintf(line, sizeof line, "GET %s", k->key);
        if (k->r->type == RCP_REPLY_ERROR && k->r->err == RCP_ERR_IO && conn_of(n, line) == 1) {
            io++;
        } else {
            ck_assert_msg(k->r->type == RCP_REPLY_STRING && strcmp(k->r->str, k->key) == 0,
                          "GET %s (on connection %d): got %s", k->key, conn_of(n, line),
                          rcptest_describe(k->r, d, sizeof d));
            ck_assert_int_eq(conn_of(n, line), 0);
        }
        rcp_reply_free(k->r);
    }
    ck_assert_uint_eq(io, cmds_on(n, "GET", 1));
    ck_assert_int_eq(atomic_load(&disconnected), 0);

    wait_conns(n, 3);
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    spare_before = st.spare_requests;
    lanes_start(c, "ECHO", "u");
    sim_loadf(n, "on ECHO * => echo\n");
    lanes_expect_echo();
    ck_assert_uint_eq(cmds_on(n, "ECHO", 1), 0);
    ck_assert_msg(cmds_on(n, "ECHO", -1) >= 8, "%zu of %d ECHOs on the spare",
                  cmds_on(n, "ECHO", -1), LANE_THREADS);
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    ck_assert_uint_eq(st.spare_requests - spare_before, cmds_on(n, "ECHO", -1));
    ck_assert_int_eq(atomic_load(&disconnected), 0);
    rcp_conn_close(c);
    sim_free(n);
}
END_TEST

/* A lane whose spare is not ready (reconnected, its CLIENT SETNAME never
 * answered): its callers are served on the handle's own connection at
 * once. Queued behind the handshake instead, they would wait for the
 * connect timeout, which is past their deadline here. */
START_TEST(lane_spare_not_ready)
{
    sim_node *n;
    /* The first two handshakes (the handle's, the first spare's) are
     * answered; the reconnected spare's never is. */
    rcp_conn *c =
        open_with_spare(&n, rcptest_scale(3000), 0,
                        "on CLIENT ** => hang\non x2 CLIENT ** => send \"+OK\\r\\n\"\n", "lanes");
    rcp_conn_stats st;
    uint64_t until;

    sim_loadf(n, "use 1\nclose\n");
    wait_conns(n, 3);
    until = rcptest_now_ns() + (uint64_t)rcptest_scale(5000) * 1000000ull;
    while (sim_count(n, "CLIENT SETNAME lanes") < 3 && rcptest_now_ns() < until)
        rcptest_sleep_ms(2);
    ck_assert_uint_eq(sim_count(n, "CLIENT SETNAME lanes"), 3);

    lanes_start(c, "GET", "t");
    sim_loadf(n, "on GET * => echo\n");
    lanes_expect_echo();
    ck_assert_uint_eq(cmds_on(n, "GET", -1), 0);
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    ck_assert_uint_eq(st.spare_requests, 0);
    ck_assert_int_eq(atomic_load(&disconnected), 0);
    rcp_conn_close(c);
    sim_free(n);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("spare");
    RCPTEST_ADD(tc, spare_closed_under_request, spare_garbage_reply, spare_hung,
                close_with_hung_spare, lane_spare_closed_under_callers, lane_spare_not_ready);
    return sim_run("sim-spare", tc);
}
