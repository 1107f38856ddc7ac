/* test_large.c: large and binary values round-trip byte-exact: a value of
 * several MiB holding every byte value (NUL, CR, LF, '$', '*' included),
 * keys with NUL bytes, an empty value; and small requests around a large
 * one are not disturbed by it. */
#include <check.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define BIG (8u * 1024 * 1024 + 12345)

static rcpt_server srv;
static rcp_conn *conn;

static void setup(void)
{
    rcp_conn_options o;

    rcpt_server_start_ok(&srv, NULL);
    rcpt_options(&o, &srv);
    o.request_timeout_ms = 30000;
    conn = rcpt_conn_open_ok(&o);
}

static void teardown(void)
{
    rcpt_teardown(&srv, &conn);
}

/* Every byte value in the first 256 bytes, then a pseudo-random stream so a
 * shifted or repeated chunk cannot compare equal by accident. */
static char *make_blob(size_t n, unsigned seed)
{
    char *b = malloc(n);
    uint32_t x = seed | 1u;
    size_t i;

    if (b == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        if (i < 256) {
            b[i] = (char)(unsigned char)i;
        } else {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            b[i] = (char)(unsigned char)(x >> 11);
        }
    }
    /* protocol-looking bytes at a few places */
    if (n > 4096)
        memcpy(b + 4000, "\r\n$-1\r\n*3\r\n+OK\r\n-ERR x\r\n:1\r\n", 28);
    return b;
}

static size_t first_diff(const char *a, const char *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (a[i] != b[i])
            return i;
    return n;
}

START_TEST(test_big_value_argv)
{
    char *blob = make_blob(BIG, 12345);
    const char *argv[3] = {"SET", "big:argv", NULL};
    size_t argvlen[3] = {3, 8, BIG};
    char d[256];
    rcp_reply *r;

    ck_assert_ptr_nonnull(blob);
    argv[2] = blob;
    r = rcp_conn_command_argv(conn, 3, argv, argvlen);
    ck_assert_msg(rcpt_is_status(r, "OK"), "SET big: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    r = rcp_conn_command(conn, "STRLEN %s", "big:argv");
    ck_assert_msg(rcptest_is_int(r, BIG), "STRLEN: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    r = rcp_conn_command(conn, "GET %s", "big:argv");
    ck_assert_msg(r->type == RCP_REPLY_STRING && r->err == RCP_OK, "GET big: %s",
                  rcptest_describe(r, d, sizeof d));
    ck_assert_uint_eq(r->len, BIG);
    ck_assert_msg(memcmp(r->str, blob, BIG) == 0, "GET big differs at byte %zu",
                  first_diff(r->str, blob, BIG));
    ck_assert_int_eq(r->str[BIG], '\0');
    rcp_reply_free(r);

    /* the server saw the same bytes: a range in the middle */
    r = rcp_conn_command(conn, "GETRANGE %s %d %d", "big:argv", 4000, 4000 + 27);
    ck_assert_msg(rcpt_is_string(r, blob + 4000, 28), "GETRANGE: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "GETRANGE %s %d %d", "big:argv", (int)BIG - 100, (int)BIG - 1);
    ck_assert_msg(rcpt_is_string(r, blob + BIG - 100, 100), "GETRANGE tail: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    free(blob);
}
END_TEST

static rcp_reply *cmd_fmt(const char *fmt, ...)
{
    va_list ap;
    rcp_reply *r;

    va_start(ap, fmt);
    r = rcp_conn_commandv(conn, fmt, ap);
    va_end(ap);
    return r;
}

/* The format path (%b) with the same kind of value. */
START_TEST(test_big_value_format)
{
    size_t n = 8u * 1024 * 1024;
    char *blob = make_blob(n, 777);
    char d[256];
    rcp_reply *r;

    ck_assert_ptr_nonnull(blob);
    r = cmd_fmt("SET big:fmt %b", blob, n);
    ck_assert_msg(rcpt_is_status(r, "OK"), "SET %%b: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "GET big:fmt");
    ck_assert_msg(r->type == RCP_REPLY_STRING && r->len == n, "GET: %s",
                  rcptest_describe(r, d, sizeof d));
    ck_assert_msg(memcmp(r->str, blob, n) == 0, "differs at byte %zu", first_diff(r->str, blob, n));
    rcp_reply_free(r);
    free(blob);
}
END_TEST

START_TEST(test_binary_keys)
{
    static const char k1[] = {'b', 'k', 0, 'x'};
    static const char k2[] = {'b', 'k', 0, 'y'};
    static const char k3[] = {'b', 'k'}; /* a C-string-truncated view of both */
    static const char v1[] = {0, 0, '\r', '\n', 0};
    const char *argv[3];
    size_t argvlen[3];
    char d[256];
    rcp_reply *r;

    argv[0] = "SET";
    argvlen[0] = 3;
    argv[1] = k1;
    argvlen[1] = sizeof k1;
    argv[2] = v1;
    argvlen[2] = sizeof v1;
    r = rcp_conn_command_argv(conn, 3, argv, argvlen);
    ck_assert_msg(rcpt_is_status(r, "OK"), "SET k1: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    argv[1] = k2;
    argvlen[1] = sizeof k2;
    argv[2] = "second";
    argvlen[2] = 6;
    r = rcp_conn_command_argv(conn, 3, argv, argvlen);
    ck_assert_msg(rcpt_is_status(r, "OK"), "SET k2: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    argv[0] = "GET";
    argv[1] = k1;
    argvlen[1] = sizeof k1;
    r = rcp_conn_command_argv(conn, 2, argv, argvlen);
    ck_assert_msg(rcpt_is_string(r, v1, sizeof v1), "GET k1: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    argv[1] = k2;
    r = rcp_conn_command_argv(conn, 2, argv, argvlen);
    ck_assert_msg(rcpt_is_cstring(r, "second"), "GET k2: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    argv[1] = k3;
    argvlen[1] = sizeof k3;
    r = rcp_conn_command_argv(conn, 2, argv, argvlen);
    ck_assert_msg(rcptest_is_nil(r), "GET truncated key: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* KEYS returns the binary names intact */
    r = rcp_conn_command(conn, "KEYS bk*");
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 2, "KEYS: %s",
                  rcptest_describe(r, d, sizeof d));
    ck_assert(r->element[0]->len == 4 && r->element[1]->len == 4);
    ck_assert(memcmp(r->element[0]->str, k1, 3) == 0 && memcmp(r->element[1]->str, k2, 3) == 0);
    ck_assert((r->element[0]->str[3] == 'x' && r->element[1]->str[3] == 'y') ||
              (r->element[0]->str[3] == 'y' && r->element[1]->str[3] == 'x'));
    rcp_reply_free(r);

    /* %b keys through the format path */
    r = cmd_fmt("EXISTS %b %b %b", k1, sizeof k1, k2, sizeof k2, k3, sizeof k3);
    ck_assert_msg(rcptest_is_int(r, 2), "EXISTS: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}
END_TEST

START_TEST(test_empty_value)
{
    const char *argv[3] = {"SET", "empty", ""};
    size_t argvlen[3] = {3, 5, 0};
    char d[256];
    rcp_reply *r;

    r = rcp_conn_command_argv(conn, 3, argv, argvlen);
    ck_assert_msg(rcpt_is_status(r, "OK"), "SET empty: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "GET %s", "empty");
    ck_assert_msg(rcpt_is_string(r, "", 0), "GET empty (must be a 0-byte string, not nil): %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = cmd_fmt("SET empty2 %b", "", (size_t)0);
    ck_assert_msg(rcpt_is_status(r, "OK"), "SET %%b empty: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "STRLEN %s", "empty2");
    ck_assert_msg(rcptest_is_int(r, 0), "STRLEN: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    /* an empty argument in a key position with NULL lengths */
    argv[0] = "ECHO";
    argv[1] = "";
    r = rcp_conn_command_argv(conn, 2, argv, NULL);
    ck_assert_msg(rcpt_is_string(r, "", 0), "ECHO \"\": %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}
END_TEST

/* Small requests from other threads while big values go back and forth:
 * each small caller still gets its own reply. */
struct small_worker {
    pthread_t th;
    int id;
    int n;
    int bad;
};

static atomic_int big_done;

static void *small_main(void *arg)
{
    struct small_worker *w = arg;
    int i = 0;

    while (i < w->n || !atomic_load(&big_done)) {
        char tok[32];
        rcp_reply *r;

        snprintf(tok, sizeof tok, "s%d-%d", w->id, i);
        r = rcp_conn_command(conn, "ECHO %s", tok);
        if (!rcpt_is_cstring(r, tok))
            w->bad++;
        rcp_reply_free(r);
        i++;
        if (i > 1000000)
            break;
    }
    return NULL;
}

START_TEST(test_big_among_small)
{
    struct small_worker w[8];
    size_t n = 3u * 1024 * 1024 + 7;
    char *blob = make_blob(n, 99);
    const char *argv[3] = {"SET", "big:mix", NULL};
    size_t argvlen[3] = {3, 7, 0};
    int i;
    int round;

    ck_assert_ptr_nonnull(blob);
    argv[2] = blob;
    argvlen[2] = n;
    atomic_store(&big_done, 0);
    for (i = 0; i < 8; i++) {
        w[i].id = i;
        w[i].n = 200;
        w[i].bad = 0;
        ck_assert_int_eq(pthread_create(&w[i].th, NULL, small_main, &w[i]), 0);
    }
    for (round = 0; round < 3; round++) {
        char d[256];
        rcp_reply *r;

        blob[round] ^= 0x55; /* a different value each round */
        r = rcp_conn_command_argv(conn, 3, argv, argvlen);
        ck_assert_msg(rcpt_is_status(r, "OK"), "SET: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        r = rcp_conn_command(conn, "GET big:mix");
        ck_assert_msg(r->type == RCP_REPLY_STRING && r->len == n &&
                          memcmp(r->str, blob, n) == 0,
                      "round %d: GET big: %s", round, rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    atomic_store(&big_done, 1);
    for (i = 0; i < 8; i++) {
        pthread_join(w[i].th, NULL);
        ck_assert_msg(w[i].bad == 0, "small worker %d: %d wrong replies", i, w[i].bad);
    }
    free(blob);
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_checked_fixture(tc, setup, teardown);
    RCPTEST_ADD(tc, test_big_value_argv, test_big_value_format, test_binary_keys, test_empty_value,
                test_big_among_small);
}

int main(void)
{
    return rcpt_main_case("large", "large-binary", 60, add_tests);
}
