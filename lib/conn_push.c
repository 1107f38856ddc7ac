/* lib/conn_push.c: push connections, for pub/sub. Commands are queued and
 * written like any other (the ring keeps what is written and what not,
 * for a failure), but their replies are not matched to them: after the
 * handshake every reply goes to the connection's push function, in the
 * order read. Written commands are retired from the ring at once, since
 * no reply will take their slot. */
#include <string.h>

#include "conn_int.h"
#include "reply.h"

static void push_sent(rcp_future *f, rcp_reply *r)
{
    (void)f;
    (void)r; /* a failure of the connection: its owner hears of it by event */
}

/* The future of every push command: no deadline, nothing to resolve. */
static rcp_future push_future = {.resolve = push_sent, .data = NULL, .timeout_ms = -1};

int rcp__conn_create_push(rcp__loop *loop, const rcp_conn_options *o, rcp__push_fn fn,
                          void *data, struct rcp_conn **out)
{
    rcp_conn_options po;
    int rv;
    if (!fn || !o)
        return RCP_ERR_INVALID;
    po = *o;
    po.fast_path = 0;
    po.io_timeout_ms = 0;
    rv = rcp__conn_create(loop, &po, 0, out);
    if (rv == RCP_OK) {
        rcp__mutex_lock(&(*out)->mu);
        (*out)->push_fn = fn;
        (*out)->push_data = data;
        rcp__mutex_unlock(&(*out)->mu);
    }
    return rv;
}

int rcp__conn_push_send(struct rcp_conn *c, const char *raw, size_t len)
{
    return rcp__conn_send_raw(c, &push_future, raw, len, 0);
}

int rcp__conn_push_dispatch(struct rcp_conn *c, rcp_reply **replies, size_t n)
{
    rcp_future *hs[128];
    size_t i, nhs = 0;
    if (n > sizeof hs / sizeof hs[0])
        n = sizeof hs / sizeof hs[0]; /* the caller hands at most DISPATCH_MAX */
    rcp__mutex_lock(&c->mu);
    /* The handshake's answers come first and take their slots. */
    while (nhs < n && c->head < c->hs_end && c->head < c->wr) {
        rcp__slot *s = &c->ring[c->head & c->mask];
        hs[nhs++] = s->f;
        s->f = NULL;
        c->head++;
    }
    conn_push_retire(c);
    if (c->space_waiters)
        rcp__cond_broadcast(&c->space_cv);
    rcp__mutex_unlock(&c->mu);
    conn_stat_add(&c->st.replies, n);
    for (i = 0; i < n; i++) {
        if (i < nhs) {
            if (hs[i]) {
                hs[i]->resolve(hs[i], replies[i]);
                rcp__reply_release(replies[i]);
            } else {
                rcp_reply_free(replies[i]);
            }
        } else {
            c->push_fn(c->push_data, replies[i]);
            rcp__reply_release(replies[i]);
        }
    }
    return 1;
}
