/* lib/waitgroup.c: waiting for a group of async requests (rcpipe/common.h):
 * a counter the caller raises before each send and each resolve callback
 * lowers, and a wait until it is back to zero. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "alloc.h"
#include "clock.h"
#include "loop.h"
#include "rcpipe/common.h"

struct rcp_waitgroup {
    atomic_long count;
    atomic_int signalling; /* wg_change calls between their count change and their
                            * unlock: the group is still touched, not to be freed */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
};

rcp_waitgroup *rcp_waitgroup_new(void)
{
    rcp_waitgroup *wg = rcp__calloc(1, sizeof(*wg));
    if (!wg)
        return NULL;
    atomic_init(&wg->count, 0);
    atomic_init(&wg->signalling, 0);
    pthread_mutex_init(&wg->mu, NULL);
    rcp__cond_init_monotonic(&wg->cv);
    return wg;
}

void rcp_waitgroup_free(rcp_waitgroup *wg)
{
    if (!wg)
        return;
    pthread_cond_destroy(&wg->cv);
    pthread_mutex_destroy(&wg->mu);
    rcp__free(wg);
}

/* The count may dip below zero for a moment (a callback that ran before
 * its add); only reaching zero wakes the waiters. */
static void wg_change(rcp_waitgroup *wg, long n)
{
    /* Announced before the count moves: a waiter that sees the count at
     * zero also sees this, and does not return (and let its caller free
     * the group) until the broadcast below has let go of the mutex. */
    atomic_fetch_add(&wg->signalling, 1);
    if (atomic_fetch_add(&wg->count, n) + n == 0) {
        pthread_mutex_lock(&wg->mu);
        pthread_cond_broadcast(&wg->cv);
        pthread_mutex_unlock(&wg->mu);
    }
    atomic_fetch_sub_explicit(&wg->signalling, 1, memory_order_release);
}

/* The count is zero: wait out the wg_change calls still inside (a lock,
 * a broadcast and an unlock), so that the group may be freed on return. */
static void wg_settle(rcp_waitgroup *wg)
{
    while (atomic_load_explicit(&wg->signalling, memory_order_acquire) != 0)
        sched_yield();
}

void rcp_waitgroup_add(rcp_waitgroup *wg, int n)
{
    if (wg && n)
        wg_change(wg, n);
}

void rcp_waitgroup_done(rcp_waitgroup *wg)
{
    if (wg)
        wg_change(wg, -1);
}

long rcp_waitgroup_pending(const rcp_waitgroup *wg)
{
    return wg ? atomic_load(&((rcp_waitgroup *)wg)->count) : 0;
}

int rcp_waitgroup_wait(rcp_waitgroup *wg, int timeout_ms)
{
    uint64_t until;
    int rv = RCP_OK;
    if (!wg)
        return RCP_ERR_INVALID;
    if (atomic_load(&wg->count) == 0) {
        wg_settle(wg);
        return RCP_OK;
    }
    /* On an I/O thread the callbacks we wait for could never run. */
    if (rcp__loop_on_thread())
        return RCP_ERR_INVALID;
    until = timeout_ms > 0 ? rcp__now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
    pthread_mutex_lock(&wg->mu);
    while (atomic_load(&wg->count) != 0) {
        if (timeout_ms == 0 || (until && rcp__now_ns() >= until)) {
            rv = RCP_ERR_TIMEOUT;
            break;
        }
        rcp__cond_wait_until(&wg->cv, &wg->mu, until);
    }
    pthread_mutex_unlock(&wg->mu);
    if (rv == RCP_OK)
        wg_settle(wg);
    return rv;
}
