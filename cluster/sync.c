/* cluster/sync.c: the sync path: the same routing and retry rules as the
 * async path, on the caller's own thread. On the node's connection a
 * caller that finds it idle does its own write and read (the lone-caller
 * path); callers that come meanwhile queue behind it and are written and
 * read for by whoever is on the socket (leader/follower, lib/conn_fast.c):
 * no hand-off to an I/O thread, one connection per node. Backoff sleeps
 * on the caller's thread. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "cache.h"
#include "clock.h"
#include "cluster_int.h"
#include "format.h"
#include "multi.h"
#include "reply.h"
#include "waiter.h"

static rcp_reply *sync_error_reply(int code, const char *why)
{
    char msg[300];
    if (why)
        return rcp__reply_error_new(code, why);
    snprintf(msg, sizeof msg, "request refused: %s", rcp_strerror(code));
    return rcp__reply_error_new(code, msg);
}

/* A plain sync request (no sink, no ASKING) whose node's shared
 * connection has one other caller on it, and no batching going on there,
 * takes an idle bulk connection of the same node and role for its own
 * write and read, instead of queueing behind that caller and sleeping
 * until it is woken (a futex wake and a wait per collision). Where writes
 * carry several commands, or two or more are outstanding, callers join
 * the queue (leader/follower): spares would thin those batches out. NULL:
 * nothing was sent; the caller queues on the shared one. */
static rcp_reply *sync_spill(struct rcp_cluster *cl, rcp__req *rq, rcp__node *node,
                             struct rcp_conn *conn)
{
    rcp_reply *r = rcp__conn_command_raw_sink(conn, rq->buf, rq->len, RCP__CONN_SPILL,
                                              rcp__req_remaining_ms(rq), NULL);
    struct rcp_conn *spare;
    if (r || !(spare = rcp__bulk_spare(cl, node, conn)))
        return r;
    r = rcp__conn_command_raw_sink(spare, rq->buf, rq->len, RCP__CONN_LONE,
                                   rcp__req_remaining_ms(rq), NULL);
    rcp__cluster_unpin(spare);
    if (r) {
        rcp__stat_add(&cl->bulk_requests, 1);
        rcp__stat_add(&node->bulk_requests, 1);
    }
    return r;
}

static rcp_reply *sync_run(struct rcp_cluster *cl, rcp__req *rq)
{
    rcp_reply *r = NULL;
    rcp__stat_add(&cl->st.requests, 1);
    for (;;) {
        rcp__node *node;
        struct rcp_conn *conn;
        int code = RCP_OK, act;
        uint64_t delay = 0;
        char msg[300];

        conn = rcp__route(cl, rq, &node, &code);
        if (!conn) {
            if (code == RCP_ERR_CLUSTER_DOWN) {
                rcp__cluster_refresh_soon(cl);
                if (rq->deadline && rcp__now_ns() + 20000000ull < rq->deadline) {
                    usleep(20000);
                    continue;
                }
                snprintf(msg, sizeof msg, "slot %u is not served by any node (hole in the slot map)",
                         rq->slot);
                return rcp__reply_error_new(RCP_ERR_CLUSTER_DOWN, msg);
            }
            r = rcp__reply_error_new(code, "no connection to the slot's node");
        } else {
            if (rq->src)
                r = rcp__conn_command_raw_source(conn, rq->buf, rq->len, rq->asking,
                                                 rcp__req_remaining_ms(rq), rq->src);
            else if (rq->sink || rq->asking || cl->opt.bulk_pool <= 0 ||
                     !(r = sync_spill(cl, rq, node, conn)))
                r = rcp__conn_command_raw_sink(conn, rq->buf, rq->len, rq->asking,
                                               rcp__req_remaining_ms(rq), rq->sink);
            rcp__cluster_unpin(conn);
        }
        act = rcp__retry_decide(cl, rq, node, r, &delay, &code, msg, sizeof msg);
        if (act == RCP__ACT_DONE)
            return r;
        if (act == RCP__ACT_FAIL) {
            rcp_reply_free(r);
            return rcp__reply_error_new(code, msg);
        }
        if (atomic_load(&cl->closing))
            return r;
        if (act == RCP__ACT_LATER) {
            if (rq->deadline && rcp__now_ns() + delay >= rq->deadline)
                return r; /* no time left: the last answer stands */
            rcp_reply_free(r);
            usleep((useconds_t)(delay / 1000));
            continue;
        }
        rcp_reply_free(r);
    }
}

/* Classify and take the command's route, waited for. fmtbuf: the bytes of
 * a printf-style call (argv points into it; freed here), or NULL. With a
 * sink, only a one-request command (as async_route). */
static rcp_reply *sync_route(struct rcp_cluster *cl, int timeout_ms, int argc, const char **argv,
                             const size_t *argvlen, char *fmtbuf, size_t fmtlen,
                             const rcp_sink *sink, const rcp_source *src, int cache_mode)
{
    rcp__req rq;
    const char *why;
    rcp_reply *r;
    int code;
    rcp__route_kind kind;
    char stackbuf[512];

    memset(&rq, 0, sizeof rq);
    rq.policy = -1;
    rq.sink = sink;
    rq.src = src;
    kind = src ? rcp__classify_source(cl, argc, argv, argvlen, &rq, &code, &why)
               : rcp__classify(cl, argc, argv, argvlen, &rq, &code, &why);
    if ((sink || src) && (kind == RCP__ROUTE_SPLIT || kind == RCP__ROUTE_BLOCKING)) {
        kind = RCP__ROUTE_REFUSED;
        code = RCP_ERR_UNSUPPORTED;
        why = "a streamed read or write must be one request to one node: not a multi-key "
              "command across slots, not a blocking command";
    }
    switch (kind) {
    case RCP__ROUTE_ONE:
        break;
    case RCP__ROUTE_SPLIT:
        r = rcp__multi_command(cl, -1, timeout_ms, argc, argv, argvlen);
        rcp__free(fmtbuf);
        return r;
    case RCP__ROUTE_BLOCKING:
        r = rcp__blocking_command(cl, &rq, timeout_ms, argc, argv, argvlen);
        rcp__free(fmtbuf);
        return r;
    default:
        rcp__free(fmtbuf);
        return sync_error_reply(code, why);
    }
    if (src) {
        /* The head only; the value streams from the source. */
        size_t max = cl->node_opt.max_request_bytes;
        rq.len = rcp__format_source_len(argc, argv, argvlen, src->len);
        if (src->len > max || rq.len + 2 > max - src->len)
            return sync_error_reply(RCP_ERR_TOO_LARGE, NULL);
        if (src->len <= RCP__SOURCE_INLINE) {
            /* Small: read now, sent as any request (lib/connection.h):
             * the shared pipeline, the lone-caller path; a redirect sends
             * the same bytes again. */
            char why[300];
            code = rcp__source_inline(argc, argv, argvlen, src, &rq.buf, &rq.len, why, sizeof why);
            if (code != RCP_OK)
                return sync_error_reply(code, why);
            rq.src = NULL;
        } else {
            rq.buf = rq.len <= sizeof stackbuf ? stackbuf : rcp__malloc(rq.len);
            if (!rq.buf)
                return sync_error_reply(RCP_ERR_OOM, NULL);
            rcp__format_source_write(rq.buf, argc, argv, argvlen, src->len);
        }
    } else if (fmtbuf) {
        rq.buf = fmtbuf;
        rq.len = fmtlen;
    } else if ((rq.len = rcp__format_try(stackbuf, sizeof stackbuf, argc, argv, argvlen))) {
        rq.buf = stackbuf; /* the common case: one pass, no length pass first */
    } else {
        rq.len = rcp__format_len(argc, argv, argvlen);
        if (rq.len > cl->node_opt.max_request_bytes)
            return sync_error_reply(RCP_ERR_TOO_LARGE, NULL);
        rq.buf = rcp__malloc(rq.len);
        if (!rq.buf)
            return sync_error_reply(RCP_ERR_OOM, NULL);
        rcp__format_write(rq.buf, argc, argv, argvlen);
    }
    if (rq.len > cl->node_opt.max_request_bytes) {
        if (rq.buf != stackbuf)
            rcp__free(rq.buf);
        return sync_error_reply(RCP_ERR_TOO_LARGE, NULL);
    }
    rq.deadline = rcp__req_deadline(cl, timeout_ms);
    if (!src && /* a read with a source (inline or not) is not cached */
        rcp__cache_eligible(cl, &rq, argc, cache_mode) &&
        (r = rcp__cache_command(cl, &rq, argv[1], argvlen ? argvlen[1] : strlen(argv[1])))) {
        rcp__stat_add(&cl->st.requests, 1);
        if (rq.buf != stackbuf)
            rcp__free(rq.buf);
        return r;
    }
    r = sync_run(cl, &rq);
    if (cl->cache && rq.has_slot && !(rq.flags & RCP__CMD_READONLY))
        rcp__cache_drop_raw(cl, rq.buf, rq.len); /* a read stored meanwhile saw the old value */
    if (rq.buf != stackbuf)
        rcp__free(rq.buf);
    return r;
}

/* The checks every sync entry makes; NULL if the call may go on. */
static rcp_reply *sync_refusal(rcp_cluster *cl, const char *what)
{
    char msg[200];
    if (!cl) {
        snprintf(msg, sizeof msg, "%s: NULL handle", what);
        return sync_error_reply(RCP_ERR_INVALID, msg);
    }
    return rcp__sync_refused_on_loop();
}

/* The argv entries, with or without a sink. */
static rcp_reply *sync_argv(rcp_cluster *cl, int timeout_ms, int argc, const char **argv,
                            const size_t *argvlen, const rcp_sink *sink, const rcp_source *src,
                            int cache_mode)
{
    rcp_reply *r;
    int i;
    if (cl && (argc < 1 || !argv))
        return sync_error_reply(RCP_ERR_INVALID, "rcp_cluster_command: NULL argv or argc < 1");
    for (i = 0; cl && i < argc; i++)
        if (!argv[i])
            return sync_error_reply(RCP_ERR_INVALID, "rcp_cluster_command: NULL argument");
    if (cl && sink && rcp__sink_check(sink) != RCP_OK)
        return sync_error_reply(RCP_ERR_INVALID, "rcp_cluster_command_argv_sink: invalid sink");
    if ((r = sync_refusal(cl, "rcp_cluster_command")))
        return r;
    atomic_fetch_add(&cl->active_calls, 1);
    r = sync_route(cl, timeout_ms, argc, argv, argvlen, NULL, 0, sink, src, cache_mode);
    atomic_fetch_sub(&cl->active_calls, 1);
    return r;
}

rcp_reply *rcp_cluster_command_argv_timeout(rcp_cluster *cl, int timeout_ms, int argc,
                                            const char **argv, const size_t *argvlen)
{
    return sync_argv(cl, timeout_ms, argc, argv, argvlen, NULL, NULL, RCP_CACHE_DEFAULT);
}

rcp_reply *rcp_cluster_command_argv_cache(rcp_cluster *cl, int mode, int timeout_ms, int argc,
                                          const char **argv, const size_t *argvlen)
{
    if (mode < RCP_CACHE_DEFAULT || mode > RCP_CACHE_BYPASS)
        return sync_error_reply(RCP_ERR_INVALID,
                                "rcp_cluster_command_argv_cache: mode is not an rcp_cache_mode");
    return sync_argv(cl, timeout_ms, argc, argv, argvlen, NULL, NULL, mode);
}

rcp_reply *rcp_cluster_command_argv(rcp_cluster *cl, int argc, const char **argv,
                                    const size_t *argvlen)
{
    return sync_argv(cl, 0, argc, argv, argvlen, NULL, NULL, RCP_CACHE_DEFAULT);
}

rcp_reply *rcp_cluster_command_argv_sink(rcp_cluster *cl, int argc, const char **argv,
                                         const size_t *argvlen, const rcp_sink *sink)
{
    if (!sink)
        return sync_error_reply(RCP_ERR_INVALID, "rcp_cluster_command_argv_sink: NULL sink");
    return sync_argv(cl, 0, argc, argv, argvlen, sink, NULL, RCP_CACHE_DEFAULT);
}

rcp_reply *rcp_cluster_command_argv_source(rcp_cluster *cl, int argc, const char **argv,
                                           const size_t *argvlen, const rcp_source *src)
{
    if (cl && rcp__source_check(src) != RCP_OK)
        return sync_error_reply(RCP_ERR_INVALID, "rcp_cluster_command_argv_source: invalid source");
    return sync_argv(cl, 0, argc, argv, argvlen, NULL, src, RCP_CACHE_DEFAULT);
}

rcp_reply *rcp_cluster_commandv_timeout(rcp_cluster *cl, int timeout_ms, const char *fmt,
                                        va_list ap)
{
    rcp__fmt_cmd cmd;
    const char *why;
    rcp_reply *r;
    int rv;
    if ((r = sync_refusal(cl, "rcp_cluster_command")))
        return r;
    atomic_fetch_add(&cl->active_calls, 1);
    rv = rcp__format_command(&cmd, fmt, ap, &why);
    if (rv != RCP_OK)
        r = sync_error_reply(rv, why);
    else
        r = sync_route(cl, timeout_ms, cmd.argc, cmd.argv, cmd.argvlen, cmd.buf, cmd.len, NULL,
                       NULL, RCP_CACHE_DEFAULT);
    atomic_fetch_sub(&cl->active_calls, 1);
    return r;
}

rcp_reply *rcp_cluster_commandv(rcp_cluster *cl, const char *fmt, va_list ap)
{
    return rcp_cluster_commandv_timeout(cl, 0, fmt, ap);
}

rcp_reply *rcp_cluster_command(rcp_cluster *cl, const char *fmt, ...)
{
    va_list ap;
    rcp_reply *r;
    va_start(ap, fmt);
    r = rcp_cluster_commandv_timeout(cl, 0, fmt, ap);
    va_end(ap);
    return r;
}

rcp_reply *rcp_cluster_command_timeout(rcp_cluster *cl, int timeout_ms, const char *fmt, ...)
{
    va_list ap;
    rcp_reply *r;
    va_start(ap, fmt);
    r = rcp_cluster_commandv_timeout(cl, timeout_ms, fmt, ap);
    va_end(ap);
    return r;
}
