/* test_sink.c: streamed reads (rcp_sink) against what a real server will
 * not do on demand: a bulk cut off mid-value (RCP_ERR_IO, the sink holds a
 * prefix), a bulk longer than it announced (a protocol error: the
 * connection is dropped), a header split across reads, a value that
 * trickles in one byte per read, a reply for an ordinary request in the
 * same read as the end of a streamed value, a deadline that passes
 * mid-value (the rest is discarded, the connection kept, the next request
 * gets its own reply), and, on a cluster, MOVED / ASK / TRYAGAIN before
 * the bulk (followed; only the final node's value reaches the sink) and a
 * streamed read cut after it was written (not resent). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* A callback sink that keeps what it is given (up to 256 bytes) and
 * counts calls. Read by the test once the request is resolved. */
typedef struct keep_sink {
    rcp_sink s;
    char got[256];
    size_t len;
    long calls;
    int gaps; /* a chunk whose offset is not where the last one ended */
} keep_sink;

static int keep_fn(void *ud, const char *data, size_t len, uint64_t off, uint64_t total)
{
    keep_sink *k = ud;
    (void)total;
    if (off != k->len)
        k->gaps++;
    if (k->len + len <= sizeof k->got - 1) {
        memcpy(k->got + k->len, data, len);
        k->len += len;
        k->got[k->len] = 0;
    }
    k->calls++;
    return 0;
}

static void keep_init(keep_sink *k)
{
    memset(k, 0, sizeof *k);
    k->s.kind = RCP_SINK_CALLBACK;
    k->s.fn = keep_fn;
    k->s.ud = k;
}

static rcp_conn *open_conn(sim_node *n, int request_timeout_ms)
{
    rcp_conn_options o;
    rcp_conn *c = NULL;
    char err[512] = "";
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.connect_timeout_ms = rcptest_scale(1000);
    o.request_timeout_ms = request_timeout_ms;
    o.io_timeout_ms = rcptest_scale(5000);
    o.reconnect_min_ms = 5;
    o.reconnect_max_ms = 50;
    ck_assert_msg(rcp_conn_open(&o, &c, err, sizeof err) == RCP_OK, "open: %s", err);
    return c;
}

static void send_sink(rcp_conn *c, sim_fut *sf, const char *key, keep_sink *k, int timeout_ms)
{
    const char *argv[2] = {"GET", key};
    sim_fut_init(sf, timeout_ms);
    ck_assert_int_eq(rcp_conn_send_argv_sink(c, &sf->f, 2, argv, NULL, &k->s), RCP_OK);
}

static void await(sim_fut *sf)
{
    ck_assert_msg(sim_fut_wait(sf, rcptest_scale(10000)) == 0, "a future was never resolved");
}

static void want_err(sim_fut *sf, int code)
{
    await(sf);
    ck_assert_msg(sf->type == RCP_REPLY_ERROR && sf->err == code,
                  "want error %s, got type %d err %s \"%s\"", rcp_err_name(code), sf->type,
                  rcp_err_name(sf->err), sf->str);
    ck_assert_int_eq(sf->calls, 1);
}

static void want_len(sim_fut *sf, long long len)
{
    await(sf);
    ck_assert_msg(sf->type == RCP_REPLY_INTEGER && sf->integer == len,
                  "want length %lld, got type %d err %s \"%s\"", len, sf->type,
                  rcp_err_name(sf->err), sf->str);
}

/* After the connection was dropped: a new one answers (requests refused
 * or failed as not sent while it reconnects are tried again). */
static void recovers(rcp_conn *c, sim_node *n)
{
    uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(3000) * 1000000ull;
    rcp_reply *r;
    while ((r = rcp_conn_command(c, "GET after"))->err == RCP_ERR_NOT_SENT) {
        rcp_reply_free(r);
        ck_assert_msg(rcptest_now_ns() < until, "not reconnected in time");
        rcptest_sleep_ms(5);
    }
    ck_assert_msg(r->type == RCP_REPLY_STRING && strcmp(r->str, "after") == 0, "after: %d %s",
                  r->type, r->str);
    rcp_reply_free(r);
    sim_assert_done(n, rcptest_scale(5000));
}

static const char after[] = "expect GET after\nsend \"$5\\r\\nafter\\r\\n\"\n";

/* A value that breaks off: cut by a close (the request was written:
 * RCP_ERR_IO), or longer than announced (RCP_ERR_PROTOCOL: the connection
 * is dropped, the next one answers). The sink holds a prefix, never more. */
static const struct {
    const char *script;
    int err;
    const char *why;
} broken[] = {
    {"expect GET a\nsend \"$10\\r\\nhel\"\nstall 20\nclose\n", RCP_ERR_IO, ""},
    {"expect GET a\nsend \"$3\\r\\nabcdef\\r\\n\"\nexpect-close\n", RCP_ERR_PROTOCOL,
     "longer than its announced length"},
};

START_TEST(broken_value)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a;
    keep_sink k;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "%s%s", broken[_i].script, after);
    c = open_conn(n, rcptest_scale(3000));
    keep_init(&k);
    send_sink(c, &a, "a", &k, 0);
    want_err(&a, broken[_i].err);
    ck_assert_msg(strstr(a.str, broken[_i].why) != NULL, "%s", a.str);
    ck_assert_str_eq(k.got, _i ? "abc" : "hel");
    recovers(c, n);
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_free(n);
}
END_TEST

/* The header comes in two reads, and an ordinary reply rides in the same
 * read as the streamed value's end: each gets its own. */
START_TEST(header_split_and_reply_behind)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a, b;
    keep_sink k;
    rcp_conn_stats st;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "expect GET a\nexpect GET b\nsend \"$1\"\nstall 20\nsend \"1\\r\\nhel\"\nstall 20\n"
                 "send \"lo world\\r\\n$3\\r\\nbye\\r\\n\"\n");
    c = open_conn(n, rcptest_scale(3000));
    keep_init(&k);
    send_sink(c, &a, "a", &k, 0);
    sim_fut_init(&b, 0);
    ck_assert_int_eq(rcp_conn_send(c, &b.f, "GET b"), RCP_OK);
    want_len(&a, 11);
    await(&b);
    ck_assert_msg(b.type == RCP_REPLY_STRING && strcmp(b.str, "bye") == 0, "b: %d %s", b.type,
                  b.str);
    ck_assert_str_eq(k.got, "hello world");
    ck_assert_int_eq(k.gaps, 0);
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    ck_assert_uint_eq(st.disconnects, 0);
    sim_assert_done(n, rcptest_scale(5000));
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_free(n);
}
END_TEST

/* One byte per read, sync (the caller reads its own reply: the
 * lone-caller path) then async (the loop reads). */
START_TEST(value_bytewise)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a;
    keep_sink k;
    rcp_reply *r;
    const char *argv[2] = {"GET", "s"};
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "expect GET s\nsend-bytewise \"$12\\r\\nhello\\r\\nworld\\r\\n\"\n"
                 "expect GET a\nsend-bytewise \"$5\\r\\n$-1\\r\\n\\r\\n\"\n");
    c = open_conn(n, rcptest_scale(3000));
    keep_init(&k);
    r = rcp_conn_command_argv_sink(c, 2, argv, NULL, &k.s);
    ck_assert_msg(r->type == RCP_REPLY_INTEGER && r->integer == 12, "%d %s", r->type,
                  r->str ? r->str : "");
    rcp_reply_free(r);
    ck_assert_str_eq(k.got, "hello\r\nworld");
    ck_assert_int_eq(k.gaps, 0);
    /* 12 reads of one byte each, unless a busy machine let two of the
     * node's writes (1 ms apart) meet in one read */
    ck_assert_int_ge(k.calls, 2);
    keep_init(&k);
    send_sink(c, &a, "a", &k, 0);
    want_len(&a, 5);
    ck_assert_str_eq(k.got, "$-1\r\n"); /* protocol-looking bytes are data */
    ck_assert_int_eq(k.gaps, 0);
    sim_assert_done(n, rcptest_scale(5000));
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_free(n);
}
END_TEST

/* A deadline passes while the value streams: the future resolves with
 * RCP_ERR_TIMEOUT, nothing more reaches the sink, the rest of the value is
 * read and dropped, and the request behind it on the same connection gets
 * its own reply. _i 0: async; 1: a sync caller on its own thread. The
 * node's pause is ten deadlines long: a caller starved of the CPU past
 * all of it would find the whole value there and rightly return it. */
START_TEST(timeout_mid_stream)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a, b;
    keep_sink k;
    rcp_conn_stats st;
    int t = rcptest_scale(200);
    ck_assert_ptr_nonnull(n);
    if (_i == 0) /* b is written right behind a */
        sim_loadf(n, "expect GET a\nexpect GET b\nsend \"$10\\r\\nhel\"\nstall %d\n"
                     "send \"lo12345\\r\\n$1\\r\\nb\\r\\n\"\n",
                  10 * t);
    else /* the sync caller returns before b is sent */
        sim_loadf(n, "expect GET a\nsend \"$10\\r\\nhel\"\nstall %d\nsend \"lo12345\\r\\n\"\n"
                     "expect GET b\nsend \"$1\\r\\nb\\r\\n\"\n",
                  10 * t);
    c = open_conn(n, _i ? t : rcptest_scale(3000));
    keep_init(&k);
    sim_fut_init(&b, rcptest_scale(5000));
    if (_i == 0) {
        send_sink(c, &a, "a", &k, t);
        ck_assert_int_eq(rcp_conn_send(c, &b.f, "GET b"), RCP_OK);
        want_err(&a, RCP_ERR_TIMEOUT);
    } else {
        const char *argv[2] = {"GET", "a"};
        rcp_reply *r;
        sim_fut_init(&a, 0);
        r = rcp_conn_command_argv_sink(c, 2, argv, NULL, &k.s);
        ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_TIMEOUT, "%d %s", r->type,
                      r->str ? r->str : "");
        rcp_reply_free(r);
        ck_assert_int_eq(rcp_conn_send(c, &b.f, "GET b"), RCP_OK);
    }
    await(&b);
    ck_assert_msg(b.type == RCP_REPLY_STRING && strcmp(b.str, "b") == 0, "b: %d %s", b.type,
                  b.str);
    ck_assert_str_eq(k.got, "hel"); /* nothing after the deadline */
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    ck_assert_uint_eq(st.disconnects, 0);
    ck_assert_int_eq(sim_conns(n), 1);
    sim_assert_done(n, rcptest_scale(5000));
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_free(n);
}
END_TEST

/* A cancel meets a streamed read. _i 0: written, its value not begun:
 * WRITTEN, the value is discarded when it comes and the sink never sees a
 * byte; the request behind it gets its own reply. _i 1: its value is
 * streaming to the sink: TOO_LATE (only the socket's owner could stop
 * it), and the value completes. The connection is kept either way. */
START_TEST(cancel_streamed)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a, b;
    keep_sink k;
    rcp_conn_stats st;
    ck_assert_ptr_nonnull(n);
    if (_i == 0)
        sim_loadf(n, "expect GET a\nexpect GET b\nstall 300\n"
                     "send \"$5\\r\\nhello\\r\\n$1\\r\\nb\\r\\n\"\n");
    else
        sim_loadf(n, "expect GET a\nsend \"$10\\r\\nhel\"\nstall 500\nsend \"lo12345\\r\\n\"\n"
                     "expect GET b\nsend \"$1\\r\\nb\\r\\n\"\n");
    c = open_conn(n, rcptest_scale(5000));
    keep_init(&k);
    sim_fut_init(&b, rcptest_scale(5000));
    send_sink(c, &a, "a", &k, 0);
    if (_i == 0) {
        ck_assert_int_eq(rcp_conn_send(c, &b.f, "GET b"), RCP_OK);
        ck_assert_uint_eq(sim_wait_count(n, "GET b", 1, rcptest_scale(5000)), 1);
        ck_assert_int_eq(rcp_conn_cancel(c, &a.f), RCP_CANCEL_WRITTEN);
        want_err(&a, RCP_ERR_CANCELLED);
    } else {
        ck_assert_uint_eq(sim_wait_count(n, "GET a", 1, rcptest_scale(5000)), 1);
        rcptest_sleep_ms(100); /* "hel" reaches the sink; the node then stalls 500 ms */
        ck_assert_int_eq(rcp_conn_cancel(c, &a.f), RCP_CANCEL_TOO_LATE);
        want_len(&a, 10);
        ck_assert_int_eq(rcp_conn_send(c, &b.f, "GET b"), RCP_OK);
    }
    await(&b);
    ck_assert_msg(b.type == RCP_REPLY_STRING && strcmp(b.str, "b") == 0, "b: %d %s", b.type,
                  b.str);
    ck_assert_str_eq(k.got, _i == 0 ? "" : "hello12345");
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    ck_assert_uint_eq(st.disconnects, 0);
    sim_assert_done(n, rcptest_scale(5000));
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_free(n);
}
END_TEST

/* ---- cluster ---- */

/* Node 0 owns every slot by the map; its answer to GET foo is `first`;
 * node 1 answers with the value. _i: 0 async, 1 sync. */
static void cluster_redirected(int sync, const char *first, int moved_to_1)
{
    sim_node *n[2];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    keep_sink k;
    char a0[64];
    const char *argv[2] = {"GET", "foo"};
    ck_assert_int_eq(sim_start(n, 2), 0);
    for (int i = 0; i < 2; i++)
        sim_loadf(n[i], "%son CLUSTER SLOTS => slots 0-16383=$P0\n", sim_prelude);
    sim_loadf(n[0], "expect GET foo\nsend \"%s\"\n", first);
    if (moved_to_1)
        sim_loadf(n[1], "expect GET foo\nsend \"$5\\r\\nhello\\r\\n\"\n");
    else
        sim_loadf(n[0], "expect GET foo\nsend \"$5\\r\\nhello\\r\\n\"\n");
    sim_cluster_options(&o, &no, sim_addr(n[0], a0, sizeof a0));
    cl = sim_open(&o);
    keep_init(&k);
    if (sync) {
        rcp_reply *r = rcp_cluster_command_argv_sink(cl, 2, argv, NULL, &k.s);
        ck_assert_msg(r->type == RCP_REPLY_INTEGER && r->integer == 5, "%d %s", r->type,
                      r->str ? r->str : "");
        rcp_reply_free(r);
    } else {
        sim_fut f;
        sim_fut_init(&f, 0);
        ck_assert_int_eq(rcp_cluster_send_argv_sink(cl, &f.f, 2, argv, NULL, &k.s), RCP_OK);
        want_len(&f, 5);
        sim_fut_destroy(&f);
    }
    ck_assert_str_eq(k.got, "hello");/* only the final node's value */
    ck_assert_int_eq(k.gaps, 0);
    sim_assert_done(n[0], rcptest_scale(5000));
    sim_assert_done(n[1], rcptest_scale(5000));
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}

START_TEST(cluster_moved_then_streamed)
{
    cluster_redirected(_i, "-MOVED 12182 127.0.0.1:$P1\\r\\n", 1);
}
END_TEST

START_TEST(cluster_ask_then_streamed)
{
    cluster_redirected(_i, "-ASK 12182 127.0.0.1:$P1\\r\\n", 1);
}
END_TEST

START_TEST(cluster_tryagain_then_streamed)
{
    cluster_redirected(_i, "-TRYAGAIN Multiple keys request during rehashing of slot\\r\\n", 0);
}
END_TEST

/* A read-only GET is resent after an I/O error, unless it streams: part
 * of its value reached the sink already. */
START_TEST(cluster_streamed_not_resent)
{
    sim_node *n[1];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    keep_sink k;
    sim_fut f;
    char a0[64];
    const char *argv[2] = {"GET", "foo"};
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n"
                    "expect GET foo\nsend \"$10\\r\\nhel\"\nstall 20\nclose\n",
              sim_prelude);
    sim_cluster_options(&o, &no, sim_addr(n[0], a0, sizeof a0));
    cl = sim_open(&o);
    keep_init(&k);
    sim_fut_init(&f, 0);
    ck_assert_int_eq(rcp_cluster_send_argv_sink(cl, &f.f, 2, argv, NULL, &k.s), RCP_OK);
    want_err(&f, RCP_ERR_IO);
    ck_assert_str_eq(k.got, "hel");
    sim_assert_done(n[0], rcptest_scale(5000));
    ck_assert_uint_eq(sim_count(n[0], "GET foo"), 1);
    /* A multi-key command across slots cannot stream. */
    {
        const char *mget[3] = {"MGET", "foo", "bar"};
        rcp_reply *r = rcp_cluster_command_argv_sink(cl, 3, mget, NULL, &k.s);
        ck_assert_int_eq(r->err, RCP_ERR_UNSUPPORTED);
        rcp_reply_free(r);
    }
    rcp_cluster_close(cl);
    sim_fut_destroy(&f);
    sim_free_all(n, 1);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("sink");
    tcase_add_loop_test(tc, broken_value, 0, (int)(sizeof broken / sizeof broken[0]));
    tcase_add_test(tc, header_split_and_reply_behind);
    tcase_add_test(tc, value_bytewise);
    tcase_add_loop_test(tc, timeout_mid_stream, 0, 2);
    tcase_add_loop_test(tc, cancel_streamed, 0, 2);
    tcase_add_loop_test(tc, cluster_moved_then_streamed, 0, 2);
    tcase_add_loop_test(tc, cluster_ask_then_streamed, 0, 2);
    tcase_add_loop_test(tc, cluster_tryagain_then_streamed, 0, 2);
    tcase_add_test(tc, cluster_streamed_not_resent);
    return sim_run("sim-sink", tc);
}
