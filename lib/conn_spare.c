/* lib/conn_spare.c: spare connections of a public handle (option
 * spare_conns), for sync callers.
 *
 * A sync caller that finds the connection idle writes and reads itself
 * (conn_fast.c). One that finds another sync caller on it queues behind
 * and sleeps until that one has read its reply and woken it: a futex wait
 * and a wake, two system calls and a thread switch more than a plain
 * client with a connection per thread pays. With a few sync threads that
 * is most requests, and batching wins nothing back (one request behind
 * another). So such a caller takes an idle spare connection to the same
 * server instead and is a lone caller there. With many threads more than
 * one request is outstanding and callers batch on the handle's own
 * connection (the spill rule, conn_fast.c).
 *
 * Spares are opened when first needed (the caller that finds none idle
 * starts one and queues meanwhile), on the handle's loops, with its
 * options; they reconnect by themselves and are closed with the handle.
 * They report no events: the handle's own connection speaks for the
 * server. Commands that change a connection's state (SELECT, MULTI ...)
 * are refused on a handle anyway; one that has carried a CLIENT command
 * (SETNAME, TRACKING ...) uses the spares no more: they would not share
 * that state. */
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "conn_int.h"
#include "format.h"
#include "thread_local.h"

#define SPARE_STACK_BUF 4096

void rcp__conn_spare_note_slow(struct rcp_conn *c, int argc, const char **argv,
                               const size_t *argvlen)
{
    (void)argc;
    /* The commands of the table's connection-state class (SELECT, MULTI,
     * HELLO ...) are refused on a handle (rcp__command_check); CLIENT's
     * subcommands are not, and some set per-connection state the spares
     * would not have (SETNAME, TRACKING, NO-EVICT ...). */
    if ((argvlen ? argvlen[0] : strlen(argv[0])) == 6 && strncasecmp(argv[0], "client", 6) == 0)
        atomic_store(&c->stateful, 1);
}

/* One more spare in the first free place, unless one is being opened or
 * the handle closes. It connects on its loop's next pass: this caller
 * does not wait for it. */
static void spare_open(struct rcp_conn *c)
{
    rcp_conn_options o;
    struct rcp_conn *sp;
    int i, closing;

    rcp__mutex_lock(&c->mu);
    for (i = 0; i < c->opt.spare_conns; i++)
        if (!atomic_load(&c->spare[i]))
            break;
    if (c->closing || c->spare_opening || i == c->opt.spare_conns) {
        rcp__mutex_unlock(&c->mu);
        return;
    }
    c->spare_opening = 1;
    rcp__mutex_unlock(&c->mu);

    o = c->opt;
    o.event_cb = NULL;
    o.event_data = NULL;
    if (rcp__conn_create(c->nowned ? c->owned_loops[(i + 1) % c->nowned] : c->loop, &o, 0, &sp) !=
        RCP_OK)
        sp = NULL; /* out of memory: the callers queue, as without spares */

    rcp__mutex_lock(&c->mu);
    if (sp)
        atomic_store(&c->spare[i], sp);
    c->spare_opening = 0;
    closing = c->closing;
    rcp__mutex_unlock(&c->mu);
    if (sp && closing)
        rcp__conn_close_begin(sp); /* too late for rcp__conn_spares_interrupt */
}

/* One call on spare sp for c's caller: format the command if it came as
 * argv, then a lone caller there (queue as rcp__conn_sync_lone's). c's
 * call holds the spares open: close takes them after it.
 *
 * A spare that drops under its queue fails the requests it never wrote
 * with RCP_ERR_NOT_SENT. The caller chose no spare and its handle may
 * be fine, so such a request goes on to the handle's own connection:
 * NULL, with *timeout_ms what is left of the caller's deadline (the
 * reply as it is once nothing is left). */
static rcp_reply *spare_call(struct rcp_conn *c, struct rcp_conn *sp, int argc, const char **argv,
                             const size_t *argvlen, const char *raw, size_t len, int *timeout_ms,
                             int queue)
{
    char stackbuf[SPARE_STACK_BUF];
    char *buf = NULL;
    rcp_reply *r;
    uint64_t t0 = rcp__now_ns();
    if (!raw) {
        buf = len <= sizeof stackbuf ? stackbuf : rcp__malloc(len);
        if (!buf)
            return NULL;
        rcp__format_write(buf, argc, argv, argvlen);
        raw = buf;
    }
    r = rcp__conn_sync_lone(sp, raw, len, *timeout_ms, queue);
    if (buf && buf != stackbuf)
        rcp__free(buf);
    if (r && r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_NOT_SENT) {
        int ms = *timeout_ms ? *timeout_ms : c->opt.request_timeout_ms;
        int64_t left = ms - (int64_t)((rcp__now_ns() - t0) / 1000000u);
        if (ms <= 0 || left > 0) {
            if (ms > 0)
                *timeout_ms = (int)left;
            rcp_reply_free(r);
            return NULL;
        }
    }
    if (r)
        conn_stat_add(&c->st.spare_requests, 1);
    return r;
}

rcp_reply *rcp__conn_spare_command(struct rcp_conn *c, int argc, const char **argv,
                                   const size_t *argvlen, const char *raw, size_t len,
                                   int *timeout_ms)
{
    rcp_reply *r = NULL;
    int i;

    for (i = 0; i < c->opt.spare_conns && !r; i++) {
        struct rcp_conn *sp = atomic_load(&c->spare[i]);
        if (!sp) {
            spare_open(c);
            break;
        }
        r = spare_call(c, sp, argc, argv, argvlen, raw, len, timeout_ms, 0);
    }
    return r;
}

/* Lanes. One connection's leader/follower chain keeps one batch at the
 * server and one forming: with many sync callers the two vCPUs then sat
 * a quarter idle while everyone waited on the round trip (docs/perf.md,
 * "The sync targets on a second machine"). So with RCP__LANE_CALLERS
 * (conn_int.h) or more calls inside the handle per lane, the callers are
 * dealt over the handle's connection and its spares, each a chain of its
 * own; a thread keeps its place in the deal (its ordinal), so each chain
 * keeps a steady set of callers and batches. Not once the handle has
 * carried an async request: a thread's sync call on a spare could pass
 * its own async request on the handle's connection. */
static atomic_uint lane_next;
static RCP__THREAD_LOCAL unsigned lane_ord; /* this thread's ordinal + 1; 0: none yet */

rcp_reply *rcp__conn_spare_lane(struct rcp_conn *c, int argc, const char **argv,
                                const size_t *argvlen, const char *raw, size_t len, int *timeout_ms)
{
    unsigned want =
        atomic_load_explicit(&c->active_calls, memory_order_relaxed) / RCP__LANE_CALLERS;
    unsigned lanes = atomic_load_explicit(&c->lanes, memory_order_relaxed), lane;
    struct rcp_conn *sp;

    if (want > 1 + (unsigned)c->opt.spare_conns)
        want = 1 + (unsigned)c->opt.spare_conns;
    /* Up at once, down only two lanes' worth of callers later: the count
     * of calls inside moves with every call, and a thread dealt to
     * another lane at each move would keep no chain steady. */
    if (want > lanes || want + 1 < lanes) {
        lanes = want;
        atomic_store_explicit(&c->lanes, lanes, memory_order_relaxed);
    }
    if (lanes < 2 || atomic_load_explicit(&c->async_seen, memory_order_relaxed))
        return NULL;
    if (!lane_ord)
        lane_ord = atomic_fetch_add_explicit(&lane_next, 1, memory_order_relaxed) % 0x10000 + 1;
    lane = (lane_ord - 1) % lanes;
    if (!lane)
        return NULL; /* the handle's own connection */
    sp = atomic_load(&c->spare[lane - 1]);
    if (!sp) {
        spare_open(c);
        return NULL;
    }
    return spare_call(c, sp, argc, argv, argvlen, raw, len, timeout_ms, 2);
}

void rcp__conn_spares_interrupt(struct rcp_conn *c)
{
    for (int i = 0; i < RCP__SPARE_MAX; i++) {
        struct rcp_conn *sp = atomic_load(&c->spare[i]);
        if (sp)
            rcp__conn_close_begin(sp);
    }
}

void rcp__conn_spares_close(struct rcp_conn *c)
{
    for (int i = 0; i < RCP__SPARE_MAX; i++) {
        struct rcp_conn *sp = atomic_exchange(&c->spare[i], NULL);
        if (sp)
            rcp_conn_close(sp);
    }
}

void rcp__conn_spares_stats(struct rcp_conn *c, rcp_conn_stats *o)
{
    for (int i = 0; i < RCP__SPARE_MAX; i++) {
        struct rcp_conn *sp = atomic_load(&c->spare[i]);
        rcp_conn_stats st;
        if (sp && rcp_conn_get_stats(sp, &st) == RCP_OK)
            rcp_conn_stats_add(o, &st);
    }
}
