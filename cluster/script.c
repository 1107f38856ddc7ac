/* cluster/script.c: script objects. A run sends EVALSHA (or EVALSHA_RO)
 * through the normal async path; a NOSCRIPT answer is followed, from the
 * callback, by EVAL (EVAL_RO) with the body, which loads the script on
 * that node. The request's arguments are copied once, when it is sent, so
 * the fallback can be built after the caller has moved on. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "cluster_int.h"
#include "cmdlist.h"
#include "reply.h"
#include "sha1.h"
#include "waiter.h"

struct rcp_script {
    char *body;
    size_t len;
    char sha[41];
    _Atomic uint64_t fallbacks;
};

rcp_script *rcp_script_new(const char *body, size_t len)
{
    rcp_script *s;
    if (!body)
        return NULL;
    s = rcp__calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->body = rcp__malloc(len + 1);
    if (!s->body) {
        rcp__free(s);
        return NULL;
    }
    memcpy(s->body, body, len);
    s->body[len] = '\0';
    s->len = len;
    rcp__sha1_hex(body, len, s->sha);
    return s;
}

const char *rcp_script_sha1(const rcp_script *s)
{
    return s ? s->sha : NULL;
}

uint64_t rcp_script_fallbacks(const rcp_script *s)
{
    return s ? atomic_load(&s->fallbacks) : 0;
}

void rcp_script_free(rcp_script *s)
{
    if (!s)
        return;
    rcp__free(s->body);
    rcp__free(s);
}

/* One run: argv[0..1] are switched between EVALSHA sha and EVAL body. */
typedef struct run {
    rcp_future f;
    rcp_future *user;
    rcp_cluster *cl;
    rcp_script *s;
    int readonly, fell_back, argc;
    const char **argv;
    size_t *argvlen;
    /* argv, argvlen and the copied arguments follow */
} run;

static void run_free(run *r)
{
    rcp__free(r);
}

static int run_send(run *r)
{
    if (r->fell_back) {
        r->argv[0] = r->readonly ? "EVAL_RO" : "EVAL";
        r->argv[1] = r->s->body;
        r->argvlen[1] = r->s->len;
    } else {
        r->argv[0] = r->readonly ? "EVALSHA_RO" : "EVALSHA";
        r->argv[1] = r->s->sha;
        r->argvlen[1] = 40;
    }
    r->argvlen[0] = strlen(r->argv[0]);
    return rcp__async_argv(r->cl, &r->f, -1, r->argc, r->argv, r->argvlen);
}

static int is_noscript(const rcp_reply *rp)
{
    return rp->type == RCP_REPLY_ERROR && rp->err == RCP_ERR_SERVER && rp->len >= 8 &&
           memcmp(rp->str, "NOSCRIPT", 8) == 0;
}

static void run_resolve(rcp_future *f, rcp_reply *rp)
{
    run *r = f->data;
    rcp_future *u = r->user;
    if (is_noscript(rp) && !r->fell_back) {
        int rv;
        r->fell_back = 1;
        atomic_fetch_add(&r->s->fallbacks, 1);
        rv = run_send(r);
        if (rv == RCP_OK)
            return; /* this future is resolved again, by the EVAL */
        {
            rcp_reply e;
            char msg[200];
            snprintf(msg, sizeof msg, "script %.12s: EVAL after NOSCRIPT not sent: %s", r->s->sha,
                     rcp_strerror(rv));
            rcp__reply_error_init(&e, rv, msg);
            run_free(r);
            u->resolve(u, &e);
            return;
        }
    }
    run_free(r);
    u->resolve(u, rp);
}

int rcp_cluster_script_send(rcp_cluster *cl, rcp_future *f, rcp_script *s, int flags, int nkeys,
                            const char **keys, const size_t *keylens, int nargs,
                            const char **args, const size_t *arglens)
{
    size_t bytes = 0, off;
    char nk[24], *p;
    run *r;
    int i, argc, rv;

    if (!cl || !f || !f->resolve || !s || nkeys < 0 || nargs < 0 || (nkeys && !keys) ||
        (nargs && !args) || (flags & ~RCP_SCRIPT_READONLY))
        return RCP_ERR_INVALID;
    for (i = 0; i < nkeys; i++) {
        if (!keys[i])
            return RCP_ERR_INVALID;
        bytes += (keylens ? keylens[i] : strlen(keys[i])) + 1;
    }
    for (i = 0; i < nargs; i++) {
        if (!args[i])
            return RCP_ERR_INVALID;
        bytes += (arglens ? arglens[i] : strlen(args[i])) + 1;
    }
    snprintf(nk, sizeof nk, "%d", nkeys);
    bytes += strlen(nk) + 1;
    argc = 3 + nkeys + nargs;
    off = sizeof(run) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    r = rcp__calloc(1, off + bytes);
    if (!r)
        return RCP_ERR_OOM;
    r->f.resolve = run_resolve;
    r->f.data = r;
    r->f.timeout_ms = f->timeout_ms;
    r->user = f;
    r->cl = cl;
    r->s = s;
    r->readonly = flags & RCP_SCRIPT_READONLY;
    r->argc = argc;
    r->argv = (const char **)(r + 1);
    r->argvlen = (size_t *)(r->argv + argc);
    p = (char *)r + off;
    /* argv[2]: numkeys, then keys, then args, each copied NUL-terminated. */
    for (i = 2; i < argc; i++) {
        const char *src;
        size_t l;
        if (i == 2) {
            src = nk;
            l = strlen(nk);
        } else if (i < 3 + nkeys) {
            src = keys[i - 3];
            l = keylens ? keylens[i - 3] : strlen(src);
        } else {
            src = args[i - 3 - nkeys];
            l = arglens ? arglens[i - 3 - nkeys] : strlen(src);
        }
        memcpy(p, src, l);
        p[l] = '\0';
        r->argv[i] = p;
        r->argvlen[i] = l;
        p += l + 1;
    }
    rv = run_send(r);
    if (rv != RCP_OK)
        run_free(r);
    return rv;
}

rcp_reply *rcp_cluster_script_run(rcp_cluster *cl, rcp_script *s, int flags, int nkeys,
                                  const char **keys, const size_t *keylens, int nargs,
                                  const char **args, const size_t *arglens)
{
    rcp__waiter w;
    rcp_reply *r = rcp__waiter_start(&w);
    if (r)
        return r;
    return rcp__waiter_wait(
        &w, rcp_cluster_script_send(cl, &w.f, s, flags, nkeys, keys, keylens, nargs, args, arglens),
        "script refused");
}

/* rcp_cluster_script: the keys and arguments from a format, split as
 * rcp_cluster_command splits one; the first nkeys words are the keys. */
struct script_fmt {
    rcp_cluster *cl;
    rcp_script *s;
    int flags, nkeys, words; /* words: the format's, when fewer than nkeys */
    rcp_reply *r;
};

static int script_take(void *data, int argc, const char **argv, const size_t *argvlen)
{
    struct script_fmt *x = data;
    if (x->nkeys > argc) {
        x->words = argc;
        return RCP_ERR_INVALID;
    }
    x->r = rcp_cluster_script_run(x->cl, x->s, x->flags, x->nkeys, argv, argvlen,
                                  argc - x->nkeys, argv + x->nkeys, argvlen + x->nkeys);
    return RCP_OK;
}

rcp_reply *rcp_cluster_script(rcp_cluster *cl, rcp_script *s, int flags, int nkeys,
                              const char *fmt, ...)
{
    struct script_fmt x = {cl, s, flags, nkeys, -1, NULL};
    va_list ap;
    int rv;
    char msg[160];
    if (!fmt || nkeys < 0) {
        snprintf(msg, sizeof msg, "rcp_cluster_script: %s",
                 !fmt ? "the format is NULL" : "nkeys is negative");
        return rcp__reply_error_new(RCP_ERR_INVALID, msg);
    }
    if (fmt[0] == '\0') /* no keys, no arguments */
        return rcp_cluster_script_run(cl, s, flags, nkeys, NULL, NULL, 0, NULL, NULL);
    va_start(ap, fmt);
    rv = rcp__cmd_formatted(fmt, ap, script_take, &x);
    va_end(ap);
    if (rv == RCP_OK)
        return x.r;
    if (x.words >= 0)
        snprintf(msg, sizeof msg, "rcp_cluster_script: nkeys %d but the format gave %d words",
                 nkeys, x.words);
    else
        snprintf(msg, sizeof msg, "rcp_cluster_script: %s", rcp_strerror(rv));
    return rcp__reply_error_new(rv, msg);
}
