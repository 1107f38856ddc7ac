/* cluster/cache.h: client-side caching (cache.c), the cluster layer's side.
 *
 * With rcp_cluster_options.client_cache_bytes > 0 the handle keeps the
 * replies of cacheable reads (the command table's RCP__CMD_CACHEABLE: GET,
 * HGET, ...) and serves them from the process until the server says the
 * key changed. Tracking is Redis's RESP2 mode: each master node gets one
 * invalidation connection (a push connection SUBSCRIBEd to
 * __redis__:invalidate), and the node's plain connection is pointed at it
 * with CLIENT TRACKING ON REDIRECT <id>.
 *
 * Per node, an epoch says whether entries read from it may be trusted:
 * odd while tracking is armed (the plain connection's TRACKING was
 * acknowledged for the current invalidation connection), even while it is
 * not. Any loss (either connection, the node leaving the map) makes it
 * even; an entry is served only while the epoch it was read under is the
 * node's current one, and is stored only if the epoch did not change
 * between the send and the reply. */
#ifndef RCP_CACHE_H
#define RCP_CACHE_H

#include "cluster_int.h"

typedef struct rcp__cache rcp__cache;

/* At open, with the handle's options checked. RCP_OK, or RCP_ERR_OOM. */
int rcp__cache_new(struct rcp_cluster *cl, rcp__cache **out);
/* Close, after every connection that reports to the cache is closed
 * (rcp__cache_close_conns). NULL: no-op. */
void rcp__cache_free(rcp__cache *c);
/* Close: closes every node's invalidation connection. */
void rcp__cache_close_conns(struct rcp_cluster *cl);

/* 1 if a classified one-request command (rq) may be served from the
 * cache or stored in it, asked with mode (rcp_cache_mode). */
int rcp__cache_eligible(const struct rcp_cluster *cl, const rcp__req *rq, int argc, int mode);
/* The sync path, for an eligible command formatted in rq->buf: a hit (a
 * copy the caller owns), or the command fetched from the slot's master
 * with the key's PTTL and stored when tracking allows. NULL: neither; the
 * caller takes the ordinary path (the node is not ready, the request met
 * a redirect or an error, the read failed). */
rcp_reply *rcp__cache_command(struct rcp_cluster *cl, rcp__req *rq, const char *key,
                              size_t keylen);

/* A command that may change its keys is about to be sent, or has been
 * answered: drop every entry of its keys (and any read of them in
 * flight, which will not be stored). By argv (classify.c, before the
 * send) or by the formatted bytes (after the reply). */
/* The same with the command already looked up (classify.c has it). */
void rcp__cache_drop_keys(struct rcp_cluster *cl, const rcp__cmd *cmd, int argc,
                          const char **argv, const size_t *argvlen);
void rcp__cache_drop_argv(struct rcp_cluster *cl, int argc, const char **argv,
                          const size_t *argvlen);
void rcp__cache_drop_raw(struct rcp_cluster *cl, const char *buf, size_t len);

/* Node connection events (cluster.c's node_event): a lost connection to a
 * node drops its entries and re-arms its tracking when it is back. */
void rcp__cache_node_event(struct rcp_cluster *cl, const rcp_event *ev);
/* The refresher detached a node's connections (it left the map), or
 * found it demoted from master. */
void rcp__cache_node_detached(rcp__node *n);
/* The refresher found the node promoted to master: arm its tracking if it
 * is not (any thread, no lock held). */
void rcp__cache_node_promoted(struct rcp_cluster *cl, rcp__node *n);

/* Adds the cache's counters to o but cache_invalidations (summed from
 * the nodes by the caller). */
void rcp__cache_stats(struct rcp_cluster *cl, rcp_cluster_stats *o);

#endif
