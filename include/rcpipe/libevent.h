/* rcpipe/libevent.h: run rcpipe connections on a libevent 2 event_base.
 * Header-only: include it in the one file that sets up your loop, link
 * libevent (pkg-config libevent) and rcpipe.
 *
 *     struct event_base *base = event_base_new();
 *     rcp_loop *loop = rcp_libevent_loop(base);
 *     rcp_conn_options o;
 *     rcp_conn_options_init(&o);
 *     o.loop = loop;
 *     rcp_conn_open(&o, &conn, err, sizeof err);  // returns at once
 *     ... rcp_conn_send(conn, &f, "GET %s", key) from any thread ...
 *     event_base_dispatch(base);                   // callbacks run here
 *     rcp_conn_close(conn);                         // on this thread
 *     rcp_loop_free(loop);                          // frees the adapter
 *     event_base_free(base);
 *
 * One struct event per file descriptor (EV_PERSIST, level-triggered) and
 * one timer event; the base need not be thread-safe (no evthread_use_*):
 * rcpipe wakes it from other threads through an eventfd it watches. All
 * of rcp_loop_adapter's rules apply (rcpipe/adapter.h). */
#ifndef RCPIPE_LIBEVENT_H
#define RCPIPE_LIBEVENT_H

#include <stdlib.h>
#include <sys/time.h>

#include <event2/event.h>

#include "rcpipe/adapter.h"

typedef struct rcp__libevent {
    struct event_base *base;
    struct event *timer;
    rcp_loop *loop;
} rcp__libevent;

static inline void rcp__libevent_on_fd(evutil_socket_t fd, short what, void *arg)
{
    rcp__libevent *e = (rcp__libevent *)arg;
    int ready = 0;
    if (what & EV_READ)
        ready |= RCP_LOOP_READ;
    if (what & EV_WRITE)
        ready |= RCP_LOOP_WRITE;
    rcp_loop_on_fd(e->loop, (int)fd, ready);
}

static inline void rcp__libevent_on_timer(evutil_socket_t fd, short what, void *arg)
{
    rcp__libevent *e = (rcp__libevent *)arg;
    (void)fd;
    (void)what;
    rcp_loop_on_timer(e->loop);
}

/* One persistent struct event per fd, kept in the library's fd_data slot. */
static inline int rcp__libevent_watch(void *data, rcp_loop *loop, int fd, int interest,
                                      void **fd_data)
{
    rcp__libevent *e = (rcp__libevent *)data;
    struct event *ev = (struct event *)*fd_data;
    short flags = (short)(((interest & RCP_LOOP_READ) ? EV_READ : 0) |
                          ((interest & RCP_LOOP_WRITE) ? EV_WRITE : 0));
    e->loop = loop;
    if (!ev) {
        ev = event_new(e->base, fd, (short)(flags | EV_PERSIST), rcp__libevent_on_fd, e);
        if (!ev)
            return -1;
        *fd_data = ev;
    } else {
        /* As hiredis's adapter: safe from inside the event's own callback. */
        event_del(ev);
        event_assign(ev, e->base, fd, (short)(flags | EV_PERSIST), rcp__libevent_on_fd, e);
    }
    return flags ? event_add(ev, NULL) : 0;
}

static inline void rcp__libevent_unwatch(void *data, int fd, void *fd_data)
{
    (void)data;
    (void)fd;
    if (fd_data)
        event_free((struct event *)fd_data);
}

static inline void rcp__libevent_timer(void *data, rcp_loop *loop, long long timeout_us)
{
    rcp__libevent *e = (rcp__libevent *)data;
    struct timeval tv;
    e->loop = loop;
    if (timeout_us <= 0) {
        event_del(e->timer);
        /* 0: run it in this iteration, after the events already active
         * (rcpipe/adapter.h), without one more wait for a zero timeout. */
        if (timeout_us == 0)
            event_active(e->timer, EV_TIMEOUT, 1);
        return;
    }
    tv.tv_sec = (time_t)(timeout_us / 1000000);
    tv.tv_usec = (suseconds_t)(timeout_us % 1000000);
    event_add(e->timer, &tv);
}

static inline void rcp__libevent_cleanup(void *data)
{
    rcp__libevent *e = (rcp__libevent *)data;
    event_free(e->timer);
    free(e);
}

/* A loop for connections on `base` (rcp_conn_options.loop). NULL on
 * failure. Free it with rcp_loop_free once its connections are closed,
 * before event_base_free(base). */
static inline rcp_loop *rcp_libevent_loop(struct event_base *base)
{
    rcp__libevent *e = (rcp__libevent *)calloc(1, sizeof(*e));
    rcp_loop_adapter a = {NULL, rcp__libevent_watch, rcp__libevent_unwatch, rcp__libevent_timer,
                          rcp__libevent_cleanup};
    if (!e)
        return NULL;
    e->base = base;
    e->timer = evtimer_new(base, rcp__libevent_on_timer, e);
    if (!e->timer) {
        free(e);
        return NULL;
    }
    a.data = e;
    return rcp_loop_new(&a);
}

#endif
