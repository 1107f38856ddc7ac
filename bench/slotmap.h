/* slotmap.h: the bench's own view of a Redis Cluster, read from CLUSTER
 * SLOTS over a bconn (hiredis, or the TLS client with --tls). It routes the
 * classic baseline and the preload, and names the masters and replicas
 * whose INFO the bench reads.
 *
 * Lookups are lock-free (one acquire load per request): a node entry is
 * written before any slot points to it and is never removed or moved, so an
 * index read from the slot table stays valid. Reloads (at start and after a
 * MOVED) take the mutex. */
#ifndef RCP_BENCH_SLOTMAP_H
#define RCP_BENCH_SLOTMAP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bconn.h"

#define SLOTMAP_SLOTS 16384u
#define SLOTMAP_MAX_NODES 256u
#define SLOTMAP_NONE 0xFFFFu

typedef struct sm_node {
    char host[256];
    int port;
    atomic_bool master;  /* serves slots in the latest load */
    atomic_bool replica; /* listed as a replica in the latest load */
} sm_node;

typedef struct slotmap {
    pthread_mutex_t mu;
    atomic_uint nnodes;
    sm_node nodes[SLOTMAP_MAX_NODES];
    _Atomic uint16_t slot[SLOTMAP_SLOTS]; /* node index, SLOTMAP_NONE: unserved */
    atomic_uint_fast64_t reloads;         /* CLUSTER SLOTS reads after the first */
    char seed_host[256];
    int seed_port;
    const char *user, *password; /* AUTH for every connection; not copied */
} slotmap;

/* Reads the first map from the seed. false with a message in err. */
bool slotmap_init(slotmap *m, const char *seed_host, int seed_port, const char *user,
                  const char *password, char *err, size_t errlen);
void slotmap_destroy(slotmap *m);

/* Node index serving slot, or -1. */
static inline int slotmap_node_of(slotmap *m, unsigned slot)
{
    unsigned v = atomic_load_explicit(&m->slot[slot & (SLOTMAP_SLOTS - 1)], memory_order_acquire);

    return v == SLOTMAP_NONE ? -1 : (int)v;
}

/* Index of host:port, added if new; -1 when the table is full. */
int slotmap_node_index(slotmap *m, const char *host, int port);

/* After "MOVED slot host:port": re-reads CLUSTER SLOTS (from the named node,
 * else the seed) unless another thread already did, and returns the node now
 * serving the slot (the named one if the reload did not say otherwise), or
 * -1 with a message in err. */
int slotmap_moved(slotmap *m, unsigned slot, const char *host, int port, char *err, size_t errlen);

/* Parses the "MOVED|ASK slot host:port" error text (len bytes). An empty
 * host (an unknown endpoint) becomes the seed's host. true if it is one. */
bool slotmap_parse_redirect(const slotmap *m, const char *s, size_t len, bool *ask,
                            unsigned *slot, char *host, size_t hostlen, int *port);

#endif
