/* lib/conn_io.c: the loop's side of a connection. When notified (a caller
 * opened a flush) or when the socket is ready, the loop takes the pending
 * requests as one flush (capped in commands and bytes), writes it with as
 * few send() calls as the socket allows, reads replies with the hiredis
 * reader until EAGAIN and resolves their futures in order, outside the
 * mutex. Timers (deadlines, reconnect, connect and I/O timeouts, the flush
 * pause of batch_delay_us) run here too. The connection is a loop source:
 * rcp__conn_src_ops is all the loop knows of it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "alloc.h"
#include "clock.h"
#include "conn_int.h"
#include "reply.h"

#define DISPATCH_MAX 128

void rcp__conn_resolve_error(rcp_future *f, int code, const char *msg)
{
    rcp_reply r;
    rcp__reply_error_init(&r, code, msg);
    f->resolve(f, &r);
}

int rcp__conn_reader_failure(struct rcp_conn *c, char *cause, size_t len)
{
    if (c->reply_too_large || c->budget.exceeded) {
        snprintf(cause, len, "reply larger than max_reply_bytes (%zu bytes)",
                 c->opt.max_reply_bytes);
        return RCP_ERR_TOO_LARGE;
    }
    if (c->reader->err == REDIS_ERR_OOM) {
        snprintf(cause, len, "out of memory reading a reply");
        return RCP_ERR_OOM;
    }
    snprintf(cause, len, "protocol error: %s", c->reader->errstr);
    return RCP_ERR_PROTOCOL;
}

/* Loop thread: resolve requests whose deadline passed. */
static void expire(struct rcp_conn *c, uint64_t now)
{
    char msg[400];
    uint64_t i, n = 0, min = UINT64_MAX;
    int drop = 0;
    rcp__mutex_lock(&c->mu);
    if (c->min_deadline > now) {
        rcp__mutex_unlock(&c->mu);
        return;
    }
    for (i = c->head; i < c->tail; i++) {
        rcp__slot *s = &c->ring[i & c->mask];
        if (!s->f || !s->deadline || (c->fast_active && i == c->fast_idx))
            continue;
        if (s->deadline <= now && s->src && i >= c->taken) {
            /* A source not started: take it out of the queue, or its
             * source would be read after its future resolved; with the
             * ASKING glued to it, which is never taken without it
             * (rcp__conn_take_flush). The later slots move down: look
             * at the first of those cut again. */
            uint64_t from = s->flags & RCP__SLOT_GLUED ? i - 1 : i;
            c->scratch[n++] = s->f;
            rcp__conn_cut_pending(c, from, i + 1);
            i = from - 1;
            continue;
        }
        if (s->deadline <= now && c->so.on && i == c->so.idx) {
            /* Its upload cannot stop in step: drop the connection. */
            c->scratch[n++] = s->f;
            s->f = NULL;
            drop = 1;
            continue;
        }
        if (s->deadline <= now) {
            /* A value streaming to its sink: the loop switches it to
             * discard; on a caller's thread it completes there. */
            if (!rcp__conn_sink_abandon(c, i, !c->fast_active))
                continue;
            c->scratch[n++] = s->f;
            s->f = NULL;
        } else if (s->deadline < min) {
            min = s->deadline;
        }
    }
    c->min_deadline = min;
    if (n && c->space_waiters)
        rcp__cond_broadcast(&c->space_cv);
    rcp__mutex_unlock(&c->mu);
    if (!n)
        return;
    conn_stat_add(&c->st.timeouts, n);
    snprintf(msg, sizeof msg, "%s: request timed out (no reply before its deadline)", c->addr);
    for (i = 0; i < n; i++)
        rcp__conn_resolve_error(c->scratch[i], RCP_ERR_TIMEOUT, msg);
    if (drop)
        rcp__conn_fail(c, RCP_ERR_IO,
                       "a request's deadline passed while its source was being written (an "
                       "upload cannot stop without desynchronising the connection)");
}

/* ------------------------------------------------------------------ */
/* the pending buffer: callers append to it, the flush takes from it    */

/* Compacts the bytes the flushes took (pend_off) away and grows the
 * buffer as needed; conn_int.h's rcp__conn_pend_reserve calls it only
 * when there is something to do. */
int rcp__conn_pend_grow(struct rcp_conn *c, size_t len)
{
    size_t used = c->pend_len - c->pend_off;
    if (c->pend_off && (c->pend_off >= c->pend_cap / 2 || c->pend_len + len > c->pend_cap)) {
        memmove(c->pend, c->pend + c->pend_off, used);
        c->pend_len = used;
        c->pend_off = 0;
    }
    if (c->pend_len + len > c->pend_cap) {
        size_t n = c->pend_cap ? c->pend_cap : 4096;
        char *p;
        while (n < c->pend_len + len)
            n *= 2;
        p = rcp__realloc(c->pend, n);
        if (!p)
            return -1;
        c->pend = p;
        c->pend_cap = n;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* the flush: write what callers queued                               */

int rcp__conn_take_flush(struct rcp_conn *c, uint64_t limit, int sources)
{
    uint64_t i = c->taken, n = 0;
    size_t bytes = 0;
    const rcp_source *src = NULL;
    while (i < limit && n < c->opt.max_batch_commands) {
        const rcp__slot *s = &c->ring[i & c->mask];
        size_t l = s->len;
        if ((s->src && !sources) || (n && bytes + l > c->opt.max_batch_bytes))
            break;
        if (s->flags & RCP__SLOT_ASKS_SOURCE) {
            /* An ASKING and the source request glued to it go in one
             * flush: an ASKING written alone would leave the source
             * request cut out by a deadline or a cancel (pending), and
             * the ASKING then applying to whatever came next. */
            size_t l2 = c->ring[(i + 1) & c->mask].len;
            if (!sources || i + 2 > limit ||
                (n && (bytes + l + l2 > c->opt.max_batch_bytes ||
                       n + 2 > c->opt.max_batch_commands)))
                break;
            bytes += l + l2;
            i += 2;
            n += 2;
            src = c->ring[(i - 1) & c->mask].src;
            break;
        }
        bytes += l;
        i++;
        n++;
        if (s->src) {
            src = s->src; /* its value follows its head: nothing after it */
            break;
        }
    }
    if (!n)
        return 1;
    if (c->pend_off == 0 && bytes == c->pend_len) {
        /* The common case: take the whole buffer without copying. */
        char *t = c->wbuf;
        size_t tc = c->wcap;
        c->wbuf = c->pend;
        c->wcap = c->pend_cap;
        c->pend = t;
        c->pend_cap = tc;
        c->pend_len = 0;
    } else {
        if (bytes > c->wcap) {
            char *p = rcp__realloc(c->wbuf, bytes);
            if (!p)
                return 0;
            c->wbuf = p;
            c->wcap = bytes;
        }
        memcpy(c->wbuf, c->pend + c->pend_off, bytes);
        c->pend_off += bytes;
        if (c->pend_off == c->pend_len)
            c->pend_off = c->pend_len = 0;
    }
    c->wlen = bytes;
    c->woff = 0;
    c->wslot_off = 0;
    c->taken = i;
    if (src) {
        rcp__conn_source_reset(c);
        c->so.on = 1;
        c->so.idx = i - 1;
        c->so.src = src;
    }
    conn_stat_add(&c->st.batches, 1); /* the stat keeps its API name: one flush */
    conn_stat_add(&c->st.commands_written, n);
    conn_note_flush(c, n);
    return 1;
}

/* Loop thread: listen for data again before writing or reading. */
static void arm(struct rcp_conn *c)
{
    if (!c->armed && c->fd >= 0 && rcp__loop_rearm(c->loop, c->fd, &c->src, 1) == 0)
        __atomic_store_n(&c->armed, 1, __ATOMIC_RELAXED);
}

int rcp__conn_account_written(struct rcp_conn *c)
{
    uint64_t wr = c->wr, stop = c->taken;
    size_t off = c->wslot_off;
    int lowered = 0;
    /* A source slot's head is out before its value: it stops the count. */
    if (c->so.on && c->so.idx >= wr && c->so.idx < stop)
        stop = c->so.idx;
    while (wr < stop && c->woff >= off + c->ring[wr & c->mask].len)
        off += c->ring[wr++ & c->mask].len;
    if (wr == c->wr)
        return 0;
    if (c->head == c->wr) {
        c->last_read_ns = rcp__now_ns(); /* the I/O timeout counts from here */
        lowered = conn_arm_io_timer(c);
    }
    c->wslot_off = off;
    c->wr = wr;
    if (c->opt.cork)
        atomic_store_explicit(&c->unheard, 1, memory_order_relaxed);
    return lowered;
}

/* Loop thread, before the first write after a lone caller had the socket
 * (the loop was not listening for data meanwhile). With nothing in flight,
 * any byte already waiting answers no request: the connection cannot be
 * trusted (our flush, not written yet, fails with RCP_ERR_NOT_SENT). A
 * closed socket is found the same way. Returns 0 if the connection was
 * failed. */
static int stray_check(struct rcp_conn *c)
{
    int pk, idle;
    rcp__mutex_lock(&c->mu);
    idle = c->head == c->wr && !c->push_fn; /* a push connection hears unasked */
    rcp__mutex_unlock(&c->mu);
    if (!idle || c->fd < 0)
        return 1;
    pk = conn_peek_idle(c);
    if (pk > 0) {
        rcp__conn_fail(c, RCP_ERR_PROTOCOL, "protocol error: a reply arrived with no request waiting for it");
        return 0;
    }
    if (pk == 0) {
        char cause[512];
        conn_io_cause(c, c->tls && rcp__tls_why(c)[0] ? CONN_IO_TLS : 0, "read", cause, sizeof cause);
        rcp__conn_fail(c, RCP_ERR_IO, cause);
        return 0;
    }
    return 1;
}

/* Loop thread. Write what can be written. Returns 0 if the connection
 * failed (already handled), 2 if all is out and the pass gave up the
 * socket (loop_io cleared), else 1. */
static int do_write(struct rcp_conn *c)
{
    int rounds;
    for (rounds = 0; rounds < 8; rounds++) {
        uint64_t now = 0;
        int rv;
        rcp__mutex_lock(&c->mu);
        if (c->wlen == c->woff && !c->so.on) {
            if (c->state != RCP__ST_READY && c->state != RCP__ST_HANDSHAKE) {
                rcp__mutex_unlock(&c->mu);
                return 1;
            }
            if (c->opt.batch_delay_us && c->taken < c->tail && c->flush_opened_ns) {
                now = rcp__now_ns();
                if (now < c->flush_opened_ns + (uint64_t)c->opt.batch_delay_us * 1000) {
                    /* Let the flush fill; the timer writes it. */
                    c->wake_pending = 1;
                    conn_set_timer(c, c->flush_opened_ns + (uint64_t)c->opt.batch_delay_us * 1000);
                    rcp__mutex_unlock(&c->mu);
                    return 1;
                }
            }
            if (!rcp__conn_take_flush(c, c->state == RCP__ST_READY ? c->tail : c->hs_end, 1)) {
                rcp__mutex_unlock(&c->mu);
                rcp__conn_fail(c, RCP_ERR_IO, "out of memory taking a flush");
                return 0;
            }
            if (c->taken == c->tail) {
                c->wake_pending = 0;
                c->flush_opened_ns = 0;
            }
        }
        rcp__mutex_unlock(&c->mu);
        if (c->wlen == c->woff && !c->so.on)
            return 1;
        if (!c->armed && !stray_check(c))
            return 0;
        arm(c);
        rv = conn_write_some(c, c->wbuf, c->wlen, &c->woff);
        if (rv == CONN_IO_DONE && c->so.on)
            rv = rcp__conn_source_write(c); /* the flush ends with a source's head */
        if (rv == CONN_IO_ERR || rv == CONN_IO_SHORT) {
            char cause[512];
            if (rv == CONN_IO_SHORT)
                snprintf(cause, sizeof cause, "%s", c->so.why);
            else
                conn_io_cause(c, CONN_IO_ERR, "write", cause, sizeof cause);
            /* Account what was fully written before failing. */
            rcp__mutex_lock(&c->mu);
            rcp__conn_account_written(c);
            rcp__mutex_unlock(&c->mu);
            rcp__conn_fail(c, RCP_ERR_IO, cause);
            return 0;
        }
        rcp__mutex_lock(&c->mu);
        if (rv == CONN_IO_DONE)
            c->so.on = 0; /* a source's value, if any, is out: its slot is written */
        rcp__conn_account_written(c);
        conn_push_retire(c);
        if (c->woff == c->wlen && !c->so.on)
            c->wlen = c->woff = c->wslot_off = 0;
        if (rv == CONN_IO_YIELD)
            c->wake_pending = 1;
        if (rv == CONN_IO_DONE && !c->wlen && c->taken == c->tail) {
            /* All out and nothing queued meanwhile: what the next round
             * would find and do (an empty take), without its mutex round.
             * The pass is done with the socket: it gives it up here
             * (loop_io) rather than in one more round in conn_process. */
            if (c->state == RCP__ST_READY || c->state == RCP__ST_HANDSHAKE) {
                c->wake_pending = 0;
                c->flush_opened_ns = 0;
            }
            c->loop_io = 0;
            rcp__mutex_unlock(&c->mu);
            return 2;
        }
        rcp__mutex_unlock(&c->mu);
        if (rv == CONN_IO_YIELD) {
            /* A large value: let the loop serve reads and other
             * connections, then come back. */
            conn_ring_loop(c);
            return 1;
        }
        if (c->wlen) {
            /* Socket full: writability calls us back. */
            rcp__loop_want_write(c->loop, c->fd, &c->src);
            return 1;
        }
    }
    /* Still more queued: come back after serving reads. */
    rcp__mutex_lock(&c->mu);
    c->wake_pending = 1;
    rcp__mutex_unlock(&c->mu);
    conn_ring_loop(c);
    return 1;
}

/* A sending thread writes (conn_int.h). Like do_write, without the parts
 * that cannot apply: the connection is READY, armed and idle, no flush
 * pause, no TLS (its session is the loop's alone), no push connection.
 * Up to a few flushes: requests that other threads queue meanwhile ride
 * along (their sends do not ring while caller_writing is set). */
void rcp__conn_caller_flush(struct rcp_conn *c, int lowered)
{
    int rounds, rv = CONN_IO_DONE, ring;
    char cause[512];

    cause[0] = 0;
    conn_stat_add(&c->st.caller_writes, 1);
    c->caller_writing = 1;
    for (rounds = 0; rounds < 4; rounds++) {
        if (!rcp__conn_take_flush(c, c->tail, 0)) {
            snprintf(cause, sizeof cause, "out of memory taking a flush");
            break;
        }
        if (c->wlen == c->woff)
            break;
        rcp__mutex_unlock(&c->mu);
        rv = conn_write_some(c, c->wbuf, c->wlen, &c->woff);
        if (rv == CONN_IO_ERR)
            conn_io_cause(c, CONN_IO_ERR, "write", cause, sizeof cause);
        rcp__mutex_lock(&c->mu);
        lowered |= rcp__conn_account_written(c);
        if (rv != CONN_IO_DONE)
            break; /* the loop writes the rest (writability) or fails */
        c->wlen = c->woff = c->wslot_off = 0;
    }
    if (cause[0]) {
        c->need_close = 1;
        c->close_code = RCP_ERR_IO;
        snprintf(c->close_msg, sizeof c->close_msg, "%s", cause);
    }
    c->caller_writing = 0;
    ring = rv != CONN_IO_DONE || cause[0] || c->taken < c->tail || c->loop_deferred;
    c->loop_deferred = 0;
    if (ring)
        c->wake_pending = 1;
    rcp__mutex_unlock(&c->mu);
    if (ring || lowered)
        conn_ring_loop(c);
}

/* ------------------------------------------------------------------ */
/* reading and dispatching replies                                     */

size_t rcp__conn_take_replies(struct rcp_conn *c, rcp_future **futs, size_t n)
{
    size_t i, late = 0;
    for (i = 0; i < n && c->head < c->wr; i++) {
        rcp__slot *s = &c->ring[c->head & c->mask];
        futs[i] = s->f;
        s->f = NULL;
        if (!futs[i])
            late++;
        if (s->sink) {
            s->sink = NULL;
            atomic_fetch_sub_explicit(&c->sinks, 1, memory_order_relaxed);
        }
        c->head++;
    }
    if (c->space_waiters)
        rcp__cond_broadcast(&c->space_cv);
    conn_stat_add(&c->st.replies, i);
    if (late)
        conn_stat_add(&c->st.late_replies, late);
    return i;
}

void rcp__conn_resolve_taken(rcp_future **futs, rcp_reply **replies, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (futs[k]) {
            futs[k]->resolve(futs[k], replies[k]);
            rcp__reply_release(replies[k]);
        } else {
            rcp_reply_free(replies[k]);
        }
    }
}

int rcp__conn_dispatch(struct rcp_conn *c, rcp_reply **replies, size_t n)
{
    rcp_future *futs[DISPATCH_MAX];
    size_t i;
    if (c->push_fn)
        return rcp__conn_push_dispatch(c, replies, n);
    rcp__mutex_lock(&c->mu);
    i = rcp__conn_take_replies(c, futs, n);
    rcp__mutex_unlock(&c->mu);
    rcp__conn_resolve_taken(futs, replies, i);
    for (size_t k = i; k < n; k++)
        rcp_reply_free(replies[k]);
    return i == n;
}

/* Loop thread. Read until EAGAIN. Returns 0 if the connection failed. */
/* until_eagain 0: a plain-text read shorter than the buffer ends the pass,
 * since it emptied the socket at that moment and any byte that comes later
 * is a new edge (epoll) or still readable (a level-triggered application
 * loop): one recv per pass instead of a second one that only says EAGAIN.
 * 1: read until EAGAIN (a hang-up or error was reported, which comes once;
 * the connection comes back from a lone caller; TLS, where OpenSSL may
 * hold decrypted bytes). */
static int do_read(struct rcp_conn *c, int until_eagain)
{
    rcp_reply *replies[DISPATCH_MAX];
    size_t n = 0;
    until_eagain |= c->tls != NULL;
    for (;;) {
        ssize_t r = conn_recv_feed(c, MSG_DONTWAIT);
        if (r > 0) {
            void *rep;
            c->last_read_ns = rcp__now_ns();
            for (;;) {
                rep = NULL;
                if (conn_get_reply(c, c->head + n, &rep) != REDIS_OK)
                    goto protocol;
                if (!rep)
                    break;
                replies[n++] = rep;
                if (n == DISPATCH_MAX) {
                    if (!rcp__conn_dispatch(c, replies, n)) {
                        n = 0;
                        goto extra;
                    }
                    n = 0;
                }
            }
            if (!until_eagain && (size_t)r < c->rbuf_cap)
                break;
            continue;
        }
        if (r == CONN_IO_BAD)
            goto protocol;
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n && !rcp__conn_dispatch(c, replies, n))
            goto extra;
        {
            char cause[512];
            conn_io_cause(c, r, "read", cause, sizeof cause);
            rcp__conn_fail(c, RCP_ERR_IO, cause);
        }
        return 0;
    }
    if (n && !rcp__conn_dispatch(c, replies, n))
        goto extra;
    return 1;
protocol : {
    char cause[200];
    if (n && !rcp__conn_dispatch(c, replies, n))
        goto extra;
    rcp__conn_fail(c, rcp__conn_reader_failure(c, cause, sizeof cause), cause);
    return 0;
}
extra:
    rcp__conn_fail(c, RCP_ERR_PROTOCOL, "protocol error: a reply arrived with no request waiting for it");
    return 0;
}

/* ------------------------------------------------------------------ */
/* the connection as a loop source                                     */

/* What a pass acts on, read with the mutex held by conn_process in the
 * same critical section that claims the socket for the loop (loop_io):
 * one mutex round per pass fewer. The cause is copied only for a close. */
typedef struct serve_snap {
    int state, need_close, code, need_read, closing;
    char cause[512];
} serve_snap;

static int serve(struct rcp_conn *c, uint32_t events, serve_snap *sn);

/* The loop's entry: readiness of the socket, or 0 when notified. */
static void conn_process(rcp__loop_src *src, uint32_t events)
{
    struct rcp_conn *c = conn_of_src(src);
    serve_snap sn;
    rcp__mutex_lock(&c->mu);
    if (c->fast_active) {
        /* A lone caller owns the socket right now; it hands back. If the
         * socket woke us for its reply, stop listening for data until we
         * write again: a lone caller should cost the loop nothing. Under
         * the mutex: a sender that sees `armed` counts on the loop
         * hearing its reply. */
        if ((events & RCP__EV_READ) && c->armed && c->fd >= 0 &&
            rcp__loop_rearm(c->loop, c->fd, &c->src, 0) == 0)
            __atomic_store_n(&c->armed, 0, __ATOMIC_RELAXED);
        /* A hang-up (often in the same segment as the caller's reply) is
         * an edge we will not get again, and the caller stops reading at
         * its reply: read it once the caller leaves (fast_leave rings). */
        if (events & (RCP__EV_ERR | RCP__EV_HUP | RCP__EV_RDHUP))
            c->need_read = 1;
        rcp__mutex_unlock(&c->mu);
        return;
    }
    if (c->caller_writing) {
        /* A sending thread is writing: it rings when it is done. What woke
         * us (a reply, a hang-up) is read then, until EAGAIN. */
        if (events & (RCP__EV_READ | RCP__EV_ERR | RCP__EV_HUP | RCP__EV_RDHUP)) {
            c->need_read = 1;
            c->loop_deferred = 1;
        } else if (!events) {
            c->loop_deferred = 1; /* notified: a close, a pending flush */
        }
        rcp__mutex_unlock(&c->mu);
        return;
    }
    /* While the loop may read, no caller may take the fast path: both
     * would read the same socket. */
    c->loop_io = 1;
    sn.state = c->state;
    sn.need_close = c->need_close;
    sn.need_read = c->need_read;
    c->need_read = 0;
    sn.code = c->close_code;
    if (sn.need_close)
        memcpy(sn.cause, c->close_msg, sizeof sn.cause);
    /* Closing also finishes a connection that is already CLOSED (an
     * RCP__CONN_ONCE one whose session ended): rcp_conn_close waits for
     * `closed`, which only the failure path sets. */
    sn.closing = c->closing && !c->closed;
    if (sn.closing) {
        sn.need_close = 1;
        sn.code = RCP_ERR_CLOSED;
        snprintf(sn.cause, sizeof sn.cause, "handle closed");
    }
    if (!(c->wake_pending && c->flush_opened_ns))
        c->wake_pending = 0;
    rcp__mutex_unlock(&c->mu);
    if (serve(c, events, &sn))
        return; /* do_write gave the socket up (loop_io) already */
    rcp__mutex_lock(&c->mu);
    c->loop_io = 0;
    rcp__mutex_unlock(&c->mu);
}

static int serve(struct rcp_conn *c, uint32_t events, serve_snap *sn)
{
    int state = sn->state, need_read = sn->need_read, wrote;

    if (state == RCP__ST_CLOSED && !sn->closing)
        return 0;
    if (sn->need_close) {
        rcp__conn_fail(c, sn->code, sn->cause);
        return 0;
    }
    if (state == RCP__ST_DISCONNECTED)
        return 0;
    if (state == RCP__ST_CONNECTING && !rcp__conn_finish_connect(c, events))
        return 0;
    if (need_read)
        arm(c);
    if (events & (RCP__EV_READ | RCP__EV_ERR | RCP__EV_HUP | RCP__EV_RDHUP) || need_read) {
        if (!do_read(c, need_read || (events & (RCP__EV_ERR | RCP__EV_HUP | RCP__EV_RDHUP))))
            return 0;
        /* Only the loop thread changes the state: once READY there is no
         * handshake left to finish, and no mutex round to pay per read. */
        if ((c->hs_failed || __atomic_load_n(&c->state, __ATOMIC_RELAXED) != RCP__ST_READY) &&
            !rcp__conn_check_handshake(c))
            return 0;
    }
    if (events && c->loop->batch_pass && __atomic_load_n(&c->state, __ATOMIC_RELAXED) == RCP__ST_READY) {
        /* Other sockets of this pass may have replies whose callbacks
         * send here: write once, when the pass is over (loop.h). */
        rcp__loop_notify(c->loop, &c->src);
        return 0;
    }
    wrote = do_write(c);
    if (wrote)
        rcp__conn_offer_lead(c);
    return wrote == 2;
}

static uint64_t next_timer(struct rcp_conn *c)
{
    return atomic_load_explicit(&c->timer_at, memory_order_relaxed);
}

static uint64_t conn_next_timer(rcp__loop_src *src)
{
    return next_timer(conn_of_src(src));
}

/* Loop thread: deadlines, the reconnect, the connect and I/O timeouts, the
 * end of a flush pause. Returns the next time it wants to run. */
static uint64_t conn_timers(rcp__loop_src *src, uint64_t now)
{
    struct rcp_conn *c = conn_of_src(src);
    uint64_t next = UINT64_MAX;
    int state, closing, fast, writer, flush = 0, wake_flush;
    uint64_t waiting, last_read;

    atomic_store_explicit(&c->timer_at, UINT64_MAX, memory_order_relaxed);
    expire(c, now);

    rcp__mutex_lock(&c->mu);
    state = c->state;
    closing = c->closing; /* rcp_conn_close sets it, under the mutex */
    fast = c->fast_active;
    writer = c->caller_writing;
    last_read = c->last_read_ns; /* a sending thread sets it too, under the mutex */
    waiting = c->wr - c->head;
    wake_flush = c->wake_pending && c->flush_opened_ns;
    if (c->min_deadline < next)
        next = c->min_deadline;
    rcp__mutex_unlock(&c->mu);

    if (state == RCP__ST_CLOSED)
        return UINT64_MAX;
    if (state == RCP__ST_DISCONNECTED) {
        if (closing)
            return UINT64_MAX;
        if (now >= c->reconnect_at) {
            rcp__conn_start_connect(c);
            /* It set the connect deadline: the queued requests' own
             * deadlines (next) still count. */
            conn_set_timer(c, next);
            return next_timer(c);
        }
        if (c->reconnect_at < next)
            next = c->reconnect_at;
    } else if (state == RCP__ST_CONNECTING || state == RCP__ST_HANDSHAKE) {
        if (now >= c->connect_deadline && !fast) {
            char cause[160];
            if (state == RCP__ST_CONNECTING && c->tls)
                snprintf(cause, sizeof cause,
                         "TLS handshake timed out (no TLS answer within connect_timeout_ms %d; a "
                         "plain-text server on this port, or a stopped one?)",
                         c->opt.connect_timeout_ms);
            else
                snprintf(cause, sizeof cause, "connect/handshake timed out");
            rcp__conn_fail(c, RCP_ERR_CONNECT, cause);
            return next_timer(c);
        }
        if (c->connect_deadline < next)
            next = c->connect_deadline;
    } else if (state == RCP__ST_READY && waiting && c->opt.io_timeout_ms > 0 && !fast) {
        uint64_t limit = last_read + conn_ms_to_ns(c->opt.io_timeout_ms);
        if (now >= limit && writer) {
            /* A sending thread is on the socket for a moment: look again. */
            limit = now + conn_ms_to_ns(1);
        } else if (now >= limit) {
            char cause[120];
            snprintf(cause, sizeof cause, "I/O timeout: no reply byte for %d ms", c->opt.io_timeout_ms);
            rcp__conn_fail(c, RCP_ERR_IO, cause);
            return next_timer(c);
        }
        if (limit < next)
            next = limit;
    }
    if (wake_flush) {
        uint64_t due = 0;
        rcp__mutex_lock(&c->mu);
        if (c->wake_pending && c->flush_opened_ns) {
            due = c->flush_opened_ns + (uint64_t)c->opt.batch_delay_us * 1000;
            if (now >= due) {
                c->flush_opened_ns = 0;
                flush = 1;
            }
        }
        rcp__mutex_unlock(&c->mu);
        if (flush)
            conn_process(&c->src, 0);
        else if (due && due < next)
            next = due;
    }
    conn_set_timer(c, next);
    return next_timer(c);
}

const rcp__loop_src_ops rcp__conn_src_ops = {conn_process, conn_next_timer, conn_timers};
