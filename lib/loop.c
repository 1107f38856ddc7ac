/* lib/loop.c: the I/O loop. One thread per loop waits in epoll_wait for
 * socket readiness, for an eventfd poke (some connection has a new batch),
 * or for the earliest timer of its connections (deadlines, reconnects,
 * batch pause). Connections asking for service are pushed onto a lock-free
 * stack; the eventfd is written only when the loop is asleep, so a busy loop
 * costs producers no system call at all. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "conn_int.h"
#include "loop.h"

struct rcp__loop {
    int epfd;
    int evfd;
    pthread_t thread;
    atomic_int stop;
    atomic_int sleeping;
    _Atomic(struct rcp_conn *) ready;
    atomic_ulong passes;     /* completed loop iterations */
    atomic_int exited;
    pthread_mutex_t mu; /* guards conns */
    struct rcp_conn **conns;
    size_t nconns, capconns;
};

static _Thread_local int on_loop_thread;
static _Thread_local rcp__loop *current_loop;

int rcp__loop_on_thread(void)
{
    return on_loop_thread;
}

static void drain_ready(rcp__loop *l)
{
    struct rcp_conn *c = atomic_exchange(&l->ready, NULL);
    while (c) {
        /* Read the link first: once processed, the connection may be
         * pushed again by a producer, which rewrites it. */
        struct rcp_conn *next = c->ready_next;
        atomic_store(&c->in_ready, 0);
        rcp__conn_process(c, 0);
        c = next;
    }
}

/* Runs due timers; returns the nanoseconds until the next one (0: one is
 * due already), or -1 when there is none. */
static int64_t run_timers(rcp__loop *l)
{
    uint64_t now = rcp__now_ns(), next = UINT64_MAX;
    size_t i;
    pthread_mutex_lock(&l->mu);
    for (i = 0; i < l->nconns; i++) {
        struct rcp_conn *c = l->conns[i];
        uint64_t t = rcp__conn_next_timer(c);
        if (t <= now)
            t = rcp__conn_timers(c, now);
        if (t < next)
            next = t;
    }
    pthread_mutex_unlock(&l->mu);
    if (next == UINT64_MAX)
        return -1;
    now = rcp__now_ns();
    if (next <= now)
        return 0;
    return next - now > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(next - now);
}

/* epoll_wait with a nanosecond timeout (-1: none): epoll_pwait2 where the
 * kernel has it (5.11+), so a batching pause of 20 us sleeps 20 us and not
 * a whole millisecond; else epoll_wait, rounded up to whole milliseconds. */
static int wait_events(rcp__loop *l, struct epoll_event *evs, int max, int64_t timeout_ns)
{
    static atomic_int no_pwait2;
    if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        struct timespec ts, *tp = NULL;
        int n;
        if (timeout_ns >= 0) {
            ts.tv_sec = (time_t)(timeout_ns / 1000000000);
            ts.tv_nsec = (long)(timeout_ns % 1000000000);
            tp = &ts;
        }
        n = epoll_pwait2(l->epfd, evs, max, tp, NULL);
        if (n >= 0 || errno != ENOSYS)
            return n;
        atomic_store_explicit(&no_pwait2, 1, memory_order_relaxed);
    }
    if (timeout_ns < 0)
        return epoll_wait(l->epfd, evs, max, -1);
    /* Round up so we never wake a hair before the deadline and spin. */
    return epoll_wait(l->epfd, evs, max,
                      timeout_ns / 1000000 >= INT_MAX ? INT_MAX : (int)((timeout_ns + 999999) / 1000000));
}

static void *loop_main(void *arg)
{
    rcp__loop *l = arg;
    struct epoll_event evs[64];
    on_loop_thread = 1;
    current_loop = l;
    /* Timer slack 1 ns instead of the default 50 us: a batching pause of
     * tens of microseconds must not become a hundred. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    while (!atomic_load(&l->stop)) {
        int64_t timeout;
        int n, i;
        drain_ready(l);
        timeout = run_timers(l);
        atomic_store(&l->sleeping, 1);
        if (atomic_load(&l->ready) || atomic_load(&l->stop))
            timeout = 0;
        n = wait_events(l, evs, 64, timeout);
        atomic_store(&l->sleeping, 0);
        for (i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                uint64_t v;
                if (read(l->evfd, &v, sizeof v) < 0 && errno != EAGAIN) {
                    /* nothing to do: the counter is only a doorbell */
                }
                continue;
            }
            rcp__conn_process(evs[i].data.ptr, evs[i].events);
        }
        atomic_fetch_add(&l->passes, 1);
    }
    atomic_store(&l->exited, 1);
    return NULL;
}

rcp__loop *rcp__loop_new(void)
{
    struct epoll_event ev;
    rcp__loop *l = rcp__calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->epfd < 0 || l->evfd < 0)
        goto fail;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.ptr = NULL;
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->evfd, &ev) < 0)
        goto fail;
    pthread_mutex_init(&l->mu, NULL);
    if (pthread_create(&l->thread, NULL, loop_main, l) != 0) {
        pthread_mutex_destroy(&l->mu);
        goto fail;
    }
    return l;
fail:
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->evfd >= 0)
        close(l->evfd);
    rcp__free(l);
    return NULL;
}

static void poke(rcp__loop *l)
{
    uint64_t one = 1;
    if (write(l->evfd, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is saturated, the loop is awake anyway */
    }
}

void rcp__loop_quiesce(rcp__loop *l)
{
    unsigned long target;
    if (!l || current_loop == l)
        return;
    /* Two passes: the one in progress may have started before the call. */
    target = atomic_load(&l->passes) + 2;
    while (atomic_load(&l->passes) < target && !atomic_load(&l->exited)) {
        poke(l);
        usleep(200);
    }
}

void rcp__loop_free(rcp__loop *l)
{
    if (!l)
        return;
    atomic_store(&l->stop, 1);
    poke(l);
    pthread_join(l->thread, NULL);
    close(l->epfd);
    close(l->evfd);
    pthread_mutex_destroy(&l->mu);
    rcp__free(l->conns);
    rcp__free(l);
}

int rcp__loop_attach(rcp__loop *l, struct rcp_conn *c)
{
    pthread_mutex_lock(&l->mu);
    if (l->nconns == l->capconns) {
        size_t n = l->capconns ? l->capconns * 2 : 4;
        struct rcp_conn **p = rcp__realloc(l->conns, n * sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&l->mu);
            return -1;
        }
        l->conns = p;
        l->capconns = n;
    }
    l->conns[l->nconns++] = c;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

void rcp__loop_detach(rcp__loop *l, struct rcp_conn *c)
{
    size_t i;
    pthread_mutex_lock(&l->mu);
    for (i = 0; i < l->nconns; i++) {
        if (l->conns[i] == c) {
            l->conns[i] = l->conns[--l->nconns];
            break;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

int rcp__loop_watch(rcp__loop *l, int fd, struct rcp_conn *c)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = c;
    return epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev);
}

int rcp__loop_rearm(rcp__loop *l, int fd, struct rcp_conn *c, int armed)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = armed ? EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET : EPOLLRDHUP | EPOLLET;
    ev.data.ptr = c;
    return epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev);
}

void rcp__loop_unwatch(rcp__loop *l, int fd)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, &ev);
}

int rcp__loop_notify(rcp__loop *l, struct rcp_conn *c)
{
    struct rcp_conn *old;
    if (atomic_exchange(&c->in_ready, 1))
        return 0; /* already queued: one stack entry per connection */
    old = atomic_load(&l->ready);
    do {
        c->ready_next = old;
    } while (!atomic_compare_exchange_weak(&l->ready, &old, c));
    /* seq_cst pairs with the loop's store of `sleeping` then load of
     * `ready`: either the loop sees our push, or we see it asleep. Only the
     * push onto an empty stack rings: a later one rides on that wake. */
    if (old == NULL && atomic_load(&l->sleeping)) {
        poke(l);
        return 1;
    }
    return 0;
}
