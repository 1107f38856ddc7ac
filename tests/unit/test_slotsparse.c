/* Unit tests: CLUSTER SLOTS parsing and validation: 7.0 and older formats,
 * hostname metadata, holes, overlap, garbage of every shape, random
 * corruption and allocation failure. Replies are built as RESP text and
 * fed through the library's own reader, or built by hand where the reader
 * would refuse the shape. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "logic.h"
#include "rcpipe.h"
#include "reply.h"

/* A RESP text under construction. */
static char resp[1 << 16];
static size_t rpos;

static void reset(void) { rpos = 0; }
static void A(int n) { rpos += (size_t)snprintf(resp + rpos, sizeof resp - rpos, "*%d\r\n", n); }
static void I(long long v)
{
    rpos += (size_t)snprintf(resp + rpos, sizeof resp - rpos, ":%lld\r\n", v);
}
static void N(void) { rpos += (size_t)snprintf(resp + rpos, sizeof resp - rpos, "$-1\r\n"); }
static void S(const char *s)
{
    rpos += (size_t)snprintf(resp + rpos, sizeof resp - rpos, "$%zu\r\n%s\r\n", strlen(s), s);
}

/* A 7.0 node: [ip, port, id, [metadata...]]; hostname NULL: no metadata. */
static void node7(const char *ip, int port, const char *id, const char *hostname)
{
    A(4);
    S(ip);
    I(port);
    S(id);
    if (hostname) {
        A(2);
        S("hostname");
        S(hostname);
    } else {
        A(0);
    }
}

static rcp_reply *feed(const char *buf, size_t len)
{
    redisReader *r = rcp__reader_new();
    void *out = NULL;
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(redisReaderFeed(r, buf, len), REDIS_OK);
    if (redisReaderGetReply(r, &out) != REDIS_OK)
        out = NULL;
    redisReaderFree(r);
    return out;
}

static char err[256];

/* Parses the RESP text built so far; returns the table or NULL (message in
 * err). */
static rcp__slots_table *parse_built(const char *asked)
{
    rcp_reply *r = feed(resp, rpos);
    rcp__slots_table *t = (rcp__slots_table *)0x1;
    int rc;
    ck_assert_ptr_nonnull(r);
    err[0] = '\0';
    rc = rcp__slots_parse(r, asked, &t, err, sizeof err);
    rcp_reply_free(r);
    if (rc < 0) {
        ck_assert_ptr_null(t);
        ck_assert_msg(err[0] != '\0', "no error message");
        return NULL;
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void expect_error(const char *asked, const char *substr)
{
    rcp__slots_table *t = parse_built(asked);
    ck_assert_msg(t == NULL, "accepted garbage");
    ck_assert_msg(strstr(err, substr) != NULL, "error '%s' lacks '%s'", err, substr);
}

START_TEST(normal_3x1)
{
    rcp__slots_table *t;
    reset();
    A(3);
    A(4), I(0), I(5460), node7("127.0.0.1", 7000, "a1", NULL), node7("127.0.0.1", 7003, "b1", NULL);
    A(4), I(5461), I(10922), node7("127.0.0.1", 7001, "a2", NULL),
        node7("127.0.0.1", 7004, "b2", NULL);
    A(4), I(10923), I(16383), node7("127.0.0.1", 7002, "a3", NULL),
        node7("127.0.0.1", 7005, "b3", NULL);
    t = parse_built("seed");
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_uint_eq(t->nranges, 3);
    ck_assert_uint_eq(t->covered, RCP__SLOTS);
    ck_assert_uint_eq(t->ranges[1].start, 5461);
    ck_assert_uint_eq(t->ranges[1].end, 10922);
    ck_assert_uint_eq(t->ranges[1].nnodes, 2);
    ck_assert_str_eq(t->ranges[1].nodes[0].host, "127.0.0.1");
    ck_assert_int_eq(t->ranges[1].nodes[0].port, 7001);
    ck_assert_str_eq(t->ranges[1].nodes[0].id, "a2");
    ck_assert_int_eq(t->ranges[1].nodes[1].port, 7004);
    ck_assert_str_eq(t->ranges[2].nodes[1].id, "b3");
    rcp__slots_free(t);
}
END_TEST

START_TEST(hostnames_and_unknown_endpoints)
{
    rcp__slots_table *t;
    reset();
    A(5);
    A(3), I(0), I(9), node7("", 7000, "n1", "h1.example");       /* no IP: hostname */
    A(3), I(10), I(19), node7("?", 7001, "n2", "h2.example");    /* unknown IP: hostname */
    A(3), I(20), I(29), node7("10.0.0.3", 7002, "n3", "h3");     /* IP preferred */
    A(3), I(30), I(39), node7("", 7003, "n4", NULL);              /* the host we asked */
    /* Unknown endpoint as a null, metadata with other keys first. */
    A(3), I(40), I(49);
    A(4), N(), I(7004), S("n5");
    A(4), S("ip"), S("10.0.0.5"), S("hostname"), S("h5");
    t = parse_built("seed.example");
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_str_eq(t->ranges[0].nodes[0].host, "h1.example");
    ck_assert_str_eq(t->ranges[1].nodes[0].host, "h2.example");
    ck_assert_str_eq(t->ranges[2].nodes[0].host, "10.0.0.3");
    ck_assert_str_eq(t->ranges[3].nodes[0].host, "seed.example");
    ck_assert_str_eq(t->ranges[4].nodes[0].host, "h5");
    ck_assert_int_eq(t->ranges[4].nodes[0].port, 7004);
    ck_assert_uint_eq(t->covered, 50);
    rcp__slots_free(t);

    /* No IP, no hostname, nothing asked: refused. */
    reset();
    A(1);
    A(3), I(0), I(9), node7("?", 7000, "n1", NULL);
    expect_error(NULL, "no usable endpoint");
    expect_error("", "no usable endpoint");
    expect_error("?", "no usable endpoint");
}
END_TEST

START_TEST(old_formats_and_holes)
{
    rcp__slots_table *t;
    reset();
    A(3);
    A(3), I(0), I(100), A(2), S("10.0.0.1"), I(6379);                /* 3.x: no id */
    A(4), I(200), I(300), A(3), S("10.0.0.2"), I(6379), S("idB"),     /* 4.x-6.x: id */
        A(2), S("10.0.0.3"), I(6380);
    A(3), I(16383), I(16383), A(5), S("10.0.0.4"), I(6379), S("idC"), A(0), S("future");
    t = parse_built(NULL);
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_uint_eq(t->covered, 101 + 101 + 1);
    ck_assert_str_eq(t->ranges[0].nodes[0].id, "");
    ck_assert_str_eq(t->ranges[1].nodes[0].id, "idB");
    ck_assert_uint_eq(t->ranges[1].nnodes, 2);
    ck_assert_str_eq(t->ranges[1].nodes[1].host, "10.0.0.3");
    ck_assert_str_eq(t->ranges[2].nodes[0].host, "10.0.0.4");
    rcp__slots_free(t);
}
END_TEST

START_TEST(garbage)
{
    rcp__slots_table *t = (rcp__slots_table *)0x1;
    char longname[300];

    ck_assert_int_eq(rcp__slots_parse(NULL, "h", &t, err, sizeof err), -1);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(rcp__slots_parse(NULL, "h", NULL, err, sizeof err), -1);
    ck_assert_int_eq(rcp__slots_parse(NULL, "h", &t, NULL, 0), -1);

    reset(); A(0); expect_error("h", "empty slot table");
    reset(); I(3); expect_error("h", "not an array");
    reset(); S("x"); expect_error("h", "not an array");
    reset(); N(); expect_error("h", "not an array");
    reset(); rpos += (size_t)sprintf(resp, "-ERR This instance has cluster support disabled\r\n");
    expect_error("h", "cluster support disabled");

    reset(); A(1); I(5); expect_error("h", "range 0");
    reset(); A(1); A(2), I(0), I(5); expect_error("h", "range 0");
    reset(); A(1); A(3), S("0"), I(5), node7("h", 1, "i", NULL); expect_error("h", "integer");
    reset(); A(1); A(3), I(0), N(), node7("h", 1, "i", NULL); expect_error("h", "integer");
    reset(); A(1); A(3), I(6), I(5), node7("h", 1, "i", NULL); expect_error("h", "range 0");
    reset(); A(1); A(3), I(-1), I(5), node7("h", 1, "i", NULL); expect_error("h", "range 0");
    reset(); A(1); A(3), I(0), I(16384), node7("h", 1, "i", NULL); expect_error("h", "range 0");
    reset(); A(1); A(3), I(0), I(9223372036854775807LL), node7("h", 1, "i", NULL);
    expect_error("h", "range 0");

    reset(); A(1); A(3), I(0), I(5), S("node"); expect_error("h", "node 0");
    reset(); A(1); A(3), I(0), I(5), A(1), S("h"); expect_error("h", "node 0");
    reset(); A(1); A(3), I(0), I(5), A(2), I(1), I(1); expect_error("h", "endpoint");
    reset(); A(1); A(3), I(0), I(5), node7("h", 0, "i", NULL); expect_error("h", "port");
    reset(); A(1); A(3), I(0), I(5), node7("h", 65536, "i", NULL); expect_error("h", "port");
    reset(); A(1); A(3), I(0), I(5), node7("h", -1, "i", NULL); expect_error("h", "port");
    reset(); A(1); A(3), I(0), I(5), A(2), S("h"), S("6379"); expect_error("h", "port");
    reset(); A(1); A(3), I(0), I(5), A(3), S("h"), I(1), I(7); expect_error("h", "node id");
    reset(); A(1); A(3), I(0), I(5);
    node7("h", 1, "0123456789012345678901234567890123456789abcdefgh", NULL); /* 48 bytes */
    expect_error("h", "node id");
    reset(); A(1); A(3), I(0), I(5), A(4), S("h"), I(1), S("i"), S("meta");
    expect_error("h", "metadata");
    reset(); A(1); A(3), I(0), I(5), A(4), S("h"), I(1), S("i"), A(1), S("hostname");
    expect_error("h", "metadata");
    reset(); A(1); A(3), I(0), I(5), A(4), S("h"), I(1), S("i"), A(2), I(1), S("x");
    expect_error("h", "metadata");
    reset(); A(1); A(3), I(0), I(5), A(4), S(""), I(1), S("i"), A(2), S("hostname"), I(5);
    expect_error("h", "hostname");

    memset(longname, 'x', 256);
    longname[256] = '\0';
    reset(); A(1); A(3), I(0), I(5), node7(longname, 1, "i", NULL); expect_error("h", "longer");
    reset(); A(1); A(3), I(0), I(5), node7("", 1, "i", longname); expect_error("h", "longer");
    reset(); A(1); A(3), I(0), I(5), node7("", 1, "i", NULL); expect_error(longname, "longer");
    longname[255] = '\0';
    reset(); A(1); A(3), I(0), I(5), node7(longname, 1, "i", NULL);
    t = parse_built("h");
    ck_assert_ptr_nonnull(t);
    rcp__slots_free(t);

    /* Good first range, bad second: nothing leaks (ASan), nothing returned. */
    reset(); A(2);
    A(4), I(0), I(5), node7("h", 1, "i", NULL), node7("h", 2, "j", NULL);
    A(4), I(6), I(9), node7("h", 1, "i", NULL), node7("h", 0, "j", NULL);
    expect_error("h", "range 1 node 1");
}
END_TEST

START_TEST(overlap)
{
    reset(); A(2);
    A(3), I(0), I(100), node7("h", 1, "i", NULL);
    A(3), I(100), I(200), node7("h", 2, "j", NULL);
    expect_error("h", "overlaps");

    reset(); A(2);
    A(3), I(50), I(60), node7("h", 1, "i", NULL);
    A(3), I(0), I(16383), node7("h", 2, "j", NULL);
    expect_error("h", "overlaps");

    reset(); A(2);
    A(3), I(7), I(7), node7("h", 1, "i", NULL);
    A(3), I(7), I(7), node7("h", 1, "i", NULL);
    expect_error("h", "overlaps");
}
END_TEST

/* Replies the reader would never produce: NULL elements, impossible
 * counts, and nesting far deeper than the reader allows. */
START_TEST(hand_built_trees)
{
    rcp_reply top = {0}, range = {0}, nums[2], deep[1000];
    rcp_reply *telem[1], *relem[3], *delem[1000];
    rcp__slots_table *t;
    int i;

    memset(nums, 0, sizeof nums);
    top.type = RCP_REPLY_ARRAY;
    top.elements = 1;
    top.element = NULL; /* count without storage */
    ck_assert_int_eq(rcp__slots_parse(&top, "h", &t, err, sizeof err), -1);

    top.element = telem;
    telem[0] = NULL; /* a NULL range */
    ck_assert_int_eq(rcp__slots_parse(&top, "h", &t, err, sizeof err), -1);

    telem[0] = &range;
    range.type = RCP_REPLY_ARRAY;
    range.elements = 3;
    range.element = relem;
    nums[0].type = nums[1].type = RCP_REPLY_INTEGER;
    nums[1].integer = 3;
    relem[0] = &nums[0];
    relem[1] = &nums[1];
    relem[2] = NULL; /* a NULL node */
    ck_assert_int_eq(rcp__slots_parse(&top, "h", &t, err, sizeof err), -1);

    /* The node slot holds a 1000-deep chain of one-element arrays. */
    for (i = 0; i < 1000; i++) {
        deep[i].type = RCP_REPLY_ARRAY;
        deep[i].elements = 1;
        deep[i].element = &delem[i];
        delem[i] = i + 1 < 1000 ? &deep[i + 1] : NULL;
    }
    relem[2] = &deep[0];
    ck_assert_int_eq(rcp__slots_parse(&top, "h", &t, err, sizeof err), -1);
    telem[0] = &deep[0];
    ck_assert_int_eq(rcp__slots_parse(&top, "h", &t, err, sizeof err), -1);
    ck_assert_int_eq(rcp__slots_parse(&deep[0], "h", &t, err, sizeof err), -1);

    /* A string reply with a NULL str pointer. */
    {
        rcp_reply s = {0};
        rcp_reply *nelem[2];
        rcp_reply node = {0}, port = {0};
        s.type = RCP_REPLY_STRING;
        port.type = RCP_REPLY_INTEGER;
        port.integer = 6379;
        node.type = RCP_REPLY_ARRAY;
        node.elements = 2;
        node.element = nelem;
        nelem[0] = &s;
        nelem[1] = &port;
        relem[2] = &node;
        telem[0] = &range;
        ck_assert_int_eq(rcp__slots_parse(&top, "h", &t, err, sizeof err), -1);
        /* ...and with a string the parse succeeds: the tree is sound. */
        s.str = "1.2.3.4";
        s.len = 7;
        ck_assert_int_eq(rcp__slots_parse(&top, "h", &t, err, sizeof err), 0);
        ck_assert_uint_eq(t->covered, 4);
        rcp__slots_free(t);
    }
    rcp__slots_free(NULL);
}
END_TEST

/* Random byte corruption of a valid reply: whatever the reader accepts,
 * the parser must either accept sanely or refuse, never crash or leak. */
START_TEST(random_corruption)
{
    char base[sizeof resp];
    size_t blen;
    unsigned seed = 4242, ok = 0, refused = 0;
    int round;

    reset();
    A(3);
    A(4), I(0), I(5460), node7("127.0.0.1", 7000, "a1", NULL), node7("", 7003, "b1", "hb1");
    A(4), I(5461), I(10922), node7("127.0.0.1", 7001, "a2", NULL), node7("?", 7004, "b2", NULL);
    A(3), I(10923), I(16383), node7("127.0.0.1", 7002, "a3", "h3");
    memcpy(base, resp, rpos);
    blen = rpos;

    for (round = 0; round < 20000; round++) {
        char buf[sizeof resp];
        rcp_reply *r;
        rcp__slots_table *t;
        int flips = 1 + round % 4, k;

        memcpy(buf, base, blen);
        for (k = 0; k < flips; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % blen;
            seed = seed * 1103515245u + 12345u;
            buf[at] = (char)(seed >> 16);
        }
        r = feed(buf, blen);
        if (!r)
            continue;
        if (rcp__slots_parse(r, "asked", &t, err, sizeof err) == 0) {
            size_t i, j;
            ck_assert_uint_le(t->covered, RCP__SLOTS);
            for (i = 0; i < t->nranges; i++) {
                ck_assert_uint_le(t->ranges[i].start, t->ranges[i].end);
                ck_assert_uint_lt(t->ranges[i].end, RCP__SLOTS);
                ck_assert_uint_ge(t->ranges[i].nnodes, 1);
                for (j = 0; j < t->ranges[i].nnodes; j++) {
                    ck_assert_uint_gt(strlen(t->ranges[i].nodes[j].host), 0);
                    ck_assert_int_ge(t->ranges[i].nodes[j].port, 1);
                    ck_assert_int_le(t->ranges[i].nodes[j].port, 65535);
                }
            }
            rcp__slots_free(t);
            ok++;
        } else {
            refused++;
        }
        rcp_reply_free(r);
    }
    ck_assert_uint_gt(ok, 0);
    ck_assert_uint_gt(refused, 0);
}
END_TEST

static int allocs_left = -1;
static void *fail_malloc(size_t n) { return allocs_left-- == 0 ? NULL : malloc(n); }
static void *fail_calloc(size_t a, size_t b) { return allocs_left-- == 0 ? NULL : calloc(a, b); }
static void *fail_realloc(void *p, size_t n) { return allocs_left-- == 0 ? NULL : realloc(p, n); }

START_TEST(allocation_failure)
{
    rcp_allocator a = {fail_malloc, fail_calloc, fail_realloc, free};
    rcp__slots_table *t;
    rcp_reply *r;
    int k, rc = -1;

    reset();
    A(2);
    A(4), I(0), I(100), node7("h", 1, "i", NULL), node7("h", 2, "j", NULL);
    A(3), I(101), I(200), node7("h", 3, "k", NULL);
    r = feed(resp, rpos);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(rcp_set_allocator(&a), RCP_OK);
    /* Fail each allocation in turn until the parse needs no more. */
    for (k = 0; k < 10 && rc < 0; k++) {
        allocs_left = k;
        rc = rcp__slots_parse(r, "h", &t, err, sizeof err);
        if (rc < 0)
            ck_assert_str_eq(err, "out of memory");
    }
    allocs_left = -1;
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(k, 1);
    rcp__slots_free(t);
    rcp_reset_allocator();
    rcp_reply_free(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("slotsparse");
    TCase *tc = rcptest_tcase(s, "core", 60);

    RCPTEST_ADD(tc, normal_3x1, hostnames_and_unknown_endpoints, old_formats_and_holes, garbage,
                overlap, hand_built_trees, random_corruption, allocation_failure);
    return rcptest_run(s) ? 1 : 0;
}
