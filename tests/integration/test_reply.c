/* test_reply.c: reply ownership. rcp_reply_keep inside a callback keeps the
 * reply valid after the callback (server replies and client errors alike);
 * rcp_reply_dup makes a deep copy that outlives the original. Run under
 * ASan, a shallow copy or a reply freed behind the caller's back shows up
 * as a use-after-free. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

static rcpt_server srv;
static rcp_conn *conn;

static void setup(void)
{
    rcp_conn_options o;

    rcpt_server_start_ok(&srv, rcpt_debug_args);
    rcpt_options(&o, &srv);
    o.request_timeout_ms = 10000;
    conn = rcpt_conn_open_ok(&o);
}

static void teardown(void)
{
    rcpt_teardown(&srv, &conn);
}

struct keeper {
    rcp_future f;
    rcp_reply *kept;
    const rcp_reply *seen; /* the pointer the callback received */
    atomic_int calls;
};

static void keep_cb(rcp_future *f, rcp_reply *reply)
{
    struct keeper *k = f->data;

    k->seen = reply;
    k->kept = rcp_reply_keep(reply);
    atomic_fetch_add(&k->calls, 1); /* release: the test thread reads kept after this */
}

static void wait_called(struct keeper *k)
{
    int64_t deadline = rcptest_now_ms() + 10000;

    while (atomic_load(&k->calls) == 0 && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(1);
    ck_assert_int_eq(atomic_load(&k->calls), 1);
}

static void run(struct keeper *k, int argc, const char **argv, int timeout_ms)
{
    memset(k, 0, sizeof *k);
    k->f.resolve = keep_cb;
    k->f.data = k;
    k->f.timeout_ms = timeout_ms;
    ck_assert_int_eq(rcp_conn_send_argv(conn, &k->f, argc, argv, NULL), RCP_OK);
    wait_called(k);
    ck_assert_ptr_nonnull(k->kept);
}

/* Traffic after the callback, so buffers the library reuses get reused. */
static void churn(void)
{
    int i;

    for (i = 0; i < 200; i++) {
        char tok[48];
        rcp_reply *r;
        snprintf(tok, sizeof tok, "churn-%d-xxxxxxxxxxxxxxxxxxxxxxxxxxxx", i);
        r = rcp_conn_command(conn, "ECHO %s", tok);
        ck_assert(rcpt_is_cstring(r, tok));
        rcp_reply_free(r);
    }
}

START_TEST(test_keep_string)
{
    struct keeper k;
    const char *set[3] = {"SET", "kk", "kept-value"};
    const char *get[2] = {"GET", "kk"};
    char d[256];
    rcp_reply *r = rcp_conn_command_argv(conn, 3, set, NULL);

    ck_assert(rcpt_is_status(r, "OK"));
    rcp_reply_free(r);
    run(&k, 2, get, 0);
    churn();
    ck_assert_msg(rcpt_is_cstring(k.kept, "kept-value"), "kept: %s",
                  rcptest_describe(k.kept, d, sizeof d));
    rcp_reply_free(k.kept);
}
END_TEST

START_TEST(test_keep_array)
{
    struct keeper k;
    const char *push[5] = {"RPUSH", "kl", "one", "two", "three"};
    const char *range[4] = {"LRANGE", "kl", "0", "-1"};
    char d[256];
    rcp_reply *r = rcp_conn_command_argv(conn, 5, push, NULL);

    ck_assert(rcptest_is_int(r, 3));
    rcp_reply_free(r);
    run(&k, 4, range, 0);
    churn();
    ck_assert_msg(k.kept->type == RCP_REPLY_ARRAY && k.kept->elements == 3, "kept: %s",
                  rcptest_describe(k.kept, d, sizeof d));
    ck_assert(rcpt_is_cstring(k.kept->element[0], "one"));
    ck_assert(rcpt_is_cstring(k.kept->element[1], "two"));
    ck_assert(rcpt_is_cstring(k.kept->element[2], "three"));
    rcp_reply_free(k.kept);
}
END_TEST

START_TEST(test_keep_server_error)
{
    struct keeper k;
    const char *bad[2] = {"NOSUCHCMD", "x"};
    char d[256];

    run(&k, 2, bad, 0);
    churn();
    ck_assert_msg(k.kept->type == RCP_REPLY_ERROR && k.kept->err == RCP_ERR_SERVER &&
                      strncmp(k.kept->str, "ERR unknown command", 19) == 0,
                  "kept: %s", rcptest_describe(k.kept, d, sizeof d));
    ck_assert(rcp_reply_is_error(k.kept));
    rcp_reply_free(k.kept);
}
END_TEST

/* A client-side error (timeout): keep must work for it too. */
START_TEST(test_keep_client_error)
{
    struct keeper k;
    const char *slow[3] = {"DEBUG", "SLEEP", "0.3"};
    char d[256];

    run(&k, 3, slow, 50);
    churn();
    ck_assert_msg(rcpt_is_client_error(k.kept, RCP_ERR_TIMEOUT), "kept: %s",
                  rcptest_describe(k.kept, d, sizeof d));
    ck_assert(rcp_reply_is_error(k.kept));
    rcp_reply_free(k.kept);
}
END_TEST

/* Many kept replies alive at once, freed in a different order. */
START_TEST(test_keep_many)
{
    enum { N = 500 };
    struct keeper *k = calloc(N, sizeof *k);
    char vals[N][24];
    int i;

    ck_assert_ptr_nonnull(k);
    for (i = 0; i < N; i++) {
        const char *argv[2] = {"ECHO", vals[i]};
        snprintf(vals[i], sizeof vals[i], "many-%d", i);
        k[i].f.resolve = keep_cb;
        k[i].f.data = &k[i];
        ck_assert_int_eq(rcp_conn_send_argv(conn, &k[i].f, 2, argv, NULL), RCP_OK);
    }
    for (i = 0; i < N; i++)
        wait_called(&k[i]);
    churn();
    for (i = N - 1; i >= 0; i -= 2) {
        ck_assert(rcpt_is_cstring(k[i].kept, vals[i]));
        rcp_reply_free(k[i].kept);
    }
    for (i = 0; i < N; i += 2) {
        ck_assert(rcpt_is_cstring(k[i].kept, vals[i]));
        rcp_reply_free(k[i].kept);
    }
    free(k);
}
END_TEST

static void check_same(const rcp_reply *a, const rcp_reply *b, int depth)
{
    size_t i;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_msg(a != b, "dup returned the same node at depth %d", depth);
    ck_assert_int_eq(a->type, b->type);
    ck_assert_int_eq(a->err, b->err);
    ck_assert_int_eq(a->integer, b->integer);
    ck_assert_uint_eq(a->len, b->len);
    ck_assert_uint_eq(a->elements, b->elements);
    /* string memory is not compared by address: a client error's text
     * may be static; freeing the original before reading the copy (and
     * ASan) is what proves the copy is deep */
    if (a->type == RCP_REPLY_STRING || a->type == RCP_REPLY_STATUS || a->type == RCP_REPLY_ERROR) {
        ck_assert_ptr_nonnull(a->str);
        ck_assert_ptr_nonnull(b->str);
        ck_assert(memcmp(a->str, b->str, a->len) == 0);
        ck_assert_int_eq(b->str[b->len], '\0');
    }
    if (a->type == RCP_REPLY_ARRAY && a->elements > 0) {
        ck_assert(a->element != b->element);
        for (i = 0; i < a->elements; i++)
            check_same(a->element[i], b->element[i], depth + 1);
    }
}

START_TEST(test_dup_nested)
{
    char d[256];
    rcp_reply *orig;
    rcp_reply *copy;
    rcp_reply *copy2;

    /* nested arrays, integers, strings with NUL, nil, status and error
     * elements, from a Lua script */
    orig = rcp_conn_command(conn, "EVAL %s 0",
                            "return {1, 'two', {3, {'four', 'f\\0ive'}, {}}, false, "
                            "redis.status_reply('ST'), redis.error_reply('ERR inner')}");
    ck_assert_msg(orig->type == RCP_REPLY_ARRAY && orig->elements == 6, "EVAL: %s",
                  rcptest_describe(orig, d, sizeof d));
    ck_assert(rcptest_is_int(orig->element[0], 1));
    ck_assert(rcpt_is_cstring(orig->element[1], "two"));
    ck_assert(orig->element[2]->type == RCP_REPLY_ARRAY && orig->element[2]->elements == 3);
    ck_assert(rcpt_is_string(orig->element[2]->element[1]->element[1], "f\0ive", 5));
    ck_assert(orig->element[2]->element[2]->type == RCP_REPLY_ARRAY &&
              orig->element[2]->element[2]->elements == 0);
    ck_assert(rcptest_is_nil(orig->element[3]));
    ck_assert(rcpt_is_status(orig->element[4], "ST"));
    ck_assert_msg(orig->element[5]->type == RCP_REPLY_ERROR &&
                      orig->element[5]->err == RCP_ERR_SERVER &&
                      strcmp(orig->element[5]->str, "ERR inner") == 0,
                  "error element: %s", rcptest_describe(orig->element[5], d, sizeof d));

    copy = rcp_reply_dup(orig);
    ck_assert_ptr_nonnull(copy);
    check_same(orig, copy, 0);
    /* the copy lives on alone */
    rcp_reply_free(orig);
    churn();
    ck_assert(rcpt_is_string(copy->element[2]->element[1]->element[1], "f\0ive", 5));
    ck_assert(rcpt_is_cstring(copy->element[2]->element[1]->element[0], "four"));
    ck_assert(rcpt_is_status(copy->element[4], "ST"));
    /* a copy of a copy */
    copy2 = rcp_reply_dup(copy);
    ck_assert_ptr_nonnull(copy2);
    check_same(copy, copy2, 0);
    rcp_reply_free(copy);
    ck_assert(rcptest_is_int(copy2->element[2]->element[0], 3));
    rcp_reply_free(copy2);
}
END_TEST

START_TEST(test_dup_scalars_and_client_error)
{
    rcp_reply *r;
    rcp_reply *c;
    const char *argv[1] = {"BLPOP"};

    r = rcp_conn_command(conn, "INCRBY %s %s", "n", "-42");
    c = rcp_reply_dup(r);
    check_same(r, c, 0);
    rcp_reply_free(r);
    ck_assert(rcptest_is_int(c, -42));
    rcp_reply_free(c);

    r = rcp_conn_command(conn, "GET %s", "nothing");
    c = rcp_reply_dup(r);
    ck_assert(rcptest_is_nil(c));
    rcp_reply_free(r);
    rcp_reply_free(c);

    /* a client-side error reply from a sync call */
    r = rcp_conn_command_argv(conn, 1, argv, NULL);
    ck_assert(rcpt_is_client_error(r, RCP_ERR_BLOCKING_COMMAND));
    c = rcp_reply_dup(r);
    check_same(r, c, 0);
    rcp_reply_free(r);
    ck_assert(rcpt_is_client_error(c, RCP_ERR_BLOCKING_COMMAND));
    rcp_reply_free(c);
}
END_TEST

/* A callback may dup instead of keep; the received reply is untouched. */
struct duper {
    rcp_future f;
    rcp_reply *copy;
    atomic_int calls;
};

static void dup_cb(rcp_future *f, rcp_reply *reply)
{
    struct duper *p = f->data;

    p->copy = rcp_reply_dup(reply);
    atomic_fetch_add(&p->calls, 1);
}

START_TEST(test_dup_in_callback)
{
    struct duper p;
    const char *argv[3] = {"MGET", "a", "b"};
    const char *set[5] = {"MSET", "a", "1", "b", "2"};
    int64_t deadline;
    rcp_reply *r = rcp_conn_command_argv(conn, 5, set, NULL);

    ck_assert(rcpt_is_status(r, "OK"));
    rcp_reply_free(r);
    memset(&p, 0, sizeof p);
    p.f.resolve = dup_cb;
    p.f.data = &p;
    ck_assert_int_eq(rcp_conn_send_argv(conn, &p.f, 3, argv, NULL), RCP_OK);
    deadline = rcptest_now_ms() + 10000;
    while (atomic_load(&p.calls) == 0 && rcptest_now_ms() < deadline)
        rcptest_sleep_ms(1);
    ck_assert_int_eq(atomic_load(&p.calls), 1);
    churn();
    ck_assert_ptr_nonnull(p.copy);
    ck_assert(p.copy->type == RCP_REPLY_ARRAY && p.copy->elements == 2);
    ck_assert(rcpt_is_cstring(p.copy->element[0], "1"));
    ck_assert(rcpt_is_cstring(p.copy->element[1], "2"));
    rcp_reply_free(p.copy);
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_checked_fixture(tc, setup, teardown);
    RCPTEST_ADD(tc, test_keep_string, test_keep_array, test_keep_server_error,
                test_keep_client_error, test_keep_many, test_dup_nested,
                test_dup_scalars_and_client_error, test_dup_in_callback);
}

int main(void)
{
    return rcpt_main_case("reply", "ownership", 60, add_tests);
}
