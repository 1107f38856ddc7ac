/* cluster/batch.c: explicit batches. Commands are queued (formatted and
 * copied) on the batch; sending routes each by its slot, writes each
 * node's share contiguously (rcp__cluster_send_batch), and resolves one
 * future with an array of every command's reply in the order added. Each
 * command keeps the full redirect and retry treatment of a single
 * request; a batch is not atomic (use a transaction for that). */
#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "alloc.h"
#include "cluster_int.h"
#include "cmdlist.h"
#include "format.h"
#include "loop.h"
#include "reply.h"
#include "waiter.h"

struct rcp_batch {
    rcp_cluster *cl;
    rcp__cmdlist cmds;
};

rcp_batch *rcp_batch_new(rcp_cluster *cl)
{
    rcp_batch *b;
    if (!cl)
        return NULL;
    b = rcp__calloc(1, sizeof(*b));
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

static int batch_take(void *data, int argc, const char **argv, const size_t *argvlen)
{
    return rcp__cmdlist_add(&((rcp_batch *)data)->cmds, argc, argv, argvlen);
}

int rcp_batch_add_argv(rcp_batch *b, int argc, const char **argv, const size_t *argvlen)
{
    return b ? batch_take(b, argc, argv, argvlen) : RCP_ERR_INVALID;
}

int rcp_batch_add(rcp_batch *b, const char *fmt, ...)
{
    va_list ap;
    int rv;
    if (!b)
        return RCP_ERR_INVALID;
    va_start(ap, fmt);
    rv = rcp__cmd_formatted(fmt, ap, batch_take, b);
    va_end(ap);
    return rv;
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

    if (!b || !f || !f->resolve)
        return RCP_ERR_INVALID;
    if (b->cmds.n == 0)
        return RCP_ERR_INVALID;
    fl = rcp__calloc(1, sizeof(*fl) + b->cmds.n * sizeof(cmd_slot));
    fs = rcp__malloc(b->cmds.n * sizeof(*fs));
    if (fl)
        fl->arr = rcp__reply_array_new(b->cmds.n);
    if (!fl || !fs || !fl->arr) {
        if (fl)
            rcp_reply_free(fl->arr);
        rcp__free(fl);
        rcp__free(fs);
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
        return rv;
    }
    rcp__cmdlist_clear(&b->cmds);
    return RCP_OK;
}

rcp_reply *rcp_batch_exec(rcp_batch *b)
{
    rcp__waiter w;
    int rv;
    if (rcp__loop_on_thread())
        return rcp__reply_error_new(RCP_ERR_INVALID,
                                    "sync call from an I/O thread (a callback) would deadlock");
    rcp__waiter_init(&w);
    rv = rcp_batch_send(b, &w.f);
    return rcp__waiter_wait(&w, rv, "batch refused");
}
