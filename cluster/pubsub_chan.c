/* cluster/pubsub_chan.c: the subscriber's channels and connections: each
 * channel's placement on its slot's owner (or the classic node), the
 * connections it opens for them, the replies and messages they bring, the
 * callers' (un)subscribe requests and the periodic re-check against the
 * map. All of it runs on the subscriber's thread (pubsub.c). */
#include "pubsub_int.h"

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

static const char *kind_word(int kind)
{
    return kind == RCP_PUBSUB_SHARD ? "sharded channel"
           : kind == RCP_PUBSUB_CHANNEL ? "channel"
                                        : "pattern";
}

/* The channel's name for a message: at most 64 bytes, unprintable as '?'. */
static void printable(char *out, size_t outlen, const char *s, size_t len)
{
    size_t i, n = len < 64 ? len : 64;
    if (n >= outlen)
        n = outlen - 1;
    for (i = 0; i < n; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    out[n] = '\0';
}

static void emit(rcp_pubsub *ps, int type, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void emit(rcp_pubsub *ps, int type, int err, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (type == RCP_EVENT_PUBSUB_RESUBSCRIBED)
        atomic_fetch_add(&ps->st_resubscribes, 1);
    else
        atomic_fetch_add(&ps->st_interruptions, 1);
    rcp__cluster_emit(ps->cl, type, err, msg);
}

static int name_is(const char *a, size_t alen, const char *b, size_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

char *rcp__ps_dup_bytes(const char *s, size_t len)
{
    char *p = rcp__malloc(len + 1);
    if (!p)
        return NULL;
    if (len)
        memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* The caller is done with r, or the thread is: the last one frees it.
 * Returns 1 if the caller was still waiting (the thread's completion
 * reached someone). */
int rcp__ps_req_complete(rcp_pubsub *ps, req *r, int code)
{
    int waited;
    pthread_mutex_lock(&ps->mu);
    waited = !r->done && r->refs == 2;
    if (!r->done) {
        r->done = 1;
        r->code = code;
    }
    if (--r->refs == 0) {
        rcp__free(r->name);
        rcp__free(r);
    } else {
        pthread_cond_broadcast(&ps->cv);
    }
    pthread_mutex_unlock(&ps->mu);
    return waited;
}

/* Completes every waiter of c; 1 if at least one caller was still there. */
static int complete_waiters(rcp_pubsub *ps, chan *c, int code)
{
    int any = 0;
    while (c->waiters) {
        req *r = c->waiters;
        c->waiters = r->next;
        any |= rcp__ps_req_complete(ps, r, code);
    }
    return any;
}

static chan *find_chan(rcp_pubsub *ps, int kind, const char *name, size_t len)
{
    chan *c;
    for (c = ps->chans; c; c = c->next)
        if (c->kind == kind && name_is(c->name, c->len, name, len))
            return c;
    return NULL;
}

void rcp__ps_free_chan(rcp_pubsub *ps, chan *c)
{
    chan **pp;
    for (pp = &ps->chans; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    complete_waiters(ps, c, RCP_ERR_CLOSED);
    rcp__free(c->name);
    rcp__free(c);
}

/* ------------------------------------------------------------------ */
/* connections                                                         */

void rcp__ps_free_pends(psconn *k)
{
    while (k->phead) {
        pend *p = k->phead;
        k->phead = p->next;
        rcp__free(p->name);
        rcp__free(p);
    }
    k->ptail = NULL;
    k->ping_out = 0;
}

static psconn *get_conn(rcp_pubsub *ps, const char *host, int port, int classic)
{
    psconn *k;
    for (k = ps->conns; k; k = k->next)
        if (k->port == port && k->classic == classic && strcmp(k->host, host) == 0)
            return k;
    k = rcp__calloc(1, sizeof *k);
    if (!k)
        return NULL;
    snprintf(k->host, sizeof k->host, "%s", host);
    k->port = port;
    k->classic = classic;
    snprintf(k->addr, sizeof k->addr, "%s:%d", host, port);
    k->next = ps->conns;
    ps->conns = k;
    return k;
}

static void set_tv(struct timeval *tv, int ms)
{
    tv->tv_sec = ms / 1000;
    tv->tv_usec = (ms % 1000) * 1000;
}

/* One handshake command; 0, or -1 with a reason. */
static int handshake_cmd(redisContext *ctx, int argc, const char **argv, char *why, size_t whylen)
{
    redisReply *r = redisCommandArgv(ctx, argc, argv, NULL);
    if (!r) {
        snprintf(why, whylen, "%s: %s", argv[0], ctx->errstr);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%s refused: %.200s", argv[0], r->str);
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

/* Connects k (blocking, bounded by connect and io timeouts). 0 or -1. */
static int conn_connect(rcp_pubsub *ps, psconn *k, char *why, size_t whylen)
{
    struct timeval tv;
    redisContext *ctx;

    set_tv(&tv, ps->connect_timeout_ms);
    ctx = redisConnectWithTimeout(k->host, k->port, tv);
    if (!ctx || ctx->err) {
        snprintf(why, whylen, "connect to %s: %.100s", k->addr,
                 ctx ? ctx->errstr : "out of memory");
        redisFree(ctx);
        return -1;
    }
    set_tv(&tv, ps->io_timeout_ms);
    redisSetTimeout(ctx, tv);
    if (ps->password) {
        const char *argv[3] = {"AUTH", ps->username ? ps->username : ps->password,
                               ps->password};
        if (handshake_cmd(ctx, ps->username ? 3 : 2, argv, why, whylen) < 0) {
            redisFree(ctx);
            return -1;
        }
    }
    if (ps->client_name) {
        const char *argv[3] = {"CLIENT", "SETNAME", ps->client_name};
        if (handshake_cmd(ctx, 3, argv, why, whylen) < 0) {
            redisFree(ctx);
            return -1;
        }
    }
    k->ctx = ctx;
    k->last_read = rcp__now_ns();
    k->ping_out = 0;
    k->backoff_ms = 0;
    atomic_fetch_add(&ps->st_connects, 1);
    return 0;
}

static void conn_lost(rcp_pubsub *ps, psconn *k, const char *why);

/* Writes one command and records what it waits for. 0, or -1 after the
 * connection was declared lost. */
static int conn_send(rcp_pubsub *ps, psconn *k, int op, int kind, const char *name, size_t len)
{
    static const char *const sub[] = {"SSUBSCRIBE", "SUBSCRIBE", "PSUBSCRIBE"};
    static const char *const unsub[] = {"SUNSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE"};
    const char *argv[2];
    size_t lens[2];
    int done = 0, argc = 2;
    pend *p = rcp__calloc(1, sizeof *p);

    if (!p || (op != OP_PING && !(p->name = rcp__ps_dup_bytes(name, len)))) {
        rcp__free(p);
        conn_lost(ps, k, "out of memory");
        return -1;
    }
    p->op = op;
    p->kind = kind;
    p->len = len;
    if (op == OP_PING) {
        argv[0] = "PING";
        lens[0] = 4;
        argc = 1;
    } else {
        argv[0] = op == OP_SUB ? sub[kind] : unsub[kind];
        lens[0] = strlen(argv[0]);
        argv[1] = name;
        lens[1] = len;
    }
    if (redisAppendCommandArgv(k->ctx, argc, argv, lens) != REDIS_OK) {
        rcp__free(p->name);
        rcp__free(p);
        conn_lost(ps, k, k->ctx->errstr);
        return -1;
    }
    if (k->ptail)
        k->ptail->next = p;
    else
        k->phead = p;
    k->ptail = p;
    while (!done) {
        if (redisBufferWrite(k->ctx, &done) != REDIS_OK) {
            char why[160];
            snprintf(why, sizeof why, "write: %s", k->ctx->errstr);
            conn_lost(ps, k, why);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* channels                                                            */

/* The channel is not on any node any more (lost or moved): report it once
 * (if it was established) and put it back to be placed. */
static void chan_interrupt(rcp_pubsub *ps, chan *c, int err, const char *why)
{
    char nm[80];
    if (c->state == CH_ACTIVE) {
        printable(nm, sizeof nm, c->name, c->len);
        snprintf(c->was, sizeof c->was, "%s", c->conn ? c->conn->addr : "?");
        c->interrupted = 1;
        emit(ps, RCP_EVENT_PUBSUB_INTERRUPTED, err, "%s '%s' lost on %s: %s; re-subscribing",
             kind_word(c->kind), nm, c->was, why);
    }
    c->state = CH_IDLE;
    c->conn = NULL;
    c->retry_at = 0;
}

/* Where the classic channels go: the caller's node, else a master of the
 * map (picked again after that node failed). 0, or -1 if none known. */
static int classic_target(rcp_pubsub *ps, char *host, size_t hostlen, int *port)
{
    if (ps->classic_port == 0) {
        unsigned i;
        for (i = 0; i < 4 && ps->classic_port == 0; i++) {
            unsigned slot = (ps->classic_pick++ * 5461u + 1000u) % RCP__SLOTS;
            if (rcp__cluster_slot_master(ps->cl, slot, ps->classic_host,
                                         sizeof ps->classic_host, &ps->classic_port) < 0)
                ps->classic_port = 0;
        }
        if (ps->classic_port == 0)
            return -1;
    }
    snprintf(host, hostlen, "%s", ps->classic_host);
    *port = ps->classic_port;
    return 0;
}

/* Subscribe c on its owner now if possible, else set when to try again. */
void rcp__ps_chan_place(rcp_pubsub *ps, chan *c, uint64_t now)
{
    char host[256], why[512];
    int port;
    psconn *k;

    if (c->state != CH_IDLE || c->retry_at > now)
        return;
    if (c->kind != RCP_PUBSUB_SHARD) {
        if (classic_target(ps, host, sizeof host, &port) < 0) {
            c->retry_at = now + 100 * MS;
            return;
        }
    } else if (rcp__cluster_slot_master(ps->cl, c->slot, host, sizeof host, &port) < 0) {
        c->retry_at = now + 100 * MS; /* a refresh was asked for */
        return;
    }
    k = get_conn(ps, host, port, c->kind != RCP_PUBSUB_SHARD);
    if (!k) {
        c->retry_at = now + 100 * MS;
        return;
    }
    if (!k->ctx) {
        if (k->retry_at > now) {
            /* Look at the map again before then: the slot may have a
             * new owner (a promoted replica) already. */
            uint64_t recheck = now + (uint64_t)ps->recheck_ms * MS;
            c->retry_at = k->retry_at < recheck ? k->retry_at : recheck;
            return;
        }
        if (conn_connect(ps, k, why, sizeof why) < 0) {
            atomic_fetch_add(&ps->st_connect_failures, 1);
            k->backoff_ms = k->backoff_ms ? k->backoff_ms * 2 : 10;
            if (k->backoff_ms > ps->backoff_max_ms)
                k->backoff_ms = ps->backoff_max_ms;
            k->retry_at = rcp__now_ns() + (uint64_t)k->backoff_ms * MS;
            c->retry_at = k->retry_at < now + (uint64_t)ps->recheck_ms * MS
                              ? k->retry_at
                              : now + (uint64_t)ps->recheck_ms * MS;
            if (k->classic && !ps->classic_fixed)
                ps->classic_port = 0;
            rcp__cluster_refresh_soon(ps->cl);
            return;
        }
    }
    c->conn = k;
    c->state = CH_PENDING;
    if (conn_send(ps, k, OP_SUB, c->kind, c->name, c->len) < 0)
        return; /* conn_lost put c back to IDLE */
}

/* The connection failed: every channel on it goes back to be placed. */
static void conn_lost(rcp_pubsub *ps, psconn *k, const char *why)
{
    chan *c;
    redisFree(k->ctx);
    k->ctx = NULL;
    rcp__ps_free_pends(k);
    k->backoff_ms = k->backoff_ms ? k->backoff_ms * 2 : 10;
    if (k->backoff_ms > ps->backoff_max_ms)
        k->backoff_ms = ps->backoff_max_ms;
    k->retry_at = rcp__now_ns() + (uint64_t)k->backoff_ms * MS;
    if (k->classic && !ps->classic_fixed)
        ps->classic_port = 0;
    for (c = ps->chans; c; c = c->next)
        if (c->conn == k) {
            char msg[300];
            snprintf(msg, sizeof msg, "connection lost (%s)", why);
            chan_interrupt(ps, c, RCP_ERR_IO, msg);
        }
    rcp__cluster_refresh_soon(ps->cl);
}

/* ------------------------------------------------------------------ */
/* replies                                                             */

static int is_str(const redisReply *r)
{
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

static int word_is(const redisReply *r, const char *w)
{
    return is_str(r) && strlen(w) == r->len && strcasecmp(r->str, w) == 0;
}

static pend *pop_pend(psconn *k)
{
    pend *p = k->phead;
    if (p) {
        k->phead = p->next;
        if (!k->phead)
            k->ptail = NULL;
    }
    return p;
}

static void free_pend(pend *p)
{
    if (p) {
        rcp__free(p->name);
        rcp__free(p);
    }
}

static void deliver(rcp_pubsub *ps, int kind, const redisReply *pat, const redisReply *ch,
                    const redisReply *msg)
{
    const redisReply *key = kind == RCP_PUBSUB_PATTERN ? pat : ch;
    rcp_pubsub_msg m;
    if (!find_chan(ps, kind, key->str, key->len)) {
        atomic_fetch_add(&ps->st_dropped, 1);
        return;
    }
    memset(&m, 0, sizeof m);
    m.kind = kind;
    m.channel = ch->str;
    m.channel_len = ch->len;
    if (pat) {
        m.pattern = pat->str;
        m.pattern_len = pat->len;
    }
    m.message = msg->str;
    m.message_len = msg->len;
    atomic_fetch_add(&ps->st_messages, 1);
    ps->msg_cb(&m, ps->msg_data);
}

/* An error answered the command at the head of k's FIFO. */
static void on_error(rcp_pubsub *ps, psconn *k, const redisReply *r, uint64_t now)
{
    pend *p = pop_pend(k);
    rcp__redirect rd;
    chan *c;
    char nm[80];

    if (!p)
        return;
    if (p->op == OP_PING) {
        k->ping_out = 0;
        free_pend(p);
        return;
    }
    c = p->op == OP_SUB ? find_chan(ps, p->kind, p->name, p->len) : NULL;
    free_pend(p);
    if (!c || c->conn != k || c->state != CH_PENDING)
        return;
    rcp__parse_redirect(r->str, r->len, &rd);
    c->state = CH_IDLE;
    c->conn = NULL;
    if (rd.kind == RCP__RD_MOVED && c->kind == RCP_PUBSUB_SHARD) {
        /* The cluster's one set of retry rules records the slot's new
         * owner in the shared map (for every request, not only this
         * subscriber) and asks for a refresh; placing the channel again
         * then finds the new owner there. */
        rcp__req rq;
        rcp_reply e;
        uint64_t delay;
        int code;
        char msg[300];
        memset(&rq, 0, sizeof rq);
        rq.has_slot = 1;
        rq.slot = c->slot;
        rq.policy = RCP_READ_MASTER_ONLY;
        rcp__reply_error_init(&e, RCP_ERR_SERVER, r->str);
        rcp__retry_decide(ps->cl, &rq,
                          rd.host[0] ? NULL
                                     : rcp__cluster_node(ps->cl, k->host, k->port, RCP__AS_MASTER),
                          &e, &delay, &code, msg, sizeof msg);
        atomic_fetch_add(&ps->st_moved, 1);
        c->retry_at = 0;
        rcp__ps_chan_place(ps, c, now);
        return;
    }
    if (rd.kind == RCP__RD_NONE || (rd.kind == RCP__RD_READONLY && c->kind != RCP_PUBSUB_SHARD)) {
        /* Refused for good (ACL, wrong arguments...). */
        printable(nm, sizeof nm, c->name, c->len);
        if (c->confirmed_once)
            emit(ps, RCP_EVENT_PUBSUB_INTERRUPTED, RCP_ERR_SERVER,
                 "%s '%s' refused by %s: %.200s; given up", kind_word(c->kind), nm, k->addr,
                 r->str);
        complete_waiters(ps, c, RCP_ERR_SERVER);
        rcp__ps_free_chan(ps, c);
        return;
    }
    /* ASK (mid-migration), TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, a
     * READONLY from a demoted master: the topology is changing; later. */
    c->tries++;
    c->retry_at = now + (uint64_t)(20 << (c->tries < 6 ? c->tries : 6)) * MS;
    rcp__cluster_refresh_soon(ps->cl);
}

static void on_reply(rcp_pubsub *ps, psconn *k, redisReply *r, uint64_t now)
{
    const redisReply *w;
    int kind;
    chan *c;

    if (r->type == REDIS_REPLY_ERROR) {
        on_error(ps, k, r, now);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || !is_str(r->element[0]))
        return;
    w = r->element[0];
    if (r->elements == 3 && is_str(r->element[1]) && is_str(r->element[2]) &&
        (word_is(w, "smessage") || word_is(w, "message"))) {
        deliver(ps, word_is(w, "smessage") ? RCP_PUBSUB_SHARD : RCP_PUBSUB_CHANNEL, NULL,
                r->element[1], r->element[2]);
        return;
    }
    if (r->elements == 4 && word_is(w, "pmessage") && is_str(r->element[1]) &&
        is_str(r->element[2]) && is_str(r->element[3])) {
        deliver(ps, RCP_PUBSUB_PATTERN, r->element[1], r->element[2], r->element[3]);
        return;
    }
    if (word_is(w, "pong")) {
        pend *p = k->phead;
        if (p && p->op == OP_PING)
            free_pend(pop_pend(k));
        k->ping_out = 0;
        return;
    }
    if (r->elements != 3 || !is_str(r->element[1]))
        return;
    if (word_is(w, "ssubscribe") || word_is(w, "subscribe") || word_is(w, "psubscribe")) {
        pend *p = k->phead;
        kind = w->str[0] == 's' || w->str[0] == 'S'
                   ? (w->len == 10 ? RCP_PUBSUB_SHARD : RCP_PUBSUB_CHANNEL)
                   : RCP_PUBSUB_PATTERN;
        if (p && p->op == OP_SUB && p->kind == kind &&
            name_is(p->name, p->len, r->element[1]->str, r->element[1]->len))
            free_pend(pop_pend(k));
        c = find_chan(ps, kind, r->element[1]->str, r->element[1]->len);
        if (!c || c->conn != k || c->state != CH_PENDING)
            return; /* moved or dropped meanwhile: its unsubscribe follows */
        c->state = CH_ACTIVE;
        c->tries = 0;
        if (!complete_waiters(ps, c, RCP_OK) && !c->confirmed_once)
            c->interrupted = 1; /* nobody waited for it: report it */
        c->confirmed_once = 1;
        if (c->interrupted) {
            char nm[80];
            printable(nm, sizeof nm, c->name, c->len);
            c->interrupted = 0;
            if (c->kind == RCP_PUBSUB_SHARD)
                emit(ps, RCP_EVENT_PUBSUB_RESUBSCRIBED, RCP_OK,
                     "sharded channel '%s' (slot %u) subscribed on %s (was %s)", nm, c->slot,
                     k->addr, c->was[0] ? c->was : "none");
            else
                emit(ps, RCP_EVENT_PUBSUB_RESUBSCRIBED, RCP_OK, "%s '%s' subscribed on %s (was %s)",
                     kind_word(c->kind), nm, k->addr, c->was[0] ? c->was : "none");
        }
        return;
    }
    if (word_is(w, "sunsubscribe") || word_is(w, "unsubscribe") || word_is(w, "punsubscribe")) {
        pend *p = k->phead;
        kind = w->str[0] == 's' || w->str[0] == 'S'
                   ? RCP_PUBSUB_SHARD
                   : (w->str[0] == 'u' || w->str[0] == 'U' ? RCP_PUBSUB_CHANNEL
                                                           : RCP_PUBSUB_PATTERN);
        if (p && p->op == OP_UNSUB && p->kind == kind &&
            name_is(p->name, p->len, r->element[1]->str, r->element[1]->len)) {
            free_pend(pop_pend(k)); /* the answer to our own unsubscribe */
            return;
        }
        /* Unsolicited: the server dropped it (its slot left this node). */
        c = find_chan(ps, kind, r->element[1]->str, r->element[1]->len);
        if (c && c->conn == k && c->state == CH_ACTIVE) {
            char why[64];
            snprintf(why, sizeof why, "the node dropped it (slot %u moved)", c->slot);
            chan_interrupt(ps, c, RCP_OK, why);
            rcp__cluster_refresh_soon(ps->cl);
            rcp__ps_chan_place(ps, c, now);
        }
    }
}

/* Reads what k has; 0, or -1 once k was declared lost. */
int rcp__ps_conn_read(rcp_pubsub *ps, psconn *k)
{
    void *reply = NULL;
    uint64_t now = rcp__now_ns();

    if (redisBufferRead(k->ctx) != REDIS_OK) {
        char why[160];
        snprintf(why, sizeof why, "read: %s", k->ctx->errstr);
        conn_lost(ps, k, why);
        return -1;
    }
    k->last_read = now;
    for (;;) {
        if (redisGetReplyFromReader(k->ctx, &reply) != REDIS_OK) {
            char why[160];
            snprintf(why, sizeof why, "protocol: %s", k->ctx->errstr);
            conn_lost(ps, k, why);
            return -1;
        }
        if (!reply)
            return 0;
        on_reply(ps, k, reply, now);
        freeReplyObject(reply);
        reply = NULL;
        if (!k->ctx)
            return -1; /* lost while handling the reply (a write failed) */
    }
}

/* ------------------------------------------------------------------ */
/* requests from callers                                               */

void rcp__ps_handle_req(rcp_pubsub *ps, req *r, uint64_t now)
{
    chan *c = find_chan(ps, r->kind, r->name, r->len);

    r->next = NULL;
    if (r->op == OP_UNSUB) {
        if (c) {
            if (c->conn && c->conn->ctx && c->state != CH_IDLE)
                conn_send(ps, c->conn, OP_UNSUB, c->kind, c->name, c->len);
            rcp__ps_free_chan(ps, c);
        }
        rcp__ps_req_complete(ps, r, RCP_OK);
        return;
    }
    if (c && c->state == CH_ACTIVE) {
        rcp__ps_req_complete(ps, r, RCP_OK);
        return;
    }
    if (!c) {
        c = rcp__calloc(1, sizeof *c);
        if (!c || !(c->name = rcp__ps_dup_bytes(r->name, r->len))) {
            rcp__free(c);
            rcp__ps_req_complete(ps, r, RCP_ERR_OOM);
            return;
        }
        c->kind = r->kind;
        c->len = r->len;
        c->slot = rcp_keyslot(r->name, r->len);
        c->next = ps->chans;
        ps->chans = c;
    }
    r->next = c->waiters;
    c->waiters = r;
    rcp__ps_chan_place(ps, c, now);
}

/* ------------------------------------------------------------------ */
/* the periodic work                                                   */

void rcp__ps_periodic(rcp_pubsub *ps, uint64_t now)
{
    psconn *k, **kp;
    chan *c;

    /* Owners by the map. */
    for (k = ps->conns; k; k = k->next)
        k->users = 0;
    for (c = ps->chans; c; c = c->next) {
        char host[256];
        int port;
        if (c->conn)
            c->conn->users++;
        if (c->kind != RCP_PUBSUB_SHARD || c->state == CH_IDLE)
            continue;
        if (rcp__cluster_slot_master(ps->cl, c->slot, host, sizeof host, &port) < 0)
            continue;
        if (port == c->conn->port && strcmp(host, c->conn->host) == 0)
            continue;
        {
            psconn *old = c->conn;
            char why[300];
            snprintf(why, sizeof why, "the map moved slot %u to %s:%d", c->slot, host, port);
            old->users--;
            if (old->ctx && conn_send(ps, old, OP_UNSUB, c->kind, c->name, c->len) < 0)
                continue; /* conn_lost put c back already */
            chan_interrupt(ps, c, RCP_OK, why);
        }
    }
    /* Hung connections, keepalive, idle ones closed. */
    kp = &ps->conns;
    while ((k = *kp) != NULL) {
        if (k->ctx && ps->io_timeout_ms > 0) {
            uint64_t quiet = now - k->last_read;
            if (k->phead && quiet > (uint64_t)ps->io_timeout_ms * MS) {
                conn_lost(ps, k, "no answer within io_timeout_ms");
            } else if (!k->ping_out && k->users > 0 &&
                       quiet > (uint64_t)ps->io_timeout_ms * MS / 3) {
                if (conn_send(ps, k, OP_PING, 0, NULL, 0) == 0)
                    k->ping_out = 1;
            }
        }
        /* A connection nobody uses is closed; a failed one is kept a
         * while so that its backoff still spaces the next attempts. */
        if (k->users == 0 && !k->phead && (k->ctx || now > k->retry_at + 5000 * MS)) {
            *kp = k->next;
            redisFree(k->ctx);
            rcp__free(k);
            continue;
        }
        kp = &k->next;
    }
}
