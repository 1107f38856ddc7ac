/* lib/loop_epoll.c: loop driver one, our own I/O thread. One thread per
 * loop waits in epoll for socket readiness, for an eventfd poke (some
 * source was pushed on the ready stack while the loop slept), or for the
 * earliest timer of its sources (deadlines, reconnects, the flush pause).
 * The eventfd is written only when the loop is asleep, so a busy loop costs
 * producers no system call at all.
 *
 * A file of its own, not part of loop.c: loop.c is what every driver
 * shares, this is one way of waiting; the application-loop driver (an
 * adapter over libevent or libuv) sits beside it, and neither sees the
 * other's fields. */
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
#include "loop.h"

/* The RCP__EV_* bits are epoll's: events pass through untouched. */
_Static_assert((int)RCP__EV_READ == (int)EPOLLIN && (int)RCP__EV_WRITE == (int)EPOLLOUT &&
                   (int)RCP__EV_ERR == (int)EPOLLERR && (int)RCP__EV_HUP == (int)EPOLLHUP &&
                   (int)RCP__EV_RDHUP == (int)EPOLLRDHUP,
               "RCP__EV_* must equal the epoll bits");

typedef struct epoll_loop {
    rcp__loop base; /* first: a rcp__loop * is an epoll_loop * */
    int epfd;
    int evfd;
    pthread_t thread;
    atomic_int stop;
    atomic_int sleeping;
    atomic_ulong passes; /* completed loop iterations */
    atomic_int exited;
    /* The second look (loop_main), loop thread only: how many may find
     * nothing before they stop, and whether the last pass with sockets
     * queued a request from this thread (its callbacks send). */
    int several, sends;
} epoll_loop;

/* How many second looks in a row may find nothing before they stop, until
 * a pass finds several sockets ready again. */
#define SECOND_LOOK_MISSES 64

/* Runs due timers; returns the nanoseconds until the next one (0: one is
 * due already), or -1 when there is none. */
static int64_t epoll_run_timers(epoll_loop *l)
{
    uint64_t next = rcp__loop_run_timers(&l->base), now;
    if (next == UINT64_MAX)
        return -1;
    now = rcp__now_ns();
    if (next <= now)
        return 0;
    return next - now > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(next - now);
}

/* epoll_wait with a nanosecond timeout (-1: none): epoll_pwait2 where the
 * kernel has it (5.11+), so a flush pause of 20 us sleeps 20 us and not a
 * whole millisecond; else epoll_wait, rounded up to whole milliseconds. */
static int wait_events(epoll_loop *l, struct epoll_event *evs, int max, int64_t timeout_ns)
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

/* How many of a wait's events are sockets with something to read (an
 * edge of room to write alone is no reply). */
static int count_readable(const struct epoll_event *evs, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += evs[i].data.ptr != NULL &&
             (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
    return k;
}

/* Serves a wait's events: the eventfd is only a doorbell; each socket's
 * source runs. */
static void run_events(epoll_loop *l, const struct epoll_event *evs, int n)
{
    for (int i = 0; i < n; i++) {
        rcp__loop_src *s = evs[i].data.ptr;
        if (s == NULL) {
            uint64_t v;
            if (read(l->evfd, &v, sizeof v) < 0 && errno != EAGAIN) {
                /* nothing to do: the counter is only a doorbell */
            }
            continue;
        }
        s->ops->process(s, evs[i].events);
    }
}

static void *loop_main(void *arg)
{
    epoll_loop *l = arg;
    struct epoll_event evs[64];
    rcp__loop_mark_thread(&l->base);
    /* Timer slack 1 ns instead of the default 50 us: a flush pause of
     * tens of microseconds must not become a hundred. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    while (!atomic_load(&l->stop)) {
        int64_t timeout;
        int n, i, socks, readable, second;
        rcp__loop_drain_ready(&l->base);
        timeout = epoll_run_timers(l);
        atomic_store(&l->sleeping, 1);
        if (atomic_load(&l->base.ready) || atomic_load(&l->stop))
            timeout = 0;
        n = wait_events(l, evs, 64, timeout);
        atomic_store(&l->sleeping, 0);
        for (i = 0, socks = 0; i < n; i++)
            socks += evs[i].data.ptr != NULL;
        readable = count_readable(evs, n);
        if (readable > 1)
            l->several = SECOND_LOOK_MISSES;
        /* A second look, not waiting, after the pass: sockets whose
         * replies came in while it ran join it, so what their callbacks
         * send rides in the same writes. Only where it can pay: the
         * callbacks here send (a refill from the callback; sync callers
         * and sends from other threads gain nothing, and their writes
         * would wait for it), and passes find several sockets ready
         * (replies due from more than one server; with one request in
         * flight it would be a system call per request for nothing). At
         * 64 in flight over three masters writes grew from 12 to 14-15
         * commands and the servers' CPU per command fell 5-9%: a wait
         * that finds nothing is far cheaper than a write, which wakes a
         * server (docs/perf.md, "A second look"). */
        second = readable > 0 && l->sends && l->several > 0;
        /* Several sockets (the eventfd is no socket), or one and a second
         * look to come: their writes wait for the drain at the top of the
         * next iteration (loop.h). */
        l->base.batch_pass = socks > 1 || second;
        l->base.sent_here = 0;
        run_events(l, evs, n);
        if (second) {
            n = wait_events(l, evs, 64, 0);
            if (count_readable(evs, n > 0 ? n : 0) > 0)
                l->several = SECOND_LOOK_MISSES;
            else
                l->several--;
            if (n > 0)
                run_events(l, evs, n);
        }
        if (readable)
            l->sends = l->base.sent_here;
        l->base.batch_pass = 0;
        atomic_fetch_add(&l->passes, 1);
    }
    atomic_store(&l->exited, 1);
    return NULL;
}

static void poke(epoll_loop *l)
{
    uint64_t one = 1;
    if (write(l->evfd, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is saturated, the loop is awake anyway */
    }
}

static void epoll_quiesce(rcp__loop *base)
{
    epoll_loop *l = (epoll_loop *)base;
    unsigned long target;
    if (rcp__loop_current() == base)
        return;
    /* Two passes: the one in progress may have started before the call. */
    target = atomic_load(&l->passes) + 2;
    while (atomic_load(&l->passes) < target && !atomic_load(&l->exited)) {
        poke(l);
        usleep(200);
    }
}

static void epoll_free(rcp__loop *base)
{
    epoll_loop *l = (epoll_loop *)base;
    atomic_store(&l->stop, 1);
    poke(l);
    pthread_join(l->thread, NULL);
    close(l->epfd);
    close(l->evfd);
    rcp__loop_base_fini(base);
    rcp__free(l);
}

static int epoll_watch(rcp__loop *base, int fd, rcp__loop_src *s)
{
    epoll_loop *l = (epoll_loop *)base;
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = s;
    return epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static int epoll_rearm(rcp__loop *base, int fd, rcp__loop_src *s, int armed)
{
    epoll_loop *l = (epoll_loop *)base;
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = armed ? EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET : EPOLLRDHUP | EPOLLET;
    ev.data.ptr = s;
    return epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev);
}

static void epoll_unwatch(rcp__loop *base, int fd)
{
    epoll_loop *l = (epoll_loop *)base;
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, &ev);
}

static int epoll_notify(rcp__loop *base, rcp__loop_src *s)
{
    epoll_loop *l = (epoll_loop *)base;
    /* The push is seq_cst and pairs with the loop's store of `sleeping`
     * then load of `ready`: either the loop sees our push, or we see it
     * asleep. */
    if (rcp__loop_push_ready(base, s) && atomic_load(&l->sleeping)) {
        poke(l);
        return 1;
    }
    return 0;
}

static int epoll_awake(rcp__loop *base)
{
    return !atomic_load_explicit(&((epoll_loop *)base)->sleeping, memory_order_relaxed);
}

static const rcp__loop_driver epoll_driver = {
    "epoll",
    rcp__loop_base_attach,
    rcp__loop_base_detach,
    epoll_watch,
    epoll_unwatch,
    epoll_rearm,
    epoll_notify,
    epoll_quiesce,
    epoll_free,
    NULL, /* want_write: edge-triggered, the writable edge comes by itself */
    NULL, /* run_pending: its own thread runs every pass */
    epoll_awake,
};

rcp__loop *rcp__loop_new(void)
{
    struct epoll_event ev;
    epoll_loop *l = rcp__calloc(1, sizeof(*l));
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
    rcp__loop_base_init(&l->base, &epoll_driver);
    if (pthread_create(&l->thread, NULL, loop_main, l) != 0) {
        rcp__loop_base_fini(&l->base);
        goto fail;
    }
    return &l->base;
fail:
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->evfd >= 0)
        close(l->evfd);
    rcp__free(l);
    return NULL;
}
