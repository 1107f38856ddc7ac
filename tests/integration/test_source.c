/* test_source.c: streaming writes (rcp_source, docs/large-values.md)
 * against a real server: SET from a callback source of 0 B, 1 B, 1 MiB
 * and 64 MiB, read back through a checking sink (the test never holds a
 * large value); SET from a file at an offset; the 64 MiB upload keeps the
 * process's peak memory far below the value; a source that ends early or
 * fails drops the connection, fails the request with RCP_ERR_IO and
 * leaves the key unset, after which the connection reconnects and serves;
 * malformed sources are refused; several threads mixing ordinary GETs and
 * source SETs, sync and async, get every reply right. */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "rcpipe.h"

#define MIB (1024u * 1024u)

static rcpt_server srv;
static rcp_conn *conn;
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;
static int connects;

/* A callback source of rcpt_pattern(., seed); ends early at stop_at if set (0, or
 * -1 with fail). Records that offsets came in order. */
typedef struct gen_source {
    rcp_source s;
    unsigned seed;
    uint64_t next;
    int bad;
    uint64_t stop_at; /* 0: never */
    int fail;
    long calls;
} gen_source;

static ssize_t gen_fn(void *ud, char *buf, size_t cap, uint64_t off)
{
    gen_source *g = ud;
    size_t n = cap;
    g->calls++;
    if (off != g->next || cap == 0)
        g->bad++;
    if (g->stop_at && off + n > g->stop_at) {
        if (off >= g->stop_at)
            return g->fail ? -1 : 0;
        n = (size_t)(g->stop_at - off);
    }
    if (n > 1000)
        n -= 7; /* not always what was asked: the library asks again */
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)rcpt_pattern(off + i, g->seed);
    g->next = off + n;
    return (ssize_t)n;
}

static void gen_init(gen_source *g, size_t len, unsigned seed)
{
    memset(g, 0, sizeof *g);
    g->s.kind = RCP_SOURCE_CALLBACK;
    g->s.len = len;
    g->s.fn = gen_fn;
    g->s.ud = g;
    g->seed = seed;
}

/* A sink checking the pattern (the value read back without holding it). */
typedef struct check_sink {
    rcp_sink s;
    unsigned seed;
    uint64_t next;
    int bad;
} check_sink;

static int check_fn(void *ud, const char *data, size_t len, uint64_t off, uint64_t total)
{
    check_sink *k = ud;
    (void)total;
    if (off != k->next)
        k->bad++;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)data[i] != rcpt_pattern(off + i, k->seed)) {
            k->bad++;
            break;
        }
    k->next = off + len;
    return 0;
}

/* The value under key is n bytes of rcpt_pattern(., seed). */
static int value_is(const char *key, size_t n, unsigned seed)
{
    check_sink k;
    const char *argv[2] = {"GET", key};
    rcp_reply *r;
    int ok;
    memset(&k, 0, sizeof k);
    k.s.kind = RCP_SINK_CALLBACK;
    k.s.fn = check_fn;
    k.s.ud = &k;
    k.seed = seed;
    r = rcp_conn_command_argv_sink(conn, 2, argv, NULL, &k.s);
    ok = rcptest_is_int(r, (long long)n) && !k.bad && k.next == n;
    rcp_reply_free(r);
    return ok;
}

static rcp_reply *set_source(const char *key, const rcp_source *s)
{
    const char *argv[2] = {"SET", key};
    return rcp_conn_command_argv_source(conn, 2, argv, NULL, s);
}

/* EXISTS key; a request the connection could not send yet (it was just
 * dropped and is coming back) is asked again, up to 10 s. */
static long long exists(const char *key)
{
    uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(10000) * 1000000ull;
    char d[256];
    rcp_reply *r;
    long long v;
    while ((r = rcp_conn_command(conn, "EXISTS %s", key))->err == RCP_ERR_NOT_SENT &&
           rcptest_now_ns() < until) {
        rcp_reply_free(r);
        rcptest_sleep_ms(5);
    }
    ck_assert_msg(r->type == RCP_REPLY_INTEGER, "EXISTS %s: %s", key,
                  rcptest_describe(r, d, sizeof d));
    v = r->integer;
    rcp_reply_free(r);
    return v;
}

static uint64_t disconnects(void)
{
    rcp_conn_stats st;
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    return st.disconnects;
}

static void on_event(const rcp_event *ev, void *ud)
{
    (void)ud;
    if (ev->type != RCP_EVENT_CONNECTED)
        return;
    pthread_mutex_lock(&ev_mu);
    connects++;
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mu);
}

static int connects_now(void)
{
    int n;
    pthread_mutex_lock(&ev_mu);
    n = connects;
    pthread_mutex_unlock(&ev_mu);
    return n;
}

/* Wait until the connection has connected more than `before` times. */
static void await_reconnect(int before)
{
    pthread_mutex_lock(&ev_mu);
    while (connects <= before)
        pthread_cond_wait(&ev_cv, &ev_mu);
    pthread_mutex_unlock(&ev_mu);
}

/* The connection answers ordinary requests in step. */
static void assert_in_step(void)
{
    char d[256];
    rcp_reply *r;
    r = rcp_conn_command(conn, "SET src:small hello");
    rcp_reply_free(r);
    r = rcp_conn_command(conn, "GET src:small");
    ck_assert_msg(rcpt_is_cstring(r, "hello"), "after: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    rcpt_expect_echo(conn, "in-step");
}

static void setup(void)
{
    rcp_conn_options o;
    rcpt_server_start_ok(&srv, NULL);
    rcpt_options(&o, &srv);
    o.request_timeout_ms = 60000;
    o.event_cb = on_event;
    connects = 0;
    conn = rcpt_conn_open_ok(&o);
}

static void teardown(void)
{
    rcpt_teardown(&srv, &conn);
}

START_TEST(callback_sizes)
{
    static const size_t sizes[] = {0, 1, MIB, 3 * MIB + 17};
    char d[256];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        gen_source g;
        rcp_reply *r;
        gen_init(&g, sizes[i], (unsigned)i + 1);
        r = set_source("src:v", &g.s);
        ck_assert_msg(rcpt_is_status(r, "OK"), "size %zu: %s", sizes[i],
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        ck_assert_int_eq(g.bad, 0);
        ck_assert_uint_eq(g.next, sizes[i]);
        if (sizes[i] == 0)
            ck_assert_int_eq(g.calls, 0); /* nothing to pull */
        ck_assert_msg(value_is("src:v", sizes[i], (unsigned)i + 1), "size %zu read back wrong",
                      sizes[i]);
    }
    assert_in_step();
    ck_assert_uint_eq(disconnects(), 0);
}
END_TEST

START_TEST(callback_64mib_bounded_memory)
{
    const size_t n = 64 * MIB;
    gen_source g;
    rcp_reply *r;
    char d[256];
    long base, peak;
    rcp_conn_stats st;
    gen_init(&g, n, 64);
    /* Reset the peak to the current RSS (Linux >= 4.0), so the peak read
     * after is the SET's own. */
    base = rcpt_peak_reset();
    r = set_source("src:huge", &g.s);
    peak = rcpt_proc_kb("VmHWM:");
    ck_assert_msg(rcpt_is_status(r, "OK"), "%s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_int_eq(g.bad, 0);
    /* The value is 65,536 KiB: a streamed write holds one chunk. */
    fprintf(stderr, "64 MiB streamed SET: peak RSS grew by %ld KiB\n", peak - base);
    ck_assert_msg(peak - base < 8 * 1024, "peak RSS grew by %ld KiB for a 64 MiB value",
                  peak - base);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    ck_assert_uint_ge(st.bytes_out, n);
    ck_assert(value_is("src:huge", n, 64));
    assert_in_step();
}
END_TEST

/* A pipe: read() from where it is, never sendfile. */
struct pipe_writer {
    int fd;
    size_t n;
};

static void *pipe_writer_main(void *arg)
{
    struct pipe_writer *w = arg;
    char chunk[4096];
    size_t off = 0;
    while (off < w->n) {
        size_t k = w->n - off < sizeof chunk ? w->n - off : sizeof chunk;
        for (size_t i = 0; i < k; i++)
            chunk[i] = (char)rcpt_pattern(off + i, 11);
        if (write(w->fd, chunk, k) != (ssize_t)k)
            break;
        off += k;
    }
    close(w->fd);
    return NULL;
}

START_TEST(fd_source_pipe)
{
    const size_t n = 300 * 1024 + 1;
    struct pipe_writer w;
    pthread_t th;
    rcp_conn_stats a, b;
    rcp_source s;
    rcp_reply *r;
    char d[256];
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    w.fd = p[1];
    w.n = n;
    ck_assert_int_eq(pthread_create(&th, NULL, pipe_writer_main, &w), 0);
    memset(&s, 0, sizeof s);
    s.kind = RCP_SOURCE_FD;
    s.fd = p[0];
    s.len = n;
    ck_assert_int_eq(rcp_conn_get_stats(conn, &a), RCP_OK);
    r = set_source("src:pipe", &s);
    ck_assert_msg(rcpt_is_status(r, "OK"), "%s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_int_eq(rcp_conn_get_stats(conn, &b), RCP_OK);
    ck_assert_uint_eq(b.sendfile_bytes, a.sendfile_bytes);
    pthread_join(th, NULL);
    close(p[0]);
    ck_assert(value_is("src:pipe", n, 11));
}
END_TEST

/* SET key from the fd source s (n bytes of rcpt_pattern(., seed)) on
 * conn: OK, all of it sent with sendfile (a file in plain text), read
 * back intact. *a and *b: the stats before and after the SET. */
static void set_file_checked(const char *key, const rcp_source *s, size_t n, unsigned seed,
                             rcp_conn_stats *a, rcp_conn_stats *b)
{
    char d[256];
    rcp_reply *r;
    ck_assert_int_eq(rcp_conn_get_stats(conn, a), RCP_OK);
    r = set_source(key, s);
    ck_assert_msg(rcpt_is_status(r, "OK"), "%s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_int_eq(rcp_conn_get_stats(conn, b), RCP_OK);
    ck_assert_uint_eq(b->sendfile_bytes - a->sendfile_bytes, n);
    ck_assert(value_is(key, n, seed));
}

START_TEST(fd_source_at_offset)
{
    const size_t n = 2 * MIB + 5, skip = 1000;
    char path[] = "/tmp/rcp-source-XXXXXX";
    static char buf[2 * MIB + 5];
    char d[256];
    rcp_conn_stats a, b;
    rcp_source s;
    rcp_reply *r;
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    memset(buf, 'x', skip);
    ck_assert_int_eq(write(fd, buf, skip), (ssize_t)skip);
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)rcpt_pattern(i, 9);
    ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
    ck_assert_int_eq(write(fd, "tail", 4), 4);
    memset(&s, 0, sizeof s);
    s.kind = RCP_SOURCE_FD;
    s.fd = fd;
    s.offset = (off_t)skip;
    s.len = n;
    set_file_checked("src:file", &s, n, 9, &a, &b);

    /* A file shorter than announced: the source ends early. */
    s.len = n + 10; /* 4 bytes of "tail", then end of file */
    r = set_source("src:file-short", &s);
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_IO), "%s", rcptest_describe(r, d, sizeof d));
    ck_assert_msg(strstr(r->str, "source ended at byte"), "%s", r->str);
    rcp_reply_free(r);
    close(fd);
}
END_TEST

/* A source that ends before its length (0 from the callback, or -1):
 * the request fails with RCP_ERR_IO, the key is not created, the
 * connection is dropped and comes back, and serves in step. */
START_TEST(short_source_drops_connection)
{
    for (int fail = 0; fail < 2; fail++) {
        gen_source g;
        rcp_reply *r;
        char d[256], want[64];
        uint64_t before = disconnects();
        int c0 = connects_now();
        gen_init(&g, MIB, 5);
        g.stop_at = 300000;
        g.fail = fail;
        r = set_source("src:short", &g.s);
        ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_IO), "%s",
                      rcptest_describe(r, d, sizeof d));
        snprintf(want, sizeof want, "source ended at byte %d of %u", 300000, MIB);
        ck_assert_msg(strstr(r->str, want), "%s", r->str);
        rcp_reply_free(r);
        ck_assert_uint_eq(disconnects(), before + 1);
        await_reconnect(c0);
        ck_assert_int_eq(exists("src:short"), 0);
        assert_in_step();
    }
}
END_TEST

/* A sync call whose value is at most RCP__SOURCE_INLINE (64 KiB) reads it
 * whole first, on the caller's thread, and sends it as any request: a
 * source that ends early then fails the call with RCP_ERR_IO before
 * anything is sent, and the connection stays up. At the limit the value
 * round-trips; one byte over, it streams (and a short one drops the
 * connection, as above). */
START_TEST(small_source_read_first)
{
    gen_source g;
    rcp_reply *r;
    char d[256];
    uint64_t before = disconnects();
    int c0;

    gen_init(&g, 1000, 21);
    g.stop_at = 500;
    r = set_source("src:small-short", &g.s);
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_IO), "%s", rcptest_describe(r, d, sizeof d));
    ck_assert_msg(strstr(r->str, "source ended at byte 500 of 1000"), "%s", r->str);
    rcp_reply_free(r);
    ck_assert_uint_eq(disconnects(), before); /* nothing was sent: kept */
    ck_assert_int_eq(exists("src:small-short"), 0);

    gen_init(&g, 64 * 1024, 22);
    r = set_source("src:small-limit", &g.s);
    ck_assert_msg(rcpt_is_status(r, "OK"), "%s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert(!g.bad && g.next == 64 * 1024);
    ck_assert(value_is("src:small-limit", 64 * 1024, 22));
    ck_assert_uint_eq(disconnects(), before);

    gen_init(&g, 64 * 1024 + 1, 23);
    g.stop_at = 1000;
    c0 = connects_now();
    r = set_source("src:over-limit-short", &g.s);
    ck_assert_msg(rcpt_is_client_error(r, RCP_ERR_IO), "%s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_uint_eq(disconnects(), before + 1); /* streamed: dropped mid-value */
    await_reconnect(c0);
    assert_in_step();
}
END_TEST

/* A sync call with a streamed value on an idle connection uploads it on
 * the caller's own thread (caller_uploads), a file with sendfile there
 * too; with fast_path off the loop does it. Either way the value is
 * stored whole. The first call after a reply may find the loop still
 * finishing its pass (then the loop uploads): a few tries. */
START_TEST(sync_upload_paths)
{
    static const unsigned seed = 31;
    const size_t n = MIB + 3;
    char path[] = "/tmp/rcp-source-XXXXXX", d[256];
    rcp_conn_stats a, b;
    rcp_conn_options o;
    rcp_conn *off;
    rcp_source fs;
    rcp_reply *r;
    int fd = mkstemp(path), i, took = 0;
    static char buf[MIB + 3];

    for (i = 0; i < 5 && !took; i++) {
        gen_source g;
        gen_init(&g, n, seed);
        ck_assert_int_eq(rcp_conn_get_stats(conn, &a), RCP_OK);
        r = set_source("src:caller", &g.s);
        ck_assert_msg(rcpt_is_status(r, "OK"), "%s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        ck_assert(!g.bad && g.next == n);
        ck_assert_int_eq(rcp_conn_get_stats(conn, &b), RCP_OK);
        took = b.caller_uploads > a.caller_uploads;
        ck_assert(value_is("src:caller", n, seed));
    }
    ck_assert_msg(took, "no upload on the caller's thread in 5 sync calls");

    ck_assert_int_ge(fd, 0);
    unlink(path);
    for (size_t k = 0; k < n; k++)
        buf[k] = (char)rcpt_pattern(k, seed + 1);
    ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
    memset(&fs, 0, sizeof fs);
    fs.kind = RCP_SOURCE_FD;
    fs.fd = fd;
    fs.len = n;
    for (i = 0, took = 0; i < 5 && !took; i++) {
        set_file_checked("src:caller-file", &fs, n, seed + 1, &a, &b);
        took = b.caller_uploads > a.caller_uploads;
    }
    ck_assert_msg(took, "no file upload on the caller's thread in 5 sync calls");
    close(fd);

    rcpt_options(&o, &srv);
    o.fast_path = 0;
    off = rcpt_conn_open_ok(&o);
    for (i = 0; i < 3; i++) {
        gen_source g;
        const char *argv[2] = {"SET", "src:loop"};
        gen_init(&g, n, seed + 2);
        r = rcp_conn_command_argv_source(off, 2, argv, NULL, &g.s);
        ck_assert_msg(rcpt_is_status(r, "OK"), "%s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    ck_assert_int_eq(rcp_conn_get_stats(off, &b), RCP_OK);
    ck_assert_uint_eq(b.caller_uploads, 0);
    rcp_conn_close(off);
    ck_assert(value_is("src:loop", n, seed + 2));
    ck_assert_uint_eq(disconnects(), 0);
}
END_TEST

START_TEST(invalid_sources_refused)
{
    rcp_source s;
    rcp_future f;
    rcp_reply *r;
    const char *argv[2] = {"SET", "src:x"};
    memset(&f, 0, sizeof f);
    f.resolve = (void (*)(rcp_future *, rcp_reply *))abort; /* never called */
    ck_assert_int_eq(rcp_conn_send_argv_source(conn, &f, 2, argv, NULL, NULL), RCP_ERR_INVALID);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(rcp_conn_send_argv_source(conn, &f, 2, argv, NULL, &s), RCP_ERR_INVALID);
    s.kind = RCP_SOURCE_CALLBACK; /* no fn */
    ck_assert_int_eq(rcp_conn_send_argv_source(conn, &f, 2, argv, NULL, &s), RCP_ERR_INVALID);
    s.kind = RCP_SOURCE_FD;
    s.fd = -1;
    ck_assert_int_eq(rcp_conn_send_argv_source(conn, &f, 2, argv, NULL, &s), RCP_ERR_INVALID);
    s.fd = 0;
    s.offset = -1;
    r = rcp_conn_command_argv_source(conn, 2, argv, NULL, &s);
    ck_assert(rcpt_is_client_error(r, RCP_ERR_INVALID));
    rcp_reply_free(r);
    s.offset = 0;
    s.len = (size_t)600 * MIB; /* over max_request_bytes (512 MiB) */
    r = rcp_conn_command_argv_source(conn, 2, argv, NULL, &s);
    ck_assert(rcpt_is_client_error(r, RCP_ERR_TOO_LARGE));
    rcp_reply_free(r);
    assert_in_step();
}
END_TEST

#define THREADS 4
#define ROUNDS 30
#define BIGN (300u * 1024 + 7) /* several chunks per value */

typedef struct async_req {
    rcp_future f;
    gen_source g;     /* source SETs */
    int is_set;
    int id;           /* GETs: which small key */
    int ok;
    rcp_waitgroup *wg;
} async_req;

static void async_done(rcp_future *f, rcp_reply *r)
{
    async_req *a = (async_req *)f;
    if (a->is_set) {
        a->ok = rcpt_is_status(r, "OK") && !a->g.bad && a->g.next == BIGN;
    } else {
        char want[32];
        snprintf(want, sizeof want, "small-%d", a->id);
        a->ok = rcpt_is_cstring(r, want);
    }
    rcp_waitgroup_done(a->wg);
}

typedef struct mixer {
    pthread_t th;
    int id, bad;
} mixer;

static void *mixer_main(void *arg)
{
    mixer *m = arg;
    char bigkey[32];
    snprintf(bigkey, sizeof bigkey, "src:big%d", m->id);
    for (int round = 0; round < ROUNDS; round++) {
        unsigned seed = (unsigned)(m->id * 1000 + round);
        if ((round + m->id) % 2) {
            /* Async: ordinary GETs around source SETs, one pipeline. */
            async_req a[6];
            rcp_waitgroup *wg = rcp_waitgroup_new();
            for (int i = 0; i < 6; i++) {
                char key[32];
                const char *argv[2] = {NULL, key};
                memset(&a[i], 0, sizeof a[i]);
                a[i].f.resolve = async_done;
                a[i].wg = wg;
                a[i].is_set = i % 2;
                a[i].id = (m->id * 7 + i) % 10;
                rcp_waitgroup_add(wg, 1);
                if (a[i].is_set) {
                    argv[0] = "SET";
                    gen_init(&a[i].g, BIGN, seed);
                    snprintf(key, sizeof key, "%s", bigkey);
                    if (rcp_conn_send_argv_source(conn, &a[i].f, 2, argv, NULL, &a[i].g.s) !=
                        RCP_OK)
                        rcp_waitgroup_done(wg), m->bad++;
                } else {
                    argv[0] = "GET";
                    snprintf(key, sizeof key, "src:s%d", a[i].id);
                    if (rcp_conn_send_argv(conn, &a[i].f, 2, argv, NULL) != RCP_OK)
                        rcp_waitgroup_done(wg), m->bad++;
                }
            }
            if (rcp_waitgroup_wait(wg, 60000) != RCP_OK)
                m->bad++;
            for (int i = 0; i < 6; i++)
                m->bad += !a[i].ok;
            rcp_waitgroup_free(wg);
        } else {
            /* Sync: a source SET, an ordinary GET. */
            gen_source g;
            char key[32], want[32];
            const char *argv[2] = {"GET", key};
            rcp_reply *r;
            gen_init(&g, BIGN, seed);
            r = set_source(bigkey, &g.s);
            m->bad += !rcpt_is_status(r, "OK") || g.bad || g.next != BIGN;
            rcp_reply_free(r);
            snprintf(key, sizeof key, "src:s%d", (m->id + round) % 10);
            snprintf(want, sizeof want, "small-%d", (m->id + round) % 10);
            r = rcp_conn_command_argv(conn, 2, argv, NULL);
            m->bad += !rcpt_is_cstring(r, want);
            rcp_reply_free(r);
        }
        /* The last SET of this thread's key is the one read back. */
        m->bad += !value_is(bigkey, BIGN, seed);
    }
    return NULL;
}

START_TEST(threads_mixed_order_kept)
{
    mixer m[THREADS];
    for (int i = 0; i < 10; i++) {
        rcp_reply *r = rcp_conn_command(conn, "SET src:s%d small-%d", i, i);
        rcp_reply_free(r);
    }
    for (int i = 0; i < THREADS; i++) {
        m[i].id = i;
        m[i].bad = 0;
        ck_assert_int_eq(pthread_create(&m[i].th, NULL, mixer_main, &m[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(m[i].th, NULL);
        ck_assert_msg(m[i].bad == 0, "thread %d: %d wrong replies", i, m[i].bad);
    }
    assert_in_step();
    ck_assert_uint_eq(disconnects(), 0);
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_checked_fixture(tc, setup, teardown);
    RCPTEST_ADD(tc, callback_sizes, callback_64mib_bounded_memory, fd_source_at_offset,
                fd_source_pipe, short_source_drops_connection, small_source_read_first,
                sync_upload_paths,
                invalid_sources_refused,
                threads_mixed_order_kept);
}

int main(void)
{
    return rcpt_main_case("source", "source", 120, add_tests);
}
