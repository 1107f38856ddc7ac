/* rcpipe/libuv.h: run rcpipe connections on a libuv 1 loop. Header-only:
 * include it in the one file that sets up your loop, link libuv
 * (pkg-config libuv) and rcpipe.
 *
 *     uv_loop_t *uv = uv_default_loop();
 *     rcp_loop *loop = rcp_libuv_loop(uv);
 *     o.loop = loop; rcp_conn_open(&o, &conn, err, sizeof err);
 *     uv_run(uv, UV_RUN_DEFAULT);      // callbacks run here
 *     rcp_conn_close(conn);            // on this thread
 *     rcp_loop_free(loop);             // closes the adapter's handles
 *     uv_run(uv, UV_RUN_DEFAULT);      // lets libuv finish closing them
 *
 * One uv_poll_t per file descriptor and one uv_timer_t. Handles are
 * closed asynchronously, as libuv wants: the adapter's memory goes when
 * the last close callback has run. The adapter's handles keep uv_run
 * going while a connection is open (unref them with uv_walk if you want
 * otherwise). libuv timers count milliseconds: a batch_delay_us pause
 * lasts at least 1 ms here. All of rcp_loop_adapter's rules apply
 * (rcpipe/adapter.h). */
#ifndef RCPIPE_LIBUV_H
#define RCPIPE_LIBUV_H

#include <stdlib.h>

#include <uv.h>

#include "rcpipe/adapter.h"

typedef struct rcp__libuv {
    uv_loop_t *uv;
    uv_timer_t timer;
    rcp_loop *loop;
    int handles; /* open handles (the timer and the polls): freed at 0 */
    int freeing;
} rcp__libuv;

static inline void rcp__libuv_release(rcp__libuv *u)
{
    if (--u->handles == 0 && u->freeing)
        free(u);
}

static inline void rcp__libuv_poll_closed(uv_handle_t *h)
{
    rcp__libuv *u = (rcp__libuv *)h->data;
    free(h);
    rcp__libuv_release(u);
}

static inline void rcp__libuv_timer_closed(uv_handle_t *h)
{
    rcp__libuv_release((rcp__libuv *)h->data);
}

static inline void rcp__libuv_on_poll(uv_poll_t *h, int status, int events)
{
    rcp__libuv *u = (rcp__libuv *)h->data;
    int ready = 0, fd;
    if (uv_fileno((uv_handle_t *)h, &fd) != 0)
        return;
    if (status < 0 || (events & UV_READABLE))
        ready |= RCP_LOOP_READ; /* an error: the read finds it */
    if (status < 0 || (events & UV_WRITABLE))
        ready |= RCP_LOOP_WRITE;
    rcp_loop_on_fd(u->loop, fd, ready);
}

static inline void rcp__libuv_on_timer(uv_timer_t *t)
{
    rcp_loop_on_timer(((rcp__libuv *)t->data)->loop);
}

/* One uv_poll_t per fd, kept in the library's fd_data slot. */
static inline int rcp__libuv_watch(void *data, rcp_loop *loop, int fd, int interest,
                                   void **fd_data)
{
    rcp__libuv *u = (rcp__libuv *)data;
    uv_poll_t *h = (uv_poll_t *)*fd_data;
    int ev = ((interest & RCP_LOOP_READ) ? UV_READABLE : 0) |
             ((interest & RCP_LOOP_WRITE) ? UV_WRITABLE : 0);
    u->loop = loop;
    if (!h) {
        h = (uv_poll_t *)malloc(sizeof(*h));
        if (!h)
            return -1;
        if (uv_poll_init(u->uv, h, fd) != 0) {
            free(h);
            return -1;
        }
        h->data = u;
        u->handles++;
        *fd_data = h;
    }
    if (!ev)
        return uv_poll_stop(h) == 0 ? 0 : -1;
    return uv_poll_start(h, ev, rcp__libuv_on_poll) == 0 ? 0 : -1;
}

static inline void rcp__libuv_unwatch(void *data, int fd, void *fd_data)
{
    (void)data;
    (void)fd;
    if (fd_data) {
        /* Stopped now (the fd is closed right after); freed once closed. */
        uv_poll_stop((uv_poll_t *)fd_data);
        uv_close((uv_handle_t *)fd_data, rcp__libuv_poll_closed);
    }
}

static inline void rcp__libuv_timer(void *data, rcp_loop *loop, long long timeout_us)
{
    rcp__libuv *u = (rcp__libuv *)data;
    u->loop = loop;
    if (timeout_us < 0)
        uv_timer_stop(&u->timer);
    else
        uv_timer_start(&u->timer, rcp__libuv_on_timer, (uint64_t)((timeout_us + 999) / 1000), 0);
}

static inline void rcp__libuv_cleanup(void *data)
{
    rcp__libuv *u = (rcp__libuv *)data;
    u->freeing = 1;
    uv_close((uv_handle_t *)&u->timer, rcp__libuv_timer_closed);
}

/* A loop for connections on `uv` (rcp_conn_options.loop). NULL on failure.
 * Free it with rcp_loop_free once its connections are closed, then let
 * uv_run finish closing the adapter's handles. */
static inline rcp_loop *rcp_libuv_loop(uv_loop_t *uv)
{
    rcp__libuv *u = (rcp__libuv *)calloc(1, sizeof(*u));
    rcp_loop_adapter a = {NULL, rcp__libuv_watch, rcp__libuv_unwatch, rcp__libuv_timer,
                          rcp__libuv_cleanup};
    if (!u)
        return NULL;
    u->uv = uv;
    if (uv_timer_init(uv, &u->timer) != 0) {
        free(u);
        return NULL;
    }
    u->timer.data = u;
    u->handles = 1;
    a.data = u;
    return rcp_loop_new(&a);
}

#endif
