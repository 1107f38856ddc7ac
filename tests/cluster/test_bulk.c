/* test_bulk.c: the pool of bulk connections (issue 14: no head-of-line
 * blocking; cluster/bulk.c, docs/large-values.md).
 *
 * - small_beside_stalled_stream: a streamed GET of a 16 MiB value into an
 *   fd sink (a pipe nobody drains) stalls with the server's socket full;
 *   meanwhile small SETs and GETs (sync and async) to the same node, on
 *   the same handle, complete within 5 s while the big GET is still
 *   stalled. Then the pipe is drained and the value checked whole.
 * - stalled_stream_blocks_without_pool: the same with bulk_pool 0: the
 *   small GET, queued behind the value on the node's one pipeline, times
 *   out. The first test could not pass without the pool.
 * - big_set_goes_to_pool: a SET over bulk_threshold (plain argv) counts in
 *   bulk_requests and the node's bulk connections, and round-trips; a small
 *   one does not count.
 * - bulk_follows_moved: on a handle whose map is stale, a big SET and a
 *   streamed GET to slots just moved by hand follow MOVED to the new
 *   owner's bulk pool.
 * - replica_reads_readonly: with PREFER_REPLICA a streamed GET goes to a
 *   replica's bulk connection, which must have sent READONLY (else the
 *   replica would answer MOVED): no MOVED, the replica's bulk counters grow.
 * - concurrent_pool: 8 threads send SETs over the threshold (sync and async)
 *   and small GETs at once: every reply right, and no node ever has more
 *   bulk connections than bulk_pool per role (the pool grows under
 *   reg_mu; TSan runs this one too).
 * - source_on_new_bulk_conn: a streamed SET (a source) as the first request
 *   of a bulk connection still in its handshake (CLIENT SETNAME here; the
 *   PING of a TLS connection alike) must not lend its source to the
 *   handshake's command, which the value would then follow on the wire
 *   (lib/conn_connect.c; cluster-tls-routing's test_source found it).
 * - sync_spill: a script that keeps the server busy for 300 ms is the one
 *   request on its node's shared connection (a lone sync caller); a sync
 *   GET to the same node meanwhile takes the node's idle bulk connection
 *   for its own write and read instead of queueing behind it
 *   (cluster/sync.c, sync_spill): it counts in bulk_requests and answers
 *   right. With bulk_pool 0 the same GET queues on the shared connection
 *   and answers right too.
 * - options: out-of-range bulk_pool and bulk_threshold are refused with
 *   RCP_ERR_INVALID naming the option. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "rcpipe.h"

#define BIG_LEN (16 * 1024 * 1024)
#define SET_LEN (1024 * 1024)

static rcpc_cluster cl;

static unsigned char pat(uint64_t off)
{
    uint64_t x = off * 0x9E3779B1u;
    return (unsigned char)((x >> 13) ^ x ^ (off >> 8));
}

static char *pattern_value(size_t len)
{
    char *v = malloc(len);
    ck_assert(v != NULL);
    for (size_t i = 0; i < len; i++)
        v[i] = (char)pat(i);
    return v;
}

static rcp_cluster *open_pool(int bulk_pool, int stale)
{
    rcp_cluster_options o;
    static rcp_conn_options node;
    char err[512];
    ck_assert(rcpc_wait_ok(&cl, 60, err, sizeof err) == 0);
    rcpc_options(&o, &node, cl.seed);
    o.bulk_pool = bulk_pool;
    if (stale)
        o.refresh_interval_ms = 600000;
    return rcpc_open(&o);
}

static void set_value(rcp_cluster *h, const char *key, const char *v, size_t len)
{
    const char *argv[3] = {"SET", key, v};
    size_t lens[3] = {3, strlen(key), len};
    char d[256];
    rcp_reply *r = rcp_cluster_command_argv(h, 3, argv, lens);
    ck_assert_msg(rcpc_is_status(r, "OK"), "SET %s (%zu bytes): %s", key, len,
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}

static uint64_t bulk_requests(rcp_cluster *h)
{
    rcp_cluster_stats st;
    ck_assert_int_eq(rcp_cluster_get_stats(h, &st), RCP_OK);
    return st.bulk_requests;
}

/* A streamed GET of key into a buffer sink: the value must be v, whole. */
static void stream_get_check(rcp_cluster *h, const char *key, const char *v, size_t len,
                             const char *what)
{
    const char *argv[2] = {"GET", key};
    char *buf = malloc(len), d[256];
    rcp_sink sink;
    rcp_reply *r;

    ck_assert(buf != NULL);
    memset(&sink, 0, sizeof sink);
    sink.kind = RCP_SINK_BUFFER;
    sink.buf = buf;
    sink.cap = len;
    r = rcp_cluster_command_argv_sink(h, 2, argv, NULL, &sink);
    ck_assert_msg(rcptest_is_int(r, (long long)len), "streamed GET %s: %s", what,
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_msg(memcmp(buf, v, len) == 0, "streamed GET %s: wrong bytes", what);
    free(buf);
}

/* The streamed GET on a thread of its own: it is the one that stalls. */
struct stalled {
    rcp_cluster *h;
    const char *key;
    int fd;
    rcp_reply *reply;
    atomic_int done;
};

static void *stalled_main(void *arg)
{
    struct stalled *s = arg;
    const char *argv[2] = {"GET", s->key};
    rcp_sink sink;
    memset(&sink, 0, sizeof sink);
    sink.kind = RCP_SINK_FD;
    sink.fd = s->fd;
    s->reply = rcp_cluster_command_argv_sink(s->h, 2, argv, NULL, &sink);
    atomic_store(&s->done, 1);
    return NULL;
}

/* Sets key to BIG_LEN bytes of the pattern and small to "x", starts the
 * streamed GET of key into a pipe and waits until the pipe is full (the
 * transfer stalls there). */
static void stall_start(struct stalled *s, pthread_t *th, int p[2], rcp_cluster *h,
                        const char *key, const char *small)
{
    int waited = 0, avail = 0, full;
    char *v = pattern_value(BIG_LEN);

    set_value(h, key, v, BIG_LEN); /* with the pool: its connection is made */
    free(v);
    set_value(h, small, "x", 1);
    ck_assert(pipe(p) == 0);
    full = fcntl(p[0], F_GETPIPE_SZ) - 4096;
    memset(s, 0, sizeof *s);
    s->h = h;
    s->key = key;
    s->fd = p[1];
    ck_assert(pthread_create(th, NULL, stalled_main, s) == 0);
    /* Full: less room left than one chunk of the sink's (a write that
     * does not fit blocks). */
    while (waited < rcptest_scale(10000)) {
        ck_assert(ioctl(p[0], FIONREAD, &avail) == 0);
        if (avail >= full)
            break;
        usleep(10000);
        waited += 10;
    }
    ck_assert_msg(avail >= full, "the pipe never filled (%d bytes)", avail);
    usleep(200000); /* the server's socket fills too */
    ck_assert_msg(!atomic_load(&s->done), "the streamed GET did not stall");
}

/* Drains the pipe, checks every byte, joins the GET. */
static void stall_finish(struct stalled *s, pthread_t th, int p[2])
{
    static char buf[65536];
    uint64_t got = 0;
    long long bad = -1;
    char d[256];
    while (got < BIG_LEN) {
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        ck_assert_msg(n > 0, "pipe ended at %llu of %d bytes", (unsigned long long)got, BIG_LEN);
        for (ssize_t i = 0; i < n && bad < 0; i++)
            if ((unsigned char)buf[i] != pat(got + (uint64_t)i))
                bad = (long long)(got + (uint64_t)i);
        got += (uint64_t)n;
    }
    pthread_join(th, NULL);
    close(p[0]);
    close(p[1]);
    ck_assert_msg(bad < 0, "byte %lld of the value is wrong", bad);
    ck_assert_msg(rcptest_is_int(s->reply, BIG_LEN), "streamed GET: %s",
                  rcptest_describe(s->reply, d, sizeof d));
    rcp_reply_free(s->reply);
}

START_TEST(test_small_beside_stalled_stream)
{
    rcp_cluster *h = open_pool(2, 0);
    struct stalled s;
    pthread_t th;
    int p[2], rc = 0;
    const char *argv[2] = {"GET", "{bulk1}small"};
    char d[256];
    rcp_reply *r;

    stall_start(&s, &th, p, h, "{bulk1}big", "{bulk1}small");
    ck_assert_uint_eq(bulk_requests(h), 2); /* the SET of the value and its GET */

    r = rcp_cluster_command_timeout(h, 5000, "SET %s %s", "{bulk1}small", "y");
    ck_assert_msg(rcpc_is_status(r, "OK"), "small SET beside the stalled GET: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_cluster_command_timeout(h, 5000, "GET %s", "{bulk1}small");
    ck_assert_msg(r && r->type == RCP_REPLY_STRING,
                  "small GET beside the stalled GET: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcpc_call_async(h, -1, 2, argv, NULL, &rc);
    ck_assert_msg(r && r->type == RCP_REPLY_STRING,
                  "async small GET beside the stalled GET: %d %s", rc,
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_msg(!atomic_load(&s.done), "the big GET ended before the small ones: no stall");

    stall_finish(&s, th, p);
    rcp_cluster_close(h);
}
END_TEST

START_TEST(test_stalled_stream_blocks_without_pool)
{
    rcp_cluster *h = open_pool(0, 0);
    struct stalled s;
    pthread_t th;
    int p[2];
    char d[256];
    rcp_reply *r;

    stall_start(&s, &th, p, h, "{bulk2}big", "{bulk2}small");
    r = rcp_cluster_command_timeout(h, 1500, "GET %s", "{bulk2}small");
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_TIMEOUT,
                  "without the pool the small GET should wait behind the value: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_uint_eq(bulk_requests(h), 0);
    stall_finish(&s, th, p);
    rcp_cluster_close(h);
}
END_TEST

START_TEST(test_big_set_goes_to_pool)
{
    rcp_cluster *h = open_pool(2, 0);
    char *v = pattern_value(SET_LEN), d[256];
    const char *argv[2] = {"GET", "{bulk3}big"};
    rcp_cluster_node_info info[RCPC_MAX_NODES];
    size_t n, i;
    int conns = 0;
    uint64_t node_bulk = 0, before;
    rcp_reply *r;

    before = bulk_requests(h);
    set_value(h, "{bulk3}small", v, 1000); /* under the threshold: shared pipeline */
    ck_assert_uint_eq(bulk_requests(h), before);
    set_value(h, "{bulk3}big", v, SET_LEN);
    ck_assert_uint_eq(bulk_requests(h), before + 1);
    r = rcp_cluster_command_argv(h, 2, argv, NULL); /* a small GET of a big value: shared */
    ck_assert_msg(r && r->type == RCP_REPLY_STRING && r->len == SET_LEN &&
                      memcmp(r->str, v, SET_LEN) == 0,
                  "GET of the big SET: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_uint_eq(bulk_requests(h), before + 1);
    n = rcp_cluster_get_nodes(h, info, RCPC_MAX_NODES);
    for (i = 0; i < n && i < RCPC_MAX_NODES; i++) {
        conns += info[i].bulk_conns;
        node_bulk += info[i].bulk_requests;
    }
    ck_assert_int_eq(conns, 1);
    ck_assert_uint_eq(node_bulk, before + 1);
    free(v);
    rcp_cluster_close(h);
}
END_TEST

/* A slot being moved by hand from its owner (si) to another master (di). */
struct migration {
    rcpc_topo t;
    unsigned slot;
    int si, di;
    redisContext *cs, *cd;
};

/* Marks slot MIGRATING on its owner and IMPORTING on another master: from
 * then on the owner answers ASK for a key it does not hold. */
static void begin_migration(struct migration *m, unsigned slot)
{
    redisReply *r;
    int i;

    m->slot = slot;
    m->di = -1;
    ck_assert(rcpc_topology_any(&cl, &m->t) == 0);
    m->si = rcpc_slot_owner(&m->t, slot);
    ck_assert(m->si >= 0);
    for (i = 0; i < m->t.n; i++)
        if (m->t.node[i].is_master && i != m->si && !m->t.node[i].failed)
            m->di = i;
    ck_assert(m->di >= 0);
    m->cs = rcpc_connect(m->t.node[m->si].port);
    m->cd = rcpc_connect(m->t.node[m->di].port);
    ck_assert(m->cs && m->cd);
    r = redisCommand(m->cd, "CLUSTER SETSLOT %u IMPORTING %s", slot, m->t.node[m->si].id);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(m->cs, "CLUSTER SETSLOT %u MIGRATING %s", slot, m->t.node[m->di].id);
    ck_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* Moves the slot's keys over and gives the slot to the new owner, telling
 * every master. Returns the new owner's port. */
static int finish_migration(struct migration *m)
{
    rcpc_topo t = m->t;
    int si = m->si, di = m->di, i;
    unsigned slot = m->slot;
    redisContext *cs = m->cs, *cd = m->cd;
    redisReply *r;

    for (;;) {
        redisReply *keys = redisCommand(cs, "CLUSTER GETKEYSINSLOT %u 100", slot);
        ck_assert(keys && keys->type == REDIS_REPLY_ARRAY);
        if (keys->elements == 0) {
            freeReplyObject(keys);
            break;
        }
        for (size_t k = 0; k < keys->elements; k++) {
            r = redisCommand(cs, "MIGRATE 127.0.0.1 %d %b 0 10000", t.node[di].port,
                             keys->element[k]->str, (size_t)keys->element[k]->len);
            ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "MIGRATE: %s",
                          r && r->str ? r->str : "no reply");
            freeReplyObject(r);
        }
        freeReplyObject(keys);
    }
    for (i = 0; i < t.n; i++) {
        redisContext *co;
        if (!t.node[i].is_master || t.node[i].failed)
            continue;
        co = i == si ? cs : i == di ? cd : rcpc_connect(t.node[i].port);
        ck_assert(co != NULL);
        r = redisCommand(co, "CLUSTER SETSLOT %u NODE %s", slot, t.node[di].id);
        ck_assert(r != NULL);
        freeReplyObject(r);
        if (co != cs && co != cd)
            redisFree(co);
    }
    redisFree(cs);
    redisFree(cd);
    return t.node[di].port;
}

/* Moves slot (and its keys) from its owner to another master by hand,
 * telling every master. Returns the new owner's port. */
static int move_slot(unsigned slot)
{
    struct migration m;
    begin_migration(&m, slot);
    return finish_migration(&m);
}

START_TEST(test_bulk_follows_moved)
{
    rcp_cluster *h = open_pool(2, 1);
    char *v = pattern_value(SET_LEN), key[64], key2[64];
    rcp_cluster_stats a, b;
    unsigned slot = 1234, slot2 = 9876;

    snprintf(key, sizeof key, "%sbig", rcpc_slot_tag(slot)); /* the tag has its braces */
    snprintf(key2, sizeof key2, "%sbig", rcpc_slot_tag(slot2));
    set_value(h, key2, v, SET_LEN); /* before the move: the map is right */
    ck_assert_int_eq(rcp_cluster_get_stats(h, &a), RCP_OK);

    move_slot(slot);
    set_value(h, key, v, SET_LEN);
    move_slot(slot2);
    stream_get_check(h, key2, v, SET_LEN, "after the move");

    ck_assert_int_eq(rcp_cluster_get_stats(h, &b), RCP_OK);
    ck_assert_msg(b.moved - a.moved >= 2, "MOVED followed: %llu",
                  (unsigned long long)(b.moved - a.moved));
    /* Each request: its stale attempt and its redirected one, both bulk. */
    ck_assert_uint_ge(b.bulk_requests - a.bulk_requests, 4);
    free(v);
    rcp_cluster_close(h);
}
END_TEST

/* A streamed value, generated from its offset: pulled again from byte 0
 * when the handle replays it. */
struct gen_source {
    rcp_source s;
    atomic_int starts; /* calls at offset 0: one per upload */
};

static ssize_t gen_fn(void *ud, char *buf, size_t cap, uint64_t off)
{
    struct gen_source *g = ud;
    if (off == 0)
        atomic_fetch_add(&g->starts, 1);
    for (size_t i = 0; i < cap; i++)
        buf[i] = (char)pat(off + i);
    return (ssize_t)cap;
}

static void gen_init(struct gen_source *g, size_t len, unsigned flags)
{
    memset(g, 0, sizeof *g);
    g->s.kind = RCP_SOURCE_CALLBACK;
    g->s.len = len;
    g->s.fn = gen_fn;
    g->s.ud = g;
    g->s.flags = flags;
}

struct src_wait {
    rcp_future f;
    rcp_waitgroup *wg;
    rcp_reply *r;
};

static void src_wait_done(rcp_future *f, rcp_reply *r)
{
    struct src_wait *w = (struct src_wait *)f;
    w->r = rcp_reply_keep(r); /* r is valid only during the call */
    rcp_waitgroup_done(w->wg);
}

/* A SET of key from src, sync or async; the reply. */
static rcp_reply *set_source(rcp_cluster *h, const char *key, const rcp_source *src, int async)
{
    const char *argv[2] = {"SET", key};
    struct src_wait w;
    if (!async)
        return rcp_cluster_command_argv_source(h, 2, argv, NULL, src);
    memset(&w, 0, sizeof w);
    w.f.resolve = src_wait_done;
    w.wg = rcp_waitgroup_new();
    ck_assert(w.wg != NULL);
    rcp_waitgroup_add(w.wg, 1);
    ck_assert_int_eq(rcp_cluster_send_argv_source(h, &w.f, 2, argv, NULL, src), RCP_OK);
    ck_assert_int_eq(rcp_waitgroup_wait(w.wg, rcptest_scale(30000)), RCP_OK);
    rcp_waitgroup_free(w.wg);
    return w.r;
}

static void del_key(rcp_cluster *h, const char *key)
{
    const char *argv[2] = {"DEL", key};
    rcp_reply *r = rcp_cluster_command_argv(h, 2, argv, NULL);
    ck_assert(r->type == RCP_REPLY_INTEGER);
    rcp_reply_free(r);
}

static void expect_ok(rcp_reply *r, const char *what)
{
    char d[256];
    ck_assert_msg(rcpc_is_status(r, "OK"), "%s: %s", what, rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}

/* A handle whose map is stale for slot: opened (and used on the slot, so
 * that nothing of its start is still pending) before the slot moves by
 * hand. A handle of its own per case: a MOVED asks for a refresh, which
 * could land after the next move and make that handle right again. */
static rcp_cluster *stale_for(unsigned slot, const char *key)
{
    rcp_cluster *h = open_pool(2, 1);
    const char *argv[2] = {"EXISTS", key};
    rcp_reply *r = rcp_cluster_command_argv(h, 2, argv, NULL);
    ck_assert(r->type == RCP_REPLY_INTEGER);
    rcp_reply_free(r);
    move_slot(slot);
    return h;
}

/* On a handle whose map is stale, streamed SETs to a slot just moved by
 * hand: a replayable source (a callback with RCP_SOURCE_REPLAYABLE, an fd
 * on a regular file) is uploaded again to the new owner after the MOVED,
 * sync and async; a source that is not replayable gets the MOVED as the
 * server's error, pulled once, and the map has learnt the new owner.
 * The values are over RCP__SOURCE_INLINE: they stream (a smaller one in
 * a sync call is read whole first and sent as any request). */
START_TEST(test_source_follows_moved)
{
    rcp_cluster *h;
    char *v = pattern_value(SET_LEN), key[64], d[256], path[] = "/tmp/rcp-src-XXXXXX";
    struct gen_source g;
    rcp_cluster_stats a, b;
    rcp_source fs;
    unsigned slot = 4321;
    int fd;

    snprintf(key, sizeof key, "%ssrc", rcpc_slot_tag(slot));
    for (int async = 0; async <= 1; async++) {
        h = stale_for(slot, key);
        ck_assert_int_eq(rcp_cluster_get_stats(h, &a), RCP_OK);
        gen_init(&g, SET_LEN, RCP_SOURCE_REPLAYABLE);
        expect_ok(set_source(h, key, &g.s, async), async ? "replayed async" : "replayed sync");
        ck_assert_int_eq(atomic_load(&g.starts), 2); /* the stale owner's upload, then the new */
        ck_assert_int_eq(rcp_cluster_get_stats(h, &b), RCP_OK);
        ck_assert_uint_eq(b.moved - a.moved, 1);
        stream_get_check(h, key, v, SET_LEN, "after a replayed SET");
        rcp_cluster_close(h);
    }

    /* Not replayable: the server's MOVED, the value pulled once. */
    h = stale_for(slot, key);
    gen_init(&g, SET_LEN, 0);
    {
        rcp_reply *r = set_source(h, key, &g.s, 0);
        ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_SERVER &&
                          strncmp(r->str, "MOVED ", 6) == 0,
                      "not replayable: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    ck_assert_int_eq(atomic_load(&g.starts), 1);
    gen_init(&g, SET_LEN, 0); /* the map learnt: straight to the owner */
    expect_ok(set_source(h, key, &g.s, 1), "not replayable, after the map learnt");
    ck_assert_int_eq(atomic_load(&g.starts), 1);

    /* A small value in a sync call is read whole before it is sent (over
     * no bulk connection): a redirect sends the same bytes again, from
     * a source that is not replayable, pulled once. */
    rcp_cluster_close(h);
    h = stale_for(slot, key);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &a), RCP_OK);
    gen_init(&g, 1000, 0);
    expect_ok(set_source(h, key, &g.s, 0), "small, not replayable");
    ck_assert_int_eq(atomic_load(&g.starts), 1);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &b), RCP_OK);
    ck_assert_uint_eq(b.moved - a.moved, 1);
    ck_assert_uint_eq(b.bulk_requests, a.bulk_requests);
    {
        char *small = pattern_value(1000);
        stream_get_check(h, key, small, 1000, "after a small SET");
        free(small);
    }

    /* An fd on a regular file: pread from its offset again, no flag. */
    fd = mkstemp(path);
    ck_assert(fd >= 0);
    unlink(path);
    ck_assert(write(fd, "xyz", 3) == 3);
    ck_assert(write(fd, v, SET_LEN) == (ssize_t)SET_LEN);
    memset(&fs, 0, sizeof fs);
    fs.kind = RCP_SOURCE_FD;
    fs.fd = fd;
    fs.offset = 3;
    fs.len = SET_LEN;
    del_key(h, key);
    rcp_cluster_close(h);
    h = stale_for(slot, key);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &a), RCP_OK);
    expect_ok(set_source(h, key, &fs, 0), "fd source");
    ck_assert_int_eq(rcp_cluster_get_stats(h, &b), RCP_OK);
    ck_assert_uint_eq(b.moved - a.moved, 1);
    stream_get_check(h, key, v, SET_LEN, "after a replayed fd SET");
    close(fd);
    free(v);
    rcp_cluster_close(h);
}
END_TEST

/* A slot in migration: its owner answers ASK for keys it does not hold.
 * A replayable streamed SET of such a key is uploaded again to the
 * importing node with ASKING glued before it (without ASKING the
 * importing node would answer MOVED back), sync and async; the keys are
 * on the importing node, and readable through the handle once the
 * migration ends. */
START_TEST(test_source_follows_ask)
{
    rcp_cluster *h = open_pool(2, 1);
    char *v = pattern_value(SET_LEN), key[2][64];
    struct gen_source g;
    struct migration m;
    rcp_cluster_stats a, b;
    unsigned slot = 777;

    for (int i = 0; i < 2; i++) {
        snprintf(key[i], sizeof key[i], "%sask%d", rcpc_slot_tag(slot), i);
        del_key(h, key[i]); /* absent from the owner: it answers ASK */
    }
    begin_migration(&m, slot);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &a), RCP_OK);
    for (int async = 0; async <= 1; async++) {
        gen_init(&g, SET_LEN, RCP_SOURCE_REPLAYABLE);
        expect_ok(set_source(h, key[async], &g.s, async), async ? "ASK async" : "ASK sync");
        ck_assert_int_eq(atomic_load(&g.starts), 2);
    }
    ck_assert_int_eq(rcp_cluster_get_stats(h, &b), RCP_OK);
    ck_assert_uint_eq(b.ask - a.ask, 2);
    ck_assert_uint_eq(b.moved - a.moved, 0);
    /* They are on the importing node (asked there directly, with ASKING). */
    for (int i = 0; i < 2; i++) {
        redisReply *r;
        freeReplyObject(redisCommand(m.cd, "ASKING"));
        r = redisCommand(m.cd, "STRLEN %s", key[i]);
        ck_assert(r && r->type == REDIS_REPLY_INTEGER);
        ck_assert_int_eq(r->integer, SET_LEN);
        freeReplyObject(r);
    }
    finish_migration(&m);
    for (int i = 0; i < 2; i++)
        stream_get_check(h, key[i], v, SET_LEN, "after the migration");
    free(v);
    rcp_cluster_close(h);
}
END_TEST

START_TEST(test_replica_reads_readonly)
{
    rcp_cluster_options o;
    static rcp_conn_options node;
    rcp_cluster *h;
    rcp_cluster_node_info info[RCPC_MAX_NODES];
    rcp_cluster_stats a, b;
    char *v = pattern_value(SET_LEN), err[512];
    size_t n, i;
    uint64_t replica_bulk = 0;

    ck_assert(rcpc_wait_ok(&cl, 60, err, sizeof err) == 0);
    rcpc_options(&o, &node, cl.seed);
    o.read_policy = RCP_READ_PREFER_REPLICA;
    h = rcpc_open(&o);
    set_value(h, "{bulk5}big", v, SET_LEN);
    ck_assert(rcpc_wait_replicas_synced(&cl, rcptest_scale(10000)) == 0);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &a), RCP_OK);
    stream_get_check(h, "{bulk5}big", v, SET_LEN, "from a replica");
    ck_assert_int_eq(rcp_cluster_get_stats(h, &b), RCP_OK);
    ck_assert_uint_eq(b.moved, a.moved);
    n = rcp_cluster_get_nodes(h, info, RCPC_MAX_NODES);
    for (i = 0; i < n && i < RCPC_MAX_NODES; i++)
        if (!info[i].is_master && info[i].in_map)
            replica_bulk += info[i].bulk_requests;
    ck_assert_uint_eq(replica_bulk, 1);
    free(v);
    rcp_cluster_close(h);
}
END_TEST

#define CC_THREADS 8
#define CC_ROUNDS 12
#define CC_LEN (300 * 1024)

struct cc_worker {
    pthread_t th;
    rcp_cluster *h;
    int id;
    const char *v;
    int bad;
    char why[300];
};

static void *cc_main(void *arg)
{
    struct cc_worker *w = arg;
    char key[64], d[256];
    for (int i = 0; i < CC_ROUNDS && !w->bad; i++) {
        const char *argv[3] = {"SET", key, w->v};
        size_t lens[3];
        rcp_reply *r;
        int rc = 0;
        snprintf(key, sizeof key, "cc:%d:%d", w->id, i);
        lens[0] = 3;
        lens[1] = strlen(key);
        lens[2] = CC_LEN;
        r = (i & 1) ? rcpc_call_async(w->h, -1, 3, argv, lens, &rc)
                    : rcp_cluster_command_argv(w->h, 3, argv, lens);
        if (!rcpc_is_status(r, "OK")) {
            w->bad = 1;
            snprintf(w->why, sizeof w->why, "SET %s: %d %s", key, rc,
                     rcptest_describe(r, d, sizeof d));
        }
        rcp_reply_free(r);
        r = rcp_cluster_command(w->h, "STRLEN %s", key);
        if (!w->bad && !rcptest_is_int(r, CC_LEN)) {
            w->bad = 1;
            snprintf(w->why, sizeof w->why, "STRLEN %s: %s", key,
                     rcptest_describe(r, d, sizeof d));
        }
        rcp_reply_free(r);
    }
    return NULL;
}

START_TEST(test_concurrent_pool)
{
    rcp_cluster *h = open_pool(2, 0);
    char *v = pattern_value(CC_LEN);
    struct cc_worker w[CC_THREADS];
    rcp_cluster_node_info info[RCPC_MAX_NODES];
    size_t n, i;

    memset(w, 0, sizeof w);
    for (i = 0; i < CC_THREADS; i++) {
        w[i].h = h;
        w[i].id = (int)i;
        w[i].v = v;
        ck_assert(pthread_create(&w[i].th, NULL, cc_main, &w[i]) == 0);
    }
    for (i = 0; i < CC_THREADS; i++)
        pthread_join(w[i].th, NULL);
    for (i = 0; i < CC_THREADS; i++)
        ck_assert_msg(!w[i].bad, "thread %zu: %s", i, w[i].why);
    ck_assert_uint_ge(bulk_requests(h), CC_THREADS * CC_ROUNDS);
    n = rcp_cluster_get_nodes(h, info, RCPC_MAX_NODES);
    for (i = 0; i < n && i < RCPC_MAX_NODES; i++)
        ck_assert_msg(info[i].bulk_conns <= 2, "%s has %d bulk connections (pool 2, master role)",
                      info[i].addr, info[i].bulk_conns);
    free(v);
    rcp_cluster_close(h);
}
END_TEST

static ssize_t pat_source_fn(void *ud, char *buf, size_t cap, uint64_t off)
{
    (void)ud;
    for (size_t i = 0; i < cap; i++)
        buf[i] = (char)pat(off + i);
    return (ssize_t)cap;
}

START_TEST(test_source_on_new_bulk_conn)
{
    rcp_cluster_options o;
    static rcp_conn_options node;
    rcp_cluster *h;
    rcp_source src;
    char *v = pattern_value(SET_LEN), err[512], d[256];
    const char *argv[2] = {"SET", "{bulk6}src"};
    rcp_reply *r;

    ck_assert(rcpc_wait_ok(&cl, 60, err, sizeof err) == 0);
    rcpc_options(&o, &node, cl.seed);
    node.client_name = "rcp-bulk-test"; /* a handshake command on every connection */
    h = rcpc_open(&o);
    memset(&src, 0, sizeof src);
    src.kind = RCP_SOURCE_CALLBACK;
    src.len = SET_LEN;
    src.fn = pat_source_fn;
    r = rcp_cluster_command_argv_source(h, 2, argv, NULL, &src);
    ck_assert_msg(rcpc_is_status(r, "OK"), "streamed SET on a new bulk connection: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_uint_eq(bulk_requests(h), 1);
    stream_get_check(h, "{bulk6}src", v, SET_LEN, "of the streamed SET");
    free(v);
    rcp_cluster_close(h);
}
END_TEST

struct busy_script {
    rcp_cluster *h;
    rcp_reply *r;
};

/* EVAL on {spill}busy that spins for 300 ms of server time. */
static void *busy_main(void *arg)
{
    struct busy_script *b = arg;
    const char *argv[4] = {"EVAL",
                           "local t0 = redis.call('TIME') repeat local t = redis.call('TIME') "
                           "until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 300000 return 7",
                           "1", "{spill}busy"};
    b->r = rcp_cluster_command_argv(b->h, 4, argv, NULL);
    return NULL;
}

/* While busy_main's script holds the node, a sync GET of {spill}k. 1 if
 * it went on a bulk connection. */
static int get_beside_script(rcp_cluster *h)
{
    struct busy_script b = {h, NULL};
    pthread_t th;
    uint64_t before;
    rcp_reply *r;
    char d[256];
    int spilled;

    ck_assert_int_eq(pthread_create(&th, NULL, busy_main, &b), 0);
    usleep(100000); /* the script is running (300 ms) */
    before = bulk_requests(h);
    r = rcp_cluster_command(h, "GET %s", "{spill}k");
    ck_assert_msg(rcpc_is_string(r, "spill-value"), "GET beside the script: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    spilled = bulk_requests(h) == before + 1;
    pthread_join(th, NULL);
    ck_assert_msg(b.r && b.r->type == RCP_REPLY_INTEGER && b.r->integer == 7, "script: %s",
                  rcptest_describe(b.r, d, sizeof d));
    rcp_reply_free(b.r);
    return spilled;
}

START_TEST(test_sync_spill)
{
    char *v = pattern_value(SET_LEN);
    rcp_cluster *h;
    int spilled = 0;

    /* The scheduler may start the script late on a loaded machine: then
     * the GET found the shared connection free. A fresh handle each try. */
    for (int attempt = 0; attempt < 5 && !spilled; attempt++) {
        h = open_pool(2, 0);
        /* A SET over bulk_threshold opens the node's first bulk connection,
         * so that one is ready and idle when the GET looks for it. */
        set_value(h, "{spill}big", v, SET_LEN);
        set_value(h, "{spill}k", "spill-value", 11);
        spilled = get_beside_script(h);
        rcp_cluster_close(h);
    }
    ck_assert_msg(spilled, "the GET never went on the idle bulk connection in 5 tries");

    h = open_pool(0, 0);
    set_value(h, "{spill}k", "spill-value", 11);
    ck_assert_int_eq(get_beside_script(h), 0);
    ck_assert_uint_eq(bulk_requests(h), 0);
    rcp_cluster_close(h);
    free(v);
}
END_TEST

START_TEST(test_options)
{
    rcp_cluster_options o;
    rcp_cluster *h = NULL;
    char err[512];
    struct {
        int pool;
        size_t threshold;
        const char *name;
    } bad[] = {{-1, 262144, "bulk_pool"}, {65, 262144, "bulk_pool"}, {2, 10, "bulk_threshold"},
               {2, (size_t)-1, "bulk_threshold"}};

    rcp_cluster_options_init(&o);
    ck_assert_int_eq(o.bulk_pool, 2);
    ck_assert_uint_eq(o.bulk_threshold, 262144);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rcp_cluster_options_init(&o);
        o.seeds = cl.seed;
        o.bulk_pool = bad[i].pool;
        o.bulk_threshold = bad[i].threshold;
        ck_assert_int_eq(rcp_cluster_open(&o, &h, err, sizeof err), RCP_ERR_INVALID);
        ck_assert(h == NULL);
        ck_assert_msg(strstr(err, bad[i].name) != NULL, "error does not name %s: %s",
                      bad[i].name, err);
    }
    /* 0 (off) and the maximum are fine. */
    for (int pool = 0; pool <= 64; pool += 64) {
        rcp_cluster_options_init(&o);
        o.seeds = cl.seed;
        o.bulk_pool = pool;
        h = rcpc_open(&o);
        rcp_cluster_close(h);
    }
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_options, test_big_set_goes_to_pool, test_concurrent_pool,
                test_source_on_new_bulk_conn, test_small_beside_stalled_stream,
                test_stalled_stream_blocks_without_pool, test_replica_reads_readonly,
                test_bulk_follows_moved, test_source_follows_moved, test_source_follows_ask,
                test_sync_spill);
}

int main(void)
{
    static const char *const extra[] = {"--cluster-allow-replica-migration", "no", NULL};
    signal(SIGPIPE, SIG_IGN);
    return rcpc_main(&cl, "bulk", 3, 1, extra, 240, add_tests);
}
