/* test_cache.c: the client-side cache (issue 15) against a real cluster
 * (3 masters, 1 replica each).
 *
 * - tracks_real_server (default tracking; broadcast; broadcast with a
 *   prefix): a handle with the cache reads a key until it is served from
 *   the process (the node's tracking armed); another client changes it;
 *   the cached handle sees the new value within a bound, the servers'
 *   invalidations counted. A SET through the caching handle is read back
 *   at once.
 * - own_writes_with_readers: one thread writes a key and reads it back
 *   through the caching handle 2,000 times while three threads read the
 *   same key through it as fast as they can (filling the cache between the
 *   write's send and its reply): the writer never reads an older value.
 * - staleness_checker: readers through a caching handle, a writer through
 *   another handle (no cache) that records when each write was
 *   acknowledged. A read that starts at t must return a value at least as
 *   new as every write acknowledged before t - BOUND. It runs while
 *   nothing happens, while 1,000 slots move away and back, and across a
 *   manual failover and the failback; most reads must be hits (else it
 *   would prove nothing). The largest lag seen (a read started that long
 *   after a newer write was acknowledged) is printed: docs/caching.md
 *   quotes it.
 *
 * The checker can be seen failing: RCPTEST_CACHE_BOUND_MS=0 asks for no
 * lag at all, which a cache whose invalidations travel on another
 * connection cannot give (a hit between a write's acknowledgement and its
 * invalidation's arrival), so the test fails, naming the read. Without a
 * cache the same zero bound holds (reads and writes meet on the master).
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NKEYS 64
#define NREADERS 4
#define HIST 128
#define BOUND_MS 250 /* scaled under the sanitizers */

static rcpc_cluster cl;

/* bcast 0: default tracking; 1: broadcast, every key; 2: broadcast,
 * prefix "{c}". */
static rcp_cluster *open_mode(size_t cache_bytes, int bcast)
{
    static const char *const prefixes[1] = {"{c}"};
    rcp_cluster_options o;
    rcp_conn_options node;
    rcpc_options(&o, &node, cl.seed);
    o.client_cache_bytes = cache_bytes;
    o.client_cache_bcast = bcast > 0;
    if (bcast == 2) {
        o.client_cache_prefixes = prefixes;
        o.client_cache_nprefixes = 1;
    }
    return rcpc_open(&o);
}

static rcp_cluster *open_handle(size_t cache_bytes)
{
    return open_mode(cache_bytes, 0);
}

static long long get_int(rcp_cluster *h, const char *key, int *ok)
{
    rcp_reply *r = rcp_cluster_command(h, "GET %s", key);
    long long v = 0;
    *ok = 1;
    if (r && r->type == RCP_REPLY_NIL)
        v = 0;
    else if (!r || rcp_reply_int(r, &v) != RCP_OK)
        *ok = 0;
    rcp_reply_free(r);
    return v;
}

static void set_int(rcp_cluster *h, const char *key, long long v)
{
    rcp_reply *r = rcp_cluster_command(h, "SET %s %lld", key, v);
    char d[256];
    ck_assert_msg(rcpc_is_status(r, "OK"), "SET %s: %s", key, rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}

static uint64_t hits_of(rcp_cluster *h)
{
    rcp_cluster_stats st;
    ck_assert_int_eq(rcp_cluster_get_stats(h, &st), RCP_OK);
    return st.cache_hits;
}

/* Reads key through h until a read is a hit (tracking armed on its node). */
static void wait_hit(rcp_cluster *h, const char *key)
{
    uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(5000) * 1000000ull;
    uint64_t h0 = hits_of(h);
    int ok;
    while (hits_of(h) == h0 && rcptest_now_ns() < until) {
        get_int(h, key, &ok);
        rcptest_sleep_ms(2);
    }
    ck_assert_msg(hits_of(h) > h0, "no read of %s was ever served from the cache", key);
}

START_TEST(tracks_real_server)
{
    rcp_cluster *a, *b;
    rcp_cluster_stats st;
    char err[512];
    uint64_t t0, until;
    long long v = 0;
    int ok;
    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    a = open_mode(4u << 20, _i);
    b = open_handle(0);
    set_int(b, "{c}k", 1);
    wait_hit(a, "{c}k");
    ck_assert_int_eq(get_int(a, "{c}k", &ok), 1);
    t0 = rcptest_now_ns();
    set_int(b, "{c}k", 2);
    until = t0 + (uint64_t)rcptest_scale(5000) * 1000000ull;
    while ((v = get_int(a, "{c}k", &ok)) != 2 && rcptest_now_ns() < until)
        ;
    ck_assert_msg(v == 2, "the cached handle still reads %lld after another client wrote 2", v);
    fprintf(stderr, "tracks_real_server (%s): the new value read %.3f ms after the write\n",
            _i == 0 ? "default" : _i == 1 ? "bcast" : "bcast prefix {c}",
            (double)(rcptest_now_ns() - t0) / 1e6);
    ck_assert_int_eq(rcp_cluster_get_stats(a, &st), RCP_OK);
    ck_assert_uint_ge(st.cache_invalidations, 1);
    wait_hit(a, "{c}k");
    set_int(a, "{c}k", 3);
    ck_assert_int_eq(get_int(a, "{c}k", &ok), 3);
    rcp_cluster_close(a);
    rcp_cluster_close(b);
}
END_TEST

/* ------------------------------------------------------------------ */

static atomic_int stop_flag;
static rcp_cluster *shared_h;
static rcpc_problem prob = RCPC_PROBLEM_INIT;

static void *own_reader(void *arg)
{
    int ok;
    (void)arg;
    while (!atomic_load(&stop_flag))
        get_int(shared_h, "{o}k", &ok);
    return NULL;
}

START_TEST(own_writes_with_readers)
{
    pthread_t th[3];
    char err[512];
    int i, ok, stale = 0;
    long long v;
    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    shared_h = open_handle(4u << 20);
    set_int(shared_h, "{o}k", 0);
    wait_hit(shared_h, "{o}k");
    atomic_store(&stop_flag, 0);
    for (i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, own_reader, NULL), 0);
    for (i = 1; i <= 2000; i++) {
        set_int(shared_h, "{o}k", i);
        v = get_int(shared_h, "{o}k", &ok);
        if (!ok || v != i) {
            stale++;
            rcpc_problem_note(&prob, "write %d then read %lld (ok %d)", i, v, ok);
        }
    }
    atomic_store(&stop_flag, 1);
    for (i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr, "own_writes_with_readers: %llu hits\n", (unsigned long long)hits_of(shared_h));
    rcp_cluster_close(shared_h);
    ck_assert_msg(stale == 0, "%d of 2000 reads after the reader's own write were stale; first: %s",
                  stale, prob.first);
}
END_TEST

/* ------------------------------------------------------------------ */
/* the staleness checker                                               */

typedef struct khist {
    pthread_mutex_t mu;
    long long seq[HIST];
    uint64_t ack[HIST]; /* ns */
    unsigned n;         /* writes recorded (ring index n % HIST) */
} khist;

static khist hist[NKEYS];
static char keys[NKEYS][32];
static rcp_cluster *reader_h, *writer_h;
static atomic_llong max_lag_ns, reads, stale_reads, read_errors;
static uint64_t bound_ns;

static void *writer_main(void *arg)
{
    long long seq = 0;
    (void)arg;
    while (!atomic_load(&stop_flag)) {
        int k = (int)(seq % NKEYS);
        rcp_reply *r;
        seq++;
        r = rcp_cluster_command(writer_h, "SET %s %lld", keys[k], seq);
        if (rcpc_is_status(r, "OK")) {
            uint64_t now = rcptest_now_ns();
            pthread_mutex_lock(&hist[k].mu);
            hist[k].seq[hist[k].n % HIST] = seq;
            hist[k].ack[hist[k].n % HIST] = now;
            hist[k].n++;
            pthread_mutex_unlock(&hist[k].mu);
        }
        rcp_reply_free(r);
        if (seq % 4 == 0)
            rcptest_sleep_ms(1); /* about 2,000 writes/s: ~30 per key and second */
    }
    return NULL;
}

/* A read of key k that started at t0 returned v: how long before t0 a
 * newer value had been acknowledged (0: none). */
static uint64_t lag_of(int k, uint64_t t0, long long v)
{
    uint64_t lag = 0;
    unsigned i, n;
    pthread_mutex_lock(&hist[k].mu);
    n = hist[k].n < HIST ? hist[k].n : HIST;
    for (i = 0; i < n; i++) {
        unsigned j = (hist[k].n - 1 - i) % HIST;
        if (hist[k].seq[j] > v && hist[k].ack[j] < t0 && t0 - hist[k].ack[j] > lag)
            lag = t0 - hist[k].ack[j];
    }
    /* Older than the ring: the value is older than every write kept. */
    if (hist[k].n > HIST && v < hist[k].seq[hist[k].n % HIST] && lag < t0 - hist[k].ack[hist[k].n % HIST])
        lag = t0 - hist[k].ack[hist[k].n % HIST];
    pthread_mutex_unlock(&hist[k].mu);
    return lag;
}

static void *checker_main(void *arg)
{
    unsigned rnd = 12345u + (unsigned)(uintptr_t)arg * 7919u, n = 0;
    while (!atomic_load(&stop_flag)) {
        int k, ok;
        uint64_t t0, lag;
        long long v, cur;
        if (++n % 128 == 0)
            rcptest_sleep_ms(1); /* hits never sleep: leave the servers some CPU */
        rnd = rnd * 1103515245u + 12345u;
        k = (int)((rnd >> 8) % NKEYS);
        t0 = rcptest_now_ns();
        v = get_int(reader_h, keys[k], &ok);
        atomic_fetch_add(&reads, 1);
        if (!ok) {
            atomic_fetch_add(&read_errors, 1);
            continue;
        }
        lag = lag_of(k, t0, v);
        cur = atomic_load(&max_lag_ns);
        while ((long long)lag > cur && !atomic_compare_exchange_weak(&max_lag_ns, &cur, (long long)lag))
            ;
        if (lag > bound_ns) {
            atomic_fetch_add(&stale_reads, 1);
            rcpc_problem_note(&prob, "%s read %lld, %.1f ms after a newer write was acknowledged",
                              keys[k], v, (double)lag / 1e6);
        }
    }
    return NULL;
}

static int master_port_of(const rcpc_topo *t, int most)
{
    int i, best = 0, bn = most ? -1 : 1 << 30;
    for (i = 0; i < t->n; i++)
        if (t->node[i].is_master && !t->node[i].failed &&
            (most ? t->node[i].nslots > bn : t->node[i].nslots < bn && t->node[i].nslots > 0)) {
            bn = t->node[i].nslots;
            best = t->node[i].port;
        }
    return best;
}

static void phase_report(const char *what, uint64_t h0, long long r0)
{
    fprintf(stderr, "staleness_checker: %s: %lld reads, %llu hits, max lag %.3f ms\n", what,
            atomic_load(&reads) - r0, (unsigned long long)(hits_of(reader_h) - h0),
            (double)atomic_load(&max_lag_ns) / 1e6);
}

static int failover_to(int replica, int timeout_ms)
{
    uint64_t until = rcptest_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    redisReply *rr = rcpc_ask(replica, "CLUSTER FAILOVER");
    int ok = rr && rr->type == REDIS_REPLY_STATUS;
    if (!ok)
        fprintf(stderr, "CLUSTER FAILOVER on %d: %s\n", replica, rr && rr->str ? rr->str : "no reply");
    if (rr)
        freeReplyObject(rr);
    while (ok && rcpc_role_is_master(replica) != 1 && rcptest_now_ns() < until)
        rcptest_sleep_ms(20);
    if (ok && rcpc_role_is_master(replica) != 1) {
        redisReply *ri = rcpc_ask(replica, "INFO replication");
        fprintf(stderr, "after CLUSTER FAILOVER on %d: %s\n", replica, ri && ri->str ? ri->str : "?");
        if (ri)
            freeReplyObject(ri);
    }
    return ok && rcpc_role_is_master(replica) ? 0 : -1;
}

START_TEST(staleness_checker)
{
    pthread_t wth, rth[NREADERS];
    rcpc_topo t;
    char err[4096];
    int i, from, to, master, replica, back;
    uint64_t h0;
    long long r0;

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    bound_ns = (uint64_t)rcptest_scale(BOUND_MS) * 1000000ull;
    if (getenv("RCPTEST_CACHE_BOUND_MS"))
        bound_ns = (uint64_t)atoll(getenv("RCPTEST_CACHE_BOUND_MS")) * 1000000ull;
    for (i = 0; i < NKEYS; i++) {
        /* Spread over the slot space, so that a reshard moves some. */
        snprintf(keys[i], sizeof keys[i], "%sst", rcpc_slot_tag((unsigned)i * 256u + 7u));
        pthread_mutex_init(&hist[i].mu, NULL);
        hist[i].n = 0;
    }
    reader_h = open_handle(16u << 20);
    writer_h = open_handle(0);
    for (i = 0; i < NKEYS; i++)
        set_int(writer_h, keys[i], 0);
    for (i = 0; i < NKEYS; i++)
        wait_hit(reader_h, keys[i]);
    atomic_store(&stop_flag, 0);
    atomic_store(&max_lag_ns, 0);
    ck_assert_int_eq(pthread_create(&wth, NULL, writer_main, NULL), 0);
    for (i = 0; i < NREADERS; i++)
        ck_assert_int_eq(pthread_create(&rth[i], NULL, checker_main, (void *)(uintptr_t)i), 0);

    h0 = hits_of(reader_h);
    r0 = atomic_load(&reads);
    rcptest_sleep_ms(1500);
    phase_report("steady", h0, r0);

    ck_assert_int_eq(rcpc_topology_any(&cl, &t), 0);
    from = master_port_of(&t, 1);
    to = master_port_of(&t, 0);
    h0 = hits_of(reader_h);
    r0 = atomic_load(&reads);
    if (rcpc_reshard(&cl, from, to, 1000, err, sizeof err) != 0 ||
        rcpc_reshard(&cl, to, from, 1000, err, sizeof err) != 0) {
        atomic_store(&stop_flag, 1);
        ck_abort_msg("reshard: %s", err);
    }
    phase_report("reshard away and back", h0, r0);

    ck_assert_int_eq(rcpc_topology_any(&cl, &t), 0);
    ck_assert_msg(rcpc_master_with_replica(&t, &master, &replica) == 0, "no master with a replica");
    master = t.node[master].port;
    replica = t.node[replica].port;
    h0 = hits_of(reader_h);
    r0 = atomic_load(&reads);
    ck_assert_msg(rcpc_wait_replicas_synced(&cl, rcptest_scale(15000)) == 0, "replicas not in sync");
    if (failover_to(replica, rcptest_scale(20000)) != 0) {
        atomic_store(&stop_flag, 1);
        ck_abort_msg("manual failover to %d did not happen", replica);
    }
    rcptest_sleep_ms(1000);
    ck_assert_msg(rcpc_wait_replicas_synced(&cl, rcptest_scale(15000)) == 0, "replicas not in sync");
    for (back = 0; back < 3 && failover_to(master, rcptest_scale(10000)) != 0; back++)
        ck_assert_msg(rcpc_wait_replicas_synced(&cl, rcptest_scale(15000)) == 0, "not in sync");
    rcptest_sleep_ms(1000);
    phase_report("failover and failback", h0, r0);
    {
        /* The failed-back master kept its connections: the refresher's
         * promotion re-arms its tracking (else its keys would never be
         * cached again). */
        rcp_cluster_node_info ni;
        uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(15000) * 1000000ull;
        while (!(rcpc_node_info(reader_h, master, &ni) && ni.is_master && ni.cache_tracking) &&
               rcptest_now_ns() < until)
            rcptest_sleep_ms(50);
        ck_assert_msg(rcpc_node_info(reader_h, master, &ni) && ni.is_master && ni.cache_tracking,
                      "%d is master again but the cache does not trust it (tracking %d)", master,
                      ni.cache_tracking);
    }

    atomic_store(&stop_flag, 1);
    pthread_join(wth, NULL);
    for (i = 0; i < NREADERS; i++)
        pthread_join(rth[i], NULL);
    fprintf(stderr,
            "staleness_checker: %lld reads (%lld errors), %llu hits in all; max lag %.3f ms "
            "(bound %llu ms)\n",
            atomic_load(&reads), atomic_load(&read_errors),
            (unsigned long long)hits_of(reader_h), (double)atomic_load(&max_lag_ns) / 1e6,
            (unsigned long long)(bound_ns / 1000000ull));
    ck_assert_msg(atomic_load(&stale_reads) == 0,
                  "%lld reads returned a value older than a write acknowledged more than %llu ms "
                  "before they began; first: %s",
                  atomic_load(&stale_reads), (unsigned long long)(bound_ns / 1000000ull),
                  prob.first);
    ck_assert_msg(back < 3, "%d did not become master again", master);
    ck_assert_msg(hits_of(reader_h) * 2 > (uint64_t)atomic_load(&reads),
                  "only %llu of %lld reads were hits: the checker proved little",
                  (unsigned long long)hits_of(reader_h), atomic_load(&reads));
    rcp_cluster_close(reader_h);
    rcp_cluster_close(writer_h);
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_loop_test(tc, tracks_real_server, 0, 3);
    RCPTEST_ADD(tc, own_writes_with_readers, staleness_checker);
}

int main(void)
{
    static const char *const extra[] = {"--cluster-allow-replica-migration", "no", NULL};
    return rcpc_main(&cl, "cache", 3, 1, extra, 280, add_tests);
}
