/* cluster/cluster_int.h: the cluster handle's internals, shared by
 * slotmap.c (the RCU-published map) and cluster.c (handle, routing,
 * redirects, refresher). */
#ifndef RCP_CLUSTER_INT_H
#define RCP_CLUSTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "conn_int.h"
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
    RCP__AS_SPARE = 2, /* a master's spare plain connections, RCP__SPARES of them from
                        * here: a sync caller that finds the first one busy with a
                        * single lone caller does its own I/O on the first idle spare
                        * (each tried only if the one before is busy with a lone
                        * caller too), instead of waiting for the I/O loop (fewer
                        * thread hand-offs at low concurrency; when the loop drives
                        * batches, callers join them and batching is unchanged) */
    RCP__SPARES = 3,
    RCP__ROLES = RCP__AS_SPARE + RCP__SPARES
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
    /* blocking.c: dedicated connections for blocking commands. `all`
     * holds every one (idle or busy); whoever removes a connection from
     * it closes it, outside any I/O callback (retired ones wait in
     * `retired` for a caller's thread). */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    struct rcp_conn *all[RCP__POOL_MAX], *idle[RCP__POOL_MAX], *retired[RCP__POOL_MAX];
    int nall, nidle, nretired, pool_closed;
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

/* cluster.c, for the handle's other modules (multi-key commands, pub/sub,
 * node-wide commands). */

/* The current master of `slot` by the handle's map: its host (copied,
 * truncated to hostlen) and port. Returns 0, or -1 if no node serves the
 * slot (a refresh is then asked for). No lock, no allocation. */
int rcp__cluster_slot_master(struct rcp_cluster *cl, unsigned slot, char *host, size_t hostlen,
                             int *port);
/* Ask the refresher for a new map soon (coalesced and rate-limited). */
void rcp__cluster_refresh_soon(struct rcp_cluster *cl);
/* The per-node connection options the handle was opened with. */
const rcp_conn_options *rcp__cluster_node_options(struct rcp_cluster *cl);
/* Report an event through the handle's event callback (if any). */
void rcp__cluster_emit(struct rcp_cluster *cl, int type, int err, const char *msg);
/* 1 once rcp_cluster_close has begun. */
int rcp__cluster_closing(struct rcp_cluster *cl);
/* The nodes of the current map (masters only, or all), up to max, each
 * once; is_master[i] says its role there. Node records live until the
 * handle closes. Returns how many were written. */
size_t rcp__cluster_map_nodes(struct rcp_cluster *cl, int all, rcp__node **out, int *is_master,
                              size_t max);
/* The node for host:port with its connection for role made if missing;
 * NULL on OOM or once closing. */
rcp__node *rcp__cluster_node(struct rcp_cluster *cl, const char *host, int port, int role);
/* The node's connection for role, counted as in use until
 * rcp__cluster_unpin; NULL if it has none. */
struct rcp_conn *rcp__cluster_pin(rcp__node *n, int role);
void rcp__cluster_unpin(struct rcp_conn *conn);
/* A connection of the caller's own to host:port, on one of the handle's
 * I/O loops, with the handle's node options (flags: RCP__CONN_*). The
 * caller closes it (rcp_conn_close) before closing the handle. */
int rcp__cluster_dedicated(struct rcp_cluster *cl, const char *host, int port, unsigned flags,
                           struct rcp_conn **out);
/* The same with the I/O timeout off (a blocking command may legitimately
 * get no byte for as long as its own timeout). */
int rcp__cluster_dedicated_no_io_timeout(struct rcp_cluster *cl, const char *host, int port,
                                         struct rcp_conn **out);
/* Explicit batches: n pre-formatted commands as ordinary async requests,
 * the first attempts of each node's share queued in one group (written
 * contiguously). RCP_OK and every f[i] resolved once, or an error for
 * command *bad and none called. */
int rcp__cluster_send_batch(struct rcp_cluster *cl, size_t n, rcp_future *const *f,
                            const char *const *buf, const size_t *len, size_t *bad);
/* blocking.c: set up / tear down a node's pool (node creation, handle
 * close: every pool connection closed, outstanding calls resolved). */
void rcp__pool_init(rcp__node *n);
void rcp__pool_shutdown(rcp__node *n);
void rcp__pool_destroy(rcp__node *n);
/* blocking.c: a blocking command (screening said RCP_ERR_BLOCKING_COMMAND)
 * on a dedicated connection. Contract as rcp_cluster_send_argv. */
int rcp__blocking_send(struct rcp_cluster *cl, rcp_future *f, int argc, const char **argv,
                       const size_t *argvlen);
rcp_reply *rcp__blocking_command(struct rcp_cluster *cl, int argc, const char **argv,
                                 const size_t *argvlen);
/* The handle's per-node pool size for blocking commands. */
int rcp__cluster_blocking_pool(struct rcp_cluster *cl);
/* The handle's redirect and retry limits. */
int rcp__cluster_max_redirects(struct rcp_cluster *cl);
int rcp__cluster_max_retries(struct rcp_cluster *cl);

#endif
