/* test_errors.c: caller errors. Bad arguments, blocking commands, commands
 * that change connection state and oversized requests are refused with a
 * clear code; a refused async send never calls its callback; the shared
 * connection keeps serving everyone afterwards. rcp_strerror names every
 * code. */
#include <check.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "harness.h"
#include "rcpipe.h"

static rcpt_server srv;
static rcp_conn *conn;

static atomic_int cb_calls;
static atomic_int cb_last_type;

static void count_cb(rcp_future *f, rcp_reply *reply)
{
    (void)f;
    atomic_store(&cb_last_type, reply ? reply->type : -1);
    atomic_fetch_add(&cb_calls, 1);
}

static void init_future(rcp_future *f)
{
    memset(f, 0, sizeof *f);
    f->resolve = count_cb;
}

static void open_with(size_t max_request_bytes)
{
    rcp_conn_options o;

    rcpt_options(&o, &srv);
    o.request_timeout_ms = 10000;
    if (max_request_bytes)
        o.max_request_bytes = max_request_bytes;
    conn = rcpt_conn_open_ok(&o);
}

static void setup(void)
{
    atomic_store(&cb_calls, 0);
    rcpt_server_start_ok(&srv, NULL);
}

static void teardown(void)
{
    rcpt_teardown(&srv, &conn);
}

/* Through the va_list entry points: the format checker rejects a literal
 * empty format, which is exactly the bad input under test here. */
static int send_fmt(rcp_conn *c, rcp_future *f, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = rcp_conn_sendv(c, f, fmt, ap);
    va_end(ap);
    return rc;
}

static rcp_reply *command_fmt(rcp_conn *c, const char *fmt, ...)
{
    va_list ap;
    rcp_reply *r;

    va_start(ap, fmt);
    r = rcp_conn_commandv(c, fmt, ap);
    va_end(ap);
    return r;
}

/* A sync PING: every request queued before it has been answered (or
 * failed) once it returns, so callbacks of wrongly accepted sends have run. */
static void ping_ok(void)
{
    char d[256];
    rcp_reply *r = rcp_conn_command(conn, "PING");

    ck_assert_msg(rcpt_is_status(r, "PONG"), "PING after refusals: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}

START_TEST(test_invalid_arguments)
{
    rcp_future f;
    const char *argv[2] = {"PING", NULL};
    const char *argv_null_elem[2] = {"ECHO", NULL};
    char d[256];
    rcp_reply *r;

    open_with(0);
    init_future(&f);
    ck_assert_int_eq(rcp_conn_send_argv(NULL, &f, 1, argv, NULL), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_conn_send_argv(conn, &f, 0, argv, NULL), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_conn_send_argv(conn, &f, -1, argv, NULL), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_conn_send_argv(conn, &f, 1, NULL, NULL), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_conn_send_argv(conn, NULL, 1, argv, NULL), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_conn_send_argv(conn, &f, 2, argv_null_elem, NULL), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_conn_send(NULL, &f, "PING"), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_conn_send(conn, NULL, "PING"), RCP_ERR_INVALID);
    ck_assert_int_eq(send_fmt(conn, &f, ""), RCP_ERR_INVALID);
    ck_assert_int_eq(send_fmt(conn, &f, "   "), RCP_ERR_INVALID);
    ck_assert_int_eq(send_fmt(conn, &f, NULL), RCP_ERR_INVALID);

    /* sync: an error reply, never NULL */
    r = rcp_conn_command_argv(NULL, 1, argv, NULL);
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_INVALID), "NULL handle: %s",
                  rcptest_describe(r, d, sizeof d));
    ck_assert(rcp_reply_is_error(r));
    rcp_reply_free(r);
    r = rcp_conn_command_argv(conn, 0, argv, NULL);
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_INVALID), "argc 0: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command_argv(conn, 1, NULL, NULL);
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_INVALID), "NULL argv: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(NULL, "PING");
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_INVALID), "NULL handle (fmt): %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = command_fmt(conn, "");
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_INVALID), "empty format: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    ck_assert_int_eq(rcp_reply_is_error(NULL), 0);

    ping_ok();
    ck_assert_msg(atomic_load(&cb_calls) == 0, "callback called %d times after refused sends",
                  atomic_load(&cb_calls));

    /* control: an accepted send calls it exactly once */
    ck_assert_int_eq(rcp_conn_send_argv(conn, &f, 1, argv, NULL), RCP_OK);
    ping_ok();
    ck_assert_int_eq(atomic_load(&cb_calls), 1);
    ck_assert_int_eq(atomic_load(&cb_last_type), RCP_REPLY_STATUS);
}
END_TEST

#define MAXARGS 12

struct cmdline {
    const char *args[MAXARGS];
};

static int argc_of(const struct cmdline *c)
{
    int n = 0;

    while (n < MAXARGS && c->args[n] != NULL)
        n++;
    return n;
}

/* The API takes `const char **` (not `const char *const *`): copy. */
static const char **argv_of(const struct cmdline *c, const char **buf)
{
    int i;

    for (i = 0; i < MAXARGS; i++)
        buf[i] = c->args[i];
    return buf;
}

static void join_args(const struct cmdline *c, char *out, size_t outlen)
{
    int i;

    out[0] = '\0';
    for (i = 0; i < argc_of(c); i++) {
        if (i)
            strncat(out, " ", outlen - strlen(out) - 1);
        strncat(out, c->args[i], outlen - strlen(out) - 1);
    }
}

/* Refused both ways with `code`; the sync message must contain `word`. */
static void expect_refused(const struct cmdline *c, int code, const char *word)
{
    rcp_future f;
    char line[256];
    char d[256];
    const char *a[MAXARGS];
    int argc = argc_of(c);
    int rc;
    rcp_reply *r;

    join_args(c, line, sizeof line);
    init_future(&f);
    rc = rcp_conn_send_argv(conn, &f, argc, argv_of(c, a), NULL);
    ck_assert_msg(rc == code, "send \"%s\": got %d (%s), want %d (%s)", line, rc,
                  rcp_strerror(rc), code, rcp_strerror(code));
    r = rcp_conn_command_argv(conn, argc, argv_of(c, a), NULL);
    ck_assert_msg(rcpt_is_client_error(r, code), "sync \"%s\": %s", line,
                  rcptest_describe(r, d, sizeof d));
    if (word != NULL)
        ck_assert_msg(strcasestr(r->str, word) != NULL, "sync \"%s\": message \"%s\" lacks \"%s\"",
                      line, r->str, word);
    rcp_reply_free(r);
}

static void expect_allowed(const struct cmdline *c)
{
    char line[256];
    char d[256];
    const char *a[MAXARGS];
    rcp_reply *r;

    join_args(c, line, sizeof line);
    r = rcp_conn_command_argv(conn, argc_of(c), argv_of(c, a), NULL);
    ck_assert_msg(r->err != RCP_ERR_BLOCKING_COMMAND && r->err != RCP_ERR_UNSUPPORTED &&
                      r->type != RCP_REPLY_ERROR,
                  "\"%s\" refused: %s", line, rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}

START_TEST(test_blocking_commands)
{
    static const struct cmdline blocking[] = {
        {{"BLPOP", "l", "0"}},
        {{"BRPOP", "l1", "l2", "0"}},
        {{"BRPOPLPUSH", "l", "m", "0"}},
        {{"BLMOVE", "l", "m", "LEFT", "RIGHT", "0"}},
        {{"BLMPOP", "0", "1", "l", "LEFT"}},
        {{"BZPOPMIN", "z", "0"}},
        {{"BZPOPMAX", "z", "0"}},
        {{"BZMPOP", "0", "1", "z", "MIN"}},
        {{"XREAD", "BLOCK", "0", "STREAMS", "s", "$"}},
        {{"XREAD", "COUNT", "1", "BLOCK", "100", "STREAMS", "s", "0"}},
        {{"XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"}},
        {{"XREADGROUP", "GROUP", "g", "c", "COUNT", "5", "block", "10", "STREAMS", "s", ">"}},
        {{"WAIT", "0", "0"}},
        /* command names are case-insensitive */
        {{"blpop", "l", "0"}},
        {{"bRpOp", "l", "0"}},
        {{"xread", "block", "0", "streams", "s", "$"}},
        {{"wait", "1", "0"}},
    };
    size_t i;

    open_with(0);
    for (i = 0; i < sizeof blocking / sizeof blocking[0]; i++)
        expect_refused(&blocking[i], RCP_ERR_BLOCKING_COMMAND, "block");
    ping_ok();
    ck_assert_msg(atomic_load(&cb_calls) == 0, "callback called %d times after refused sends",
                  atomic_load(&cb_calls));
}
END_TEST

START_TEST(test_nonblocking_lookalikes)
{
    static const struct cmdline prep[] = {
        {{"XADD", "s", "*", "f", "v"}},
        {{"XGROUP", "CREATE", "s", "g", "0"}},
        {{"ZADD", "z", "1", "m"}},
        {{"RPUSH", "l", "a", "b"}},
    };
    static const struct cmdline allowed[] = {
        {{"XREAD", "COUNT", "1", "STREAMS", "s", "0"}},
        {{"xread", "STREAMS", "s", "0"}},
        {{"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"}},
        {{"LPOP", "l"}},
        {{"ZPOPMIN", "z"}},
        {{"LMOVE", "l", "m", "LEFT", "RIGHT"}},
        {{"SET", "BLPOP", "1"}},
        {{"GET", "BLPOP"}},
        {{"ECHO", "WAIT"}},
    };
    size_t i;

    open_with(0);
    for (i = 0; i < sizeof prep / sizeof prep[0]; i++)
        expect_allowed(&prep[i]);
    for (i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        expect_allowed(&allowed[i]);
}
END_TEST

/* A stream whose *name* is "block" is not a BLOCK option. */
START_TEST(test_xread_stream_named_block)
{
    static const struct cmdline prep = {{"XADD", "block", "*", "f", "v"}};
    static const struct cmdline xr = {{"XREAD", "COUNT", "1", "STREAMS", "block", "0"}};
    const char *a[MAXARGS];
    char d[256];
    rcp_reply *r;

    open_with(0);
    expect_allowed(&prep);
    r = rcp_conn_command_argv(conn, 6, argv_of(&xr, a), NULL);
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->err == RCP_OK && r->elements == 1,
                  "XREAD COUNT 1 STREAMS block 0: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}
END_TEST

START_TEST(test_state_changing_commands)
{
    static const struct cmdline unsupported[] = {
        {{"MULTI"}},
        {{"multi"}},
        {{"SUBSCRIBE", "ch"}},
        {{"PSUBSCRIBE", "ch*"}},
        {{"SSUBSCRIBE", "ch"}},
        {{"SELECT", "1"}},
        {{"select", "0"}},
        {{"MONITOR"}},
    };
    char d[256];
    rcp_reply *r;
    size_t i;

    open_with(0);
    r = rcp_conn_command(conn, "SET %s %s", "where", "db0");
    ck_assert(rcpt_is_status(r, "OK"));
    rcp_reply_free(r);
    for (i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        expect_refused(&unsupported[i], RCP_ERR_UNSUPPORTED, NULL);
    ping_ok();
    ck_assert_msg(atomic_load(&cb_calls) == 0, "callback called %d times after refused sends",
                  atomic_load(&cb_calls));
    /* still in db 0, not in a transaction, not subscribed */
    r = rcp_conn_command(conn, "GET %s", "where");
    ck_assert_msg(rcpt_is_cstring(r, "db0"), "GET after refusals: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}
END_TEST

START_TEST(test_too_large)
{
    char big[2000];
    char small[900];
    const char *argv[3] = {"SET", "k", big};
    size_t argvlen[3] = {3, 1, sizeof big};
    rcp_future f;
    char d[256];
    rcp_reply *r;
    int rc;

    memset(big, 'x', sizeof big);
    memset(small, 'y', sizeof small);
    open_with(1024);
    init_future(&f);
    rc = rcp_conn_send_argv(conn, &f, 3, argv, argvlen);
    ck_assert_msg(rc == RCP_ERR_TOO_LARGE, "send 2000-byte SET: %d (%s)", rc, rcp_strerror(rc));
    r = rcp_conn_command_argv(conn, 3, argv, argvlen);
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_TOO_LARGE), "sync 2000-byte SET: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    /* many small arguments add up too */
    {
        const char *many[200];
        int i;
        many[0] = "MSET";
        for (i = 1; i < 200; i++)
            many[i] = "kkkkkkkk";
        rc = rcp_conn_send_argv(conn, &f, 199, many, NULL);
        ck_assert_msg(rc == RCP_ERR_TOO_LARGE, "send 199-arg MSET: %d (%s)", rc,
                      rcp_strerror(rc));
    }

    /* under the cap: fine */
    argv[2] = small;
    argvlen[2] = sizeof small;
    r = rcp_conn_command_argv(conn, 3, argv, argvlen);
    ck_assert_msg(rcpt_is_status(r, "OK"), "900-byte SET under a 1024 cap: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "STRLEN k");
    ck_assert_msg(rcptest_is_int(r, (long long)sizeof small), "STRLEN: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ping_ok();
    ck_assert_int_eq(atomic_load(&cb_calls), 0);
}
END_TEST

START_TEST(test_strerror)
{
    const char *text[RCP_ERR__COUNT];
    int i;
    int j;

    for (i = 0; i < RCP_ERR__COUNT; i++) {
        text[i] = rcp_strerror(i);
        ck_assert_msg(text[i] != NULL, "rcp_strerror(%d) is NULL", i);
        ck_assert_msg(text[i][0] != '\0', "rcp_strerror(%d) is empty", i);
        for (j = 0; j < i; j++)
            ck_assert_msg(strcmp(text[i], text[j]) != 0, "rcp_strerror(%d) == rcp_strerror(%d): %s",
                          i, j, text[i]);
    }
    ck_assert_ptr_nonnull(rcp_strerror(-1));
    ck_assert_ptr_nonnull(rcp_strerror(RCP_ERR__COUNT));
    ck_assert_ptr_nonnull(rcp_strerror(1000));
    ck_assert_ptr_nonnull(rcp_strerror(INT_MIN));
    ck_assert_ptr_nonnull(rcp_strerror(INT_MAX));

    ck_assert_str_eq(rcp_version(), RCP_VERSION_STRING);
    ck_assert_int_eq(rcp_version_number(), RCP_VERSION_NUMBER);
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_checked_fixture(tc, setup, teardown);
    RCPTEST_ADD(tc, test_invalid_arguments, test_blocking_commands, test_nonblocking_lookalikes,
                test_xread_stream_named_block, test_state_changing_commands, test_too_large,
                test_strerror);
}

int main(void)
{
    return rcpt_main_case("errors", "caller-errors", 60, add_tests);
}
