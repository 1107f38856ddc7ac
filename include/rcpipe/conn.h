/* rcpipe/conn.h: a pipelined connection to one Redis node.
 *
 * One rcp_conn is shared by any number of threads. Requests from all of them
 * are gathered into one pending batch and written together (implicit
 * pipelining); replies resolve the callers' futures in order. */
#ifndef RCPIPE_CONN_H
#define RCPIPE_CONN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rcpipe/common.h"
#include "rcpipe/reply.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rcp_conn rcp_conn;
typedef struct rcp_future rcp_future;

/* Called exactly once per accepted request, on an I/O thread (or on the
 * calling thread for errors found before the request was queued: never, see
 * rcp_conn_send_argv). `reply` is valid only during the call; keep it with
 * rcp_reply_keep or copy what you need. The callback must be short and must
 * not block: it runs on the I/O loop that serves every other caller. It may
 * send new requests (with queue_policy RCP_QUEUE_BLOCK they fail with
 * RCP_ERR_QUEUE_FULL instead of blocking the loop) but must not make a sync
 * call. */
typedef void (*rcp_resolve_fn)(rcp_future *f, rcp_reply *reply);

/* A future: embed it in your own struct, set `resolve` (and `data` if you
 * like), pass it to a send function. The library allocates nothing on your
 * behalf. The memory must stay valid until `resolve` has been called. */
struct rcp_future {
    rcp_resolve_fn resolve;
    void *data;       /* yours */
    int timeout_ms;   /* 0: the connection's request_timeout_ms; <0: no deadline.
                       * A request that timed out keeps its place in flight
                       * (counted by max_inflight) until its late reply is
                       * read and dropped, or the connection is dropped. */
    int rcp__pad;     /* internal: do not touch (a cluster cancel's state) */
    void *rcp__reserved[2]; /* internal: [0] a cluster request, [1] the handle sent on */
};

typedef enum rcp_queue_policy {
    RCP_QUEUE_BLOCK = 0, /* a sender waits for room (up to its deadline) */
    RCP_QUEUE_FAIL = 1   /* a sender gets RCP_ERR_QUEUE_FULL at once */
} rcp_queue_policy;

/* Options for rcp_conn_open. Call rcp_conn_options_init first: it sets every
 * default; new fields are only ever added at the end. Strings are copied. */
typedef struct rcp_conn_options {
    const char *host;            /* default "127.0.0.1" */
    int port;                    /* default 6379 */
    const char *username;        /* ACL user, NULL for "AUTH password" */
    const char *password;        /* NULL: no AUTH */
    const char *client_name;     /* CLIENT SETNAME on every (re)connect; NULL: none */
    int connect_timeout_ms;      /* TCP connect + handshake; default 2000 */
    int request_timeout_ms;      /* per-request deadline; default 5000; <= 0: none */
    int io_timeout_ms;           /* no byte read while requests wait: reconnect; default 10000; <= 0: none */
    unsigned io_threads;         /* I/O loop threads; default 1 */
    unsigned batch_delay_us;     /* pause after a batch's first request; default 0 */
    unsigned max_batch_commands; /* commands per write; default 1000 */
    size_t max_batch_bytes;      /* bytes per write; default 1 MiB */
    unsigned max_inflight;       /* queued + written requests awaiting replies; default 4096 */
    size_t max_pending_bytes;    /* unwritten bytes queued; default 64 MiB (one larger request is let through alone) */
    size_t max_request_bytes;    /* one formatted request; default 512 MiB */
    int queue_policy;            /* rcp_queue_policy; default RCP_QUEUE_BLOCK */
    int reconnect_min_ms;        /* first reconnect backoff; default 10 */
    int reconnect_max_ms;        /* backoff ceiling; default 2000 */
    int keepalive_s;             /* TCP keepalive idle seconds; default 60; 0: off */
    int fast_path;               /* callers do their own I/O: a lone sync one writes and
                                  * reads, and writes and reads for the sync callers
                                  * queued behind it (leader/follower); an async send on
                                  * an idle connection writes; default 1 */
    rcp_event_fn event_cb;       /* NULL: no events */
    void *event_data;
    struct rcp_loop *loop;       /* NULL (default): I/O threads of its own (io_threads); else
                                  * the application's loop (rcpipe/adapter.h): callbacks run
                                  * on its thread, rcp_conn_open does not wait */
    size_t max_reply_bytes;      /* one reply's bytes the client holds while reading it;
                                  * default 512 MiB (the server's proto-max-bulk-len);
                                  * past it the connection is dropped and the request
                                  * fails with RCP_ERR_TOO_LARGE */
    /* TLS (docs/tls.md). In a build without TLS (-Dtls=disabled) setting
     * any of these gives RCP_ERR_UNSUPPORTED at open. Setting a tls_*
     * option with tls 0 is refused (RCP_ERR_INVALID): a forgotten tls = 1
     * must not silently mean plain text. On a cluster handle's node
     * options they apply to every connection of the handle. */
    int tls;                      /* 1: every connection speaks TLS; default 0 */
    const char *tls_ca_file;      /* PEM file of trusted CAs; with tls_ca_dir NULL too:
                                   * the system's default store */
    const char *tls_ca_dir;       /* directory of hashed CA certificates (c_rehash) */
    const char *tls_cert_file;    /* client certificate chain (PEM), for a server with
                                   * tls-auth-clients; needs tls_key_file */
    const char *tls_key_file;     /* its private key (PEM, unencrypted) */
    const char *tls_server_name;  /* name for SNI and for verifying the server's certificate;
                                   * NULL: the host being connected (an IP address is
                                   * then checked against the certificate's IP entries) */
    int tls_insecure_skip_verify; /* 1: DO NOT verify the server's certificate or name.
                                   * Anyone on the path can then read and change the
                                   * traffic: for tests only. Default 0 */
    int tls_min_version;          /* 0: default (TLS 1.2); 12: TLS 1.2; 13: TLS 1.3 */
    const char *tls_ciphers;      /* TLS 1.2 cipher list (OpenSSL syntax); NULL: OpenSSL's */
    const char *tls_ciphersuites; /* TLS 1.3 ciphersuites (OpenSSL syntax); NULL: OpenSSL's */
    int cork;                     /* adaptive corking (docs/tuning.md): 1: while a write is
                                   * in flight and no byte of its replies has come back,
                                   * requests sent from other threads wait to ride in the
                                   * next write (sent when the first reply byte comes, or
                                   * at max_batch_commands queued) instead of waking the
                                   * loop; fatter writes, fewer wakes. 0: off. Default 0 */
    int spare_conns;              /* sync callers (docs/api.md, "Spare connections"): up to
                                   * this many more connections to the same server, opened
                                   * when first needed. A sync call that finds the connection
                                   * busy with one other sync caller's request takes an idle
                                   * one for its own write and read instead of queueing and
                                   * sleeping until it is woken; with 32 or more calls inside
                                   * the handle, sync callers are dealt over it and the
                                   * spares, 16 each (lanes; not once the handle has sent an
                                   * async request). Never used once the handle
                                   * has carried a CLIENT command (SETNAME, TRACKING ...:
                                   * state the spares would not share). 0..8; default 3;
                                   * 0: off. Not used by a cluster handle's connections
                                   * (its bulk_pool plays this part) */
} rcp_conn_options;

RCP_API void rcp_conn_options_init(rcp_conn_options *o);

/* Opens a connection and waits (up to connect_timeout_ms) until it is ready:
 * connected, AUTH and CLIENT SETNAME done. On success *out is set and
 * RCP_OK returned. On failure returns the code, leaves *out NULL and, if
 * errbuf is not NULL, writes a message naming the address and the cause.
 * After a later connection loss the handle reconnects by itself with
 * exponential backoff and jitter. */
RCP_API int rcp_conn_open(const rcp_conn_options *o, rcp_conn **out, char *errbuf, size_t errbuf_len);

/* Closes the handle: every outstanding future is resolved (RCP_ERR_CLOSED),
 * I/O threads are joined, memory is freed. Calls already in progress on
 * other threads finish; no call may start once close has begun. NULL is
 * ignored. Must not be called from a callback. */
RCP_API void rcp_conn_close(rcp_conn *c);

/* Async send. argv[i] is argvlen[i] bytes (binary-safe); argvlen NULL means
 * every argv[i] is a C string. The request is copied before the call
 * returns. Returns RCP_OK: f->resolve will be called exactly once. Returns
 * an error code: f->resolve is never called (RCP_ERR_INVALID for NULL or
 * argc < 1, RCP_ERR_BLOCKING_COMMAND, RCP_ERR_UNSUPPORTED, RCP_ERR_TOO_LARGE,
 * RCP_ERR_QUEUE_FULL, RCP_ERR_NOT_SENT while reconnecting, RCP_ERR_CLOSED,
 * RCP_ERR_TIMEOUT if blocked for room past the deadline, RCP_ERR_OOM). */
RCP_API int rcp_conn_send_argv(rcp_conn *c, rcp_future *f, int argc, const char **argv,
                               const size_t *argvlen);

/* Async send with a hiredis-style format: %s a C string, %b a binary
 * (pointer, size_t) pair, %% a percent; other printf conversions format one
 * argument each. Same contract as rcp_conn_send_argv. */
RCP_API int rcp_conn_send(rcp_conn *c, rcp_future *f, const char *fmt, ...);
RCP_API int rcp_conn_sendv(rcp_conn *c, rcp_future *f, const char *fmt, va_list ap);

/* What a cancel did (rcp_conn_cancel, rcp_cluster_cancel). */
typedef enum rcp_cancel_result {
    RCP_CANCEL_TOO_LATE = 0, /* nothing: the future was resolved already, or is being
                              * resolved on an I/O thread now (its reply is being read, a
                              * streamed value is reaching its sink); its callback runs
                              * (or ran) with whatever answer it got */
    RCP_CANCEL_UNSENT = 1,   /* taken out of the queue, not one byte written: the command
                              * never runs. Resolved with RCP_ERR_CANCELLED */
    RCP_CANCEL_WRITTEN = 2,  /* already handed to the socket (some or all of it written):
                              * it cannot be unsent and MAY RUN. Resolved with
                              * RCP_ERR_CANCELLED all the same; its late reply is read and
                              * dropped, as a timed-out request's */
    RCP_CANCEL_INVALID = -1  /* NULL argument, or a future not sent on this handle */
} rcp_cancel_result;

/* Cancel a request sent with rcp_conn_send* on c. For UNSENT and WRITTEN
 * the future's callback has run, on the calling thread, before this
 * returns (exactly once: any later reply is dropped); for TOO_LATE it
 * runs, or ran, on the I/O thread, with the real answer (possibly at the
 * same moment). Any thread; also from a resolve callback on the I/O thread
 * (it takes the connection's mutex only briefly and never waits for the
 * loop). f must stay valid until the call returns. Not for sync calls
 * (they block: nothing to cancel). Only the future's latest send on c is
 * known: a future resolved and sent again elsewhere is INVALID here. */
RCP_API rcp_cancel_result rcp_conn_cancel(rcp_conn *c, rcp_future *f);

/* Sync calls: send and wait. Always return a reply the caller frees with
 * rcp_reply_free, never NULL; client errors come back as error replies
 * with their code in reply->err. */
RCP_API rcp_reply *rcp_conn_command_argv(rcp_conn *c, int argc, const char **argv,
                                         const size_t *argvlen);
RCP_API rcp_reply *rcp_conn_command(rcp_conn *c, const char *fmt, ...);
RCP_API rcp_reply *rcp_conn_commandv(rcp_conn *c, const char *fmt, va_list ap);

/* ---- streaming reads (docs/large-values.md) ----------------------------
 *
 * A request can carry a sink: the bytes of its bulk-string reply (GET,
 * GETRANGE, HGET, LINDEX...) go to the sink in chunks as they are read
 * from the socket, and are never assembled in memory: a value of any size
 * costs the library one read buffer (64 KiB). The future then resolves
 * with an RCP_REPLY_INTEGER reply whose integer is the value's length in
 * bytes (0 for an empty string). Everything else arrives as an ordinary
 * reply and the sink is not touched: nil (a missing key), error replies
 * (WRONGTYPE; in a cluster MOVED/ASK/TRYAGAIN are followed first, so no
 * byte of a redirected attempt reaches the sink), and replies of other
 * types (an integer, an array: MGET and LRANGE are not streamed, their
 * elements arrive assembled as usual).
 *
 * A sink that fails (a callback that returns nonzero, a write to the fd
 * that fails, a value larger than the buffer) gets nothing more: the rest
 * of the value is read and discarded, the connection stays in step for
 * the requests behind it, and the future resolves with an RCP_ERR_SINK
 * error reply saying what failed and at which offset. A request that
 * times out while its value streams stops reaching the sink the same way
 * (on the connection's I/O thread; a value a sync caller is reading on
 * its own thread completes first). A connection lost mid-value resolves
 * with RCP_ERR_IO: the sink has then received a prefix of the value.
 *
 * The sink is called on the thread that reads the socket: an I/O thread,
 * or a sync caller's own thread (the lone-caller path). Like a resolve
 * callback it must be short and must not block for long: the connection's
 * other replies wait behind it. */
typedef enum rcp_sink_kind {
    RCP_SINK_CALLBACK = 1, /* fn(ud, data, len, offset, total) per chunk, in order: data
                            * valid during the call only, len > 0 (an empty value makes no
                            * call), offset the chunk's place in the value, total the
                            * value's length; nonzero fails the sink */
    RCP_SINK_FD = 2,       /* the bytes are written to fd as they arrive (a blocking fd: a
                            * write that would block fails the sink). A socket is written
                            * with send(MSG_NOSIGNAL); anything else with write(), so a
                            * pipe whose reader has gone raises SIGPIPE as write(2) does:
                            * ignore SIGPIPE in the process and the sink fails with EPIPE
                            * instead. The fd is not closed */
    RCP_SINK_BUFFER = 3    /* read straight into buf (no copy after the kernel's); a value
                            * longer than cap fails the sink with nothing written to buf.
                            * On RCP_ERR_SINK or RCP_ERR_IO buf's contents are undefined */
} rcp_sink_kind;

typedef int (*rcp_sink_fn)(void *ud, const char *data, size_t len, uint64_t offset,
                           uint64_t total);

/* What the caller fills in for a streamed read. The library copies
 * nothing: the sink (and buf) must stay valid until the future is
 * resolved (async) or the call returns (sync). One sink serves one
 * request at a time. */
typedef struct rcp_sink {
    int kind;         /* rcp_sink_kind */
    rcp_sink_fn fn;   /* RCP_SINK_CALLBACK */
    void *ud;         /* RCP_SINK_CALLBACK: fn's first argument */
    int fd;           /* RCP_SINK_FD */
    char *buf;        /* RCP_SINK_BUFFER */
    size_t cap;       /* RCP_SINK_BUFFER: bytes of buf */
} rcp_sink;

/* rcp_conn_send_argv with a sink for its reply (see above). Errors as
 * rcp_conn_send_argv, and RCP_ERR_INVALID for a NULL or malformed sink
 * (unknown kind, no fn, fd < 0, NULL buf with cap > 0). */
RCP_API int rcp_conn_send_argv_sink(rcp_conn *c, rcp_future *f, int argc, const char **argv,
                                    const size_t *argvlen, const rcp_sink *sink);
/* rcp_conn_command_argv with a sink for its reply: the value's length as
 * an RCP_REPLY_INTEGER reply, or the reply as usual (see above). */
RCP_API rcp_reply *rcp_conn_command_argv_sink(rcp_conn *c, int argc, const char **argv,
                                              const size_t *argvlen, const rcp_sink *sink);

/* Streaming writes (docs/large-values.md): the LAST argument of a command
 * comes from a source of known length instead of memory, pulled in chunks
 * (256 KiB) as the socket accepts them and never held whole: a value of
 * any size costs the connection one chunk buffer. The command's other
 * arguments are formatted as usual; the source is argument argc + 1 (SET
 * key <source>, APPEND key <source>, HSET h field <source>...).
 *
 * Async sends' sources are pulled on the connection's I/O thread. A sync
 * call (rcp_conn_command_argv_source, rcp_cluster_command_argv_source)
 * that finds its connection idle uploads on its own thread instead (the
 * lone-caller path: callback called there, waiting in poll(2) for room,
 * bounded by the request's deadline and io_timeout_ms; counted in
 * caller_uploads); on a busy connection it queues and waits for the I/O
 * thread. A small value goes another way: a sync call (rcp_conn_command_argv_source,
 * rcp_cluster_command_argv_source) whose len is at most 64 KiB reads it
 * whole first, on the caller's thread, and sends it as an ordinary
 * request (the lone-caller path, one write); a source that ends early
 * then fails the call with RCP_ERR_IO before anything is sent, and the
 * connection is kept. Requests queued behind a source request wait for its upload (the
 * pipeline is ordered): a large upload holds up the small requests
 * behind it on that connection.
 *
 * A source that ends before len bytes (a callback returning 0 or < 0, an
 * fd at end of file or failing) cannot be completed without storing a
 * truncated value: the connection is dropped mid-value (the server
 * discards the partial command), the request resolves with RCP_ERR_IO
 * saying at which byte the source ended, and the requests behind it fail
 * as for any lost connection (RCP_ERR_NOT_SENT if never written). A
 * request whose deadline passes while its source is being written
 * resolves with RCP_ERR_TIMEOUT and the connection is dropped the same
 * way (the upload cannot stop in step); one whose deadline passes before
 * its upload starts is taken out of the queue, never sent. A cancel
 * (rcp_conn_cancel) before the upload starts takes it back
 * (RCP_CANCEL_UNSENT); once it started, RCP_CANCEL_TOO_LATE. After the
 * request resolves the source is not touched again. */
typedef enum rcp_source_kind {
    RCP_SOURCE_CALLBACK = 1, /* fn(ud, buf, cap, offset) fills buf with up to cap bytes of
                              * the value from offset and returns how many (> 0); 0 or < 0
                              * before len bytes fails the request (see above). Offsets
                              * come in order, from 0 (from 0 again for a second attempt
                              * of a RCP_SOURCE_REPLAYABLE source) */
    RCP_SOURCE_FD = 2        /* len bytes of fd from offset, read with pread() (read()
                              * for a pipe or socket, which must then be at the value's
                              * start: offset is ignored); a regular file goes with
                              * sendfile() in plain text. The fd is not closed, and its
                              * file position is not moved */
} rcp_source_kind;

typedef ssize_t (*rcp_source_fn)(void *ud, char *buf, size_t cap, uint64_t offset);

/* What the caller fills in for a streamed write. The library copies
 * nothing: the source must stay valid until the future is resolved
 * (async) or the call returns (sync). One source serves one request at a
 * time. */
typedef struct rcp_source {
    int kind;         /* rcp_source_kind */
    size_t len;       /* the value's length in bytes, announced to the server first */
    rcp_source_fn fn; /* RCP_SOURCE_CALLBACK */
    void *ud;         /* RCP_SOURCE_CALLBACK: fn's first argument */
    int fd;           /* RCP_SOURCE_FD */
    off_t offset;     /* RCP_SOURCE_FD: where the value starts in fd */
    unsigned flags;   /* RCP_SOURCE_REPLAYABLE, or 0 */
} rcp_source;

/* rcp_source.flags. RCP_SOURCE_REPLAYABLE: the value can be pulled again
 * from byte 0 (fn is called with the offsets again, from 0, and must give
 * the same bytes). The cluster handle then follows a MOVED or ASK answer,
 * and retries TRYAGAIN and the like, for a streamed write as for any
 * other request, uploading the value again to the node that owns the
 * slot; without it, those answers (which come after the whole value) are
 * handed to the caller. An RCP_SOURCE_FD on a file pread() can read (a
 * regular file or a block device) is replayable whatever the flag says;
 * one on a pipe or socket never is. */
enum { RCP_SOURCE_REPLAYABLE = 1 };

/* rcp_conn_send_argv with one more argument, the last, from a source (see
 * above). Errors as rcp_conn_send_argv, and RCP_ERR_INVALID for a NULL or
 * malformed source (unknown kind, no fn, fd < 0, offset < 0),
 * RCP_ERR_TOO_LARGE for a command over max_request_bytes, value
 * included. */
RCP_API int rcp_conn_send_argv_source(rcp_conn *c, rcp_future *f, int argc, const char **argv,
                                      const size_t *argvlen, const rcp_source *src);
/* rcp_conn_command_argv with one more argument, the last, from a source
 * (see above). */
RCP_API rcp_reply *rcp_conn_command_argv_source(rcp_conn *c, int argc, const char **argv,
                                                const size_t *argvlen, const rcp_source *src);

/* Counters since open, read without stopping traffic (each field is exact,
 * the set is not a snapshot). */
typedef struct rcp_conn_stats {
    uint64_t requests;       /* accepted by a send */
    uint64_t replies;        /* replies read from the server */
    uint64_t batches;        /* batches written (one or more syscalls each) */
    uint64_t commands_written;
    uint64_t write_calls;    /* send() syscalls */
    uint64_t read_calls;     /* recv() syscalls that returned data */
    uint64_t bytes_out;
    uint64_t bytes_in;
    uint64_t timeouts;       /* requests resolved with RCP_ERR_TIMEOUT */
    uint64_t late_replies;   /* replies discarded because their request had timed out */
    uint64_t reconnects;     /* successful connects after the first */
    uint64_t disconnects;
    uint64_t fast_path;      /* sync requests whose caller read its own reply (a lone
                              * caller, or one handed the lead) */
    uint64_t futex_wakes;    /* sleeping sync callers woken */
    uint64_t loop_wakes;     /* eventfd writes to wake an I/O loop */
    uint64_t caller_writes;  /* flushes written by the sending thread itself, on an idle
                              * connection, instead of waking the loop */
    uint64_t leads;          /* times a waiting sync caller was handed the socket to read
                              * the replies of the callers before it (leader/follower) */
    uint64_t caller_replies; /* replies read by a sync caller on the socket (a lone one, or
                              * one handed the lead) instead of the loop */
    uint64_t loop_leads;     /* of `leads`, those handed by the loop: it had the socket with
                              * only sync callers' requests in flight, and gave it to one
                              * of them instead of reading for them */
    uint64_t corked;         /* sends that waited for the first reply byte of the write in
                              * flight instead of waking the loop (option cork) */
    uint64_t sendfile_bytes; /* of bytes_out, value bytes an fd source on a file sent with
                              * sendfile(), not copied through the library (plain text) */
    uint64_t caller_uploads; /* sync requests with a source whose value the caller's own
                              * thread wrote, on an idle connection, instead of the loop */
    uint64_t spare_requests; /* of `requests`, sync requests sent on a spare connection
                              * (option spare_conns); the counters above include the
                              * spares' */
} rcp_conn_stats;

RCP_API int rcp_conn_get_stats(rcp_conn *c, rcp_conn_stats *out);

/* Adds every counter of `add` to `sum` (totals over connections or nodes). */
RCP_API void rcp_conn_stats_add(rcp_conn_stats *sum, const rcp_conn_stats *add);

#ifdef __cplusplus
}
#endif

#endif
