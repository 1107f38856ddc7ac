/* cluster/batch.c: explicit batches. Commands are queued (formatted and
 * copied) on the batch; sending routes each by its slot, writes each
 * node's share contiguously (rcp__cluster_send_batch), and resolves one
 * future with an array of every command's reply in the order added. Each
 * command keeps the full redirect and retry treatment of a single
 * request; a batch is not atomic (use a transaction for that). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "cluster_int.h"
#include "cmdlist.h"
#include "format.h"
#include "multi.h"
#include "reply.h"
#include "waiter.h"

struct rcp_batch {
    rcp_cluster *cl;
    rcp__cmdlist cmds;
    char why[400]; /* the last refusal (rcp_batch_error), "" after a success */
};

rcp_batch *rcp_batch_new(rcp_cluster *cl)
{
    rcp_batch *b = rcp__cluster_new_companion(cl, sizeof(*b));
    if (b)
        b->cl = cl;
    return b;
}

void rcp_batch_free(rcp_batch *b)
{
    if (!b)
        return;
    rcp__cmdlist_free(&b->cmds);
    rcp__free(b);
}

size_t rcp_batch_count(const rcp_batch *b)
{
    return b ? b->cmds.n : 0;
}

const char *rcp_batch_error(const rcp_batch *b)
{
    return b ? b->why : "rcp_batch_error: the batch is NULL";
}

/* Records why command number `pos` (from 1) was refused: "command 3
 * (SINTER): CROSSSLOT: ...". Returns code. */
static int batch_refuse(rcp_batch *b, size_t pos, const char *name, size_t namelen, int code,
                        const char *why)
{
    snprintf(b->why, sizeof b->why, "command %zu (%.*s): %s", pos, (int)(namelen < 40 ? namelen : 40),
             name, why ? why : rcp_strerror(code));
    return code;
}

/* Refused when added, with its position, what the batch could never send:
 * keys across slots in a command that is not split by slot, a blocking
 * command, a connection-state command, bad arguments. */
static int batch_take(void *data, int argc, const char **argv, const size_t *argvlen)
{
    rcp_batch *b = data;
    rcp__req rq;
    const char *why;
    int code, kind, rv;
    size_t pos = b->cmds.n + 1;
    if (argc < 1 || !argv || !argv[0]) {
        snprintf(b->why, sizeof b->why, "command %zu: no command (argc %d)", pos, argc);
        return RCP_ERR_INVALID;
    }
    memset(&rq, 0, sizeof rq);
    rq.policy = -1;
    kind = rcp__classify(b->cl, argc, argv, argvlen, &rq, &code, &why);
    if (kind == RCP__ROUTE_BLOCKING) {
        code = RCP_ERR_BLOCKING_COMMAND;
        why = "a blocking command cannot be part of a batch (send it alone: it gets a "
              "connection of its own)";
    }
    if (kind == RCP__ROUTE_REFUSED || kind == RCP__ROUTE_BLOCKING)
        return batch_refuse(b, pos, argv[0], argvlen ? argvlen[0] : strlen(argv[0]), code, why);
    rv = rcp__cmdlist_add(&b->cmds, rcp__cluster_node_options(b->cl)->max_request_bytes, argc,
                          argv, argvlen);
    if (rv != RCP_OK)
        return batch_refuse(b, pos, argv[0], argvlen ? argvlen[0] : strlen(argv[0]), rv, NULL);
    b->why[0] = '\0';
    return RCP_OK;
}

int rcp_batch_add_argv(rcp_batch *b, int argc, const char **argv, const size_t *argvlen)
{
    return b ? batch_take(b, argc, argv, argvlen) : RCP_ERR_INVALID;
}

int rcp_batch_add(rcp_batch *b, const char *fmt, ...)
{
    RCP__CMD_FORMATTED_ADD(b, fmt, batch_take);
}

/* One send in flight: a reply slot per command, then one resolve. */
typedef struct flight flight;

typedef struct cmd_slot {
    rcp_future f;
    flight *fl;
    size_t idx;
} cmd_slot;

struct flight {
    pthread_mutex_t mu;
    size_t n, left;
    rcp_reply *arr; /* the answer: one element per command */
    rcp_future *user;
    cmd_slot slots[];
};

static void slot_resolve(rcp_future *f, rcp_reply *r)
{
    cmd_slot *s = f->data;
    flight *fl = s->fl;
    rcp_reply *k = rcp_reply_keep(r);
    int last;
    pthread_mutex_lock(&fl->mu);
    fl->arr->element[s->idx] = k ? k : rcp__reply_error_new(RCP_ERR_OOM, "out of memory");
    last = --fl->left == 0;
    pthread_mutex_unlock(&fl->mu);
    if (last) {
        rcp_reply *arr = fl->arr;
        rcp_future *u = fl->user;
        pthread_mutex_destroy(&fl->mu);
        rcp__free(fl);
        u->resolve(u, arr);
        rcp__reply_release(arr);
        if (k == r)
            rcp__reply_rekeep(r); /* it lives on in arr */
    }
}

int rcp_batch_send(rcp_batch *b, rcp_future *f)
{
    flight *fl;
    rcp_future **fs;
    size_t i, bad;
    int rv;

    if (!b || !f || !f->resolve) {
        if (b)
            snprintf(b->why, sizeof b->why, "rcp_batch_send: the future %s",
                     !f ? "is NULL" : "has no resolve function");
        return RCP_ERR_INVALID;
    }
    if (b->cmds.n == 0) {
        snprintf(b->why, sizeof b->why, "the batch is empty (add commands first)");
        return RCP_ERR_INVALID;
    }
    fl = rcp__calloc(1, sizeof(*fl) + b->cmds.n * sizeof(cmd_slot));
    fs = rcp__malloc(b->cmds.n * sizeof(*fs));
    if (fl)
        fl->arr = rcp__reply_array_new(b->cmds.n);
    if (!fl || !fs || !fl->arr) {
        if (fl)
            rcp_reply_free(fl->arr);
        rcp__free(fl);
        rcp__free(fs);
        snprintf(b->why, sizeof b->why, "out of memory for a batch of %zu commands", b->cmds.n);
        return RCP_ERR_OOM;
    }
    pthread_mutex_init(&fl->mu, NULL);
    fl->n = fl->left = b->cmds.n;
    fl->user = f;
    for (i = 0; i < b->cmds.n; i++) {
        fl->slots[i].f.resolve = slot_resolve;
        fl->slots[i].f.data = &fl->slots[i];
        fl->slots[i].f.timeout_ms = f->timeout_ms;
        fl->slots[i].fl = fl;
        fl->slots[i].idx = i;
        fs[i] = &fl->slots[i].f;
    }
    rv = rcp__cluster_send_batch(b->cl, b->cmds.n, fs, (const char *const *)b->cmds.buf, b->cmds.len, &bad);
    rcp__free(fs);
    if (rv != RCP_OK) {
        rcp_reply_free(fl->arr);
        pthread_mutex_destroy(&fl->mu);
        rcp__free(fl);
        snprintf(b->why, sizeof b->why, "batch of %zu commands refused: %s (nothing sent; the "
                 "batch keeps its commands)", b->cmds.n, rcp_strerror(rv));
        return rv;
    }
    rcp__cmdlist_clear(&b->cmds);
    return RCP_OK;
}

rcp_reply *rcp_batch_exec(rcp_batch *b)
{
    rcp__waiter w;
    rcp_reply *r = rcp__waiter_start(&w);
    int rv;
    if (r)
        return r;
    rv = rcp_batch_send(b, &w.f);
    if (rv != RCP_OK && b)
        return rcp__waiter_fail(&w, rv, b->why);
    return rcp__waiter_wait(&w, rv, "batch refused");
}

/* Every command becomes an ordinary async request, but the first attempts
 * of the commands routed to one node are queued there in one group, so
 * that node's share is written contiguously; retries and redirects then
 * go one by one. A multi-key command spanning slots is split as usual
 * (not grouped); a blocking command is refused. */
int rcp__cluster_send_batch(struct rcp_cluster *cl, size_t n, rcp_future *const *f,
                            const char *const *buf, const size_t *len, size_t *bad)
{
    size_t m = n ? n : 1;
    rcp__cfut **cf = rcp__calloc(m, sizeof(*cf));
    char *split = rcp__calloc(m, 1);
    struct rcp_conn **conn = rcp__calloc(m, sizeof(*conn));
    rcp__node **node = rcp__calloc(m, sizeof(*node));
    rcp_future **gf = rcp__calloc(m, sizeof(*gf));
    const char **gb = rcp__calloc(m, sizeof(*gb));
    size_t *gl = rcp__calloc(m, sizeof(*gl));
    size_t *gi = rcp__calloc(m, sizeof(*gi));
    const char **argv = NULL;
    size_t *argvlen = NULL, i, j, maxargs = 0;
    int rv = RCP_OK;

    *bad = 0;
    if (!cf || !split || !conn || !node || !gf || !gb || !gl || !gi) {
        rv = RCP_ERR_OOM;
        goto out;
    }
    if (atomic_load(&cl->closing)) {
        rv = RCP_ERR_CLOSED;
        goto out;
    }
    /* Classify everything first: all or nothing. */
    for (i = 0; i < n && rv == RCP_OK; i++) {
        const char *why;
        int argc = rcp__format_split(buf[i], len[i], NULL, NULL, 0), kind;
        rcp__req rq;
        if (argc < 1) {
            rv = RCP_ERR_INVALID;
            break;
        }
        if ((size_t)argc > maxargs) {
            const char **a = rcp__realloc(argv, (size_t)argc * sizeof(*a));
            size_t *l = a ? rcp__realloc(argvlen, (size_t)argc * sizeof(*l)) : NULL;
            if (a)
                argv = a;
            if (l)
                argvlen = l;
            if (!a || !l) {
                rv = RCP_ERR_OOM;
                break;
            }
            maxargs = (size_t)argc;
        }
        rcp__format_split(buf[i], len[i], argv, argvlen, argc);
        memset(&rq, 0, sizeof rq);
        rq.policy = -1;
        kind = rcp__classify(cl, argc, argv, argvlen, &rq, &rv, &why);
        if (kind == RCP__ROUTE_SPLIT) {
            split[i] = 1;
            continue;
        }
        if (kind == RCP__ROUTE_BLOCKING)
            rv = RCP_ERR_BLOCKING_COMMAND;
        else if (len[i] > cl->node_opt.max_request_bytes)
            rv = RCP_ERR_TOO_LARGE;
        if (rv != RCP_OK)
            break;
        cf[i] = rcp__cfut_get(cl);
        rq.buf = !cf[i] ? NULL : len[i] <= RCP__CFUT_INLINE ? cf[i]->inl : rcp__malloc(len[i]);
        if (!rq.buf) {
            if (cf[i])
                rcp__cfut_put(cl, cf[i]); /* its rq.buf is still NULL */
            cf[i] = NULL;
            rv = RCP_ERR_OOM;
            break;
        }
        memcpy(rq.buf, buf[i], len[i]);
        rq.len = len[i];
        cf[i]->inner.resolve = rcp__cfut_on_reply;
        cf[i]->user = f[i];
        cf[i]->cl = cl;
        cf[i]->rq = rq;
        cf[i]->rq.deadline = rcp__req_deadline(cl, f[i]->timeout_ms);
    }
    if (rv != RCP_OK) {
        *bad = i;
        for (j = 0; j < n; j++)
            if (cf[j])
                rcp__cfut_put(cl, cf[j]);
        goto out;
    }
    atomic_fetch_add(&cl->active_calls, n);
    rcp__stat_add(&cl->st.requests, n);
    for (i = 0; i < n; i++) {
        int code;
        if (cf[i])
            conn[i] = rcp__route(cl, &cf[i]->rq, &node[i], &code);
    }
    /* One group per connection, in the callers' order within it. */
    for (i = 0; i < n; i++) {
        struct rcp_conn *c = conn[i];
        size_t k = 0;
        if (!c)
            continue;
        for (j = i; j < n; j++)
            if (conn[j] == c) {
                cf[j]->inner.timeout_ms = rcp__req_remaining_ms(&cf[j]->rq);
                cf[j]->inner.data = node[j];
                gf[k] = &cf[j]->inner;
                gb[k] = cf[j]->rq.buf;
                gl[k] = cf[j]->rq.len;
                gi[k++] = j;
                conn[j] = NULL;
            }
        if (rcp__conn_send_group(c, k, gf, gb, gl, 0) != RCP_OK)
            for (j = 0; j < k; j++)
                rcp__cfut_submit(cf[gi[j]]); /* one by one, with the usual rules */
        for (j = 0; j < k; j++) {
            rcp__cluster_unpin(c);
            cf[gi[j]] = NULL;
        }
    }
    for (i = 0; i < n; i++) {
        if (cf[i])
            rcp__cfut_submit(cf[i]); /* no connection at hand: the usual path decides */
        if (split[i]) {
            int argc = rcp__format_split(buf[i], len[i], argv, argvlen, (int)maxargs);
            int r2 = rcp__multi_send(cl, f[i], -1, argc, argv, argvlen);
            atomic_fetch_sub(&cl->active_calls, 1);
            if (r2 != RCP_OK) {
                rcp_reply e;
                rcp__reply_error_init(&e, r2, "split multi-key command of a batch not sent");
                f[i]->resolve(f[i], &e);
            }
        }
    }
out:
    rcp__free(cf);
    rcp__free(split);
    rcp__free(conn);
    rcp__free(node);
    rcp__free(gf);
    rcp__free(gb);
    rcp__free(gl);
    rcp__free(gi);
    rcp__free(argv);
    rcp__free(argvlen);
    return rv;
}
