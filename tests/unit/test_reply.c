/* Unit tests: reply objects built by the hiredis reader with our object
 * functions, ownership (keep/dup/free) and client-error replies. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "reply.h"
#include "rcpipe.h"

static rcp_reply *parse(const char *buf, size_t len, int *status)
{
    redisReader *r = rcp__reader_new();
    void *out = NULL;
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(redisReaderFeed(r, buf, len), REDIS_OK);
    *status = redisReaderGetReply(r, &out);
    redisReaderFree(r);
    return out;
}

START_TEST(scalars)
{
    int st;
    rcp_reply *r = parse("$5\r\nhe\0lo\r\n", 11, &st);
    ck_assert_int_eq(st, REDIS_OK);
    ck_assert_int_eq(r->type, RCP_REPLY_STRING);
    ck_assert_int_eq(r->err, RCP_OK);
    ck_assert_uint_eq(r->len, 5);
    ck_assert_int_eq(memcmp(r->str, "he\0lo", 6), 0); /* NUL-terminated too */
    rcp_reply_free(r);

    r = parse("+OK\r\n", 5, &st);
    ck_assert_int_eq(r->type, RCP_REPLY_STATUS);
    ck_assert_str_eq(r->str, "OK");
    rcp_reply_free(r);

    r = parse("-ERR wrong type\r\n", 17, &st);
    ck_assert_int_eq(r->type, RCP_REPLY_ERROR);
    ck_assert_int_eq(r->err, RCP_ERR_SERVER);
    ck_assert_str_eq(r->str, "ERR wrong type");
    ck_assert(rcp_reply_is_error(r));
    rcp_reply_free(r);

    r = parse(":-42\r\n", 6, &st);
    ck_assert_int_eq(r->type, RCP_REPLY_INTEGER);
    ck_assert_int_eq(r->integer, -42);
    rcp_reply_free(r);

    r = parse("$-1\r\n", 5, &st);
    ck_assert_int_eq(r->type, RCP_REPLY_NIL);
    ck_assert(!rcp_reply_is_error(r));
    rcp_reply_free(r);

    r = parse("$0\r\n\r\n", 6, &st);
    ck_assert_int_eq(r->type, RCP_REPLY_STRING);
    ck_assert_uint_eq(r->len, 0);
    ck_assert_str_eq(r->str, "");
    rcp_reply_free(r);
}
END_TEST

START_TEST(nested_arrays_and_dup)
{
    const char *in = "*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n*0\r\n";
    int st;
    rcp_reply *r = parse(in, strlen(in), &st), *d;
    ck_assert_int_eq(r->type, RCP_REPLY_ARRAY);
    ck_assert_uint_eq(r->elements, 3);
    ck_assert_int_eq(r->element[0]->integer, 1);
    ck_assert_int_eq(r->element[1]->type, RCP_REPLY_ARRAY);
    ck_assert_str_eq(r->element[1]->element[0]->str, "a");
    ck_assert_int_eq(r->element[1]->element[1]->type, RCP_REPLY_NIL);
    ck_assert_uint_eq(r->element[2]->elements, 0);
    d = rcp_reply_dup(r);
    rcp_reply_free(r);
    ck_assert_uint_eq(d->elements, 3);
    ck_assert_str_eq(d->element[1]->element[0]->str, "a");
    ck_assert_int_eq(d->element[0]->integer, 1);
    rcp_reply_free(d);
}
END_TEST

START_TEST(protocol_errors)
{
    int st;
    rcp_reply *r = parse("!garbage\r\n", 10, &st);
    ck_assert_int_eq(st, REDIS_ERR);
    ck_assert_ptr_null(r);
    /* Deeper nesting than the reader supports: an error, not a crash. */
    r = parse("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", 43, &st);
    ck_assert_int_eq(st, REDIS_ERR);
    ck_assert_ptr_null(r);
}
END_TEST

START_TEST(partial_feed)
{
    const char *in = "*2\r\n$3\r\nfoo\r\n:7\r\n";
    size_t i, n = strlen(in);
    redisReader *rd = rcp__reader_new();
    void *out = NULL;
    for (i = 0; i < n; i++) {
        ck_assert_ptr_null(out);
        ck_assert_int_eq(redisReaderFeed(rd, in + i, 1), REDIS_OK);
        ck_assert_int_eq(redisReaderGetReply(rd, &out), REDIS_OK);
    }
    ck_assert_ptr_nonnull(out);
    ck_assert_str_eq(((rcp_reply *)out)->element[0]->str, "foo");
    rcp_reply_free(out);
    redisReaderFree(rd);
}
END_TEST

/* One reply as the connection reads it: the fast path, else hiredis's.
 * *fast counts the replies the fast path built. */
static int read_one(redisReader *rd, void **out, int use_fast, int *fast)
{
    *out = NULL;
    if (use_fast && rcp__reader_fast(rd, out)) {
        (*fast)++;
        return REDIS_OK;
    }
    return redisReaderGetReply(rd, out);
}

/* Feeds `in` in pieces of `step` bytes and collects every reply. */
static int read_all(const char *in, size_t n, size_t step, int use_fast, rcp_reply **got,
                    int max, int *fast)
{
    redisReader *rd = rcp__reader_new();
    size_t i;
    int k = 0;
    void *out;
    ck_assert_ptr_nonnull(rd);
    for (i = 0; i < n; i += step) {
        ck_assert_int_eq(redisReaderFeed(rd, in + i, n - i < step ? n - i : step), REDIS_OK);
        while (read_one(rd, &out, use_fast, fast) == REDIS_OK && out) {
            ck_assert_int_lt(k, max);
            got[k++] = out;
            ck_assert_uint_lt(rd->pos, 1024 + 64); /* parsed bytes are dropped */
        }
    }
    redisReaderFree(rd);
    return k;
}

/* rcp__reader_fast (the connection's path for a whole bulk string) builds
 * the replies hiredis would, whatever the pieces the bytes come in. */
START_TEST(fast_path_matches_hiredis)
{
    char in[4096];
    size_t n = 0, steps[] = {1, 2, 5, 40, 4096}, si;
    rcp_reply *a[200], *b[200];
    int i, na, nb, fast = 0, fast_whole = 0;
    n += (size_t)sprintf(in + n, "$3\r\nfoo\r\n$-1\r\n+OK\r\n$0\r\n\r\n:42\r\n$1\r\nz\r\n");
    n += (size_t)sprintf(in + n, "*2\r\n$1\r\nx\r\n$2\r\nyz\r\n-ERR no\r\n$4\r\nab\r\n\r\n");
    for (i = 0; i < 100; i++) /* past 1 KiB: the reader's buffer is compacted */
        n += (size_t)sprintf(in + n, "$10\r\n%010d\r\n", i);
    for (si = 0; si < sizeof steps / sizeof steps[0]; si++) {
        int f = 0;
        na = read_all(in, n, steps[si], 0, a, 200, &f);
        nb = read_all(in, n, steps[si], 1, b, 200, &f);
        if (steps[si] == 4096)
            fast_whole = f;
        fast += f;
        ck_assert_int_eq(na, 109);
        ck_assert_int_eq(nb, na);
        for (i = 0; i < na; i++) {
            ck_assert_int_eq(b[i]->type, a[i]->type);
            ck_assert_int_eq(b[i]->err, a[i]->err);
            ck_assert_int_eq(b[i]->integer, a[i]->integer);
            ck_assert_uint_eq(b[i]->len, a[i]->len);
            if (a[i]->str)
                ck_assert_mem_eq(b[i]->str, a[i]->str, a[i]->len + 1);
            ck_assert_uint_eq(b[i]->elements, a[i]->elements);
            rcp_reply_free(a[i]);
            rcp_reply_free(b[i]);
        }
    }
    /* Headers hiredis refuses or reads otherwise are left to it. */
    {
        const char *bad[] = {"$01\r\nz\r\n", "$ 1\r\nz\r\n", "$1x\r\nz\r\n",
                             "$1\rxz\r\n",   "$\r\nz\r\n",  "$1234567890123456789\r\n"};
        for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
            redisReader *rd = rcp__reader_new();
            void *out = NULL;
            ck_assert_int_eq(redisReaderFeed(rd, bad[i], strlen(bad[i])), REDIS_OK);
            ck_assert_int_eq(rcp__reader_fast(rd, &out), 0);
            ck_assert_ptr_null(out);
            ck_assert_uint_eq(rd->pos, 0);
            redisReaderFree(rd);
        }
    }
    /* Whole in the buffer, every top-level bulk string but the nil takes
     * the fast path: foo, "", z, ab\r\n and the 100 numbers. */
    ck_assert_int_eq(fast_whole, 104);
    ck_assert_int_gt(fast, fast_whole);
}
END_TEST

START_TEST(keep_and_release)
{
    int st;
    rcp_reply *r = parse("+OK\r\n", 5, &st), *k, stack, *copy;
    /* A kept reply survives the library's release after the callback. */
    k = rcp_reply_keep(r);
    ck_assert_ptr_eq(k, r);
    rcp__reply_release(r);
    ck_assert_str_eq(k->str, "OK");
    rcp_reply_free(k);

    /* Client errors live on the stack: keeping one copies it. */
    rcp__reply_error_init(&stack, RCP_ERR_TIMEOUT, "timed out here");
    ck_assert_int_eq(stack.err, RCP_ERR_TIMEOUT);
    copy = rcp_reply_keep(&stack);
    ck_assert_ptr_ne(copy, &stack);
    ck_assert_str_eq(copy->str, "timed out here");
    ck_assert_int_eq(copy->err, RCP_ERR_TIMEOUT);
    ck_assert_int_eq(copy->type, RCP_REPLY_ERROR);
    rcp_reply_free(copy);
    rcp_reply_free(&stack); /* ignored, never freed */
    rcp_reply_free(NULL);

    copy = rcp__reply_error_new(RCP_ERR_IO, NULL);
    ck_assert_str_eq(copy->str, rcp_strerror(RCP_ERR_IO));
    rcp_reply_free(copy);
}
END_TEST

static int allocs_left = -1;
static void *fail_malloc(size_t n) { return allocs_left-- == 0 ? NULL : malloc(n); }
static void *fail_calloc(size_t a, size_t b) { return allocs_left-- == 0 ? NULL : calloc(a, b); }
static void *fail_realloc(void *p, size_t n) { return allocs_left-- == 0 ? NULL : realloc(p, n); }

START_TEST(allocator_hook_and_oom)
{
    rcp_allocator a = {fail_malloc, fail_calloc, fail_realloc, free};
    const char *in = "*2\r\n$3\r\nfoo\r\n$3\r\nbar\r\n";
    int st, k;
    ck_assert_int_eq(rcp_set_allocator(NULL), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_set_allocator(&a), RCP_OK);
    /* Fail each of the reply's allocations in turn: an error, no leak. */
    for (k = 0; k < 3; k++) {
        rcp_reply *r;
        allocs_left = k;
        r = parse(in, strlen(in), &st);
        ck_assert_int_eq(st, REDIS_ERR);
        ck_assert_ptr_null(r);
    }
    allocs_left = -1;
    {
        rcp_reply *r = parse(in, strlen(in), &st);
        ck_assert_int_eq(st, REDIS_OK);
        rcp_reply_free(r);
    }
    /* An error reply that cannot be allocated is the static OOM reply
     * (with this thread's cache of small replies empty: the replies freed
     * above went there and would be reused without an allocation). */
    rcp__reply_cache_drop();
    allocs_left = 0;
    {
        rcp_reply *r = rcp__reply_error_new(RCP_ERR_IO, "x");
        ck_assert_int_eq(r->err, RCP_ERR_OOM);
        rcp_reply_free(r);
    }
    allocs_left = -1;
    rcp_reset_allocator();
}
END_TEST

/* Small replies freed on a thread are reused by the next ones parsed
 * there, with no allocation; larger ones are not cached. */
static int n_allocs;
static void *count_malloc(size_t n) { n_allocs++; return malloc(n); }
static void *count_calloc(size_t a, size_t b) { n_allocs++; return calloc(a, b); }
static void *count_realloc(void *p, size_t n) { n_allocs++; return realloc(p, n); }

START_TEST(small_replies_recycled)
{
    rcp_allocator a = {count_malloc, count_calloc, count_realloc, free};
    const char *small = "$5\r\nhello\r\n";
    char big[600];
    int st, i;
    ck_assert_int_eq(rcp_set_allocator(&a), RCP_OK);
    rcp_reply_free(parse(small, strlen(small), &st)); /* fills the cache */
    n_allocs = 0;
    for (i = 0; i < 100; i++) {
        rcp_reply *r = parse(small, strlen(small), &st);
        ck_assert_int_eq(st, REDIS_OK);
        ck_assert_str_eq(r->str, "hello");
        rcp_reply_free(r);
    }
    ck_assert_int_eq(n_allocs, 0);
    snprintf(big, sizeof big, "$500\r\n%0500d\r\n", 7);
    for (i = 0; i < 10; i++)
        rcp_reply_free(parse(big, strlen(big), &st));
    ck_assert_int_eq(n_allocs, 10);
    rcp_reset_allocator();
}
END_TEST

/* Memory for an array follows the elements received, not the count its
 * header announces: the largest single allocation while reading a header
 * of 2^31 - 1 elements (and two of them) stays small; a large array that
 * does arrive whole is an ordinary array. */
static size_t biggest;
static void *big_malloc(size_t n)
{
    if (n > biggest)
        biggest = n;
    return malloc(n);
}
static void *big_calloc(size_t n, size_t m)
{
    if (n * m > biggest)
        biggest = n * m;
    return calloc(n, m);
}
static void *big_realloc(void *p, size_t n)
{
    if (n > biggest)
        biggest = n;
    return realloc(p, n);
}

START_TEST(huge_array_header_costs_what_arrives)
{
    rcp_allocator a = {big_malloc, big_calloc, big_realloc, free};
    redisReader *rd;
    void *out = NULL;
    static const char head[] = "*2147483647\r\n:1\r\n:2\r\n";
    char buf[16];
    ck_assert_int_eq(rcp_set_allocator(&a), RCP_OK);
    biggest = 0;
    rd = rcp__reader_new();
    ck_assert_int_eq(redisReaderFeed(rd, head, sizeof head - 1), REDIS_OK);
    ck_assert_int_eq(redisReaderGetReply(rd, &out), REDIS_OK);
    ck_assert_ptr_null(out); /* incomplete */
    redisReaderFree(rd);       /* frees the partial reply */
    ck_assert_msg(biggest < 64 * 1024, "an allocation of %zu bytes for 2 elements", biggest);

    /* 1000 elements announced and sent: complete, in order, clean. */
    rd = rcp__reader_new();
    ck_assert_int_eq(redisReaderFeed(rd, "*1000\r\n", 7), REDIS_OK);
    for (int i = 0; i < 1000; i++) {
        int n = snprintf(buf, sizeof buf, ":%d\r\n", i);
        ck_assert_int_eq(redisReaderFeed(rd, buf, (size_t)n), REDIS_OK);
    }
    ck_assert_int_eq(redisReaderGetReply(rd, &out), REDIS_OK);
    ck_assert_ptr_nonnull(out);
    {
        rcp_reply *r = out;
        ck_assert_int_eq(r->type, RCP_REPLY_ARRAY);
        ck_assert_uint_eq(r->elements, 1000);
        ck_assert_int_eq(r->integer, 0);
        ck_assert_uint_eq(r->len, 0);
        for (int i = 0; i < 1000; i++)
            ck_assert_int_eq(r->element[i]->integer, i);
        rcp_reply_free(r);
    }
    redisReaderFree(rd);
    rcp_reset_allocator();
}
END_TEST

/* The typed getters, on every kind of reply the reader makes and on a
 * client error. */
START_TEST(typed_getters)
{
    static const struct {
        const char *resp;
        int rc;           /* of rcp_reply_int */
        long long v;      /* when rc is RCP_OK */
        const char *text; /* rcp_reply_str */
        int nil;
    } cases[] = {
        {":42\r\n", RCP_OK, 42, "", 0},
        {":-9223372036854775808\r\n", RCP_OK, LLONG_MIN, "", 0},
        {"$2\r\n17\r\n", RCP_OK, 17, "17", 0},
        {"$1\r\n0\r\n", RCP_OK, 0, "0", 0},
        {"$2\r\n-5\r\n", RCP_OK, -5, "-5", 0},
        {"$19\r\n9223372036854775807\r\n", RCP_OK, LLONG_MAX, "9223372036854775807", 0},
        {"$20\r\n-9223372036854775808\r\n", RCP_OK, LLONG_MIN, "-9223372036854775808", 0},
        {"$19\r\n9223372036854775808\r\n", RCP_ERR_TYPE, 0, "9223372036854775808", 0},
        {"$2\r\n07\r\n", RCP_ERR_TYPE, 0, "07", 0},
        {"$2\r\n+7\r\n", RCP_ERR_TYPE, 0, "+7", 0},
        {"$2\r\n 7\r\n", RCP_ERR_TYPE, 0, " 7", 0},
        {"$1\r\n-\r\n", RCP_ERR_TYPE, 0, "-", 0},
        {"$0\r\n\r\n", RCP_ERR_TYPE, 0, "", 0},
        {"$3\r\n1.5\r\n", RCP_ERR_TYPE, 0, "1.5", 0},
        {"+12\r\n", RCP_OK, 12, "12", 0},
        {"+OK\r\n", RCP_ERR_TYPE, 0, "OK", 0},
        {"$-1\r\n", RCP_ERR_TYPE, 0, "", 1},
        {"*-1\r\n", RCP_ERR_TYPE, 0, "", 1},
        {"*1\r\n:1\r\n", RCP_ERR_TYPE, 0, "", 0},
        {"-ERR no\r\n", RCP_ERR_SERVER, 0, "ERR no", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st;
        long long v = 12345;
        size_t len = 999;
        rcp_reply *r = parse(cases[i].resp, strlen(cases[i].resp), &st);
        ck_assert_int_eq(st, REDIS_OK);
        ck_assert_msg(rcp_reply_int(r, &v) == cases[i].rc, "%s: rcp_reply_int gave %s",
                      cases[i].resp, rcp_err_name(rcp_reply_int(r, &v)));
        ck_assert_msg(v == (cases[i].rc == RCP_OK ? cases[i].v : 12345), "%s: %lld", cases[i].resp,
                      v);
        ck_assert_str_eq(rcp_reply_str(r, &len), cases[i].text);
        ck_assert_uint_eq(len, strlen(cases[i].text));
        ck_assert_int_eq(rcp_reply_is_nil(r), cases[i].nil);
        rcp_reply_free(r);
    }
    {
        /* A client error: its own code; and NULLs. */
        rcp_reply *e = rcp__reply_error_new(RCP_ERR_TIMEOUT, "timed out here");
        long long v;
        size_t len;
        int st_unused;
        ck_assert_int_eq(rcp_reply_int(e, &v), RCP_ERR_TIMEOUT);
        ck_assert_str_eq(rcp_reply_str(e, NULL), "timed out here");
        rcp_reply_free(e);
        ck_assert_int_eq(rcp_reply_int(NULL, &v), RCP_ERR_INVALID);
        ck_assert_int_eq(rcp_reply_int(e = parse(":1\r\n", 4, &st_unused), NULL),
                         RCP_ERR_INVALID);
        rcp_reply_free(e);
        ck_assert_str_eq(rcp_reply_str(NULL, &len), "");
        ck_assert_uint_eq(len, 0);
        ck_assert_int_eq(rcp_reply_is_nil(NULL), 0);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reply");
    TCase *tc = rcptest_tcase(s, "core", 0);

    RCPTEST_ADD(tc, scalars, nested_arrays_and_dup, protocol_errors, partial_feed,
                fast_path_matches_hiredis, keep_and_release,
                allocator_hook_and_oom, small_replies_recycled, huge_array_header_costs_what_arrives,
                typed_getters);
    return rcptest_run(s) ? 1 : 0;
}
