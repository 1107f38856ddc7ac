/* cluster/waiter.c: a sync call over the async path, for the cluster's
 * composite commands (split multi-key commands, scripts). The resolve
 * callback keeps the reply and wakes the caller. */
#include <stdio.h>
#include <string.h>

#include "connection.h"
#include "reply.h"
#include "waiter.h"

static void waiter_resolve(rcp_future *f, rcp_reply *r)
{
    rcp__waiter *w = f->data;
    rcp_reply *k = rcp_reply_keep(r);
    pthread_mutex_lock(&w->mu);
    w->r = k ? k : rcp__reply_error_new(RCP_ERR_OOM, "out of memory keeping a reply");
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void rcp__waiter_init(rcp__waiter *w)
{
    memset(&w->f, 0, sizeof w->f);
    w->f.resolve = waiter_resolve;
    w->f.data = w;
    w->done = 0;
    w->r = NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

rcp_reply *rcp__waiter_fail(rcp__waiter *w, int code, const char *msg)
{
    w->r = rcp__reply_error_new(code, msg);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return w->r;
}

rcp_reply *rcp__waiter_wait(rcp__waiter *w, int send_rv, const char *what)
{
    if (send_rv != RCP_OK) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: %s", what, rcp_strerror(send_rv));
        return rcp__waiter_fail(w, send_rv, msg);
    }
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return w->r;
}

static void gather_resolve(rcp_future *f, rcp_reply *r)
{
    rcp__gather_slot *s = f->data;
    rcp__gather *g = s->g;
    rcp_reply *k = rcp_reply_keep(r);
    pthread_mutex_lock(&g->mu);
    s->r = k ? k : rcp__reply_error_new(RCP_ERR_OOM, "out of memory keeping a reply");
    if (--g->left == 0)
        pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void rcp__gather_init(rcp__gather *g, rcp__gather_slot *slots, size_t n)
{
    size_t i;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->left = n + 1;
    for (i = 0; i < n; i++) {
        memset(&slots[i], 0, sizeof slots[i]);
        slots[i].f.resolve = gather_resolve;
        slots[i].f.data = &slots[i];
        slots[i].g = g;
    }
}

void rcp__gather_refused(rcp__gather_slot *s, int code, const char *msg)
{
    rcp__gather *g = s->g;
    rcp_reply *r = rcp__reply_error_new(code, msg);
    pthread_mutex_lock(&g->mu);
    s->r = r;
    g->left--;
    pthread_mutex_unlock(&g->mu);
}

void rcp__gather_wait(rcp__gather *g)
{
    pthread_mutex_lock(&g->mu);
    g->left--;
    while (g->left > 0)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

rcp_reply *rcp__sync_refused_on_loop(void)
{
    if (!rcp__loop_on_thread())
        return NULL;
    return rcp__reply_error_new(RCP_ERR_INVALID,
                                "sync call from an I/O thread (a callback) would deadlock");
}

rcp_reply *rcp__waiter_start(rcp__waiter *w)
{
    rcp_reply *r = rcp__sync_refused_on_loop();
    if (!r)
        rcp__waiter_init(w);
    return r;
}
