/* cluster/cluster.c: the cluster handle.
 *
 * Owns: the node registry (one pipelined connection per node, spread over
 * the handle's I/O loops), the RCU-published slot map, the refresher thread
 * (periodic and forced refreshes, delayed retries, closing connections of
 * nodes that left the map), request routing and the retry rules.
 *
 * A request is classified once (command table: flags and key positions),
 * formatted once, and routed by its slot under urcu_bp_read_lock. What to
 * do with an answer is decided in one place, decide(), for both the async
 * path (a wrapped future resolved on an I/O thread) and the sync path (a
 * loop on the caller's thread, which keeps the connection's lone-caller fast
 * path). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <urcu-bp.h>

#include "alloc.h"
#include "clock.h"
#include "cluster_int.h"
#include "multi.h"
#include "format.h"
#include "reply.h"

#define MAX_SEEDS 64

typedef struct seed {
    char *host;
    int port;
} seed;

/* A request's routing and retry state, shared by both paths. */
typedef struct req {
    char *buf;          /* the formatted command */
    size_t len;
    unsigned slot;
    int has_slot;
    unsigned flags;     /* RCP__CMD_* */
    int policy;
    uint64_t deadline;  /* ns, 0: none */
    int redirects, retries;
    rcp__node *target;  /* next attempt goes here (MOVED/ASK), else routed */
    rcp__node *last;    /* where the last attempt went, for error messages */
    int asking;
} req;

#define CFUT_INLINE 192   /* bytes of a command kept inside its cfut */
#define CFUT_CACHE_MAX 4096 /* unused cfuts a handle keeps for reuse */

/* The async path's wrapped future. `inner` goes to a node connection. */
typedef struct cfut {
    rcp_future inner;
    rcp_future *user;
    struct rcp_cluster *cl;
    req rq;
    uint64_t retry_at;
    struct cfut *next;  /* retry queue; the free list while unused */
    /* Small commands are formatted here, so an async request costs no
     * allocation once the handle's free list has warmed up. */
    char inl[CFUT_INLINE];
} cfut;

struct rcp_cluster {
    rcp_cluster_options opt;
    rcp_conn_options node_opt;
    char *node_user, *node_pass, *node_name;
    seed seeds[MAX_SEEDS];
    int nseeds;
    rcp__loop **loops;
    unsigned nloops;
    atomic_uint next_loop;

    /* The current slot map. Read under urcu_bp_read_lock, freed after a
     * grace period (urcu_bp_synchronize_rcu). Published and read with C11
     * atomics (release exchange / acquire load: what rcu_xchg_pointer and
     * rcu_dereference do on this hardware) so that ThreadSanitizer can see
     * the publication too. */
    _Atomic(rcp__map *) map;

    pthread_mutex_t reg_mu; /* the registry */
    rcp__node *nodes;
    size_t nnodes;

    pthread_t worker;
    int worker_started;
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    int stop;
    int force;               /* a forced refresh is wanted */
    uint64_t last_refresh;   /* ns, last refresh attempt */
    uint64_t next_periodic;  /* ns */
    cfut *retries;           /* delayed retries, unsorted */
    int retries_closed;      /* close has drained the queue: no more */
    atomic_int closing;
    atomic_uint active_calls;

    /* Resolved cfuts kept for the next async requests (LIFO, at most
     * CFUT_CACHE_MAX): taken by senders, given back by the I/O threads. */
    pthread_mutex_t cf_mu;
    cfut *cf_free;
    unsigned cf_nfree;

    struct {
        _Atomic uint64_t requests, moved, ask, tryagain, clusterdown, loading, masterdown,
            not_sent, io, readonly, periodic, forced, refresh_failures, version;
    } st;
};

static _Thread_local uint64_t tl_seed;

/* Inside urcu_bp_read_lock only. */
static rcp__map *current_map(struct rcp_cluster *cl)
{
    return atomic_load_explicit(&cl->map, memory_order_acquire);
}

static uint64_t rnd(void)
{
    uint64_t x = tl_seed;
    if (!x)
        x = rcp__now_ns() ^ (uint64_t)(uintptr_t)&tl_seed;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    tl_seed = x;
    return x;
}

static void stat_add(_Atomic uint64_t *s, uint64_t v)
{
    atomic_fetch_add_explicit(s, v, memory_order_relaxed);
}

void rcp_cluster_options_init(rcp_cluster_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    o->read_policy = RCP_READ_MASTER_ONLY;
    o->refresh_interval_ms = 5000;
    o->max_redirects = 5;
    o->max_retries = 12;
    o->min_refresh_gap_ms = 100;
    o->replica_pick_ms = 50;
    o->blocking_pool = 4;
}


/* ------------------------------------------------------------------ */
/* registry                                                            */

static int cluster_dedicated_locked(struct rcp_cluster *cl, const char *host, int port,
                                    unsigned flags, struct rcp_conn **out);

/* reg_mu held. Opens the node's connection for `role`: only the replica
 * one sends READONLY (see RCP__AS_REPLICA). */
static int node_connect(struct rcp_cluster *cl, rcp__node *n, int role)
{
    struct rcp_conn *conn;
    if (cluster_dedicated_locked(cl, n->host, n->port,
                                 role == RCP__AS_REPLICA ? RCP__CONN_READONLY : 0, &conn) != RCP_OK)
        return -1;
    atomic_store(&n->conn[role], conn);
    return 0;
}

/* The node for host:port, created if new, with its connection for `role`
 * made if it has none. */
static rcp__node *node_get(struct rcp_cluster *cl, const char *host, int port, int role)
{
    rcp__node *n;
    pthread_mutex_lock(&cl->reg_mu);
    for (n = cl->nodes; n; n = n->next)
        if (n->port == port && strcmp(n->host, host) == 0)
            break;
    if (!n) {
        n = rcp__calloc(1, sizeof(*n));
        if (n)
            n->host = rcp__strdup(host);
        if (!n || !n->host) {
            rcp__free(n);
            pthread_mutex_unlock(&cl->reg_mu);
            return NULL;
        }
        n->port = port;
        rcp__pool_init(n);
        if (strchr(host, ':'))
            snprintf(n->addr, sizeof n->addr, "[%s]:%d", host, port);
        else
            snprintf(n->addr, sizeof n->addr, "%s:%d", host, port);
        n->next = cl->nodes;
        cl->nodes = n;
        cl->nnodes++;
    }
    if (!atomic_load(&n->conn[role]) && !atomic_load(&cl->closing) &&
        node_connect(cl, n, role) < 0) {
        pthread_mutex_unlock(&cl->reg_mu);
        return NULL;
    }
    pthread_mutex_unlock(&cl->reg_mu);
    return n;
}

/* ------------------------------------------------------------------ */
/* routing                                                             */

static int usable_for_reads(rcp__node *n, int role, uint64_t now)
{
    struct rcp_conn *conn = atomic_load(&n->conn[role]);
    return conn && rcp__conn_healthy(conn) && atomic_load(&n->loading_until) <= now;
}

/* Inside the read-side critical section. The caller's replica choice is
 * stable for replica_pick_ms so that its requests keep batching together.
 * *role says which of the node's connections to use: only a member picked
 * as a replica gets the READONLY one. */
static rcp__node *pick(struct rcp_cluster *cl, rcp__shard *sh, const req *rq, int pinned,
                       int *role)
{
    rcp__node *cand[32];
    size_t n = 0, i;
    uint64_t now, epoch;
    *role = RCP__AS_MASTER;
    if (!(rq->flags & RCP__CMD_READONLY) || rq->policy == RCP_READ_MASTER_ONLY || pinned ||
        sh->nreplicas == 0)
        return sh->master;
    now = rcp__now_ns();
    if (rq->policy == RCP_READ_NEAREST) {
        /* Lowest measured round trip among the healthy members; unknown
         * counts as slow. The master is the fallback. */
        rcp__node *best = sh->master;
        uint64_t best_rtt = atomic_load(&sh->master->rtt_ns);
        if (!best_rtt)
            best_rtt = UINT64_MAX;
        for (i = 0; i < sh->nreplicas; i++) {
            rcp__node *r = sh->replicas[i];
            uint64_t rtt = atomic_load(&r->rtt_ns);
            if (rtt && rtt < best_rtt && usable_for_reads(r, RCP__AS_REPLICA, now)) {
                best = r;
                best_rtt = rtt;
            }
        }
        if (best != sh->master)
            *role = RCP__AS_REPLICA;
        return best;
    }
    if (rq->policy == RCP_READ_MASTER_AND_REPLICAS)
        cand[n++] = sh->master;
    for (i = 0; i < sh->nreplicas && n < 32; i++)
        if (usable_for_reads(sh->replicas[i], RCP__AS_REPLICA, now))
            cand[n++] = sh->replicas[i];
    if (n == 0)
        return sh->master;
    if (!tl_seed)
        rnd();
    epoch = now / ((uint64_t)(cl->opt.replica_pick_ms > 0 ? cl->opt.replica_pick_ms : 1) * 1000000ull);
    i = (size_t)((tl_seed ^ (epoch * 0x9e3779b97f4a7c15ull)) >> 7) % n;
    if (cand[i] != sh->master)
        *role = RCP__AS_REPLICA;
    return cand[i];
}

/* Inside urcu_bp_read_lock: the node's connection for `role`, counted as a
 * call in progress so that closing it (after a grace period) waits for us;
 * NULL if the node has none. Release with unpin(). */
static struct rcp_conn *pin_locked(rcp__node *n, int role)
{
    struct rcp_conn *conn = atomic_load(&n->conn[role]);
    if (conn)
        atomic_fetch_add(&conn->active_calls, 1);
    return conn;
}

/* Either of the node's connections (the plain one first), for commands
 * that any role answers the same: CLUSTER SLOTS, PING. */
static struct rcp_conn *pin_any(rcp__node *n)
{
    struct rcp_conn *conn;
    urcu_bp_read_lock();
    conn = pin_locked(n, RCP__AS_MASTER);
    if (!conn)
        conn = pin_locked(n, RCP__AS_REPLICA);
    urcu_bp_read_unlock();
    return conn;
}

/* Picks the node for the next attempt and pins its connection (counted as
 * a call in progress, so it is not freed under us). Returns NULL with *code
 * set when there is nowhere to send. */
static struct rcp_conn *route(struct rcp_cluster *cl, req *rq, rcp__node **node_out, int *code)
{
    rcp__map *m;
    rcp__node *node = rq->target; /* a redirect names a master */
    struct rcp_conn *conn = NULL;
    int role = RCP__AS_MASTER;

    urcu_bp_read_lock();
    m = current_map(cl);
    if (!node) {
        rcp__shard *sh = NULL;
        if (rq->has_slot) {
            sh = atomic_load(&m->slots[rq->slot]);
        } else if (m->nshards) {
            sh = &m->shards[rnd() % m->nshards];
        }
        if (sh)
            node = pick(cl, sh, rq, rq->has_slot ? atomic_load(&m->pinned[rq->slot]) : 0, &role);
    }
    if (node)
        conn = pin_locked(node, role);
    urcu_bp_read_unlock();
    *node_out = node;
    if (!node)
        *code = RCP_ERR_CLUSTER_DOWN;
    else if (!conn)
        *code = RCP_ERR_NOT_SENT;
    return conn;
}

static void unpin(struct rcp_conn *conn)
{
    atomic_fetch_sub(&conn->active_calls, 1);
}

/* ------------------------------------------------------------------ */
/* the refresher                                                       */

static void want_refresh(struct rcp_cluster *cl)
{
    pthread_mutex_lock(&cl->wmu);
    if (!cl->force) {
        cl->force = 1;
        pthread_cond_signal(&cl->wcv);
    }
    pthread_mutex_unlock(&cl->wmu);
}

/* Starts a shard of m (the next free one) for master + replicas. */
static rcp__shard *add_shard(rcp__map *m, size_t *r, rcp__node *master, rcp__node *const *replicas,
                             size_t nreplicas)
{
    rcp__shard *sh = &m->shards[m->nshards++];
    size_t j;
    sh->master = master;
    sh->replicas = &m->replica_store[*r];
    for (j = 0; j < nreplicas; j++)
        m->replica_store[(*r)++] = replicas[j];
    sh->nreplicas = nreplicas;
    return sh;
}

/* Build a map from a parsed table; nodes are created as needed. Slots the
 * table leaves out but `old` (the current map, or NULL) serves keep their
 * old owner: a table with holes is more often a node's partial view than a
 * cluster that stopped serving slots, and a stale owner answers with a
 * redirect or an error at worst; *kept counts them. */
static rcp__map *build_map(struct rcp_cluster *cl, const rcp__slots_table *t, rcp__map *old,
                           size_t *kept)
{
    rcp__map *m = rcp__map_new();
    unsigned char *cov = rcp__calloc(RCP__SLOTS, 1);
    size_t i, j, nrep = 0, r = 0, nruns = 0;
    unsigned s;
    rcp__shard *prev = NULL, *cur = NULL;

    *kept = 0;
    if (!m || !cov)
        goto fail;
    for (i = 0; i < t->nranges; i++) {
        nrep += t->ranges[i].nnodes - 1;
        memset(cov + t->ranges[i].start, 1, t->ranges[i].end - t->ranges[i].start + 1);
    }
    for (s = 0; old && s < RCP__SLOTS; s++) {
        rcp__shard *osh = cov[s] ? NULL : atomic_load(&old->slots[s]);
        if (osh && osh != prev) {
            nruns++;
            nrep += osh->nreplicas;
        }
        prev = osh;
    }
    m->shards = rcp__calloc(t->nranges + nruns ? t->nranges + nruns : 1, sizeof(rcp__shard));
    m->replica_store = rcp__calloc(nrep ? nrep : 1, sizeof(rcp__node *));
    if (!m->shards || !m->replica_store)
        goto fail;
    for (i = 0; i < t->nranges; i++) {
        const rcp__slots_range *rg = &t->ranges[i];
        rcp__node *master = node_get(cl, rg->nodes[0].host, rg->nodes[0].port, RCP__AS_MASTER);
        rcp__shard *sh;
        if (!master)
            goto fail;
        sh = add_shard(m, &r, master, NULL, 0);
        for (j = 1; j < rg->nnodes; j++) {
            rcp__node *n = node_get(cl, rg->nodes[j].host, rg->nodes[j].port, RCP__AS_REPLICA);
            if (!n)
                goto fail;
            m->replica_store[r++] = n;
            sh->nreplicas++;
        }
        for (s = rg->start; s <= rg->end; s++)
            atomic_store_explicit(&m->slots[s], sh, memory_order_relaxed);
    }
    prev = NULL;
    for (s = 0; old && s < RCP__SLOTS; s++) {
        rcp__shard *osh = cov[s] ? NULL : atomic_load(&old->slots[s]);
        if (osh && osh != prev)
            cur = add_shard(m, &r, osh->master, osh->replicas, osh->nreplicas);
        if (osh) {
            atomic_store_explicit(&m->slots[s], cur, memory_order_relaxed);
            (*kept)++;
        }
        prev = osh;
    }
    m->covered = t->covered + *kept;
    rcp__free(cov);
    return m;
fail:
    rcp__free(cov);
    rcp__map_free(m);
    return NULL;
}

static void emit(struct rcp_cluster *cl, int type, int err, const char *msg)
{
    rcp_event ev;
    if (!cl->opt.event_cb)
        return;
    memset(&ev, 0, sizeof ev);
    ev.type = type;
    ev.err = err;
    ev.host = "";
    ev.message = msg;
    cl->opt.event_cb(&ev, cl->opt.event_data);
}

static void node_event(const rcp_event *ev, void *data)
{
    struct rcp_cluster *cl = data;
    if ((ev->type == RCP_EVENT_DISCONNECTED || ev->type == RCP_EVENT_CONNECT_FAILED) &&
        ev->err != RCP_ERR_CLOSED && !atomic_load(&cl->closing))
        want_refresh(cl);
    if (cl->opt.event_cb)
        cl->opt.event_cb(ev, cl->opt.event_data);
}

static const char slots_cmd[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";

/* Ask one node for CLUSTER SLOTS; 0 and a table, or -1 with a reason. */
static int ask_slots(struct rcp_cluster *cl, rcp__node *n, rcp__slots_table **out, char *why,
                     size_t whylen)
{
    struct rcp_conn *conn;
    rcp_reply *r;
    int rv;
    conn = pin_any(n);
    if (!conn) {
        snprintf(why, whylen, "no connection");
        return -1;
    }
    r = rcp__conn_command_raw(conn, slots_cmd, sizeof slots_cmd - 1, 0,
                              cl->node_opt.connect_timeout_ms + 1000);
    unpin(conn);
    if (r->type == RCP_REPLY_ERROR) {
        snprintf(why, whylen, "%.*s", (int)r->len, r->str);
        rcp_reply_free(r);
        return -1;
    }
    rv = rcp__slots_parse(r, n->host, out, why, whylen);
    rcp_reply_free(r);
    return rv;
}

/* Worker thread. Returns 0 if a new map was published. `errs` (optional)
 * collects why each node failed. */
static int refresh(struct rcp_cluster *cl, const char *reason, char *errs, size_t errlen)
{
    rcp__slots_table *t = NULL;
    rcp__node *cands[256];
    size_t nc = 0, i, used = 0, nmasters, r0, kept;
    rcp__map *m, *old;
    char why[300], msg[400];
    struct rcp_conn *closing[256];
    size_t nclosing = 0;
    rcp__node *n;

    /* Candidates: the current map's masters, then its replicas, then the
     * seeds. */
    urcu_bp_read_lock();
    old = current_map(cl);
    if (old) {
        for (i = 0; i < old->nshards && nc < 128; i++)
            cands[nc++] = old->shards[i].master;
        for (i = 0; i < old->nshards; i++)
            for (size_t j = 0; j < old->shards[i].nreplicas && nc < 192; j++)
                cands[nc++] = old->shards[i].replicas[j];
    }
    urcu_bp_read_unlock();
    nmasters = old ? (old->nshards < 128 ? old->nshards : 128) : 0;
    r0 = nmasters ? (size_t)rnd() % nmasters : 0;
    for (i = 0; i < (size_t)cl->nseeds && nc < 256; i++) {
        rcp__node *s = node_get(cl, cl->seeds[i].host, cl->seeds[i].port, RCP__AS_MASTER);
        if (s)
            cands[nc++] = s;
    }
    /* Start at a random master so one slow node does not take every
     * refresh. */
    for (i = 0; i < nc && !t; i++) {
        size_t k = i < nmasters ? (i + r0) % nmasters : i;
        n = cands[k];
        if (ask_slots(cl, n, &t, why, sizeof why) == 0)
            break;
        if (errs && used < errlen) {
            int w = snprintf(errs + used, errlen - used, "%s%s: %s", used ? "; " : "", n->addr, why);
            if (w > 0)
                used += (size_t)w;
        }
    }
    if (!t) {
        stat_add(&cl->st.refresh_failures, 1);
        return -1;
    }
    m = build_map(cl, t, old, &kept);
    rcp__slots_free(t);
    if (!m) {
        stat_add(&cl->st.refresh_failures, 1);
        return -1;
    }
    m->version = atomic_load(&cl->st.version) + 1;

    /* Which nodes are in the new map. */
    pthread_mutex_lock(&cl->reg_mu);
    for (n = cl->nodes; n; n = n->next) {
        atomic_store(&n->in_map, 0);
        atomic_store(&n->is_master, 0);
    }
    for (i = 0; i < m->nshards; i++) {
        atomic_store(&m->shards[i].master->in_map, 1);
        atomic_store(&m->shards[i].master->is_master, 1);
        for (size_t j = 0; j < m->shards[i].nreplicas; j++)
            atomic_store(&m->shards[i].replicas[j]->in_map, 1);
    }
    /* Nodes that left the map lose their connection, after the grace
     * period and once their requests are answered (below). Seeds stay. */
    for (n = cl->nodes; n; n = n->next) {
        int is_seed = 0;
        for (int k = 0; k < cl->nseeds; k++)
            if (n->port == cl->seeds[k].port && strcmp(n->host, cl->seeds[k].host) == 0)
                is_seed = 1;
        if (atomic_load(&n->in_map) || is_seed)
            continue;
        for (int role = 0; role < RCP__ROLES && nclosing < 256; role++) {
            struct rcp_conn *cn = atomic_exchange(&n->conn[role], NULL);
            rcp_conn_stats st;
            if (!cn)
                continue;
            rcp_conn_get_stats(cn, &st);
            rcp_conn_stats_add(&n->last, &st);
            closing[nclosing++] = cn;
        }
    }
    pthread_mutex_unlock(&cl->reg_mu);

    old = atomic_exchange_explicit(&cl->map, m, memory_order_acq_rel);
    atomic_store(&cl->st.version, m->version);
    urcu_bp_synchronize_rcu();
    rcp__map_free(old);

    snprintf(msg, sizeof msg, "slot map v%llu (%s): %zu shards, %zu slots covered%s",
             (unsigned long long)m->version, reason, m->nshards, m->covered,
             kept ? " (some kept from the previous map: the answer left them out)" : "");
    emit(cl, RCP_EVENT_MAP_UPDATED, RCP_OK, msg);

    for (i = 0; i < nclosing; i++) {
        /* Let requests already queued there finish (bounded). */
        uint64_t until = rcp__now_ns() + 2000000000ull;
        while (rcp__conn_outstanding(closing[i]) && rcp__now_ns() < until)
            usleep(2000);
        rcp_conn_close(closing[i]);
    }
    return 0;
}

/* Worker thread: PING every node in the map and smooth the round trip
 * (1/4 new, 3/4 old), for RCP_READ_NEAREST. A PING shares the node's
 * pipeline, so it measures what a request would see. */
static void measure_rtt(struct rcp_cluster *cl)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    rcp__node *list[256], *n;
    size_t k = 0, i;
    pthread_mutex_lock(&cl->reg_mu);
    for (n = cl->nodes; n && k < 256; n = n->next)
        if (atomic_load(&n->in_map))
            list[k++] = n;
    pthread_mutex_unlock(&cl->reg_mu);
    for (i = 0; i < k; i++) {
        struct rcp_conn *conn;
        rcp_reply *r;
        uint64_t t0, rtt, old;
        conn = pin_any(list[i]);
        if (!conn)
            continue;
        t0 = rcp__now_ns();
        r = rcp__conn_command_raw(conn, ping, sizeof ping - 1, 0, 1000);
        rtt = rcp__now_ns() - t0;
        unpin(conn);
        if (r->type == RCP_REPLY_STATUS) {
            old = atomic_load(&list[i]->rtt_ns);
            atomic_store(&list[i]->rtt_ns, old ? (old * 3 + rtt) / 4 : rtt);
        }
        rcp_reply_free(r);
    }
}

static void submit(cfut *cf);
static void finish(cfut *cf, rcp_reply *r);
static void finish_error(cfut *cf, int code, const char *msg);

static void *worker_main(void *arg)
{
    struct rcp_cluster *cl = arg;
    pthread_mutex_lock(&cl->wmu);
    while (!cl->stop) {
        uint64_t now = rcp__now_ns(), wake = cl->next_periodic;
        uint64_t gap = (uint64_t)cl->opt.min_refresh_gap_ms * 1000000ull;
        cfut *due = NULL, **pp;
        int do_refresh = 0, forced = 0;

        if (cl->force && now >= cl->last_refresh + gap) {
            do_refresh = forced = 1;
        } else if (now >= cl->next_periodic) {
            do_refresh = 1;
        }
        if (cl->force && cl->last_refresh + gap < wake)
            wake = cl->last_refresh + gap;
        for (pp = &cl->retries; *pp;) {
            cfut *cf = *pp;
            if (cf->retry_at <= now) {
                *pp = cf->next;
                cf->next = due;
                due = cf;
            } else {
                if (cf->retry_at < wake)
                    wake = cf->retry_at;
                pp = &cf->next;
            }
        }
        if (do_refresh) {
            uint64_t jitter;
            cl->force = 0;
            cl->last_refresh = now;
            jitter = (uint64_t)cl->opt.refresh_interval_ms * 100000ull; /* 10% */
            cl->next_periodic = now + (uint64_t)cl->opt.refresh_interval_ms * 1000000ull -
                                jitter + (jitter ? rnd() % (2 * jitter) : 0);
        }
        if (!do_refresh && !due) {
            struct timespec ts;
            ts.tv_sec = (time_t)(wake / 1000000000ull);
            ts.tv_nsec = (long)(wake % 1000000000ull);
            pthread_cond_timedwait(&cl->wcv, &cl->wmu, &ts);
            continue;
        }
        pthread_mutex_unlock(&cl->wmu);
        if (do_refresh) {
            stat_add(forced ? &cl->st.forced : &cl->st.periodic, 1);
            {
                char errs[1500] = "";
                if (refresh(cl, forced ? "forced" : "periodic", errs, sizeof errs) < 0) {
                    char msg[1600];
                    snprintf(msg, sizeof msg, "slot map refresh failed, the old map stays: %s",
                             errs[0] ? errs : "out of memory building the map");
                    emit(cl, RCP_EVENT_REFRESH_FAILED, RCP_ERR_CLUSTER_DOWN, msg);
                }
            }
            if (!forced)
                measure_rtt(cl);
        }
        while (due) {
            cfut *cf = due;
            due = cf->next;
            cf->next = NULL;
            if (atomic_load(&cl->closing))
                finish_error(cf, RCP_ERR_CLOSED, "cluster handle closed before a retry");
            else if (cf->rq.deadline && rcp__now_ns() >= cf->rq.deadline) {
                char msg[800], last[600] = "";
                struct rcp_conn *lc = cf->rq.last ? pin_any(cf->rq.last) : NULL;
                if (lc) {
                    rcp__conn_last_error(lc, last, sizeof last);
                    unpin(lc);
                }
                snprintf(msg, sizeof msg,
                         "request timed out while waiting to be retried (after %d retries%s%s)",
                         cf->rq.retries, last[0] ? "; last failure of " : "", last);
                finish_error(cf, RCP_ERR_TIMEOUT, msg);
            }
            else
                submit(cf);
        }
        pthread_mutex_lock(&cl->wmu);
    }
    pthread_mutex_unlock(&cl->wmu);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* for the handle's other modules (cluster_int.h)                      */

int rcp__cluster_slot_master(struct rcp_cluster *cl, unsigned slot, char *host, size_t hostlen,
                             int *port)
{
    rcp__shard *sh = NULL;
    int rv = -1;
    if (slot >= RCP__SLOTS)
        return -1;
    urcu_bp_read_lock();
    sh = atomic_load(&current_map(cl)->slots[slot]);
    if (sh && sh->master) {
        snprintf(host, hostlen, "%s", sh->master->host);
        *port = sh->master->port;
        rv = 0;
    }
    urcu_bp_read_unlock();
    if (rv < 0)
        want_refresh(cl);
    return rv;
}

void rcp__cluster_refresh_soon(struct rcp_cluster *cl)
{
    want_refresh(cl);
}

const rcp_conn_options *rcp__cluster_node_options(struct rcp_cluster *cl)
{
    return &cl->node_opt;
}

void rcp__cluster_emit(struct rcp_cluster *cl, int type, int err, const char *msg)
{
    emit(cl, type, err, msg);
}

int rcp__cluster_closing(struct rcp_cluster *cl)
{
    return atomic_load(&cl->closing);
}

static int listed(rcp__node *const *out, size_t k, const rcp__node *n)
{
    size_t i;
    for (i = 0; i < k; i++)
        if (out[i] == n)
            return 1;
    return 0;
}

size_t rcp__cluster_map_nodes(struct rcp_cluster *cl, int all, rcp__node **out, int *is_master,
                              size_t max)
{
    rcp__map *m;
    size_t i, j, k = 0;
    urcu_bp_read_lock();
    m = current_map(cl);
    for (i = 0; i < m->nshards && k < max; i++) {
        rcp__shard *sh = &m->shards[i];
        if (!listed(out, k, sh->master)) {
            is_master[k] = 1;
            out[k++] = sh->master;
        }
        for (j = 0; all && j < sh->nreplicas && k < max; j++)
            if (!listed(out, k, sh->replicas[j])) {
                is_master[k] = 0;
                out[k++] = sh->replicas[j];
            }
    }
    urcu_bp_read_unlock();
    return k;
}

rcp__node *rcp__cluster_node(struct rcp_cluster *cl, const char *host, int port, int role)
{
    if (atomic_load(&cl->closing))
        return NULL;
    return node_get(cl, host, port, role);
}

struct rcp_conn *rcp__cluster_pin(rcp__node *n, int role)
{
    struct rcp_conn *conn;
    urcu_bp_read_lock();
    conn = pin_locked(n, role);
    urcu_bp_read_unlock();
    return conn;
}

void rcp__cluster_unpin(struct rcp_conn *conn)
{
    unpin(conn);
}

static int cluster_dedicated_locked(struct rcp_cluster *cl, const char *host, int port,
                                    unsigned flags, struct rcp_conn **out)
{
    rcp_conn_options o = cl->node_opt;
    unsigned i = atomic_fetch_add(&cl->next_loop, 1) % cl->nloops;
    o.host = host;
    o.port = port;
    return rcp__conn_create(cl->loops[i], &o, flags, out);
}

int rcp__cluster_dedicated_no_io_timeout(struct rcp_cluster *cl, const char *host, int port,
                                         struct rcp_conn **out)
{
    rcp_conn_options o = cl->node_opt;
    unsigned i = atomic_fetch_add(&cl->next_loop, 1) % cl->nloops;
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    o.host = host;
    o.port = port;
    o.io_timeout_ms = 0;
    return rcp__conn_create(cl->loops[i], &o, 0, out);
}

int rcp__cluster_blocking_pool(struct rcp_cluster *cl)
{
    int n = cl->opt.blocking_pool;
    return n < 1 ? 1 : n > RCP__POOL_MAX ? RCP__POOL_MAX : n;
}

int rcp__cluster_dedicated(struct rcp_cluster *cl, const char *host, int port, unsigned flags,
                           struct rcp_conn **out)
{
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    return cluster_dedicated_locked(cl, host, port, flags, out);
}

int rcp__cluster_max_redirects(struct rcp_cluster *cl)
{
    return cl->opt.max_redirects;
}

int rcp__cluster_max_retries(struct rcp_cluster *cl)
{
    return cl->opt.max_retries;
}

/* ------------------------------------------------------------------ */
/* the retry rules, in one place                                       */

enum { ACT_DONE, ACT_RESEND, ACT_LATER, ACT_FAIL };

/* Decide what to do with an attempt's answer. On ACT_LATER *delay_ns is
 * set; on ACT_FAIL *code and msg. `asked` is the node the attempt went to. */
static int decide(struct rcp_cluster *cl, req *rq, rcp__node *asked, const rcp_reply *r,
                  uint64_t *delay_ns, int *code, char *msg, size_t msglen)
{
    rcp__redirect rd;
    uint64_t backoff;

    rq->asking = 0;
    rq->target = NULL;
    if (asked)
        rq->last = asked;
    backoff = 10000000ull << (rq->retries < 6 ? rq->retries : 6); /* 10 ms .. 640 ms */
    if (r->type != RCP_REPLY_ERROR)
        return ACT_DONE;

    if (r->err != RCP_ERR_SERVER) {
        /* Client-side: what was (maybe) written decides. */
        if (atomic_load(&cl->closing))
            return ACT_DONE;
        switch (r->err) {
        case RCP_ERR_NOT_SENT:
            stat_add(&cl->st.not_sent, 1);
            want_refresh(cl);
            if (++rq->retries > cl->opt.max_retries)
                return ACT_DONE;
            *delay_ns = backoff;
            return ACT_LATER;
        case RCP_ERR_IO:
        case RCP_ERR_PROTOCOL:
        case RCP_ERR_CLOSED:
            if (atomic_load(&cl->closing))
                return ACT_DONE;
            want_refresh(cl);
            /* Written (or maybe written): only a read-only command may be
             * sent again; a write might have been applied. */
            if (!(rq->flags & RCP__CMD_READONLY) || ++rq->retries > cl->opt.max_retries)
                return ACT_DONE;
            stat_add(&cl->st.io, 1);
            *delay_ns = backoff;
            return ACT_LATER;
        case RCP_ERR_TIMEOUT:
            /* A node that does not answer may have failed: look again. */
            want_refresh(cl);
            return ACT_DONE;
        default:
            return ACT_DONE; /* queue full, too large...: the caller's */
        }
    }

    rcp__parse_redirect(r->str, r->len, &rd);
    switch (rd.kind) {
    case RCP__RD_MOVED:
    case RCP__RD_ASK: {
        rcp__node *to;
        if (++rq->redirects > cl->opt.max_redirects) {
            *code = RCP_ERR_REDIRECT_LIMIT;
            snprintf(msg, msglen, "more than %d redirects; last: %.*s", cl->opt.max_redirects,
                     (int)(r->len < 200 ? r->len : 200), r->str);
            return ACT_FAIL;
        }
        to = node_get(cl, rd.host[0] ? rd.host : (asked ? asked->host : "127.0.0.1"), rd.port,
                      RCP__AS_MASTER);
        if (!to) {
            *code = RCP_ERR_OOM;
            snprintf(msg, msglen, "out of memory following a redirect");
            return ACT_FAIL;
        }
        urcu_bp_read_lock();
        {
            rcp__map *m = current_map(cl);
            if (rd.kind == RCP__RD_MOVED)
                rcp__map_move_slot(m, rd.slot, to);
            else
                atomic_store(&m->pinned[rd.slot], 1);
        }
        urcu_bp_read_unlock();
        stat_add(rd.kind == RCP__RD_MOVED ? &cl->st.moved : &cl->st.ask, 1);
        if (asked)
            stat_add(rd.kind == RCP__RD_MOVED ? &asked->moved : &asked->ask, 1);
        want_refresh(cl);
        rq->target = to;
        rq->asking = rd.kind == RCP__RD_ASK;
        return ACT_RESEND;
    }
    case RCP__RD_TRYAGAIN:
    case RCP__RD_CLUSTERDOWN:
    case RCP__RD_LOADING:
    case RCP__RD_MASTERDOWN:
    case RCP__RD_READONLY:
        if (++rq->retries > cl->opt.max_retries)
            return ACT_DONE; /* the server's own error, as is */
        if (rd.kind == RCP__RD_TRYAGAIN)
            stat_add(&cl->st.tryagain, 1);
        else if (rd.kind == RCP__RD_CLUSTERDOWN)
            stat_add(&cl->st.clusterdown, 1);
        else if (rd.kind == RCP__RD_LOADING)
            stat_add(&cl->st.loading, 1);
        else if (rd.kind == RCP__RD_MASTERDOWN)
            stat_add(&cl->st.masterdown, 1);
        else
            stat_add(&cl->st.readonly, 1);
        if (rd.kind == RCP__RD_LOADING && asked)
            atomic_store(&asked->loading_until, rcp__now_ns() + 1000000000ull);
        /* A demoted master (-READONLY), a cluster that lost a master: the
         * topology may have changed. */
        if (rd.kind != RCP__RD_TRYAGAIN)
            want_refresh(cl);
        *delay_ns = backoff;
        return ACT_LATER;
    case RCP__RD_BAD:
        /* A garbage redirect: report it as it came, and re-read the map. */
        want_refresh(cl);
        return ACT_DONE;
    default:
        return ACT_DONE;
    }
}

/* ------------------------------------------------------------------ */
/* classification                                                      */

/* The refusal of a command whose keys span slots, naming two of them; in
 * a per-thread buffer (valid until the thread's next refusal). */
static const char *cross_slot_why(const char **argv, const size_t *argvlen, int a, unsigned sa,
                                  int b, unsigned sb)
{
    static _Thread_local char buf[300];
    size_t la = argvlen ? argvlen[a] : strlen(argv[a]);
    size_t lb = argvlen ? argvlen[b] : strlen(argv[b]);
    snprintf(buf, sizeof buf,
             "CROSSSLOT: keys in different slots: '%.*s' (slot %u) and '%.*s' (slot %u); only "
             "MGET, MSET, DEL, UNLINK, EXISTS and TOUCH are split by slot, other commands need "
             "their keys in one slot (use a {hash tag})",
             (int)(la < 60 ? la : 60), argv[a], sa, (int)(lb < 60 ? lb : 60), argv[b], sb);
    return buf;
}

/* Classify argv into rq (flags, slot). Returns RCP_OK or an error code
 * with *why set. */
static int classify(struct rcp_cluster *cl, int argc, const char **argv, const size_t *argvlen,
                    req *rq, const char **why)
{
    const rcp__cmd *cmd;
    int idx[64], nk, i, rv;
    *why = NULL;
    rv = rcp__command_check(argc, argv, argvlen, why);
    if (rv != RCP_OK)
        return rv;
    rq->policy = rq->policy < 0 ? cl->opt.read_policy : rq->policy;
    cmd = rcp__cmd_lookup(argc, argv, argvlen);
    if (!cmd) {
        /* Unknown (a module's command?): any master, never resent. */
        rq->flags = RCP__CMD_NOKEY;
        rq->has_slot = 0;
        return RCP_OK;
    }
    rq->flags = rcp__cmd_flags(cmd);
    nk = rcp__cmd_keys(cmd, argc, argv, argvlen, idx, 64);
    if (nk < 0) {
        *why = "wrong number of arguments for the command's keys";
        return RCP_ERR_INVALID;
    }
    rq->has_slot = nk > 0;
    for (i = 0; i < nk && i < 64; i++) {
        size_t l = argvlen ? argvlen[idx[i]] : strlen(argv[idx[i]]);
        unsigned s = rcp__keyslot(argv[idx[i]], l);
        if (i == 0)
            rq->slot = s;
        else if (s != rq->slot) {
            *why = cross_slot_why(argv, argvlen, idx[0], rq->slot, idx[i], s);
            return RCP_ERR_CROSS_SLOT;
        }
    }
    if (nk > 64) {
        /* Check the rest too (rare: more than 64 keys). */
        int *big = rcp__malloc((size_t)nk * sizeof(int));
        if (!big)
            return RCP_ERR_OOM;
        rcp__cmd_keys(cmd, argc, argv, argvlen, big, nk);
        for (i = 64; i < nk; i++) {
            size_t l = argvlen ? argvlen[big[i]] : strlen(argv[big[i]]);
            unsigned s = rcp__keyslot(argv[big[i]], l);
            if (s != rq->slot) {
                *why = cross_slot_why(argv, argvlen, big[0], rq->slot, big[i], s);
                rcp__free(big);
                return RCP_ERR_CROSS_SLOT;
            }
        }
        rcp__free(big);
    }
    return RCP_OK;
}

static uint64_t deadline_from(struct rcp_cluster *cl, int timeout_ms)
{
    int ms = timeout_ms ? timeout_ms : cl->node_opt.request_timeout_ms;
    return ms > 0 ? rcp__now_ns() + (uint64_t)ms * 1000000ull : 0;
}

static int remaining_ms(const req *rq)
{
    uint64_t now;
    if (!rq->deadline)
        return -1;
    now = rcp__now_ns();
    if (now >= rq->deadline)
        return 1;
    return (int)((rq->deadline - now + 999999) / 1000000);
}

/* ------------------------------------------------------------------ */
/* the async path                                                      */

/* A cfut with its header zeroed (inl is not), or NULL when out of memory. */
static cfut *cfut_get(struct rcp_cluster *cl)
{
    cfut *cf;
    pthread_mutex_lock(&cl->cf_mu);
    cf = cl->cf_free;
    if (cf) {
        cl->cf_free = cf->next;
        cl->cf_nfree--;
    }
    pthread_mutex_unlock(&cl->cf_mu);
    if (!cf && !(cf = rcp__malloc(sizeof(*cf))))
        return NULL;
    memset(cf, 0, offsetof(cfut, inl));
    return cf;
}

/* Frees the command (unless it is inline) and keeps or frees the cfut. */
static void cfut_put(struct rcp_cluster *cl, cfut *cf)
{
    if (cf->rq.buf != cf->inl)
        rcp__free(cf->rq.buf);
    pthread_mutex_lock(&cl->cf_mu);
    if (cl->cf_nfree < CFUT_CACHE_MAX) {
        cf->next = cl->cf_free;
        cl->cf_free = cf;
        cl->cf_nfree++;
        cf = NULL;
    }
    pthread_mutex_unlock(&cl->cf_mu);
    rcp__free(cf);
}

static void finish(cfut *cf, rcp_reply *r)
{
    rcp_future *u = cf->user;
    struct rcp_cluster *cl = cf->cl;
    cfut_put(cl, cf);
    u->resolve(u, r);
    /* Only now may rcp_cluster_close go on: the callback has returned. */
    atomic_fetch_sub(&cl->active_calls, 1);
}

static void finish_error(cfut *cf, int code, const char *msg)
{
    rcp_reply r;
    rcp__reply_error_init(&r, code, msg);
    finish(cf, &r);
}

static void schedule(cfut *cf, uint64_t delay)
{
    struct rcp_cluster *cl = cf->cl;
    cf->retry_at = rcp__now_ns() + delay;
    if (cf->rq.deadline && cf->retry_at > cf->rq.deadline)
        cf->retry_at = cf->rq.deadline;
    pthread_mutex_lock(&cl->wmu);
    if (cl->retries_closed) {
        pthread_mutex_unlock(&cl->wmu);
        finish_error(cf, RCP_ERR_CLOSED, "cluster handle closed before a retry");
        return;
    }
    cf->next = cl->retries;
    cl->retries = cf;
    pthread_cond_signal(&cl->wcv);
    pthread_mutex_unlock(&cl->wmu);
}

static void on_reply(rcp_future *f, rcp_reply *r);

/* Send (or resend) a wrapped future; never blocks on an I/O thread. */
static void submit(cfut *cf)
{
    struct rcp_cluster *cl = cf->cl;
    rcp__node *node;
    struct rcp_conn *conn;
    int code = RCP_OK, rv;

    for (;;) {
        conn = route(cl, &cf->rq, &node, &code);
        if (!conn) {
            rcp_reply r;
            char msg[200];
            uint64_t delay = 0;
            int act;
            if (code == RCP_ERR_CLUSTER_DOWN) {
                want_refresh(cl);
                if (cf->rq.deadline && rcp__now_ns() + 20000000ull < cf->rq.deadline) {
                    schedule(cf, 20000000ull); /* wait for a map that covers it */
                    return;
                }
                snprintf(msg, sizeof msg, "slot %u is not served by any node (hole in the slot map)",
                         cf->rq.slot);
                finish_error(cf, RCP_ERR_CLUSTER_DOWN, msg);
                return;
            }
            rcp__reply_error_init(&r, code, "no connection to the node");
            act = decide(cl, &cf->rq, node, &r, &delay, &code, msg, sizeof msg);
            if (act == ACT_LATER) {
                schedule(cf, delay);
                return;
            }
            snprintf(msg, sizeof msg, "%.150s: no connection to the slot's node",
                     node ? node->addr : "?");
            finish_error(cf, RCP_ERR_NOT_SENT, msg);
            return;
        }
        cf->inner.timeout_ms = remaining_ms(&cf->rq);
        cf->inner.data = node;
        rv = rcp__conn_send_raw(conn, &cf->inner, cf->rq.buf, cf->rq.len, cf->rq.asking);
        if (rv == RCP_OK) {
            unpin(conn);
            return;
        }
        {
            rcp_reply r;
            char msg[300], why[1000], last[600];
            uint64_t delay = 0;
            int act;
            rcp__conn_last_error(conn, last, sizeof last);
            unpin(conn);
            rcp__reply_error_init(&r, rv, rcp_strerror(rv));
            act = decide(cl, &cf->rq, node, &r, &delay, &code, msg, sizeof msg);
            if (act == ACT_LATER) {
                schedule(cf, delay);
                return;
            }
            if (act != ACT_RESEND) {
                snprintf(why, sizeof why, "%s (after %d retries; last failure of %s)",
                         rcp_strerror(rv), cf->rq.retries, last);
                finish_error(cf, rv, why);
                return;
            }
        }
    }
}

static void on_reply(rcp_future *f, rcp_reply *r)
{
    cfut *cf = (cfut *)f;
    struct rcp_cluster *cl = cf->cl;
    uint64_t delay = 0;
    int code = RCP_OK;
    char msg[300];
    int act = decide(cl, &cf->rq, (rcp__node *)f->data, r, &delay, &code, msg, sizeof msg);
    if (act == ACT_DONE) {
        finish(cf, r);
    } else if (act == ACT_FAIL) {
        finish_error(cf, code, msg);
    } else if (atomic_load(&cl->closing)) {
        finish(cf, r);
    } else if (act == ACT_LATER) {
        if (cf->rq.deadline && rcp__now_ns() + delay >= cf->rq.deadline)
            finish(cf, r); /* no time left: the last answer stands */
        else
            schedule(cf, delay);
    } else {
        submit(cf);
    }
}

/* Sends rq (whose buf is cf->inl or allocated: cf owns it from here) with
 * cf, a cfut from cfut_get. */
static int send_cf(struct rcp_cluster *cl, rcp_future *f, cfut *cf, req *rq)
{
    cf->inner.resolve = on_reply;
    cf->user = f;
    cf->cl = cl;
    cf->rq = *rq;
    cf->rq.deadline = deadline_from(cl, f->timeout_ms);
    atomic_fetch_add(&cl->active_calls, 1);
    stat_add(&cl->st.requests, 1);
    /* From here the future will be resolved exactly once, whatever
     * happens: the first attempt's refusal goes through the same rules. */
    submit(cf);
    return RCP_OK;
}

/* Sends rq, whose buf is allocated (freed here on failure). */
static int send_prepared(struct rcp_cluster *cl, rcp_future *f, req *rq)
{
    cfut *cf = cfut_get(cl);
    if (!cf) {
        rcp__free(rq->buf);
        return RCP_ERR_OOM;
    }
    return send_cf(cl, f, cf, rq);
}

/* Explicit batches (batch.c). Every command becomes an ordinary async
 * request, but the first attempts of the commands routed to one node are
 * queued there in one group, so that node's share is written
 * contiguously; retries and redirects then go one by one. Commands are
 * pre-formatted (buf[i], len[i]); a multi-key command spanning slots is
 * split as usual (not grouped). RCP_OK and every f[i] resolved once, or an
 * error for command *bad and none called. */
int rcp__cluster_send_batch(struct rcp_cluster *cl, size_t n, rcp_future *const *f,
                            const char *const *buf, const size_t *len, size_t *bad)
{
    cfut **cf = rcp__calloc(n ? n : 1, sizeof(*cf));
    char *split = rcp__calloc(n ? n : 1, 1);
    struct rcp_conn **conn = rcp__calloc(n ? n : 1, sizeof(*conn));
    rcp__node **node = rcp__calloc(n ? n : 1, sizeof(*node));
    rcp_future **gf = rcp__calloc(n ? n : 1, sizeof(*gf));
    const char **gb = rcp__calloc(n ? n : 1, sizeof(*gb));
    size_t *gl = rcp__calloc(n ? n : 1, sizeof(*gl));
    size_t *gi = rcp__calloc(n ? n : 1, sizeof(*gi));
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
        int argc = rcp__format_split(buf[i], len[i], NULL, NULL, 0);
        req rq;
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
        rv = classify(cl, argc, argv, argvlen, &rq, &why);
        if (rv == RCP_ERR_CROSS_SLOT && rcp__multi_kind(argc, argv, argvlen)) {
            split[i] = 1;
            rv = RCP_OK;
            continue;
        }
        if (rv == RCP_OK && len[i] > cl->node_opt.max_request_bytes)
            rv = RCP_ERR_TOO_LARGE;
        if (rv != RCP_OK)
            break;
        cf[i] = cfut_get(cl);
        rq.buf = !cf[i] ? NULL : len[i] <= CFUT_INLINE ? cf[i]->inl : rcp__malloc(len[i]);
        if (!rq.buf) {
            if (cf[i])
                cfut_put(cl, cf[i]); /* its rq.buf is still NULL */
            cf[i] = NULL;
            rv = RCP_ERR_OOM;
            break;
        }
        memcpy(rq.buf, buf[i], len[i]);
        rq.len = len[i];
        cf[i]->inner.resolve = on_reply;
        cf[i]->user = f[i];
        cf[i]->cl = cl;
        cf[i]->rq = rq;
        cf[i]->rq.deadline = deadline_from(cl, f[i]->timeout_ms);
    }
    if (rv != RCP_OK) {
        *bad = i;
        for (j = 0; j < n; j++)
            if (cf[j])
                cfut_put(cl, cf[j]);
        goto out;
    }
    atomic_fetch_add(&cl->active_calls, n);
    stat_add(&cl->st.requests, n);
    for (i = 0; i < n; i++) {
        int code;
        if (cf[i])
            conn[i] = route(cl, &cf[i]->rq, &node[i], &code);
    }
    /* One group per connection, in the callers' order within it. */
    for (i = 0; i < n; i++) {
        struct rcp_conn *c = conn[i];
        size_t k = 0;
        if (!c)
            continue;
        for (j = i; j < n; j++)
            if (conn[j] == c) {
                cf[j]->inner.timeout_ms = remaining_ms(&cf[j]->rq);
                cf[j]->inner.data = node[j];
                gf[k] = &cf[j]->inner;
                gb[k] = cf[j]->rq.buf;
                gl[k] = cf[j]->rq.len;
                gi[k++] = j;
                conn[j] = NULL;
            }
        if (rcp__conn_send_group(c, k, gf, gb, gl, 0) != RCP_OK)
            for (j = 0; j < k; j++)
                submit(cf[gi[j]]); /* one by one, with the usual rules */
        for (j = 0; j < k; j++) {
            unpin(c);
            cf[gi[j]] = NULL;
        }
    }
    for (i = 0; i < n; i++) {
        if (cf[i])
            submit(cf[i]); /* no connection at hand: the usual path decides */
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

int rcp_cluster_send_argv_policy(rcp_cluster *cl, rcp_future *f, int policy, int argc,
                                 const char **argv, const size_t *argvlen)
{
    req rq;
    cfut *cf;
    const char *why;
    int rv, i;
    if (!cl || !f || !f->resolve || argc < 1 || !argv || policy < -1 || policy > RCP_READ_NEAREST)
        return RCP_ERR_INVALID;
    for (i = 0; i < argc; i++)
        if (!argv[i])
            return RCP_ERR_INVALID;
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    memset(&rq, 0, sizeof rq);
    rq.policy = policy;
    rv = classify(cl, argc, argv, argvlen, &rq, &why);
    if (rv == RCP_ERR_CROSS_SLOT && rcp__multi_kind(argc, argv, argvlen))
        return rcp__multi_send(cl, f, policy, argc, argv, argvlen);
    if (rv == RCP_ERR_BLOCKING_COMMAND)
        return rcp__blocking_send(cl, f, argc, argv, argvlen);
    if (rv != RCP_OK)
        return rv;
    rq.len = rcp__format_len(argc, argv, argvlen);
    if (rq.len > cl->node_opt.max_request_bytes)
        return RCP_ERR_TOO_LARGE;
    cf = cfut_get(cl);
    if (!cf)
        return RCP_ERR_OOM;
    rq.buf = rq.len <= CFUT_INLINE ? cf->inl : rcp__malloc(rq.len);
    if (!rq.buf) {
        cfut_put(cl, cf);
        return RCP_ERR_OOM;
    }
    rcp__format_write(rq.buf, argc, argv, argvlen);
    return send_cf(cl, f, cf, &rq);
}

int rcp_cluster_send_argv(rcp_cluster *cl, rcp_future *f, int argc, const char **argv,
                          const size_t *argvlen)
{
    return rcp_cluster_send_argv_policy(cl, f, -1, argc, argv, argvlen);
}

/* Format with a hiredis-style format, then classify the command. */
/* On RCP_ERR_CROSS_SLOT for a command split by slot, and on
 * RCP_ERR_BLOCKING_COMMAND, cmd is left filled (the caller sends it its
 * own way and frees cmd->buf). */
static int format_req(struct rcp_cluster *cl, const char *fmt, va_list ap, req *rq,
                      const char **why, rcp__fmt_cmd *cmd)
{
    int rv = rcp__format_command(cmd, fmt, ap, why);
    if (rv != RCP_OK)
        return rv;
    rv = classify(cl, cmd->argc, cmd->argv, cmd->argvlen, rq, why);
    if ((rv == RCP_ERR_CROSS_SLOT && rcp__multi_kind(cmd->argc, cmd->argv, cmd->argvlen)) ||
        rv == RCP_ERR_BLOCKING_COMMAND)
        return rv;
    if (rv == RCP_OK && cmd->len > cl->node_opt.max_request_bytes)
        rv = RCP_ERR_TOO_LARGE;
    if (rv != RCP_OK) {
        rcp__free(cmd->buf);
        cmd->buf = NULL; /* the caller must not look at cmd any more */
        return rv;
    }
    rq->buf = cmd->buf;
    rq->len = cmd->len;
    return RCP_OK;
}

int rcp_cluster_sendv(rcp_cluster *cl, rcp_future *f, const char *fmt, va_list ap)
{
    rcp__fmt_cmd cmd;
    req rq;
    const char *why;
    int rv;
    if (!cl || !f || !f->resolve)
        return RCP_ERR_INVALID;
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    memset(&rq, 0, sizeof rq);
    rq.policy = -1;
    cmd.buf = NULL;
    rv = format_req(cl, fmt, ap, &rq, &why, &cmd);
    if (rv == RCP_ERR_CROSS_SLOT && cmd.buf && rcp__multi_kind(cmd.argc, cmd.argv, cmd.argvlen)) {
        rv = rcp__multi_send(cl, f, -1, cmd.argc, cmd.argv, cmd.argvlen);
        rcp__free(cmd.buf);
        return rv;
    }
    if (rv == RCP_ERR_BLOCKING_COMMAND && cmd.buf) {
        rv = rcp__blocking_send(cl, f, cmd.argc, cmd.argv, cmd.argvlen);
        rcp__free(cmd.buf);
        return rv;
    }
    if (rv != RCP_OK)
        return rv;
    return send_prepared(cl, f, &rq);
}

int rcp_cluster_send(rcp_cluster *cl, rcp_future *f, const char *fmt, ...)
{
    va_list ap;
    int rv;
    va_start(ap, fmt);
    rv = rcp_cluster_sendv(cl, f, fmt, ap);
    va_end(ap);
    return rv;
}

/* ------------------------------------------------------------------ */
/* the sync path: the same rules, on the caller's thread               */

static rcp_reply *error_reply(int code, const char *why)
{
    char msg[300];
    if (why)
        return rcp__reply_error_new(code, why);
    snprintf(msg, sizeof msg, "request refused: %s", rcp_strerror(code));
    return rcp__reply_error_new(code, msg);
}

/* A sync caller bound for a master: its own I/O on the first connection if
 * that is idle; else, if that one is busy with a single lone caller, on the
 * first spare if it is idle; else, if that spare too is busy with a lone
 * caller, on the next one, and so on (spares are made on first need); else
 * NULL (the caller queues on the first connection, where the loop batches
 * it with the others). */
static rcp_reply *try_spare(struct rcp_cluster *cl, rcp__node *node, struct rcp_conn *conn,
                            const req *rq)
{
    struct rcp_conn *prev = NULL;
    rcp_reply *r = rcp__conn_command_fast_only(conn, rq->buf, rq->len, remaining_ms(rq));
    if (r)
        return r;
    for (int role = RCP__AS_SPARE; role < RCP__AS_SPARE + RCP__SPARES; role++) {
        struct rcp_conn *spare;
        /* Only another lone caller goes to a spare: when the loop is
         * driving batches here, joining the batch is cheaper for everyone. */
        int lone = rcp__conn_lone_busy(prev ? prev : conn);
        if (prev)
            unpin(prev);
        prev = NULL;
        if (!lone)
            return NULL;
        spare = rcp__cluster_pin(node, role);
        if (!spare) {
            pthread_mutex_lock(&cl->reg_mu);
            if (!atomic_load(&node->conn[role]) && !atomic_load(&cl->closing) &&
                atomic_load(&node->in_map))
                node_connect(cl, node, role); /* used from the next request on */
            pthread_mutex_unlock(&cl->reg_mu);
            return NULL;
        }
        r = rcp__conn_command_fast_only(spare, rq->buf, rq->len, remaining_ms(rq));
        if (r) {
            unpin(spare);
            return r;
        }
        prev = spare;
    }
    if (prev)
        unpin(prev);
    return NULL;
}

static rcp_reply *run_sync(struct rcp_cluster *cl, req *rq)
{
    rcp_reply *r = NULL;
    stat_add(&cl->st.requests, 1);
    for (;;) {
        rcp__node *node;
        struct rcp_conn *conn;
        int code = RCP_OK, act;
        uint64_t delay = 0;
        char msg[300];

        conn = route(cl, rq, &node, &code);
        if (!conn) {
            if (code == RCP_ERR_CLUSTER_DOWN) {
                want_refresh(cl);
                if (rq->deadline && rcp__now_ns() + 20000000ull < rq->deadline) {
                    usleep(20000);
                    continue;
                }
                snprintf(msg, sizeof msg, "slot %u is not served by any node (hole in the slot map)",
                         rq->slot);
                return rcp__reply_error_new(RCP_ERR_CLUSTER_DOWN, msg);
            }
            r = rcp__reply_error_new(code, "no connection to the slot's node");
        } else {
            r = NULL;
            if (!rq->asking && node && conn == atomic_load(&node->conn[RCP__AS_MASTER]))
                r = try_spare(cl, node, conn, rq);
            if (!r)
                r = rcp__conn_command_raw(conn, rq->buf, rq->len, rq->asking, remaining_ms(rq));
            unpin(conn);
        }
        act = decide(cl, rq, node, r, &delay, &code, msg, sizeof msg);
        if (act == ACT_DONE)
            return r;
        if (act == ACT_FAIL) {
            rcp_reply_free(r);
            return rcp__reply_error_new(code, msg);
        }
        if (atomic_load(&cl->closing))
            return r;
        if (act == ACT_LATER) {
            if (rq->deadline && rcp__now_ns() + delay >= rq->deadline)
                return r; /* no time left: the last answer stands */
            rcp_reply_free(r);
            usleep((useconds_t)(delay / 1000));
            continue;
        }
        rcp_reply_free(r);
    }
}

rcp_reply *rcp_cluster_command_argv(rcp_cluster *cl, int argc, const char **argv,
                                    const size_t *argvlen)
{
    req rq;
    const char *why;
    rcp_reply *r;
    int rv, i;
    char stackbuf[512];

    if (!cl || argc < 1 || !argv)
        return error_reply(RCP_ERR_INVALID, "rcp_cluster_command: NULL handle, argv or argc < 1");
    for (i = 0; i < argc; i++)
        if (!argv[i])
            return error_reply(RCP_ERR_INVALID, "rcp_cluster_command: NULL argument");
    if (rcp__loop_on_thread())
        return error_reply(RCP_ERR_INVALID, "sync call from an I/O thread (a callback) would deadlock");
    memset(&rq, 0, sizeof rq);
    rq.policy = -1;
    atomic_fetch_add(&cl->active_calls, 1);
    rv = classify(cl, argc, argv, argvlen, &rq, &why);
    if (rv == RCP_ERR_CROSS_SLOT && rcp__multi_kind(argc, argv, argvlen)) {
        r = rcp__multi_command(cl, -1, argc, argv, argvlen);
        atomic_fetch_sub(&cl->active_calls, 1);
        return r;
    }
    if (rv == RCP_ERR_BLOCKING_COMMAND) {
        r = rcp__blocking_command(cl, argc, argv, argvlen);
        atomic_fetch_sub(&cl->active_calls, 1);
        return r;
    }
    if (rv != RCP_OK) {
        atomic_fetch_sub(&cl->active_calls, 1);
        return error_reply(rv, why);
    }
    rq.len = rcp__format_len(argc, argv, argvlen);
    if (rq.len > cl->node_opt.max_request_bytes) {
        atomic_fetch_sub(&cl->active_calls, 1);
        return error_reply(RCP_ERR_TOO_LARGE, NULL);
    }
    rq.buf = rq.len <= sizeof stackbuf ? stackbuf : rcp__malloc(rq.len);
    if (!rq.buf) {
        atomic_fetch_sub(&cl->active_calls, 1);
        return error_reply(RCP_ERR_OOM, NULL);
    }
    rcp__format_write(rq.buf, argc, argv, argvlen);
    rq.deadline = deadline_from(cl, 0);
    r = run_sync(cl, &rq);
    if (rq.buf != stackbuf)
        rcp__free(rq.buf);
    atomic_fetch_sub(&cl->active_calls, 1);
    return r;
}

rcp_reply *rcp_cluster_commandv(rcp_cluster *cl, const char *fmt, va_list ap)
{
    rcp__fmt_cmd cmd;
    req rq;
    const char *why;
    rcp_reply *r;
    int rv;
    if (!cl)
        return error_reply(RCP_ERR_INVALID, "rcp_cluster_command: NULL handle");
    if (rcp__loop_on_thread())
        return error_reply(RCP_ERR_INVALID, "sync call from an I/O thread (a callback) would deadlock");
    memset(&rq, 0, sizeof rq);
    rq.policy = -1;
    atomic_fetch_add(&cl->active_calls, 1);
    cmd.buf = NULL;
    rv = format_req(cl, fmt, ap, &rq, &why, &cmd);
    if (rv == RCP_ERR_CROSS_SLOT && cmd.buf && rcp__multi_kind(cmd.argc, cmd.argv, cmd.argvlen)) {
        r = rcp__multi_command(cl, -1, cmd.argc, cmd.argv, cmd.argvlen);
        rcp__free(cmd.buf);
        atomic_fetch_sub(&cl->active_calls, 1);
        return r;
    }
    if (rv == RCP_ERR_BLOCKING_COMMAND && cmd.buf) {
        r = rcp__blocking_command(cl, cmd.argc, cmd.argv, cmd.argvlen);
        rcp__free(cmd.buf);
        atomic_fetch_sub(&cl->active_calls, 1);
        return r;
    }
    if (rv != RCP_OK) {
        atomic_fetch_sub(&cl->active_calls, 1);
        return error_reply(rv, why);
    }
    rq.deadline = deadline_from(cl, 0);
    r = run_sync(cl, &rq);
    rcp__free(rq.buf);
    atomic_fetch_sub(&cl->active_calls, 1);
    return r;
}

rcp_reply *rcp_cluster_command(rcp_cluster *cl, const char *fmt, ...)
{
    va_list ap;
    rcp_reply *r;
    va_start(ap, fmt);
    r = rcp_cluster_commandv(cl, fmt, ap);
    va_end(ap);
    return r;
}

/* ------------------------------------------------------------------ */
/* open / close / stats                                                */

static int parse_seeds(struct rcp_cluster *cl, const char *s)
{
    const char *p = s;
    while (*p) {
        const char *end = strchr(p, ','), *colon;
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char item[300], *host;
        long port;
        char *e;
        if (n == 0 || n >= sizeof item || cl->nseeds == MAX_SEEDS)
            return -1;
        memcpy(item, p, n);
        item[n] = '\0';
        colon = strrchr(item, ':');
        if (!colon || colon == item)
            return -1;
        port = strtol(colon + 1, &e, 10);
        if (*e || port <= 0 || port > 65535)
            return -1;
        item[colon - item] = '\0';
        host = item;
        if (host[0] == '[' && host[strlen(host) - 1] == ']') {
            host[strlen(host) - 1] = '\0';
            host++;
        }
        cl->seeds[cl->nseeds].host = rcp__strdup(host);
        if (!cl->seeds[cl->nseeds].host)
            return -1;
        cl->seeds[cl->nseeds].port = (int)port;
        cl->nseeds++;
        p = end ? end + 1 : p + n;
    }
    return cl->nseeds ? 0 : -1;
}

static void cluster_free(struct rcp_cluster *cl)
{
    rcp__node *n, *next;
    unsigned i;
    for (n = cl->nodes; n; n = next) {
        next = n->next;
        for (int role = 0; role < RCP__ROLES; role++) {
            struct rcp_conn *conn = atomic_exchange(&n->conn[role], NULL);
            if (conn)
                rcp_conn_close(conn);
        }
    }
    for (n = cl->nodes; n; n = next) {
        next = n->next;
        rcp__pool_destroy(n);
        rcp__free(n->host);
        rcp__free(n);
    }
    for (i = 0; cl->loops && i < cl->nloops; i++)
        if (cl->loops[i])
            rcp__loop_free(cl->loops[i]);
    rcp__free(cl->loops);
    rcp__map_free(atomic_load(&cl->map));
    for (int k = 0; k < cl->nseeds; k++)
        rcp__free(cl->seeds[k].host);
    rcp__free(cl->node_user);
    rcp__free(cl->node_pass);
    rcp__free(cl->node_name);
    while (cl->cf_free) {
        cfut *cf = cl->cf_free;
        cl->cf_free = cf->next;
        rcp__free(cf);
    }
    pthread_mutex_destroy(&cl->cf_mu);
    pthread_mutex_destroy(&cl->reg_mu);
    pthread_mutex_destroy(&cl->wmu);
    pthread_cond_destroy(&cl->wcv);
    rcp__free(cl);
}

int rcp_cluster_open(const rcp_cluster_options *o, rcp_cluster **out, char *errbuf,
                     size_t errbuf_len)
{
    struct rcp_cluster *cl;
    pthread_condattr_t ca;
    char errs[2048] = "";
    unsigned i;

    if (errbuf && errbuf_len)
        errbuf[0] = '\0';
    if (!out)
        return RCP_ERR_INVALID;
    *out = NULL;
    if (!o || !o->seeds || o->max_redirects < 0 || o->max_retries < 0 ||
        o->refresh_interval_ms <= 0 || o->min_refresh_gap_ms < 0 ||
        o->read_policy < RCP_READ_MASTER_ONLY || o->read_policy > RCP_READ_NEAREST) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "rcp_cluster_open: invalid options");
        return RCP_ERR_INVALID;
    }
    cl = rcp__calloc(1, sizeof(*cl));
    if (!cl)
        return RCP_ERR_OOM;
    cl->opt = *o;
    cl->opt.seeds = NULL;
    cl->opt.node = NULL;
    if (o->node)
        cl->node_opt = *o->node;
    else
        rcp_conn_options_init(&cl->node_opt);
    cl->node_user = cl->node_opt.username ? rcp__strdup(cl->node_opt.username) : NULL;
    cl->node_pass = cl->node_opt.password ? rcp__strdup(cl->node_opt.password) : NULL;
    cl->node_name = cl->node_opt.client_name ? rcp__strdup(cl->node_opt.client_name) : NULL;
    cl->node_opt.username = cl->node_user;
    cl->node_opt.password = cl->node_pass;
    cl->node_opt.client_name = cl->node_name;
    /* Node connection events go through us: a lost connection is a
     * topology signal. They are passed on to the caller's callback. */
    cl->node_opt.event_cb = node_event;
    cl->node_opt.event_data = cl;
    pthread_mutex_init(&cl->reg_mu, NULL);
    pthread_mutex_init(&cl->cf_mu, NULL);
    pthread_mutex_init(&cl->wmu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cl->wcv, &ca);
    pthread_condattr_destroy(&ca);
    if (parse_seeds(cl, o->seeds) < 0) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "rcp_cluster_open: bad seed list \"%s\" (want host:port[,host:port...])",
                     o->seeds);
        cluster_free(cl);
        return RCP_ERR_INVALID;
    }
    cl->nloops = cl->node_opt.io_threads ? cl->node_opt.io_threads : 1;
    cl->loops = rcp__calloc(cl->nloops, sizeof(*cl->loops));
    atomic_store(&cl->map, rcp__map_new());
    if (!cl->loops || !atomic_load(&cl->map)) {
        cluster_free(cl);
        return RCP_ERR_OOM;
    }
    for (i = 0; i < cl->nloops; i++) {
        cl->loops[i] = rcp__loop_new();
        if (!cl->loops[i]) {
            cluster_free(cl);
            return RCP_ERR_OOM;
        }
    }
    /* Bootstrap: the first valid table from the seeds, in order. */
    if (refresh(cl, "bootstrap", errs, sizeof errs) < 0) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "no seed gave a usable slot table: %s", errs);
        atomic_store(&cl->closing, 1);
        cluster_free(cl);
        return RCP_ERR_CONNECT;
    }
    measure_rtt(cl);
    cl->last_refresh = rcp__now_ns();
    cl->next_periodic = cl->last_refresh + (uint64_t)cl->opt.refresh_interval_ms * 1000000ull;
    if (pthread_create(&cl->worker, NULL, worker_main, cl) != 0) {
        atomic_store(&cl->closing, 1);
        cluster_free(cl);
        return RCP_ERR_OOM;
    }
    cl->worker_started = 1;
    *out = cl;
    return RCP_OK;
}

void rcp_cluster_close(rcp_cluster *cl)
{
    cfut *cf;
    rcp__node *n, *first;
    if (!cl)
        return;
    atomic_store(&cl->closing, 1);
    pthread_mutex_lock(&cl->wmu);
    cl->stop = 1;
    pthread_cond_signal(&cl->wcv);
    pthread_mutex_unlock(&cl->wmu);
    if (cl->worker_started)
        pthread_join(cl->worker, NULL);
    /* Queued retries: resolved now. */
    pthread_mutex_lock(&cl->wmu);
    cf = cl->retries;
    cl->retries = NULL;
    cl->retries_closed = 1;
    pthread_mutex_unlock(&cl->wmu);
    while (cf) {
        cfut *next = cf->next;
        finish_error(cf, RCP_ERR_CLOSED, "cluster handle closed");
        cf = next;
    }
    /* Detach every connection, wait out one grace period, then close
     * them: closing resolves every request still on them and, with
     * `closing` set, nothing is resent and no connection is made. */
    pthread_mutex_lock(&cl->reg_mu);
    first = cl->nodes; /* nodes are only ever added at the head */
    for (n = first; n; n = n->next)
        for (int role = 0; role < RCP__ROLES; role++)
            n->detached[role] = atomic_exchange(&n->conn[role], NULL);
    pthread_mutex_unlock(&cl->reg_mu);
    urcu_bp_synchronize_rcu();
    for (n = first; n; n = n->next) {
        for (int role = 0; role < RCP__ROLES; role++) {
            if (n->detached[role])
                rcp_conn_close(n->detached[role]);
            n->detached[role] = NULL;
        }
        rcp__pool_shutdown(n);
    }
    while (atomic_load(&cl->active_calls) > 0)
        usleep(1000);
    urcu_bp_barrier();
    cluster_free(cl);
}

int rcp_cluster_get_stats(rcp_cluster *cl, rcp_cluster_stats *o)
{
    if (!cl || !o)
        return RCP_ERR_INVALID;
    memset(o, 0, sizeof(*o));
#define L(x) atomic_load_explicit(&cl->st.x, memory_order_relaxed)
    o->requests = L(requests);
    o->moved = L(moved);
    o->ask = L(ask);
    o->retries_tryagain = L(tryagain);
    o->retries_clusterdown = L(clusterdown);
    o->retries_loading = L(loading);
    o->retries_masterdown = L(masterdown);
    o->retries_not_sent = L(not_sent);
    o->retries_io = L(io);
    o->retries_readonly = L(readonly);
    o->refreshes_periodic = L(periodic);
    o->refreshes_forced = L(forced);
    o->refresh_failures = L(refresh_failures);
    o->map_version = L(version);
#undef L
    pthread_mutex_lock(&cl->reg_mu);
    for (rcp__node *n = cl->nodes; n; n = n->next)
        if (atomic_load(&n->in_map))
            o->nodes++;
    pthread_mutex_unlock(&cl->reg_mu);
    return RCP_OK;
}

size_t rcp_cluster_get_nodes(rcp_cluster *cl, rcp_cluster_node_info *out, size_t max)
{
    rcp__node *n;
    size_t k = 0;
    if (!cl)
        return 0;
    pthread_mutex_lock(&cl->reg_mu);
    for (n = cl->nodes; n; n = n->next, k++) {
        if (k >= max || !out)
            continue;
        memset(&out[k], 0, sizeof out[k]);
        snprintf(out[k].addr, sizeof out[k].addr, "%s", n->addr);
        out[k].is_master = atomic_load(&n->is_master);
        out[k].in_map = atomic_load(&n->in_map);
        out[k].conn = n->last;
        for (int role = 0; role < RCP__ROLES; role++) {
            struct rcp_conn *conn = atomic_load(&n->conn[role]);
            rcp_conn_stats st;
            if (conn && rcp_conn_get_stats(conn, &st) == RCP_OK)
                rcp_conn_stats_add(&out[k].conn, &st);
        }
        out[k].moved = atomic_load(&n->moved);
        out[k].ask = atomic_load(&n->ask);
        out[k].rtt_us = atomic_load(&n->rtt_ns) / 1000;
    }
    pthread_mutex_unlock(&cl->reg_mu);
    return k;
}
