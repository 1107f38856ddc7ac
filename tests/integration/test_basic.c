/* test_basic.c: the sync API against a real server: strings, integers,
 * nil, arrays, status and server error replies, with the format and the
 * argv entry points, with and without the lone-caller fast path. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

static rcpt_server srv;
static rcp_conn *conn;

static void open_conn(int fast_path)
{
    rcp_conn_options o;

    rcpt_options(&o, &srv);
    o.fast_path = fast_path;
    o.request_timeout_ms = 10000;
    conn = rcpt_conn_open_ok(&o);
    ck_assert_ptr_nonnull(conn);
}

static void check_basic_commands(void)
{
    char d[256];
    rcp_reply *r;
    const char *argv[4];
    size_t argvlen[4];
    static const char bin[] = {'v', 0, '1', '\r', '\n'};

    /* status reply */
    r = rcp_conn_command(conn, "SET %s %b", "k:basic", "hello", (size_t)5);
    ck_assert_msg(rcpt_is_status(r, "OK"), "SET: %s", rcptest_describe(r, d, sizeof d));
    ck_assert(!rcp_reply_is_error(r));
    rcp_reply_free(r);

    /* string reply */
    r = rcp_conn_command(conn, "GET %s", "k:basic");
    ck_assert_msg(rcpt_is_cstring(r, "hello"), "GET: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* %b with bytes that would break an inline command */
    r = rcp_conn_command(conn, "SET %s %b", "k:bin", bin, sizeof bin);
    ck_assert_msg(rcpt_is_status(r, "OK"), "SET bin: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "GET %s", "k:bin");
    ck_assert_msg(rcpt_is_string(r, bin, sizeof bin), "GET bin: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* argv entry point, with and without lengths */
    argv[0] = "SET";
    argv[1] = "k:argv";
    argv[2] = "12345678";
    argvlen[0] = 3;
    argvlen[1] = 6;
    argvlen[2] = 4; /* only "1234" */
    r = rcp_conn_command_argv(conn, 3, argv, argvlen);
    ck_assert_msg(rcpt_is_status(r, "OK"), "SET argv: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    argv[0] = "GET";
    argv[1] = "k:argv";
    r = rcp_conn_command_argv(conn, 2, argv, NULL);
    ck_assert_msg(rcpt_is_cstring(r, "1234"), "GET argv: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* integer replies */
    argv[0] = "INCR";
    r = rcp_conn_command_argv(conn, 2, argv, NULL);
    ck_assert_msg(rcptest_is_int(r, 1235), "INCR: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "INCRBY %s %d", "k:argv", -2000);
    ck_assert_msg(rcptest_is_int(r, -765), "INCRBY: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "INCRBY %s %lld", "k:argv", 9000000000LL);
    ck_assert_msg(rcptest_is_int(r, 8999999235LL), "INCRBY %%lld: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* nil reply for a missing key */
    r = rcp_conn_command(conn, "GET %s", "k:missing");
    ck_assert_msg(rcptest_is_nil(r), "GET missing: %s", rcptest_describe(r, d, sizeof d));
    ck_assert(!rcp_reply_is_error(r));
    rcp_reply_free(r);

    /* DEL returns the number removed */
    r = rcp_conn_command(conn, "DEL %s %s %s", "k:basic", "k:argv", "k:missing");
    ck_assert_msg(rcptest_is_int(r, 2), "DEL: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "GET %s", "k:basic");
    ck_assert_msg(rcptest_is_nil(r), "GET after DEL: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* array replies: MGET with a nil inside, LRANGE, an empty array */
    r = rcp_conn_command(conn, "MSET %s %s %s %s", "k:a", "1", "k:b", "two");
    ck_assert_msg(rcpt_is_status(r, "OK"), "MSET: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "MGET %s %s %s", "k:a", "k:nope", "k:b");
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->err == RCP_OK && r->elements == 3,
                  "MGET: %s", rcptest_describe(r, d, sizeof d));
    ck_assert_ptr_nonnull(r->element);
    ck_assert_msg(rcpt_is_cstring(r->element[0], "1"), "MGET[0]: %s",
                  rcptest_describe(r->element[0], d, sizeof d));
    ck_assert_msg(rcptest_is_nil(r->element[1]), "MGET[1]: %s",
                  rcptest_describe(r->element[1], d, sizeof d));
    ck_assert_msg(rcpt_is_cstring(r->element[2], "two"), "MGET[2]: %s",
                  rcptest_describe(r->element[2], d, sizeof d));
    rcp_reply_free(r);

    r = rcp_conn_command(conn, "RPUSH %s %s %s %s", "k:list", "x", "y", "z");
    ck_assert_msg(rcptest_is_int(r, 3), "RPUSH: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "LRANGE %s 0 -1", "k:list");
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 3, "LRANGE: %s",
                  rcptest_describe(r, d, sizeof d));
    ck_assert(rcpt_is_cstring(r->element[0], "x"));
    ck_assert(rcpt_is_cstring(r->element[1], "y"));
    ck_assert(rcpt_is_cstring(r->element[2], "z"));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "LRANGE %s 0 -1", "k:nolist");
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->err == RCP_OK && r->elements == 0,
                  "LRANGE empty: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* server error reply: type ERROR, err SERVER, the server's text kept */
    r = rcp_conn_command(conn, "INCR %s", "k:b");
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_SERVER, "INCR on text: %s",
                  rcptest_describe(r, d, sizeof d));
    ck_assert(rcp_reply_is_error(r));
    ck_assert_ptr_nonnull(r->str);
    ck_assert_uint_eq(r->len, strlen(r->str));
    ck_assert_msg(strcmp(r->str, "ERR value is not an integer or out of range") == 0,
                  "server text not kept: \"%s\"", r->str);
    rcp_reply_free(r);

    r = rcp_conn_command(conn, "NOSUCHCOMMAND %s", "x");
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_SERVER &&
                      strncmp(r->str, "ERR unknown command", 19) == 0,
                  "unknown command: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* the connection still serves requests after error replies */
    r = rcp_conn_command(conn, "PING");
    ck_assert_msg(rcpt_is_status(r, "PONG"), "PING: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "ECHO %s", "still here");
    ck_assert_msg(rcpt_is_cstring(r, "still here"), "ECHO: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "DBSIZE");
    ck_assert_msg(rcptest_is_int(r, 4), "DBSIZE: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    rcp_reply_free(NULL); /* documented as ignored */
}

START_TEST(test_basic_fast_path)
{
    open_conn(1);
    check_basic_commands();
}
END_TEST

START_TEST(test_basic_no_fast_path)
{
    open_conn(0);
    check_basic_commands();
}
END_TEST

/* Sync calls from one thread, many in a row: each reply is its own. */
START_TEST(test_sequential_echo)
{
    int i;

    open_conn(1);
    for (i = 0; i < 2000; i++) {
        char tok[32];
        char d[256];
        rcp_reply *r;

        snprintf(tok, sizeof tok, "tok-%d", i);
        r = rcp_conn_command(conn, "ECHO %s", tok);
        ck_assert_msg(rcpt_is_cstring(r, tok), "ECHO %s: %s", tok,
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
}
END_TEST

START_TEST(test_stats_count)
{
    rcp_conn_stats before;
    rcp_conn_stats after;
    int i;

    open_conn(1);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &before), RCP_OK);
    for (i = 0; i < 10; i++) {
        rcp_reply *r = rcp_conn_command(conn, "PING");
        ck_assert(rcpt_is_status(r, "PONG"));
        rcp_reply_free(r);
    }
    ck_assert_int_eq(rcp_conn_get_stats(conn, &after), RCP_OK);
    ck_assert_uint_eq(after.requests - before.requests, 10);
    ck_assert_uint_eq(after.replies - before.replies, 10);
    ck_assert_uint_ge(after.bytes_out - before.bytes_out, 10 * 14);
    ck_assert_uint_ge(after.bytes_in - before.bytes_in, 10 * 7);
    ck_assert_uint_eq(after.disconnects, 0);
    ck_assert_uint_eq(after.reconnects, 0);
    ck_assert_int_eq(rcp_conn_get_stats(NULL, &after), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_conn_get_stats(conn, NULL), RCP_ERR_INVALID);
}
END_TEST

START_TEST(test_open_refused)
{
    rcp_conn_options o;
    rcp_conn *c = (rcp_conn *)&o; /* must be reset to NULL */
    char err[512] = "";
    int port = srv.port;
    int rc;
    int64_t t0;

    /* Nothing listens once the server is gone. */
    rcpt_server_stop(&srv);
    rcp_conn_options_init(&o);
    o.host = "127.0.0.1";
    o.port = port;
    o.connect_timeout_ms = 1000;
    t0 = rcptest_now_ms();
    rc = rcp_conn_open(&o, &c, err, sizeof err);
    ck_assert_msg(rc == RCP_ERR_CONNECT, "open on a closed port: %d (%s)", rc, rcp_strerror(rc));
    ck_assert_ptr_null(c);
    ck_assert_msg(err[0] != '\0', "errbuf left empty");
    ck_assert_msg(strstr(err, "127.0.0.1") != NULL, "errbuf does not name the address: %s", err);
    ck_assert_msg(rcptest_now_ms() - t0 < 1000 + 2000, "open took %lld ms",
                  (long long)(rcptest_now_ms() - t0));

    /* NULL errbuf is allowed */
    rc = rcp_conn_open(&o, &c, NULL, 0);
    ck_assert_int_eq(rc, RCP_ERR_CONNECT);
    ck_assert_ptr_null(c);

    /* invalid arguments */
    ck_assert_int_eq(rcp_conn_open(NULL, &c, err, sizeof err), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_conn_open(&o, NULL, err, sizeof err), RCP_ERR_INVALID);
}
END_TEST

START_TEST(test_defaults)
{
    rcp_conn_options o;

    memset(&o, 0x5a, sizeof o);
    rcp_conn_options_init(&o);
    ck_assert_str_eq(o.host, "127.0.0.1");
    ck_assert_int_eq(o.port, 6379);
    ck_assert_ptr_null(o.username);
    ck_assert_ptr_null(o.password);
    ck_assert_ptr_null(o.client_name);
    ck_assert_int_eq(o.connect_timeout_ms, 2000);
    ck_assert_int_eq(o.request_timeout_ms, 5000);
    ck_assert_int_eq(o.io_timeout_ms, 10000);
    ck_assert_uint_eq(o.io_threads, 1);
    ck_assert_uint_eq(o.batch_delay_us, 0);
    ck_assert_uint_eq(o.max_batch_commands, 1000);
    ck_assert_uint_eq(o.max_batch_bytes, 1024 * 1024);
    ck_assert_uint_eq(o.max_inflight, 4096);
    ck_assert_uint_eq(o.max_pending_bytes, (size_t)64 * 1024 * 1024);
    ck_assert_uint_eq(o.max_request_bytes, (size_t)512 * 1024 * 1024);
    ck_assert_int_eq(o.queue_policy, RCP_QUEUE_BLOCK);
    ck_assert_int_eq(o.reconnect_min_ms, 10);
    ck_assert_int_eq(o.reconnect_max_ms, 2000);
    ck_assert_int_eq(o.keepalive_s, 60);
    ck_assert_int_eq(o.fast_path, 1);
    ck_assert_int_eq(o.cork, 0);
    ck_assert_int_eq(o.spare_conns, 3);
    ck_assert(o.event_cb == NULL);
    ck_assert_ptr_null(o.event_data);
}
END_TEST

/* Options strings are copied: the caller's buffers may change after open. */
START_TEST(test_options_copied)
{
    rcp_conn_options o;
    char host[32];
    char name[32];
    char err[512] = "";
    char d[256];
    rcp_reply *r;
    int rc;

    snprintf(host, sizeof host, "127.0.0.1");
    snprintf(name, sizeof name, "copied-name");
    rcpt_options(&o, &srv);
    o.host = host;
    o.client_name = name;
    rc = rcp_conn_open(&o, &conn, err, sizeof err);
    ck_assert_msg(rc == RCP_OK, "open: %s", err);
    memset(host, 'x', sizeof host - 1);
    memset(name, 'y', sizeof name - 1);
    r = rcp_conn_command(conn, "CLIENT GETNAME");
    ck_assert_msg(rcpt_is_cstring(r, "copied-name"), "CLIENT GETNAME: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}
END_TEST

/* An async future the test thread waits on (spinning with short sleeps:
 * the point is what the send itself did, not how the wait is woken). */
typedef struct idle_future {
    rcp_future f;
    atomic_int done;
    int ok;
} idle_future;

static void idle_resolve(rcp_future *f, rcp_reply *r)
{
    idle_future *w = (idle_future *)f;
    w->ok = r && r->type == RCP_REPLY_STRING && r->len == 4 && memcmp(r->str, "idle", 4) == 0;
    atomic_store(&w->done, 1);
}

/* An async send on an idle connection: written by the sending thread
 * before the send returns (write_calls has grown), the loop not woken for
 * it (loop_wakes does not grow); the reply still comes through the loop.
 * With fast_path off, the loop writes every request. */
static void idle_sends(int fast_path)
{
    rcp_conn_stats a, b, end, start;
    memset(&start, 0, sizeof start);
    int i, written_by_caller = 0;
    open_conn(fast_path);
    for (i = 0; i < 21; i++) {
        idle_future w;
        int rc;
        memset(&w, 0, sizeof w);
        w.f.resolve = idle_resolve;
        rcptest_sleep_ms(10); /* the loop is done with the previous reply */
        ck_assert_int_eq(rcp_conn_get_stats(conn, &a), RCP_OK);
        if (i == 1)
            start = a; /* the first send may ring: it sets the first timer */
        rc = rcp_conn_send(conn, &w.f, "ECHO %s", "idle");
        ck_assert_int_eq(rc, RCP_OK);
        ck_assert_int_eq(rcp_conn_get_stats(conn, &b), RCP_OK);
        if (b.write_calls > a.write_calls && b.caller_writes == a.caller_writes + 1)
            written_by_caller++;
        for (int k = 0; k < 5000 && !atomic_load(&w.done); k++)
            rcptest_sleep_ms(1);
        ck_assert_msg(atomic_load(&w.done) && w.ok, "request %d: no reply, or a wrong one", i);
    }
    ck_assert_int_eq(rcp_conn_get_stats(conn, &end), RCP_OK);
    if (fast_path) {
        /* Every send should qualify; a loop thread preempted for 10 ms in
         * the middle of its previous pass (a loaded sanitizer run) takes
         * one from us, not more than a few. The loop is rung only when the
         * reply woke it before the sender had left (it defers to the
         * sender, who rings it back): a race the sender mostly wins. */
        ck_assert_msg(written_by_caller >= 15, "only %d of 21 idle sends written by the caller",
                      written_by_caller);
        ck_assert_msg(end.loop_wakes - start.loop_wakes <= 10,
                      "loop woken %llu times for 20 idle sends",
                      (unsigned long long)(end.loop_wakes - start.loop_wakes));
    } else {
        ck_assert_uint_eq(end.caller_writes, 0);
        ck_assert_uint_eq(written_by_caller, 0);
    }
    ck_assert_uint_eq(end.replies - start.replies, 20);

    /* A request larger than the socket takes at once: the sender writes
     * what fits and hands the rest to the loop (writability), which
     * finishes it; the value comes back whole. (Checked by hand: with
     * fast_path the sender took it, 5 send() calls in all.) */
    {
        enum { BIG = 8 << 20 };
        char *v = malloc(BIG);
        idle_future w;
        rcp_reply *r;
        ck_assert_ptr_nonnull(v);
        memset(v, 'b', BIG);
        memset(&w, 0, sizeof w);
        w.f.resolve = idle_resolve;
        rcptest_sleep_ms(10);
        ck_assert_int_eq(rcp_conn_send(conn, &w.f, "SET k:idlebig %b", v, (size_t)BIG), RCP_OK);
        for (int k = 0; k < 10000 && !atomic_load(&w.done); k++)
            rcptest_sleep_ms(1);
        ck_assert(atomic_load(&w.done)); /* resolved: not "idle", a +OK */
        r = rcp_conn_command(conn, "STRLEN k:idlebig");
        ck_assert_msg(rcptest_is_int(r, BIG), "the big value did not arrive whole");
        rcp_reply_free(r);
        free(v);
    }
}

START_TEST(test_async_idle_caller_writes)
{
    idle_sends(1);
}
END_TEST

START_TEST(test_async_idle_no_fast_path)
{
    idle_sends(0);
}
END_TEST

static void add_tests(TCase *tc)
{
    rcpt_fixture(tc, &srv, &conn, NULL);
    RCPTEST_ADD(tc, test_basic_fast_path, test_basic_no_fast_path, test_sequential_echo,
                test_stats_count, test_open_refused, test_defaults, test_options_copied,
                test_async_idle_caller_writes, test_async_idle_no_fast_path);
}

int main(void)
{
    return rcpt_main_case("basic", "basic", 60, add_tests);
}
