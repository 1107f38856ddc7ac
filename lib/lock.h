/* A connection's mutex and condition variables, on futexes.
 *
 * Every request takes its connection's mutex once (the enqueue) and every
 * loop pass a few times; uncontended, glibc's adaptive mutex costs 67
 * instructions a lock/unlock pair through the PLT, this one an inline
 * compare-and-swap and an exchange. Under contention it spins about as
 * long as PTHREAD_MUTEX_ADAPTIVE_NP does (critical sections are a few
 * hundred ns), then sleeps on the futex (Drepper, "Futexes Are Tricky",
 * mutex 3: 0 free, 1 locked, 2 locked and maybe waited for).
 *
 * The condition variable is a sequence number waited on with a futex:
 * rcp__cond_wait reads it with the mutex held, so a broadcast made after
 * the predicate changed under the mutex always finds the waiter counted
 * and moves the number it sleeps on (no lost wake-up). As with
 * pthread_cond_wait, a wait may return early: callers loop on their
 * predicate. Deadlines are CLOCK_MONOTONIC, like rcp__now_ns. */
#ifndef RCP_LOCK_H
#define RCP_LOCK_H

#include <stdatomic.h>
#include <time.h>

typedef struct rcp__mutex {
    _Atomic unsigned v;
} rcp__mutex;

typedef struct rcp__cond {
    _Atomic unsigned seq;
    _Atomic int waiters;
} rcp__cond;

/* The futex calls, for this file and the sync futures (conn_fast.c).
 * wait: sleeps while *addr == val, until woken (or early: callers
 * re-check), or until `until` (absolute CLOCK_MONOTONIC; NULL: none);
 * 0, or ETIMEDOUT once it has passed. wake: wakes up to n sleepers. */
int rcp__futex_wait(_Atomic unsigned *addr, unsigned val, const struct timespec *until);
void rcp__futex_wake(_Atomic unsigned *addr, int n);

void rcp__mutex_lock_slow(rcp__mutex *m);
void rcp__mutex_wake(rcp__mutex *m);

static inline void rcp__mutex_init(rcp__mutex *m)
{
    atomic_init(&m->v, 0);
}

static inline void rcp__mutex_lock(rcp__mutex *m)
{
    unsigned free_ = 0;
    if (__builtin_expect(atomic_compare_exchange_strong_explicit(&m->v, &free_, 1,
                                                                 memory_order_acquire,
                                                                 memory_order_relaxed),
                         1))
        return;
    rcp__mutex_lock_slow(m);
}

static inline void rcp__mutex_unlock(rcp__mutex *m)
{
    if (__builtin_expect(atomic_exchange_explicit(&m->v, 0, memory_order_release) == 2, 0))
        rcp__mutex_wake(m);
}

static inline void rcp__cond_init(rcp__cond *cv)
{
    atomic_init(&cv->seq, 0);
    atomic_init(&cv->waiters, 0);
}

/* m held. Returns 0 when woken (or early), ETIMEDOUT once `until` (an
 * absolute CLOCK_MONOTONIC time; NULL: none) has passed; m held again. */
int rcp__cond_wait(rcp__cond *cv, rcp__mutex *m, const struct timespec *until);

/* Wakes every waiter; nothing to do (no system call) when none waits. */
void rcp__cond_broadcast(rcp__cond *cv);

#endif
