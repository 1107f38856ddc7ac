/* lib/clock.h: monotonic time in nanoseconds, and condition variables that
 * wait on that clock. */
#ifndef RCP_CLOCK_H
#define RCP_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t rcp__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A condition variable whose timed waits are on CLOCK_MONOTONIC (the
 * clock of rcp__now_ns), so a deadline is not moved by a change of the
 * wall clock. */
static inline void rcp__cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* Waits on cv (made by rcp__cond_init_monotonic) until signalled or until
 * `until` (ns, rcp__now_ns's clock); until 0: no limit. */
static inline int rcp__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t until)
{
    struct timespec ts;
    if (!until)
        return pthread_cond_wait(cv, mu);
    ts.tv_sec = (time_t)(until / 1000000000ull);
    ts.tv_nsec = (long)(until % 1000000000ull);
    return pthread_cond_timedwait(cv, mu, &ts);
}

#endif
