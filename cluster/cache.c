/* cluster/cache.c: client-side caching (contract in cache.h).
 *
 * Entries. A reply is kept under its formatted command (GET k and
 * HGET k f are two entries), indexed by the hash of its key, so that an
 * invalidation of k finds every entry of k in one bucket. The table is cut
 * into 64 shards by the key's hash, each with its own mutex, hash chains
 * and LRU list: a hit locks one shard that the other threads touch only
 * when they ask for a key of the same shard, copies the reply and moves
 * the entry to the front. No system call: the clock is the vDSO's.
 *
 * Memory. Every entry is charged its header, key, command, reply nodes
 * (rcp_reply headers and text) and an index overhead; a shard evicts from
 * its LRU tail beyond cap/64, so the whole never holds more than the cap,
 * plus the fixed shard array (RCP__CACHE_FIXED_BYTES, docs/caching.md).
 *
 * Correctness. A miss puts a pending entry (no reply, a token) in place
 * before the read is sent; an invalidation or a write of the key removes
 * it, and the reply is stored only if the same pending entry is still
 * there and the node's epoch (cache.h) has not moved. A hit is served only
 * if its node still owns the slot in the current map (no ASK pinned), the
 * node's epoch is the one the entry was read under, and neither the TTL
 * cap nor the key's PTTL (fetched in the same write as the value, just
 * before it) has passed. */
#include <stdio.h>
#include <string.h>

#include <urcu-bp.h>

#include "alloc.h"
#include "cache.h"
#include "clock.h"
#include "format.h"
#include "reply.h"
#include "waiter.h"

#define SHARDS 64
#define SHARD_BITS 6
#define INDEX_BYTES 32 /* charged per entry for its share of the hash index */

typedef struct centry {
    struct centry *hnext;       /* hash chain */
    struct centry *prev, *next; /* shard LRU, most recent first */
    uint64_t hash;              /* of the key */
    rcp__node *node;            /* read from this master */
    uint64_t epoch;             /* node's epoch at the send */
    uint64_t expires;           /* ns */
    uint64_t token;             /* pending (no value yet): its reader's token */
    rcp_reply *value;           /* NULL while pending */
    size_t bytes;               /* charged */
    unsigned slot;
    size_t keylen, cmdlen;
    char data[];                /* key, then the formatted command */
} centry;

typedef struct shard {
    _Alignas(64) pthread_mutex_t mu;
    centry **buckets;
    size_t nbuckets, count, bytes;
    centry *head, *tail; /* LRU: head most recent */
    uint64_t next_token;
    uint64_t hits, misses, evictions;
} shard;

/* One invalidation connection's callbacks' context. */
typedef struct invctx {
    struct rcp_cluster *cl;
    rcp__node *n;
    _Atomic(struct rcp_conn *) conn;
    struct invctx *next;
} invctx;

struct rcp__cache {
    size_t shard_cap;
    uint64_t ttl_ns;
    int bcast, nprefixes;
    char *prefix[16];
    size_t prefixlen[16];
    char *arm_tail;     /* " BCAST PREFIX p ..." of the arm command, RESP-formatted */
    size_t arm_tail_len;
    int arm_tail_args;
    pthread_mutex_t inv_mu; /* making invalidation connections; ctxs */
    invctx *ctxs;
    shard sh[SHARDS];
};

/* ------------------------------------------------------------------ */
/* the table                                                           */

static uint64_t key_hash(const char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n, v;
    while (n >= 8) {
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    v = 0;
    memcpy(&v, p, n);
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    return h;
}

static shard *shard_of(rcp__cache *c, uint64_t h)
{
    return &c->sh[h >> (64 - SHARD_BITS)];
}

static size_t reply_bytes(const rcp_reply *r)
{
    size_t b = sizeof(*r) + 16, i;
    if (!r)
        return 0;
    if (r->type == RCP_REPLY_STRING || r->type == RCP_REPLY_STATUS || r->type == RCP_REPLY_ERROR)
        b += r->len + 1;
    if (r->type == RCP_REPLY_ARRAY) {
        b += r->elements * sizeof(rcp_reply *);
        for (i = 0; i < r->elements; i++)
            b += reply_bytes(r->element[i]);
    }
    return b;
}

static centry *find(shard *s, uint64_t h, const char *cmd, size_t cmdlen)
{
    centry *e;
    if (!s->nbuckets)
        return NULL;
    for (e = s->buckets[h & (s->nbuckets - 1)]; e; e = e->hnext)
        if (e->hash == h && e->cmdlen == cmdlen && memcmp(e->data + e->keylen, cmd, cmdlen) == 0)
            return e;
    return NULL;
}

static void lru_unlink(shard *s, centry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->tail = e->prev;
}

static void lru_front(shard *s, centry *e)
{
    e->prev = NULL;
    e->next = s->head;
    if (s->head)
        s->head->prev = e;
    else
        s->tail = e;
    s->head = e;
}

/* Shard locked. Out of the index and the LRU, uncharged; the caller frees
 * it (entry_free), outside the lock when it can. */
static void entry_unlink(shard *s, centry *e)
{
    centry **pp = &s->buckets[e->hash & (s->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(s, e);
    s->count--;
    s->bytes -= e->bytes;
}

static void entry_free(centry *e)
{
    while (e) {
        centry *next = e->hnext;
        rcp_reply_free(e->value);
        rcp__free(e);
        e = next;
    }
}

/* Shard locked: unlink e and push it on *dead (freed after the unlock). */
static void entry_kill(shard *s, centry *e, centry **dead)
{
    entry_unlink(s, e);
    e->hnext = *dead;
    *dead = e;
}

/* Shard locked: the table doubles once it holds as many entries as
 * buckets (no effect if memory is short: chains get longer). */
static void maybe_grow(shard *s)
{
    size_t nb = s->nbuckets ? s->nbuckets * 2 : 64, i;
    centry **b;
    if (s->count < s->nbuckets)
        return;
    b = rcp__calloc(nb, sizeof(*b));
    if (!b)
        return;
    for (i = 0; i < s->nbuckets; i++) {
        centry *e = s->buckets[i];
        while (e) {
            centry *next = e->hnext;
            e->hnext = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    rcp__free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

/* Shard locked: evict from the LRU tail until the shard fits its cap. */
static void evict(rcp__cache *c, shard *s, centry **dead)
{
    while (s->bytes > c->shard_cap && s->tail) {
        entry_kill(s, s->tail, dead);
        s->evictions++;
    }
}

/* Every entry of a key (and every pending read of it) out. */
static void drop_key(rcp__cache *c, const char *key, size_t keylen)
{
    uint64_t h = key_hash(key, keylen);
    shard *s = shard_of(c, h);
    centry *e, *next, *dead = NULL;
    pthread_mutex_lock(&s->mu);
    for (e = s->nbuckets ? s->buckets[h & (s->nbuckets - 1)] : NULL; e; e = next) {
        next = e->hnext;
        if (e->hash == h && e->keylen == keylen && memcmp(e->data, key, keylen) == 0)
            entry_kill(s, e, &dead);
    }
    pthread_mutex_unlock(&s->mu);
    entry_free(dead);
}

/* ------------------------------------------------------------------ */
/* the node's epoch and tracking                                       */

/* Entries read from n are no longer trusted, and neither are reads in
 * flight; a later arm makes it ready again. */
static void node_lost(rcp__node *n)
{
    uint64_t e = atomic_load(&n->cache_epoch);
    atomic_fetch_add(&n->cache_seq, 1);
    while ((e & 1) && !atomic_compare_exchange_weak(&n->cache_epoch, &e, e + 1))
        ;
}

/* The node flushed (FLUSHALL, a full resync): its entries are dead, its
 * tracking stays armed. */
static void node_flushed(rcp__node *n)
{
    uint64_t e = atomic_load(&n->cache_epoch);
    while ((e & 1) && !atomic_compare_exchange_weak(&n->cache_epoch, &e, e + 2))
        ;
}

typedef struct arm {
    rcp_future f;
    rcp_future off; /* broadcast: CLIENT TRACKING OFF first (same prefixes twice overlap) */
    rcp__node *n;
    uint64_t seq;
} arm;

static void arm_off_done(rcp_future *f, rcp_reply *r)
{
    (void)f;
    (void)r; /* the ON after it says whether it worked */
}

static void arm_done(rcp_future *f, rcp_reply *r)
{
    arm *a = (arm *)f;
    rcp__node *n = a->n;
    if (r->type == RCP_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0 &&
        atomic_load(&n->cache_seq) == a->seq) {
        uint64_t e = atomic_load(&n->cache_epoch);
        /* Reads sent from now on are behind the TRACKING on the wire. */
        if (!(e & 1))
            atomic_compare_exchange_strong(&n->cache_epoch, &e, e + 1);
    }
    rcp__free(a);
}

/* Point the node's plain connection at its invalidation connection. Any
 * thread, loop threads included (never blocks). */
static void node_arm(rcp__cache *c, rcp__node *n)
{
    static const char off_cmd[] = "*3\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$3\r\nOFF\r\n";
    long long id = atomic_load(&n->inv_id);
    struct rcp_conn *conn;
    char idbuf[32], head[160], *buf;
    size_t hlen, len;
    int rv = RCP_ERR_OOM;
    arm *a;
    if (id <= 0 || (atomic_load(&n->cache_epoch) & 1))
        return;
    /* *N CLIENT TRACKING ON REDIRECT id, then the broadcast arguments. */
    snprintf(idbuf, sizeof idbuf, "%lld", id);
    hlen = (size_t)snprintf(head, sizeof head,
                            "*%d\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\nON\r\n"
                            "$8\r\nREDIRECT\r\n$%zu\r\n%s\r\n",
                            5 + c->arm_tail_args, strlen(idbuf), idbuf);
    len = hlen + c->arm_tail_len;
    a = rcp__calloc(1, sizeof(*a));
    buf = rcp__malloc(len);
    if (!a || !buf) {
        rcp__free(a);
        rcp__free(buf);
        return;
    }
    memcpy(buf, head, hlen);
    if (c->arm_tail_len)
        memcpy(buf + hlen, c->arm_tail, c->arm_tail_len);
    a->f.resolve = arm_done;
    a->off.resolve = arm_off_done;
    a->n = n;
    a->seq = atomic_load(&n->cache_seq);
    conn = rcp__cluster_pin(n, RCP__AS_MASTER);
    if (conn && !c->bcast) {
        rv = rcp__conn_send_raw(conn, &a->f, buf, len, 0);
    } else if (conn) {
        rcp_future *fs[2] = {&a->off, &a->f};
        const char *raws[2] = {off_cmd, buf};
        size_t lens[2] = {sizeof off_cmd - 1, len};
        rv = rcp__conn_send_group(conn, 2, fs, raws, lens, 0);
    }
    if (rv != RCP_OK)
        rcp__free(a);
    rcp__free(buf);
    if (conn)
        rcp__cluster_unpin(conn);
}

/* What the invalidation connection hears (its loop thread). */
static void inv_push(void *data, rcp_reply *r)
{
    invctx *x = data;
    rcp__node *n = x->n;
    rcp_reply *p;
    size_t i;
    if (r->type == RCP_REPLY_INTEGER) { /* CLIENT ID */
        atomic_store(&n->inv_id, r->integer);
        return;
    }
    if (r->type != RCP_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != RCP_REPLY_STRING)
        return; /* an error: tracking stays unarmed, the cache passes reads on */
    if (r->element[0]->len == 9 && memcmp(r->element[0]->str, "subscribe", 9) == 0) {
        node_arm(x->cl->cache, n);
        return;
    }
    if (r->element[0]->len != 7 || memcmp(r->element[0]->str, "message", 7) != 0)
        return;
    p = r->element[2];
    if (p->type != RCP_REPLY_ARRAY) { /* null: the node flushed */
        atomic_fetch_add(&n->cache_invalidations, 1);
        node_flushed(n);
        return;
    }
    atomic_fetch_add(&n->cache_invalidations, p->elements);
    for (i = 0; i < p->elements; i++)
        if (p->element[i]->type == RCP_REPLY_STRING)
            drop_key(x->cl->cache, p->element[i]->str, p->element[i]->len);
}

static void inv_subscribe(struct rcp_conn *conn)
{
    static const char id_cmd[] = "*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n";
    static const char sub_cmd[] = "*2\r\n$9\r\nSUBSCRIBE\r\n$20\r\n__redis__:invalidate\r\n";
    if (rcp__conn_push_send(conn, id_cmd, sizeof id_cmd - 1) == RCP_OK)
        rcp__conn_push_send(conn, sub_cmd, sizeof sub_cmd - 1);
}

static void inv_event(const rcp_event *ev, void *data)
{
    invctx *x = data;
    struct rcp_cluster *cl = x->cl;
    if (ev->type == RCP_EVENT_CONNECTED) {
        struct rcp_conn *conn = atomic_load(&x->conn);
        if (conn) /* else the creator subscribes (rcp__cache_command) */
            inv_subscribe(conn);
    } else if (ev->type == RCP_EVENT_DISCONNECTED || ev->type == RCP_EVENT_CONNECT_FAILED) {
        atomic_store(&x->n->inv_id, 0);
        node_lost(x->n);
    }
    if (cl->opt.event_cb)
        cl->opt.event_cb(ev, cl->opt.event_data);
}

/* The node's invalidation connection, made on its first cacheable miss. */
static void inv_ensure(struct rcp_cluster *cl, rcp__node *n)
{
    rcp__cache *c = cl->cache;
    struct rcp_conn *conn;
    invctx *x;
    pthread_mutex_lock(&c->inv_mu);
    if (atomic_load(&n->inv) || atomic_load(&cl->closing)) {
        pthread_mutex_unlock(&c->inv_mu);
        return;
    }
    x = rcp__calloc(1, sizeof(*x));
    if (!x) {
        pthread_mutex_unlock(&c->inv_mu);
        return;
    }
    x->cl = cl;
    x->n = n;
    if (rcp__cluster_dedicated_push(cl, n->host, n->port, inv_push, x, inv_event, x, &conn) !=
        RCP_OK) {
        rcp__free(x);
        pthread_mutex_unlock(&c->inv_mu);
        return;
    }
    x->next = c->ctxs;
    c->ctxs = x;
    atomic_store(&n->inv, conn);
    atomic_store(&x->conn, conn);
    /* Queued behind the handshake; a CONNECTED event that came first
     * found no conn and left it to us (a second CLIENT ID and SUBSCRIBE
     * would be harmless). */
    inv_subscribe(conn);
    pthread_mutex_unlock(&c->inv_mu);
}

/* ------------------------------------------------------------------ */
/* serving and storing                                                 */

int rcp__cache_eligible(const struct rcp_cluster *cl, const rcp__req *rq, int argc, int mode)
{
    if (mode == RCP_CACHE_BYPASS || (mode == RCP_CACHE_DEFAULT && cl->opt.client_cache_optin))
        return 0;
    return cl->cache && (rq->flags & RCP__CMD_CACHEABLE) && rq->has_slot && !rq->sink &&
           !rq->src && argc >= 2 && (!(rq->flags & RCP__CMD_MULTIKEY) || argc == 2);
}

/* Under urcu_bp_read_lock: the slot's master, unless an ASK pinned it. */
static rcp__node *slot_owner(struct rcp_cluster *cl, unsigned slot)
{
    rcp__map *m = rcp__map_current(cl);
    rcp__shard *sh = atomic_load_explicit(&m->slots[slot], memory_order_acquire);
    if (!sh || atomic_load_explicit(&m->pinned[slot], memory_order_relaxed))
        return NULL;
    return sh->master;
}

static int entry_valid(struct rcp_cluster *cl, const centry *e, uint64_t now)
{
    int ok;
    if (now >= e->expires || e->epoch != atomic_load(&e->node->cache_epoch))
        return 0;
    urcu_bp_read_lock();
    ok = slot_owner(cl, e->slot) == e->node;
    urcu_bp_read_unlock();
    return ok;
}

/* A hit's copy, or NULL (a miss: counted, and a stale entry dropped). */
static rcp_reply *lookup(struct rcp_cluster *cl, uint64_t h, const rcp__req *rq)
{
    rcp__cache *c = cl->cache;
    shard *s = shard_of(c, h);
    centry *e, *dead = NULL;
    rcp_reply *r = NULL;
    uint64_t now = rcp__now_ns();
    pthread_mutex_lock(&s->mu);
    e = find(s, h, rq->buf, rq->len);
    if (e && e->value) {
        if (entry_valid(cl, e, now)) {
            r = rcp_reply_dup(e->value);
            lru_unlink(s, e);
            lru_front(s, e);
        } else {
            entry_kill(s, e, &dead);
        }
    }
    if (r)
        s->hits++;
    else
        s->misses++;
    pthread_mutex_unlock(&s->mu);
    entry_free(dead);
    return r;
}

/* A pending entry for the read about to be sent; its token, 0 if none
 * could be made (the read is then not stored). */
static uint64_t put_pending(rcp__cache *c, uint64_t h, const char *key, size_t keylen,
                            const rcp__req *rq, rcp__node *n, uint64_t epoch)
{
    shard *s = shard_of(c, h);
    centry *e = rcp__malloc(sizeof(*e) + keylen + rq->len), *old, *dead = NULL;
    uint64_t token;
    if (!e)
        return 0;
    memset(e, 0, sizeof(*e));
    e->hash = h;
    e->node = n;
    e->epoch = epoch;
    e->slot = rq->slot;
    e->keylen = keylen;
    e->cmdlen = rq->len;
    e->bytes = sizeof(*e) + keylen + rq->len + INDEX_BYTES;
    memcpy(e->data, key, keylen);
    memcpy(e->data + keylen, rq->buf, rq->len);
    pthread_mutex_lock(&s->mu);
    if ((old = find(s, h, rq->buf, rq->len)))
        entry_kill(s, old, &dead);
    maybe_grow(s);
    if (!s->nbuckets) {
        pthread_mutex_unlock(&s->mu);
        rcp__free(e);
        return 0;
    }
    token = e->token = ++s->next_token;
    e->hnext = s->buckets[h & (s->nbuckets - 1)];
    s->buckets[h & (s->nbuckets - 1)] = e;
    lru_front(s, e);
    s->count++;
    s->bytes += e->bytes;
    evict(c, s, &dead);
    pthread_mutex_unlock(&s->mu);
    entry_free(dead);
    return token;
}

/* The pending entry of token: filled with value (owned from here) if it
 * is still there and the node's epoch is still `epoch`, else dropped. */
static void fill_pending(rcp__cache *c, uint64_t h, const rcp__req *rq, uint64_t token,
                         rcp_reply *value, uint64_t epoch, uint64_t expires)
{
    shard *s = shard_of(c, h);
    centry *e, *dead = NULL;
    size_t vb = value ? reply_bytes(value) : 0;
    pthread_mutex_lock(&s->mu);
    e = find(s, h, rq->buf, rq->len);
    if (e && e->token == token && !e->value) {
        if (value && atomic_load(&e->node->cache_epoch) == epoch) {
            e->value = value;
            value = NULL;
            e->token = 0;
            e->expires = expires;
            e->bytes += vb;
            s->bytes += vb;
            evict(c, s, &dead);
        } else {
            entry_kill(s, e, &dead);
        }
    }
    pthread_mutex_unlock(&s->mu);
    entry_free(dead);
    rcp_reply_free(value);
}

/* Broadcast tracking with prefixes: the servers invalidate only keys
 * with one of them, so only those are cached. */
static int key_tracked(const rcp__cache *c, const char *key, size_t keylen)
{
    int i;
    if (!c->nprefixes)
        return 1;
    for (i = 0; i < c->nprefixes; i++)
        if (keylen >= c->prefixlen[i] && memcmp(key, c->prefix[i], c->prefixlen[i]) == 0)
            return 1;
    return 0;
}

rcp_reply *rcp__cache_command(struct rcp_cluster *cl, rcp__req *rq, const char *key,
                              size_t keylen)
{
    rcp__cache *c = cl->cache;
    uint64_t h = key_hash(key, keylen), epoch, token, t0, expires;
    rcp__node *n;
    struct rcp_conn *conn = NULL;
    rcp__gather g;
    rcp__gather_slot gs[2];
    rcp_future *fs[2];
    const char *raws[2], *pargv[2] = {"PTTL", key};
    size_t lens[2], plen[2] = {4, keylen};
    char pbuf[512], *pcmd;
    rcp_reply *r;
    int rv, ms;

    if (!key_tracked(c, key, keylen))
        return NULL;
    if ((r = lookup(cl, h, rq)))
        return r;
    urcu_bp_read_lock();
    n = slot_owner(cl, rq->slot);
    if (n)
        conn = rcp__node_pin_locked(n, RCP__AS_MASTER);
    urcu_bp_read_unlock();
    if (!conn)
        return NULL;
    if (!atomic_load(&n->inv))
        inv_ensure(cl, n);
    epoch = atomic_load(&n->cache_epoch);
    if (!(epoch & 1)) {
        rcp__cluster_unpin(conn);
        return NULL; /* tracking not armed (yet): the ordinary path, not stored */
    }
    lens[0] = rcp__format_len(2, pargv, plen);
    pcmd = lens[0] <= sizeof pbuf ? pbuf : rcp__malloc(lens[0]);
    token = pcmd ? put_pending(c, h, key, keylen, rq, n, epoch) : 0;
    if (!token) {
        if (pcmd != pbuf)
            rcp__free(pcmd);
        rcp__cluster_unpin(conn);
        return NULL;
    }
    rcp__format_write(pcmd, 2, pargv, plen);
    raws[0] = pcmd;
    raws[1] = rq->buf;
    lens[1] = rq->len;
    rcp__gather_init(&g, gs, 2);
    ms = rcp__req_remaining_ms(rq);
    gs[0].f.timeout_ms = gs[1].f.timeout_ms = ms < 0 ? 0 : ms;
    fs[0] = &gs[0].f;
    fs[1] = &gs[1].f;
    /* PTTL first: the key's expiry is measured no later than its value. */
    t0 = rcp__now_ns();
    rv = rcp__conn_send_group(conn, 2, fs, raws, lens, 0);
    rcp__cluster_unpin(conn);
    if (pcmd != pbuf)
        rcp__free(pcmd);
    if (rv != RCP_OK) {
        rcp__gather_refused(&gs[0], rv, "");
        rcp__gather_refused(&gs[1], rv, "");
    }
    rcp__gather_wait(&g);
    r = gs[1].r;
    if (rv != RCP_OK || r->type == RCP_REPLY_ERROR || gs[0].r->type != RCP_REPLY_INTEGER) {
        /* A redirect, a failure, an error: not stored; the ordinary path
         * (retry rules) answers the caller. */
        fill_pending(c, h, rq, token, NULL, epoch, 0);
        rcp_reply_free(gs[0].r);
        rcp_reply_free(r);
        return NULL;
    }
    expires = t0 + c->ttl_ns;
    if (gs[0].r->integer >= 0 && t0 + (uint64_t)gs[0].r->integer * 1000000ull < expires)
        expires = t0 + (uint64_t)gs[0].r->integer * 1000000ull;
    rcp_reply_free(gs[0].r);
    fill_pending(c, h, rq, token, rcp_reply_dup(r), epoch, expires);
    return r;
}

/* ------------------------------------------------------------------ */
/* writes, events                                                      */

void rcp__cache_drop_argv(struct rcp_cluster *cl, int argc, const char **argv,
                          const size_t *argvlen)
{
    rcp__cache_drop_keys(cl, rcp__cmd_lookup(argc, argv, argvlen), argc, argv, argvlen);
}

void rcp__cache_drop_keys(struct rcp_cluster *cl, const rcp__cmd *cmd, int argc,
                          const char **argv, const size_t *argvlen)
{
    int idx[64], *all = idx, nk, i;
    if (!cmd)
        return;
    nk = rcp__cmd_keys(cmd, argc, argv, argvlen, idx, 64);
    if (nk > 64) {
        all = rcp__malloc((size_t)nk * sizeof(int));
        if (!all) {
            /* Cannot name the keys: drop everything rather than serve a
             * key this write changed. */
            for (i = 0; i < SHARDS; i++) {
                shard *s = &cl->cache->sh[i];
                centry *dead = NULL;
                pthread_mutex_lock(&s->mu);
                while (s->head)
                    entry_kill(s, s->head, &dead);
                pthread_mutex_unlock(&s->mu);
                entry_free(dead);
            }
            return;
        }
        rcp__cmd_keys(cmd, argc, argv, argvlen, all, nk);
    }
    for (i = 0; i < nk; i++)
        drop_key(cl->cache, argv[all[i]], argvlen ? argvlen[all[i]] : strlen(argv[all[i]]));
    if (all != idx)
        rcp__free(all);
}

void rcp__cache_drop_raw(struct rcp_cluster *cl, const char *buf, size_t len)
{
    const char *argv[64];
    size_t argvlen[64];
    int argc = rcp__format_split(buf, len, argv, argvlen, 64);
    if (argc < 1)
        return;
    if (argc <= 64) {
        rcp__cache_drop_argv(cl, argc, argv, argvlen);
        return;
    }
    {
        const char **av = rcp__malloc((size_t)argc * sizeof(*av));
        size_t *al = rcp__malloc((size_t)argc * sizeof(*al));
        if (av && al && rcp__format_split(buf, len, av, al, argc) == argc)
            rcp__cache_drop_argv(cl, argc, av, al);
        rcp__free(av);
        rcp__free(al);
    }
}

/* Under urcu_bp_read_lock: the map's node at host:port, or NULL. */
static rcp__node *map_node(struct rcp_cluster *cl, const char *host, int port)
{
    rcp__map *m = rcp__map_current(cl);
    size_t i, j;
    for (i = 0; i < m->nshards; i++) {
        rcp__shard *sh = &m->shards[i];
        if (sh->master->port == port && strcmp(sh->master->host, host) == 0)
            return sh->master;
        for (j = 0; j < sh->nreplicas; j++)
            if (sh->replicas[j]->port == port && strcmp(sh->replicas[j]->host, host) == 0)
                return sh->replicas[j];
    }
    return NULL;
}

void rcp__cache_node_event(struct rcp_cluster *cl, const rcp_event *ev)
{
    rcp__node *n;
    int lost = (ev->type == RCP_EVENT_DISCONNECTED || ev->type == RCP_EVENT_CONNECT_FAILED) &&
               ev->err != RCP_ERR_CLOSED;
    if (!cl->cache || !ev->host || (!lost && ev->type != RCP_EVENT_CONNECTED))
        return;
    urcu_bp_read_lock();
    n = map_node(cl, ev->host, ev->port);
    urcu_bp_read_unlock();
    if (!n)
        return;
    /* Some connection to the node (we cannot tell which) was lost: its
     * plain one may have been, and with it the server's tracking of
     * every key read through it. Re-armed at once if that one is fine,
     * else when it is back (its CONNECTED). A deliberate close
     * (RCP_ERR_CLOSED: a transaction's own connection, the handle's
     * close) is not a loss; a node leaving the map is told apart
     * (rcp__cache_node_detached). */
    if (lost)
        node_lost(n);
    node_arm(cl->cache, n);
}

void rcp__cache_node_detached(rcp__node *n)
{
    node_lost(n);
}

void rcp__cache_node_promoted(struct rcp_cluster *cl, rcp__node *n)
{
    if (cl->cache)
        node_arm(cl->cache, n); /* no-op unless it has an invalidation connection */
}

/* ------------------------------------------------------------------ */
/* the handle                                                          */

int rcp__cache_new(struct rcp_cluster *cl, rcp__cache **out)
{
    rcp__cache *c = rcp__calloc(1, sizeof(*c));
    int i;
    *out = NULL;
    if (!c)
        return RCP_ERR_OOM;
    c->shard_cap = cl->opt.client_cache_bytes / SHARDS;
    c->ttl_ns = (uint64_t)cl->opt.client_cache_ttl_ms * 1000000ull;
    pthread_mutex_init(&c->inv_mu, NULL);
    for (i = 0; i < SHARDS; i++) {
        pthread_mutex_init(&c->sh[i].mu, NULL);
    }
    c->bcast = cl->opt.client_cache_bcast;
    if (c->bcast) {
        /* The arm command's tail: BCAST [PREFIX p]... (checked at open). */
        const char *argv[33];
        int argc = 0;
        argv[argc++] = "BCAST";
        for (i = 0; i < cl->opt.client_cache_nprefixes; i++) {
            argv[argc++] = "PREFIX";
            argv[argc++] = cl->opt.client_cache_prefixes[i];
            c->prefix[i] = rcp__strdup(cl->opt.client_cache_prefixes[i]);
            if (!c->prefix[i]) {
                rcp__cache_free(c);
                return RCP_ERR_OOM;
            }
            c->prefixlen[i] = strlen(c->prefix[i]);
            c->nprefixes = i + 1;
        }
        /* The whole formatted command minus its "*N\r\n" head. */
        c->arm_tail_len = rcp__format_len(argc, argv, NULL);
        c->arm_tail = rcp__malloc(c->arm_tail_len);
        if (!c->arm_tail) {
            rcp__cache_free(c);
            return RCP_ERR_OOM;
        }
        rcp__format_write(c->arm_tail, argc, argv, NULL);
        {
            char *crlf = memchr(c->arm_tail, '\n', c->arm_tail_len);
            size_t skip = (size_t)(crlf - c->arm_tail) + 1;
            memmove(c->arm_tail, c->arm_tail + skip, c->arm_tail_len - skip);
            c->arm_tail_len -= skip;
        }
        c->arm_tail_args = argc;
    }
    *out = c;
    return RCP_OK;
}

void rcp__cache_close_conns(struct rcp_cluster *cl)
{
    rcp__cache *c = cl->cache;
    invctx *x;
    if (!c)
        return;
    pthread_mutex_lock(&c->inv_mu); /* no new one once closing is set: inv_ensure checks */
    for (x = c->ctxs; x; x = x->next) {
        struct rcp_conn *conn = atomic_exchange(&x->n->inv, NULL);
        if (conn)
            rcp_conn_close(conn);
    }
    pthread_mutex_unlock(&c->inv_mu);
}

void rcp__cache_free(rcp__cache *c)
{
    int i;
    if (!c)
        return;
    while (c->ctxs) {
        invctx *next = c->ctxs->next;
        rcp__free(c->ctxs);
        c->ctxs = next;
    }
    for (i = 0; i < SHARDS; i++) {
        shard *s = &c->sh[i];
        while (s->head) {
            centry *e = s->head;
            lru_unlink(s, e);
            e->hnext = NULL;
            entry_free(e);
        }
        rcp__free(s->buckets);
        pthread_mutex_destroy(&s->mu);
    }
    pthread_mutex_destroy(&c->inv_mu);
    for (i = 0; i < c->nprefixes; i++)
        rcp__free(c->prefix[i]);
    rcp__free(c->arm_tail);
    rcp__free(c);
}

void rcp__cache_stats(struct rcp_cluster *cl, rcp_cluster_stats *o)
{
    int i;
    if (!cl->cache)
        return;
    for (i = 0; i < SHARDS; i++) {
        shard *s = &cl->cache->sh[i];
        pthread_mutex_lock(&s->mu);
        o->cache_hits += s->hits;
        o->cache_misses += s->misses;
        o->cache_evictions += s->evictions;
        o->cache_bytes += s->bytes;
        o->cache_entries += s->count;
        pthread_mutex_unlock(&s->mu);
    }
}
