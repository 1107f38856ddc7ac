/* lib/loop.h: the generic I/O loop and its driver interface.
 *
 * A loop serves *sources* (today: connections). It knows file descriptors,
 * timers and callbacks, never a source's fields: a source embeds one
 * rcp__loop_src, registers an ops table, and the loop calls
 *
 *   process(src, events)   readiness of its fd (events: RCP__EV_* bits), or
 *                          0 when the source asked for service (notify);
 *   next_timer(src)        the earliest time (ns, CLOCK_MONOTONIC) it wants
 *                          timers() called, UINT64_MAX for none;
 *   timers(src, now)       run what is due; return the next such time.
 *
 * All three run on the loop's thread, never concurrently for one source.
 *
 * How a loop waits is a *driver* (struct rcp__loop_driver): driver one is
 * our own epoll I/O thread (loop_epoll.c, rcp__loop_new); driver two is
 * the application's event loop through an adapter (loop_adapter.c,
 * rcpipe/adapter.h), behind the same ops. The parts every driver shares (the ready
 * stack that carries notify() across threads, the source list and its
 * timer pass, the "am I on a loop thread" mark) are in loop.c.
 *
 * Contract for a driver (what conn*.c relies on):
 *   attach/detach   MUST be callable from any thread; after detach the
 *                   source is no longer visited by timer passes (it may
 *                   still be on the ready stack: quiesce drains it).
 *   watch           start watching fd for the source, readable and
 *                   writable edges (edge-triggered: the source reads and
 *                   writes until EAGAIN) and hang-ups. Loop thread only.
 *   rearm           armed 1: as watch; armed 0: only hang-ups/errors.
 *                   MAY be called from the loop thread only.
 *   unwatch         stop watching fd (before it is closed). Any thread
 *                   that owns the fd's I/O at that moment.
 *   notify          any thread: have process(src, 0) run on the loop
 *                   thread soon. One ready-stack entry per source; MUST
 *                   NOT make a system call when the loop is awake anyway.
 *                   Returns 1 if it made one (a wake).
 *   quiesce         returns once the loop finished a full pass begun
 *                   after the call; a no-op on the loop's own thread.
 *   free            stop and free the loop; no source may remain.
 *   want_write      (optional) the source hit EAGAIN writing fd: report
 *                   writability once more. An edge-triggered driver needs
 *                   nothing (the edge comes); a level-triggered one gives
 *                   write interest one-shot, at watch/rearm and here.
 *   awake           (optional) any thread: 1 if a notify now would make no
 *                   system call (the loop is running, not waiting; or
 *                   this is its thread, inside a pass). A hint, read
 *                   without a lock: a sender writes on its own thread only
 *                   when waking the loop would cost a wake. NULL: never.
 *   run_pending     (optional) on the thread that runs the loop, outside
 *                   its callbacks: do one pass now (ready stack, due
 *                   timers) and return 1; elsewhere return 0. Lets
 *                   rcp_conn_close finish on the thread of an application
 *                   loop that is not running while it waits.
 * A driver MUST call rcp__loop_mark_thread() on the thread that runs the
 * sources' callbacks, so rcp__loop_on_thread() refuses sync calls there. */
#ifndef RCP_LOOP_H
#define RCP_LOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "thread_local.h"

typedef struct rcp__loop rcp__loop;
typedef struct rcp__loop_src rcp__loop_src;

/* Readiness bits handed to process(). Their values are epoll's, so that
 * the epoll driver hands its events through untouched (loop_epoll.c checks
 * this at compile time); other drivers translate. */
enum {
    RCP__EV_READ = 0x001,  /* EPOLLIN */
    RCP__EV_WRITE = 0x004, /* EPOLLOUT */
    RCP__EV_ERR = 0x008,   /* EPOLLERR */
    RCP__EV_HUP = 0x010,   /* EPOLLHUP */
    RCP__EV_RDHUP = 0x2000 /* EPOLLRDHUP: the peer closed its side */
};

typedef struct rcp__loop_src_ops {
    void (*process)(rcp__loop_src *s, uint32_t events);
    uint64_t (*next_timer)(rcp__loop_src *s);
    uint64_t (*timers)(rcp__loop_src *s, uint64_t now);
} rcp__loop_src_ops;

/* Embedded in each source. ops is set by the source before attach; the
 * link fields belong to the loop (only loop.c touches them). */
struct rcp__loop_src {
    const rcp__loop_src_ops *ops;
    rcp__loop_src *ready_next; /* link on the loop's ready stack */
    atomic_int in_ready;       /* 1 while on it */
};

typedef struct rcp__loop_driver {
    const char *name;
    int (*attach)(rcp__loop *l, rcp__loop_src *s);
    void (*detach)(rcp__loop *l, rcp__loop_src *s);
    int (*watch)(rcp__loop *l, int fd, rcp__loop_src *s);
    void (*unwatch)(rcp__loop *l, int fd);
    int (*rearm)(rcp__loop *l, int fd, rcp__loop_src *s, int armed);
    int (*notify)(rcp__loop *l, rcp__loop_src *s);
    void (*quiesce)(rcp__loop *l);
    void (*free)(rcp__loop *l);
    void (*want_write)(rcp__loop *l, int fd, rcp__loop_src *s); /* NULL: nothing to do */
    int (*run_pending)(rcp__loop *l);                         /* NULL: never here */
    int (*awake)(rcp__loop *l);                               /* NULL: never */
} rcp__loop_driver;

/* The part of a loop every driver shares; a driver's own loop struct
 * starts with it. */
struct rcp__loop {
    const rcp__loop_driver *drv;
    _Atomic(rcp__loop_src *) ready; /* sources that asked for service */
    pthread_mutex_t mu;             /* guards srcs */
    rcp__loop_src **srcs;
    size_t nsrcs, capsrcs;
    /* Set by the loop thread while it serves a pass of more than one
     * ready socket (the epoll thread), or a socket event whose write is
     * put off to the end of the application's iteration (loop_adapter.c):
     * a connection then leaves its write to the ready-stack drain
     * (rcp__loop_notify), so what the other sockets' callbacks send it
     * rides in the same write. Read and written by that thread only. */
    int batch_pass;
    /* Set when this loop's own thread queues a request (a callback's
     * send, a resend): rcp__loop_note_send. The epoll thread reads and
     * clears it around each pass (its second look, loop_epoll.c). */
    int sent_here;
};

/* Creates and starts an epoll I/O loop thread (driver one); NULL on
 * failure. */
rcp__loop *rcp__loop_new(void);
/* Stops the loop, frees it (the driver's free). No source may remain
 * attached. NULL: no-op. */
void rcp__loop_free(rcp__loop *l);

/* What conn*.c calls: the driver's operations (contract above). */
static inline int rcp__loop_attach(rcp__loop *l, rcp__loop_src *s)
{
    return l->drv->attach(l, s);
}
static inline void rcp__loop_detach(rcp__loop *l, rcp__loop_src *s)
{
    l->drv->detach(l, s);
}
static inline int rcp__loop_watch(rcp__loop *l, int fd, rcp__loop_src *s)
{
    return l->drv->watch(l, fd, s);
}
static inline void rcp__loop_unwatch(rcp__loop *l, int fd)
{
    l->drv->unwatch(l, fd);
}
static inline int rcp__loop_rearm(rcp__loop *l, int fd, rcp__loop_src *s, int armed)
{
    return l->drv->rearm(l, fd, s, armed);
}
static inline int rcp__loop_notify(rcp__loop *l, rcp__loop_src *s)
{
    return l->drv->notify(l, s);
}
static inline void rcp__loop_quiesce(rcp__loop *l)
{
    if (l)
        l->drv->quiesce(l);
}
static inline void rcp__loop_want_write(rcp__loop *l, int fd, rcp__loop_src *s)
{
    if (l->drv->want_write)
        l->drv->want_write(l, fd, s);
}
static inline int rcp__loop_awake(rcp__loop *l)
{
    return l->drv->awake ? l->drv->awake(l) : 0;
}
static inline int rcp__loop_run_pending(rcp__loop *l)
{
    return l->drv->run_pending ? l->drv->run_pending(l) : 0;
}

/* The driver-two loop behind a public rcp_loop (rcpipe/adapter.h). */
struct rcp_loop;
rcp__loop *rcp__loop_of(struct rcp_loop *l);

/* 1 on a thread that runs a loop's callbacks (any loop, any driver). */
int rcp__loop_on_thread(void);

/* ---- for drivers (loop.c) ---- */

/* Set up / tear down the shared part (drv set by the caller). */
void rcp__loop_base_init(rcp__loop *l, const rcp__loop_driver *drv);
void rcp__loop_base_fini(rcp__loop *l);
/* Default attach / detach: the source list visited by timer passes. */
int rcp__loop_base_attach(rcp__loop *l, rcp__loop_src *s);
void rcp__loop_base_detach(rcp__loop *l, rcp__loop_src *s);
/* Push the source on the ready stack. Returns 1 if the stack was empty
 * (the pusher must wake the loop, if it sleeps), 0 if the source was on
 * it already or another push will wake it. seq_cst: see loop_epoll.c. */
int rcp__loop_push_ready(rcp__loop *l, rcp__loop_src *s);
/* Loop thread: process(src, 0) for every source on the ready stack. */
void rcp__loop_drain_ready(rcp__loop *l);
/* Loop thread: run due timers; the time of the next one (ns, monotonic),
 * UINT64_MAX for none. */
uint64_t rcp__loop_run_timers(rcp__loop *l);
/* Mark (1) or unmark (0) the calling thread as running loop callbacks;
 * cur is the loop it runs (rcp__loop_current). */
void rcp__loop_mark_thread(rcp__loop *cur);
void rcp__loop_unmark_thread(void);
rcp__loop *rcp__loop_current(void);

/* The loop the calling thread runs, NULL on other threads (loop.c). */
extern RCP__THREAD_LOCAL rcp__loop *rcp__loop_here;
/* A request was queued: noted on the loop of the calling thread, if it
 * runs one (one thread-pointer load elsewhere). */
static inline void rcp__loop_note_send(void)
{
    rcp__loop *l = rcp__loop_here;
    if (l)
        l->sent_here = 1;
}

#endif
