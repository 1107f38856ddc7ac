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
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "cluster_int.h"
#include "format.h"
#include "multi.h"
#include "reply.h"

rcp__cfut *rcp__cfut_get(struct rcp_cluster *cl)
{
    rcp__cfut *cf;
    pthread_mutex_lock(&cl->cf_mu);
    cf = cl->cf_free;
    if (!cf)
        cf = atomic_exchange_explicit(&cl->cf_back, NULL, memory_order_acquire);
    if (cf) {
        cl->cf_free = cf->next_free;
        atomic_fetch_sub_explicit(&cl->cf_nfree, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&cl->cf_mu);
    if (!cf && !(cf = rcp__malloc(sizeof(*cf))))
        return NULL;
    memset(cf, 0, offsetof(rcp__cfut, inl));
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

static void cfut_finish(rcp__cfut *cf, rcp_reply *r)
{
    rcp_future *u = cf->user;
    struct rcp_cluster *cl = cf->cl;
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

/* The refresher says a delayed retry is due (or the handle closes). */
static void cfut_fire(rcp__later *l, int closing)
{
    rcp__cfut *cf = (rcp__cfut *)((char *)l - offsetof(rcp__cfut, later));
    if (closing) {
        cfut_fail(cf, RCP_ERR_CLOSED, "cluster handle closed before a retry");
    } else if (cf->rq.deadline && rcp__now_ns() >= cf->rq.deadline) {
        char msg[800], last[600] = "";
        struct rcp_conn *lc = cf->rq.last ? rcp__node_pin_any(cf->rq.last) : NULL;
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

static void cfut_later(rcp__cfut *cf, uint64_t delay)
{
    cf->later.fire = cfut_fire;
    if (rcp__later_add(cf->cl, &cf->later, delay, cf->rq.deadline) < 0)
        cfut_fail(cf, RCP_ERR_CLOSED, "cluster handle closed before a retry");
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
        conn = rcp__route(cl, &cf->rq, &node, &code);
        if (!conn) {
            rcp_reply r;
            char msg[200];
            uint64_t delay = 0;
            int act;
            if (code == RCP_ERR_CLUSTER_DOWN) {
                rcp__cluster_refresh_soon(cl);
                if (cf->rq.deadline && rcp__now_ns() + 20000000ull < cf->rq.deadline) {
                    cfut_later(cf, 20000000ull); /* wait for a map that covers it */
                    return RCP_OK;
                }
                snprintf(msg, sizeof msg, "slot %u is not served by any node (hole in the slot map)",
                         cf->rq.slot);
                cfut_fail(cf, RCP_ERR_CLUSTER_DOWN, msg);
                return RCP_OK;
            }
            rcp__reply_error_init(&r, code, "no connection to the node");
            act = rcp__retry_decide(cl, &cf->rq, node, &r, &delay, &code, msg, sizeof msg);
            if (act == RCP__ACT_LATER) {
                cfut_later(cf, delay);
                return RCP_OK;
            }
            snprintf(msg, sizeof msg, "%.150s: no connection to the slot's node",
                     node ? node->addr : "?");
            cfut_fail(cf, RCP_ERR_NOT_SENT, msg);
            return RCP_OK;
        }
        cf->inner.data = node;
        /* The deadline as it is kept, in ns: no conversion per attempt. */
        rv = rcp__conn_send_raw_sink(conn, &cf->inner, cf->rq.buf, cf->rq.len, cf->rq.asking,
                                     cf->rq.deadline, cf->rq.sink);
        if (rv == RCP_OK) {
            rcp__cluster_unpin(conn);
            return RCP_OK;
        }
        {
            rcp_reply r;
            char msg[300], why[1000], last[600];
            uint64_t delay = 0;
            int act;
            rcp__conn_last_error(conn, last, sizeof last);
            rcp__cluster_unpin(conn);
            rcp__reply_error_init(&r, rv, rcp_strerror(rv));
            act = rcp__retry_decide(cl, &cf->rq, node, &r, &delay, &code, msg, sizeof msg);
            if (act == RCP__ACT_LATER) {
                cfut_later(cf, delay);
                return RCP_OK;
            }
            if (act != RCP__ACT_RESEND) {
                if (first && (rv == RCP_ERR_QUEUE_FULL || rv == RCP_ERR_TOO_LARGE)) {
                    /* The caller's own limit: its answer, now. */
                    rcp__cfut_put(cl, cf);
                    atomic_fetch_sub(&cl->active_calls, 1);
                    return rv;
                }
                snprintf(why, sizeof why, "%s (after %d retries; last failure of %s)",
                         rcp_strerror(rv), cf->rq.retries, last);
                cfut_fail(cf, rv, why);
                return RCP_OK;
            }
        }
    }
}

void rcp__cfut_submit(rcp__cfut *cf)
{
    cfut_submit(cf, 0);
}

void rcp__cfut_on_reply(rcp_future *f, rcp_reply *r)
{
    rcp__cfut *cf = (rcp__cfut *)f;
    struct rcp_cluster *cl = cf->cl;
    uint64_t delay = 0;
    int code = RCP_OK;
    char msg[300];
    int act = rcp__retry_decide(cl, &cf->rq, (rcp__node *)f->data, r, &delay, &code, msg,
                                sizeof msg);
    if (act == RCP__ACT_DONE) {
        cfut_finish(cf, r);
    } else if (act == RCP__ACT_FAIL) {
        cfut_fail(cf, code, msg);
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

int rcp__async_send(struct rcp_cluster *cl, rcp_future *f, rcp__cfut *cf)
{
    int rv;
    cf->inner.resolve = rcp__cfut_on_reply;
    cf->user = f;
    cf->cl = cl;
    cf->rq.deadline = rcp__req_deadline(cl, f->timeout_ms);
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
    if (fmtbuf) {
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
    return rcp__async_send(cl, f, cf);
}

/* Classify and take the command's route. fmtbuf: the formatted bytes of a
 * printf-style call (argv points into it; freed here), or NULL. A request
 * is classified straight into the wrapped future that will carry it. With
 * a sink, only a one-request command: a split or blocking one is refused
 * (RCP_ERR_UNSUPPORTED). */
static int async_route(struct rcp_cluster *cl, rcp_future *f, int policy, int argc,
                       const char **argv, const size_t *argvlen, char *fmtbuf, size_t fmtlen,
                       const rcp_sink *sink)
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
    kind = rcp__classify(cl, argc, argv, argvlen, &cf->rq, &code, &why);
    cf->rq.sink = sink;
    if (kind == RCP__ROUTE_ONE)
        return async_one(cl, f, cf, argc, argv, argvlen, fmtbuf, fmtlen);
    if (sink && kind != RCP__ROUTE_REFUSED) {
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
    return async_route(cl, f, policy, argc, argv, argvlen, NULL, 0, NULL);
}

/* The argv entries, with or without a sink. */
static int send_argv(rcp_cluster *cl, rcp_future *f, int policy, int argc, const char **argv,
                     const size_t *argvlen, const rcp_sink *sink)
{
    int i;
    if (!cl || !f || !f->resolve || argc < 1 || !argv || policy < -1 || policy > RCP_READ_NEAREST)
        return RCP_ERR_INVALID;
    for (i = 0; i < argc; i++)
        if (!argv[i])
            return RCP_ERR_INVALID;
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    return async_route(cl, f, policy, argc, argv, argvlen, NULL, 0, sink);
}

int rcp_cluster_send_argv_policy(rcp_cluster *cl, rcp_future *f, int policy, int argc,
                                 const char **argv, const size_t *argvlen)
{
    return send_argv(cl, f, policy, argc, argv, argvlen, NULL);
}

int rcp_cluster_send_argv(rcp_cluster *cl, rcp_future *f, int argc, const char **argv,
                          const size_t *argvlen)
{
    return send_argv(cl, f, -1, argc, argv, argvlen, NULL);
}

int rcp_cluster_send_argv_sink(rcp_cluster *cl, rcp_future *f, int argc, const char **argv,
                               const size_t *argvlen, const rcp_sink *sink)
{
    if (rcp__sink_check(sink) != RCP_OK)
        return RCP_ERR_INVALID;
    return send_argv(cl, f, -1, argc, argv, argvlen, sink);
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
    return async_route(cl, f, -1, cmd.argc, cmd.argv, cmd.argvlen, cmd.buf, cmd.len, NULL);
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
