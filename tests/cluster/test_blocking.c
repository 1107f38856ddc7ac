/* test_blocking.c: blocking commands on dedicated connections.
 *
 * 16 threads do GET/SET on one node while BLPOP waits (up to 5 s) on a list
 * of the same node: the normal traffic never waits behind it (its slowest
 * request stays far below the BLPOP's wait; p99 with and without the BLPOP
 * printed) and the BLPOP gets the value pushed meanwhile. BLPOP times out
 * with nil; XREAD BLOCK gets an entry added later; WAIT answers; more
 * blocking calls than the pool holds wait for a connection and all
 * complete; the async API works; after every slot of the list's master
 * moved away (a stale map on purpose), the BLPOP follows MOVED. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "rcpipe.h"

#define NLOAD 16
#define MAXLAT 200000

static rcpc_cluster cl;
static rcp_cluster *h;
static atomic_int stop_flag;
static atomic_long load_bad;

struct lat {
    pthread_t th;
    int id;
    long n;
    int64_t *us;
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *load_main(void *arg)
{
    struct lat *l = arg;
    while (!atomic_load(&stop_flag) && l->n < MAXLAT) {
        int64_t t0 = now_us();
        rcp_reply *r = l->n % 2 ? rcp_cluster_command(h, "SET {b}k%d %ld", l->id, l->n)
                                : rcp_cluster_command(h, "GET {b}k%d", l->id);
        if (r->type == RCP_REPLY_ERROR)
            atomic_fetch_add(&load_bad, 1);
        rcp_reply_free(r);
        l->us[l->n++] = now_us() - t0;
    }
    return NULL;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Runs the load for ms; returns p99 and max (µs). */
static void run_load(int ms, int64_t *p99, int64_t *max)
{
    static struct lat l[NLOAD];
    int64_t *all;
    long total = 0, k = 0;
    int i;

    atomic_store(&stop_flag, 0);
    for (i = 0; i < NLOAD; i++) {
        l[i].id = i;
        l[i].n = 0;
        l[i].us = malloc(MAXLAT * sizeof(int64_t));
        ck_assert_ptr_nonnull(l[i].us);
        ck_assert_int_eq(pthread_create(&l[i].th, NULL, load_main, &l[i]), 0);
    }
    rcptest_sleep_ms(ms);
    atomic_store(&stop_flag, 1);
    for (i = 0; i < NLOAD; i++) {
        pthread_join(l[i].th, NULL);
        total += l[i].n;
    }
    all = malloc((size_t)total * sizeof(int64_t));
    ck_assert_ptr_nonnull(all);
    for (i = 0; i < NLOAD; i++) {
        memcpy(all + k, l[i].us, (size_t)l[i].n * sizeof(int64_t));
        k += l[i].n;
        free(l[i].us);
    }
    qsort(all, (size_t)total, sizeof(int64_t), cmp64);
    *p99 = all[(total * 99) / 100];
    *max = all[total - 1];
    free(all);
}

struct bl {
    pthread_t th;
    const char *cmd;
    rcp_reply *r;
    int64_t took_ms;
    int64_t cpu_ms; /* the calling thread's CPU time during the call */
};

static int64_t thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *blpop_main(void *arg)
{
    struct bl *b = arg;
    int64_t t0 = rcptest_now_ms(), c0 = thread_cpu_ms();
    b->r = rcp_cluster_command(h, b->cmd);
    b->took_ms = rcptest_now_ms() - t0;
    b->cpu_ms = thread_cpu_ms() - c0;
    return NULL;
}

START_TEST(test_shared_pipeline_unaffected)
{
    struct bl b = {0};
    int64_t p99_without, max_without, p99_with, max_with;
    char d[512];

    h = rcpc_open_default(&cl);
    rcp_reply_free(rcp_cluster_command(h, "DEL {b}list"));
    run_load(1500, &p99_without, &max_without);

    b.cmd = "BLPOP {b}list 5";
    ck_assert_int_eq(pthread_create(&b.th, NULL, blpop_main, &b), 0);
    rcptest_sleep_ms(200);
    run_load(1500, &p99_with, &max_with);
    {
        rcp_reply *r = rcp_cluster_command(h, "RPUSH {b}list hello");
        ck_assert_msg(rcptest_is_int(r, 1), "RPUSH: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    pthread_join(b.th, NULL);
    fprintf(stderr,
            "blocking: normal traffic p99 %lld us without a BLPOP, %lld us with one waiting "
            "(max %lld / %lld us); BLPOP answered after %lld ms\n",
            (long long)p99_without, (long long)p99_with, (long long)max_without,
            (long long)max_with, (long long)b.took_ms);
    ck_assert_int_eq(atomic_load(&load_bad), 0);
    ck_assert_msg(b.r->type == RCP_REPLY_ARRAY && b.r->elements == 2 &&
                      rcpc_is_string(b.r->element[1], "hello"),
                  "BLPOP: %s", rcptest_describe(b.r, d, sizeof d));
    rcp_reply_free(b.r);
    /* A request queued behind the BLPOP on a shared pipeline could not be
     * answered before the BLPOP was: the RPUSH comes only after the load
     * phase has ended, so it would have waited for the BLPOP's own 5 s
     * timeout, at least 5 - 0.2 - 1.5 = 3.3 s. The bound sits below that
     * and far above what a loaded VM adds to a normal request (1.5 s was
     * seen once with a second cluster test beside it). */
    ck_assert_msg(max_with < 3000000, "a normal request took %lld us while BLPOP waited",
                  (long long)max_with);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

START_TEST(test_timeout_xread_wait_pool_async)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    struct bl b[3];
    char err[4096], d[512], cmd[3][64];
    rcp_reply *r;
    int i;

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    rcpc_options(&o, &node, cl.seed);
    o.blocking_pool = 2;
    h = rcpc_open(&o);

    r = rcp_cluster_command(h, "BLPOP {e}empty 1");
    ck_assert_msg(rcptest_is_nil(r), "BLPOP timeout: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* XREAD BLOCK: the entry is added while it waits. */
    memset(b, 0, sizeof b);
    rcp_reply_free(rcp_cluster_command(h, "DEL {x}s"));
    rcp_reply_free(rcp_cluster_command(h, "XADD {x}s 1-1 f v"));
    b[0].cmd = "XREAD BLOCK 5000 STREAMS {x}s 1-1";
    ck_assert_int_eq(pthread_create(&b[0].th, NULL, blpop_main, &b[0]), 0);
    rcptest_sleep_ms(300);
    rcp_reply_free(rcp_cluster_command(h, "XADD {x}s 2-1 f w"));
    pthread_join(b[0].th, NULL);
    ck_assert_msg(b[0].r->type == RCP_REPLY_ARRAY && b[0].r->elements == 1,
                  "XREAD BLOCK: %s", rcptest_describe(b[0].r, d, sizeof d));
    rcp_reply_free(b[0].r);

    r = rcp_cluster_command(h, "WAIT 1 2000");
    ck_assert_msg(r->type == RCP_REPLY_INTEGER && r->integer >= 0, "WAIT: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* Three BLPOPs, a pool of two: the third waits for a connection. */
    for (i = 0; i < 3; i++) {
        snprintf(cmd[i], sizeof cmd[i], "BLPOP {p}l%d 5", i);
        rcp_reply_free(rcp_cluster_command(h, "DEL {p}l%d", i));
        b[i].cmd = cmd[i];
        ck_assert_int_eq(pthread_create(&b[i].th, NULL, blpop_main, &b[i]), 0);
    }
    rcptest_sleep_ms(300);
    for (i = 0; i < 3; i++)
        rcp_reply_free(rcp_cluster_command(h, "RPUSH {p}l%d v%d", i, i));
    for (i = 0; i < 3; i++) {
        char want[8];
        pthread_join(b[i].th, NULL);
        snprintf(want, sizeof want, "v%d", i);
        ck_assert_msg(b[i].r->type == RCP_REPLY_ARRAY && b[i].r->elements == 2 &&
                          rcpc_is_string(b[i].r->element[1], want),
                      "BLPOP %d: %s", i, rcptest_describe(b[i].r, d, sizeof d));
        /* Waiting (for the server, or for a connection of the pool) sleeps:
         * a wait that spun would cost about its whole 300 ms in CPU. */
        ck_assert_msg(b[i].cpu_ms < 100, "BLPOP %d used %lld ms of CPU in %lld ms", i,
                      (long long)b[i].cpu_ms, (long long)b[i].took_ms);
        rcp_reply_free(b[i].r);
    }

    /* The async API. */
    {
        const char *argv[] = {"BLPOP", "{a}l", "3"};
        int rc;
        rcp_reply_free(rcp_cluster_command(h, "RPUSH {a}l async"));
        r = rcpc_call_async(h, -1, 3, argv, NULL, &rc);
        ck_assert_int_eq(rc, RCP_OK);
        ck_assert_msg(r && r->type == RCP_REPLY_ARRAY && rcpc_is_string(r->element[1], "async"),
                      "async BLPOP: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    r = rcp_cluster_command(h, "BLPOP {a}x {b}y 1");
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_CROSS_SLOT, "cross-slot: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

START_TEST(test_follows_moved)
{
    char err[4096], d[512];
    rcp_reply *r;
    int to;

    h = rcpc_open_stale(&cl);
    ck_assert_msg(rcpc_move_owner_away(&cl, "{m}l", &to, err, sizeof err) == 0, "reshard: %s",
                  err);
    {
        redisReply *rr = rcpc_ask(to, "RPUSH {m}l moved");
        ck_assert_msg(rr && rr->type == REDIS_REPLY_INTEGER, "RPUSH on the new owner");
        freeReplyObject(rr);
    }
    r = rcp_cluster_command(h, "BLPOP {m}l 3");
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 2 &&
                      rcpc_is_string(r->element[1], "moved"),
                  "BLPOP after the slot moved: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_shared_pipeline_unaffected, test_timeout_xread_wait_pool_async,
                test_follows_moved);
}

int main(void)
{
    static const char *const extra[] = {"--cluster-allow-replica-migration", "no", NULL};
    return rcpc_main(&cl, "blocking", 3, 1, extra, 180, add_tests);
}
