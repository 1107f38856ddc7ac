/* test_replies.c: replies a real server would not send, against one
 * pipelined connection (rcp_conn): malformed RESP, nesting deeper than the
 * reader allows, a bulk length of 2^40, a reply split byte by byte, a
 * connection closed mid-reply, more replies than requests. Every future is
 * resolved exactly once, with its own reply or with RCP_ERR_PROTOCOL /
 * RCP_ERR_IO (written) or RCP_ERR_NOT_SENT: never another request's reply;
 * the connection is replaced and later requests are answered. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static rcp_conn *open_conn(sim_node *n, int io_timeout_ms)
{
    rcp_conn_options o;
    rcp_conn *c = NULL;
    char err[512] = "";
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.connect_timeout_ms = rcptest_scale(1000);
    o.request_timeout_ms = rcptest_scale(3000);
    o.io_timeout_ms = io_timeout_ms;
    o.reconnect_min_ms = 5;
    o.reconnect_max_ms = 50;
    ck_assert_msg(rcp_conn_open(&o, &c, err, sizeof err) == RCP_OK, "open: %s", err);
    return c;
}

static void send_get(rcp_conn *c, sim_fut *sf, const char *key, int timeout_ms)
{
    sim_fut_init(sf, timeout_ms);
    ck_assert_int_eq(rcp_conn_send(c, &sf->f, "GET %s", key), RCP_OK);
}

static void await(sim_fut *sf)
{
    ck_assert_msg(sim_fut_wait(sf, rcptest_scale(10000)) == 0, "a future was never resolved");
}

static void want_str(sim_fut *sf, const char *s)
{
    await(sf);
    ck_assert_msg(sf->type == RCP_REPLY_STRING && strcmp(sf->str, s) == 0,
                  "want \"%s\", got type %d err %d \"%s\"", s, sf->type, sf->err, sf->str);
}

static void want_err(sim_fut *sf, int code)
{
    await(sf);
    ck_assert_msg(sf->type == RCP_REPLY_ERROR && sf->err == code, "want error %d, got type %d err %d \"%s\"",
                  code, sf->type, sf->err, sf->str);
}

/* After a failure: a fresh request on a fresh connection gets its own
 * answer (the scenario's last step answers GET after). */
static void check_recovers(rcp_conn *c, sim_node *n, int client_closed)
{
    sim_fut sf;
    uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(3000) * 1000000ull;
    int rv;
    /* RCP_ERR_NOT_SENT (refused while it reconnects, or queued just as the
     * old connection failed) means never written: send it again. */
    for (;;) {
        sim_fut_init(&sf, 0);
        rv = rcp_conn_send(c, &sf.f, "GET after");
        if (rv == RCP_OK) {
            await(&sf);
            if (!(sf.type == RCP_REPLY_ERROR && sf.err == RCP_ERR_NOT_SENT))
                break;
        }
        ck_assert_msg(rv == RCP_OK || rv == RCP_ERR_NOT_SENT, "send: %s", rcp_strerror(rv));
        sim_fut_destroy(&sf);
        ck_assert_msg(rcptest_now_ns() < until, "not reconnected in time");
        rcptest_sleep_ms(5);
    }
    want_str(&sf, "after");
    sim_fut_destroy(&sf);
    sim_assert_done(n, rcptest_scale(5000));
    ck_assert_int_ge(sim_conns(n), 2);
    if (client_closed) /* the client, not the node, dropped the connection */
        ck_assert_int_ge(sim_conns_closed_by_peer(n), 1);
}

static const char after[] = "expect GET after\nsend \"$5\\r\\nafter\\r\\n\"\n";

static const char *garbage[] = {
    "!oops\\r\\n",                                             /* unknown type byte */
    "\\x00\\x01\\x02\\r\\n",                                    /* binary noise */
    "*1\\r\\n*1\\r\\n*1\\r\\n*1\\r\\n*1\\r\\n*1\\r\\n*1\\r\\n*1\\r\\n*1\\r\\n*1\\r\\n:1\\r\\n", /* depth 10 */
};

/* A answered, then B gets garbage: A has its reply, B the protocol
 * error, the connection is dropped and remade. */
START_TEST(malformed_reply)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a, b;
    rcp_conn_stats st;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "expect GET a\nexpect GET b\nsend \"$1\\r\\na\\r\\n\"\nsend \"%s\"\nexpect-close\n%s",
              garbage[_i], after);
    c = open_conn(n, rcptest_scale(3000));
    send_get(c, &a, "a", 0);
    send_get(c, &b, "b", 0);
    want_str(&a, "a");
    want_err(&b, RCP_ERR_PROTOCOL);
    check_recovers(c, n, 1);
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    ck_assert_uint_ge(st.disconnects, 1);
    rcp_conn_close(c);
    ck_assert_int_eq(a.calls + b.calls, 2);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_free(n);
}
END_TEST

/* Replies trickled one byte per write: parsed across reads, each to its
 * own request. */
START_TEST(split_byte_by_byte)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    rcp_reply *r;
    rcp_conn_stats st;
    sim_fut a;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "expect GET a\nsend-bytewise \"$5\\r\\nhello\\r\\n\"\n"
                 "expect GET b\nsend-bytewise \"*3\\r\\n$1\\r\\nx\\r\\n:42\\r\\n*1\\r\\n$-1\\r\\n\"\n"
                 "expect GET c\nsend-bytewise \"-ERR slow\\r\\n\"\n");
    c = open_conn(n, rcptest_scale(3000));
    send_get(c, &a, "a", 0);
    want_str(&a, "hello");
    sim_fut_destroy(&a);
    r = rcp_conn_command(c, "GET b");
    ck_assert_int_eq(r->type, RCP_REPLY_ARRAY);
    ck_assert_uint_eq(r->elements, 3);
    ck_assert_str_eq(r->element[0]->str, "x");
    ck_assert_int_eq(r->element[1]->integer, 42);
    ck_assert_int_eq(r->element[2]->type, RCP_REPLY_ARRAY);
    ck_assert_int_eq(r->element[2]->element[0]->type, RCP_REPLY_NIL);
    rcp_reply_free(r);
    r = rcp_conn_command(c, "GET c");
    ck_assert_int_eq(r->type, RCP_REPLY_ERROR);
    ck_assert_int_eq(r->err, RCP_ERR_SERVER);
    ck_assert_str_eq(r->str, "ERR slow");
    rcp_reply_free(r);
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    /* 43 bytes in 3 replies came in more reads than replies. */
    ck_assert_uint_gt(st.read_calls, 3);
    ck_assert_uint_eq(st.disconnects, 0);
    ck_assert_int_eq(sim_conns(n), 1);
    rcp_conn_close(c);
    sim_free(n);
}
END_TEST

/* A answered, B's reply cut off by a close: B (written) gets RCP_ERR_IO,
 * A keeps its reply. */
START_TEST(closed_mid_reply)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a, b;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "expect GET a\nexpect GET b\nsend \"$1\\r\\na\\r\\n$10\\r\\nhel\"\nstall 20\nclose\n%s",
              after);
    c = open_conn(n, rcptest_scale(3000));
    send_get(c, &a, "a", 0);
    send_get(c, &b, "b", 0);
    want_str(&a, "a");
    want_err(&b, RCP_ERR_IO);
    check_recovers(c, n, 0);
    rcp_conn_close(c);
    ck_assert_int_eq(a.calls + b.calls, 2);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_free(n);
}
END_TEST

/* Two replies for one request, in one write: the first is A's, the second
 * is nobody's: the connection is dropped, B never sees "extra". */
START_TEST(more_replies_than_requests)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "expect GET a\nsend \"$1\\r\\na\\r\\n$5\\r\\nextra\\r\\n\"\nexpect-close\n%s", after);
    c = open_conn(n, rcptest_scale(3000));
    send_get(c, &a, "a", 0);
    want_str(&a, "a");
    sim_fut_destroy(&a);
    check_recovers(c, n, 1);
    rcp_conn_close(c);
    sim_free(n);
}
END_TEST

/* The same, but the stray reply comes later, on an idle connection, after
 * 20 requests by a lone sync caller (the lone-caller fast path; _i = 1:
 * async sends instead): the next request must not take it for its own. */
START_TEST(stray_reply_on_idle_connection)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut b;
    rcp_reply *r;
    char st[800];
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "on GET a => send \"$1\\r\\na\\r\\n\"\n"
                 "on GET b => send \"$1\\r\\nb\\r\\n\"\naccept\n");
    c = open_conn(n, rcptest_scale(3000));
    for (int i = 0; i < 100; i++) {
        if (_i) {
            sim_fut a;
            send_get(c, &a, "a", 0);
            want_str(&a, "a");
            sim_fut_destroy(&a);
        } else {
            r = rcp_conn_command(c, "GET a");
            ck_assert_str_eq(r->str, "a");
            rcp_reply_free(r);
        }
    }
    sim_loadf(n, "send \"+EXTRA\\r\\n\"\nexpect-close\n");
    rcptest_sleep_ms(100);
    send_get(c, &b, "b", 0);
    await(&b);
    ck_assert_msg(strcmp(b.str, "EXTRA") != 0, "the stray reply was handed to the next request");
    ck_assert_msg((b.type == RCP_REPLY_STRING && strcmp(b.str, "b") == 0) ||
                      (b.type == RCP_REPLY_ERROR &&
                       (b.err == RCP_ERR_PROTOCOL || b.err == RCP_ERR_NOT_SENT || b.err == RCP_ERR_IO)),
                  "B got type %d err %d \"%s\"", b.type, b.err, b.str);
    sim_fut_destroy(&b);
    ck_assert_msg(sim_wait(n, rcptest_scale(5000)) == 0, "the client kept the connection: %s",
                  sim_status(n, st, sizeof st));
    /* The connection was dropped: while it waits to reconnect, requests
     * fail fast with RCP_ERR_NOT_SENT (documented); then it works again. */
    {
        uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(3000) * 1000000u;
        for (;;) {
            r = rcp_conn_command(c, "GET b");
            if (r->type != RCP_REPLY_ERROR || r->err != RCP_ERR_NOT_SENT ||
                rcptest_now_ns() > until)
                break;
            rcp_reply_free(r);
            rcptest_sleep_ms(20);
        }
    }
    ck_assert_str_eq(r->str, "b");
    rcp_reply_free(r);
    rcp_conn_close(c);
    sim_free(n);
}
END_TEST

/* The server answers a lone sync caller and closes at once (Redis's
 * `timeout`, CLIENT KILL, a restart): the close comes in the same segment
 * as the reply, while the caller has the socket and the loop is not
 * reading. The loop must still hear it, then and there: the DISCONNECTED
 * event and the reconnect come without waiting for the next request. Ten
 * rounds, as the close can come before or after the caller hands back. */
static atomic_int lone_lost;

static void count_lone_lost(const rcp_event *ev, void *data)
{
    (void)data;
    if (ev->type == RCP_EVENT_DISCONNECTED)
        atomic_fetch_add(&lone_lost, 1);
}

START_TEST(closed_after_lone_reply)
{
    enum { ROUNDS = 10 };
    sim_node *n = sim_new(NULL);
    rcp_conn_options o;
    rcp_conn *c = NULL;
    char err[512] = "";
    ck_assert_ptr_nonnull(n);
    for (int i = 0; i < ROUNDS; i++)
        sim_loadf(n, "expect GET a\nsend \"$1\\r\\na\\r\\n\"\nclose\n");
    atomic_store(&lone_lost, 0);
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.connect_timeout_ms = rcptest_scale(1000);
    o.request_timeout_ms = rcptest_scale(3000);
    o.reconnect_min_ms = 5;
    o.reconnect_max_ms = 50;
    o.event_cb = count_lone_lost;
    ck_assert_msg(rcp_conn_open(&o, &c, err, sizeof err) == RCP_OK, "open: %s", err);
    for (int i = 0; i < ROUNDS; i++) {
        uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(3000) * 1000000ull;
        rcp_reply *r;
        for (;;) { /* NOT_SENT while it reconnects: never written, ask again */
            r = rcp_conn_command(c, "GET a");
            if (r->type != RCP_REPLY_ERROR || r->err != RCP_ERR_NOT_SENT || rcptest_now_ns() > until)
                break;
            rcp_reply_free(r);
            rcptest_sleep_ms(5);
        }
        ck_assert_msg(r->type == RCP_REPLY_STRING && strcmp(r->str, "a") == 0,
                      "round %d: type %d err %d \"%s\"", i, r->type, r->err, r->str ? r->str : "");
        rcp_reply_free(r);
        until = rcptest_now_ns() + (uint64_t)rcptest_scale(2000) * 1000000ull;
        while (atomic_load(&lone_lost) < i + 1 && rcptest_now_ns() < until)
            rcptest_sleep_ms(2);
        ck_assert_msg(atomic_load(&lone_lost) == i + 1,
                      "round %d: the close was not heard while the connection sat idle", i);
    }
    sim_assert_done(n, rcptest_scale(5000));
    rcp_conn_close(c);
    sim_free(n);
}
END_TEST

/* "$1099511627776": a 1 TiB bulk announced, 3 bytes sent. Nothing of that
 * size may be allocated; A fails (its deadline, or the I/O timeout drops
 * the connection), B behind it too, never with each other's bytes; then
 * the connection is remade and works. */
START_TEST(huge_bulk_length)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a, b;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "expect GET a\nsend \"$1099511627776\\r\\nabc\"\nexpect GET b\nsend \"$1\\r\\nb\\r\\n\"\n"
                 "expect-close\n%s",
              after);
    c = open_conn(n, rcptest_scale(400));
    send_get(c, &a, "a", rcptest_scale(200));
    await(&a);
    send_get(c, &b, "b", 0);
    await(&b);
    ck_assert_msg(a.type == RCP_REPLY_ERROR && (a.err == RCP_ERR_TIMEOUT || a.err == RCP_ERR_PROTOCOL ||
                                                a.err == RCP_ERR_IO),
                  "A: type %d err %d %s", a.type, a.err, a.str);
    ck_assert_msg(b.type == RCP_REPLY_ERROR && (b.err == RCP_ERR_PROTOCOL || b.err == RCP_ERR_IO),
                  "B: type %d err %d %s", b.type, b.err, b.str);
    check_recovers(c, n, 1);
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_free(n);
}
END_TEST

/* Loads script (GET a answered by it, then the recovery), opens a
 * connection with max_reply_bytes 1 MiB, sends GET a and checks that it
 * failed with RCP_ERR_TOO_LARGE. Returns the connection. */
static rcp_conn *capped_too_large(sim_node *n, const char *script, sim_fut *a)
{
    rcp_conn_options o;
    rcp_conn *c = NULL;
    char err[512] = "";
    sim_loadf(n, "%sexpect-close\n%s", script, after);
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.request_timeout_ms = rcptest_scale(5000);
    o.reconnect_min_ms = 5;
    o.reconnect_max_ms = 50;
    o.max_reply_bytes = (size_t)1 << 20;
    ck_assert_msg(rcp_conn_open(&o, &c, err, sizeof err) == RCP_OK, "open: %s", err);
    send_get(c, a, "a", 0);
    await(a);
    ck_assert_msg(a->type == RCP_REPLY_ERROR && a->err == RCP_ERR_TOO_LARGE,
                  "A: type %d err %d %s", a->type, a->err, a->str);
    return c;
}

/* A node that streams a bulk announced as 2^40 bytes, 32 KiB a write, for
 * as long as the client reads: with max_reply_bytes 1 MiB the client
 * stops holding it past the cap (RCP_ERR_TOO_LARGE, the connection
 * dropped), then recovers. The reader never held much more than the cap:
 * the connection's stats count what was read. */
START_TEST(streamed_huge_bulk_capped)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c = NULL;
    rcp_conn_stats st;
    sim_fut a;
    char chunk[32768 + 32];
    size_t k, len = 0, cap = (size_t)2 << 20, used = 0;
    char *script = malloc(200 + 64 * sizeof chunk);
    ck_assert_ptr_nonnull(n);
    ck_assert_ptr_nonnull(script);
    memcpy(chunk, "send \"", 6);
    memset(chunk + 6, 'x', 32768);
    memcpy(chunk + 6 + 32768, "\"\n", 3);
    used += (size_t)sprintf(script, "expect GET a\nsend \"$1099511627776\\r\\n\"\n");
    for (k = 0; k < 64; k++) { /* 2 MiB: twice the cap */
        memcpy(script + used, chunk, 6 + 32768 + 2);
        used += 6 + 32768 + 2;
    }
    script[used] = '\0';
    c = capped_too_large(n, script, &a);
    free(script);
    ck_assert_msg(strstr(a.str, "max_reply_bytes") != NULL, "%s", a.str);
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    len = st.bytes_in;
    ck_assert_msg(len < cap, "read %zu bytes of a reply capped at 1 MiB", len);
    check_recovers(c, n, 1);
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_free(n);
}
END_TEST

/* The same with an array announced as 2^31 - 1 elements and small
 * elements streamed: what the client builds of the reply is counted, and
 * past 1 MiB it stops (65,536 integers, about 4 MiB of reply objects). */
START_TEST(streamed_huge_array_capped)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c = NULL;
    sim_fut a;
    size_t k, used = 0, per = 8192, line = 8 + per * 6;
    char *script = malloc(100 + 8 * line);
    ck_assert_ptr_nonnull(n);
    ck_assert_ptr_nonnull(script);
    used += (size_t)sprintf(script, "expect GET a\nsend \"*2147483647\\r\\n\"\n");
    for (k = 0; k < 8; k++) {
        used += (size_t)sprintf(script + used, "send \"");
        for (size_t j = 0; j < per; j++) {
            memcpy(script + used, ":1\\r\\n", 6);
            used += 6;
        }
        used += (size_t)sprintf(script + used, "\"\n");
    }
    c = capped_too_large(n, script, &a);
    free(script);
    check_recovers(c, n, 1);
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_free(n);
}
END_TEST

/* The cluster path: a garbage reply to a read is retried (read-only,
 * safe) and then answered; a write is not resent (it may have run). */
START_TEST(cluster_protocol_error)
{
    sim_node *n[1];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    rcp_reply *r;
    char a0[64];
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n"
                    "expect GET k\nsend \"!bad\\r\\n\"\nexpect GET k\nsend \"$2\\r\\nok\\r\\n\"\n"
                    "expect INCR k\nsend \"!bad\\r\\n\"\n",
              sim_prelude);
    sim_cluster_options(&o, &no, sim_addr(n[0], a0, sizeof a0));
    cl = sim_open(&o);
    r = rcp_cluster_command(cl, "GET k");
    ck_assert_msg(r->type == RCP_REPLY_STRING && strcmp(r->str, "ok") == 0, "%d %s", r->err, r->str);
    rcp_reply_free(r);
    r = rcp_cluster_command(cl, "INCR k");
    ck_assert_int_eq(r->err, RCP_ERR_PROTOCOL);
    rcp_reply_free(r);
    sim_assert_done(n[0], rcptest_scale(3000));
    rcptest_sleep_ms(100);
    ck_assert_uint_eq(sim_count(n[0], "INCR k"), 1);
    rcp_cluster_close(cl);
    sim_free_all(n, 1);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("replies");
    tcase_add_loop_test(tc, malformed_reply, 0, (int)(sizeof garbage / sizeof garbage[0]));
    RCPTEST_ADD(tc, split_byte_by_byte, closed_mid_reply, more_replies_than_requests);
    tcase_add_loop_test(tc, stray_reply_on_idle_connection, 0, 2);
    RCPTEST_ADD(tc, closed_after_lone_reply);
    RCPTEST_ADD(tc, huge_bulk_length, streamed_huge_bulk_capped, streamed_huge_array_capped,
                cluster_protocol_error);
    return sim_run("sim-replies", tc);
}
