/* lib/loop_adapter.c: loop driver two, the application's own event loop
 * through an rcp_loop_adapter (include/rcpipe/adapter.h).
 *
 * The application's loop calls in (rcp_loop_on_fd, rcp_loop_on_timer);
 * each call is one pass of ours, as one iteration of the epoll thread:
 * the ready event, the ready stack, due timers, then the one timer is
 * re-armed for the earliest next one. Other threads reach the loop through
 * an eventfd it watches (written only when a push finds the ready stack
 * empty and the loop is not inside a pass of ours, which drains the stack
 * before it returns anyway).
 *
 * Application loops are level-triggered; sources are written for edges
 * (they read and write until EAGAIN). Reading is the same either way.
 * Writing is not: a level-triggered writable watch would fire on every
 * iteration. So write interest is one-shot here: given at watch/rearm and
 * by want_write (a source that hit EAGAIN), dropped once reported. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "loop.h"
#include "rcpipe/adapter.h"
#include "thread_local.h"

typedef struct fd_watch {
    rcp__loop_src *src; /* NULL: not watched (the eventfd has none either) */
    int interest;       /* RCP_LOOP_* given to the adapter */
    int armed;          /* the source wants readability */
    void *fd_data;      /* the adapter's own per-fd slot */
} fd_watch;

struct rcp_loop {
    rcp__loop base; /* first: a rcp__loop * is an rcp_loop * */
    rcp_loop_adapter a;
    int evfd;
    void *ev_fd_data; /* the adapter's slot for evfd */
    fd_watch *fds; /* by fd number */
    int nfds;
    atomic_ulong passes;
    _Atomic(pthread_t) owner; /* the thread that runs the loop (first: its creator) */
    /* Whether leaving writes to the end of the application's iteration
     * finds anything to batch (rcp_loop_on_fd; loop thread only): socket
     * events since the last drain, whether that drain was put off,
     * deferred drains in a row that found a single event, the mode, and
     * a count of events for the probe while it is off. */
    unsigned events, misses, probe;
    int deferred, batching;
};

/* The loop whose pass runs on this thread, if any. */
static RCP__THREAD_LOCAL rcp_loop *in_pass;

static fd_watch *find(rcp_loop *l, int fd)
{
    return fd >= 0 && fd < l->nfds && l->fds[fd].src ? &l->fds[fd] : NULL;
}

static int set_interest(rcp_loop *l, int fd, fd_watch *w, int interest)
{
    if (w->interest == interest)
        return 0;
    w->interest = interest;
    return l->a.watch(l->a.data, l, fd, interest, &w->fd_data);
}

static void wake(rcp_loop *l)
{
    uint64_t one = 1;
    if (write(l->evfd, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is saturated, a wake is pending anyway */
    }
}

/* One pass: what is on the ready stack, then due timers; re-arm the one
 * timer. Work pushed during the pass by the pass itself waits for the
 * next one (a wake), so that the application's other events get a turn. */
static void pass(rcp_loop *l)
{
    uint64_t next, now;
    if (l->deferred) {
        /* A put-off drain with several events behind it batched them:
         * keep putting off; four in a row with one event: stop. */
        l->misses = l->events > 1 ? 0 : l->misses + 1;
        l->batching = l->misses < 4;
        l->deferred = 0;
    }
    l->events = 0;
    rcp__loop_drain_ready(&l->base);
    next = rcp__loop_run_timers(&l->base);
    if (atomic_load(&l->base.ready))
        wake(l);
    atomic_fetch_add(&l->passes, 1);
    if (next == UINT64_MAX) {
        l->a.timer(l->a.data, l, -1);
        return;
    }
    now = rcp__now_ns();
    l->a.timer(l->a.data, l, next <= now ? 0 : (long long)((next - now + 999) / 1000));
}

static void enter(rcp_loop *l)
{
    /* From the first call in, sync calls are refused on this thread. */
    rcp__loop_mark_thread(&l->base);
    atomic_store_explicit(&l->owner, pthread_self(), memory_order_relaxed);
    in_pass = l;
}

/* A pass of ours, called in by the application's loop (or run here). */
static void run_pass(rcp_loop *l)
{
    enter(l);
    pass(l);
    in_pass = NULL;
}

static int on_owner(rcp_loop *l)
{
    return pthread_equal(atomic_load_explicit(&l->owner, memory_order_relaxed), pthread_self());
}

void rcp_loop_on_fd(rcp_loop *l, int fd, int ready)
{
    fd_watch *w;
    if (!l)
        return;
    enter(l);
    if (fd == l->evfd) {
        uint64_t v;
        if (read(l->evfd, &v, sizeof v) < 0 && errno != EAGAIN) {
            /* nothing to do: the counter is only a doorbell */
        }
    } else if ((w = find(l, fd)) != NULL) {
        uint32_t ev = 0;
        if (ready & RCP_LOOP_READ)
            ev |= RCP__EV_READ;
        if (ready & RCP_LOOP_WRITE) {
            ev |= RCP__EV_WRITE;
            set_interest(l, fd, w, w->interest & ~RCP_LOOP_WRITE); /* one-shot */
        }
        /* Its write, and those its callbacks cause, wait for a pass of
         * their own on the timer at 0, which the application's loop runs
         * after the other events it has ready now: each connection then
         * writes once for all of them (batch_pass, as the epoll thread's
         * pass of several sockets). Only while such drains find more than
         * one event behind them, and on every sixteenth event otherwise to
         * look again: at depth 1 there is nothing to batch, and the extra
         * pass would cost 300-500 instructions per request. */
        int defer = l->batching || l->deferred || (++l->probe & 15) == 0;
        l->events++;
        l->base.batch_pass = defer;
        w->src->ops->process(w->src, ev);
        l->base.batch_pass = 0;
        if (defer && atomic_load(&l->base.ready)) {
            l->deferred = 1;
            l->a.timer(l->a.data, l, 0);
            in_pass = NULL;
            return;
        }
    }
    pass(l);
    in_pass = NULL;
}

void rcp_loop_on_timer(rcp_loop *l)
{
    if (l)
        run_pass(l);
}

static int ad_watch(rcp__loop *base, int fd, rcp__loop_src *s)
{
    rcp_loop *l = (rcp_loop *)base;
    if (fd >= l->nfds) {
        int n = l->nfds ? l->nfds : 64;
        fd_watch *p;
        while (n <= fd)
            n *= 2;
        p = rcp__realloc(l->fds, (size_t)n * sizeof(*p));
        if (!p)
            return -1;
        memset(p + l->nfds, 0, (size_t)(n - l->nfds) * sizeof(*p));
        l->fds = p;
        l->nfds = n;
    }
    memset(&l->fds[fd], 0, sizeof l->fds[fd]);
    l->fds[fd].src = s;
    l->fds[fd].interest = -1;
    l->fds[fd].armed = 1;
    return set_interest(l, fd, &l->fds[fd], RCP_LOOP_READ | RCP_LOOP_WRITE);
}

static void ad_unwatch(rcp__loop *base, int fd)
{
    rcp_loop *l = (rcp_loop *)base;
    if (!find(l, fd))
        return;
    l->a.unwatch(l->a.data, fd, l->fds[fd].fd_data);
    memset(&l->fds[fd], 0, sizeof l->fds[fd]);
}

static int ad_rearm(rcp__loop *base, int fd, rcp__loop_src *s, int armed)
{
    rcp_loop *l = (rcp_loop *)base;
    fd_watch *w = find(l, fd);
    (void)s;
    if (!w)
        return -1;
    w->armed = armed;
    /* Disarmed: a lone caller reads the replies; without the edge-only
     * hang-up watch of epoll, a peer close is found by its next request. */
    return set_interest(l, fd, w, armed ? RCP_LOOP_READ | RCP_LOOP_WRITE : 0);
}

static void ad_want_write(rcp__loop *base, int fd, rcp__loop_src *s)
{
    rcp_loop *l = (rcp_loop *)base;
    fd_watch *w = find(l, fd);
    (void)s;
    if (w && w->armed)
        set_interest(l, fd, w, w->interest | RCP_LOOP_WRITE);
}

static int ad_notify(rcp__loop *base, rcp__loop_src *s)
{
    rcp_loop *l = (rcp_loop *)base;
    if (rcp__loop_push_ready(base, s) && in_pass != l) {
        wake(l);
        return 1;
    }
    return 0;
}

static int ad_awake(rcp__loop *base)
{
    return in_pass == (rcp_loop *)base;
}

static void ad_quiesce(rcp__loop *base)
{
    rcp_loop *l = (rcp_loop *)base;
    unsigned long target;
    if (on_owner(l)) {
        /* The loop's thread, outside a pass: drain the ready stack here,
         * so that nothing queued before the call is left on it. */
        if (in_pass != l)
            run_pass(l);
        return;
    }
    target = atomic_load(&l->passes) + 2;
    while (atomic_load(&l->passes) < target) {
        wake(l);
        usleep(200);
    }
}

static int ad_run_pending(rcp__loop *base)
{
    rcp_loop *l = (rcp_loop *)base;
    if (!on_owner(l) || in_pass == l)
        return 0;
    run_pass(l);
    return 1;
}

static void ad_free(rcp__loop *base)
{
    rcp_loop *l = (rcp_loop *)base;
    l->a.unwatch(l->a.data, l->evfd, l->ev_fd_data);
    l->a.timer(l->a.data, l, -1);
    l->a.cleanup(l->a.data);
    close(l->evfd);
    rcp__loop_base_fini(base);
    rcp__free(l->fds);
    rcp__free(l);
}

static const rcp__loop_driver adapter_driver = {
    "adapter",
    rcp__loop_base_attach,
    rcp__loop_base_detach,
    ad_watch,
    ad_unwatch,
    ad_rearm,
    ad_notify,
    ad_quiesce,
    ad_free,
    ad_want_write,
    ad_run_pending,
    ad_awake,
};

rcp_loop *rcp_loop_new(const rcp_loop_adapter *a)
{
    rcp_loop *l;
    if (!a || !a->watch || !a->unwatch || !a->timer || !a->cleanup)
        return NULL;
    l = rcp__calloc(1, sizeof(*l));
    if (!l) {
        a->cleanup(a->data);
        return NULL;
    }
    l->a = *a;
    l->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->evfd < 0 || a->watch(a->data, l, l->evfd, RCP_LOOP_READ, &l->ev_fd_data) < 0) {
        if (l->evfd >= 0)
            close(l->evfd);
        a->cleanup(a->data);
        rcp__free(l);
        return NULL;
    }
    rcp__loop_base_init(&l->base, &adapter_driver);
    atomic_init(&l->owner, pthread_self());
    return l;
}

void rcp_loop_free(rcp_loop *l)
{
    if (l)
        ad_free(&l->base);
}

rcp__loop *rcp__loop_of(rcp_loop *l)
{
    return &l->base;
}
