/* libevent_conn.c: an rcpipe connection on the application's own libevent
 * loop. The loop thread sends a SET and a GET; a second thread sends too
 * (any thread may); every reply callback runs on the loop thread, and an
 * event of the application's own stops the loop once all replies are in.
 *
 *     libevent-conn [host [port]]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include "rcpipe.h"
#include "rcpipe/libevent.h"

#define OTHER_THREAD_REQUESTS 100

typedef struct app {
    struct event_base *base;
    rcp_conn *conn;
    atomic_int pending; /* replies still to come */
} app;

/* A future embedded in our own struct: no allocation per request. */
typedef struct request {
    rcp_future f;
    app *a;
    const char *what;
} request;

/* Runs on the loop thread, as every rcpipe callback here. Short and
 * non-blocking: it runs inside event_base_dispatch. */
static void on_reply(rcp_future *f, rcp_reply *r)
{
    request *rq = (request *)f;
    if (rq->what) {
        if (r->type == RCP_REPLY_ERROR)
            printf("%s: error: %.*s\n", rq->what, (int)r->len, r->str);
        else if (r->type == RCP_REPLY_STRING || r->type == RCP_REPLY_STATUS)
            printf("%s: %.*s\n", rq->what, (int)r->len, r->str);
    }
    atomic_fetch_sub(&rq->a->pending, 1);
}

/* The application's own timer, on the same base: stop when all is done.
 * (Refused sends of the other thread count too, and that thread must not
 * touch the base: this base is not thread-safe.) */
static void on_check(evutil_socket_t fd, short what, void *arg)
{
    app *a = arg;
    (void)fd;
    (void)what;
    if (atomic_load(&a->pending) == 0)
        event_base_loopbreak(a->base);
}

static void on_event(const rcp_event *ev, void *data)
{
    (void)data;
    printf("event %d: %s\n", ev->type, ev->message);
}

/* Another thread: sends go through the same connection and wake the
 * loop through rcpipe's eventfd; no libevent call from this thread. */
static void *other_thread(void *arg)
{
    static request rqs[OTHER_THREAD_REQUESTS];
    app *a = arg;
    for (int i = 0; i < OTHER_THREAD_REQUESTS; i++) {
        rqs[i].f.resolve = on_reply;
        rqs[i].a = a;
        rqs[i].what = NULL;
        if (rcp_conn_send(a->conn, &rqs[i].f, "INCR %s", "example:counter") != RCP_OK)
            atomic_fetch_sub(&a->pending, 1); /* refused: its callback never runs */
    }
    return NULL;
}

int main(int argc, char **argv)
{
    app a;
    rcp_conn_options o;
    rcp_loop *loop;
    struct event *check;
    struct timeval every = {0, 50000};
    request set = {{0}, NULL, "SET"}, get = {{0}, NULL, "GET"};
    pthread_t th;
    char err[512];
    int rc;

    a.base = event_base_new();
    if (!a.base)
        return 1;
    /* The adapter: rcpipe watches its sockets and one timer on our base. */
    loop = rcp_libevent_loop(a.base);
    if (!loop)
        return 1;
    rcp_conn_options_init(&o);
    o.host = argc > 1 ? argv[1] : "127.0.0.1";
    o.port = argc > 2 ? atoi(argv[2]) : 6379;
    o.loop = loop;
    o.event_cb = on_event;
    /* With a loop, open returns at once: the connection connects when the
     * loop runs, and requests sent meanwhile wait behind the handshake. */
    rc = rcp_conn_open(&o, &a.conn, err, sizeof err);
    if (rc != RCP_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    atomic_init(&a.pending, 2 + OTHER_THREAD_REQUESTS);
    set.f.resolve = get.f.resolve = on_reply;
    set.a = get.a = &a;
    if (rcp_conn_send(a.conn, &set.f, "SET %s %s", "example:key", "hello") != RCP_OK)
        atomic_fetch_sub(&a.pending, 1);
    if (rcp_conn_send(a.conn, &get.f, "GET %s", "example:key") != RCP_OK)
        atomic_fetch_sub(&a.pending, 1);
    pthread_create(&th, NULL, other_thread, &a);

    check = event_new(a.base, -1, EV_PERSIST, on_check, &a);
    event_add(check, &every);
    event_base_dispatch(a.base);
    pthread_join(th, NULL);
    event_free(check);

    /* On the loop's thread after the loop returned: close resolves
     * anything left (RCP_ERR_CLOSED) by running the loop's pass itself. */
    rcp_conn_close(a.conn);
    rcp_loop_free(loop);
    event_base_free(a.base);
    return 0;
}
