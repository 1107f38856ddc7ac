/* test_largevalues.c: issue 14's real-cluster tests: streamed reads and
 * cancels while slots move, and one large value through the cluster handle.
 *
 * - streamed_get_and_cancel_during_reshard: 64 values of 256 KiB and 4 of
 *   4 MiB, each with a byte pattern of its own key, in slots that a
 *   reshard moves away and back. Four threads loop streamed GETs (two sync,
 *   two async) whose callback sink checks every byte and every offset: a
 *   chunk at any offset other than the bytes seen so far would be a restart
 *   or a second copy (MOVED and ASK must be followed before a byte reaches
 *   the sink). Every read must resolve as the value's length. Meanwhile two
 *   threads send async INCRs to keys of the same slots and cancel a third
 *   of them right after sending: every callback runs exactly once, a cancel
 *   that answers UNSENT or WRITTEN has run it with RCP_ERR_CANCELLED before
 *   returning, and at the end each counter lies between its successes and
 *   its successes plus the requests that may have run (cancelled WRITTEN,
 *   or failed otherwise). Half of the cancelled INCRs go to a key of their
 *   own: one cancelled UNSENT must never have run, so its key stays absent.
 *   Each workload has its own handle, and each handle must have followed
 *   redirects (moved + ask > 0).
 * - value_64mib: one 64 MiB value SET, then read back plain and streamed
 *   (sync and async), every byte checked; and one of the same size SET
 *   from a source, read back streamed. The issue asks for values up to
 *   512 MiB; this machine is shared (2 vCPUs, several sessions), so the
 *   test stays at 64 MiB: the servers get proto-max-bulk-len 1gb so that
 *   RCPTEST_LV_MIB can raise the size for a run by hand (with
 *   RCPTEST_NODE_TIMEOUT_MS=30000: at hundreds of MiB a master blocks
 *   longer than the default 1 s and is failed over; docs/large-values.md).
 *
 * Every check can be seen failing: RCPTEST_LV_BREAK=pattern (a value's
 * bytes checked against another key's pattern), offset (the sink expects
 * its first chunk at byte 1, as a second copy would look), missing (a GET
 * of a key never set, which is nil, not a length), unsent (the keys of
 * thread 0 whose INCR was cancelled UNSENT are INCRed by the test itself
 * before the check), count (one counter required one higher than what
 * may have run) must each fail the test. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "rcpipe.h"

#define MOVE_SLOTS 2000
#define NVAL 64
#define VAL_LEN (256 * 1024)
#define NBIG 4
#define BIG_LEN (4 * 1024 * 1024)
#define NSTREAM 4 /* streamed GET threads: even ids sync, odd ids async */
#define NCANCEL 2 /* INCR + cancel threads */
#define NCOUNT 16 /* counters per cancel thread */
#define BATCH 32  /* async INCRs sent before the thread waits for them */
#define MAXUNIQ 4096

static rcpc_cluster cl;
static atomic_int stop_flag;
static rcpc_problem sprob = RCPC_PROBLEM_INIT; /* streamed GETs */
static rcpc_problem cprob = RCPC_PROBLEM_INIT; /* INCRs and cancels */
static unsigned key_slot[NVAL + NBIG + NCANCEL * NCOUNT];
static int nkey_slots;

static int broken(const char *what)
{
    const char *b = getenv("RCPTEST_LV_BREAK");
    return b != NULL && strcmp(b, what) == 0;
}

/* The byte at offset off of value number key: differs between keys at
 * almost every offset, and along one value, so a wrong key, a shifted
 * offset or a second copy from byte 0 shows. */
static unsigned char pattern(unsigned key, uint64_t off)
{
    uint64_t x = off * 0x9E3779B1u + (uint64_t)key * 0x85EBCA77u;
    return (unsigned char)((x >> 13) ^ x ^ (off >> 8));
}

static void fill(char *buf, unsigned key, size_t len)
{
    size_t i;
    for (i = 0; i < len; i++)
        buf[i] = (char)pattern(key, i);
}

/* The offset of the first byte of data that is not key's pattern, or -1. */
static long long mismatch(unsigned key, const char *data, size_t len, uint64_t off)
{
    size_t i;
    for (i = 0; i < len; i++)
        if ((unsigned char)data[i] != pattern(key, off + i))
            return (long long)(off + i);
    return -1;
}

static void value_key(char *buf, size_t len, unsigned v)
{
    snprintf(buf, len, "%slv:%u", rcpc_slot_tag(key_slot[v]), v);
}

/* A callback sink that checks one value as it streams: the chunks must
 * come in order (offset == bytes seen), with the announced total, and be
 * the key's pattern. It notes the first problem and accepts the rest, so
 * the request still resolves and its reply is checked too. */
typedef struct vcheck {
    rcp_sink sink;
    unsigned key;
    uint64_t want;
    uint64_t got;
    long chunks;
    int bad;
    char why[200];
} vcheck;

static int vcheck_fn(void *ud, const char *data, size_t len, uint64_t offset, uint64_t total)
{
    vcheck *v = ud;
    long long at;

    v->chunks++;
    if (v->bad)
        return 0;
    if (offset != v->got) {
        v->bad = 1;
        snprintf(v->why, sizeof v->why,
                 "chunk of %zu bytes at offset %llu after %llu bytes: a restart or a second copy",
                 len, (unsigned long long)offset, (unsigned long long)v->got);
    } else if (total != v->want || len == 0 || offset + len > v->want) {
        v->bad = 1;
        snprintf(v->why, sizeof v->why, "chunk of %zu bytes at %llu, total %llu, want %llu", len,
                 (unsigned long long)offset, (unsigned long long)total,
                 (unsigned long long)v->want);
    } else if ((at = mismatch(v->key, data, len, offset)) >= 0) {
        v->bad = 1;
        snprintf(v->why, sizeof v->why, "byte %lld is 0x%02x, want 0x%02x", at,
                 (unsigned char)data[at - (long long)offset], pattern(v->key, (uint64_t)at));
    }
    v->got = offset + len;
    return 0;
}

static void vcheck_init(vcheck *v, unsigned key, uint64_t want)
{
    memset(v, 0, sizeof *v);
    v->sink.kind = RCP_SINK_CALLBACK;
    v->sink.fn = vcheck_fn;
    v->sink.ud = v;
    v->key = broken("pattern") ? key + 1 : key;
    v->want = want;
    v->got = broken("offset") ? 1 : 0;
}

/* After the request resolved: NULL when reply and sink agree the whole
 * value arrived, else why not (in buf). */
static const char *vcheck_done(const vcheck *v, const rcp_reply *r, char *buf, size_t buflen)
{
    char d[256];

    if (r == NULL || r->type != RCP_REPLY_INTEGER || r->integer != (long long)v->want)
        snprintf(buf, buflen, "reply %s, want the length %llu", rcptest_describe(r, d, sizeof d),
                 (unsigned long long)v->want);
    else if (v->bad)
        snprintf(buf, buflen, "%s", v->why);
    else if (v->got != v->want)
        snprintf(buf, buflen, "the sink got %llu bytes of %llu", (unsigned long long)v->got,
                 (unsigned long long)v->want);
    else
        return NULL;
    return buf;
}

/* One async streamed request, waited for like a sync call. Reused by its
 * thread; resolves counts every callback, so a second one shows. */
struct sget {
    rcp_future f;
    vcheck v;
    pthread_mutex_t m;
    pthread_cond_t cv;
    int done;
    long resolves;
    rcp_reply *r;
};

static void sget_resolve(rcp_future *f, rcp_reply *reply)
{
    struct sget *s = f->data;
    rcp_reply *k = rcp_reply_keep(reply);

    pthread_mutex_lock(&s->m);
    s->r = k;
    s->done++;
    s->resolves++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->m);
}

/* Sends GET key with s's sink and waits (bounded). The reply (caller
 * frees), or NULL with *rc: the refusal, or -1 not resolved in time (s
 * must then be leaked: the library may still write to it). */
static rcp_reply *sget_call(rcp_cluster *h, struct sget *s, const char *key, int *rc)
{
    const char *argv[2] = {"GET", key};
    struct timespec deadline;
    rcp_reply *r;

    pthread_mutex_lock(&s->m);
    s->done = 0;
    s->r = NULL;
    pthread_mutex_unlock(&s->m);
    memset(&s->f, 0, sizeof s->f);
    s->f.resolve = sget_resolve;
    s->f.data = s;
    *rc = rcp_cluster_send_argv_sink(h, &s->f, 2, argv, NULL, &s->v.sink);
    if (*rc != RCP_OK)
        return NULL;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += rcptest_scale(60);
    pthread_mutex_lock(&s->m);
    while (!s->done)
        if (pthread_cond_timedwait(&s->cv, &s->m, &deadline) == ETIMEDOUT)
            break;
    r = s->done ? s->r : NULL;
    if (!s->done)
        *rc = -1;
    pthread_mutex_unlock(&s->m);
    return r;
}

static struct sget *sget_new(void)
{
    struct sget *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->cv, NULL);
    return s;
}

/* ---- streamed GET threads -------------------------------------------- */

static rcp_cluster *hs; /* the streamed GETs' handle */

struct sworker {
    pthread_t th;
    int id;
    unsigned rnd;
    long reads, big_reads, sends;
    uint64_t bytes;
    struct sget *s; /* async threads */
    int leaked;
};

static struct sworker sworkers[NSTREAM];

static void *sworker_main(void *arg)
{
    struct sworker *w = arg;
    vcheck sync_v;

    while (!atomic_load(&stop_flag) && !w->leaked) {
        char key[64], why[512];
        unsigned v;
        uint64_t len;
        vcheck *chk;
        rcp_reply *r;
        const char *bad;

        w->rnd = w->rnd * 1103515245u + 12345u;
        /* One read in 16 is a 4 MiB value. */
        if ((w->rnd >> 4) % 16 == 0) {
            v = NVAL + (w->rnd >> 12) % NBIG;
            len = BIG_LEN;
            w->big_reads++;
        } else {
            v = (w->rnd >> 12) % NVAL;
            len = VAL_LEN;
        }
        value_key(key, sizeof key, v);
        if (broken("missing") && w->reads == 3)
            snprintf(key, sizeof key, "%slv:never-set", rcpc_slot_tag(key_slot[v]));
        chk = w->id % 2 ? &w->s->v : &sync_v;
        vcheck_init(chk, v, len);
        if (w->id % 2) {
            int rc;
            w->sends++;
            r = sget_call(hs, w->s, key, &rc);
            if (r == NULL) {
                rcpc_problem_note(&sprob, "thread %d: async streamed GET %s: %d (%s)", w->id, key,
                                  rc, rc >= 0 ? rcp_strerror(rc) : "not resolved in time");
                if (rc == -1)
                    w->leaked = 1;
                continue;
            }
        } else {
            const char *argv[2] = {"GET", key};
            r = rcp_cluster_command_argv_sink(hs, 2, argv, NULL, &chk->sink);
        }
        w->reads++;
        if ((bad = vcheck_done(chk, r, why, sizeof why)) != NULL)
            rcpc_problem_note(&sprob, "thread %d (%s): streamed GET %s: %s", w->id,
                              w->id % 2 ? "async" : "sync", key, bad);
        else
            w->bytes += len;
        rcp_reply_free(r);
    }
    return NULL;
}

/* ---- INCR + cancel threads ------------------------------------------- */

static rcp_cluster *hc; /* the INCRs' handle */

enum { U_ABSENT = 1, U_ONE, U_MAYBE };

struct cworker;

struct creq {
    rcp_future f;
    struct cworker *w;
    int counter; /* -1: a key of its own (uniq) */
    int uniq;
    int cancel;  /* rcp_cancel_result, or -2: not cancelled */
    atomic_int calls;
    int err;     /* what the callback got */
    long long value;
};

struct cworker {
    pthread_t th;
    int id;
    unsigned rnd;
    pthread_mutex_t m;
    pthread_cond_t cv;
    int pending;
    long sends, cancels[3], too_late_cancelled, others_failed;
    long long succ[NCOUNT], written[NCOUNT], maybe[NCOUNT], unsent[NCOUNT];
    int nuniq;
    unsigned char ustate[MAXUNIQ];
    struct creq req[BATCH];
    int leaked;
};

static struct cworker cworkers[NCANCEL];

static void counter_key(char *buf, size_t len, int t, int c)
{
    snprintf(buf, len, "%slc:%d:%d", rcpc_slot_tag(key_slot[NVAL + NBIG + t * NCOUNT + c]), t, c);
}

static void uniq_key(char *buf, size_t len, int t, int u)
{
    snprintf(buf, len, "%slu:%d:%d", rcpc_slot_tag(key_slot[(unsigned)u % (unsigned)nkey_slots]),
             t, u);
}

static void creq_resolve(rcp_future *f, rcp_reply *reply)
{
    struct creq *q = f->data;
    struct cworker *w = q->w;
    int n = atomic_fetch_add(&q->calls, 1) + 1;

    pthread_mutex_lock(&w->m);
    if (n > 1)
        rcpc_problem_note(&cprob, "thread %d: an INCR's callback ran %d times", w->id, n);
    q->err = reply != NULL ? reply->err : -100;
    q->value = reply != NULL && reply->type == RCP_REPLY_INTEGER ? reply->integer : -1;
    w->pending--;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->m);
}

/* What one resolved request says about its key. */
static void creq_account(struct cworker *w, struct creq *q)
{
    int c = q->counter;
    int ran_ok = q->err == RCP_OK && q->value >= 1;
    int state;

    if (atomic_load(&q->calls) != 1) {
        rcpc_problem_note(&cprob, "thread %d: an INCR's callback ran %d times", w->id,
                          atomic_load(&q->calls));
    }
    if (ran_ok) {
        state = U_ONE;
        if (c >= 0)
            w->succ[c]++;
        else if (q->value != 1)
            rcpc_problem_note(&cprob, "thread %d: INCR of key %d of its own gave %lld", w->id,
                              q->uniq, q->value);
    } else if (q->err == RCP_ERR_CANCELLED && q->cancel == RCP_CANCEL_UNSENT) {
        state = U_ABSENT;
        if (c >= 0)
            w->unsent[c]++;
    } else if (q->err == RCP_ERR_CANCELLED && q->cancel == RCP_CANCEL_WRITTEN) {
        state = U_MAYBE;
        if (c >= 0)
            w->written[c]++;
    } else {
        /* Failed otherwise: it may have run. Only a cancelled request may
         * fail (a TOO_LATE cancel can still stop a retry). */
        state = U_MAYBE;
        if (c >= 0)
            w->maybe[c]++;
        if (q->cancel == -2)
            rcpc_problem_note(&cprob, "thread %d: INCR not cancelled failed: err %d (%s)", w->id,
                              q->err, rcp_strerror(q->err));
        else if (q->err == RCP_ERR_CANCELLED)
            w->too_late_cancelled++;
        else
            w->others_failed++;
    }
    if (c < 0)
        w->ustate[q->uniq] = (unsigned char)state;
}

static void *cworker_main(void *arg)
{
    struct cworker *w = arg;

    while (!atomic_load(&stop_flag) && !w->leaked) {
        struct timespec deadline;
        int b;

        for (b = 0; b < BATCH; b++) {
            struct creq *q = &w->req[b];
            char key[64];
            const char *argv[2];
            int cancel, rc;

            w->rnd = w->rnd * 1103515245u + 12345u;
            cancel = (w->rnd >> 8) % 3 == 0;
            memset(&q->f, 0, sizeof q->f);
            q->f.resolve = creq_resolve;
            q->f.data = q;
            q->w = w;
            q->cancel = -2;
            q->err = -100;
            q->value = -1;
            atomic_store(&q->calls, 0);
            if (cancel && (w->rnd >> 12) % 2 && w->nuniq < MAXUNIQ) {
                q->counter = -1;
                q->uniq = w->nuniq++;
                uniq_key(key, sizeof key, w->id, q->uniq);
            } else {
                q->counter = (int)((w->rnd >> 14) % NCOUNT);
                q->uniq = -1;
                counter_key(key, sizeof key, w->id, q->counter);
            }
            argv[0] = "INCR";
            argv[1] = key;
            pthread_mutex_lock(&w->m);
            w->pending++;
            pthread_mutex_unlock(&w->m);
            rc = rcp_cluster_send_argv(hc, &q->f, 2, argv, NULL);
            if (rc != RCP_OK) {
                pthread_mutex_lock(&w->m);
                w->pending--;
                pthread_mutex_unlock(&w->m);
                rcpc_problem_note(&cprob, "thread %d: INCR %s refused: %s", w->id, key,
                                  rcp_strerror(rc));
                q->counter = -3; /* never sent: not accounted */
                if (q->uniq >= 0)
                    w->ustate[q->uniq] = U_ABSENT;
                continue;
            }
            w->sends++;
            if (!cancel)
                continue;
            q->cancel = (int)rcp_cluster_cancel(hc, &q->f);
            if (q->cancel == RCP_CANCEL_INVALID) {
                rcpc_problem_note(&cprob, "thread %d: cancel of INCR %s: INVALID", w->id, key);
                continue;
            }
            w->cancels[q->cancel]++;
            if (q->cancel == RCP_CANCEL_UNSENT || q->cancel == RCP_CANCEL_WRITTEN) {
                /* Its callback has run, on this thread, before the cancel
                 * returned. */
                int calls = atomic_load(&q->calls);
                pthread_mutex_lock(&w->m);
                if (calls != 1 || q->err != RCP_ERR_CANCELLED)
                    rcpc_problem_note(&cprob,
                                      "thread %d: cancel %s of INCR %s returned with %d callbacks "
                                      "run, err %d",
                                      w->id, q->cancel == RCP_CANCEL_UNSENT ? "UNSENT" : "WRITTEN",
                                      key, calls, q->err);
                pthread_mutex_unlock(&w->m);
            }
        }
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += rcptest_scale(60);
        pthread_mutex_lock(&w->m);
        while (w->pending > 0)
            if (pthread_cond_timedwait(&w->cv, &w->m, &deadline) == ETIMEDOUT)
                break;
        if (w->pending != 0) {
            rcpc_problem_note(&cprob, "thread %d: %d INCRs not resolved in 60 s", w->id,
                              w->pending);
            w->leaked = 1; /* the futures may still be written to: stop here */
        }
        pthread_mutex_unlock(&w->m);
        if (w->leaked)
            break;
        for (b = 0; b < BATCH; b++)
            if (w->req[b].counter != -3)
                creq_account(w, &w->req[b]);
        rcptest_sleep_ms(1); /* leave the shared CPUs to the streamed reads and the reshard */
    }
    return NULL;
}

/* ---- the cluster side ------------------------------------------------ */

static void stop_workers(void)
{
    int t;

    atomic_store(&stop_flag, 1);
    for (t = 0; t < NSTREAM; t++)
        pthread_join(sworkers[t].th, NULL);
    for (t = 0; t < NCANCEL; t++)
        pthread_join(cworkers[t].th, NULL);
}

/* redis-cli --cluster reshard of MOVE_SLOTS slots, in the background
 * while the threads go on; a failure stops them and fails the test. */
static void move_slots(int from, int to)
{
    char f[16], t[16], n[16], err[4096];
    const char *args[] = {f, t, n, NULL};

    snprintf(f, sizeof f, "%d", from);
    snprintf(t, sizeof t, "%d", to);
    snprintf(n, sizeof n, "%d", MOVE_SLOTS);
    if (rcpc_job_run(&cl, "reshard", args, 240, err, sizeof err) != 0) {
        stop_workers();
        ck_abort_msg("reshard of %d slots %d -> %d: %s", MOVE_SLOTS, from, to, err);
    }
}

/* SET key to len bytes of value number v's pattern (buf: room for len). */
static void set_pattern(rcp_cluster *h, const char *key, unsigned v, size_t len, char *buf)
{
    char d[256];
    const char *argv[3] = {"SET", key, buf};
    size_t lens[3];
    rcp_reply *r;

    fill(buf, v, len);
    lens[0] = 3;
    lens[1] = strlen(key);
    lens[2] = len;
    r = rcp_cluster_command_argv(h, 3, argv, lens);
    ck_assert_msg(rcpc_is_status(r, "OK"), "SET %s (%zu bytes): %s", key, len,
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}

START_TEST(test_streamed_get_and_cancel_during_reshard)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    rcp_cluster_stats sst, cst;
    rcpc_topo topo;
    char err[4096], *buf;
    int from, to = 0, i, t, fi = -1;
    unsigned slot, first[MOVE_SLOTS];
    int nfirst = 0;
    long reads = 0, big = 0, sends = 0, resolves = 0, csends = 0;
    long cancels[3] = {0, 0, 0}, too_late_cancelled = 0, others_failed = 0;
    uint64_t bytes = 0;
    int64_t t0;

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    rcpc_options(&o, &node, cl.seed);
    hs = rcpc_open(&o);
    hc = rcpc_open(&o);

    /* The master with the most slots gives its first MOVE_SLOTS away and
     * gets them back; every key of the test is in one of those. */
    ck_assert_int_eq(rcpc_topology_any(&cl, &topo), 0);
    for (i = 0; i < topo.n; i++)
        if (topo.node[i].is_master && (fi < 0 || topo.node[i].nslots > topo.node[fi].nslots))
            fi = i;
    ck_assert_int_ge(fi, 0);
    from = topo.node[fi].port;
    for (i = 0; i < topo.n; i++)
        if (topo.node[i].is_master && i != fi) {
            to = topo.node[i].port;
            break;
        }
    ck_assert_int_ge(topo.node[fi].nslots, MOVE_SLOTS);
    for (slot = 0; slot < RCPC_SLOTS && nfirst < MOVE_SLOTS; slot++)
        if (rcpc_has_slot(&topo.node[fi], slot))
            first[nfirst++] = slot;
    nkey_slots = (int)(sizeof key_slot / sizeof key_slot[0]);
    for (i = 0; i < nkey_slots; i++)
        key_slot[i] = first[((long)i * MOVE_SLOTS) / nkey_slots];

    /* The values, before any thread reads them. */
    buf = malloc(BIG_LEN);
    ck_assert_ptr_nonnull(buf);
    for (i = 0; i < NVAL + NBIG; i++) {
        char key[64];
        value_key(key, sizeof key, (unsigned)i);
        set_pattern(hs, key, (unsigned)i, i < NVAL ? VAL_LEN : BIG_LEN, buf);
    }
    free(buf);

    atomic_store(&stop_flag, 0);
    for (t = 0; t < NSTREAM; t++) {
        memset(&sworkers[t], 0, sizeof sworkers[t]);
        sworkers[t].id = t;
        sworkers[t].rnd = 4242u + (unsigned)t * 7919u;
        if (t % 2)
            sworkers[t].s = sget_new();
        ck_assert_int_eq(pthread_create(&sworkers[t].th, NULL, sworker_main, &sworkers[t]), 0);
    }
    for (t = 0; t < NCANCEL; t++) {
        struct cworker *w = &cworkers[t];
        memset(w, 0, sizeof *w);
        w->id = t;
        w->rnd = 99u + (unsigned)t * 104729u;
        pthread_mutex_init(&w->m, NULL);
        pthread_cond_init(&w->cv, NULL);
        ck_assert_int_eq(pthread_create(&w->th, NULL, cworker_main, w), 0);
    }
    rcptest_sleep_ms(300);

    t0 = rcptest_now_ms();
    move_slots(from, to);
    ck_assert_int_eq(rcpc_topology_any(&cl, &topo), 0);
    for (i = 0; i < nkey_slots; i++) {
        int owner = rcpc_slot_owner(&topo, key_slot[i]);
        if (owner < 0 || topo.node[owner].port != to) {
            stop_workers();
            ck_abort_msg("slot %u of a test key did not move to %d", key_slot[i], to);
        }
    }
    move_slots(to, from);
    rcptest_sleep_ms(300);
    stop_workers();

    for (t = 0; t < NSTREAM; t++) {
        reads += sworkers[t].reads;
        big += sworkers[t].big_reads;
        bytes += sworkers[t].bytes;
        if (sworkers[t].s != NULL) {
            sends += sworkers[t].sends;
            pthread_mutex_lock(&sworkers[t].s->m);
            resolves += sworkers[t].s->resolves;
            pthread_mutex_unlock(&sworkers[t].s->m);
        }
    }
    for (t = 0; t < NCANCEL; t++) {
        csends += cworkers[t].sends;
        for (i = 0; i < 3; i++)
            cancels[i] += cworkers[t].cancels[i];
        too_late_cancelled += cworkers[t].too_late_cancelled;
        others_failed += cworkers[t].others_failed;
    }
    ck_assert_int_eq(rcp_cluster_get_stats(hs, &sst), RCP_OK);
    ck_assert_int_eq(rcp_cluster_get_stats(hc, &cst), RCP_OK);
    fprintf(stderr,
            "largevalues: %lld ms of reshard; %ld streamed GETs (%ld of 4 MiB, %llu MiB "
            "checked), moved %llu ask %llu; %ld INCRs, cancelled unsent %ld written %ld too "
            "late %ld (of those resolved cancelled %ld, failed otherwise %ld), moved %llu ask "
            "%llu\n",
            (long long)(rcptest_now_ms() - t0), reads, big,
            (unsigned long long)(bytes >> 20), (unsigned long long)sst.moved,
            (unsigned long long)sst.ask, csends, cancels[RCP_CANCEL_UNSENT],
            cancels[RCP_CANCEL_WRITTEN], cancels[RCP_CANCEL_TOO_LATE], too_late_cancelled,
            others_failed, (unsigned long long)cst.moved, (unsigned long long)cst.ask);

    ck_assert_msg(rcpc_problem_count(&sprob) == 0, "streamed GETs: %d problems; first: %s",
                  rcpc_problem_count(&sprob), sprob.first);
    ck_assert_msg(rcpc_problem_count(&cprob) == 0, "INCRs and cancels: %d problems; first: %s",
                  rcpc_problem_count(&cprob), cprob.first);
    ck_assert_msg(sends == resolves, "%ld async streamed GETs sent, %ld callbacks", sends,
                  resolves);
    ck_assert_msg(reads > 0 && big > 0, "%ld streamed GETs, %ld of 4 MiB", reads, big);
    ck_assert_msg(sst.moved + sst.ask > 0, "no redirect followed by the streamed GETs");
    ck_assert_msg(cst.moved + cst.ask > 0, "no redirect followed by the INCRs");
    ck_assert_msg(cancels[RCP_CANCEL_UNSENT] + cancels[RCP_CANCEL_WRITTEN] > 0,
                  "no cancel took a request back");

    /* Every counter between what surely ran and what may have run; every
     * key of a request cancelled UNSENT absent. */
    for (t = 0; t < NCANCEL; t++) {
        struct cworker *w = &cworkers[t];
        for (i = 0; i < NCOUNT; i++) {
            char key[64], d[256];
            const char *argv[2] = {"GET", key};
            long long v, lo = w->succ[i], hi = w->succ[i] + w->written[i] + w->maybe[i];
            rcp_reply *r;

            if (broken("count") && t == 0 && i == 0)
                lo = hi + 1;
            counter_key(key, sizeof key, t, i);
            r = rcp_cluster_command_argv(hc, 2, argv, NULL);
            if (rcptest_is_nil(r))
                v = 0;
            else if (r->type == RCP_REPLY_STRING)
                v = atoll(r->str);
            else
                ck_abort_msg("GET %s: %s", key, rcptest_describe(r, d, sizeof d));
            rcp_reply_free(r);
            ck_assert_msg(v >= lo && v <= hi,
                          "counter %s is %lld: %lld INCRs succeeded, %lld cancelled WRITTEN, "
                          "%lld failed otherwise, %lld cancelled UNSENT",
                          key, v, w->succ[i], w->written[i], w->maybe[i], w->unsent[i]);
        }
        for (i = 0; i < w->nuniq; i++) {
            char key[64], d[256];
            const char *argv[2] = {"GET", key};
            int state = w->ustate[i];
            rcp_reply *r;

            uniq_key(key, sizeof key, t, i);
            if (broken("unsent") && state == U_ABSENT && t == 0) {
                /* As if the library had run a request cancelled UNSENT. */
                const char *incr[2] = {"INCR", key};
                rcp_reply_free(rcp_cluster_command_argv(hc, 2, incr, NULL));
            }
            r = rcp_cluster_command_argv(hc, 2, argv, NULL);
            if (state == U_ABSENT)
                ck_assert_msg(rcptest_is_nil(r),
                              "%s: its INCR was cancelled UNSENT, yet the key holds %s", key,
                              rcptest_describe(r, d, sizeof d));
            else if (state == U_ONE)
                ck_assert_msg(rcpc_is_string(r, "1"), "%s: its INCR succeeded, GET: %s", key,
                              rcptest_describe(r, d, sizeof d));
            else
                ck_assert_msg(rcptest_is_nil(r) || rcpc_is_string(r, "1"),
                              "%s: its INCR may have run once, GET: %s", key,
                              rcptest_describe(r, d, sizeof d));
            rcp_reply_free(r);
        }
    }
    rcp_cluster_close(hs);
    rcp_cluster_close(hc);
    hs = hc = NULL;
    for (t = 0; t < NSTREAM; t++) {
        if (sworkers[t].s != NULL && !sworkers[t].leaked) {
            pthread_mutex_destroy(&sworkers[t].s->m);
            pthread_cond_destroy(&sworkers[t].s->cv);
            free(sworkers[t].s);
        }
    }
}
END_TEST

/* ---- one large value ------------------------------------------------- */

/* A source of key's pattern, from any offset (replayable: the same bytes
 * again from 0). */
static ssize_t pattern_source(void *ud, char *buf, size_t cap, uint64_t off)
{
    unsigned key = *(const unsigned *)ud;
    size_t i;
    for (i = 0; i < cap; i++)
        buf[i] = (char)pattern(key, off + i);
    return (ssize_t)cap;
}

START_TEST(test_value_64mib)
{
    const char *mib_env = getenv("RCPTEST_LV_MIB");
    size_t len = (size_t)(mib_env != NULL && atoi(mib_env) > 0 ? atoi(mib_env) : 64) << 20;
    unsigned v = 1000; /* a pattern of its own */
    char key[64], d[256], why[512], *buf;
    const char *argv[2] = {"GET", key};
    rcp_reply *r;
    rcp_cluster *h;
    vcheck chk;
    struct sget *s;
    long long at;
    int rc;

    h = rcpc_open_default(&cl);
    buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    snprintf(key, sizeof key, "lv:big:%zu", len);
    set_pattern(h, key, v, len, buf);
    free(buf); /* from here on the pattern function is the reference */
    if (broken("missing"))
        snprintf(key, sizeof key, "lv:big:never-set");

    /* Plain: the whole value in one reply. */
    r = rcp_cluster_command_argv(h, 2, argv, NULL);
    ck_assert_msg(r->type == RCP_REPLY_STRING && r->len == len, "plain GET %s: %s (want %zu bytes)",
                  key, rcptest_describe(r, d, sizeof d), len);
    at = mismatch(broken("pattern") ? v + 1 : v, r->str, r->len, 0);
    ck_assert_msg(at < 0, "plain GET %s: byte %lld differs", key, at);
    rcp_reply_free(r);

    /* Streamed, sync. */
    vcheck_init(&chk, v, len);
    r = rcp_cluster_command_argv_sink(h, 2, argv, NULL, &chk.sink);
    ck_assert_msg(vcheck_done(&chk, r, why, sizeof why) == NULL, "streamed sync GET %s: %s", key,
                  why);
    fprintf(stderr, "largevalues: %zu MiB streamed in %ld chunks\n", len >> 20, chk.chunks);
    rcp_reply_free(r);

    /* Streamed, async. */
    s = sget_new();
    vcheck_init(&s->v, v, len);
    r = sget_call(h, s, key, &rc);
    ck_assert_msg(r != NULL, "streamed async GET %s: %d (%s)", key, rc,
                  rc >= 0 ? rcp_strerror(rc) : "not resolved in time");
    ck_assert_msg(vcheck_done(&s->v, r, why, sizeof why) == NULL, "streamed async GET %s: %s", key,
                  why);
    rcp_reply_free(r);
    pthread_mutex_lock(&s->m);
    ck_assert_int_eq(s->resolves, 1);
    pthread_mutex_unlock(&s->m);
    pthread_mutex_destroy(&s->m);
    pthread_cond_destroy(&s->cv);
    free(s);

    /* Streamed the other way: a SET of the same size from a source (a
     * sync call: on an idle bulk connection the caller's own thread
     * uploads it), read back streamed. */
    {
        const char *set[2] = {"SET", key};
        unsigned w = v + 1;
        rcp_source src;
        memset(&src, 0, sizeof src);
        src.kind = RCP_SOURCE_CALLBACK;
        src.len = len;
        src.fn = pattern_source;
        src.ud = &w;
        src.flags = RCP_SOURCE_REPLAYABLE;
        snprintf(key, sizeof key, "lv:big-src:%zu", len);
        r = rcp_cluster_command_argv_source(h, 2, set, NULL, &src);
        ck_assert_msg(rcpc_is_status(r, "OK"), "streamed SET %s: %s", key,
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        argv[0] = "GET";
        vcheck_init(&chk, w, len);
        r = rcp_cluster_command_argv_sink(h, 2, argv, NULL, &chk.sink);
        ck_assert_msg(vcheck_done(&chk, r, why, sizeof why) == NULL, "streamed GET %s: %s", key,
                      why);
        rcp_reply_free(r);
        argv[0] = "UNLINK";
        r = rcp_cluster_command_argv(h, 2, argv, NULL);
        ck_assert_msg(rcptest_is_int(r, 1), "UNLINK %s: %s", key, rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }

    /* Not left for a later reshard: MIGRATE of a 64 MiB key blocks both
     * nodes longer than cluster-node-timeout (1000 ms) on this machine,
     * which then marks one failed and the reshard stops at CLUSTERDOWN
     * (seen here, 2026-12-03). */
    snprintf(key, sizeof key, "lv:big:%zu", len);
    argv[0] = "UNLINK";
    r = rcp_cluster_command_argv(h, 2, argv, NULL);
    ck_assert_msg(rcptest_is_int(r, 1), "UNLINK %s: %s", key, rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    rcp_cluster_close(h);
}
END_TEST

static void add_tests(TCase *tc)
{
    /* The reshard first: a 64 MiB key left behind by a failed
     * test_value_64mib would stop its reshard (see there). */
    RCPTEST_ADD(tc, test_streamed_get_and_cancel_during_reshard, test_value_64mib);
}

int main(void)
{
    static const char *const extra[] = {"--cluster-allow-replica-migration", "no",
                                        "--proto-max-bulk-len", "1gb", NULL};
    return rcpc_main(&cl, "largevalues", 3, 1, extra, 240, add_tests);
}
