/* cluster/bulk.c: the pool of bulk connections per node (issue 14: no
 * head-of-line blocking).
 *
 * Every request to a node shares one pipelined connection per role, so a
 * small GET queued behind a 64 MiB value waits until the whole value has
 * crossed the socket. Requests that move a lot of bytes go instead to a
 * small pool of bulk connections of the same node and role: one with a
 * sink (a streamed read), one with a source (a streamed write), or one
 * whose formatted command is longer than bulk_threshold. rcp__route picks
 * the node and role as for any request; rcp__bulk_pin then swaps the
 * shared connection for a bulk one, so redirects, retries and the read
 * policies are exactly those of the shared pipeline.
 *
 * The busy rule: a request goes on the bulk connection with the fewest
 * outstanding requests (rcp__conn_outstanding); while every open one has
 * a request outstanding and the pool is not full (bulk_pool per node and
 * role), a new one is made, under the registry mutex, as the node's
 * shared connections are. Bulk connections are ordinary pipelined
 * connections: a full pool pipelines bulk requests behind each other,
 * never behind the shared pipeline's small ones. The replica role gets
 * READONLY connections, as for the shared ones.
 *
 * Lifetime follows the node's shared connections: detached (under
 * reg_mu) when the node leaves the map or the handle closes, closed after
 * a grace period; pinned while a request is being handed to one. */
#include <string.h>

#include <urcu-bp.h>

#include "cluster_int.h"

/* The least busy of n's open bulk connections for role, not pinned
 * (*open: how many are open, *busy: its outstanding requests). Inside
 * urcu_bp_read_lock or under reg_mu. */
static struct rcp_conn *bulk_least_busy(struct rcp_cluster *cl, rcp__node *n, int role,
                                        int *open, uint64_t *busy)
{
    struct rcp_conn *best = NULL;
    *open = 0;
    *busy = UINT64_MAX;
    for (int i = 0; i < cl->opt.bulk_pool; i++) {
        struct rcp_conn *c = atomic_load(&n->bulk[role][i]);
        uint64_t out;
        if (!c)
            continue;
        (*open)++;
        out = rcp__conn_outstanding(c);
        if (out < *busy) {
            best = c;
            *busy = out;
        }
    }
    return best;
}

/* reg_mu held, not closing. A new bulk connection for role in a free
 * place of the pool, pinned; if another caller filled the pool meanwhile,
 * the least busy one; NULL on failure. */
static struct rcp_conn *bulk_add(struct rcp_cluster *cl, rcp__node *n, int role)
{
    struct rcp_conn *c;
    uint64_t busy;
    int i, open, max = cl->opt.bulk_pool;
    for (i = 0; i < max; i++)
        if (!atomic_load(&n->bulk[role][i]))
            break;
    if (i == max) {
        c = bulk_least_busy(cl, n, role, &open, &busy);
    } else if (rcp__cluster_dedicated(cl, n->host, n->port,
                                      role == RCP__AS_REPLICA ? RCP__CONN_READONLY : 0,
                                      &c) == RCP_OK) {
        atomic_store(&n->bulk[role][i], c);
    } else {
        return NULL;
    }
    rcp__conn_hold(c); /* before reg_mu is let go: no detach can come between */
    return c;
}

/* One more for role, if the node is still served in that role (its
 * shared connection is there) and the handle is not closing; the least
 * busy one if the pool filled meanwhile; NULL on failure. Pinned. */
static struct rcp_conn *bulk_more(struct rcp_cluster *cl, rcp__node *n, int role)
{
    struct rcp_conn *c = NULL;
    pthread_mutex_lock(&cl->reg_mu);
    if (!atomic_load(&cl->closing) && atomic_load(&n->conn[role]))
        c = bulk_add(cl, n, role);
    pthread_mutex_unlock(&cl->reg_mu);
    return c;
}

struct rcp_conn *rcp__bulk_pin(struct rcp_cluster *cl, rcp__node *n, int role)
{
    struct rcp_conn *best, *c;
    uint64_t busy;
    int open;

    if (role != RCP__AS_MASTER && role != RCP__AS_REPLICA)
        return NULL;
    urcu_bp_read_lock();
    best = bulk_least_busy(cl, n, role, &open, &busy);
    if (best)
        rcp__conn_hold(best);
    urcu_bp_read_unlock();
    if (best && (busy == 0 || open >= cl->opt.bulk_pool))
        return best;
    /* Every open one is busy (or none is open): one more. Else the least
     * busy one, or NULL. */
    c = bulk_more(cl, n, role);
    if (!c)
        return best;
    if (best)
        rcp__conn_release(best);
    return c;
}

struct rcp_conn *rcp__bulk_spare(struct rcp_cluster *cl, rcp__node *n, struct rcp_conn *shared)
{
    struct rcp_conn *best;
    uint64_t busy;
    int open, role;

    if (cl->opt.bulk_pool <= 0 || !n)
        return NULL;
    for (role = RCP__AS_MASTER; role <= RCP__AS_REPLICA; role++)
        if (atomic_load(&n->conn[role]) == shared)
            break;
    if (role > RCP__AS_REPLICA)
        return NULL; /* not a shared pipeline (a bulk one already) */
    urcu_bp_read_lock();
    best = bulk_least_busy(cl, n, role, &open, &busy);
    if (best && busy == 0)
        rcp__conn_hold(best);
    urcu_bp_read_unlock();
    if (best && busy == 0)
        return best;
    return open < cl->opt.bulk_pool ? bulk_more(cl, n, role) : NULL;
}

size_t rcp__bulk_detach(rcp__node *n, struct rcp_conn **out, size_t max, rcp_conn_stats *keep)
{
    size_t k = 0;
    for (int role = 0; role < 2; role++)
        for (int i = 0; i < RCP__POOL_MAX && k < max; i++) {
            struct rcp_conn *c = atomic_exchange(&n->bulk[role][i], NULL);
            rcp_conn_stats st;
            if (!c)
                continue;
            if (keep && rcp_conn_get_stats(c, &st) == RCP_OK)
                rcp_conn_stats_add(keep, &st);
            out[k++] = c;
        }
    return k;
}

void rcp__bulk_detach_all(rcp__node *n)
{
    n->nbulk_gone = (int)rcp__bulk_detach(n, n->bulk_gone, 2 * RCP__POOL_MAX, NULL);
}

void rcp__bulk_close_detached(rcp__node *n)
{
    for (int i = 0; i < n->nbulk_gone; i++)
        rcp_conn_close(n->bulk_gone[i]);
    n->nbulk_gone = 0;
}

int rcp__bulk_cancel(rcp__node *n, rcp_future *f)
{
    int rv = RCP_CANCEL_TOO_LATE;
    for (int role = 0; role < 2 && rv == RCP_CANCEL_TOO_LATE; role++)
        for (int i = 0; i < RCP__POOL_MAX && rv == RCP_CANCEL_TOO_LATE; i++) {
            struct rcp_conn *c;
            urcu_bp_read_lock();
            c = atomic_load(&n->bulk[role][i]);
            if (c)
                rcp__conn_hold(c);
            urcu_bp_read_unlock();
            if (c) {
                rv = rcp__conn_cancel(c, f);
                rcp__conn_release(c);
            }
        }
    return rv;
}

int rcp__bulk_stats(rcp__node *n, rcp_conn_stats *sum)
{
    int open = 0;
    urcu_bp_read_lock();
    for (int role = 0; role < 2; role++)
        for (int i = 0; i < RCP__POOL_MAX; i++) {
            struct rcp_conn *c = atomic_load(&n->bulk[role][i]);
            rcp_conn_stats st;
            if (!c)
                continue;
            open++;
            if (rcp_conn_get_stats(c, &st) == RCP_OK)
                rcp_conn_stats_add(sum, &st);
        }
    urcu_bp_read_unlock();
    return open;
}
