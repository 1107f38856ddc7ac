/* lib/conn_cancel.c: taking a request back (rcp_conn_cancel).
 *
 * Whoever takes a future out of the ring under the mutex resolves it: a
 * reply (rcp__conn_take_replies), a deadline (expire), a failure
 * (rcp__conn_fail), or this. So a cancel that finds the future in the
 * ring owns it, and one that does not is too late: exactly once either
 * way, with no state of its own.
 *
 * What can be taken back depends on the region (conn_int.h):
 *   [taken, tail) pending: its bytes are in the pending buffer, which is
 *                 only touched under the mutex: cut them and the slot out,
 *                 and the server never sees the command. Not a slot whose
 *                 first bytes were written (RCP__SLOT_PARTIAL), nor a
 *                 command whose ASKING has left (RCP__SLOT_GLUED): cutting
 *                 those would desynchronise the stream;
 *   [head, taken) taken by the writer (wbuf belongs to it, outside the
 *                 mutex) or written: the bytes go out whatever we do.
 *                 The slot stays without its future, like a timed-out
 *                 request's, so the late reply is read and dropped and the
 *                 replies stay matched to their requests (a streamed value
 *                 that arrives for it is discarded, conn_sink.c: its sink
 *                 is never touched). A value already streaming to its sink
 *                 cannot be stopped from here: too late. So is a request
 *                 whose value is being written from its source
 *                 (conn_source.c): its source is read until it resolves.
 * The future is resolved on the cancelling thread, after the mutex is
 * released: a cancel from a resolve callback (the loop thread) is as safe
 * as one from any other thread. */
#include <stdio.h>
#include <string.h>

#include "conn_int.h"

/* Cut pending requests out (conn_int.h). */
void rcp__conn_cut_pending(struct rcp_conn *c, uint64_t i, uint64_t j)
{
    size_t off = c->pend_off, len = 0;
    uint64_t k;
    for (k = c->taken; k < i; k++)
        off += c->ring[k & c->mask].len;
    for (k = i; k < j; k++) {
        rcp__slot *s = &c->ring[k & c->mask];
        len += s->len;
        if (s->sink) /* one sink fewer in the ring (conn_sink.c) */
            atomic_fetch_sub_explicit(&c->sinks, 1, memory_order_relaxed);
    }
    memmove(c->pend + off, c->pend + off + len, c->pend_len - off - len);
    c->pend_len -= len;
    if (c->pend_len == c->pend_off)
        c->pend_len = c->pend_off = 0;
    for (k = j; k < c->tail; k++)
        c->ring[(k - (j - i)) & c->mask] = c->ring[k & c->mask];
    c->tail -= j - i;
}

int rcp__conn_cancel(struct rcp_conn *c, rcp_future *f)
{
    uint64_t i;
    int rv;
    char msg[400];

    rcp__mutex_lock(&c->mu);
    /* From the tail: a request worth cancelling is most likely still
     * queued, at the end. */
    for (i = c->tail; i > c->head; i--)
        if (c->ring[(i - 1) & c->mask].f == f)
            break;
    if (i == c->head || (c->fast_active && i - 1 == c->fast_idx) ||
        (c->so.on && i - 1 == c->so.idx) || !rcp__conn_sink_abandon(c, i - 1, 0)) {
        /* Resolved or being resolved; or the sync caller on the socket's
         * own request (never an async future: it is not ours to take); or
         * its value is streaming to its sink on the socket's owner, which
         * alone could stop it: it is being resolved. Or its value is
         * being written from its source: the upload cannot stop in step,
         * and the source is read until it resolves. */
        rcp__mutex_unlock(&c->mu);
        return RCP_CANCEL_TOO_LATE;
    }
    i--;
    {
        rcp__slot *s = &c->ring[i & c->mask];
        uint64_t from = s->flags & RCP__SLOT_GLUED ? i - 1 : i;
        if (i >= c->taken && from >= c->taken && !(s->flags & RCP__SLOT_PARTIAL)) {
            rcp__conn_cut_pending(c, from, i + 1);
            rv = RCP_CANCEL_UNSENT;
        } else {
            s->f = NULL;
            rv = RCP_CANCEL_WRITTEN;
        }
    }
    if (c->space_waiters)
        rcp__cond_broadcast(&c->space_cv);
    rcp__mutex_unlock(&c->mu);
    if (rv == RCP_CANCEL_UNSENT)
        snprintf(msg, sizeof msg, "%s: cancelled before it was sent (never written)", c->addr);
    else
        snprintf(msg, sizeof msg,
                 "%s: cancelled after it was written (it may run; its reply is dropped)", c->addr);
    rcp__conn_resolve_error(f, RCP_ERR_CANCELLED, msg);
    return rv;
}

rcp_cancel_result rcp_conn_cancel(rcp_conn *c, rcp_future *f)
{
    int rv;
    /* The public sends mark the future with their handle (conn.c,
     * public_send): a future of another handle, or never sent, is the
     * caller's mistake, not a late cancel. */
    if (!c || !f || f->rcp__reserved[1] != (void *)c)
        return RCP_CANCEL_INVALID;
    rcp__conn_hold(c);
    rv = rcp__conn_cancel(c, f);
    rcp__conn_release(c);
    return (rcp_cancel_result)rv;
}
