/* cluster/slotmap.c: the slot map. Built completely by the refresher, then
 * published with rcu_xchg_pointer (refresh.c); readers look up a slot with
 * one atomic load under urcu_bp_read_lock, with no lock and no allocation.
 * The only writes after publication are per-slot atomic stores: the owner
 * named by a MOVED redirect, and the "migrating, read from the master" pin
 * of an ASK.
 *
 * The map is built here from a parsed CLUSTER SLOTS table, its nodes
 * taken from the registry (nodes.c). */
#include <string.h>

#include "alloc.h"
#include "cluster_int.h"

rcp__map *rcp__map_new(void)
{
    rcp__map *m = rcp__calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    pthread_mutex_init(&m->moved_mu, NULL);
    return m;
}

void rcp__map_free(rcp__map *m)
{
    rcp__moved_shard *ms, *next;
    if (!m)
        return;
    for (ms = m->moved; ms; ms = next) {
        next = ms->next;
        rcp__free(ms);
    }
    pthread_mutex_destroy(&m->moved_mu);
    rcp__free(m->shards);
    rcp__free(m->replica_store);
    rcp__free(m);
}

int rcp__map_move_slot(rcp__map *m, unsigned slot, rcp__node *node)
{
    rcp__moved_shard *ms;
    rcp__shard *cur;
    if (slot >= RCP__SLOTS)
        return -1;
    cur = atomic_load(&m->slots[slot]);
    if (cur && cur->master == node)
        return 0; /* another thread recorded the same move already */
    ms = rcp__calloc(1, sizeof(*ms));
    if (!ms)
        return -1;
    ms->sh.master = node;
    pthread_mutex_lock(&m->moved_mu);
    ms->next = m->moved;
    m->moved = ms;
    pthread_mutex_unlock(&m->moved_mu);
    atomic_store(&m->slots[slot], &ms->sh);
    return 0;
}

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
rcp__map *rcp__map_build(struct rcp_cluster *cl, const rcp__slots_table *t, rcp__map *old,
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
        rcp__node *master = rcp__node_get(cl, rg->nodes[0].host, rg->nodes[0].port, RCP__AS_MASTER);
        rcp__shard *sh;
        if (!master)
            goto fail;
        sh = add_shard(m, &r, master, NULL, 0);
        for (j = 1; j < rg->nnodes; j++) {
            rcp__node *n = rcp__node_get(cl, rg->nodes[j].host, rg->nodes[j].port, RCP__AS_REPLICA);
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
