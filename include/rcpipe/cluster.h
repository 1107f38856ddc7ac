/* rcpipe/cluster.h: one handle for a whole Redis Cluster.
 *
 * The handle keeps a slot map (which node serves which of the 16384 hash
 * slots), refreshed in the background, and one pipelined connection per
 * node (see conn.h). Requests are routed by their key's slot; MOVED and ASK
 * redirects and safe retries are followed transparently. Thread-safe: share
 * one handle among all threads. */
#ifndef RCPIPE_CLUSTER_H
#define RCPIPE_CLUSTER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "rcpipe/common.h"
#include "rcpipe/conn.h"
#include "rcpipe/reply.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rcp_cluster rcp_cluster;

typedef enum rcp_read_policy {
    RCP_READ_MASTER_ONLY = 0,        /* every command to the slot's master */
    RCP_READ_PREFER_REPLICA = 1,     /* read-only commands to a healthy replica, else master */
    RCP_READ_MASTER_AND_REPLICAS = 2, /* read-only commands spread over master and replicas */
    RCP_READ_NEAREST = 3              /* read-only commands to the healthy member with the lowest
                                       * round-trip time (the refresher PINGs every node) */
} rcp_read_policy;

typedef struct rcp_cluster_options {
    const char *seeds;          /* "host:port[,host:port...]"; required */
    int read_policy;            /* rcp_read_policy for read-only commands; default MASTER_ONLY */
    int refresh_interval_ms;    /* periodic slot-map refresh; default 5000 (jittered +-10%) */
    int max_redirects;          /* MOVED/ASK followed per request; default 5 */
    int max_retries;            /* TRYAGAIN/CLUSTERDOWN/LOADING/MASTERDOWN/not-sent/IO retries;
                                 * default 12 (~4.5 s of backoff: a failover), always within
                                 * the request's deadline */
    int min_refresh_gap_ms;     /* forced refreshes at most one per this; default 100 */
    int replica_pick_ms;        /* how long a caller sticks to one replica; default 50 */
    int blocking_pool;          /* dedicated connections per node for blocking commands
                                 * (BLPOP, XREAD BLOCK, WAIT...); default 4, at most 64 */
    const rcp_conn_options *node; /* per-node connection options (host/port and event_cb
                                   * ignored); NULL: defaults. With node->loop, every
                                   * connection that carries requests runs on that
                                   * application loop (rcpipe/adapter.h; docs/api.md) */
    rcp_event_fn event_cb;      /* map updates and every node's connection events; NULL: none */
    void *event_data;
    size_t client_cache_bytes;  /* client-side cache of cacheable reads (docs/caching.md), at
                                 * most this many bytes; 0 (default): off, else >= 65536 */
    int client_cache_ttl_ms;    /* no cached reply is served older than this (nor past the
                                 * key's own expiry); default 60000, 1..86400000 */
    int client_cache_optin;     /* 0 (default): every cacheable sync read uses the cache;
                                 * 1: only those asked with RCP_CACHE_USE */
    int client_cache_bcast;     /* 0 (default): the servers track the keys this handle read;
                                 * 1: broadcast tracking: they invalidate every key with one
                                 * of the prefixes, read or not, and keep no table per key */
    const char *const *client_cache_prefixes; /* broadcast: the prefixes (copied; at most 16,
                                 * none a prefix of another); none: every key */
    int client_cache_nprefixes;
    int bulk_pool;              /* bulk connections per node and role, made on first use, for
                                 * requests that move many bytes (a sink, a source, or a
                                 * command longer than bulk_threshold), so that small
                                 * requests never wait behind them on the shared pipeline;
                                 * a bulk request goes on the one with the fewest requests
                                 * outstanding (docs/large-values.md). A small sync
                                 * request takes an idle one when the shared connection
                                 * has another caller on it and is not batching
                                 * (docs/design.md). Default 2, 0..64; 0: everything on
                                 * the shared pipeline */
    size_t bulk_threshold;      /* bytes of a formatted command above which it goes to the
                                 * bulk pool; default 262144 (256 KiB), at least 1024 */
} rcp_cluster_options;

RCP_API void rcp_cluster_options_init(rcp_cluster_options *o);

/* Connects to the seeds in order until one answers CLUSTER SLOTS with a
 * valid table, builds the first slot map and starts the refresher. On
 * failure *out is NULL and errbuf names every seed tried and why it
 * failed. Strings are copied. */
RCP_API int rcp_cluster_open(const rcp_cluster_options *o, rcp_cluster **out, char *errbuf,
                             size_t errbuf_len);

/* Resolves every outstanding future (RCP_ERR_CLOSED), stops the refresher,
 * closes every node connection. No call may start once close has begun;
 * not from a callback. NULL is ignored. */
RCP_API void rcp_cluster_close(rcp_cluster *c);

/* Async send, routed by the command's keys. Same contract as
 * rcp_conn_send_argv: RCP_OK means f->resolve runs exactly once (after
 * redirects and retries), any other code means it never runs. Returned at
 * once: RCP_ERR_INVALID, RCP_ERR_CLOSED, RCP_ERR_OOM, RCP_ERR_UNSUPPORTED,
 * RCP_ERR_CROSS_SLOT (keys in different slots, for a command that is not
 * split by slot), RCP_ERR_TOO_LARGE, and RCP_ERR_QUEUE_FULL when the node
 * connection's queue is full and its queue_policy is RCP_QUEUE_FAIL. Once
 * accepted, failures reach the future: RCP_ERR_NOT_SENT, RCP_ERR_IO,
 * RCP_ERR_TIMEOUT, RCP_ERR_CLUSTER_DOWN, RCP_ERR_REDIRECT_LIMIT,
 * RCP_ERR_CLOSED, RCP_ERR_QUEUE_FULL (a resend found the queue full), or
 * the server's own error (RCP_ERR_SERVER). */
RCP_API int rcp_cluster_send_argv(rcp_cluster *c, rcp_future *f, int argc, const char **argv,
                                  const size_t *argvlen);
/* The same with a read policy for this request (-1: the handle's). */
RCP_API int rcp_cluster_send_argv_policy(rcp_cluster *c, rcp_future *f, int read_policy, int argc,
                                         const char **argv, const size_t *argvlen);
RCP_API int rcp_cluster_send(rcp_cluster *c, rcp_future *f, const char *fmt, ...);
RCP_API int rcp_cluster_sendv(rcp_cluster *c, rcp_future *f, const char *fmt, va_list ap);
/* Fire and forget, for best-effort writes (a cache fill, a counter): as
 * the sends above with the same refusals and the same redirects and
 * retries, but no future: the reply is dropped. A failure that reaches it
 * is only counted (rcp_cluster_stats.forgotten_errors), so use it only
 * where losing the write is fine. RCP_OK: accepted; any error: not sent. */
RCP_API int rcp_cluster_send_forget(rcp_cluster *c, const char *fmt, ...);
RCP_API int rcp_cluster_send_forget_argv(rcp_cluster *c, int argc, const char **argv,
                                         const size_t *argvlen);

/* Cancel a request sent with rcp_cluster_send* (rcp_conn_cancel's
 * results and thread rules). The request is looked for where it waits:
 * queued on its node's connection (UNSENT or WRITTEN, as rcp_conn_cancel),
 * or waiting for a retry after a redirect, TRYAGAIN or a backoff (UNSENT:
 * not sent again; an earlier attempt was refused by the server, never
 * sent, or, for a read-only command only, lost after it was written).
 * Found, it is resolved with RCP_ERR_CANCELLED on the calling thread
 * before this returns. TOO_LATE: resolved already, or between two places
 * at this very moment (its answer being judged, a retry being sent): then
 * that attempt completes but the request is never sent again (its
 * callback gets that attempt's answer, or RCP_ERR_CANCELLED where a retry
 * would have followed). Only requests of one node: a fire-and-forget
 * request, a multi-key command split over slots, a blocking command or a
 * batch's request answers TOO_LATE. INVALID: NULL, or a request of another
 * handle. f must stay valid until the call returns, and a future never
 * sent should be zeroed (its internal fields are read). */
RCP_API rcp_cancel_result rcp_cluster_cancel(rcp_cluster *c, rcp_future *f);

/* Sync calls: always a reply the caller frees, never NULL. */
RCP_API rcp_reply *rcp_cluster_command_argv(rcp_cluster *c, int argc, const char **argv,
                                            const size_t *argvlen);

/* Streaming reads (rcp_sink, rcpipe/conn.h; docs/large-values.md): as
 * rcp_cluster_send_argv / rcp_cluster_command_argv, the reply's bulk
 * string streamed to sink and resolved as its length (an integer reply).
 * The sink travels with the request across MOVED, ASK and TRYAGAIN,
 * which come before any byte of a value: only the final node's value
 * reaches the sink. A streamed read that was written and then lost its
 * connection is not resent (part of the value may have reached the sink):
 * it resolves with RCP_ERR_IO; one that was never written is resent as
 * any request. Only a command that is one request to one node: a
 * multi-key command whose keys span slots, and a blocking command, are
 * refused with RCP_ERR_UNSUPPORTED. RCP_ERR_INVALID for a NULL or
 * malformed sink. */
RCP_API int rcp_cluster_send_argv_sink(rcp_cluster *c, rcp_future *f, int argc,
                                       const char **argv, const size_t *argvlen,
                                       const rcp_sink *sink);
RCP_API rcp_reply *rcp_cluster_command_argv_sink(rcp_cluster *c, int argc, const char **argv,
                                                 const size_t *argvlen, const rcp_sink *sink);
/* Streaming writes (rcp_source, rcpipe/conn.h; docs/large-values.md): as
 * rcp_cluster_send_argv / rcp_cluster_command_argv with one argument more,
 * the last, pulled from src as the socket accepts it. Routing uses the
 * keys among argv (the source is never a key). A MOVED, ASK or TRYAGAIN
 * answer comes after the whole value: a replayable source (an fd on a
 * regular file, or RCP_SOURCE_REPLAYABLE) is then pulled again from byte
 * 0 and uploaded where the answer says (with ASKING for an ASK), as any
 * request is redirected; any other source is sent again only when not a
 * byte of it was pulled (the connection was down, or lost before its
 * upload started), and such an answer is recorded in the slot map but
 * handed to the caller as the server's error. A connection lost
 * mid-upload gives RCP_ERR_IO (a write is never sent twice once it may
 * have been applied).
 * Only a command that is one request to one node (RCP_ERR_UNSUPPORTED
 * otherwise); RCP_ERR_INVALID for a NULL or malformed source. */
RCP_API int rcp_cluster_send_argv_source(rcp_cluster *c, rcp_future *f, int argc,
                                         const char **argv, const size_t *argvlen,
                                         const rcp_source *src);
RCP_API rcp_reply *rcp_cluster_command_argv_source(rcp_cluster *c, int argc,
                                                   const char **argv, const size_t *argvlen,
                                                   const rcp_source *src);
/* Per request: whether a read uses the client-side cache (docs/caching.md). */
typedef enum rcp_cache_mode {
    RCP_CACHE_DEFAULT = 0, /* as the handle says (client_cache_optin) */
    RCP_CACHE_USE = 1,     /* served from the cache or stored in it, if the handle has one */
    RCP_CACHE_BYPASS = 2   /* from the server, and not stored */
} rcp_cache_mode;
/* rcp_cluster_command_argv_timeout with a cache mode (an rcp_cache_mode;
 * anything else: an RCP_ERR_INVALID reply). Writes drop their keys'
 * entries whatever the mode. */
RCP_API rcp_reply *rcp_cluster_command_argv_cache(rcp_cluster *c, int mode, int timeout_ms,
                                                  int argc, const char **argv,
                                                  const size_t *argvlen);
RCP_API rcp_reply *rcp_cluster_command(rcp_cluster *c, const char *fmt, ...);
RCP_API rcp_reply *rcp_cluster_commandv(rcp_cluster *c, const char *fmt, va_list ap);
/* The same with a deadline of the call's own, in milliseconds, for the
 * whole call: redirects, retries and backoff included (0: the handle's
 * request_timeout_ms, as the calls above; <0: none). Past it the reply is
 * an RCP_ERR_TIMEOUT error (or the last answer, when a retry would not fit
 * in the time left). */
RCP_API rcp_reply *rcp_cluster_command_argv_timeout(rcp_cluster *c, int timeout_ms, int argc,
                                                    const char **argv, const size_t *argvlen);
RCP_API rcp_reply *rcp_cluster_command_timeout(rcp_cluster *c, int timeout_ms, const char *fmt,
                                               ...);
RCP_API rcp_reply *rcp_cluster_commandv_timeout(rcp_cluster *c, int timeout_ms, const char *fmt,
                                                va_list ap);

/* The hash slot (0..16383) of a key, with {hash tag} rules. */
RCP_API unsigned rcp_keyslot(const char *key, size_t len);

typedef struct rcp_cluster_stats {
    uint64_t requests;          /* accepted by a send */
    uint64_t moved, ask;        /* redirects followed */
    uint64_t retries_tryagain, retries_clusterdown, retries_loading, retries_masterdown;
    uint64_t retries_not_sent;  /* resent after RCP_ERR_NOT_SENT */
    uint64_t retries_io;        /* read-only commands resent after RCP_ERR_IO */
    uint64_t retries_readonly;  /* writes resent after -READONLY from a demoted master */
    uint64_t refreshes_periodic, refreshes_forced, refresh_failures;
    uint64_t map_version;       /* increments with every published map */
    uint64_t nodes;             /* nodes in the current map */
    uint64_t forgotten_errors;  /* fire-and-forget requests that failed (any error reply) */
    /* Client-side cache (all 0 when off). */
    uint64_t cache_hits;        /* replies served from the process */
    uint64_t cache_misses;      /* cacheable reads that went to the server */
    uint64_t cache_invalidations; /* keys the servers invalidated (a flush counts one) */
    uint64_t cache_evictions;   /* entries dropped to stay under client_cache_bytes */
    uint64_t cache_bytes;       /* held now (entries, their replies and index) */
    uint64_t cache_entries;     /* held now */
    uint64_t bulk_requests;     /* attempts sent on a bulk connection (bulk_pool: large
                                 * ones, and small sync ones that found the shared
                                 * connection taken; a resend counts again) */
} rcp_cluster_stats;

RCP_API int rcp_cluster_get_stats(rcp_cluster *c, rcp_cluster_stats *out);

typedef struct rcp_cluster_node_info {
    char addr[280];             /* "host:port" */
    int is_master;              /* in the current map */
    int in_map;                 /* 0: known but no longer in the map */
    rcp_conn_stats conn;        /* that node's connection counters */
    uint64_t moved, ask;        /* redirects this node answered */
    uint64_t rtt_us;            /* smoothed PING round trip (refresher), 0: not measured */
    uint64_t cache_invalidations; /* keys (or flushes) this node invalidated (client cache) */
    int cache_tracking;         /* 1: the client cache trusts this node's invalidations now */
    uint64_t bulk_requests;     /* attempts sent on its bulk connections (counted in conn too) */
    int bulk_conns;             /* its bulk connections open now */
} rcp_cluster_node_info;

/* Fills up to max entries; returns how many nodes there are (may be more
 * than max). */
RCP_API size_t rcp_cluster_get_nodes(rcp_cluster *c, rcp_cluster_node_info *out, size_t max);

/* Node-wide commands (DBSIZE, FLUSHALL, SCRIPT LOAD, CONFIG GET...): sent
 * at once to every master (RCP_NODES_MASTERS) or every node
 * (RCP_NODES_ALL; replicas through their READONLY connection) of the
 * current map, on the shared pipelines, then waited for. Fills up to max
 * entries, each with the node's address and role and a reply it owns
 * (a client error if that node could not be asked); returns the number of
 * nodes asked (0 and nothing filled if the command is refused, e.g.
 * NULL, a blocking command, or a call from an I/O thread: a callback,
 * where the wait would deadlock). Free with rcp_cluster_node_replies_free. Nothing is
 * retried or redirected: the reply is that node's. */
enum { RCP_NODES_MASTERS = 0, RCP_NODES_ALL = 1 };

typedef struct rcp_node_reply {
    char addr[280];
    int is_master;
    rcp_reply *reply;
} rcp_node_reply;

RCP_API size_t rcp_cluster_command_nodes(rcp_cluster *c, int which, rcp_node_reply *out,
                                         size_t max, int argc, const char **argv,
                                         const size_t *argvlen);
RCP_API void rcp_cluster_node_replies_free(rcp_node_reply *out, size_t n);

/* Cluster-wide SCAN: walks every master of the map taken at creation, one
 * after the other, each with its own cursor. match, type: NULL for none;
 * count: 0 for the server's default. On a stable cluster every key is
 * returned exactly once; keys whose slot moves during the walk may be
 * missed or returned twice (as with SCAN on one node during a rehash, but
 * coarser). */
typedef struct rcp_cluster_scan rcp_cluster_scan;

RCP_API rcp_cluster_scan *rcp_cluster_scan_new(rcp_cluster *c, const char *match, long count,
                                               const char *type);
/* 1 and *keys an array reply of keys (maybe empty) the caller frees; 0 when
 * every master is done (*keys NULL); -1 on error with *keys an error reply
 * the caller frees (the walk may be continued: the failed step is retried
 * by the next call). */
RCP_API int rcp_cluster_scan_next(rcp_cluster_scan *s, rcp_reply **keys);
RCP_API void rcp_cluster_scan_free(rcp_cluster_scan *s);

/* Scripts: a script object holds a Lua body and its SHA1. Running it sends
 * EVALSHA routed by the first key (no key: any master; keys in several
 * slots: RCP_ERR_CROSS_SLOT); a NOSCRIPT answer (a new node, a failover to
 * a replica that never saw the script, SCRIPT FLUSH) is followed by EVAL
 * with the body on the same slot, which also loads it there, so the caller
 * only ever sees the script's own result. With RCP_SCRIPT_READONLY the
 * script runs as EVALSHA_RO / EVAL_RO: a read-only script, which the read
 * policy may send to a replica. A script object may be shared by threads. */
typedef struct rcp_script rcp_script;
enum { RCP_SCRIPT_READONLY = 1 };

RCP_API rcp_script *rcp_script_new(const char *body, size_t len);
RCP_API const char *rcp_script_sha1(const rcp_script *s);
/* How many runs had to fall back to EVAL (NOSCRIPT). */
RCP_API uint64_t rcp_script_fallbacks(const rcp_script *s);
/* Only once no run of it is outstanding. NULL is ignored. */
RCP_API void rcp_script_free(rcp_script *s);

/* Async: RCP_OK and f resolved once with the script's reply, or an error
 * and f never called. keys/args are copied. */
RCP_API int rcp_cluster_script_send(rcp_cluster *c, rcp_future *f, rcp_script *s, int flags,
                                    int nkeys, const char **keys, const size_t *keylens,
                                    int nargs, const char **args, const size_t *arglens);
/* Sync: always a reply the caller frees. */
RCP_API rcp_reply *rcp_cluster_script_run(rcp_cluster *c, rcp_script *s, int flags, int nkeys,
                                          const char **keys, const size_t *keylens, int nargs,
                                          const char **args, const size_t *arglens);

/* Sync, the keys and arguments from a hiredis-style format, split into
 * words as rcp_cluster_command does ("%s %s %d"): the first nkeys words are
 * the keys, the rest the arguments. "" for neither. Always a reply the
 * caller frees; RCP_ERR_INVALID if nkeys is negative or more than the
 * words. */
RCP_API rcp_reply *rcp_cluster_script(rcp_cluster *c, rcp_script *s, int flags, int nkeys,
                                      const char *fmt, ...);

/* Transactions (MULTI ... EXEC). Every key of every command must hash to
 * one slot (checked when added: RCP_ERR_CROSS_SLOT). rcp_txn_exec writes
 * MULTI, the commands and EXEC contiguously on the slot master's shared
 * pipeline, so no other caller's command lands inside; a MOVED/ASK of the
 * transaction resends the whole of it to the new owner (only when nothing
 * of it ran). Its reply is EXEC's: an array of the commands' replies (each
 * may be an error), nil if a WATCHed key changed, an error starting with
 * EXECABORT that lists the refused commands' errors, or a client error
 * (RCP_ERR_IO etc.: EXEC was sent and its outcome is unknown). After
 * exec the object is empty and can be reused. One thread at a time.
 *
 * rcp_txn_watch opens a dedicated connection to the slot's master and
 * sends WATCH there; rcp_txn_command_argv runs commands (reads) on it
 * before exec, and exec runs on it. If that connection is lost the
 * transaction is not run (RCP_ERR_NOT_SENT): watch again. Free the
 * transaction before closing the handle. */
typedef struct rcp_txn rcp_txn;

RCP_API rcp_txn *rcp_txn_new(rcp_cluster *c);
RCP_API int rcp_txn_add_argv(rcp_txn *t, int argc, const char **argv, const size_t *argvlen);
RCP_API int rcp_txn_add(rcp_txn *t, const char *fmt, ...);
RCP_API rcp_reply *rcp_txn_watch(rcp_txn *t, int nkeys, const char **keys,
                                 const size_t *keylens);
RCP_API rcp_reply *rcp_txn_command_argv(rcp_txn *t, int argc, const char **argv,
                                        const size_t *argvlen);
/* The same with a hiredis-style format ("GET %s"). */
RCP_API rcp_reply *rcp_txn_command(rcp_txn *t, const char *fmt, ...);
RCP_API rcp_reply *rcp_txn_exec(rcp_txn *t);
/* Drops the queued commands and the WATCH (its connection is closed, so
 * the server forgets it); the object is empty and can be reused. */
RCP_API void rcp_txn_discard(rcp_txn *t);
/* Why the last rcp_txn_add* was refused: the command's position and name
 * and the reason (for a cross-slot key: the key, its slot and the
 * transaction's); "" after a successful add. Valid until the next call on
 * t. Never NULL. */
RCP_API const char *rcp_txn_error(const rcp_txn *t);
RCP_API void rcp_txn_free(rcp_txn *t);

/* Explicit batches: queue any commands (any slots; copied when added),
 * then send them at once. Each node's share is written contiguously, each
 * command keeps the full redirect and retry treatment of a single request,
 * and the answer is an array with one reply per command in the order
 * added (each may be an error). Not atomic: use a transaction for that.
 * After a send the batch is empty and can be reused or freed at once. One
 * thread at a time per batch. */
typedef struct rcp_batch rcp_batch;

RCP_API rcp_batch *rcp_batch_new(rcp_cluster *c);
RCP_API int rcp_batch_add_argv(rcp_batch *b, int argc, const char **argv,
                               const size_t *argvlen);
RCP_API int rcp_batch_add(rcp_batch *b, const char *fmt, ...);
RCP_API size_t rcp_batch_count(const rcp_batch *b);
/* Why the last rcp_batch_add* or rcp_batch_send was refused, "" after a
 * success: the command's position (from 1) and name and the reason.
 * Valid until the next call on b. Never NULL. */
RCP_API const char *rcp_batch_error(const rcp_batch *b);
/* Async: RCP_OK and f resolved once with the array, or an error and
 * nothing sent (the batch keeps its commands; rcp_batch_error says why).
 * A command the batch could never send is refused when added instead:
 * keys across slots in a command not split by slot (RCP_ERR_CROSS_SLOT),
 * a blocking command (RCP_ERR_BLOCKING_COMMAND), a connection-state one
 * (RCP_ERR_UNSUPPORTED). An empty batch: RCP_ERR_INVALID. */
RCP_API int rcp_batch_send(rcp_batch *b, rcp_future *f);
RCP_API rcp_reply *rcp_batch_exec(rcp_batch *b);
RCP_API void rcp_batch_free(rcp_batch *b);

#ifdef __cplusplus
}
#endif

#endif
