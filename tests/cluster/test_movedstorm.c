/* test_movedstorm.c: slots moved behind the client's back, then 32
 * threads hit exactly those slots at once.
 *
 * The handle's periodic refresh is off (a long interval), so its map is
 * stale when the storm starts and thousands of requests meet MOVED at
 * once. Forced refreshes must be coalesced and rate-limited: at most about
 * ten a second (min_refresh_gap_ms 100) over the storm, plus a few; every
 * request succeeds. Twice: after redis-cli --cluster reshard (2000 slots),
 * and after a move done by hand with CLUSTER SETSLOT (IMPORTING, MIGRATING,
 * NODE on every master: no ASK phase, straight to MOVED). */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NTHREADS 32
#define ROUNDS 40 /* per thread; each round: a burst of BURST async SETs, then sync GETs */
#define BURST 4
#define RESHARD_SLOTS 2000
#define SETSLOT_SLOTS 300

static rcpc_cluster cl;
static rcp_cluster *h;
static pthread_barrier_t barrier;
static rcpc_problem prob = RCPC_PROBLEM_INIT;
static unsigned moved_slots[RCPC_SLOTS];
static int nmoved;
static atomic_long done, failed;
static int storm_no;
static atomic_int continuous; /* 1: run until stop_flag, not ROUNDS */
static atomic_int stop_flag;

struct burst {
    rcp_future f[BURST];
    rcp_reply *r[BURST];
    pthread_mutex_t m;
    pthread_cond_t cv;
    int resolved;
};

static void on_burst(rcp_future *f, rcp_reply *reply)
{
    struct burst *b = f->data;
    rcp_reply *k = rcp_reply_keep(reply);
    int i = (int)(f - b->f);

    pthread_mutex_lock(&b->m);
    b->r[i] = k;
    b->resolved++;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->m);
}

static void *storm_main(void *arg)
{
    long id = (long)arg;
    struct burst b;
    int round, i;

    memset(&b, 0, sizeof b);
    pthread_mutex_init(&b.m, NULL);
    pthread_cond_init(&b.cv, NULL);
    pthread_barrier_wait(&barrier);
    for (round = 0; atomic_load(&continuous) ? !atomic_load(&stop_flag) : round < ROUNDS;
         round++) {
        char keys[BURST][48], vals[BURST][32], d[256];
        int sent = 0;
        b.resolved = 0;
        for (i = 0; i < BURST; i++) {
            unsigned slot = moved_slots[(unsigned)(id * 131 + round * BURST + i) % (unsigned)nmoved];
            const char *argv[3];
            int rc;
            snprintf(keys[i], sizeof keys[i], "%sms:%d:%ld", rcpc_slot_tag(slot), storm_no, id);
            snprintf(vals[i], sizeof vals[i], "%d.%d", round, i);
            argv[0] = "SET";
            argv[1] = keys[i];
            argv[2] = vals[i];
            b.f[i].resolve = on_burst;
            b.f[i].data = &b;
            b.r[i] = NULL;
            rc = rcp_cluster_send_argv(h, &b.f[i], 3, argv, NULL);
            if (rc != RCP_OK) {
                atomic_fetch_add(&failed, 1);
                rcpc_problem_note(&prob, "send SET %s: %s", keys[i], rcp_strerror(rc));
                continue;
            }
            sent++;
        }
        pthread_mutex_lock(&b.m);
        while (b.resolved < sent)
            pthread_cond_wait(&b.cv, &b.m);
        pthread_mutex_unlock(&b.m);
        for (i = 0; i < BURST; i++) {
            rcp_reply *r;
            if (b.r[i] == NULL)
                continue;
            atomic_fetch_add(&done, 1);
            if (!rcpc_is_status(b.r[i], "OK")) {
                atomic_fetch_add(&failed, 1);
                rcpc_problem_note(&prob, "SET %s: %s", keys[i],
                                  rcptest_describe(b.r[i], d, sizeof d));
            }
            rcp_reply_free(b.r[i]);
            b.r[i] = NULL;
            r = rcp_cluster_command(h, "GET %s", keys[i]);
            atomic_fetch_add(&done, 1);
            if (!rcpc_is_string(r, vals[i])) {
                atomic_fetch_add(&failed, 1);
                rcpc_problem_note(&prob, "GET %s: expected %s, got %s", keys[i], vals[i],
                                  rcptest_describe(r, d, sizeof d));
            }
            rcp_reply_free(r);
        }
    }
    pthread_mutex_destroy(&b.m);
    pthread_cond_destroy(&b.cv);
    return NULL;
}

/* Slots owned by from_port in a and by to_port in b. */
static int collect_moved(const rcpc_topo *a, const rcpc_topo *b, int from_port, int to_port)
{
    int fa = rcpc_find_port(a, from_port);
    int tb = rcpc_find_port(b, to_port);
    unsigned s;

    nmoved = 0;
    if (fa < 0 || tb < 0)
        return 0;
    for (s = 0; s < RCPC_SLOTS; s++)
        if (rcpc_has_slot(&a->node[fa], s) && rcpc_has_slot(&b->node[tb], s))
            moved_slots[nmoved++] = s;
    return nmoved;
}

/* The storm; with job, the threads go on until that background job (a
 * reshard moving the same slots) has ended. */
static void storm(const char *what, rcpc_job *job)
{
    pthread_t th[NTHREADS];
    rcp_cluster_stats a, b;
    int64_t t0, elapsed;
    uint64_t forced, allowed;
    long i;

    storm_no++;
    atomic_store(&continuous, job != NULL);
    atomic_store(&stop_flag, 0);
    atomic_store(&done, 0);
    atomic_store(&failed, 0);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &a), RCP_OK);
    pthread_barrier_init(&barrier, NULL, NTHREADS + 1);
    for (i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, storm_main, (void *)i), 0);
    pthread_barrier_wait(&barrier);
    t0 = rcptest_now_ms();
    if (job != NULL) {
        int64_t t_end;
        while (!rcpc_job_poll(job) && rcptest_now_ms() - t0 < rcptest_scale(120) * 1000)
            rcptest_sleep_ms(20);
        /* redis-cli may move the slots only in the last moments of its run
         * (a slow, sanitized client can send few requests by then): keep the
         * storm going until a redirect has been met, bounded. The map is
         * stale for the moved slots until one is met, so it will be. */
        t_end = rcptest_now_ms();
        for (;;) {
            rcp_cluster_stats mid;
            ck_assert_int_eq(rcp_cluster_get_stats(h, &mid), RCP_OK);
            if (mid.moved + mid.ask > a.moved + a.ask ||
                rcptest_now_ms() - t_end > rcptest_scale(5000))
                break;
            rcptest_sleep_ms(20);
        }
        atomic_store(&stop_flag, 1);
    }
    for (i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    elapsed = rcptest_now_ms() - t0;
    if (job != NULL) {
        char err[4096];
        ck_assert_msg(rcpc_job_join(job, 1000, err, sizeof err) == 0, "%s", err);
    }
    pthread_barrier_destroy(&barrier);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &b), RCP_OK);
    forced = b.refreshes_forced - a.refreshes_forced;
    allowed = (uint64_t)elapsed / 100 + 4;
    fprintf(stderr,
            "%s: %d slots, %ld requests in %lld ms, %ld failed; moved %llu ask %llu; "
            "refreshes forced %llu (allowed %llu) periodic %llu failures %llu\n",
            what, nmoved, atomic_load(&done), (long long)elapsed, atomic_load(&failed),
            (unsigned long long)(b.moved - a.moved), (unsigned long long)(b.ask - a.ask),
            (unsigned long long)forced, (unsigned long long)allowed,
            (unsigned long long)(b.refreshes_periodic - a.refreshes_periodic),
            (unsigned long long)(b.refresh_failures - a.refresh_failures));
    ck_assert_msg(atomic_load(&failed) == 0, "%s: %ld of %ld requests failed; first: %s", what,
                  atomic_load(&failed), atomic_load(&done), prob.first);
    ck_assert_msg(b.moved - a.moved + b.ask - a.ask > 0,
                  "%s: no MOVED or ASK seen: the map was not stale?", what);
    ck_assert_msg(forced <= allowed, "%s: %llu forced refreshes in %lld ms (at most %llu)", what,
                  (unsigned long long)forced, (long long)elapsed, (unsigned long long)allowed);
}

/* Moves empty slots from src to dst by hand, the way redis-cli does for a
 * slot without keys. */
static void setslot_move(const rcpc_topo *t, int src, int dst, int count)
{
    int si = rcpc_find_port(t, src), di = rcpc_find_port(t, dst);
    redisContext *cs, *cd;
    unsigned s;
    int i;

    ck_assert(si >= 0 && di >= 0);
    cs = rcpc_connect(src);
    cd = rcpc_connect(dst);
    ck_assert(cs != NULL && cd != NULL);
    nmoved = 0;
    for (s = 0; s < RCPC_SLOTS && nmoved < count; s++) {
        redisReply *r;
        if (!rcpc_has_slot(&t->node[si], s))
            continue;
        r = redisCommand(cs, "CLUSTER COUNTKEYSINSLOT %u", s);
        ck_assert(r != NULL && r->type == REDIS_REPLY_INTEGER);
        if (r->integer == 0)
            moved_slots[nmoved++] = s;
        freeReplyObject(r);
    }
    ck_assert_int_eq(nmoved, count);
    for (i = 0; i < nmoved; i++) {
        redisReply *r;
        s = moved_slots[i];
        r = redisCommand(cd, "CLUSTER SETSLOT %u IMPORTING %s", s, t->node[si].id);
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_STATUS, "IMPORTING %u: %s", s,
                      r ? r->str : "no reply");
        freeReplyObject(r);
        r = redisCommand(cs, "CLUSTER SETSLOT %u MIGRATING %s", s, t->node[di].id);
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_STATUS, "MIGRATING %u: %s", s,
                      r ? r->str : "no reply");
        freeReplyObject(r);
        r = redisCommand(cd, "CLUSTER SETSLOT %u NODE %s", s, t->node[di].id);
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_STATUS, "NODE on dst %u: %s", s,
                      r ? r->str : "no reply");
        freeReplyObject(r);
        r = redisCommand(cs, "CLUSTER SETSLOT %u NODE %s", s, t->node[di].id);
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_STATUS, "NODE on src %u: %s", s,
                      r ? r->str : "no reply");
        freeReplyObject(r);
    }
    redisFree(cs);
    redisFree(cd);
    /* The other masters learn it at once too (they would by gossip). */
    for (i = 0; i < t->n; i++) {
        redisContext *co;
        int k;
        if (!t->node[i].is_master || i == si || i == di)
            continue;
        co = rcpc_connect(t->node[i].port);
        ck_assert(co != NULL);
        for (k = 0; k < nmoved; k++) {
            redisReply *r = redisCommand(co, "CLUSTER SETSLOT %u NODE %s", moved_slots[k],
                                         t->node[di].id);
            ck_assert(r != NULL);
            freeReplyObject(r);
        }
        redisFree(co);
    }
}

START_TEST(test_moved_storm)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    rcpc_topo before, after;
    char err[4096];
    int a = 0, b = 0, c = 0, i;
    rcp_reply *r;

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    rcpc_options(&o, &node, cl.seed);
    o.refresh_interval_ms = 3600 * 1000; /* no periodic refresh: the map stays stale */
    h = rcpc_open(&o);
    r = rcp_cluster_command(h, "PING");
    ck_assert(rcpc_is_status(r, "PONG"));
    rcp_reply_free(r);

    ck_assert_int_eq(rcpc_topology_any(&cl, &before), 0);
    for (i = 0; i < before.n; i++) {
        if (!before.node[i].is_master)
            continue;
        if (a == 0)
            a = before.node[i].port;
        else if (b == 0)
            b = before.node[i].port;
        else
            c = before.node[i].port;
    }
    ck_assert(a && b && c);

    /* 1: redis-cli reshard, a -> b. */
    ck_assert_msg(rcpc_reshard(&cl, a, b, RESHARD_SLOTS, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rcpc_topology(b, &after), 0);
    ck_assert_int_eq(collect_moved(&before, &after, a, b), RESHARD_SLOTS);
    storm("storm after reshard", NULL);

    /* 2: CLUSTER SETSLOT by hand, b -> c, slots b had from the start. */
    ck_assert_int_eq(rcpc_topology(b, &before), 0);
    {
        rcpc_topo orig = before;
        int bi = rcpc_find_port(&orig, b);
        unsigned s;
        /* Only b's original slots: they hold no keys. */
        for (s = 0; s < RCPC_SLOTS; s++)
            if (rcpc_has_slot(&orig.node[bi], s)) {
                int k;
                for (k = 0; k < RESHARD_SLOTS; k++)
                    if (moved_slots[k] == s)
                        break;
                if (k < RESHARD_SLOTS) {
                    orig.node[bi].slots[s / 8] &= (unsigned char)~(1u << (s % 8));
                    orig.node[bi].nslots--;
                }
            }
        setslot_move(&orig, b, c, SETSLOT_SLOTS);
    }
    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    storm("storm after SETSLOT", NULL);

    /* 3: the storm goes on while a reshard moves the first 2000 slots
     * back (b -> a): MOVED and ASK for seconds, refreshes still capped. */
    {
        char fb[16], ta[16], n[16];
        const char *args[] = {fb, ta, n, NULL};
        rcpc_job job;
        snprintf(fb, sizeof fb, "%d", b);
        snprintf(ta, sizeof ta, "%d", a);
        snprintf(n, sizeof n, "%d", RESHARD_SLOTS);
        ck_assert_int_eq(rcpc_topology(b, &before), 0);
        ck_assert_int_eq(rcpc_job_start(&job, &cl, "reshard", args), 0);
        /* Which slots move is redis-cli's choice: the storm aims at all of
         * b's slots. */
        {
            int bi = rcpc_find_port(&before, b);
            unsigned s;
            nmoved = 0;
            for (s = 0; s < RCPC_SLOTS; s++)
                if (rcpc_has_slot(&before.node[bi], s))
                    moved_slots[nmoved++] = s;
        }
        storm("storm during reshard", &job);
    }

    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_moved_storm);
}

int main(void)
{
    return rcpc_main(&cl, "movedstorm", 3, 1, NULL, 200, add_tests);
}
