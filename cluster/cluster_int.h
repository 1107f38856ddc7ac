/* cluster/cluster_int.h: the cluster handle's internals, shared by the
 * cluster layer's modules, one mechanism per file:
 *
 *   cluster.c   the handle: options, open, close, stats, events
 *   nodes.c     the node registry and each node's connections
 *   slotmap.c   the RCU-published slot map: build, publish, MOVED/ASK stores
 *   route.c     which node and connection a request goes to (read policies)
 *   classify.c  what route a command takes (the command table's facts)
 *   retry.c     what an answer means: done, MOVED, ASK, back off, fail
 *   refresh.c   the refresher thread: periodic/forced refreshes, delayed
 *               retries, round-trip measurement
 *   async.c     the async path (wrapped futures)
 *   cache.c     client-side caching: entries, tracking, invalidation
 *   bulk.c      each node's pool of bulk connections (large and streamed
 *               requests off the shared pipeline)
 *   sync.c      the sync path (on the caller's own thread)
 *   batch.c, multi.c, txn.c, script.c, blocking.c, pubsub.c, nodewide.c:
 *               the commands that do not fit one request on one pipeline
 *
 * The cluster layer reaches lib/ only through lib/connection.h's
 * operations; struct rcp_conn is opaque here. */
#ifndef RCP_CLUSTER_INT_H
#define RCP_CLUSTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <urcu-bp.h>

#include "clock.h"
#include "connection.h"
#include "logic.h"
#include "rcpipe/cluster.h"

#define RCP__POOL_MAX 64 /* dedicated connections per node, at most */

/* Which of a node's two connections a request uses. A node has a plain
 * connection for whatever is routed to it as a master, and a READONLY one
 * for reads routed to it as a replica. They are never mixed: a master
 * demoted to replica while a READONLY connection is open to it would serve
 * master-only reads from its own copy (stale, or empty during its full
 * sync) instead of answering MOVED. */
enum {
    RCP__AS_MASTER = 0,
    RCP__AS_REPLICA = 1,
    /* On an application loop only: the refresher's own connection to the
     * node (CLUSTER SLOTS, PING), on the handle's control loop, so that a
     * refresh never waits for the application's loop to run (and the
     * bootstrap in rcp_cluster_open works before it runs). */
    RCP__AS_CONTROL = 2,
    RCP__ROLES = RCP__AS_CONTROL + 1
};

/* A node of the cluster, by address. Nodes live until the handle closes
 * (a few hundred bytes each); their connections are made when a map (or a
 * redirect) first uses the node in that role, closed and detached when the
 * node leaves the map, and remade if it comes back. */
typedef struct rcp__node {
    char *host;
    int port;
    char addr[280];
    _Atomic(struct rcp_conn *) conn[RCP__ROLES]; /* NULL while none */
    struct rcp_conn *detached[RCP__ROLES];        /* close only: waiting to be closed */
    atomic_int in_map;
    atomic_int is_master;
    _Atomic uint64_t loading_until; /* ns: skip for reads while LOADING */
    rcp_conn_stats last;            /* counters of its closed connections, summed */
    _Atomic uint64_t moved, ask;    /* redirects this node answered */
    _Atomic uint64_t rtt_ns;        /* smoothed PING round trip, 0: unknown */
    struct rcp__node *next;         /* registry list */
    /* cache.c (client-side caching on): see cache.h for the epoch. */
    _Atomic uint64_t cache_epoch;   /* odd: tracking armed */
    _Atomic uint64_t cache_seq;     /* bumped by every loss: an older arm does not count */
    _Atomic long long inv_id;       /* CLIENT ID of the invalidation connection, 0: unknown */
    _Atomic(struct rcp_conn *) inv; /* the invalidation connection, NULL: none yet */
    _Atomic uint64_t cache_invalidations; /* keys (or flushes) the node invalidated */
    int was_master;                 /* refresh.c's scratch, under reg_mu */
    /* blocking.c: dedicated connections for blocking commands. `all`
     * holds every one (idle or busy); whoever removes a connection from
     * it closes it, outside any I/O callback (retired ones wait in
     * `retired` for a caller's thread). */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    struct rcp_conn *all[RCP__POOL_MAX], *idle[RCP__POOL_MAX], *retired[RCP__POOL_MAX];
    int nall, nidle, nretired, pool_closed;
    /* bulk.c: bulk connections per role (master, replica), made on first
     * use under reg_mu; bulk_gone holds them between detach and close
     * (handle close only). */
    _Atomic(struct rcp_conn *) bulk[2][RCP__POOL_MAX];
    struct rcp_conn *bulk_gone[2 * RCP__POOL_MAX];
    int nbulk_gone;
    _Atomic uint64_t bulk_requests; /* attempts sent on its bulk connections */
} rcp__node;

typedef struct rcp__shard {
    rcp__node *master;
    size_t nreplicas;
    rcp__node **replicas;
} rcp__shard;

/* A shard made on the spot by a MOVED redirect: the slot's new owner,
 * recorded in the current map without copying it. Freed with the map. */
typedef struct rcp__moved_shard {
    rcp__shard sh;
    struct rcp__moved_shard *next;
} rcp__moved_shard;

/* Immutable once published, except the per-slot atomic stores of MOVED
 * (slots) and ASK (pinned). */
typedef struct rcp__map {
    uint64_t version;
    _Atomic(rcp__shard *) slots[RCP__SLOTS];
    atomic_uchar pinned[RCP__SLOTS]; /* ASK seen: reads go to the master */
    size_t nshards;
    rcp__shard *shards;
    rcp__node **replica_store;       /* backing array of every shard's replicas */
    size_t covered;
    pthread_mutex_t moved_mu;
    rcp__moved_shard *moved;
} rcp__map;

/* slotmap.c */
rcp__map *rcp__map_new(void);
void rcp__map_free(rcp__map *m);
/* Record a MOVED: from now on the slot's requests go to node (a per-slot
 * atomic store; no copy of the map). Returns -1 on OOM. */
int rcp__map_move_slot(rcp__map *m, unsigned slot, rcp__node *node);

/* ------------------------------------------------------------------ */
/* the handle                                                          */

#define RCP__MAX_SEEDS 64

typedef struct rcp__seed {
    char *host;
    int port;
} rcp__seed;

/* A request's routing and retry state, the same for every kind of request
 * (async, sync, batch part, split part, blocking, transaction, WATCH):
 * route.c reads it to pick a node, retry.c updates it from each answer. */
typedef struct rcp__req {
    char *buf;          /* the formatted command */
    size_t len;
    unsigned slot;
    int has_slot;
    unsigned flags;     /* RCP__CMD_* */
    int policy;         /* RCP_READ_*; -1 before classification: the handle's */
    uint64_t deadline;  /* ns, 0: none */
    int redirects, retries;
    rcp__node *target;  /* next attempt goes here (MOVED/ASK), else routed */
    rcp__node *last;    /* where the last attempt went, for error messages */
    int asking;
    const rcp_sink *sink; /* the reply streams there on every attempt (the caller's; NULL:
                           * none); a streamed read is never resent once written */
    const rcp_source *src; /* the last argument streams from there (buf holds the head,
                            * rcp__format_source_write); resent only if not a byte of it
                            * was pulled (RCP_ERR_NOT_SENT) */
} rcp__req;

/* A request waiting on the refresher's queue for a delayed retry
 * (refresh.c). fire runs on the refresher thread once `at` has come, or
 * with closing 1 when the handle closes: it then resolves its request
 * with RCP_ERR_CLOSED. Either way the item is off the queue. */
typedef struct rcp__later {
    uint64_t at;        /* ns */
    struct rcp__later *next;
    void (*fire)(struct rcp__later *l, int closing);
} rcp__later;

#define RCP__CFUT_INLINE 192    /* bytes of a command kept inside its cfut */
#define RCP__CFUT_CACHE_MAX 4096 /* unused cfuts a handle keeps for reuse */

/* The async path's wrapped future (async.c). `inner` goes to a node
 * connection; `user` is resolved once, when the retry rules say done. */
typedef struct rcp__cfut {
    rcp_future inner;
    rcp_future *user;
    struct rcp_cluster *cl;
    rcp__req rq;
    rcp__later later;
    struct rcp__cfut *next_free;
    atomic_int cancelled; /* rcp_cluster_cancel asked: never send it again */
    /* Small commands are formatted here, so an async request costs no
     * allocation once the handle's free list has warmed up. */
    char inl[RCP__CFUT_INLINE];
} rcp__cfut;

struct rcp_cluster {
    rcp_cluster_options opt;
    rcp_conn_options node_opt;
    char *node_user, *node_pass, *node_name;
    struct rcp__tls_cfg *node_tls; /* node_opt's TLS strings and context (lib's) */
    rcp__seed seeds[RCP__MAX_SEEDS];
    int nseeds;
    rcp__loop **loops;  /* where node connections run: our I/O threads, or the
                         * application's loop (node option `loop`; then one, not ours) */
    unsigned nloops;
    atomic_uint next_loop;
    int app_loop;       /* loops[0] is the application's */
    rcp__loop *ctl_loop; /* app_loop only: one I/O thread of ours for RCP__AS_CONTROL */

    /* The current slot map. Read under urcu_bp_read_lock, freed after a
     * grace period (urcu_bp_synchronize_rcu). Published and read with C11
     * atomics (release exchange / acquire load: what rcu_xchg_pointer and
     * rcu_dereference do on this hardware) so that ThreadSanitizer can see
     * the publication too. */
    _Atomic(rcp__map *) map;

    pthread_mutex_t reg_mu; /* the registry */
    rcp__node *nodes;
    size_t nnodes;

    /* The refresher (refresh.c). */
    pthread_t worker;
    int worker_started;
    atomic_int worker_done; /* the refresher returned (close waits for it, see rcp__cluster_join) */
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    int stop;
    int force;               /* a forced refresh is wanted */
    uint64_t last_refresh;   /* ns, last refresh attempt */
    uint64_t next_periodic;  /* ns */
    rcp__later *retries;     /* delayed retries, unsorted */
    int retries_closed;      /* close has drained the queue: no more */
    atomic_int closing;
    atomic_uint active_calls;

    /* Resolved cfuts kept for the next async requests (at most about
     * RCP__CFUT_CACHE_MAX, counted by cf_nfree): given back by the I/O
     * threads onto cf_back (a lock-free push: no mutex on the thread that
     * resolves), taken by senders from cf_free under cf_busy; a sender that
     * finds cf_free empty takes all of cf_back at once (an exchange, so
     * the push never meets a pop of one item and has no ABA). cf_busy is a
     * spin flag, not a mutex: it is held for a few instructions, and a
     * mutex's lock and unlock cost about 60 instructions per request. */
    atomic_int cf_busy;
    rcp__cfut *cf_free;
    _Atomic(rcp__cfut *) cf_back;
    atomic_uint cf_nfree;

    struct {
        _Atomic uint64_t requests, moved, ask, tryagain, clusterdown, loading, masterdown,
            not_sent, io, readonly, periodic, forced, refresh_failures, version, forgotten_errors;
    } st;
    struct rcp__cache *cache; /* client-side cache (cache.c), NULL: off */
    _Atomic uint64_t bulk_requests; /* bulk.c: attempts sent on bulk connections */
    /* The future of every fire-and-forget request (async.c): shared, since
     * the cluster layer only ever reads a caller's future and calls its
     * resolve. */
    rcp_future forget;
};

static inline void rcp__stat_add(_Atomic uint64_t *s, uint64_t v)
{
    atomic_fetch_add_explicit(s, v, memory_order_relaxed);
}

/* A zeroed object of size bytes for a handle's companion (a batch, a
 * transaction); NULL for a NULL handle or out of memory. */
void *rcp__cluster_new_companion(struct rcp_cluster *cl, size_t size);

/* Inside urcu_bp_read_lock only. */
static inline rcp__map *rcp__map_current(struct rcp_cluster *cl)
{
    return atomic_load_explicit(&cl->map, memory_order_acquire);
}

/* cluster.c */
/* Report an event through the handle's event callback (if any). */
void rcp__cluster_emit(struct rcp_cluster *cl, int type, int err, const char *msg);
/* 1 once rcp_cluster_close has begun. */
int rcp__cluster_closing(struct rcp_cluster *cl);
/* The per-node connection options the handle was opened with. */
const rcp_conn_options *rcp__cluster_node_options(struct rcp_cluster *cl);
/* The handle's per-node pool size for blocking commands. */
int rcp__cluster_blocking_pool(struct rcp_cluster *cl);

/* nodes.c: the registry. */
/* The node for host:port, created if new, with its connection for role
 * made if it has none (not once closing); NULL on OOM. */
rcp__node *rcp__node_get(struct rcp_cluster *cl, const char *host, int port, int role);
/* The same, NULL once closing. */
rcp__node *rcp__cluster_node(struct rcp_cluster *cl, const char *host, int port, int role);
/* Inside urcu_bp_read_lock: the node's connection for role, counted as in
 * use until rcp__cluster_unpin (so closing it, after a grace period, waits
 * for us); NULL if it has none. */
static inline struct rcp_conn *rcp__node_pin_locked(rcp__node *n, int role)
{
    struct rcp_conn *conn = atomic_load(&n->conn[role]);
    if (conn)
        rcp__conn_hold(conn);
    return conn;
}
/* The same outside the read lock. */
struct rcp_conn *rcp__cluster_pin(rcp__node *n, int role);
/* Either of the node's connections (the plain one first), for commands
 * that any role answers the same: CLUSTER SLOTS, PING. */
struct rcp_conn *rcp__node_pin_any(rcp__node *n);
/* The refresher's connection to the node: on our own I/O threads, as
 * rcp__node_pin_any; on an application loop, the node's RCP__AS_CONTROL
 * connection (made on first use). NULL if there is none. */
struct rcp_conn *rcp__node_pin_control(struct rcp_cluster *cl, rcp__node *n);
/* The role a seed's first connection takes (RCP__AS_CONTROL on an
 * application loop, else RCP__AS_MASTER). */
int rcp__seed_role(const struct rcp_cluster *cl);
/* pthread_join(th) for a thread of the handle that may be closing
 * connections on the application's loop: while *done is 0 and the caller
 * is the thread of that loop (which is not running while we wait), the
 * loop's passes are run here. */
void rcp__cluster_join(struct rcp_cluster *cl, pthread_t th, atomic_int *done);
/* Ends a pin (rcp__node_pin_locked, rcp__cluster_pin, ...). */
static inline void rcp__cluster_unpin(struct rcp_conn *conn)
{
    rcp__conn_release(conn);
}
/* The nodes of the current map (masters only, or all), up to max, each
 * once; is_master[i] says its role there. Node records live until the
 * handle closes. Returns how many were written. */
size_t rcp__cluster_map_nodes(struct rcp_cluster *cl, int all, rcp__node **out, int *is_master,
                              size_t max);
/* A connection of the caller's own to host:port, on one of the handle's
 * I/O loops, with the handle's node options (flags: RCP__CONN_*). The
 * caller closes it (rcp_conn_close) before closing the handle. */
int rcp__cluster_dedicated(struct rcp_cluster *cl, const char *host, int port, unsigned flags,
                           struct rcp_conn **out);
/* The same with the I/O timeout off (a blocking command may legitimately
 * get no byte for as long as its own timeout). */
int rcp__cluster_dedicated_no_io_timeout(struct rcp_cluster *cl, const char *host, int port,
                                         struct rcp_conn **out);

/* A push connection (lib/connection.h) to host:port for a subscriber, on
 * one of the handle's I/O loops, with the handle's node options but its
 * own event callback. */
int rcp__cluster_dedicated_push(struct rcp_cluster *cl, const char *host, int port,
                                rcp__push_fn fn, void *data, rcp_event_fn ev, void *ev_data,
                                struct rcp_conn **out);

/* slotmap.c (with the map functions above) */
/* A map from a parsed table; nodes are created as needed. Slots the table
 * leaves out but `old` (or NULL) serves keep their old owner; *kept counts
 * them. NULL on OOM. */
rcp__map *rcp__map_build(struct rcp_cluster *cl, const rcp__slots_table *t, rcp__map *old,
                         size_t *kept);

/* route.c */
/* A per-thread xorshift; its seed also fixes the thread's replica choice. */
uint64_t rcp__rnd(void);
/* rcp__route's replica choice (below), inside the read-side critical
 * section, for a read that may go to a replica: the node, and in *role
 * which of its connections to use. */
rcp__node *rcp__route_pick(struct rcp_cluster *cl, rcp__shard *sh, const rcp__req *rq, int *role);
/* rcp__route's last step for a request rcp__bulk_wanted: conn (the
 * node's shared connection, pinned) traded for one of its bulk
 * connections if one can be had. Returns the connection to use, pinned. */
struct rcp_conn *rcp__route_bulk(struct rcp_cluster *cl, rcp__node *node, int role,
                                 struct rcp_conn *conn);
/* The node a dedicated-connection request (blocking command, transaction,
 * WATCH) goes to: its redirect target, else its slot's master, else (no
 * key) any master; NULL if none (a refresh is asked for). Node records
 * live until the handle closes. */
rcp__node *rcp__route_master(struct rcp_cluster *cl, const rcp__req *rq);
/* The current master of `slot` by the handle's map: its host (copied,
 * truncated to hostlen) and port. Returns 0, or -1 if no node serves the
 * slot (a refresh is then asked for). No lock, no allocation. */
int rcp__cluster_slot_master(struct rcp_cluster *cl, unsigned slot, char *host, size_t hostlen,
                             int *port);

/* bulk.c: the pool of bulk connections (see there for the busy rule). */
/* 1 if the request goes on a bulk connection: a sink, a source, or a
 * command longer than bulk_threshold, with bulk_pool > 0. Inline: every
 * routed request asks. */
static inline int rcp__bulk_wanted(const struct rcp_cluster *cl, const rcp__req *rq)
{
    if (cl->opt.bulk_pool <= 0)
        return 0;
    return rq->sink || rq->src || rq->len > cl->opt.bulk_threshold;
}
/* A bulk connection of n for role (RCP__AS_MASTER or RCP__AS_REPLICA),
 * pinned (release with rcp__cluster_unpin); made if needed. NULL if none
 * can be had (closing, the node no longer served in that role, out of
 * memory): the caller keeps the shared connection. */
struct rcp_conn *rcp__bulk_pin(struct rcp_cluster *cl, rcp__node *n, int role);

/* Picks the node for the request's next attempt (its redirect target, else
 * its slot's shard by read policy, else any master) and pins its
 * connection. NULL with *code (RCP_ERR_CLUSTER_DOWN: no node serves the
 * slot; RCP_ERR_NOT_SENT: the node has no connection) when there is
 * nowhere to send; *node_out is the node, if any. Under urcu_bp_read_lock,
 * with no lock and no allocation. Inline: every request takes it, and
 * most go to their slot's master (route.c has the rest). */
static inline struct rcp_conn *rcp__route(struct rcp_cluster *cl, rcp__req *rq,
                                          rcp__node **node_out, int *code)
{
    rcp__map *m;
    rcp__node *node = rq->target; /* a redirect names a master */
    struct rcp_conn *conn = NULL;
    int role = RCP__AS_MASTER;

    urcu_bp_read_lock();
    m = rcp__map_current(cl);
    if (!node) {
        rcp__shard *sh = NULL;
        if (rq->has_slot)
            sh = atomic_load(&m->slots[rq->slot]);
        else if (m->nshards)
            sh = &m->shards[rcp__rnd() % m->nshards];
        /* A write, the master-only policy, a slot pinned to its master by
         * an ASK, a shard without replicas: the master, without the
         * replica choice. */
        if (sh && (!(rq->flags & RCP__CMD_READONLY) || rq->policy == RCP_READ_MASTER_ONLY ||
                   sh->nreplicas == 0 || (rq->has_slot && atomic_load(&m->pinned[rq->slot]))))
            node = sh->master;
        else if (sh)
            node = rcp__route_pick(cl, sh, rq, &role);
    }
    if (node)
        conn = rcp__node_pin_locked(node, role);
    urcu_bp_read_unlock();
    if (conn && rcp__bulk_wanted(cl, rq))
        conn = rcp__route_bulk(cl, node, role, conn);
    *node_out = node;
    if (!node)
        *code = RCP_ERR_CLUSTER_DOWN;
    else if (!conn)
        *code = RCP_ERR_NOT_SENT;
    return conn;
}

/* For a sync caller that found n's shared connection `shared` busy: an
 * idle bulk connection of the same role (none outstanding), made if the
 * pool is not full; pinned. NULL if there is none to be had. */
struct rcp_conn *rcp__bulk_spare(struct rcp_cluster *cl, rcp__node *n, struct rcp_conn *shared);
/* reg_mu held: takes every bulk connection of n out of reach (up to
 * max, into out) for closing after a grace period; their counters are
 * added to *keep unless NULL. Returns how many. */
size_t rcp__bulk_detach(rcp__node *n, struct rcp_conn **out, size_t max, rcp_conn_stats *keep);
/* Handle close: detach into n->bulk_gone (reg_mu held), then, after the
 * grace period, close them. */
void rcp__bulk_detach_all(rcp__node *n);
void rcp__bulk_close_detached(rcp__node *n);
/* rcp__conn_cancel on each of n's bulk connections until one finds f. */
int rcp__bulk_cancel(rcp__node *n, rcp_future *f);
/* Adds the counters of n's open bulk connections to *sum; returns how
 * many are open. */
int rcp__bulk_stats(rcp__node *n, rcp_conn_stats *sum);

/* async.c: the handle's shared fire-and-forget future (open). */
void rcp__forget_init(struct rcp_cluster *cl);

/* classify.c: what route a command takes. */
typedef enum rcp__route_kind {
    RCP__ROUTE_REFUSED = 0, /* not sent: *code and *why say why */
    RCP__ROUTE_ONE,         /* one request: its slot (has_slot) or any master */
    RCP__ROUTE_SPLIT,       /* a multi-key command spanning slots: split by slot (multi.c) */
    RCP__ROUTE_BLOCKING     /* a blocking command: a dedicated connection (blocking.c) */
} rcp__route_kind;
/* Classifies argv into rq (flags, slot, policy: rq->policy -1 takes the
 * handle's). *why is static or per-thread text, valid until the thread's
 * next refusal. */
rcp__route_kind rcp__classify(struct rcp_cluster *cl, int argc, const char **argv,
                              const size_t *argvlen, rcp__req *rq, int *code, const char **why);
/* rcp__classify of a command whose last argument streams from rq->src:
 * argv holds the others; the source stands in as an empty argument, so
 * the command table sees the whole command (SET key <value>). */
rcp__route_kind rcp__classify_source(struct rcp_cluster *cl, int argc, const char **argv,
                                     const size_t *argvlen, rcp__req *rq, int *code,
                                     const char **why);

/* retry.c: the one place that says what an attempt's answer means. */
enum { RCP__ACT_DONE, RCP__ACT_RESEND, RCP__ACT_LATER, RCP__ACT_FAIL };
/* `asked` is the node the attempt went to (or NULL). On RCP__ACT_LATER
 * *delay_ns is set (the same capped backoff for every kind of request); on
 * RCP__ACT_FAIL *code and msg; on RCP__ACT_RESEND rq->target (and
 * rq->asking) say where. A MOVED patches the shared map, an ASK pins the
 * slot to its master for reads; either asks for a refresh. */
int rcp__retry_decide(struct rcp_cluster *cl, rcp__req *rq, rcp__node *asked, const rcp_reply *r,
                      uint64_t *delay_ns, int *code, char *msg, size_t msglen);
/* The request's deadline from a future's timeout (0: the handle's
 * request_timeout_ms; <0: none). Inline: once per request. */
static inline uint64_t rcp__req_deadline(struct rcp_cluster *cl, int timeout_ms)
{
    int ms = timeout_ms ? timeout_ms : cl->node_opt.request_timeout_ms;
    return ms > 0 ? rcp__now_ns() + (uint64_t)ms * 1000000ull : 0;
}
/* Milliseconds left before the deadline as a future's timeout_ms (-1:
 * none; at least 1). */
int rcp__req_remaining_ms(const rcp__req *rq);

/* refresh.c: the refresher thread. */
/* Ask the refresher for a new map soon (coalesced and rate-limited). */
void rcp__cluster_refresh_soon(struct rcp_cluster *cl);
/* Ask the seeds / map nodes for a table and publish a new map now (the
 * refresher thread, or open before it starts). 0 if a map was published;
 * `errs` (optional) collects why each node failed. */
int rcp__refresh(struct rcp_cluster *cl, const char *reason, char *errs, size_t errlen);
/* PING every node of the map and smooth its round trip. */
void rcp__refresh_rtt(struct rcp_cluster *cl);
void *rcp__refresher_main(void *arg);
/* Queue l to fire after delay_ns (capped at deadline when non-zero).
 * Returns 0, or -1 once the handle has closed its queue (l not queued:
 * the caller resolves its request with RCP_ERR_CLOSED). */
int rcp__later_add(struct rcp_cluster *cl, rcp__later *l, uint64_t delay_ns, uint64_t deadline);
/* Take l off the queue of delayed retries if it is there (not yet due and
 * taken by the refresher): 1, and l is the caller's; else 0. */
int rcp__later_remove(struct rcp_cluster *cl, rcp__later *l);
/* Close, first step: ask the thread to stop (it finishes what it is
 * doing). */
void rcp__refresher_wake(struct rcp_cluster *cl);
/* Close, last step: join the thread, then fire every queued item with
 * closing 1. */
void rcp__refresher_stop(struct rcp_cluster *cl);

/* async.c */
/* The async path's whole entry for argv (classified, split or sent to the
 * blocking pool as it needs): the public send functions and split parts
 * come here. Contract as rcp_cluster_send_argv. */
int rcp__async_argv(struct rcp_cluster *cl, rcp_future *f, int policy, int argc,
                    const char **argv, const size_t *argvlen);
/* A cfut with its header zeroed (inl is not), or NULL when out of memory. */
rcp__cfut *rcp__cfut_get(struct rcp_cluster *cl);
/* Frees the command (unless inline) and keeps or frees the cfut. */
void rcp__cfut_put(struct rcp_cluster *cl, rcp__cfut *cf);
/* (Re)send cf by the retry rules; never blocks on an I/O thread. */
void rcp__cfut_submit(rcp__cfut *cf);
/* The inner future's resolve function. */
void rcp__cfut_on_reply(rcp_future *f, rcp_reply *r);

/* batch.c: explicit batches, n pre-formatted commands as ordinary async
 * requests, the first attempts of each node's share queued in one group
 * (written contiguously). RCP_OK and every f[i] resolved once, or an error
 * for command *bad and none called. */
int rcp__cluster_send_batch(struct rcp_cluster *cl, size_t n, rcp_future *const *f,
                            const char *const *buf, const size_t *len, size_t *bad);

/* blocking.c: set up / tear down a node's pool (node creation, handle
 * close: every pool connection closed, outstanding calls resolved). */
void rcp__pool_init(rcp__node *n);
void rcp__pool_shutdown(rcp__node *n);
void rcp__pool_destroy(rcp__node *n);
/* blocking.c: a blocking command (classified RCP__ROUTE_BLOCKING) on a
 * dedicated connection. Contract as rcp_cluster_send_argv. */
int rcp__blocking_send(struct rcp_cluster *cl, rcp_future *f, const rcp__req *rq, int argc,
                       const char **argv, const size_t *argvlen);
rcp_reply *rcp__blocking_command(struct rcp_cluster *cl, const rcp__req *rq, int timeout_ms,
                                 int argc, const char **argv, const size_t *argvlen);

#endif
