/* lib/loop.c: what every loop driver shares (see loop.h): the ready stack
 * that carries notify() from any thread to the loop's, the list of
 * attached sources and the timer pass over them, and the per-thread mark
 * behind rcp__loop_on_thread(). Nothing here waits or knows an fd: that is
 * the driver's (loop_epoll.c). */
#include <stdatomic.h>
#include <stdint.h>

#include "alloc.h"
#include "clock.h"
#include "loop.h"
#include "thread_local.h"

static RCP__THREAD_LOCAL int on_loop_thread;
RCP__THREAD_LOCAL rcp__loop *rcp__loop_here;

int rcp__loop_on_thread(void)
{
    return on_loop_thread;
}

void rcp__loop_mark_thread(rcp__loop *cur)
{
    on_loop_thread = 1;
    rcp__loop_here = cur;
}

void rcp__loop_unmark_thread(void)
{
    on_loop_thread = 0;
    rcp__loop_here = NULL;
}

void rcp__loop_free(rcp__loop *l)
{
    if (l)
        l->drv->free(l);
}

rcp__loop *rcp__loop_current(void)
{
    return rcp__loop_here;
}

void rcp__loop_base_init(rcp__loop *l, const rcp__loop_driver *drv)
{
    l->drv = drv;
    atomic_init(&l->ready, NULL);
    pthread_mutex_init(&l->mu, NULL);
    l->srcs = NULL;
    l->nsrcs = l->capsrcs = 0;
    l->batch_pass = 0;
    l->sent_here = 0;
}

void rcp__loop_base_fini(rcp__loop *l)
{
    pthread_mutex_destroy(&l->mu);
    rcp__free(l->srcs);
    l->srcs = NULL;
}

int rcp__loop_base_attach(rcp__loop *l, rcp__loop_src *s)
{
    pthread_mutex_lock(&l->mu);
    if (l->nsrcs == l->capsrcs) {
        size_t n = l->capsrcs ? l->capsrcs * 2 : 4;
        rcp__loop_src **p = rcp__realloc(l->srcs, n * sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&l->mu);
            return -1;
        }
        l->srcs = p;
        l->capsrcs = n;
    }
    l->srcs[l->nsrcs++] = s;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

void rcp__loop_base_detach(rcp__loop *l, rcp__loop_src *s)
{
    size_t i;
    pthread_mutex_lock(&l->mu);
    for (i = 0; i < l->nsrcs; i++) {
        if (l->srcs[i] == s) {
            l->srcs[i] = l->srcs[--l->nsrcs];
            break;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

int rcp__loop_push_ready(rcp__loop *l, rcp__loop_src *s)
{
    rcp__loop_src *old;
    if (atomic_exchange(&s->in_ready, 1))
        return 0; /* already queued: one stack entry per source */
    old = atomic_load(&l->ready);
    do {
        s->ready_next = old;
    } while (!atomic_compare_exchange_weak(&l->ready, &old, s));
    /* Only the push onto an empty stack wakes: a later one rides on it. */
    return old == NULL;
}

void rcp__loop_drain_ready(rcp__loop *l)
{
    rcp__loop_src *s = atomic_exchange(&l->ready, NULL);
    while (s) {
        /* Read the link first: once processed, the source may be pushed
         * again by a producer, which rewrites it. */
        rcp__loop_src *next = s->ready_next;
        atomic_store(&s->in_ready, 0);
        s->ops->process(s, 0);
        s = next;
    }
}

uint64_t rcp__loop_run_timers(rcp__loop *l)
{
    uint64_t now = rcp__now_ns(), next = UINT64_MAX;
    size_t i;
    pthread_mutex_lock(&l->mu);
    for (i = 0; i < l->nsrcs; i++) {
        rcp__loop_src *s = l->srcs[i];
        uint64_t t = s->ops->next_timer(s);
        if (t <= now)
            t = s->ops->timers(s, now);
        if (t < next)
            next = t;
    }
    pthread_mutex_unlock(&l->mu);
    return next;
}

int rcp__loop_pass_here(rcp__loop *l)
{
    return rcp__loop_run_pending(l);
}
