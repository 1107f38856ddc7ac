/* test_allocs.c: what a request costs the allocator in steady state.
 *
 * The library's allocations go through rcp_set_allocator hooks that count
 * them. After a warm-up (the handle's free list of wrapped futures and the
 * I/O thread's cache of small replies fill up), async GETs and SETs through
 * the cluster handle must make no allocation at all, and synchronous argv
 * calls at most one per request (the reply, when the I/O thread parses it
 * for a waiting caller). "No allocation" is checked as "at most INFLIGHT
 * in 40,000 requests": the caches may still grow to the in-flight count. The periodic refresh is pushed out of the way: a
 * CLUSTER SLOTS reply and a new map are allocations, but not per request.
 * hiredis's reader buffer is not counted: hiredis 0.14 allocates with the
 * C library directly (it is grown, not reallocated per reply). */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "rcpipe.h"

#define INFLIGHT 64
#define NKEYS 500

static rcpc_cluster cl;
static atomic_ulong n_allocs;

static void *count_malloc(size_t n)
{
    atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return malloc(n);
}

static void *count_calloc(size_t n, size_t s)
{
    atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return calloc(n, s);
}

static void *count_realloc(void *p, size_t n)
{
    atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
    return realloc(p, n);
}

typedef struct slot {
    rcp_future f;
    atomic_int busy;
} slot;

static slot slots[INFLIGHT];
static atomic_long resolved, failed;

static void on_reply(rcp_future *f, rcp_reply *r)
{
    slot *s = f->data;
    if (!r || r->type == RCP_REPLY_ERROR)
        atomic_fetch_add(&failed, 1);
    atomic_fetch_add(&resolved, 1);
    atomic_store_explicit(&s->busy, 0, memory_order_release);
}

/* n async requests, at most INFLIGHT at a time; returns when all are
 * resolved (bounded: 60 s scaled). */
static void run_async(rcp_cluster *h, const char *cmd, long n)
{
    long sent = 0, start = atomic_load(&resolved);
    char key[32];
    int spins = 0;
    while (sent < n) {
        int i = (int)(sent % INFLIGHT);
        const char *argv[3] = {cmd, key, "v"};
        if (atomic_load_explicit(&slots[i].busy, memory_order_acquire)) {
            if (++spins > 1000) {
                usleep(50);
                spins = 0;
            }
            continue;
        }
        snprintf(key, sizeof key, "al:%ld", sent % NKEYS);
        slots[i].f.resolve = on_reply;
        slots[i].f.data = &slots[i];
        atomic_store(&slots[i].busy, 1);
        ck_assert_int_eq(rcp_cluster_send_argv(h, &slots[i].f, cmd[0] == 'S' ? 3 : 2, argv, NULL),
                         RCP_OK);
        sent++;
    }
    for (int w = 0; atomic_load(&resolved) - start < n; w++) {
        ck_assert_msg(w < rcptest_scale(60) * 1000, "async requests not resolved in time");
        usleep(1000);
    }
}

static rcp_cluster *open_quiet(void)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    rcpc_options(&o, &node, cl.seed);
    o.refresh_interval_ms = 3600 * 1000; /* no periodic refresh in the measured phases */
    return rcpc_open(&o);
}

START_TEST(test_async_steady_state)
{
    rcp_cluster *h = open_quiet();
    unsigned long before, after;

    run_async(h, "SET", 4000); /* warm-up, and every key exists */
    run_async(h, "GET", 4000);
    before = atomic_load(&n_allocs);
    run_async(h, "GET", 20000);
    run_async(h, "SET", 20000);
    after = atomic_load(&n_allocs);
    ck_assert_int_eq(atomic_load(&failed), 0);
    /* Not exactly 0: a read that parses more replies at once than the
     * I/O thread's cache has seen so far allocates the difference once, and
     * the library's own health PINGs run meanwhile. Both are bounded by the
     * in-flight count, not by the number of requests (one allocation per
     * request would be 40,000 here). */
    ck_assert_msg(after - before <= INFLIGHT,
                  "%lu allocations in 40000 async requests after warm-up (want 0 per request, "
                  "at most %d in all)", after - before, INFLIGHT);
    rcp_cluster_close(h);
}
END_TEST

START_TEST(test_sync_at_most_one)
{
    rcp_cluster *h = open_quiet();
    unsigned long before, after;
    char key[32];
    const int n = 5000;

    for (int round = 0; round < 2; round++) {
        before = atomic_load(&n_allocs);
        for (int i = 0; i < n; i++) {
            const char *argv[2] = {"GET", key};
            rcp_reply *r;
            snprintf(key, sizeof key, "al:%d", i % NKEYS);
            r = rcp_cluster_command_argv(h, 2, argv, NULL);
            ck_assert_msg(r && r->type != RCP_REPLY_ERROR, "GET %s failed", key);
            rcp_reply_free(r);
        }
        after = atomic_load(&n_allocs);
    }
    /* The last round only: the first pays for connections and caches. */
    ck_assert_msg(after - before <= (unsigned long)n,
                  "%lu allocations in %d sync GETs (want at most one each)", after - before, n);
    rcp_cluster_close(h);
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_async_steady_state, test_sync_at_most_one);
}

int main(void)
{
    rcp_allocator a = {count_malloc, count_calloc, count_realloc, free};
    if (rcp_set_allocator(&a) != RCP_OK) {
        fprintf(stderr, "rcp_set_allocator failed\n");
        return 1;
    }
    return rcpc_main(&cl, "allocs", 3, 0, NULL, 120, add_tests);
}
