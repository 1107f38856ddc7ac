/* cluster/nodes.c: the node registry and each node's connections.
 *
 * A node is an address; its record lives until the handle closes. Its
 * connections (one per role: plain, READONLY for replica reads) are made when a map or a redirect first uses the
 * node in that role, detached when the node leaves the map and remade if
 * it comes back. Whoever uses a connection pins it (counted as a call in
 * progress), so a connection detached by the refresher is closed only
 * after a grace period and once every pinned use has finished. */
#include <stdio.h>
#include <string.h>

#include <urcu-bp.h>

#include "alloc.h"
#include "cluster_int.h"

/* Any of the handle's loops, in turn (the control loop for `control`).
 * reg_mu held or not: only the loop counter is shared. */
static int nodes_conn_new(struct rcp_cluster *cl, const char *host, int port, unsigned flags,
                          int io_timeout_off, int control, struct rcp_conn **out)
{
    rcp_conn_options o = cl->node_opt;
    unsigned i = atomic_fetch_add(&cl->next_loop, 1) % cl->nloops;
    o.host = host;
    o.port = port;
    if (io_timeout_off)
        o.io_timeout_ms = 0;
    return rcp__conn_create(control && cl->ctl_loop ? cl->ctl_loop : cl->loops[i], &o, flags, out);
}

static int nodes_dedicated(struct rcp_cluster *cl, const char *host, int port, unsigned flags,
                           int io_timeout_off, struct rcp_conn **out)
{
    return nodes_conn_new(cl, host, port, flags, io_timeout_off, 0, out);
}

/* reg_mu held. Opens the node's connection for `role`: only the replica
 * one sends READONLY (see RCP__AS_REPLICA). */
static int node_connect(struct rcp_cluster *cl, rcp__node *n, int role)
{
    struct rcp_conn *conn;
    if (nodes_conn_new(cl, n->host, n->port, role == RCP__AS_REPLICA ? RCP__CONN_READONLY : 0, 0,
                       role == RCP__AS_CONTROL, &conn) != RCP_OK)
        return -1;
    atomic_store(&n->conn[role], conn);
    return 0;
}

rcp__node *rcp__node_get(struct rcp_cluster *cl, const char *host, int port, int role)
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

rcp__node *rcp__cluster_node(struct rcp_cluster *cl, const char *host, int port, int role)
{
    if (atomic_load(&cl->closing))
        return NULL;
    return rcp__node_get(cl, host, port, role);
}

struct rcp_conn *rcp__cluster_pin(rcp__node *n, int role)
{
    struct rcp_conn *conn;
    urcu_bp_read_lock();
    conn = rcp__node_pin_locked(n, role);
    urcu_bp_read_unlock();
    return conn;
}

struct rcp_conn *rcp__node_pin_any(rcp__node *n)
{
    struct rcp_conn *conn;
    urcu_bp_read_lock();
    conn = rcp__node_pin_locked(n, RCP__AS_MASTER);
    if (!conn)
        conn = rcp__node_pin_locked(n, RCP__AS_REPLICA);
    urcu_bp_read_unlock();
    return conn;
}

struct rcp_conn *rcp__node_pin_control(struct rcp_cluster *cl, rcp__node *n)
{
    if (!cl->ctl_loop)
        return rcp__node_pin_any(n);
    pthread_mutex_lock(&cl->reg_mu);
    if (!atomic_load(&n->conn[RCP__AS_CONTROL]) && !atomic_load(&cl->closing))
        node_connect(cl, n, RCP__AS_CONTROL);
    pthread_mutex_unlock(&cl->reg_mu);
    return rcp__cluster_pin(n, RCP__AS_CONTROL);
}

int rcp__seed_role(const struct rcp_cluster *cl)
{
    return cl->ctl_loop ? RCP__AS_CONTROL : RCP__AS_MASTER;
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
    m = rcp__map_current(cl);
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

int rcp__cluster_dedicated(struct rcp_cluster *cl, const char *host, int port, unsigned flags,
                           struct rcp_conn **out)
{
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    return nodes_dedicated(cl, host, port, flags, 0, out);
}

int rcp__cluster_dedicated_no_io_timeout(struct rcp_cluster *cl, const char *host, int port,
                                         struct rcp_conn **out)
{
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    return nodes_dedicated(cl, host, port, 0, 1, out);
}

int rcp__cluster_dedicated_push(struct rcp_cluster *cl, const char *host, int port,
                                rcp__push_fn fn, void *data, rcp_event_fn ev, void *ev_data,
                                struct rcp_conn **out)
{
    rcp_conn_options o = cl->node_opt;
    unsigned i = atomic_fetch_add(&cl->next_loop, 1) % cl->nloops;
    if (atomic_load(&cl->closing))
        return RCP_ERR_CLOSED;
    o.host = host;
    o.port = port;
    o.event_cb = ev;
    o.event_data = ev_data;
    return rcp__conn_create_push(cl->loops[i], &o, fn, data, out);
}
