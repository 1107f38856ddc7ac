/* cluster/txn.c: MULTI/EXEC transactions.
 *
 * Without WATCH, a transaction is MULTI, its commands and EXEC queued on
 * the slot master's shared pipeline in one critical section
 * (rcp__conn_send_group), so no other caller's command lands inside it.
 * A redirect of any part (MOVED/ASK on a queued command, or EXECABORT
 * because of one) sends the whole transaction again to the new owner
 * (after ASK: ASKING, MULTI ... EXEC; the server keeps the ASKING flag for
 * the whole MULTI block). It is sent again only when EXEC was provably
 * not executed: EXEC never written, EXECABORT, or a redirect.
 *
 * With WATCH, the transaction owns a dedicated connection to the slot's
 * master, opened with RCP__CONN_ONCE so that it is never silently replaced
 * by a new connection on which the WATCH would be gone. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "cluster_int.h"
#include "cmdlist.h"
#include "format.h"
#include "reply.h"
#include "waiter.h"

struct rcp_txn {
    rcp_cluster *cl;
    int has_slot;
    unsigned slot;
    rcp__cmdlist cmds;
    struct rcp_conn *wconn; /* WATCH: the dedicated connection */
    char whost[256];
    int wport;
    char why[400]; /* the last refused add (rcp_txn_error), "" after a success */
};

static const char multi_cmd[] = "*1\r\n$5\r\nMULTI\r\n";
static const char exec_cmd[] = "*1\r\n$4\r\nEXEC\r\n";

rcp_txn *rcp_txn_new(rcp_cluster *cl)
{
    rcp_txn *t = rcp__cluster_new_companion(cl, sizeof(*t));
    if (t)
        t->cl = cl;
    return t;
}

static void unwatch(rcp_txn *t)
{
    if (t->wconn) {
        rcp_conn_close(t->wconn);
        t->wconn = NULL;
    }
}

void rcp_txn_discard(rcp_txn *t)
{
    if (!t)
        return;
    unwatch(t); /* the WATCH goes with its connection */
    rcp__cmdlist_clear(&t->cmds);
    t->has_slot = 0;
    t->why[0] = '\0';
}

const char *rcp_txn_error(const rcp_txn *t)
{
    return t ? t->why : "rcp_txn_error: the transaction is NULL";
}

void rcp_txn_free(rcp_txn *t)
{
    if (!t)
        return;
    unwatch(t);
    rcp__cmdlist_free(&t->cmds);
    rcp__free(t);
}

/* The slot of argv's keys, joined with the transaction's: RCP_OK, or
 * RCP_ERR_CROSS_SLOT / RCP_ERR_INVALID with *why. */
static int join_slot(rcp_txn *t, int argc, const char **argv, const size_t *argvlen,
                     const char **why)
{
    static _Thread_local char msg[200];
    const rcp__cmd *cmd = rcp__cmd_lookup(argc, argv, argvlen);
    int idx[64], nk, i;
    if (!cmd)
        return RCP_OK; /* unknown command: no key we can see */
    nk = rcp__cmd_keys(cmd, argc, argv, argvlen, idx, 64);
    if (nk < 0) {
        *why = "wrong number of arguments for the command's keys";
        return RCP_ERR_INVALID;
    }
    if (nk > 64) {
        *why = "more than 64 keys in one command of a transaction";
        return RCP_ERR_INVALID;
    }
    for (i = 0; i < nk; i++) {
        size_t l = argvlen ? argvlen[idx[i]] : strlen(argv[idx[i]]);
        unsigned s = rcp__keyslot(argv[idx[i]], l);
        if (!t->has_slot) {
            t->has_slot = 1;
            t->slot = s;
        } else if (s != t->slot) {
            snprintf(msg, sizeof msg,
                     "CROSSSLOT: a transaction's keys must share one slot: '%.*s' is in slot %u, "
                     "the transaction in slot %u",
                     (int)(l < 60 ? l : 60), argv[idx[i]], s, t->slot);
            *why = msg;
            return RCP_ERR_CROSS_SLOT;
        }
    }
    return RCP_OK;
}

/* Checks the command's slot against the transaction's, then queues it;
 * on any refusal the transaction is as it was. */
static int txn_take(void *data, int argc, const char **argv, const size_t *argvlen)
{
    rcp_txn *t = data;
    const char *why = NULL;
    int had = t->has_slot, rv, i;
    unsigned old = t->slot;
    size_t pos = t->cmds.n + 1;
    if (argc < 1 || !argv) {
        snprintf(t->why, sizeof t->why, "command %zu: no command (argc %d)", pos, argc);
        return RCP_ERR_INVALID;
    }
    for (i = 0; i < argc; i++)
        if (!argv[i]) {
            snprintf(t->why, sizeof t->why, "command %zu: argument %d is NULL", pos, i);
            return RCP_ERR_INVALID;
        }
    rv = join_slot(t, argc, argv, argvlen, &why);
    if (rv == RCP_OK)
        rv = rcp__cmdlist_add(&t->cmds, rcp__cluster_node_options(t->cl)->max_request_bytes, argc,
                              argv, argvlen);
    if (rv != RCP_OK) {
        size_t nl = argvlen ? argvlen[0] : strlen(argv[0]);
        t->has_slot = had;
        t->slot = old;
        snprintf(t->why, sizeof t->why, "command %zu (%.*s): %s", pos, (int)(nl < 40 ? nl : 40),
                 argv[0], why ? why : rcp_strerror(rv));
        return rv;
    }
    t->why[0] = '\0';
    return RCP_OK;
}

int rcp_txn_add_argv(rcp_txn *t, int argc, const char **argv, const size_t *argvlen)
{
    return t ? txn_take(t, argc, argv, argvlen) : RCP_ERR_INVALID;
}

int rcp_txn_add(rcp_txn *t, const char *fmt, ...)
{
    RCP__CMD_FORMATTED_ADD(t, fmt, txn_take);
}

/* The first redirect-or-retry answer among the queued commands, else the
 * reason EXEC gives ("EXECABORT Transaction discarded because of: MOVED
 * ..."), as an error reply of its own for the retry rules (retry.c); NULL
 * if there is none (the abort is the caller's answer). */
static rcp_reply *find_retry(rcp__gather_slot *s, size_t n)
{
    size_t i;
    rcp__redirect rd;
    const rcp_reply *ex = s[n + 1].r;
    for (i = 1; i <= n; i++) {
        const rcp_reply *r = s[i].r;
        if (r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_SERVER) {
            rcp__parse_redirect(r->str, r->len, &rd);
            if (rd.kind != RCP__RD_NONE && rd.kind != RCP__RD_BAD)
                return rcp__reply_error_new(RCP_ERR_SERVER, r->str);
        }
    }
    if (ex->type == RCP_REPLY_ERROR && ex->err == RCP_ERR_SERVER) {
        static const char because[] = "because of: ";
        const char *p = strstr(ex->str, because);
        p = p ? p + sizeof because - 1 : ex->str;
        rcp__parse_redirect(p, ex->len - (size_t)(p - ex->str), &rd);
        if (rd.kind != RCP__RD_NONE && rd.kind != RCP__RD_BAD)
            return rcp__reply_error_new(RCP_ERR_SERVER, p);
    }
    return NULL;
}

/* EXECABORT with the queued commands' own errors, for the caller. */
static rcp_reply *abort_reply(rcp__gather_slot *s, size_t n)
{
    char msg[1200];
    size_t used, i;
    const rcp_reply *ex = s[n + 1].r;
    used = (size_t)snprintf(msg, sizeof msg, "%.*s", (int)(ex->len < 300 ? ex->len : 300), ex->str);
    for (i = 1; i <= n && used < sizeof msg - 1; i++) {
        const rcp_reply *r = s[i].r;
        if (r->type == RCP_REPLY_ERROR) {
            int w = snprintf(msg + used, sizeof msg - used, "; command %zu: %.*s", i,
                             (int)(r->len < 200 ? r->len : 200), r->str);
            if (w > 0)
                used += (size_t)w;
        }
    }
    return rcp__reply_error_new(ex->err, msg);
}

/* One attempt on conn. *out is the final answer, or NULL to try again:
 * then *again is the answer that asks for it (a redirect, a retry-later
 * error, or "EXEC not sent"), for the retry rules; the caller frees it. */
static void attempt(rcp_txn *t, struct rcp_conn *conn, int asking, rcp_reply **out,
                    rcp_reply **again)
{
    size_t n = t->cmds.n, i, total = n + 2;
    rcp__gather_slot stack_s[18], *s = stack_s;
    rcp_future *fstack[18], **f = fstack;
    const char *rstack[18], **raw = rstack;
    size_t lstack[18], *len = lstack;
    rcp__gather g;
    const rcp_reply *ex;
    int rv;

    *out = NULL;
    *again = NULL;
    if (total > 18) {
        s = rcp__malloc(total * sizeof(*s));
        f = rcp__malloc(total * sizeof(*f));
        raw = rcp__malloc(total * sizeof(*raw));
        len = rcp__malloc(total * sizeof(*len));
        if (!s || !f || !raw || !len) {
            *out = rcp__reply_error_new(RCP_ERR_OOM, "out of memory sending a transaction");
            total = 0; /* no reply to free */
            goto done;
        }
    }
    rcp__gather_init(&g, s, total);
    for (i = 0; i < total; i++) {
        f[i] = &s[i].f;
        raw[i] = i == 0 ? multi_cmd : i == total - 1 ? exec_cmd : t->cmds.buf[i - 1];
        len[i] = i == 0 ? sizeof multi_cmd - 1 : i == total - 1 ? sizeof exec_cmd - 1 : t->cmds.len[i - 1];
    }
    rv = rcp__conn_send_group(conn, total, f, raw, len, asking);
    if (rv != RCP_OK) {
        /* Refused before anything was written: not run, whatever the
         * cause (a closed WATCH connection, a full queue). */
        char why[200];
        snprintf(why, sizeof why, "transaction not sent: %s", rcp_strerror(rv));
        for (i = 0; i < total; i++)
            rcp__gather_refused(&s[i], RCP_ERR_NOT_SENT, why);
    }
    rcp__gather_wait(&g);

    ex = s[total - 1].r;
    if (ex->type == RCP_REPLY_ERROR && ex->err == RCP_ERR_NOT_SENT) {
        /* EXEC never written: nothing ran. Try again, by the rules. */
        *again = rcp__reply_error_new(RCP_ERR_NOT_SENT, ex->str);
    } else if (ex->type == RCP_REPLY_ERROR && ex->err != RCP_ERR_SERVER) {
        char msg[400];
        snprintf(msg, sizeof msg, "transaction outcome unknown (EXEC was sent): %.*s",
                 (int)(ex->len < 300 ? ex->len : 300), ex->str);
        *out = rcp__reply_error_new(ex->err, msg);
    } else if (ex->type == RCP_REPLY_ERROR) {
        /* EXECABORT or an error of EXEC itself: nothing ran. */
        *again = find_retry(s, n);
        if (!*again)
            *out = abort_reply(s, n);
    } else {
        *out = s[total - 1].r; /* the EXEC array, or nil: a WATCHed key changed */
        s[total - 1].r = NULL;
    }
done:
    for (i = 0; i < total; i++)
        rcp_reply_free(s[i].r);
    if (s != stack_s) {
        rcp__free(s);
        rcp__free(f);
        rcp__free(raw);
        rcp__free(len);
    }
}

/* The transaction's routing state for the retry rules: its slot, and a
 * write (never resent once EXEC may have run). */
static void txn_req(rcp_txn *t, rcp__req *rq)
{
    memset(rq, 0, sizeof *rq);
    rq->has_slot = t->has_slot;
    rq->slot = t->slot;
    rq->flags = RCP__CMD_WRITE;
    rq->policy = RCP_READ_MASTER_ONLY;
}

/* What the retry rules say of `again`: 1 to try again (after sleeping
 * their backoff, when they say later), 0 with *out the final answer.
 * Frees again. */
static int txn_retry(rcp_txn *t, rcp__req *rq, rcp__node *asked, rcp_reply *again,
                     rcp_reply **out)
{
    uint64_t delay = 0;
    int code = RCP_OK, act;
    char msg[300];
    act = rcp__retry_decide(t->cl, rq, asked, again, &delay, &code, msg, sizeof msg);
    if (act != RCP__ACT_FAIL && rcp__cluster_closing(t->cl)) {
        *out = rcp__reply_error_new(RCP_ERR_CLOSED, "transaction not run: cluster handle closed");
    } else if (act == RCP__ACT_FAIL) {
        *out = rcp__reply_error_new(code, msg);
    } else if (act == RCP__ACT_DONE) {
        snprintf(msg, sizeof msg, "transaction not run: still refused after %d retries: %.*s",
                 rq->retries - 1, (int)(again->len < 200 ? again->len : 200), again->str);
        *out = rcp__reply_error_new(again->err == RCP_ERR_SERVER ? RCP_ERR_NOT_SENT : again->err,
                                    msg);
    } else {
        if (act == RCP__ACT_LATER)
            usleep((useconds_t)(delay / 1000));
        rcp_reply_free(again);
        return 1;
    }
    rcp_reply_free(again);
    return 0;
}

/* The unwatched path: the shared pipeline of wherever the slot lives. */
static rcp_reply *exec_shared(rcp_txn *t)
{
    rcp__req rq;
    txn_req(t, &rq);
    for (;;) {
        rcp__node *node = rcp__route_master(t->cl, &rq);
        struct rcp_conn *conn = node ? rcp__cluster_pin(node, RCP__AS_MASTER) : NULL;
        rcp_reply *out = NULL, *again = NULL;
        int asking = rq.asking;

        if (!conn) {
            if (rcp__cluster_closing(t->cl))
                return rcp__reply_error_new(RCP_ERR_CLOSED, "cluster handle closed");
            again = rcp__reply_error_new(RCP_ERR_NOT_SENT,
                                         node ? "no connection to the slot's master"
                                              : "no node serves the transaction's slot");
        } else {
            attempt(t, conn, asking, &out, &again);
            rcp__cluster_unpin(conn);
        }
        if (out)
            return out;
        if (!txn_retry(t, &rq, node, again, &out))
            return out;
    }
}

/* A command on the WATCH connection, waited for. */
static rcp_reply *on_wconn(rcp_txn *t, const char *raw, size_t len)
{
    return rcp__conn_command_raw(t->wconn, raw, len, 0, 0);
}

rcp_reply *rcp_txn_watch(rcp_txn *t, int nkeys, const char **keys, const size_t *keylens)
{
    const char *why;
    const char **argv;
    size_t *argvlen, len;
    char *buf;
    int i, rv, had;
    unsigned old;
    rcp_reply *r = NULL;
    rcp__req rq;

    if (!t || nkeys < 1 || !keys)
        return rcp__reply_error_new(RCP_ERR_INVALID, "rcp_txn_watch: no key");
    if ((r = rcp__sync_refused_on_loop()))
        return r;
    argv = rcp__malloc((size_t)(nkeys + 1) * sizeof(*argv));
    argvlen = rcp__malloc((size_t)(nkeys + 1) * sizeof(*argvlen));
    if (!argv || !argvlen) {
        rcp__free(argv);
        rcp__free(argvlen);
        return rcp__reply_error_new(RCP_ERR_OOM, "out of memory");
    }
    argv[0] = "WATCH";
    argvlen[0] = 5;
    for (i = 0; i < nkeys; i++) {
        if (!keys[i]) {
            rcp__free(argv);
            rcp__free(argvlen);
            return rcp__reply_error_new(RCP_ERR_INVALID, "rcp_txn_watch: NULL key");
        }
        argv[i + 1] = keys[i];
        argvlen[i + 1] = keylens ? keylens[i] : strlen(keys[i]);
    }
    had = t->has_slot;
    old = t->slot;
    rv = join_slot(t, nkeys + 1, argv, argvlen, &why);
    len = rcp__format_len(nkeys + 1, argv, argvlen);
    buf = rv == RCP_OK ? rcp__malloc(len) : NULL;
    if (buf)
        rcp__format_write(buf, nkeys + 1, argv, argvlen);
    rcp__free(argv);
    rcp__free(argvlen);
    if (rv != RCP_OK || !buf) {
        t->has_slot = had;
        t->slot = old;
        rcp__free(buf);
        return rv != RCP_OK ? rcp__reply_error_new(rv, why)
                            : rcp__reply_error_new(RCP_ERR_OOM, "out of memory");
    }

    if (t->wconn) {
        /* More keys on the connection already watching. */
        r = on_wconn(t, buf, len);
        rcp__free(buf);
        return r;
    }
    txn_req(t, &rq);
    for (;;) {
        rcp__node *node = rcp__route_master(t->cl, &rq);
        uint64_t delay = 0;
        int code, act;
        char msg[300];
        if (!node) {
            rcp__free(buf);
            return rcp__reply_error_new(RCP_ERR_CLUSTER_DOWN, "WATCH: no node serves the slot");
        }
        rv = rcp__cluster_dedicated(t->cl, node->host, node->port, RCP__CONN_ONCE, &t->wconn);
        if (rv != RCP_OK) {
            rcp__free(buf);
            return rcp__reply_error_new(rv, "WATCH: no connection");
        }
        snprintf(t->whost, sizeof t->whost, "%s", node->host);
        t->wport = node->port;
        r = on_wconn(t, buf, len);
        if (r->type != RCP_REPLY_ERROR || r->err != RCP_ERR_SERVER)
            break;
        /* The retry rules patch the map on MOVED; only a MOVED (a new
         * owner, on a new connection) or a retry-later answer is tried
         * again here. ASK (the slot is migrating) and the rest are the
         * caller's to retry. */
        act = rcp__retry_decide(t->cl, &rq, node, r, &delay, &code, msg, sizeof msg);
        if (act == RCP__ACT_FAIL) {
            rcp_reply_free(r);
            r = rcp__reply_error_new(code, msg);
            break;
        }
        if (act == RCP__ACT_DONE || rq.asking || rcp__cluster_closing(t->cl))
            break;
        unwatch(t);
        rcp_reply_free(r);
        if (act == RCP__ACT_LATER)
            usleep((useconds_t)(delay / 1000));
    }
    rcp__free(buf);
    if (r->type == RCP_REPLY_ERROR)
        unwatch(t);
    return r;
}

rcp_reply *rcp_txn_command_argv(rcp_txn *t, int argc, const char **argv, const size_t *argvlen)
{
    const char *why;
    char *buf;
    size_t len;
    int rv, i;
    rcp_reply *r;

    if (!t || argc < 1 || !argv)
        return rcp__reply_error_new(RCP_ERR_INVALID, "rcp_txn_command: bad arguments");
    if (!t->wconn)
        return rcp__reply_error_new(RCP_ERR_INVALID,
                                    "rcp_txn_command: only between rcp_txn_watch and exec");
    if ((r = rcp__sync_refused_on_loop()))
        return r;
    for (i = 0; i < argc; i++)
        if (!argv[i])
            return rcp__reply_error_new(RCP_ERR_INVALID, "rcp_txn_command: NULL argument");
    rv = rcp__command_check(argc, argv, argvlen, &why);
    if (rv == RCP_OK) {
        int had = t->has_slot;
        unsigned old = t->slot;
        rv = join_slot(t, argc, argv, argvlen, &why);
        t->has_slot = had; /* reads don't widen the transaction */
        t->slot = old;
    }
    if (rv != RCP_OK)
        return rcp__reply_error_new(rv, why);
    len = rcp__format_len(argc, argv, argvlen);
    if (len > rcp__cluster_node_options(t->cl)->max_request_bytes)
        return rcp__reply_error_new(RCP_ERR_TOO_LARGE,
                                    "rcp_txn_command: request larger than max_request_bytes");
    buf = rcp__malloc(len);
    if (!buf)
        return rcp__reply_error_new(RCP_ERR_OOM, "out of memory");
    rcp__format_write(buf, argc, argv, argvlen);
    r = on_wconn(t, buf, len);
    rcp__free(buf);
    return r;
}

rcp_reply *rcp_txn_exec(rcp_txn *t)
{
    rcp_reply *r;
    if (!t)
        return rcp__reply_error_new(RCP_ERR_INVALID, "rcp_txn_exec: NULL transaction");
    if ((r = rcp__sync_refused_on_loop()))
        return r;
    if (t->cmds.n == 0 && !t->wconn)
        return rcp__reply_error_new(RCP_ERR_INVALID, "rcp_txn_exec: no command queued");
    if (t->wconn) {
        rcp_reply *again;
        attempt(t, t->wconn, 0, &r, &again);
        if (again) {
            /* Not run. The answer still teaches the map (a MOVED is
             * recorded); the WATCH is lost, so the caller retries. */
            rcp__req rq;
            uint64_t delay;
            int code;
            char msg[300];
            txn_req(t, &rq);
            rcp__retry_decide(t->cl, &rq, NULL, again, &delay, &code, msg, sizeof msg);
            rcp_reply_free(again);
        }
        if (!r) {
            /* Not run: the WATCH connection was lost, or the slot moved. */
            char msg[400];
            snprintf(msg, sizeof msg,
                     "watched transaction not run (%s:%d: connection lost or slot moved); "
                     "watch again and retry",
                     t->whost, t->wport);
            r = rcp__reply_error_new(RCP_ERR_NOT_SENT, msg);
        }
        unwatch(t);
    } else {
        r = exec_shared(t);
    }
    rcp__cmdlist_clear(&t->cmds);
    t->has_slot = 0;
    return r;
}

rcp_reply *rcp_txn_command(rcp_txn *t, const char *fmt, ...)
{
    rcp__fmt_cmd cmd;
    const char *why = NULL;
    rcp_reply *r;
    va_list ap;
    int rv;
    if (!t || !fmt)
        return rcp__reply_error_new(RCP_ERR_INVALID, "rcp_txn_command: bad arguments");
    va_start(ap, fmt);
    rv = rcp__format_command(&cmd, fmt, ap, &why);
    va_end(ap);
    if (rv != RCP_OK)
        return rcp__reply_error_new(rv, why ? why : "rcp_txn_command: bad format");
    r = rcp_txn_command_argv(t, cmd.argc, cmd.argv, cmd.argvlen);
    rcp__free(cmd.buf);
    return r;
}
