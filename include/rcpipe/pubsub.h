/* rcpipe/pubsub.h: a subscriber for a Redis Cluster handle.
 *
 * A subscriber (rcp_pubsub) owns one thread and dedicated connections of
 * its own (the handle's shared pipelined connections never carry
 * subscriptions). Sharded channels (SSUBSCRIBE, Redis 7) are grouped by
 * slot onto a connection to each slot's master; when a channel's slot
 * moves (MOVED, reshard, failover, lost connection) the subscription is
 * re-established on the new owner by itself and an event reports it.
 * Classic channels and patterns (SUBSCRIBE/PSUBSCRIBE) live on one
 * connection to one chosen node (classic messages are broadcast to every
 * node of a cluster), resubscribed after a reconnect.
 *
 * Publishing needs nothing from this header: SPUBLISH and PUBLISH go
 * through the handle like any other command, e.g.
 * rcp_cluster_command(c, "SPUBLISH %b %b", ch, chlen, msg, msglen).
 *
 * Every function here is thread-safe. */
#ifndef RCPIPE_PUBSUB_H
#define RCPIPE_PUBSUB_H

#include <stddef.h>

#include "rcpipe/cluster.h"
#include "rcpipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rcp_pubsub rcp_pubsub;

/* A subscriber reports RCP_EVENT_PUBSUB_INTERRUPTED and
 * RCP_EVENT_PUBSUB_RESUBSCRIBED (common.h) through its cluster handle's
 * event_cb (rcp_cluster_options.event_cb), on the subscriber's thread;
 * host is "" and port 0: the message names the channel and the node(s). */

/* What a message came from. */
typedef enum rcp_pubsub_kind {
    RCP_PUBSUB_SHARD = 0,   /* SSUBSCRIBE channel ("smessage") */
    RCP_PUBSUB_CHANNEL = 1, /* SUBSCRIBE channel ("message") */
    RCP_PUBSUB_PATTERN = 2  /* PSUBSCRIBE pattern ("pmessage") */
} rcp_pubsub_kind;

/* One message. Every pointer is valid only during the callback; the
 * strings are binary-safe (use the lengths), and NUL-terminated. */
typedef struct rcp_pubsub_msg {
    int kind;               /* rcp_pubsub_kind */
    const char *channel;    /* the channel it was published to */
    size_t channel_len;
    const char *pattern;    /* RCP_PUBSUB_PATTERN: the pattern that matched; else NULL */
    size_t pattern_len;
    const char *message;
    size_t message_len;
} rcp_pubsub_msg;

/* Called on the subscriber's thread, one message at a time, in the order
 * each node sent them. It may call rcp_cluster_* functions (a sync call
 * delays the delivery of later messages), but must not call any
 * rcp_pubsub_* function of the same subscriber. */
typedef void (*rcp_pubsub_msg_fn)(const rcp_pubsub_msg *m, void *data);

/* Options for rcp_pubsub_open. Call rcp_pubsub_options_init first: it
 * sets every default; new fields are only ever added at the end. Strings
 * are copied. */
typedef struct rcp_pubsub_options {
    rcp_pubsub_msg_fn msg_cb;  /* required */
    void *msg_data;
    const char *classic_node;  /* "host:port" for SUBSCRIBE/PSUBSCRIBE; NULL: a master of the
                                * handle's map, picked again if that node fails */
    int timeout_ms;            /* how long a (un)subscribe call waits for the server's
                                * confirmation; 0: the handle's request_timeout_ms (or 5000
                                * if that is <= 0) */
    int recheck_ms;            /* how often each sharded channel's slot owner is compared
                                * with the handle's map; default 100 */
} rcp_pubsub_options;

RCP_API void rcp_pubsub_options_init(rcp_pubsub_options *o);

/* Creates a subscriber on the handle and starts its thread. Connections
 * are made only when a subscription needs them. Returns RCP_OK and *out,
 * or RCP_ERR_INVALID (NULL argument, no msg_cb, bad classic_node),
 * RCP_ERR_OOM, RCP_ERR_CLOSED (the handle is closing); then *out is NULL
 * and errbuf (if not NULL) says why. The handle must stay open until
 * rcp_pubsub_close has returned. */
RCP_API int rcp_pubsub_open(rcp_cluster *c, const rcp_pubsub_options *o, rcp_pubsub **out,
                            char *errbuf, size_t errbuf_len);

/* Stops the thread, closes the subscriber's connections (the servers drop
 * the subscriptions with them) and frees everything. Calls waiting in
 * other threads return RCP_ERR_CLOSED; no call may start once close has
 * begun. Call it before rcp_cluster_close on the handle; not from the
 * message callback. NULL is ignored. */
RCP_API void rcp_pubsub_close(rcp_pubsub *ps);

/* Subscribes to a sharded channel (binary-safe, len bytes) on its slot's
 * master and waits for the server's confirmation. Returns RCP_OK once a
 * master confirmed it; RCP_OK also if it was already subscribed.
 * RCP_ERR_TIMEOUT: not confirmed within timeout_ms (the slot's owner is
 * down, say): the subscription is kept and keeps being tried in the
 * background (RCP_EVENT_PUBSUB_RESUBSCRIBED reports when it is made);
 * call rcp_pubsub_sunsubscribe to give it up. RCP_ERR_SERVER: the server
 * refused it for good (e.g. an ACL): it is dropped. RCP_ERR_INVALID,
 * RCP_ERR_OOM, RCP_ERR_CLOSED. Not from the message callback. */
RCP_API int rcp_pubsub_ssubscribe(rcp_pubsub *ps, const char *channel, size_t len);

/* Drops a sharded channel: once it returns RCP_OK, the callback is never
 * called again for it (messages already read from the server for it are
 * dropped). RCP_OK also when it was not subscribed. */
RCP_API int rcp_pubsub_sunsubscribe(rcp_pubsub *ps, const char *channel, size_t len);

/* Classic channels and patterns, on the subscriber's classic node. Same
 * contracts as the sharded pair. */
RCP_API int rcp_pubsub_subscribe(rcp_pubsub *ps, const char *channel, size_t len);
RCP_API int rcp_pubsub_unsubscribe(rcp_pubsub *ps, const char *channel, size_t len);
RCP_API int rcp_pubsub_psubscribe(rcp_pubsub *ps, const char *pattern, size_t len);
RCP_API int rcp_pubsub_punsubscribe(rcp_pubsub *ps, const char *pattern, size_t len);

/* Counters since open (each field exact, the set not a snapshot). */
typedef struct rcp_pubsub_stats {
    unsigned long long messages;      /* delivered to msg_cb */
    unsigned long long dropped;       /* read for a channel no longer subscribed */
    unsigned long long resubscribes;  /* RCP_EVENT_PUBSUB_RESUBSCRIBED events */
    unsigned long long interruptions; /* RCP_EVENT_PUBSUB_INTERRUPTED events */
    unsigned long long moved;         /* MOVED answers to a subscribe */
    unsigned long long connects;      /* connections made (first ones included) */
    unsigned long long connect_failures;
} rcp_pubsub_stats;

RCP_API int rcp_pubsub_get_stats(rcp_pubsub *ps, rcp_pubsub_stats *out);

#ifdef __cplusplus
}
#endif

#endif
