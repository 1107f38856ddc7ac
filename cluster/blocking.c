/* cluster/blocking.c: blocking commands (BLPOP & co, XREAD/XREADGROUP
 * with BLOCK, WAIT) on small per-node pools of dedicated connections, so
 * the shared pipelines never wait behind them.
 *
 * A call takes an idle connection of the slot master's pool (or opens one,
 * up to the pool size; a sync caller waits for one when all are busy),
 * sends the command with its own timeout plus a margin as deadline, and
 * gives the connection back. Its answer goes through the same retry rules
 * as every request (retry.c): MOVED (patching the shared map), ASK,
 * TRYAGAIN/LOADING/CLUSTERDOWN backoff. A connection
 * whose call timed out or failed is never reused: the server may still
 * hold the blocked command, and a value it pops later must not reach the
 * next caller. Connections are closed only on a caller's thread (never in
 * an I/O callback): retired ones wait in the node's `retired` list. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "clock.h"
#include "cluster_int.h"
#include "format.h"
#include "reply.h"
#include "waiter.h"

#define MARGIN_MS 2000

void rcp__pool_init(rcp__node *n)
{
    pthread_mutex_init(&n->pool_mu, NULL);
    rcp__cond_init_monotonic(&n->pool_cv); /* its deadlines are rcp__now_ns times */
}

void rcp__pool_destroy(rcp__node *n)
{
    pthread_cond_destroy(&n->pool_cv);
    pthread_mutex_destroy(&n->pool_mu);
}

/* Mutex held. Removes c from `all` (and `idle`); 1 if it was there, i.e.
 * the caller now owns closing it. */
static int take_out(rcp__node *n, struct rcp_conn *c)
{
    int i, found = 0;
    for (i = 0; i < n->nall; i++)
        if (n->all[i] == c) {
            n->all[i] = n->all[--n->nall];
            found = 1;
            break;
        }
    for (i = 0; i < n->nidle; i++)
        if (n->idle[i] == c) {
            n->idle[i] = n->idle[--n->nidle];
            break;
        }
    return found;
}

/* Closes the retired connections (a caller's thread only). */
static void reap(rcp__node *n)
{
    struct rcp_conn *dead[RCP__POOL_MAX];
    int k, i;
    pthread_mutex_lock(&n->pool_mu);
    k = n->nretired;
    memcpy(dead, n->retired, (size_t)k * sizeof(dead[0]));
    n->nretired = 0;
    pthread_mutex_unlock(&n->pool_mu);
    for (i = 0; i < k; i++)
        rcp_conn_close(dead[i]);
}

void rcp__pool_shutdown(rcp__node *n)
{
    struct rcp_conn *dead[2 * RCP__POOL_MAX];
    int k = 0, i;
    pthread_mutex_lock(&n->pool_mu);
    n->pool_closed = 1;
    for (i = 0; i < n->nall; i++)
        dead[k++] = n->all[i];
    for (i = 0; i < n->nretired; i++)
        dead[k++] = n->retired[i];
    n->nall = n->nidle = n->nretired = 0;
    pthread_cond_broadcast(&n->pool_cv);
    pthread_mutex_unlock(&n->pool_mu);
    for (i = 0; i < k; i++)
        rcp_conn_close(dead[i]); /* resolves a call in progress with RCP_ERR_CLOSED */
}

/* An idle connection, a new one, or (may_wait) one given back before
 * deadline_ns. NULL with *code on failure. */
static struct rcp_conn *pool_take(rcp_cluster *cl, rcp__node *n, int may_wait,
                                  uint64_t deadline_ns, int *code)
{
    struct rcp_conn *c = NULL;
    int max = rcp__cluster_blocking_pool(cl);
    if (may_wait)
        reap(n);
    pthread_mutex_lock(&n->pool_mu);
    for (;;) {
        if (n->pool_closed) {
            *code = RCP_ERR_CLOSED;
            break;
        }
        if (n->nidle > 0) {
            c = n->idle[--n->nidle];
            break;
        }
        if (n->nall + n->nretired < max) {
            int rv = rcp__cluster_dedicated_no_io_timeout(cl, n->host, n->port, &c);
            if (rv != RCP_OK) {
                *code = rv;
                c = NULL;
            } else {
                n->all[n->nall++] = c;
            }
            break;
        }
        if (!may_wait || (deadline_ns && rcp__now_ns() >= deadline_ns)) {
            *code = RCP_ERR_QUEUE_FULL;
            break;
        }
        rcp__cond_wait_until(&n->pool_cv, &n->pool_mu, deadline_ns);
    }
    pthread_mutex_unlock(&n->pool_mu);
    return c;
}

/* After a call: healthy connections go back to the pool, others retire. */
static void pool_give(rcp__node *n, struct rcp_conn *c, int healthy)
{
    pthread_mutex_lock(&n->pool_mu);
    if (take_out(n, c)) {
        if (healthy && !n->pool_closed) {
            n->all[n->nall++] = c;
            n->idle[n->nidle++] = c;
        } else {
            n->retired[n->nretired++] = c;
        }
    }
    pthread_cond_signal(&n->pool_cv);
    pthread_mutex_unlock(&n->pool_mu);
}

/* The command's own timeout in ms: >0, 0 for "forever", -1 if none found
 * (then the connection's request timeout applies). */
static long own_timeout_ms(int argc, const char **argv, const size_t *argvlen)
{
    char tmp[64];
    size_t l0 = argvlen ? argvlen[0] : strlen(argv[0]);
    int i, idx = -1, millis = 0;
    double v;
    char *end;

    if (rcp__arg_is(argv[0], l0, "BLMPOP") || rcp__arg_is(argv[0], l0, "BZMPOP")) {
        idx = 1;
    } else if (rcp__arg_is(argv[0], l0, "XREAD") || rcp__arg_is(argv[0], l0, "XREADGROUP")) {
        for (i = 1; i + 1 < argc; i++) {
            size_t l = argvlen ? argvlen[i] : strlen(argv[i]);
            if (rcp__arg_is(argv[i], l, "STREAMS"))
                break;
            if (rcp__arg_is(argv[i], l, "BLOCK")) {
                idx = i + 1;
                millis = 1;
                break;
            }
        }
    } else if (rcp__arg_is(argv[0], l0, "WAIT") || rcp__arg_is(argv[0], l0, "WAITAOF")) {
        idx = argc - 1;
        millis = 1;
    } else {
        idx = argc - 1; /* BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BZPOPMIN, BZPOPMAX */
    }
    if (idx < 1 || idx >= argc)
        return -1;
    {
        size_t l = argvlen ? argvlen[idx] : strlen(argv[idx]);
        if (l == 0 || l >= sizeof tmp)
            return -1;
        memcpy(tmp, argv[idx], l);
        tmp[l] = '\0';
    }
    errno = 0;
    v = strtod(tmp, &end);
    if (errno || *end || v < 0 || v > 1e9)
        return -1;
    return millis ? (long)v : (long)(v * 1000.0 + 0.999);
}

typedef struct bcall {
    rcp_future f;
    rcp_future *user;
    rcp_cluster *cl;
    rcp__node *node;     /* where the current attempt went */
    struct rcp_conn *conn;
    rcp__req rq;         /* routing and retry state: retry.c's rules */
    rcp__later later;
    int timeout_ms;      /* the whole call's, as a future's (-1: none) */
} bcall;

static void bcall_free(bcall *b)
{
    rcp__free(b->rq.buf);
    rcp__free(b);
}

static void bcall_fail(bcall *b, int code, const char *msg)
{
    rcp_reply e;
    rcp_future *u = b->user;
    rcp__reply_error_init(&e, code, msg);
    bcall_free(b);
    u->resolve(u, &e);
}

static void bcall_done(bcall *b, rcp_reply *r)
{
    rcp_future *u = b->user;
    bcall_free(b);
    u->resolve(u, r);
}

static void on_breply(rcp_future *f, rcp_reply *r);

/* Sends (or resends) b to its node (retry.c's target, else the slot's
 * master); may_wait on a caller's thread. */
static void bsubmit(bcall *b, int may_wait)
{
    int code = RCP_OK, rv;
    uint64_t wait_until = rcp__now_ns() + 1000000ull * 10000u; /* a free connection: 10 s */
    b->node = rcp__route_master(b->cl, &b->rq);
    if (!b->node) {
        bcall_fail(b, RCP_ERR_CLUSTER_DOWN, "blocking command: no node serves its slot");
        return;
    }
    b->conn = pool_take(b->cl, b->node, may_wait, wait_until, &code);
    if (!b->conn) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s: no dedicated connection for a blocking command: %s",
                 b->node->addr, rcp_strerror(code));
        bcall_fail(b, code, msg);
        return;
    }
    b->f.timeout_ms = b->timeout_ms > 0 ? rcp__req_remaining_ms(&b->rq) : b->timeout_ms;
    rv = rcp__conn_send_raw(b->conn, &b->f, b->rq.buf, b->rq.len, b->rq.asking);
    if (rv != RCP_OK) {
        char msg[400];
        pool_give(b->node, b->conn, 0);
        snprintf(msg, sizeof msg, "%s: blocking command not sent: %s", b->node->addr,
                 rcp_strerror(rv));
        bcall_fail(b, rv, msg);
    }
}

/* A delayed retry is due (the refresher's thread: never waits). */
static void bcall_fire(rcp__later *l, int closing)
{
    bcall *b = (bcall *)((char *)l - offsetof(bcall, later));
    if (closing)
        bcall_fail(b, RCP_ERR_CLOSED, "cluster handle closed before a retry");
    else
        bsubmit(b, 0);
}

static void on_breply(rcp_future *f, rcp_reply *r)
{
    bcall *b = f->data;
    uint64_t delay = 0;
    int code = RCP_OK, act;
    char msg[300];
    int healthy = !(r->type == RCP_REPLY_ERROR && r->err != RCP_ERR_SERVER);

    pool_give(b->node, b->conn, healthy);
    b->conn = NULL;
    act = rcp__retry_decide(b->cl, &b->rq, b->node, r, &delay, &code, msg, sizeof msg);
    if (act != RCP__ACT_DONE && act != RCP__ACT_FAIL && rcp__cluster_closing(b->cl))
        act = RCP__ACT_DONE;
    if (act == RCP__ACT_LATER && b->rq.deadline && rcp__now_ns() + delay >= b->rq.deadline)
        act = RCP__ACT_DONE; /* no time left: the last answer stands */
    switch (act) {
    case RCP__ACT_RESEND:
        bsubmit(b, 0); /* an I/O thread: never waits */
        return;
    case RCP__ACT_LATER:
        b->later.fire = bcall_fire;
        if (rcp__later_add(b->cl, &b->later, delay, b->rq.deadline) < 0)
            bcall_fail(b, RCP_ERR_CLOSED, "cluster handle closed before a retry");
        return;
    case RCP__ACT_FAIL:
        bcall_fail(b, code, msg);
        return;
    default:
        bcall_done(b, r);
        return;
    }
}

/* may_wait: a sync caller may wait for a pool connection; the async API
 * never blocks its caller (RCP_ERR_QUEUE_FULL when the pool is busy). rq:
 * the command's classification (slot, flags). */
static int blocking_start(rcp_cluster *cl, rcp_future *f, const rcp__req *rq, int argc,
                          const char **argv, const size_t *argvlen, int may_wait)
{
    long own;
    bcall *b;

    if (rcp__cluster_closing(cl))
        return RCP_ERR_CLOSED;
    b = rcp__calloc(1, sizeof(*b));
    if (!b)
        return RCP_ERR_OOM;
    b->rq = *rq;
    b->rq.len = rcp__format_len(argc, argv, argvlen);
    if (b->rq.len > rcp__cluster_node_options(cl)->max_request_bytes) {
        rcp__free(b);
        return RCP_ERR_TOO_LARGE;
    }
    b->rq.buf = rcp__malloc(b->rq.len);
    if (!b->rq.buf) {
        rcp__free(b);
        return RCP_ERR_OOM;
    }
    rcp__format_write(b->rq.buf, argc, argv, argvlen);
    if (!rcp__route_master(cl, &b->rq)) {
        bcall_free(b);
        return RCP_ERR_CLUSTER_DOWN;
    }
    own = own_timeout_ms(argc, argv, argvlen);
    /* The server answers at its timeout; we give up a margin later. A
     * caller's own future timeout (f->timeout_ms) wins when set. */
    b->timeout_ms = f->timeout_ms ? f->timeout_ms : own == 0 ? -1 : own > 0 ? (int)(own + MARGIN_MS) : 0;
    b->rq.deadline = b->timeout_ms < 0 ? 0 : rcp__req_deadline(cl, b->timeout_ms);
    b->f.resolve = on_breply;
    b->f.data = b;
    b->user = f;
    b->cl = cl;
    bsubmit(b, may_wait && !rcp__loop_on_thread());
    return RCP_OK;
}

int rcp__blocking_send(rcp_cluster *cl, rcp_future *f, const rcp__req *rq, int argc,
                       const char **argv, const size_t *argvlen)
{
    return blocking_start(cl, f, rq, argc, argv, argvlen, 0);
}

rcp_reply *rcp__blocking_command(rcp_cluster *cl, const rcp__req *rq, int timeout_ms, int argc,
                                 const char **argv, const size_t *argvlen)
{
    rcp__waiter w;
    int rv;
    rcp__waiter_init(&w);
    w.f.timeout_ms = timeout_ms;
    rv = blocking_start(cl, &w.f, rq, argc, argv, argvlen, 1);
    return rcp__waiter_wait(&w, rv, "blocking command refused");
}
