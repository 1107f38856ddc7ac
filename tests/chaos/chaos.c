/* chaos.c: a chaos soak with a consistency checker, against a real local
 * Redis Cluster (3 masters + 3 replicas) started by tests/scripts/cluster.sh
 * (run-chaos.sh starts and stops it; this program only changes it).
 *
 * Load: N threads (default 24) share one rcp_cluster handle and do writes
 * whose effect can be checked afterwards, through both the sync calls and
 * the async API (bursts of up to 8 futures in flight per thread):
 *   - RPUSH of a unique token "T.S" (thread T, its S-th token) to the
 *     thread's current list "chaos:l:T:G" (G = S / 100: a thread moves to
 *     a new key every 100 tokens, so its lists spread over every slot);
 *   - INCRBY 1 on one of 64 shared counters "chaos:c:I", tallied per thread
 *     and per 100 ms bucket of acknowledgement time.
 * Every outcome is recorded: acknowledged (the server's integer reply),
 * failed for sure (the send was refused, RCP_ERR_NOT_SENT, or a server
 * error reply: not applied), or unknown (RCP_ERR_IO, RCP_ERR_TIMEOUT, ...:
 * the server may or may not have applied it).
 *
 * Chaos (this program's main thread, one action at a time, each followed by
 * "cluster.sh wait-ok"): redis-cli --cluster reshard of a random number of
 * slots between random masters; SIGKILL of a master, then restart once its
 * replica took over; SIGSTOP of a node for half the node timeout (no
 * failover expected) or for twice the node timeout plus a second (a
 * failover expected when it is a master), then SIGCONT; CLUSTER FAILOVER on
 * a random replica.
 *
 * Checks at the end (master-only reads through the same handle):
 *   lost      an acknowledged token missing from its list, or a counter
 *             below its acknowledged total, not explained by a failover
 *             without the old master's consent: a SIGKILL, a SIGSTOP that
 *             ended in a failover, or a failover we did not ask for. Such a
 *             loss is only excused when the key's slot belonged to that
 *             master and the write was acknowledged in the window
 *             [event start - 3 s, event end] (asynchronous replication:
 *             Redis's guarantee, not the client's); excused losses are
 *             reported per event.
 *   dup       a token present twice, or a counter above its acknowledged
 *             total plus every increment that ended in an unknown state.
 *   unresolved async futures not resolved before the handle was closed
 *             (and any still unresolved after close), plus sync calls that
 *             never returned.
 * Also failing the run: a token present although its write was reported
 * as certainly not applied (phantom), a token in a list it was never sent
 * to (foreign), a future resolved twice.
 * Client memory: the library's allocations are counted through its
 * allocator hooks and the process RSS sampled each second; growth from the
 * end of the warm-up to the end is reported (not a failure: a number to
 * read).
 *
 * Usage: chaos --dir CLUSTER_DIR [--seconds N] [--threads N] [--rate OPS]
 *              [--seed N] [--no-chaos]
 * Needs RCP_SOURCE_ROOT (the source tree, for cluster.sh). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "rcpipe.h"

#define MAX_THREADS 64
#define LIST_TOKENS 100         /* tokens per list key */
#define NCOUNTERS 64
#define CHUNK 4096              /* token records per chunk (chunks never move) */
#define MAX_CHUNKS 16384
#define BURST_MAX 8             /* async futures in flight per thread */
#define BUCKET_MS 100           /* counter acknowledgement time buckets */
#define REPL_WINDOW_MS 3000     /* how far before a failover an ack may be lost */
#define MAX_EVENTS 2048
#define MAX_SERVER_CAUSES 32
#define MAX_REPORTED 20         /* lost/dup details printed */

enum { TS_NONE = 0, TS_ACKED = 1, TS_UNKNOWN = 2, TS_FAILED = 3 };
enum { OP_TOKEN = 0, OP_COUNTER = 1 };
enum { EV_KILL = 0, EV_RESTART, EV_STOP, EV_UNPLANNED, EV_DROPPED };
static const char *const ev_names[] = {"kill", "restart", "stop-failover", "unplanned-failover",
                                       "slot-dropped"};

struct tok {
    _Atomic uint32_t ack_ms; /* ms since start when resolved */
    _Atomic uint8_t state;
    uint8_t seen;            /* verification: times found in its list */
};

struct burst;

struct aop {
    rcp_future f; /* first: the resolve callback casts back */
    struct burst *b;
    int kind;
    uint32_t idx; /* token seq or counter index */
    int64_t sent_ms;
    atomic_int resolved;
};

/* One async burst: its own lock, so a burst abandoned after the wait bound
 * can still be resolved (and audited) later. */
struct burst {
    struct aop op[BURST_MAX];
    int n;
    int pending;
    pthread_mutex_t m;
    pthread_cond_t cv;
    struct burst *next; /* the thread's list of every burst it made */
};

struct worker {
    pthread_t th;
    int id;
    uint64_t rnd;
    struct tok *chunk[MAX_CHUNKS];
    uint32_t ntok;
    struct burst *bursts; /* all, newest first; bursts->... reused while idle */
    struct burst *cur;
    atomic_int in_sync;
    _Atomic int64_t sync_started_ms;
    long ops, sync_ops, async_ops;
    /* verification results */
    long lost, excused, dup, phantom, foreign, verify_errors;
};

struct event {
    int kind;
    int port;
    char id[41];
    unsigned char slots[RCPC_SLOTS / 8];
    int nslots;
    int64_t t0, t1;   /* ms since start */
    long lost_tokens; /* excused losses attributed to it */
    long lost_incr;
};

static struct {
    rcpc_cluster cl;
    rcp_cluster *h;
    int nthreads;
    int rate;
    int seconds;
    int chaos;
    int node_timeout;
    int64_t t_start;        /* rcptest_now_ms at start */
    int64_t wait_bound_ms;  /* how long a thread waits for its burst */
    atomic_int stop;
    struct worker *w[MAX_THREADS];

    /* outcomes */
    atomic_long ops, acked;
    atomic_long err_by_code[RCP_ERR__COUNT];
    atomic_long refused_by_code[RCP_ERR__COUNT];
    atomic_long unexpected_replies;
    pthread_mutex_t cause_lock;
    char server_cause[MAX_SERVER_CAUSES][32];
    long server_count[MAX_SERVER_CAUSES];
    long server_other;

    /* futures */
    atomic_long submitted, resolved, resolved_twice, late, sync_calls;

    /* counters */
    atomic_long ctr_acked[NCOUNTERS], ctr_unknown[NCOUNTERS];
    _Atomic uint32_t *ctr_bucket; /* [NCOUNTERS][nbuckets] */
    int nbuckets;

    /* chaos */
    pthread_mutex_t ev_lock;
    struct event ev[MAX_EVENTS];
    int nev;
    long n_reshard, slots_moved, n_kill, n_stop_short, n_stop_long, n_stop_failover, n_failover,
        n_unplanned, n_not_ok, n_action_failed;

    /* memory */
    atomic_llong lib_live, lib_blocks;
    long long mem_warm_lib, mem_peak_lib, mem_end_lib;
    long rss_warm, rss_peak, rss_end;
    atomic_int warm_done;
    atomic_int sampler_stop;
} g;

/* ---- allocator hooks: count the library's live bytes ---- */

static void *h_malloc(size_t n)
{
    void *p = malloc(n);
    if (p != NULL) {
        atomic_fetch_add(&g.lib_live, (long long)malloc_usable_size(p));
        atomic_fetch_add(&g.lib_blocks, 1);
    }
    return p;
}

static void *h_calloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (p != NULL) {
        atomic_fetch_add(&g.lib_live, (long long)malloc_usable_size(p));
        atomic_fetch_add(&g.lib_blocks, 1);
    }
    return p;
}

static void h_free(void *p)
{
    if (p == NULL)
        return;
    atomic_fetch_sub(&g.lib_live, (long long)malloc_usable_size(p));
    atomic_fetch_sub(&g.lib_blocks, 1);
    free(p);
}

static void *h_realloc(void *p, size_t n)
{
    size_t old;
    void *q;

    if (p == NULL)
        return h_malloc(n);
    if (n == 0) {
        h_free(p);
        return NULL;
    }
    old = malloc_usable_size(p);
    q = realloc(p, n);
    if (q != NULL)
        atomic_fetch_add(&g.lib_live, (long long)malloc_usable_size(q) - (long long)old);
    return q;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;

    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* ---- helpers ---- */

static int64_t now_rel(void)
{
    return rcptest_now_ms() - g.t_start;
}

static uint32_t rnd32(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return (uint32_t)((x * 2685821657736338717ULL) >> 32);
}

static uint64_t main_rnd;

static void logf_(const char *fmt, ...) RCPTEST_PRINTF(1, 2);

static void logf_(const char *fmt, ...)
{
    va_list ap;
    char buf[1024];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "chaos[%7.1fs] %s\n", (double)now_rel() / 1000.0, buf);
}

static struct tok *tok_of(struct worker *w, uint32_t seq)
{
    return &w->chunk[seq / CHUNK][seq % CHUNK];
}

static void list_key(char *buf, size_t len, int t, uint32_t seq)
{
    snprintf(buf, len, "chaos:l:%d:%u", t, seq / LIST_TOKENS);
}

static void counter_key(char *buf, size_t len, int c)
{
    snprintf(buf, len, "chaos:c:%d", c);
}

static void count_server_cause(const rcp_reply *r)
{
    char word[32];
    size_t n = 0;
    int i;

    while (n < sizeof word - 1 && n < r->len && r->str[n] != ' ' && r->str[n] != '\r')
        word[n] = r->str[n], n++;
    word[n] = '\0';
    pthread_mutex_lock(&g.cause_lock);
    for (i = 0; i < MAX_SERVER_CAUSES; i++) {
        if (g.server_cause[i][0] == '\0') {
            snprintf(g.server_cause[i], sizeof g.server_cause[i], "%s", word);
            g.server_count[i] = 1;
            break;
        }
        if (strcmp(g.server_cause[i], word) == 0) {
            g.server_count[i]++;
            break;
        }
    }
    if (i == MAX_SERVER_CAUSES)
        g.server_other++;
    pthread_mutex_unlock(&g.cause_lock);
}

/* Records one resolved write. Runs on worker threads (sync) and on I/O
 * threads (async): everything it touches is atomic or locked. */
static void record(struct worker *w, int kind, uint32_t idx, const rcp_reply *r)
{
    int64_t t = now_rel();
    int st;

    if (r != NULL && r->type == RCP_REPLY_INTEGER) {
        st = TS_ACKED;
        atomic_fetch_add(&g.acked, 1);
    } else if (r != NULL && r->type == RCP_REPLY_ERROR) {
        int code = r->err >= 0 && r->err < RCP_ERR__COUNT ? r->err : 0;
        atomic_fetch_add(&g.err_by_code[code], 1);
        if (code == RCP_ERR_SERVER)
            count_server_cause(r);
        /* Not applied for sure: never written, or refused by the server. */
        st = (code == RCP_ERR_NOT_SENT || code == RCP_ERR_SERVER) ? TS_FAILED : TS_UNKNOWN;
    } else {
        atomic_fetch_add(&g.unexpected_replies, 1);
        st = TS_UNKNOWN;
    }
    if (kind == OP_TOKEN) {
        struct tok *k = tok_of(w, idx);
        atomic_store_explicit(&k->ack_ms, (uint32_t)t, memory_order_relaxed);
        atomic_store_explicit(&k->state, (uint8_t)st, memory_order_release);
    } else if (st == TS_ACKED) {
        int b = (int)(t / BUCKET_MS);
        if (b >= g.nbuckets)
            b = g.nbuckets - 1;
        atomic_fetch_add(&g.ctr_acked[idx], 1);
        atomic_fetch_add_explicit(&g.ctr_bucket[(size_t)idx * (size_t)g.nbuckets + (size_t)b], 1,
                                  memory_order_relaxed);
    } else if (st == TS_UNKNOWN) {
        atomic_fetch_add(&g.ctr_unknown[idx], 1);
    }
}

/* A write the library refused to accept: never sent. */
static void record_refused(struct worker *w, int kind, uint32_t idx, int code)
{
    atomic_fetch_add(&g.refused_by_code[code >= 0 && code < RCP_ERR__COUNT ? code : 0], 1);
    if (kind == OP_TOKEN) {
        struct tok *k = tok_of(w, idx);
        atomic_store(&k->ack_ms, (uint32_t)now_rel());
        atomic_store(&k->state, (uint8_t)TS_FAILED);
    }
}

/* Chooses the next write: fills argv (bufs owned by the caller). */
static void next_op(struct worker *w, int *kind, uint32_t *idx, char *key, char *val, size_t len,
                    const char **argv)
{
    if (rnd32(&w->rnd) % 100 < 55) {
        uint32_t seq = w->ntok++;
        if (seq % CHUNK == 0) {
            w->chunk[seq / CHUNK] = calloc(CHUNK, sizeof(struct tok));
            if (w->chunk[seq / CHUNK] == NULL) {
                fprintf(stderr, "chaos: out of memory for token records\n");
                exit(2);
            }
        }
        *kind = OP_TOKEN;
        *idx = seq;
        list_key(key, len, w->id, seq);
        snprintf(val, len, "%d.%u", w->id, seq);
        argv[0] = "RPUSH";
        argv[1] = key;
        argv[2] = val;
    } else {
        *kind = OP_COUNTER;
        *idx = rnd32(&w->rnd) % NCOUNTERS;
        counter_key(key, len, (int)*idx);
        argv[0] = "INCRBY";
        argv[1] = key;
        argv[2] = "1";
    }
    w->ops++;
    atomic_fetch_add(&g.ops, 1);
}

static void aop_resolve(rcp_future *f, rcp_reply *reply)
{
    struct aop *a = (struct aop *)f;
    struct burst *b = a->b;

    if (atomic_fetch_add(&a->resolved, 1) != 0) {
        atomic_fetch_add(&g.resolved_twice, 1);
        return;
    }
    record(a->f.data, a->kind, a->idx, reply);
    atomic_fetch_add(&g.resolved, 1);
    pthread_mutex_lock(&b->m);
    if (--b->pending == 0)
        pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->m);
}

static struct burst *burst_new(struct worker *w)
{
    struct burst *b = calloc(1, sizeof *b);

    if (b == NULL) {
        fprintf(stderr, "chaos: out of memory\n");
        exit(2);
    }
    pthread_mutex_init(&b->m, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->next = w->bursts;
    w->bursts = b;
    return b;
}

static void do_sync(struct worker *w)
{
    char key[64], val[64];
    const char *argv[3];
    int kind;
    uint32_t idx;
    rcp_reply *r;

    next_op(w, &kind, &idx, key, val, sizeof key, argv);
    atomic_store(&w->sync_started_ms, rcptest_now_ms());
    atomic_store(&w->in_sync, 1);
    atomic_fetch_add(&g.sync_calls, 1);
    r = rcp_cluster_command_argv(g.h, 3, argv, NULL);
    atomic_store(&w->in_sync, 0);
    record(w, kind, idx, r);
    rcp_reply_free(r);
    w->sync_ops++;
}

static void do_burst(struct worker *w, int n)
{
    struct burst *b = w->cur;
    struct timespec dl;
    int i, sent = 0;

    for (i = 0; i < n; i++) {
        char key[64], val[64];
        const char *argv[3];
        struct aop *a = &b->op[i];
        int rc;

        memset(a, 0, sizeof *a);
        a->b = b;
        a->f.resolve = aop_resolve;
        a->f.data = w;
        next_op(w, &a->kind, &a->idx, key, val, sizeof key, argv);
        a->sent_ms = rcptest_now_ms();
        pthread_mutex_lock(&b->m);
        b->pending++;
        pthread_mutex_unlock(&b->m);
        rc = rcp_cluster_send_argv(g.h, &a->f, 3, argv, NULL);
        if (rc != RCP_OK) {
            pthread_mutex_lock(&b->m);
            b->pending--;
            pthread_mutex_unlock(&b->m);
            atomic_store(&a->resolved, -1000); /* never to be resolved: not counted */
            record_refused(w, a->kind, a->idx, rc);
            continue;
        }
        atomic_fetch_add(&g.submitted, 1);
        sent++;
    }
    b->n = n;
    w->async_ops += n;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)(g.wait_bound_ms / 1000);
    pthread_mutex_lock(&b->m);
    while (b->pending > 0)
        if (pthread_cond_timedwait(&b->cv, &b->m, &dl) == ETIMEDOUT)
            break;
    i = b->pending;
    pthread_mutex_unlock(&b->m);
    if (i > 0) {
        /* Abandoned: may still be resolved later (counted then); its memory
         * stays until the end. */
        atomic_fetch_add(&g.late, i);
        logf_("thread %d: %d of %d futures not resolved after %lld ms", w->id, i, sent,
              (long long)g.wait_bound_ms);
        w->cur = burst_new(w);
    }
}

static void sleep_us(long us)
{
    struct timespec ts;

    if (us <= 0)
        return;
    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (us % 1000000) * 1000;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    long per_op_us = (long)g.nthreads * 1000000L / (g.rate > 0 ? g.rate : 1);

    w->cur = burst_new(w);
    while (!atomic_load(&g.stop)) {
        if (rnd32(&w->rnd) % 2 == 0) {
            do_sync(w);
            sleep_us(per_op_us);
        } else {
            int n = 1 + (int)(rnd32(&w->rnd) % BURST_MAX);
            do_burst(w, n);
            sleep_us(per_op_us * n);
        }
    }
    return NULL;
}

/* ---- events: failovers that may lose acknowledged writes ---- */

static void add_event(int kind, int port, const rcpc_node *n, int64_t t0, int64_t t1)
{
    struct event *e;

    pthread_mutex_lock(&g.ev_lock);
    if (g.nev < MAX_EVENTS) {
        e = &g.ev[g.nev++];
        memset(e, 0, sizeof *e);
        e->kind = kind;
        e->port = port;
        snprintf(e->id, sizeof e->id, "%s", n->id);
        memcpy(e->slots, n->slots, sizeof e->slots);
        e->nslots = n->nslots;
        e->t0 = t0;
        e->t1 = t1;
    }
    pthread_mutex_unlock(&g.ev_lock);
    logf_("excusing window: %s of %d (%d slots), acks in [%.1fs, %.1fs]", ev_names[kind], port,
          n->nslots, (double)(t0 - REPL_WINDOW_MS) / 1000.0, (double)t1 / 1000.0);
}

/* The event that excuses losing a write acknowledged at ack_ms on slot,
 * or -1. Called after the run (no lock needed then). */
static int excuse(unsigned slot, int64_t ack_ms)
{
    int i;

    for (i = 0; i < g.nev; i++) {
        const struct event *e = &g.ev[i];
        if (ack_ms >= e->t0 - REPL_WINDOW_MS && ack_ms <= e->t1 &&
            (e->slots[slot / 8] >> (slot % 8)) & 1)
            return i;
    }
    return -1;
}

/* Compares two topologies: a master that served slots in prev and is gone,
 * failed or a replica in now lost its role. Unless it was planned (the
 * node we killed, stopped or asked to hand over), that is an unplanned
 * failover: its slots' recent writes may be lost. */
static void observe(const rcpc_topo *prev, int64_t t_prev, const rcpc_topo *now, int64_t t_now,
                    const char *planned_id)
{
    int i, j;

    for (i = 0; i < prev->n; i++) {
        const rcpc_node *p = &prev->node[i];
        int still = 0;
        if (!p->is_master || p->failed || p->nslots == 0)
            continue;
        if (planned_id != NULL && strcmp(planned_id, p->id) == 0)
            continue;
        for (j = 0; j < now->n; j++)
            if (strcmp(now->node[j].id, p->id) == 0)
                still = now->node[j].is_master && !now->node[j].failed;
        if (!still) {
            g.n_unplanned++;
            logf_("unplanned: master %d (%.8s) lost its role", p->port, p->id);
            add_event(EV_UNPLANNED, p->port, p, t_prev, t_now);
        }
    }
}

/* ---- chaos actions ---- */

static rcpc_topo topo_last;
static int64_t topo_last_t;
static int have_topo;

static int topo_now(rcpc_topo *t)
{
    int i;
    for (i = 0; i < 20; i++) {
        if (rcpc_topology_any(&g.cl, t) == 0)
            return 0;
        rcptest_sleep_ms(250);
    }
    return -1;
}

/* cluster.sh fix's "adopted PORT SLOT..." lines: a node that no longer
 * counted these slots as its own (so it had deleted their keys: Redis
 * drops the keys of a slot a node loses) got them back, empty, with
 * CLUSTER ADDSLOTS. Every write acknowledged on them before now may be
 * gone by the server's doing: an excusing window from the start of the
 * run, named slot-dropped. Only slots the fix names are excused. */
static void dropped_slots(const char *out)
{
    const char *line = out;

    while (line != NULL && *line != '\0') {
        const char *next = strchr(line, '\n');
        int port, used;
        if (sscanf(line, "adopted %d%n", &port, &used) == 1) {
            rcpc_node n;
            const char *p = line + used;
            memset(&n, 0, sizeof n);
            snprintf(n.id, sizeof n.id, "port-%d", port);
            for (;;) {
                char *end;
                unsigned long slot = strtoul(p, &end, 10);
                if (end == p || (next != NULL && end > next))
                    break;
                if (slot < RCPC_SLOTS && !((n.slots[slot / 8] >> (slot % 8)) & 1)) {
                    n.slots[slot / 8] |= (unsigned char)(1u << (slot % 8));
                    n.nslots++;
                }
                p = end;
            }
            if (n.nslots > 0)
                add_event(EV_DROPPED, port, &n, REPL_WINDOW_MS, now_rel());
        }
        line = next != NULL ? next + 1 : NULL;
    }
}

static int ensure_ok(void)
{
    /* Room for every slot number (16384 of up to 5 digits and a space). */
    static char out[1 << 17];
    char err[2048];
    int i;

    for (i = 0; i < 3; i++) {
        if (rcpc_wait_ok(&g.cl, rcptest_scale(60), err, sizeof err) == 0)
            return 0;
        g.n_not_ok++;
        logf_("cluster not ok: %s", err);
        /* Seen after a failover right after a reshard: the new master does
         * not count one of its slots as its own (cluster_state:fail on it
         * alone, the others route the slot to it). A server-side state that
         * redis-cli --cluster fix repairs. */
        if (rcpc_script(&g.cl, "fix", NULL, 600, out, sizeof out, err, sizeof err) != 0)
            logf_("cluster.sh fix: %s", err);
        else
            logf_("cluster.sh fix repaired the cluster");
        dropped_slots(out);
    }
    return -1;
}

/* A fresh view; compared to the last one for unplanned failovers. */
static void take_topo(rcpc_topo *t, const char *planned_id)
{
    int64_t tn = now_rel();

    if (topo_now(t) != 0) {
        logf_("no topology from any node");
        return;
    }
    if (have_topo)
        observe(&topo_last, topo_last_t, t, tn, planned_id);
    topo_last = *t;
    topo_last_t = tn;
    have_topo = 1;
}

static int pick_master(const rcpc_topo *t, int min_slots)
{
    int cand[RCPC_MAX_NODES], n = 0, i;

    for (i = 0; i < t->n; i++)
        if (t->node[i].is_master && !t->node[i].failed && t->node[i].nslots >= min_slots)
            cand[n++] = i;
    return n ? cand[rnd32(&main_rnd) % (unsigned)n] : -1;
}

static int pick_replica(const rcpc_topo *t)
{
    int cand[RCPC_MAX_NODES], n = 0, i;

    for (i = 0; i < t->n; i++)
        if (!t->node[i].is_master && !t->node[i].failed && t->node[i].master_port > 0)
            cand[n++] = i;
    return n ? cand[rnd32(&main_rnd) % (unsigned)n] : -1;
}

/* Moves n random slots a -> b; with back != 0, moves the last move's
 * slot count back (b -> a), if both are still masters: slots go back and
 * forth. */
static int last_from, last_to, last_n;

static void act_reshard(int back)
{
    rcpc_topo t;
    char err[4096];
    int a = -1, b = -1, n, tries = 0, max;
    int64_t t0;

    take_topo(&t, NULL);
    if (back && last_n > 0) {
        a = rcpc_find_port(&t, last_to);
        b = rcpc_find_port(&t, last_from);
        if (a >= 0 && b >= 0 &&
            !(t.node[a].is_master && t.node[b].is_master && t.node[a].nslots > last_n))
            a = b = -1;
    }
    if (a < 0 || b < 0) {
        a = pick_master(&t, 200);
        if (a < 0)
            return;
        do
            b = pick_master(&t, 1);
        while ((b == a || b < 0) && ++tries < 20);
        if (b == a || b < 0)
            return;
        max = t.node[a].nslots / 2 < 2000 ? t.node[a].nslots / 2 : 2000;
        n = 50 + (int)(rnd32(&main_rnd) % (unsigned)max);
    } else {
        n = last_n;
    }
    logf_("reshard %d slots %d -> %d%s", n, t.node[a].port, t.node[b].port,
          n == last_n && back ? " (back)" : "");
    t0 = now_rel();
    if (rcpc_reshard(&g.cl, t.node[a].port, t.node[b].port, n, err, sizeof err) != 0) {
        g.n_action_failed++;
        logf_("reshard failed: %s", err);
        last_n = 0;
    } else {
        g.n_reshard++;
        g.slots_moved += n;
        last_from = t.node[a].port;
        last_to = t.node[b].port;
        last_n = back ? 0 : n;
        logf_("reshard done in %.1fs", (double)(now_rel() - t0) / 1000.0);
    }
    ensure_ok();
    take_topo(&t, NULL);
}

static void act_kill(void)
{
    rcpc_topo t;
    rcpc_node victim;
    char err[2048];
    int m, port;
    int64_t tk, tf, tr;

    take_topo(&t, NULL);
    m = pick_master(&t, 1);
    if (m < 0)
        return;
    victim = t.node[m];
    port = victim.port;
    logf_("SIGKILL master %d (%d slots)", port, victim.nslots);
    tk = now_rel();
    if (rcpc_kill(&g.cl, port, err, sizeof err) != 0) {
        g.n_action_failed++;
        logf_("kill failed: %s", err);
        return;
    }
    g.n_kill++;
    /* Acks come before the kill; +1 s for a reply read late by the client. */
    add_event(EV_KILL, port, &victim, tk, tk + 1000);
    ensure_ok(); /* includes: the killed node is failed over */
    tf = now_rel();
    logf_("failover of %d done %.1fs after the kill", port, (double)(tf - tk) / 1000.0);
    take_topo(&t, victim.id);
    rcptest_sleep_ms(1000);
    tr = now_rel();
    if (rcpc_restart(&g.cl, port, err, sizeof err) != 0) {
        g.n_action_failed++;
        logf_("restart failed: %s", err);
        return;
    }
    ensure_ok();
    /* A restarted node loads its old nodes.conf and believes it is still
     * the master of its slots until gossip tells it otherwise. */
    add_event(EV_RESTART, port, &victim, tr + REPL_WINDOW_MS, now_rel() + 1000);
    logf_("%d restarted and back as a replica %.1fs later", port, (double)(now_rel() - tr) / 1000.0);
    take_topo(&t, NULL);
}

static void act_stop(int lng)
{
    rcpc_topo t, after;
    rcpc_node victim;
    char p[16], err[2048];
    const char *args[] = {p, NULL};
    int i, ms, was_master;
    int64_t ts, tc;

    take_topo(&t, NULL);
    i = rnd32(&main_rnd) % 10 < 7 ? pick_master(&t, 1) : pick_replica(&t);
    if (i < 0)
        return;
    victim = t.node[i];
    was_master = victim.is_master;
    ms = lng ? 2 * g.node_timeout + 1000 : g.node_timeout / 2;
    snprintf(p, sizeof p, "%d", victim.port);
    logf_("SIGSTOP %s %d for %d ms", was_master ? "master" : "replica", victim.port, ms);
    ts = now_rel();
    if (rcpc_script(&g.cl, "pause", args, 30, NULL, 0, err, sizeof err) != 0) {
        g.n_action_failed++;
        logf_("pause failed: %s", err);
        return;
    }
    rcptest_sleep_ms(ms);
    if (rcpc_script(&g.cl, "resume", args, 30, NULL, 0, err, sizeof err) != 0) {
        g.n_action_failed++;
        logf_("resume failed: %s", err);
    }
    tc = now_rel();
    if (lng)
        g.n_stop_long++;
    else
        g.n_stop_short++;
    ensure_ok();
    if (topo_now(&after) != 0)
        return;
    i = rcpc_find_port(&after, victim.port);
    if (was_master && (i < 0 || !after.node[i].is_master)) {
        g.n_stop_failover++;
        logf_("stopped master %d was failed over", victim.port);
        /* Before the stop: unreplicated acks; after SIGCONT: the old master
         * may serve queued writes before it learns it was demoted. */
        add_event(EV_STOP, victim.port, &victim, ts, tc + 2000);
        take_topo(&t, victim.id);
    } else {
        take_topo(&t, NULL);
    }
}

static void act_failover(void)
{
    rcpc_topo t;
    char p[16], err[2048];
    const char *args[] = {p, NULL};
    int r, m;
    char old_master[41] = "";

    take_topo(&t, NULL);
    r = pick_replica(&t);
    if (r < 0)
        return;
    m = rcpc_find_port(&t, t.node[r].master_port);
    if (m >= 0)
        snprintf(old_master, sizeof old_master, "%s", t.node[m].id);
    snprintf(p, sizeof p, "%d", t.node[r].port);
    logf_("CLUSTER FAILOVER on replica %d (of %d)", t.node[r].port, t.node[r].master_port);
    if (rcpc_script(&g.cl, "failover", args, 60, NULL, 0, err, sizeof err) != 0) {
        g.n_action_failed++;
        logf_("failover failed: %s", err);
    } else {
        g.n_failover++;
    }
    ensure_ok();
    take_topo(&t, old_master[0] ? old_master : NULL);
}

/* Rounds of six actions in a random order, so that a short run still
 * sees each kind: reshard there and back, SIGKILL + restart, a short and
 * a long SIGSTOP, a manual failover. */
static void chaos_loop(int64_t end_ms)
{
    rcpc_topo t;
    int round[6] = {0, 1, 2, 3, 4, 5};
    int i, k = 6;

    take_topo(&t, NULL);
    while (now_rel() < end_ms) {
        if (k == 6) {
            for (i = 5; i > 0; i--) {
                int j = (int)(rnd32(&main_rnd) % (unsigned)(i + 1)), x = round[i];
                round[i] = round[j];
                round[j] = x;
            }
            k = 0;
        }
        switch (round[k++]) {
        case 0: act_reshard(0); break;
        case 1: act_reshard(1); break;
        case 2: act_kill(); break;
        case 3: act_stop(0); break;
        case 4: act_stop(1); break;
        default: act_failover(); break;
        }
        if (now_rel() >= end_ms)
            break;
        rcptest_sleep_ms(1000 + (int)(rnd32(&main_rnd) % 2000));
    }
}

/* ---- sampler: memory and progress ---- */

static void *sampler_main(void *arg)
{
    int64_t warm_at = g.seconds * 1000LL / 10;
    int64_t last_print = 0;

    (void)arg;
    if (warm_at < 5000)
        warm_at = 5000;
    while (!atomic_load(&g.sampler_stop)) {
        long long lib = atomic_load(&g.lib_live);
        long rss = rss_kb();
        int64_t t = now_rel();
        if (!atomic_load(&g.warm_done) && t >= warm_at) {
            g.mem_warm_lib = lib;
            g.rss_warm = rss;
            g.mem_peak_lib = lib;
            g.rss_peak = rss;
            atomic_store(&g.warm_done, 1);
        } else if (atomic_load(&g.warm_done)) {
            if (lib > g.mem_peak_lib)
                g.mem_peak_lib = lib;
            if (rss > g.rss_peak)
                g.rss_peak = rss;
        }
        if (t - last_print >= 30000) {
            last_print = t;
            logf_("progress: ops=%ld acked=%ld lib_live=%lld B rss=%ld kB", atomic_load(&g.ops),
                  atomic_load(&g.acked), lib, rss);
        }
        rcptest_sleep_ms(200);
    }
    return NULL;
}

/* ---- verification ---- */

static rcp_reply *read_retry(int argc, const char **argv, struct worker *w)
{
    int i;

    for (i = 0;; i++) {
        rcp_reply *r = rcp_cluster_command_argv(g.h, argc, argv, NULL);
        if (r->type != RCP_REPLY_ERROR || i >= 40)
            return r;
        if (w != NULL)
            w->verify_errors++;
        rcp_reply_free(r);
        rcptest_sleep_ms(250);
    }
}

static void *verify_main(void *arg)
{
    struct worker *w = arg;
    uint32_t ngen = (w->ntok + LIST_TOKENS - 1) / LIST_TOKENS;
    uint32_t gen, s;
    char key[64];
    int reported = 0;

    for (gen = 0; gen < ngen; gen++) {
        const char *argv[4] = {"LRANGE", key, "0", "-1"};
        rcp_reply *r;
        size_t i;
        snprintf(key, sizeof key, "chaos:l:%d:%u", w->id, gen);
        r = read_retry(4, argv, w);
        if (r->type != RCP_REPLY_ARRAY) {
            char d[256];
            fprintf(stderr, "chaos: LRANGE %s failed: %s\n", key,
                    rcptest_describe(r, d, sizeof d));
            w->verify_errors += 1000000; /* the check is void: fail loudly */
            rcp_reply_free(r);
            continue;
        }
        for (i = 0; i < r->elements; i++) {
            const rcp_reply *e = r->element[i];
            int t = -1;
            unsigned long sq = 0;
            if (e->type != RCP_REPLY_STRING || sscanf(e->str, "%d.%lu", &t, &sq) != 2 ||
                t != w->id || sq >= w->ntok || sq / LIST_TOKENS != gen) {
                w->foreign++;
                fprintf(stderr, "chaos: FOREIGN element \"%.*s\" in %s\n",
                        (int)(e->len < 40 ? e->len : 40), e->str ? e->str : "", key);
                continue;
            }
            if (tok_of(w, (uint32_t)sq)->seen < 255)
                tok_of(w, (uint32_t)sq)->seen++;
        }
        rcp_reply_free(r);
    }
    for (s = 0; s < w->ntok; s++) {
        struct tok *k = tok_of(w, s);
        int st = atomic_load(&k->state);
        uint32_t at = atomic_load(&k->ack_ms);
        if (k->seen > 1) {
            w->dup += k->seen - 1;
            list_key(key, sizeof key, w->id, s);
            fprintf(stderr, "chaos: DUP token %d.%u x%d in %s (slot %u, outcome %d at %.3fs)\n",
                    w->id, s, k->seen, key, rcp_keyslot(key, strlen(key)), st, at / 1000.0);
        }
        if (k->seen >= 1 && st == TS_FAILED) {
            w->phantom++;
            list_key(key, sizeof key, w->id, s);
            fprintf(stderr,
                    "chaos: PHANTOM token %d.%u in %s: reported not applied at %.3fs\n",
                    w->id, s, key, at / 1000.0);
        }
        if (k->seen == 0 && st == TS_ACKED) {
            unsigned slot;
            int e;
            list_key(key, sizeof key, w->id, s);
            slot = rcp_keyslot(key, strlen(key));
            e = excuse(slot, at);
            if (e >= 0) {
                long nth;
                w->excused++;
                pthread_mutex_lock(&g.ev_lock);
                nth = g.ev[e].lost_tokens++;
                pthread_mutex_unlock(&g.ev_lock);
                if (nth < 3)
                    fprintf(stderr,
                            "chaos: excused loss: token %d.%u in %s (slot %u) acknowledged at "
                            "%.3fs, %s of %d at %.3fs-%.3fs\n",
                            w->id, s, key, slot, at / 1000.0, ev_names[g.ev[e].kind],
                            g.ev[e].port, g.ev[e].t0 / 1000.0, g.ev[e].t1 / 1000.0);
            } else {
                w->lost++;
                if (reported++ < MAX_REPORTED)
                    fprintf(stderr,
                            "chaos: LOST token %d.%u in %s (slot %u), acknowledged at %.3fs\n",
                            w->id, s, key, slot, at / 1000.0);
            }
        }
    }
    return NULL;
}

/* Counters: returns lost increments (not excused); adds dups. */
static long verify_counters(long *dup, long *excused_total)
{
    long lost = 0;
    int c, i;

    for (c = 0; c < NCOUNTERS; c++) {
        char key[64];
        const char *argv[2] = {"GET", key};
        rcp_reply *r;
        long long v, a = atomic_load(&g.ctr_acked[c]), u = atomic_load(&g.ctr_unknown[c]);
        unsigned slot;

        counter_key(key, sizeof key, c);
        slot = rcp_keyslot(key, strlen(key));
        r = read_retry(2, argv, NULL);
        if (r->type == RCP_REPLY_NIL)
            v = 0;
        else if (r->type == RCP_REPLY_STRING)
            v = strtoll(r->str, NULL, 10);
        else {
            char d[256];
            fprintf(stderr, "chaos: GET %s failed: %s\n", key, rcptest_describe(r, d, sizeof d));
            rcp_reply_free(r);
            lost += 1000000;
            continue;
        }
        rcp_reply_free(r);
        if (v > a + u) {
            *dup += (long)(v - a - u);
            fprintf(stderr,
                    "chaos: DUP counter %s (slot %u) = %lld > acknowledged %lld + unknown %lld\n",
                    key, slot, v, a, u);
        }
        if (v < a) {
            long long short_by = a - v, excusable = 0;
            /* Increments acknowledged inside each excusing window of
             * this slot (whole buckets: a slight over-estimate). */
            for (i = 0; i < g.nev; i++) {
                struct event *e = &g.ev[i];
                int64_t b0, b1, b;
                long long in = 0;
                if (!((e->slots[slot / 8] >> (slot % 8)) & 1))
                    continue;
                b0 = (e->t0 - REPL_WINDOW_MS) / BUCKET_MS;
                b1 = e->t1 / BUCKET_MS;
                if (b0 < 0)
                    b0 = 0;
                for (b = b0; b <= b1 && b < g.nbuckets; b++)
                    in += atomic_load(&g.ctr_bucket[(size_t)c * (size_t)g.nbuckets + (size_t)b]);
                if (in > short_by - excusable)
                    in = short_by - excusable;
                e->lost_incr += (long)in;
                excusable += in;
            }
            *excused_total += (long)excusable;
            if (short_by > excusable) {
                lost += (long)(short_by - excusable);
                fprintf(stderr,
                        "chaos: LOST counter %s (slot %u) = %lld < acknowledged %lld "
                        "(%lld excused by failovers)\n",
                        key, slot, v, a, excusable);
            }
        }
    }
    return lost;
}

static const char *const code_names[RCP_ERR__COUNT] = {
    "ok",           "invalid",   "oom",          "io",          "not_sent",       "timeout",
    "queue_full",   "protocol",  "closed",       "connect",     "auth",           "blocking",
    "unsupported",  "too_large", "server",       "cluster_down", "cross_slot",    "redirect_limit",
    [RCP_ERR_TYPE] = "type",      [RCP_ERR_CANCELLED] = "cancelled", [RCP_ERR_SINK] = "sink",
};

static void print_causes(char *buf, size_t len)
{
    size_t o = 0;
    int i, first = 1;

#define APPEND(...)                                                                               \
    do {                                                                                          \
        int k_ = snprintf(buf + o, o < len ? len - o : 0, __VA_ARGS__);                           \
        if (k_ > 0)                                                                               \
            o += (size_t)k_;                                                                      \
    } while (0)
    APPEND("{");
    for (i = 1; i < RCP_ERR__COUNT; i++) {
        long n = atomic_load(&g.err_by_code[i]);
        if (n == 0 || i == RCP_ERR_SERVER)
            continue;
        APPEND("%s%s=%ld", first ? "" : ",", code_names[i], n);
        first = 0;
    }
    for (i = 0; i < MAX_SERVER_CAUSES && g.server_cause[i][0]; i++) {
        APPEND("%sserver:%s=%ld", first ? "" : ",", g.server_cause[i], g.server_count[i]);
        first = 0;
    }
    if (g.server_other) {
        APPEND("%sserver:other=%ld", first ? "" : ",", g.server_other);
        first = 0;
    }
    for (i = 1; i < RCP_ERR__COUNT; i++) {
        long n = atomic_load(&g.refused_by_code[i]);
        if (n == 0)
            continue;
        APPEND("%srefused:%s=%ld", first ? "" : ",", code_names[i], n);
        first = 0;
    }
    if (atomic_load(&g.unexpected_replies)) {
        APPEND("%sunexpected_reply=%ld", first ? "" : ",", atomic_load(&g.unexpected_replies));
        first = 0;
    }
    APPEND("}");
#undef APPEND
    if (o >= len && len > 0)
        buf[len - 1] = '\0';
}

static void usage(void)
{
    fprintf(stderr, "usage: chaos --dir CLUSTER_DIR [--seconds N] [--threads N] [--rate OPS]\n"
                    "             [--seed N] [--no-chaos]\n");
    exit(2);
}

static int read_node_timeout(const char *dir)
{
    char path[PATH_MAX], line[512];
    FILE *f;
    int nt = 1000;

    snprintf(path, sizeof path, "%s/cluster.env", dir);
    f = fopen(path, "r");
    if (f == NULL)
        return nt;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "NODE_TIMEOUT=", 13) == 0)
            nt = atoi(line + 13);
    fclose(f);
    return nt > 0 ? nt : 1000;
}

int main(int argc, char **argv)
{
    rcp_allocator alloc = {h_malloc, h_calloc, h_realloc, h_free};
    rcp_cluster_options o;
    rcp_conn_options node;
    rcpc_env env;
    pthread_t sampler;
    char err[4096], seed[64], causes[2048];
    const char *dir = NULL;
    long lost = 0, excused = 0, dup = 0, phantom = 0, foreign = 0, verr = 0, unresolved;
    long sync_stuck = 0, ctr_excused = 0, sub_at_close, res_at_close, after_close = 0;
    uint64_t seedv = 0;
    int i, rc = 0, joined[MAX_THREADS];

    g.seconds = 120;
    g.nthreads = 24;
    g.rate = 4000;
    g.chaos = 1;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            g.seconds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            g.nthreads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
            g.rate = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seedv = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--no-chaos") == 0)
            g.chaos = 0;
        else
            usage();
    }
    if (dir == NULL || g.seconds <= 0 || g.nthreads < 1 || g.nthreads > MAX_THREADS || g.rate < 1)
        usage();
    if (seedv == 0)
        seedv = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    main_rnd = seedv | 1;
    pthread_mutex_init(&g.cause_lock, NULL);
    pthread_mutex_init(&g.ev_lock, NULL);

    if (rcp_set_allocator(&alloc) != RCP_OK) {
        fprintf(stderr, "chaos: rcp_set_allocator failed\n");
        return 2;
    }
    if (rcpc_init(err, sizeof err) != 0) {
        fprintf(stderr, "chaos: %s\n", err);
        return 2;
    }
    snprintf(g.cl.dir, sizeof g.cl.dir, "%s", dir);
    g.node_timeout = read_node_timeout(dir);
    if (rcpc_env_read(&g.cl, &env) != 0) {
        fprintf(stderr, "chaos: %s/cluster.env: no nodes\n", dir);
        return 2;
    }
    snprintf(seed, sizeof seed, "127.0.0.1:%d", env.port[0]);
    snprintf(g.cl.seed, sizeof g.cl.seed, "%s", seed);

    g.nbuckets = (int)(((int64_t)g.seconds + 1800) * 1000 / BUCKET_MS);
    g.ctr_bucket = calloc((size_t)NCOUNTERS * (size_t)g.nbuckets, sizeof *g.ctr_bucket);
    if (g.ctr_bucket == NULL)
        return 2;

    rcpc_options(&o, &node, seed);
    node.request_timeout_ms = rcptest_scale(5000);
    g.wait_bound_ms = 2LL * node.request_timeout_ms + 20000;
    g.t_start = rcptest_now_ms();
    if (rcp_cluster_open(&o, &g.h, err, sizeof err) != RCP_OK) {
        fprintf(stderr, "chaos: rcp_cluster_open(%s): %s\n", seed, err);
        return 2;
    }
    fprintf(stderr,
            "chaos: %d threads, ~%d ops/s, %d s, node timeout %d ms, request timeout %d ms, "
            "seed %" PRIu64 ", cluster %s%s\n",
            g.nthreads, g.rate, g.seconds, g.node_timeout, node.request_timeout_ms, seedv, dir,
            node.tls ? " over TLS (certificates verified)" : "");

    for (i = 0; i < g.nthreads; i++) {
        g.w[i] = calloc(1, sizeof *g.w[i]);
        if (g.w[i] == NULL)
            return 2;
        g.w[i]->id = i;
        g.w[i]->rnd = (seedv + 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1)) | 1;
        if (pthread_create(&g.w[i]->th, NULL, worker_main, g.w[i]) != 0) {
            fprintf(stderr, "chaos: pthread_create failed\n");
            return 2;
        }
    }
    pthread_create(&sampler, NULL, sampler_main, NULL);

    if (g.chaos) {
        rcptest_sleep_ms(2000);
        chaos_loop((int64_t)g.seconds * 1000);
        ensure_ok();
    } else {
        while (now_rel() < (int64_t)g.seconds * 1000)
            rcptest_sleep_ms(200);
    }
    rcptest_sleep_ms(2000); /* steady load on the settled cluster */
    atomic_store(&g.stop, 1);
    logf_("stopping the load");

    /* Workers: a sync call that never returns leaves its thread stuck. */
    for (i = 0; i < g.nthreads; i++) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += (time_t)(g.wait_bound_ms / 1000) + 30;
        joined[i] = pthread_timedjoin_np(g.w[i]->th, NULL, &dl) == 0;
        if (!joined[i]) {
            sync_stuck++;
            logf_("thread %d did not finish: in a sync call for %lld ms", i,
                  (long long)(rcptest_now_ms() - atomic_load(&g.w[i]->sync_started_ms)));
        }
    }
    /* Abandoned futures get a last chance before they count. */
    for (i = 0; i < 300 && atomic_load(&g.resolved) < atomic_load(&g.submitted); i++)
        rcptest_sleep_ms(100);
    sub_at_close = atomic_load(&g.submitted);
    res_at_close = atomic_load(&g.resolved);

    atomic_store(&g.sampler_stop, 1);
    pthread_join(sampler, NULL);
    g.mem_end_lib = atomic_load(&g.lib_live);
    g.rss_end = rss_kb();
    if (!atomic_load(&g.warm_done)) {
        g.mem_warm_lib = g.mem_peak_lib = g.mem_end_lib;
        g.rss_warm = g.rss_peak = g.rss_end;
    }

    if (sync_stuck == 0) {
        pthread_t vt[MAX_THREADS];
        logf_("verifying");
        for (i = 0; i < g.nthreads; i++)
            pthread_create(&vt[i], NULL, verify_main, g.w[i]);
        for (i = 0; i < g.nthreads; i++) {
            pthread_join(vt[i], NULL);
            lost += g.w[i]->lost;
            excused += g.w[i]->excused;
            dup += g.w[i]->dup;
            phantom += g.w[i]->phantom;
            foreign += g.w[i]->foreign;
            verr += g.w[i]->verify_errors;
        }
        lost += verify_counters(&dup, &ctr_excused);
    } else {
        logf_("verification skipped: %ld threads stuck in a sync call", sync_stuck);
        lost = -1;
    }

    /* Close resolves everything still outstanding: after it, nothing may be
     * left. Not with a thread still inside a sync call (no call may be in
     * progress when close begins): the process then just ends. */
    if (sync_stuck == 0)
        rcp_cluster_close(g.h);
    after_close = atomic_load(&g.submitted) - atomic_load(&g.resolved);
    unresolved = (sub_at_close - res_at_close) + after_close + sync_stuck;

    print_causes(causes, sizeof causes);
    printf("chaos: ops=%ld acked=%ld lost=%ld dup=%ld unresolved=%ld errors_by_cause=%s\n",
           atomic_load(&g.ops), atomic_load(&g.acked), lost, dup, unresolved, causes);
    printf("chaos: failover-excused losses (async replication, Redis's guarantee; and slots a "
           "node dropped itself, see slot-dropped below): tokens=%ld increments=%ld\n",
           excused, ctr_excused);
    for (i = 0; i < g.nev; i++)
        if (g.ev[i].lost_tokens || g.ev[i].lost_incr)
            printf("chaos:   %s of %d at %.1fs: tokens=%ld increments=%ld\n",
                   ev_names[g.ev[i].kind], g.ev[i].port, (double)g.ev[i].t0 / 1000.0,
                   g.ev[i].lost_tokens, g.ev[i].lost_incr);
    printf("chaos: phantom=%ld foreign=%ld resolved_twice=%ld verify_retries=%ld\n", phantom,
           foreign, atomic_load(&g.resolved_twice), verr);
    printf("chaos: futures submitted=%ld resolved_before_close=%ld late(>%llds)=%ld "
           "unresolved_after_close=%ld sync_calls=%ld sync_stuck=%ld\n",
           sub_at_close, res_at_close, (long long)(g.wait_bound_ms / 1000), atomic_load(&g.late),
           after_close, atomic_load(&g.sync_calls), sync_stuck);
    printf("chaos: actions reshard=%ld (slots=%ld) kill=%ld stop_short=%ld stop_long=%ld "
           "(failed_over=%ld) manual_failover=%ld unplanned_failover=%ld failed_actions=%ld "
           "not_ok_waits=%ld\n",
           g.n_reshard, g.slots_moved, g.n_kill, g.n_stop_short, g.n_stop_long,
           g.n_stop_failover, g.n_failover, g.n_unplanned, g.n_action_failed, g.n_not_ok);
    {
        long long rec = 0;
        for (i = 0; i < g.nthreads; i++)
            rec += (long long)((g.w[i]->ntok + CHUNK - 1) / CHUNK) * CHUNK *
                   (long long)sizeof(struct tok);
        printf("chaos: memory library_live_bytes warm=%lld peak=%lld end=%lld (growth %+lld); "
               "rss_kb warm=%ld peak=%ld end=%ld (growth %+ld, of which checker records "
               "~%lld kB)\n",
               g.mem_warm_lib, g.mem_peak_lib, g.mem_end_lib, g.mem_end_lib - g.mem_warm_lib,
               g.rss_warm, g.rss_peak, g.rss_end, g.rss_end - g.rss_warm, rec / 1024);
    }
    fflush(stdout);

    if (lost != 0 || dup != 0 || unresolved != 0 || phantom != 0 || foreign != 0 ||
        atomic_load(&g.resolved_twice) != 0 || verr >= 1000000)
        rc = 1;

    if (sync_stuck != 0)
        _exit(rc);
    /* Free what the checker allocated (leak checking stays meaningful). */
    for (i = 0; i < g.nthreads; i++) {
        struct burst *b, *nb;
        uint32_t c;
        if (!joined[i])
            continue; /* still running: leave it */
        for (b = g.w[i]->bursts; b != NULL; b = nb) {
            nb = b->next;
            pthread_mutex_destroy(&b->m);
            pthread_cond_destroy(&b->cv);
            free(b);
        }
        for (c = 0; c < MAX_CHUNKS && g.w[i]->chunk[c] != NULL; c++)
            free(g.w[i]->chunk[c]);
        free(g.w[i]);
    }
    free(g.ctr_bucket);
    return rc;
}
