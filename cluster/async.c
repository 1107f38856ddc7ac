/* cluster/async.c: the async path.
 *
 * A request is classified once (classify.c), formatted once (into its
 * wrapped future's inline buffer when small, so a request costs no
 * allocation once the handle's free list is warm), routed (route.c) and
 * queued on a node connection. Its answer, on an I/O thread, goes through
 * the retry rules (retry.c): done, resend now (MOVED/ASK) or later (on
 * the refresher's queue, refresh.c). The user's future is resolved once.
 *
 * The contract is the connection's: an error return means the future is
 * never called. That includes a first attempt the connection refuses for
 * the caller's own reasons (RCP_ERR_QUEUE_FULL with RCP_QUEUE_FAIL,
 * RCP_ERR_TOO_LARGE); once a request is accepted, every later failure
 * (retries exhausted, timeout, handle closed, a refusal on a resend)
 * comes through the future. */
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "cache.h"
#include "clock.h"
#include "cluster_int.h"
#include "format.h"
#include "multi.h"
#include "reply.h"

/* cf_busy (cluster_int.h): taken for the few instructions of a pop; a
 * sender that finds it taken yields, in case its holder was preempted. */
static void cf_lock(struct rcp_cluster *cl)
{
    while (atomic_exchange_explicit(&cl->cf_busy, 1, memory_order_acquire))
        while (atomic_load_explicit(&cl->cf_busy, memory_order_relaxed))
            sched_yield();
}

rcp__cfut *rcp__cfut_get(struct rcp_cluster *cl)
{
    rcp__cfut *cf;
    cf_lock(cl);
    cf = cl->cf_free;
    if (!cf)
        cf = atomic_exchange_explicit(&cl->cf_back, NULL, memory_order_acquire);
    if (cf) {
        cl->cf_free = cf->next_free;
        atomic_fetch_sub_explicit(&cl->cf_nfree, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&cl->cf_busy, 0, memory_order_release);
    if (!cf && !(cf = rcp__malloc(sizeof(*cf))))
        return NULL;
    /* Zero what a new request must find zero (its future for the
     * connection, the retry state, the bytes a refusal frees, the cancel
     * flag), not the whole header: user and cl are set by every sender
     * (async_send, batch.c) before a read, later by cfut_later and
     * rcp__later_add, next_free by rcp__cfut_put. Of rq, every sender sets
     * policy, sink and src, then rcp__classify flags, has_slot and slot,
     * then the format len and buf, then async_send the deadline (batch.c
     * copies a whole rq it zeroed itself). */
    cf->inner = (rcp_future){0};
    cf->rq.buf = NULL;
    cf->rq.len = 0;
    cf->rq.redirects = cf->rq.retries = 0;
    cf->rq.target = cf->rq.last = NULL;
    cf->rq.asking = 0;
    atomic_store_explicit(&cf->cancelled, 0, memory_order_relaxed);
    return cf;
}

void rcp__cfut_put(struct rcp_cluster *cl, rcp__cfut *cf)
{
    rcp__cfut *head;
    if (cf->rq.buf != cf->inl)
        rcp__free(cf->rq.buf);
    /* Counted before it is visible, so a sender's decrement never comes
     * first and the count never wraps; the cap is approximate. */
    if (atomic_load_explicit(&cl->cf_nfree, memory_order_relaxed) >= RCP__CFUT_CACHE_MAX) {
        rcp__free(cf);
        return;
    }
    atomic_fetch_add_explicit(&cl->cf_nfree, 1, memory_order_relaxed);
    head = atomic_load_explicit(&cl->cf_back, memory_order_relaxed);
    do
        cf->next_free = head;
    while (!atomic_compare_exchange_weak_explicit(&cl->cf_back, &head, cf, memory_order_release,
                                                  memory_order_relaxed));
}

/* ---- cancel's link from the user's future to its cfut ----
 *
 * rcp_cluster_cancel is given the user's future; the request is its cfut,
 * which moves between a node connection's ring, the refresher's queue of
 * delayed retries and the threads in between, and goes back to the free
 * list (or is freed) once resolved. The user's future links to it:
 * rcp__reserved[0] is the cfut, rcp__pad says whether that link is live.
 * A canceller makes it HELD while it looks for the request: the cfut
 * cannot be given back meanwhile (cfut_unlink waits, a few hundred ns at
 * most, unless the canceller is the thread resolving it). The values are
 * words unlikely to be found in a future's memory by chance: a future
 * never sent on a handle answers TOO_LATE. */
enum { CF_LINK_NONE = 0, CF_LINK_LIVE = 0x4c495645, CF_LINK_HELD = 0x48454c44 };

/* The cfut this thread holds for a cancel, and whether it resolved it
 * itself meanwhile (through the connection's cancel, on this thread). */
struct cancel_hold {
    rcp__cfut *cf;
    int finished;
};
static _Thread_local struct cancel_hold cancelling;

static void cfut_link(rcp__cfut *cf)
{
    rcp_future *u = cf->user;
    if (u == &cf->cl->forget)
        return; /* shared by every thread: not cancellable */
    u->rcp__reserved[0] = cf;
    __atomic_store_n(&u->rcp__pad, CF_LINK_LIVE, __ATOMIC_RELEASE);
}

/* Before cf is given back: no canceller may look at it after this. */
static void cfut_unlink(rcp__cfut *cf)
{
    rcp_future *u = cf->user;
    if (u == &cf->cl->forget)
        return;
    for (;;) {
        int v = CF_LINK_LIVE;
        if (__atomic_compare_exchange_n(&u->rcp__pad, &v, CF_LINK_NONE, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE) ||
            v != CF_LINK_HELD)
            return;
        if (cancelling.cf == cf) {
            /* The canceller is this thread: it resolves the request now. */
            __atomic_store_n(&u->rcp__pad, CF_LINK_NONE, __ATOMIC_RELEASE);
            cancelling.finished = 1;
            return;
        }
        sched_yield();
    }
}

/* Inline: the end of every request, on the I/O thread's reply path. */
static inline __attribute__((always_inline)) void cfut_finish(rcp__cfut *cf, rcp_reply *r)
{
    rcp_future *u = cf->user;
    struct rcp_cluster *cl = cf->cl;
    cfut_unlink(cf);
    rcp__cfut_put(cl, cf);
    u->resolve(u, r);
    /* Only now may rcp_cluster_close go on: the callback has returned. */
    atomic_fetch_sub(&cl->active_calls, 1);
}

static void cfut_fail(rcp__cfut *cf, int code, const char *msg)
{
    rcp_reply r;
    rcp__reply_error_init(&r, code, msg);
    cfut_finish(cf, &r);
}

static void hole_fail(rcp__cfut *cf)
{
    char msg[200];
    snprintf(msg, sizeof msg, "slot %u is not served by any node (hole in the slot map)",
             cf->rq.slot);
    cfut_fail(cf, RCP_ERR_CLUSTER_DOWN, msg);
}

/* The refresher says a delayed retry is due (or the handle closes). */
static void cfut_fire(rcp__later *l, int closing)
{
    rcp__cfut *cf = (rcp__cfut *)((char *)l - offsetof(rcp__cfut, later));
    if (closing) {
        cfut_fail(cf, RCP_ERR_CLOSED, "cluster handle closed before a retry");
    } else if (cf->rq.deadline && rcp__now_ns() >= cf->rq.deadline) {
        char msg[800], last[600] = "";
        struct rcp_conn *lc;
        /* Waiting for a map that covers its slot, and fired late (a busy
         * refresher): the slot is still a hole, and that is the answer. */
        if (!rcp__route_master(cf->cl, &cf->rq)) {
            hole_fail(cf);
            return;
        }
        lc = cf->rq.last ? rcp__node_pin_any(cf->rq.last) : NULL;
        if (lc) {
            rcp__conn_last_error(lc, last, sizeof last);
            rcp__cluster_unpin(lc);
        }
        snprintf(msg, sizeof msg,
                 "request timed out while waiting to be retried (after %d retries%s%s)",
                 cf->rq.retries, last[0] ? "; last failure of " : "", last);
        cfut_fail(cf, RCP_ERR_TIMEOUT, msg);
    } else {
        rcp__cfut_submit(cf);
    }
}

static const char cancelled_msg[] = "cancelled while waiting to be retried (not sent again)";

static void cfut_later(rcp__cfut *cf, uint64_t delay)
{
    cf->later.fire = cfut_fire;
    if (rcp__later_add(cf->cl, &cf->later, delay, cf->rq.deadline) < 0) {
        cfut_fail(cf, RCP_ERR_CLOSED, "cluster handle closed before a retry");
        return;
    }
    /* A cancel that came while we held it did not find it queued: it is
     * ours to take back (unless the refresher took it first: then
     * cfut_submit sees the flag). */
    if (atomic_load(&cf->cancelled) && rcp__later_remove(cf->cl, &cf->later))
        cfut_fail(cf, RCP_ERR_CANCELLED, cancelled_msg);
}

/* submit_failed's answer: route and send the request again now. */
enum { SUBMIT_AGAIN = -1 };

/* An attempt of cfut_submit did not go out: no connection for it (conn
 * NULL, code says why) or the connection refused it (rv; conn pinned).
 * The retry rules decide: SUBMIT_AGAIN, or cfut_submit's return value
 * (cf resolved, queued for later or given back). Out of line, so that
 * the attempt that goes out pays no frame for the messages built here. */
static __attribute__((noinline)) int submit_failed(rcp__cfut *cf, int first,
                                                   struct rcp_conn *conn, rcp__node *node,
                                                   int code, int rv)
{
    struct rcp_cluster *cl = cf->cl;
    rcp_reply r;
    char msg[300], why[1000], last[600];
    uint64_t delay = 0;
    int act;
    if (!conn) {
        if (code == RCP_ERR_CLUSTER_DOWN) {
            rcp__cluster_refresh_soon(cl);
            if (cf->rq.deadline && rcp__now_ns() + 20000000ull < cf->rq.deadline) {
                cfut_later(cf, 20000000ull); /* wait for a map that covers it */
                return RCP_OK;
            }
            hole_fail(cf);
            return RCP_OK;
        }
        rcp__reply_error_init(&r, code, "no connection to the node");
        act = rcp__retry_decide(cl, &cf->rq, node, &r, &delay, &code, msg, 200);
        if (act == RCP__ACT_LATER) {
            cfut_later(cf, delay);
            return RCP_OK;
        }
        snprintf(msg, 200, "%.150s: no connection to the slot's node", node ? node->addr : "?");
        cfut_fail(cf, RCP_ERR_NOT_SENT, msg);
        return RCP_OK;
    }
    rcp__conn_last_error(conn, last, sizeof last);
    rcp__cluster_unpin(conn);
    rcp__reply_error_init(&r, rv, rcp_strerror(rv));
    act = rcp__retry_decide(cl, &cf->rq, node, &r, &delay, &code, msg, sizeof msg);
    if (act == RCP__ACT_LATER) {
        cfut_later(cf, delay);
        return RCP_OK;
    }
    if (act == RCP__ACT_RESEND)
        return SUBMIT_AGAIN;
    if (first && (rv == RCP_ERR_QUEUE_FULL || rv == RCP_ERR_TOO_LARGE)) {
        /* The caller's own limit: its answer, now. */
        cfut_unlink(cf);
        rcp__cfut_put(cl, cf);
        atomic_fetch_sub(&cl->active_calls, 1);
        return rv;
    }
    snprintf(why, sizeof why, "%s (after %d retries; last failure of %s)", rcp_strerror(rv),
             cf->rq.retries, last);
    cfut_fail(cf, rv, why);
    return RCP_OK;
}

/* Send (or resend) a wrapped future; never blocks on an I/O thread. On
 * the first attempt (`first`), a refusal that no retry can mend is
 * returned instead of resolving the future (and cf is given back);
 * otherwise RCP_OK and the future is resolved once, now or later. */
static int cfut_submit(rcp__cfut *cf, int first)
{
    struct rcp_cluster *cl = cf->cl;
    rcp__node *node;
    struct rcp_conn *conn;
    int code = RCP_OK, rv;

    for (;;) {
        if (atomic_load(&cf->cancelled)) {
            cfut_fail(cf, RCP_ERR_CANCELLED, cancelled_msg); /* never sent again */
            return RCP_OK;
        }
        conn = rcp__route(cl, &cf->rq, &node, &code);
        rv = RCP_OK;
        if (conn) {
            /* Read by a canceller on another thread: the node to look in. */
            __atomic_store_n(&cf->inner.data, node, __ATOMIC_RELAXED);
            /* The deadline as it is kept, in ns: no conversion per attempt. */
            if (cf->rq.src)
                rv = rcp__conn_send_raw_source(conn, &cf->inner, cf->rq.buf, cf->rq.len,
                                               cf->rq.asking, cf->rq.deadline, cf->rq.src);
            else
                rv = rcp__conn_send_raw_sink(conn, &cf->inner, cf->rq.buf, cf->rq.len,
                                             cf->rq.asking, cf->rq.deadline, cf->rq.sink);
            if (rv == RCP_OK) {
                rcp__cluster_unpin(conn);
                return RCP_OK;
            }
        }
        rv = submit_failed(cf, first, conn, node, code, rv);
        if (rv != SUBMIT_AGAIN)
            return rv;
    }
}

void rcp__cfut_submit(rcp__cfut *cf)
{
    cfut_submit(cf, 0);
}

/* rcp__cfut_on_reply for an error reply, or any reply on a handle with
 * a client-side cache: out of line, so that the common end of a request
 * pays no frame for the retry rules' message. */
static __attribute__((noinline)) void on_reply_slow(rcp_future *f, rcp_reply *r)
{
    rcp__cfut *cf = (rcp__cfut *)f;
    struct rcp_cluster *cl = cf->cl;
    uint64_t delay = 0;
    int code = RCP_OK;
    char msg[300];
    /* Anything but an error is the answer (rcp__retry_decide's first
     * rule): its call, which only resets the redirect state of a request
     * given back now, is skipped. */
    int act = r->type != RCP_REPLY_ERROR
                  ? RCP__ACT_DONE
                  : rcp__retry_decide(cl, &cf->rq, (rcp__node *)f->data, r, &delay, &code, msg,
                                      sizeof msg);
    if (act == RCP__ACT_DONE) {
        if (cl->cache && cf->rq.has_slot && !(cf->rq.flags & RCP__CMD_READONLY))
            rcp__cache_drop_raw(cl, cf->rq.buf, cf->rq.len); /* as sync.c */
        cfut_finish(cf, r);
    } else if (act == RCP__ACT_FAIL) {
        cfut_fail(cf, code, msg);
    } else if (atomic_load(&cf->cancelled)) {
        cfut_fail(cf, RCP_ERR_CANCELLED, cancelled_msg); /* no retry after a cancel */
    } else if (atomic_load(&cl->closing)) {
        cfut_finish(cf, r);
    } else if (act == RCP__ACT_LATER) {
        if (cf->rq.deadline && rcp__now_ns() + delay >= cf->rq.deadline)
            cfut_finish(cf, r); /* no time left: the last answer stands */
        else
            cfut_later(cf, delay);
    } else {
        rcp__cfut_submit(cf);
    }
}

void rcp__cfut_on_reply(rcp_future *f, rcp_reply *r)
{
    rcp__cfut *cf = (rcp__cfut *)f;
    /* Anything but an error is the answer (rcp__retry_decide's first
     * rule); with no cache to keep in step, the request ends here. */
    if (r->type != RCP_REPLY_ERROR && !cf->cl->cache) {
        cfut_finish(cf, r);
        return;
    }
    on_reply_slow(f, r);
}

/* Sends the request classified and formatted into cf->rq (its buf owned
 * from here: freed unless it is cf->inl), cf from rcp__cfut_get. RCP_OK
 * and f resolved once, or an error and f never called. Static (used only
 * here), so that it is inlined into the request path. */
static int async_send(struct rcp_cluster *cl, rcp_future *f, rcp__cfut *cf)
{
    int rv;
    cf->inner.resolve = rcp__cfut_on_reply;
    cf->user = f;
    cf->cl = cl;
    cf->rq.deadline = rcp__req_deadline(cl, f->timeout_ms);
    cfut_link(cf);
    atomic_fetch_add(&cl->active_calls, 1);
    /* From here the future is resolved exactly once, unless the first
     * attempt is refused for the caller's own reasons (returned). */
    rv = cfut_submit(cf, 1);
    if (rv == RCP_OK)
        rcp__stat_add(&cl->st.requests, 1);
    return rv;
}

/* A classified one-request command (its routing in cf->rq): formatted
 * into cf (argv, straight into the inline bytes when it fits; or the
 * bytes a format produced: fmtbuf, owned from here) and sent. */
static int async_one(struct rcp_cluster *cl, rcp_future *f, rcp__cfut *cf, int argc,
                     const char **argv, const size_t *argvlen, char *fmtbuf, size_t fmtlen)
{
    rcp__req *rq = &cf->rq;
    if (rq->src) {
        /* The head only; the value streams from the source. */
        size_t max = cl->node_opt.max_request_bytes;
        rq->len = rcp__format_source_len(argc, argv, argvlen, rq->src->len);
        if (rq->src->len > max || rq->len + 2 > max - rq->src->len) {
            rcp__cfut_put(cl, cf);
            return RCP_ERR_TOO_LARGE;
        }
        rq->buf = rq->len <= RCP__CFUT_INLINE ? cf->inl : rcp__malloc(rq->len);
        if (!rq->buf) {
            rcp__cfut_put(cl, cf);
            return RCP_ERR_OOM;
        }
        rcp__format_source_write(rq->buf, argc, argv, argvlen, rq->src->len);
    } else if (fmtbuf) {
        rq->buf = fmtbuf; /* given back with cf */
        rq->len = fmtlen;
    } else if ((rq->len = rcp__format_try(cf->inl, RCP__CFUT_INLINE, argc, argv, argvlen))) {
        rq->buf = cf->inl;
    } else {
        rq->len = rcp__format_len(argc, argv, argvlen);
        if (rq->len <= cl->node_opt.max_request_bytes && !(rq->buf = rcp__malloc(rq->len))) {
            rcp__cfut_put(cl, cf);
            return RCP_ERR_OOM;
        }
        if (rq->buf)
            rcp__format_write(rq->buf, argc, argv, argvlen);
    }
    if (rq->len > cl->node_opt.max_request_bytes) {
        rcp__cfut_put(cl, cf);
        return RCP_ERR_TOO_LARGE;
    }
    return async_send(cl, f, cf);
}

/* Classify and take the command's route. fmtbuf: the formatted bytes of a
 * printf-style call (argv points into it; freed here), or NULL. A request
 * is classified straight into the wrapped future that will carry it. With
 * a sink, only a one-request command: a split or blocking one is refused
 * (RCP_ERR_UNSUPPORTED). */
static int async_route(struct rcp_cluster *cl, rcp_future *f, int policy, int argc,
                       const char **argv, const size_t *argvlen, char *fmtbuf, size_t fmtlen,
                       const rcp_sink *sink, const rcp_source *src)
{
    rcp__req rq;
    rcp__cfut *cf;
    const char *why;
    int code, rv;
    rcp__route_kind kind;

    cf = rcp__cfut_get(cl);
    if (!cf) {
        rcp__free(fmtbuf);
        return RCP_ERR_OOM;
    }
    cf->rq.policy = policy;
    cf->rq.sink = sink;
    cf->rq.src = src;
    kind = src ? rcp__classify_source(cl, argc, argv, argvlen, &cf->rq, &code, &why)
               : rcp__classify(cl, argc, argv, argvlen, &cf->rq, &code, &why);
    if (kind == RCP__ROUTE_ONE)
        return async_one(cl, f, cf, argc, argv, argvlen, fmtbuf, fmtlen);
    if ((sink || src) && kind != RCP__ROUTE_REFUSED) {
        kind = RCP__ROUTE_REFUSED;
        code = RCP_ERR_UNSUPPORTED;
    }
    rq = cf->rq;
    rcp__cfut_put(cl, cf);
    switch (kind) {
    case RCP__ROUTE_SPLIT:
        rv = rcp__multi_send(cl, f, policy, argc, argv, argvlen);
        break;
    case RCP__ROUTE_BLOCKING:
        rv = rcp__blocking_send(cl, f, &rq, argc, argv, argvlen);
        break;
    default:
        rv = code;
        break;
    }
    rcp__free(fmtbuf);
    return rv;
}

int rcp__async_argv(struct rcp_cluster *cl, rcp_future *f, int policy, int argc,
                    const char **argv, const size_t *argvlen)
{
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    return async_route(cl, f, policy, argc, argv, argvlen, NULL, 0, NULL, NULL);
}

/* The argv entries, with or without a sink. */
static int send_argv(rcp_cluster *cl, rcp_future *f, int policy, int argc, const char **argv,
                     const size_t *argvlen, const rcp_sink *sink, const rcp_source *src)
{
    int i;
    if (!cl || !f || !f->resolve || argc < 1 || !argv || policy < -1 || policy > RCP_READ_NEAREST)
        return RCP_ERR_INVALID;
    for (i = 0; i < argc; i++)
        if (!argv[i])
            return RCP_ERR_INVALID;
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    return async_route(cl, f, policy, argc, argv, argvlen, NULL, 0, sink, src);
}

int rcp_cluster_send_argv_policy(rcp_cluster *cl, rcp_future *f, int policy, int argc,
                                 const char **argv, const size_t *argvlen)
{
    return send_argv(cl, f, policy, argc, argv, argvlen, NULL, NULL);
}

int rcp_cluster_send_argv(rcp_cluster *cl, rcp_future *f, int argc, const char **argv,
                          const size_t *argvlen)
{
    return send_argv(cl, f, -1, argc, argv, argvlen, NULL, NULL);
}

int rcp_cluster_send_argv_sink(rcp_cluster *cl, rcp_future *f, int argc, const char **argv,
                               const size_t *argvlen, const rcp_sink *sink)
{
    if (rcp__sink_check(sink) != RCP_OK)
        return RCP_ERR_INVALID;
    return send_argv(cl, f, -1, argc, argv, argvlen, sink, NULL);
}

int rcp_cluster_send_argv_source(rcp_cluster *cl, rcp_future *f, int argc, const char **argv,
                                 const size_t *argvlen, const rcp_source *src)
{
    if (rcp__source_check(src) != RCP_OK)
        return RCP_ERR_INVALID;
    return send_argv(cl, f, -1, argc, argv, argvlen, NULL, src);
}

int rcp_cluster_sendv(rcp_cluster *cl, rcp_future *f, const char *fmt, va_list ap)
{
    rcp__fmt_cmd cmd;
    const char *why;
    int rv;
    if (!cl || !f || !f->resolve)
        return RCP_ERR_INVALID;
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    rv = rcp__format_command(&cmd, fmt, ap, &why);
    if (rv != RCP_OK)
        return rv;
    return async_route(cl, f, -1, cmd.argc, cmd.argv, cmd.argvlen, cmd.buf, cmd.len, NULL, NULL);
}

int rcp_cluster_send(rcp_cluster *cl, rcp_future *f, const char *fmt, ...)
{
    va_list ap;
    int rv;
    va_start(ap, fmt);
    rv = rcp_cluster_sendv(cl, f, fmt, ap);
    va_end(ap);
    return rv;
}

/* ---- cancel ---- */

/* Look for cf's request on the connections of the node it was last sent
 * to (as master or as replica, shared or bulk); the connection resolves it on this
 * thread when it finds it. */
static int cancel_on_node(rcp__cfut *cf)
{
    rcp__node *node = __atomic_load_n(&cf->inner.data, __ATOMIC_RELAXED);
    int role, rv = RCP_CANCEL_TOO_LATE;
    for (role = RCP__AS_MASTER; node && role <= RCP__AS_REPLICA && rv == RCP_CANCEL_TOO_LATE;
         role++) {
        struct rcp_conn *conn = rcp__cluster_pin(node, role);
        if (conn) {
            rv = rcp__conn_cancel(conn, &cf->inner);
            rcp__cluster_unpin(conn);
        }
    }
    if (node && rv == RCP_CANCEL_TOO_LATE)
        rv = rcp__bulk_cancel(node, &cf->inner);
    return rv;
}

rcp_cancel_result rcp_cluster_cancel(rcp_cluster *cl, rcp_future *f)
{
    rcp__cfut *cf;
    int v = CF_LINK_LIVE, rv;
    struct cancel_hold saved = cancelling;

    if (!cl || !f)
        return RCP_CANCEL_INVALID;
    if (!__atomic_compare_exchange_n(&f->rcp__pad, &v, CF_LINK_HELD, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return RCP_CANCEL_TOO_LATE; /* resolved, or another cancel is at it */
    cf = f->rcp__reserved[0];
    if (cf->cl != cl) {
        __atomic_store_n(&f->rcp__pad, CF_LINK_LIVE, __ATOMIC_RELEASE);
        return RCP_CANCEL_INVALID;
    }
    cancelling.cf = cf;
    cancelling.finished = 0;
    /* Set before looking: whoever holds the request between two places
     * (a reply being judged, a retry being sent) sees it and never sends
     * it again; one sent meanwhile is found on its connection. */
    atomic_store(&cf->cancelled, 1);
    if (rcp__later_remove(cl, &cf->later)) {
        cfut_fail(cf, RCP_ERR_CANCELLED, cancelled_msg);
        rv = RCP_CANCEL_UNSENT;
    } else {
        rv = cancel_on_node(cf);
    }
    if (!cancelling.finished)
        __atomic_store_n(&f->rcp__pad, CF_LINK_LIVE, __ATOMIC_RELEASE);
    cancelling = saved;
    return (rcp_cancel_result)rv;
}

/* ---- fire and forget ---- */

static void forget_resolve(rcp_future *f, rcp_reply *r)
{
    struct rcp_cluster *cl = f->data;
    if (r->type == RCP_REPLY_ERROR)
        rcp__stat_add(&cl->st.forgotten_errors, 1);
}

void rcp__forget_init(struct rcp_cluster *cl)
{
    memset(&cl->forget, 0, sizeof cl->forget);
    cl->forget.resolve = forget_resolve;
    cl->forget.data = cl;
}

int rcp_cluster_send_forget_argv(rcp_cluster *cl, int argc, const char **argv,
                                 const size_t *argvlen)
{
    return cl ? rcp_cluster_send_argv(cl, &cl->forget, argc, argv, argvlen) : RCP_ERR_INVALID;
}

int rcp_cluster_send_forget(rcp_cluster *cl, const char *fmt, ...)
{
    va_list ap;
    int rv;
    if (!cl)
        return RCP_ERR_INVALID;
    va_start(ap, fmt);
    rv = rcp_cluster_sendv(cl, &cl->forget, fmt, ap);
    va_end(ap);
    return rv;
}
