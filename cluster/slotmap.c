/* cluster/slotmap.c: the slot map. Built completely by the refresher, then
 * published with rcu_xchg_pointer (cluster.c); readers look up a slot with
 * one atomic load under urcu_bp_read_lock, with no lock and no allocation.
 * The only writes after publication are per-slot atomic stores: the owner
 * named by a MOVED redirect, and the "migrating, read from the master" pin
 * of an ASK. */
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
