/* cluster/pubsub_chan.c: the subscriber's channels and connections: each
 * channel's placement on its slot's owner (or the classic node), the
 * connections it opens for them, the replies and messages they bring, the
 * callers' (un)subscribe requests and the periodic re-check against the
 * map. All of it runs on the subscriber's thread (pubsub.c). */
#include "pubsub_int.h"
#include "format.h"

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
        /* An unsubscribe waiting: with its connection, the subscription
         * is gone too. */
        if (p->waiter)
            rcp__ps_req_complete(k->ps, p->waiter, RCP_OK);
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
    k->ps = ps;
    k->port = port;
    k->classic = classic;
    snprintf(k->addr, sizeof k->addr, "%s:%d", host, port);
    k->next = ps->conns;
    ps->conns = k;
    return k;
}

static void conn_lost(rcp_pubsub *ps, psconn *k, const char *why);

/* The I/O thread of k's connection: hand an item to the subscriber's
 * thread and wake it. */
static void ps_hand_over(psconn *k, rcp_pubsub *ps, psitem *it)
{
    uint64_t one = 1;
    it->k = k;
    pthread_mutex_lock(&ps->mu);
    if (ps->itail)
        ps->itail->next = it;
    else
        ps->ihead = it;
    ps->itail = it;
    pthread_mutex_unlock(&ps->mu);
    if (write(ps->efd, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is full, the thread is awake anyway */
    }
}

/* Push function of every subscriber connection (an I/O thread). */
static void ps_on_push(void *data, rcp_reply *r)
{
    psconn *k = data;
    psitem *it = rcp__calloc(1, sizeof *it);
    if (!it) {
        atomic_fetch_add(&k->ps->st_dropped, 1);
        return;
    }
    it->r = rcp_reply_keep(r);
    if (!it->r) {
        rcp__free(it);
        atomic_fetch_add(&k->ps->st_dropped, 1);
        return;
    }
    ps_hand_over(k, k->ps, it);
}

/* Event function of every subscriber connection (an I/O thread). */
static void ps_on_event(const rcp_event *ev, void *data)
{
    psconn *k = data;
    psitem *it;
    if (ev->type != RCP_EVENT_CONNECTED && ev->type != RCP_EVENT_DISCONNECTED &&
        ev->type != RCP_EVENT_CONNECT_FAILED)
        return;
    if (ev->type != RCP_EVENT_CONNECTED && ev->err != RCP_ERR_CLOSED)
        rcp__cluster_refresh_soon(k->ps->cl); /* a lost node is a topology signal */
    it = rcp__calloc(1, sizeof *it);
    if (!it)
        return; /* the next PING check finds it */
    it->type = ev->type;
    it->err = ev->err;
    snprintf(it->why, sizeof it->why, "%s", ev->message ? ev->message : "");
    ps_hand_over(k, k->ps, it);
}

/* k's connection, made if it has none: lib's handshake, reconnect and
 * backoff; the thread hears of it through ps_on_event. 0 or -1. */
static int conn_open(rcp_pubsub *ps, psconn *k)
{
    if (k->conn)
        return 0;
    if (rcp__cluster_dedicated_push(ps->cl, k->host, k->port, ps_on_push, k, ps_on_event, k,
                                    &k->conn) != RCP_OK) {
        k->conn = NULL;
        return -1;
    }
    k->up = 0;
    k->last_read = rcp__now_ns();
    k->ping_out = 0;
    return 0;
}

void rcp__ps_conn_close(rcp_pubsub *ps, psconn *k)
{
    psitem *it, **pp, *dead = NULL;
    if (k->conn)
        rcp_conn_close(k->conn); /* no push or event for k after it returns */
    k->conn = NULL;
    k->up = 0;
    pthread_mutex_lock(&ps->mu);
    ps->itail = NULL;
    for (pp = &ps->ihead; (it = *pp) != NULL;) {
        if (it->k == k) {
            *pp = it->next;
            it->next = dead;
            dead = it;
        } else {
            ps->itail = it;
            pp = &it->next;
        }
    }
    pthread_mutex_unlock(&ps->mu);
    while (dead) {
        it = dead;
        dead = it->next;
        rcp_reply_free(it->r);
        rcp__free(it);
    }
}

/* Queues one command and records what it waits for. 0, or -1 if the
 * connection would not take it (reconnecting, full): the caller tries
 * again later. */
static int conn_send(rcp_pubsub *ps, psconn *k, int op, int kind, const char *name, size_t len)
{
    static const char *const sub[] = {"SSUBSCRIBE", "SUBSCRIBE", "PSUBSCRIBE"};
    static const char *const unsub[] = {"SUNSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE"};
    const char *argv[2];
    size_t lens[2], blen;
    char stackbuf[512], *buf;
    int argc = 2, rv;
    pend *p;

    (void)ps;
    if (!k->conn)
        return -1;
    p = rcp__calloc(1, sizeof *p);
    if (!p || (op != OP_PING && !(p->name = rcp__ps_dup_bytes(name, len)))) {
        rcp__free(p);
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
    blen = rcp__format_len(argc, argv, lens);
    buf = blen <= sizeof stackbuf ? stackbuf : rcp__malloc(blen);
    if (!buf) {
        rcp__free(p->name);
        rcp__free(p);
        return -1;
    }
    rcp__format_write(buf, argc, argv, lens);
    rv = rcp__conn_push_send(k->conn, buf, blen);
    if (buf != stackbuf)
        rcp__free(buf);
    if (rv != RCP_OK) {
        rcp__free(p->name);
        rcp__free(p);
        return -1;
    }
    if (k->ptail)
        k->ptail->next = p;
    else
        k->phead = p;
    k->ptail = p;
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
    char host[256];
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
    if (conn_open(ps, k) < 0) {
        atomic_fetch_add(&ps->st_connect_failures, 1);
        c->retry_at = now + (uint64_t)ps->recheck_ms * MS;
        return;
    }
    if (conn_send(ps, k, OP_SUB, c->kind, c->name, c->len) < 0) {
        /* Not taken (the connection is between attempts): look again at
         * the map and the connection a little later. */
        c->retry_at = now + (uint64_t)ps->recheck_ms * MS;
        return;
    }
    c->conn = k;
    c->state = CH_PENDING;
}

/* The connection failed (lib reconnects it by itself, with its backoff):
 * what was pending on it is gone, and every channel on it goes back to be
 * placed. */
static void conn_lost(rcp_pubsub *ps, psconn *k, const char *why)
{
    chan *c;
    k->up = 0;
    rcp__ps_free_pends(k);
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

static int is_str(const rcp_reply *r)
{
    return r && (r->type == RCP_REPLY_STRING || r->type == RCP_REPLY_STATUS);
}

static int word_is(const rcp_reply *r, const char *w)
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

/* Done with p: its waiting caller (an unsubscribe) gets code. */
static void free_pend(rcp_pubsub *ps, pend *p, int code)
{
    if (p) {
        if (p->waiter)
            rcp__ps_req_complete(ps, p->waiter, code);
        rcp__free(p->name);
        rcp__free(p);
    }
}

static void deliver(rcp_pubsub *ps, int kind, const rcp_reply *pat, const rcp_reply *ch,
                    const rcp_reply *msg)
{
    const rcp_reply *key = kind == RCP_PUBSUB_PATTERN ? pat : ch;
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
static void on_error(rcp_pubsub *ps, psconn *k, const rcp_reply *r, uint64_t now)
{
    pend *p = pop_pend(k);
    rcp__redirect rd;
    chan *c;
    char nm[80];

    if (!p)
        return;
    if (p->op == OP_PING) {
        k->ping_out = 0;
        free_pend(ps, p, RCP_ERR_SERVER);
        return;
    }
    c = p->op == OP_SUB ? find_chan(ps, p->kind, p->name, p->len) : NULL;
    free_pend(ps, p, RCP_ERR_SERVER);
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

static void on_reply(rcp_pubsub *ps, psconn *k, rcp_reply *r, uint64_t now)
{
    const rcp_reply *w;
    int kind;
    chan *c;

    if (r->type == RCP_REPLY_ERROR) {
        on_error(ps, k, r, now);
        return;
    }
    if (r->type != RCP_REPLY_ARRAY || r->elements < 2 || !is_str(r->element[0]))
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
            free_pend(ps, pop_pend(k), RCP_OK);
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
            free_pend(ps, pop_pend(k), RCP_OK);
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
            free_pend(ps, pop_pend(k), RCP_OK); /* the answer to our own unsubscribe */
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

void rcp__ps_drain(rcp_pubsub *ps, uint64_t now)
{
    psitem *it;
    pthread_mutex_lock(&ps->mu);
    it = ps->ihead;
    ps->ihead = ps->itail = NULL;
    pthread_mutex_unlock(&ps->mu);
    while (it) {
        psitem *next = it->next;
        psconn *k = it->k;
        if (it->r) {
            k->last_read = now;
            on_reply(ps, k, it->r, now);
            rcp_reply_free(it->r);
        } else if (it->type == RCP_EVENT_CONNECTED) {
            k->up = 1;
            k->last_read = now;
            k->ping_out = 0;
            atomic_fetch_add(&ps->st_connects, 1);
        } else {
            if (it->type == RCP_EVENT_CONNECT_FAILED)
                atomic_fetch_add(&ps->st_connect_failures, 1);
            conn_lost(ps, k, it->why);
        }
        rcp__free(it);
        it = next;
    }
}

/* ------------------------------------------------------------------ */
/* requests from callers                                               */

void rcp__ps_handle_req(rcp_pubsub *ps, req *r, uint64_t now)
{
    chan *c = find_chan(ps, r->kind, r->name, r->len);

    r->next = NULL;
    if (r->op == OP_UNSUB) {
        psconn *k = c ? c->conn : NULL;
        int sent = 0;
        if (c) {
            /* Answered when the server confirms: once the call returns, the
             * server counts this subscriber no more. */
            if (k && k->conn && c->state != CH_IDLE &&
                conn_send(ps, k, OP_UNSUB, c->kind, c->name, c->len) == 0) {
                k->ptail->waiter = r;
                sent = 1;
            }
            rcp__ps_free_chan(ps, c);
        }
        if (!sent)
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
            conn_send(ps, old, OP_UNSUB, c->kind, c->name, c->len);
            chan_interrupt(ps, c, RCP_OK, why);
        }
    }
    /* Hung connections, keepalive, idle ones closed. */
    kp = &ps->conns;
    while ((k = *kp) != NULL) {
        if (k->up && ps->io_timeout_ms > 0) {
            uint64_t quiet = now - k->last_read;
            if (k->phead && quiet > (uint64_t)ps->io_timeout_ms * MS) {
                /* Connected but deaf: a new connection (lib's reconnect
                 * only follows failures it sees itself). */
                rcp__ps_conn_close(ps, k);
                conn_lost(ps, k, "no answer within io_timeout_ms");
            } else if (!k->ping_out && k->users > 0 &&
                       quiet > (uint64_t)ps->io_timeout_ms * MS / 3) {
                if (conn_send(ps, k, OP_PING, 0, NULL, 0) == 0)
                    k->ping_out = 1;
            }
        }
        /* A connection nobody uses is closed. */
        if (k->users == 0 && !k->phead) {
            *kp = k->next;
            rcp__ps_conn_close(ps, k);
            rcp__free(k);
            continue;
        }
        kp = &k->next;
    }
}
