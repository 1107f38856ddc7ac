/* The futex halves of lock.h: sleeping and waking. */
#include "lock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* How many times a locker looks at a taken mutex before it sleeps: about
 * glibc's default for PTHREAD_MUTEX_ADAPTIVE_NP (100 tries). */
#define SPIN_TRIES 100

int rcp__futex_wait(_Atomic unsigned *addr, unsigned val, const struct timespec *until)
{
    /* WAIT_BITSET takes an absolute time on CLOCK_MONOTONIC. */
    if (syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_BITSET_PRIVATE, val, until, NULL,
                FUTEX_BITSET_MATCH_ANY) < 0 &&
        errno == ETIMEDOUT)
        return ETIMEDOUT;
    return 0;
}

void rcp__futex_wake(_Atomic unsigned *addr, int n)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void rcp__mutex_lock_slow(rcp__mutex *m)
{
    unsigned c;
    for (int i = 0; i < SPIN_TRIES; i++) {
        unsigned free_ = 0;
        if (atomic_load_explicit(&m->v, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&m->v, &free_, 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
        cpu_relax();
    }
    /* Sleep, marking the mutex waited for: its unlocker then wakes one. */
    c = atomic_exchange_explicit(&m->v, 2, memory_order_acquire);
    while (c != 0) {
        rcp__futex_wait(&m->v, 2, NULL);
        c = atomic_exchange_explicit(&m->v, 2, memory_order_acquire);
    }
}

void rcp__mutex_wake(rcp__mutex *m)
{
    rcp__futex_wake(&m->v, 1);
}

int rcp__cond_wait(rcp__cond *cv, rcp__mutex *m, const struct timespec *until)
{
    unsigned seq = atomic_load_explicit(&cv->seq, memory_order_relaxed);
    int rv;
    atomic_fetch_add_explicit(&cv->waiters, 1, memory_order_relaxed);
    rcp__mutex_unlock(m);
    rv = rcp__futex_wait(&cv->seq, seq, until);
    atomic_fetch_sub_explicit(&cv->waiters, 1, memory_order_relaxed);
    rcp__mutex_lock(m);
    return rv;
}

void rcp__cond_broadcast(rcp__cond *cv)
{
    if (atomic_load_explicit(&cv->waiters, memory_order_relaxed) == 0)
        return;
    atomic_fetch_add_explicit(&cv->seq, 1, memory_order_relaxed);
    rcp__futex_wake(&cv->seq, INT_MAX);
}
