/* cluster/multi.c: multi-key commands whose keys span slots.
 *
 * MGET, MSET, DEL, UNLINK, EXISTS and TOUCH are split into one sub-command
 * per slot (so no server ever answers CROSSSLOT), sent at once on the
 * shared pipelines through the normal async path (each part gets the full
 * redirect and retry treatment), and merged when the last part is
 * answered: MGET values in the caller's key order, the integer sum for
 * DEL/UNLINK/EXISTS/TOUCH, OK for MSET only if every part said OK. A split
 * MSET is not atomic: when a part fails the others may have been applied,
 * and the error says which parts failed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "cluster_int.h"
#include "format.h"
#include "multi.h"
#include "reply.h"
#include "waiter.h"

enum { MK_NONE = 0, MK_MGET, MK_MSET, MK_SUM };

int rcp__multi_kind(int argc, const char **argv, const size_t *argvlen)
{
    size_t l;
    if (argc < 2 || !argv || !argv[0])
        return MK_NONE;
    l = argvlen ? argvlen[0] : strlen(argv[0]);
    if (rcp__arg_is(argv[0], l, "MGET"))
        return MK_MGET;
    if (rcp__arg_is(argv[0], l, "MSET"))
        return argc % 2 ? MK_MSET : MK_NONE;
    if (rcp__arg_is(argv[0], l, "DEL") || rcp__arg_is(argv[0], l, "UNLINK") ||
        rcp__arg_is(argv[0], l, "EXISTS") || rcp__arg_is(argv[0], l, "TOUCH"))
        return MK_SUM;
    return MK_NONE;
}

typedef struct multi multi;

typedef struct part {
    rcp_future f;
    multi *m;
    unsigned slot;
    size_t first, nkeys;   /* its keys: m->order[first .. first + nkeys) */
    char key0[40];         /* its first key, for error messages */
} part;

struct multi {
    pthread_mutex_t mu;
    int kind;
    char name[8];
    size_t nkeys, nparts, left;
    size_t *order;       /* key indices grouped by part, each group in key order */
    rcp_reply **vals;    /* MGET: one per key, in the caller's order */
    long long sum;
    size_t failed;
    int fail_code;
    char fail_msg[480];
    rcp_future *user;
    part parts[];
};

typedef struct keyref {
    unsigned slot;
    size_t idx;
} keyref;

static int by_slot_then_index(const void *a, const void *b)
{
    const keyref *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void multi_free(multi *m)
{
    size_t i;
    if (m->vals)
        for (i = 0; i < m->nkeys; i++)
            rcp_reply_free(m->vals[i]);
    rcp__free(m->vals);
    rcp__free(m->order);
    pthread_mutex_destroy(&m->mu);
    rcp__free(m);
}

/* Mutex held. */
static void note_failure(multi *m, part *p, int code, const char *what, size_t len)
{
    if (m->failed++ == 0) {
        m->fail_code = code;
        snprintf(m->fail_msg, sizeof m->fail_msg, "slot %u (%zu key%s, first '%s'): %.*s", p->slot,
                 p->nkeys, p->nkeys == 1 ? "" : "s", p->key0, (int)(len < 300 ? len : 300), what);
    }
}

static void complete(multi *m)
{
    rcp_reply *r = NULL;
    size_t i;
    if (m->failed) {
        char msg[700];
        const char *effect = m->kind == MK_MGET ? ""
                             : m->kind == MK_MSET
                                 ? " (a split MSET is not atomic: the other parts may have been applied)"
                                 : " (the other parts were applied)";
        snprintf(msg, sizeof msg, "%s: %zu of %zu slot parts failed%s; first: %s", m->name,
                 m->failed, m->nparts, effect, m->fail_msg);
        r = rcp__reply_error_new(m->fail_code, msg);
    } else if (m->kind == MK_MGET) {
        r = rcp__reply_array_new(m->nkeys);
        if (r)
            for (i = 0; i < m->nkeys; i++) {
                r->element[i] = m->vals[i];
                m->vals[i] = NULL;
            }
    } else if (m->kind == MK_SUM) {
        r = rcp__reply_integer_new(m->sum);
    } else {
        r = rcp__reply_status_new("OK");
    }
    if (!r)
        r = rcp__reply_error_new(RCP_ERR_OOM, "out of memory merging a split multi-key reply");
    m->user->resolve(m->user, r);
    rcp__reply_release(r);
    multi_free(m);
}

/* One part answered (any thread). The part's reply belongs to the caller
 * of this callback: MGET values are moved out of it, nothing is kept. */
static void part_resolve(rcp_future *f, rcp_reply *r)
{
    part *p = f->data;
    multi *m = p->m;
    size_t j;
    int last;

    pthread_mutex_lock(&m->mu);
    if (r->type == RCP_REPLY_ERROR) {
        note_failure(m, p, r->err, r->str ? r->str : "", r->str ? r->len : 0);
    } else if (m->kind == MK_MGET) {
        if (r->type == RCP_REPLY_ARRAY && r->elements == p->nkeys) {
            for (j = 0; j < p->nkeys; j++) {
                m->vals[m->order[p->first + j]] = r->element[j];
                r->element[j] = NULL;
            }
        } else {
            static const char bad[] = "unexpected reply type for MGET";
            note_failure(m, p, RCP_ERR_PROTOCOL, bad, sizeof bad - 1);
        }
    } else if (m->kind == MK_SUM) {
        if (r->type == RCP_REPLY_INTEGER) {
            m->sum += r->integer;
        } else {
            static const char bad[] = "unexpected reply type (not an integer)";
            note_failure(m, p, RCP_ERR_PROTOCOL, bad, sizeof bad - 1);
        }
    } else if (!(r->type == RCP_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0)) {
        static const char bad[] = "unexpected reply (not OK)";
        note_failure(m, p, RCP_ERR_PROTOCOL, bad, sizeof bad - 1);
    }
    last = --m->left == 0;
    pthread_mutex_unlock(&m->mu);
    if (last)
        complete(m);
}

int rcp__multi_send(rcp_cluster *cl, rcp_future *f, int policy, int argc, const char **argv,
                    const size_t *argvlen)
{
    int kind = rcp__multi_kind(argc, argv, argvlen);
    size_t step = kind == MK_MSET ? 2 : 1, nkeys, i, np, maxk = 0;
    keyref *refs;
    const char **pargv = NULL;
    size_t *plen = NULL;
    multi *m;
    int last, rv = RCP_OK;

    if (kind == MK_NONE || !f || !f->resolve)
        return RCP_ERR_INVALID;
    nkeys = (size_t)(argc - 1) / step;
    refs = rcp__malloc(nkeys * sizeof(*refs));
    if (!refs)
        return RCP_ERR_OOM;
    for (i = 0; i < nkeys; i++) {
        size_t a = 1 + i * step;
        refs[i].slot = rcp_keyslot(argv[a], argvlen ? argvlen[a] : strlen(argv[a]));
        refs[i].idx = i;
    }
    qsort(refs, nkeys, sizeof(*refs), by_slot_then_index);
    for (i = 0, np = 0; i < nkeys; i++)
        if (i == 0 || refs[i].slot != refs[i - 1].slot)
            np++;

    m = rcp__calloc(1, sizeof(*m) + np * sizeof(part));
    if (!m) {
        rcp__free(refs);
        return RCP_ERR_OOM;
    }
    pthread_mutex_init(&m->mu, NULL);
    m->kind = kind;
    snprintf(m->name, sizeof m->name, "%.*s", (int)(argvlen ? argvlen[0] : strlen(argv[0])), argv[0]);
    for (i = 0; m->name[i]; i++)
        if (m->name[i] >= 'a' && m->name[i] <= 'z')
            m->name[i] = (char)(m->name[i] - 'a' + 'A');
    m->nkeys = nkeys;
    m->nparts = np;
    m->user = f;
    m->order = rcp__malloc(nkeys * sizeof(size_t));
    if (kind == MK_MGET)
        m->vals = rcp__calloc(nkeys ? nkeys : 1, sizeof(rcp_reply *));
    if (!m->order || (kind == MK_MGET && !m->vals)) {
        rcp__free(refs);
        multi_free(m);
        return RCP_ERR_OOM;
    }
    for (i = 0, np = 0; i < nkeys; i++) {
        part *p;
        if (i == 0 || refs[i].slot != refs[i - 1].slot) {
            p = &m->parts[np++];
            p->m = m;
            p->slot = refs[i].slot;
            p->first = i;
            p->f.resolve = part_resolve;
            p->f.data = p;
            p->f.timeout_ms = f->timeout_ms;
        }
        p = &m->parts[np - 1];
        p->nkeys++;
        if (p->nkeys > maxk)
            maxk = p->nkeys;
        m->order[i] = refs[i].idx;
    }
    rcp__free(refs);
    pargv = rcp__malloc((1 + maxk * step) * sizeof(*pargv));
    plen = rcp__malloc((1 + maxk * step) * sizeof(*plen));
    if (!pargv || !plen) {
        rcp__free(pargv);
        rcp__free(plen);
        multi_free(m);
        return RCP_ERR_OOM;
    }

    /* One reference per part plus ours, so that no part's answer can
     * complete the whole before every part is sent. */
    m->left = np + 1;
    for (i = 0; i < np; i++) {
        part *p = &m->parts[i];
        size_t j, n = 0;
        const char *k0;
        size_t k0len;
        pargv[n] = argv[0];
        plen[n++] = argvlen ? argvlen[0] : strlen(argv[0]);
        for (j = 0; j < p->nkeys; j++) {
            size_t a = 1 + m->order[p->first + j] * step, s;
            for (s = 0; s < step; s++) {
                pargv[n] = argv[a + s];
                plen[n++] = argvlen ? argvlen[a + s] : strlen(argv[a + s]);
            }
        }
        k0 = pargv[1];
        k0len = plen[1] < sizeof p->key0 - 1 ? plen[1] : sizeof p->key0 - 1;
        memcpy(p->key0, k0, k0len);
        p->key0[k0len] = '\0';
        rv = rcp__async_argv(cl, &p->f, policy, (int)n, pargv, plen);
        if (rv != RCP_OK) {
            if (i == 0)
                break; /* nothing was sent: refuse the whole command */
            pthread_mutex_lock(&m->mu);
            note_failure(m, p, rv, rcp_strerror(rv), strlen(rcp_strerror(rv)));
            m->left--;
            pthread_mutex_unlock(&m->mu);
            rv = RCP_OK;
        }
    }
    rcp__free(pargv);
    rcp__free(plen);
    if (rv != RCP_OK) {
        multi_free(m);
        return rv;
    }
    pthread_mutex_lock(&m->mu);
    last = --m->left == 0;
    pthread_mutex_unlock(&m->mu);
    if (last)
        complete(m);
    return RCP_OK;
}

/* The sync form: the same parts, waited for on the caller's thread. */
rcp_reply *rcp__multi_command(rcp_cluster *cl, int policy, int timeout_ms, int argc,
                              const char **argv, const size_t *argvlen)
{
    rcp__waiter w;
    int rv;
    rcp__waiter_init(&w);
    w.f.timeout_ms = timeout_ms;
    rv = rcp__multi_send(cl, &w.f, policy, argc, argv, argvlen);
    return rcp__waiter_wait(&w, rv, "split multi-key command refused");
}
