/* cluster/route.c: where a request goes.
 *
 * Under urcu_bp_read_lock, with no lock and no allocation: the request's
 * redirect target if a MOVED/ASK named one, else its slot's shard in the
 * current map, else (no key) any master; then, by read policy, the shard's
 * master or one of its healthy replicas. The replica choice of a thread is
 * stable for replica_pick_ms, so that its requests keep batching together
 * on one connection instead of spreading over every replica. A request
 * that moves many bytes then takes one of that node's bulk connections
 * for the same role instead of its shared pipeline (bulk.c).
 *
 * rcp__route itself, the path every request takes, is inline in
 * cluster_int.h; here are its replica choice and its bulk hand-over. */
#include <stdio.h>

#include <urcu-bp.h>

#include "clock.h"
#include "cluster_int.h"
#include "thread_local.h"

/* The thread's xorshift state; also the seed of its replica choice. */
static RCP__THREAD_LOCAL uint64_t tl_seed;

uint64_t rcp__rnd(void)
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

static int usable_for_reads(rcp__node *n, int role, uint64_t now)
{
    struct rcp_conn *conn = atomic_load(&n->conn[role]);
    return conn && rcp__conn_healthy(conn) && atomic_load(&n->loading_until) <= now;
}

/* rcp__route_pick (cluster_int.h). The caller's replica choice is stable
 * for replica_pick_ms so that its requests keep batching together; only a
 * member picked as a replica gets the READONLY connection. */
rcp__node *rcp__route_pick(struct rcp_cluster *cl, rcp__shard *sh, const rcp__req *rq, int *role)
{
    rcp__node *cand[32];
    size_t n = 0, i;
    uint64_t now, epoch;
    *role = RCP__AS_MASTER;
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
        rcp__rnd();
    epoch = now / ((uint64_t)(cl->opt.replica_pick_ms > 0 ? cl->opt.replica_pick_ms : 1) * 1000000ull);
    i = (size_t)((tl_seed ^ (epoch * 0x9e3779b97f4a7c15ull)) >> 7) % n;
    if (cand[i] != sh->master)
        *role = RCP__AS_REPLICA;
    return cand[i];
}

struct rcp_conn *rcp__route_bulk(struct rcp_cluster *cl, rcp__node *node, int role,
                                 struct rcp_conn *conn)
{
    /* Same node and role, one of its bulk connections (bulk.c): the shared
     * pipeline's small requests never wait behind this one. None to be had
     * (closing, out of memory): the shared one. */
    struct rcp_conn *bulk = rcp__bulk_pin(cl, node, role);
    if (!bulk)
        return conn;
    rcp__cluster_unpin(conn);
    rcp__stat_add(&cl->bulk_requests, 1);
    rcp__stat_add(&node->bulk_requests, 1);
    return bulk;
}

int rcp__cluster_slot_master(struct rcp_cluster *cl, unsigned slot, char *host, size_t hostlen,
                             int *port)
{
    rcp__shard *sh = NULL;
    int rv = -1;
    if (slot >= RCP__SLOTS)
        return -1;
    urcu_bp_read_lock();
    sh = atomic_load(&rcp__map_current(cl)->slots[slot]);
    if (sh && sh->master) {
        snprintf(host, hostlen, "%s", sh->master->host);
        *port = sh->master->port;
        rv = 0;
    }
    urcu_bp_read_unlock();
    if (rv < 0)
        rcp__cluster_refresh_soon(cl);
    return rv;
}

rcp__node *rcp__route_master(struct rcp_cluster *cl, const rcp__req *rq)
{
    rcp__node *node = rq->target;
    rcp__map *m;
    if (node)
        return node;
    urcu_bp_read_lock();
    m = rcp__map_current(cl);
    if (rq->has_slot) {
        rcp__shard *sh = atomic_load(&m->slots[rq->slot]);
        node = sh ? sh->master : NULL;
    } else if (m->nshards) {
        node = m->shards[rcp__rnd() % m->nshards].master;
    }
    urcu_bp_read_unlock();
    if (!node)
        rcp__cluster_refresh_soon(cl);
    return node;
}
