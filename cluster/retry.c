/* cluster/retry.c: what an attempt's answer means, for every kind of
 * request (async, sync, batch part, split part, blocking command,
 * transaction, WATCH): done, follow a MOVED (and patch the shared map),
 * follow an ASK (ASKING sent adjacent to the command), back off and try
 * again (one capped schedule for all), or fail with a clear error. The
 * counters of redirects and retries are kept here, in one place.
 *
 * The rules (docs/cluster.md):
 *   - MOVED: record the slot's new owner in the current map at once (a
 *     per-slot atomic store), ask for a refresh, resend there;
 *   - ASK: resend there with ASKING; pin the slot to its master for reads
 *     while it migrates;
 *   - TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY: back off and
 *     retry (refreshing where the topology may have changed), up to
 *     max_retries, within the deadline;
 *   - not sent: back off, resend anywhere;
 *   - written, then the connection failed: resend only a read-only
 *     command; a write may have been applied and is never sent twice, a
 *     streamed read may have given part of its value to its sink;
 *   - a streamed write (rq->src): every answer of a server came after
 *     the whole value. A replayable source (rcp__source_replayable) is
 *     pulled again from byte 0 for a MOVED, ASK, TRYAGAIN and the like,
 *     as any request is sent again; any other is sent again only when not
 *     a byte of it was pulled (not sent, no connection), and those
 *     answers are recorded (the map learns) but handed to the caller;
 *   - anything else: the caller's answer. */
#include <stdio.h>

#include <urcu-bp.h>

#include "clock.h"
#include "cluster_int.h"

int rcp__retry_decide(struct rcp_cluster *cl, rcp__req *rq, rcp__node *asked, const rcp_reply *r,
                      uint64_t *delay_ns, int *code, char *msg, size_t msglen)
{
    rcp__redirect rd;
    uint64_t backoff;

    rq->asking = 0;
    rq->target = NULL;
    if (asked)
        rq->last = asked;
    backoff = 10000000ull << (rq->retries < 6 ? rq->retries : 6); /* 10 ms .. 640 ms */
    if (r->type != RCP_REPLY_ERROR)
        return RCP__ACT_DONE;

    if (r->err != RCP_ERR_SERVER) {
        /* Client-side: what was (maybe) written decides. */
        if (atomic_load(&cl->closing))
            return RCP__ACT_DONE;
        switch (r->err) {
        case RCP_ERR_NOT_SENT:
            rcp__stat_add(&cl->st.not_sent, 1);
            rcp__cluster_refresh_soon(cl);
            if (++rq->retries > cl->opt.max_retries)
                return RCP__ACT_DONE;
            *delay_ns = backoff;
            return RCP__ACT_LATER;
        case RCP_ERR_IO:
        case RCP_ERR_PROTOCOL:
        case RCP_ERR_CLOSED:
            if (atomic_load(&cl->closing))
                return RCP__ACT_DONE;
            rcp__cluster_refresh_soon(cl);
            /* Written (or maybe written): only a read-only command may be
             * sent again; a write might have been applied. Nor a streamed
             * read: part of its value may have reached the sink, which a
             * second attempt would give again from byte 0. */
            if (!(rq->flags & RCP__CMD_READONLY) || rq->sink || rq->src ||
                ++rq->retries > cl->opt.max_retries)
                return RCP__ACT_DONE;
            rcp__stat_add(&cl->st.io, 1);
            *delay_ns = backoff;
            return RCP__ACT_LATER;
        case RCP_ERR_TIMEOUT:
            /* A node that does not answer may have failed: look again. */
            rcp__cluster_refresh_soon(cl);
            return RCP__ACT_DONE;
        default:
            return RCP__ACT_DONE; /* queue full, too large...: the caller's */
        }
    }

    rcp__parse_redirect(r->str, r->len, &rd);
    switch (rd.kind) {
    case RCP__RD_MOVED:
    case RCP__RD_ASK: {
        rcp__node *to;
        if (++rq->redirects > cl->opt.max_redirects) {
            *code = RCP_ERR_REDIRECT_LIMIT;
            snprintf(msg, msglen, "more than %d redirects; last: %.*s", cl->opt.max_redirects,
                     (int)(r->len < 200 ? r->len : 200), r->str);
            return RCP__ACT_FAIL;
        }
        to = rcp__node_get(cl, rd.host[0] ? rd.host : (asked ? asked->host : "127.0.0.1"), rd.port,
                      RCP__AS_MASTER);
        if (!to) {
            *code = RCP_ERR_OOM;
            snprintf(msg, msglen, "out of memory following a redirect");
            return RCP__ACT_FAIL;
        }
        urcu_bp_read_lock();
        {
            rcp__map *m = rcp__map_current(cl);
            if (rd.kind == RCP__RD_MOVED)
                rcp__map_move_slot(m, rd.slot, to);
            else
                atomic_store(&m->pinned[rd.slot], 1);
        }
        urcu_bp_read_unlock();
        rcp__stat_add(rd.kind == RCP__RD_MOVED ? &cl->st.moved : &cl->st.ask, 1);
        if (asked)
            rcp__stat_add(rd.kind == RCP__RD_MOVED ? &asked->moved : &asked->ask, 1);
        rcp__cluster_refresh_soon(cl);
        if (rq->src && !rcp__source_replayable(rq->src))
            return RCP__ACT_DONE; /* the value was pulled: the server's answer as is */
        rq->target = to;
        rq->asking = rd.kind == RCP__RD_ASK;
        return RCP__ACT_RESEND;
    }
    case RCP__RD_TRYAGAIN:
    case RCP__RD_CLUSTERDOWN:
    case RCP__RD_LOADING:
    case RCP__RD_MASTERDOWN:
    case RCP__RD_READONLY:
        if ((rq->src && !rcp__source_replayable(rq->src)) || ++rq->retries > cl->opt.max_retries)
            return RCP__ACT_DONE; /* the server's own error, as is */
        if (rd.kind == RCP__RD_TRYAGAIN)
            rcp__stat_add(&cl->st.tryagain, 1);
        else if (rd.kind == RCP__RD_CLUSTERDOWN)
            rcp__stat_add(&cl->st.clusterdown, 1);
        else if (rd.kind == RCP__RD_LOADING)
            rcp__stat_add(&cl->st.loading, 1);
        else if (rd.kind == RCP__RD_MASTERDOWN)
            rcp__stat_add(&cl->st.masterdown, 1);
        else
            rcp__stat_add(&cl->st.readonly, 1);
        if (rd.kind == RCP__RD_LOADING && asked)
            atomic_store(&asked->loading_until, rcp__now_ns() + 1000000000ull);
        /* A demoted master (-READONLY), a cluster that lost a master: the
         * topology may have changed. */
        if (rd.kind != RCP__RD_TRYAGAIN)
            rcp__cluster_refresh_soon(cl);
        *delay_ns = backoff;
        return RCP__ACT_LATER;
    case RCP__RD_BAD:
        /* A garbage redirect: report it as it came, and re-read the map. */
        rcp__cluster_refresh_soon(cl);
        return RCP__ACT_DONE;
    default:
        return RCP__ACT_DONE;
    }
}

int rcp__req_remaining_ms(const rcp__req *rq)
{
    uint64_t now;
    if (!rq->deadline)
        return -1;
    now = rcp__now_ns();
    if (now >= rq->deadline)
        return 1;
    return (int)((rq->deadline - now + 999999) / 1000000);
}
