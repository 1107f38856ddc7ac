/* Unit tests: rcp_waitgroup, without a server: threads standing in for
 * resolve callbacks, the count dipping below zero, the time limits. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"
#include "rcpipe.h"

#define THREADS 4
#define PER_THREAD 5000

static void *doner(void *arg)
{
    rcp_waitgroup *wg = arg;
    for (int i = 0; i < PER_THREAD; i++)
        rcp_waitgroup_done(wg);
    return NULL;
}

/* Adds first, dones from other threads: wait returns once all are done,
 * and not before (the count it left is zero). */
START_TEST(wait_for_all)
{
    rcp_waitgroup *wg = rcp_waitgroup_new();
    pthread_t th[THREADS];
    ck_assert_ptr_nonnull(wg);
    rcp_waitgroup_add(wg, THREADS * PER_THREAD);
    ck_assert_int_eq(rcp_waitgroup_pending(wg), THREADS * PER_THREAD);
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, doner, wg), 0);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, -1), RCP_OK);
    ck_assert_int_eq(rcp_waitgroup_pending(wg), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    rcp_waitgroup_free(wg);
}
END_TEST

struct late {
    rcp_waitgroup *wg;
    int ms;
};

static void *late_done(void *arg)
{
    struct late *l = arg;
    rcptest_sleep_ms(l->ms);
    rcp_waitgroup_done(l->wg);
    return NULL;
}

/* 0 polls; a limit that passes gives RCP_ERR_TIMEOUT and leaves the count;
 * a done that comes later still ends a wait without a limit. */
START_TEST(limits)
{
    rcp_waitgroup *wg = rcp_waitgroup_new();
    struct late l = {wg, 300};
    pthread_t th;
    ck_assert_ptr_nonnull(wg);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, 0), RCP_OK); /* nothing added */
    rcp_waitgroup_add(wg, 1);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, 0), RCP_ERR_TIMEOUT);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, 20), RCP_ERR_TIMEOUT);
    ck_assert_int_eq(rcp_waitgroup_pending(wg), 1);
    ck_assert_int_eq(pthread_create(&th, NULL, late_done, &l), 0);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, -1), RCP_OK);
    pthread_join(th, NULL);
    rcp_waitgroup_free(wg);
}
END_TEST

/* A callback that runs before its add (the count at -1) does not end a
 * wait early, and the add that follows brings it back to zero. */
START_TEST(done_before_add)
{
    rcp_waitgroup *wg = rcp_waitgroup_new();
    ck_assert_ptr_nonnull(wg);
    rcp_waitgroup_add(wg, 1); /* a first request, outstanding */
    rcp_waitgroup_done(wg);   /* the second's callback outran its add */
    rcp_waitgroup_done(wg);
    ck_assert_int_eq(rcp_waitgroup_pending(wg), -1);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, 0), RCP_ERR_TIMEOUT);
    rcp_waitgroup_add(wg, 1);
    ck_assert_int_eq(rcp_waitgroup_wait(wg, 0), RCP_OK);
    rcp_waitgroup_free(wg);
}
END_TEST

static _Atomic(rcp_waitgroup *) handed;
static atomic_int stop_doner;

static void *hand_doner(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_doner)) {
        rcp_waitgroup *wg = atomic_exchange(&handed, NULL);
        if (wg)
            rcp_waitgroup_done(wg);
        else
            sched_yield(); /* valgrind runs one thread at a time */
    }
    return NULL;
}

/* The pattern docs/api.md shows: free the group as soon as the wait
 * returns. The last done may still be inside the group (its broadcast)
 * when the waiter sees the count at zero; wait must not return before it
 * has let go, or the free pulls the mutex out from under it (ASan: a
 * use after free). */
START_TEST(free_after_wait)
{
    pthread_t th;
    atomic_store(&stop_doner, 0);
    ck_assert_int_eq(pthread_create(&th, NULL, hand_doner, NULL), 0);
    for (int i = 0; i < 2000; i++) {
        rcp_waitgroup *wg = rcp_waitgroup_new();
        ck_assert_ptr_nonnull(wg);
        rcp_waitgroup_add(wg, 1);
        atomic_store(&handed, wg);
        ck_assert_int_eq(rcp_waitgroup_wait(wg, -1), RCP_OK);
        rcp_waitgroup_free(wg);
    }
    atomic_store(&stop_doner, 1);
    pthread_join(th, NULL);
}
END_TEST

START_TEST(nulls)
{
    ck_assert_int_eq(rcp_waitgroup_wait(NULL, 0), RCP_ERR_INVALID);
    ck_assert_int_eq(rcp_waitgroup_pending(NULL), 0);
    rcp_waitgroup_add(NULL, 1);
    rcp_waitgroup_done(NULL);
    rcp_waitgroup_free(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("waitgroup");
    TCase *tc = rcptest_tcase(s, "core", 30);
    RCPTEST_ADD(tc, wait_for_all, limits, done_before_add, free_after_wait, nulls);
    return rcptest_run(s) ? 1 : 0;
}
