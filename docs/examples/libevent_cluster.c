/* libevent_cluster.c: a cluster handle on the application's own libevent
 * loop. One thread does everything: it opens the handle (before its loop
 * runs: the bootstrap does not need the loop), sends a few hundred SETs and
 * GETs spread over the slots, runs the loop until every reply callback has
 * fired (on this thread), and closes the handle after the loop returned.
 *
 *     libevent-cluster [host:port[,host:port...]]
 */
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "rcpipe.h"
#include "rcpipe/libevent.h"

#define KEYS 200

typedef struct app {
    struct event_base *base;
    int pending; /* replies still to come: only the loop thread touches it */
    int wrong;
} app;

/* A future embedded in our own struct: no allocation per request. */
typedef struct request {
    rcp_future f;
    app *a;
    char want[32]; /* what a GET must return; "" for a SET */
} request;

/* On the loop thread, inside event_base_dispatch: short, non-blocking. */
static void on_reply(rcp_future *f, rcp_reply *r)
{
    request *rq = (request *)f;
    int ok;
    if (rq->want[0])
        ok = r->type == RCP_REPLY_STRING && r->len == strlen(rq->want) &&
             memcmp(r->str, rq->want, r->len) == 0;
    else
        ok = r->type == RCP_REPLY_STATUS;
    if (!ok) {
        rq->a->wrong++;
        if (r->type == RCP_REPLY_ERROR)
            fprintf(stderr, "error: %.*s\n", (int)r->len, r->str);
    }
    if (--rq->a->pending == 0)
        event_base_loopbreak(rq->a->base);
}

static void on_event(const rcp_event *ev, void *data)
{
    (void)data;
    printf("event %s: %s\n", rcp_event_name(ev->type), ev->message);
}

int main(int argc, char **argv)
{
    static request rqs[2 * KEYS];
    app a = {NULL, 0, 0};
    rcp_cluster_options o;
    rcp_conn_options node;
    rcp_cluster *cl;
    rcp_loop *loop;
    rcp_cluster_stats st;
    struct timeval limit = {10, 0};
    char err[1024];
    int rc;

    a.base = event_base_new();
    if (!a.base)
        return 1;
    loop = rcp_libevent_loop(a.base); /* rcpipe's sockets and timer on our base */
    if (!loop)
        return 1;
    rcp_cluster_options_init(&o);
    rcp_conn_options_init(&node);
    o.seeds = argc > 1 ? argv[1] : "127.0.0.1:7000";
    o.node = &node;
    o.event_cb = on_event;
    node.loop = loop;
    rc = rcp_cluster_open(&o, &cl, err, sizeof err);
    if (rc != RCP_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    for (int i = 0; i < KEYS; i++) {
        request *set = &rqs[2 * i], *get = &rqs[2 * i + 1];
        char key[32], val[32];
        snprintf(key, sizeof key, "example:%d", i);
        snprintf(val, sizeof val, "value-%d", i);
        set->f.resolve = get->f.resolve = on_reply;
        set->a = get->a = &a;
        snprintf(get->want, sizeof get->want, "%s", val);
        /* A refused send (an error return) never calls back. */
        if (rcp_cluster_send(cl, &set->f, "SET %s %s", key, val) == RCP_OK)
            a.pending++;
        if (rcp_cluster_send(cl, &get->f, "GET %s", key) == RCP_OK)
            a.pending++;
    }
    event_base_loopexit(a.base, &limit); /* a bound, should a node not answer */
    if (a.pending > 0)
        event_base_dispatch(a.base);
    rcp_cluster_get_stats(cl, &st);
    printf("%d replies missing, %d wrong; %llu requests over %llu nodes\n", a.pending, a.wrong,
           (unsigned long long)st.requests, (unsigned long long)st.nodes);
    /* After the loop returned, on its thread: close runs the loop's
     * pending work itself (requests still out resolve with RCP_ERR_CLOSED). */
    rcp_cluster_close(cl);
    rcp_loop_free(loop);
    event_base_free(a.base);
    return a.pending || a.wrong ? 1 : 0;
}
