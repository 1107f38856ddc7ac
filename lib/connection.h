/* lib/connection.h: the contract between lib/ (one node's connection) and
 * the layers above it (cluster/). Everything cluster/ may do with a
 * connection is declared here, with who may call it and what it promises;
 * struct rcp_conn is opaque on this side. conn_int.h (lib/ and unit tests
 * only) includes this file and adds the fields.
 *
 * Threads. Three kinds of thread meet a connection:
 *   - application threads (any number, concurrently): every operation
 *     below unless it says otherwise;
 *   - the connection's loop thread (an I/O thread of rcp__loop_new; for
 *     public handles also the application's own event loop through an
 *     adapter, rcpipe/adapter.h): futures are resolved there, and resolve
 *     callbacks run there. On it rcp__loop_on_thread() returns 1;
 *   - urcu's call_rcu helper thread (frees), which MUST NOT call in here.
 *
 * Rules that hold for every operation:
 *   - A future handed to a send operation is resolved exactly once iff the
 *     operation returns RCP_OK, and never if it returns an error (libuv's
 *     rule). Written-then-lost requests resolve with RCP_ERR_IO, never
 *     written ones with RCP_ERR_NOT_SENT: only the latter are always safe
 *     to resend. Resolve callbacks MUST be short and MUST NOT block: they
 *     run on the loop thread, which serves every connection of that loop.
 *   - The sync form (rcp__conn_command_raw) MUST NOT be called on a loop
 *     thread (it would wait for the loop it stops): it answers
 *     RCP_ERR_INVALID there.
 *   - A caller that may race with rcp_conn_close of the connection MUST
 *     hold it (rcp__conn_hold) around the call; close waits for every hold
 *     to be released before freeing. Holds are cheap (one atomic add).
 *   - Raw bytes are exactly one RESP command (or, for send_group, one
 *     command per entry), formatted by the caller; they are copied before
 *     the call returns.
 *   - No operation here allocates per request on its common path. */
#ifndef RCP_CONNECTION_H
#define RCP_CONNECTION_H

#include <stddef.h>
#include <stdint.h>

#include "rcpipe/conn.h"

typedef struct rcp__loop rcp__loop;
struct rcp_conn;

/* ---- loops ------------------------------------------------------------ */

/* Creates and starts an I/O loop thread (epoll); NULL on failure. Any
 * thread but a loop thread. */
rcp__loop *rcp__loop_new(void);
/* Stops and joins the loop's thread and frees it. Every connection
 * created on it MUST have been closed first. MUST NOT be called on that
 * loop's own thread. NULL: no-op. */
void rcp__loop_free(rcp__loop *l);
/* 1 if the calling thread runs a loop's callbacks (any loop): a resolve
 * callback, an event callback. Use it to refuse blocking work there. */
int rcp__loop_on_thread(void);
/* The loop behind an application's rcp_loop (rcpipe/adapter.h), to create
 * connections on; it stays the application's (never rcp__loop_free it). */
struct rcp_loop;
rcp__loop *rcp__loop_of(struct rcp_loop *l);
/* On the thread that runs application loop l, outside its callbacks (the
 * loop is not running while this thread waits): one pass of it now
 * (requests from other threads, due timers, closes), returning 1. 0 on any
 * other thread and for our own I/O threads, which run by themselves. */
int rcp__loop_pass_here(rcp__loop *l);

/* ---- creating ---------------------------------------------------------- */

enum {
    RCP__CONN_READONLY = 1, /* send READONLY on every (re)connect */
    RCP__CONN_ONCE = 2      /* no reconnect once a ready connection is lost: for state
                             * that must not silently vanish (WATCH) */
};

/* Create a connection on an existing loop without waiting for it to
 * connect (it connects on the loop's next pass). Requests sent before it
 * is ready queue behind the handshake (AUTH, CLIENT SETNAME, READONLY);
 * after a failed first attempt they fail fast with RCP_ERR_NOT_SENT until
 * it reconnects. Strings in o are copied. Any thread but a loop thread.
 * Returns RCP_OK and *out, or RCP_ERR_INVALID (bad options) /
 * RCP_ERR_OOM with *out NULL. Close with rcp_conn_close (the loop stays:
 * it is the caller's). */
int rcp__conn_create(rcp__loop *loop, const rcp_conn_options *o, unsigned flags,
                     struct rcp_conn **out);

/* Node options that a handle keeps for its life and creates connections
 * from (a cluster's): their TLS strings are copied (the caller's may go
 * once the handle is open) and their TLS context is loaded once, shared by
 * every connection created from them. o's tls_* pointers are pointed at
 * the copies. RCP_OK with *kept (NULL when o->tls is 0), or an error
 * (RCP_ERR_INVALID: a file that does not load, ...) with why. Drop it
 * (rcp__conn_options_drop, NULL: no-op) after the handle's last
 * connection is closed. Any thread but a loop thread. */
struct rcp__tls_cfg;
int rcp__conn_options_keep(rcp_conn_options *o, struct rcp__tls_cfg **kept, char *why, size_t len);
void rcp__conn_options_drop(struct rcp__tls_cfg *kept);

/* ---- push connections (pub/sub) ------------------------------------------ */

/* Called on the loop thread with every reply a push connection reads
 * after its handshake (subscription confirmations, messages, unsolicited
 * "sunsubscribe"s, PING answers), in the order read. The reply is valid
 * during the call; rcp_reply_keep takes it. MUST be short and MUST NOT
 * block, like a resolve callback. */
typedef void (*rcp__push_fn)(void *data, rcp_reply *r);

/* A dedicated connection whose replies are not matched to requests but
 * handed to fn (RESP2 SUBSCRIBE answers one confirmation per channel, and
 * messages come unasked). Otherwise it is an ordinary connection: the same
 * handshake (AUTH, CLIENT SETNAME) and the same reconnect with backoff;
 * its owner learns of ready and lost through o->event_cb
 * (RCP_EVENT_CONNECTED / RCP_EVENT_DISCONNECTED) and subscribes again
 * after a reconnect. The lone-caller path and the I/O timeout are off
 * (a subscriber may hear nothing for hours). Contract otherwise as
 * rcp__conn_create. The sync forms and rcp__conn_send_raw/_group MUST NOT
 * be used on it: only rcp__conn_push_send. */
int rcp__conn_create_push(rcp__loop *loop, const rcp_conn_options *o, rcp__push_fn fn,
                          void *data, struct rcp_conn **out);
/* Queue one pre-formatted command on a push connection; its answers come
 * to the push function. Any thread. Errors as rcp__conn_send_raw
 * (RCP_ERR_NOT_SENT while it reconnects, RCP_ERR_QUEUE_FULL, ...). */
int rcp__conn_push_send(struct rcp_conn *c, const char *raw, size_t len);

/* ---- sending (async) --------------------------------------------------- */

/* Queue one pre-formatted command for f. With `asking`, "ASKING" is
 * written immediately before it, adjacent on the wire (its +OK is
 * dropped). Any thread; on a loop thread it never blocks (a full queue is
 * RCP_ERR_QUEUE_FULL there). Errors: RCP_ERR_CLOSED, RCP_ERR_NOT_SENT (the
 * connection is waiting to reconnect), RCP_ERR_QUEUE_FULL,
 * RCP_ERR_TIMEOUT (blocked for room past f's deadline), RCP_ERR_OOM. */
int rcp__conn_send_raw(struct rcp_conn *c, rcp_future *f, const char *raw, size_t len, int asking);
/* Queue n pre-formatted commands in one critical section: adjacent on the
 * wire, nothing of another caller's between them (with `asking`, ASKING
 * first). All or nothing: RCP_OK and every f[i] resolved once, or an error
 * and none called. More than max_inflight commands: RCP_ERR_TOO_LARGE;
 * n == 0: RCP_ERR_INVALID. Otherwise as rcp__conn_send_raw. */
int rcp__conn_send_group(struct rcp_conn *c, size_t n, rcp_future *const *f,
                         const char *const *raw, const size_t *len, int asking);

/* Take f's request back (rcp_conn_cancel's contract, without its check
 * that f was sent on c: f is any future queued here by a send above).
 * Returns an rcp_cancel_result; for UNSENT and WRITTEN, f has been
 * resolved (RCP_ERR_CANCELLED) on the calling thread before it returns.
 * Any thread, a loop thread included; never blocks. A pending command
 * sent with `asking` is cut out together with its ASKING, or counts as
 * written once its ASKING is. MUST NOT be used on a future of
 * rcp__conn_send_group: cutting one command out of a group (a MULTI ...
 * EXEC) would change what the others do. */
int rcp__conn_cancel(struct rcp_conn *c, rcp_future *f);

/* ---- sending (sync) ---------------------------------------------------- */

/* Send and wait for the reply (the lone-caller fast path when not
 * asking and the connection is idle: the caller writes and reads the
 * socket itself). timeout_ms as a future's (0: the connection's
 * request_timeout_ms). Returns the reply, owned by the caller (free with
 * rcp_reply_free); never NULL: failures are error replies. MUST NOT be
 * called on a loop thread (an RCP_ERR_INVALID reply there). */
rcp_reply *rcp__conn_command_raw(struct rcp_conn *c, const char *raw, size_t len, int asking,
                                 int timeout_ms);

/* ---- streaming reads (conn_sink.c, rcpipe/conn.h's rcp_sink) ----------- */

/* RCP_OK if the sink is one the connection can stream to, else
 * RCP_ERR_INVALID (NULL, unknown kind, no fn, fd < 0, NULL buf with
 * cap > 0). Any thread. */
int rcp__sink_check(const rcp_sink *sink);
/* RCP_OK if the source is one a request can stream its last argument
 * from (rcpipe/conn.h, rcp_source), else RCP_ERR_INVALID. */
int rcp__source_check(const rcp_source *src);
/* 1 if a checked source can be pulled again from byte 0 (rcpipe/conn.h,
 * RCP_SOURCE_REPLAYABLE; an fd on a regular file or block device). */
int rcp__source_replayable(const rcp_source *src);
/* A sync call's value of at most this many bytes is read whole on the
 * caller's thread and sent as an ordinary request (the lone-caller path),
 * not streamed by the I/O thread: rcp__source_inline. */
#define RCP__SOURCE_INLINE (64 * 1024)
/* The whole command, its last argument read from src, in a buffer of its
 * own (*out, rcp__free; *outlen bytes). RCP_OK; RCP_ERR_IO with why when
 * the source ends, fails or gives more than asked before src->len bytes
 * (nothing was sent); RCP_ERR_OOM. */
int rcp__source_inline(int argc, const char **argv, const size_t *argvlen, const rcp_source *src,
                       char **out, size_t *outlen, char *why, size_t whylen);
/* As rcp__conn_send_raw, with the request's deadline given as a time
 * (ns on rcp__now_ns's clock, lib/clock.h; 0: none) instead of by
 * f->timeout_ms, which is not read: for a caller that keeps its own
 * deadline across attempts (the cluster's retries), so that it is not
 * turned into milliseconds and back, with a clock read each way, per
 * attempt; and whose reply streams to sink (NULL: an ordinary request).
 * The caller MUST hold c (rcp__conn_hold; the cluster's pinned
 * connection): this takes no hold of its own, being on every cluster
 * request's path. The sink MUST stay valid until f is resolved. A bulk reply
 * resolves f with its length (an integer reply) or RCP_ERR_SINK; any
 * other reply as usual, the sink untouched. */
int rcp__conn_send_raw_sink(struct rcp_conn *c, rcp_future *f, const char *raw, size_t len,
                            int asking, uint64_t deadline, const rcp_sink *sink);
/* rcp__conn_send_raw_sink (no sink; it takes its own hold) of a
 * command's head (its arguments but the last, then "$<len>\r\n":
 * rcp__format_source_write) whose last argument streams from src
 * (conn_source.c). The source MUST stay valid until f
 * is resolved. RCP_ERR_NOT_SENT on f means no byte of it was pulled. */
int rcp__conn_send_raw_source(struct rcp_conn *c, rcp_future *f, const char *raw, size_t len,
                              int asking, uint64_t deadline, const rcp_source *src);
/* rcp__conn_command_raw of such a head and source (as above). */
rcp_reply *rcp__conn_command_raw_source(struct rcp_conn *c, const char *raw, size_t len,
                                        int asking, int timeout_ms, const rcp_source *src);
/* rcp__conn_command_raw whose reply streams to sink (as above). Two
 * values of asking (no sink, no ASKING then) are modes of a cluster's
 * sync call: RCP__CONN_LONE sends only if the connection is free for the
 * caller's own write and read (the lone-caller path): the reply, or NULL
 * and nothing sent if someone is on it. RCP__CONN_SPILL does the same,
 * but returns NULL only if one request at most is outstanding, a sync
 * caller's (another thread's: an async request of the caller's own must
 * not be overtaken), and the connection's recent writes carried under
 * 1.25 commands on average (the caller had better use another idle
 * connection to the server than wait here); otherwise it queues as usual,
 * joining the batch. */
rcp_reply *rcp__conn_command_raw_sink(struct rcp_conn *c, const char *raw, size_t len, int asking,
                                      int timeout_ms, const rcp_sink *sink);
#define RCP__CONN_LONE (-1)
#define RCP__CONN_SPILL (-2)
/* rcp_conn_options.spare_conns, at most (conn_spare.c). */
#define RCP__SPARE_MAX 8

/* ---- state (any thread; a snapshot, stale as soon as it returns) ------- */

/* 1 if connected and the handshake is done. Lock-free (one atomic load):
 * fit for the replica choice on every request. */
int rcp__conn_healthy(struct rcp_conn *c);
/* "addr: why" of the connection's last failure (a refused connect, a lost
 * connection), or "addr: no failure recorded"; always NUL-terminated,
 * truncated to len. */
void rcp__conn_last_error(struct rcp_conn *c, char *buf, size_t len);
/* Requests queued or in flight (for draining before a close). */
uint64_t rcp__conn_outstanding(struct rcp_conn *c);

/* ---- lifetime ---------------------------------------------------------- */

/* Count a call in progress on c: rcp_conn_close(c) waits until every hold
 * is released before freeing c. Take it where c is known to be alive
 * (e.g. inside the RCU read section that found c), release it after the
 * last use. Any thread, lock-free; MUST be paired. Holding across a wait
 * for c's own close deadlocks. */
void rcp__conn_hold(struct rcp_conn *c);
void rcp__conn_release(struct rcp_conn *c);

#endif
