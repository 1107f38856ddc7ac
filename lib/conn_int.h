/* lib/conn_int.h: the connection's internals, shared by conn.c (the
 * request path) and unit tests. The loop sees only the embedded
 * rcp__loop_src.
 *
 * Requests live in one ring of slots, in order. Four monotonically growing
 * counters cut it into regions:
 *
 *   head <= wr <= taken <= tail
 *   [head, wr)    written, awaiting replies (failure => RCP_ERR_IO)
 *   [wr, taken)   taken by the writer, bytes in wbuf, not fully written
 *   [taken, tail) pending: bytes in the pending buffer, not yet taken
 *   [wr, tail)    on failure => RCP_ERR_NOT_SENT (a partly written command is
 *                 never executed by the server)
 *
 * A slot whose future is NULL has been resolved early (timeout); its reply
 * is read and discarded when it comes. */
#ifndef RCP_CONN_INT_H
#define RCP_CONN_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <hiredis/read.h>

#include "loop.h"
#include "rcpipe/conn.h"

enum {
    RCP__ST_DISCONNECTED = 0, /* waiting for the reconnect timer */
    RCP__ST_CONNECTING,       /* TCP connect in progress */
    RCP__ST_HANDSHAKE,        /* AUTH / SETNAME written, replies awaited */
    RCP__ST_READY,
    RCP__ST_CLOSED
};

typedef struct rcp__slot {
    rcp_future *f;
    uint64_t deadline; /* ns, 0: none */
    size_t len;        /* bytes of this request still to write */
} rcp__slot;

typedef struct rcp__hs_future {
    rcp_future f;
    struct rcp_conn *c;
} rcp__hs_future;

struct rcp_conn {
    /* Set at open, read-only afterwards. */
    rcp_conn_options opt; /* strings point at copies below */
    char *host, *username, *password, *client_name;
    char addr[300];       /* "host:port" for messages */
    rcp__loop *loop;
    rcp__loop **owned_loops; /* loops this handle created (public open) */
    unsigned nowned;
    uint64_t cap;         /* ring size, a power of two >= max_inflight */
    uint64_t mask;

    pthread_mutex_t mu;   /* guards everything below up to "loop-owned" */
    pthread_cond_t space_cv;
    pthread_cond_t state_cv;
    int space_waiters;
    rcp__slot *ring;
    uint64_t head, wr, taken, tail;
    char *pend;
    size_t pend_len, pend_off, pend_cap;
    int state;
    int fd;
    int fast_active;      /* a lone caller owns the socket's I/O */
    uint64_t fast_idx;    /* its slot: the loop never expires it */
    int loop_io;          /* the loop is inside process: no fast path */
    int wake_pending;     /* the loop has been asked to flush the batch */
    int need_close;       /* the fast path hands a failure to the loop */
    int need_read;        /* the fast path hands the reader role back */
    int close_code;
    char close_msg[512];
    int closing;
    int closed;           /* the loop finished failing everything */
    int open_result;      /* -1 while the first connect is pending */
    char open_msg[600];
    char last_err[600];   /* "addr: cause" of the last failure, "" if none */
    int ever_connected;
    unsigned attempts;    /* connect attempts started */
    uint64_t hs_end;      /* ring counter ending the handshake slots */
    int hs_failed;
    char hs_msg[300];
    uint64_t batch_opened_ns;
    uint64_t min_deadline;
    atomic_uint active_calls;

    /* Loop-owned (or fast-path-owned while fast_active). */
    rcp__loop_src src;    /* this connection as a source of its loop */
    int armed;            /* the loop is woken on readable/writable, not only hang-ups */
    char *wbuf;
    size_t wlen, woff, wcap, wslot_off;
    redisReader *reader;
    char *rbuf;
    size_t rbuf_cap;
    rcp_future **scratch; /* cap entries: futures resolved outside the lock */
    uint64_t last_read_ns;
    uint64_t connect_deadline;
    uint64_t reconnect_at;
    unsigned backoff_ms;
    uint64_t rng;
    rcp__hs_future hs[3]; /* AUTH, CLIENT SETNAME, READONLY */
    int readonly;         /* a replica connection: READONLY on every connect */
    int once;             /* RCP__CONN_ONCE: closed for good when the first session ends */
    _Atomic uint64_t timer_at;

    struct {
        _Atomic uint64_t requests, replies, batches, commands_written, write_calls,
            read_calls, bytes_out, bytes_in, timeouts, late_replies, reconnects,
            disconnects, fast_path, futex_wakes, loop_wakes;
    } st;
};

/* Internal API for the cluster layer. */
enum {
    RCP__CONN_READONLY = 1, /* send READONLY on every (re)connect */
    RCP__CONN_ONCE = 2      /* no reconnect once a ready connection is lost: for state
                             * that must not silently vanish (WATCH) */
};

/* Create a connection on an existing loop without waiting for it to
 * connect (it connects on the loop's next pass). */
int rcp__conn_create(rcp__loop *loop, const rcp_conn_options *o, unsigned flags,
                     struct rcp_conn **out);
/* Queue pre-formatted bytes (one command); with `asking`, "ASKING" is
 * written immediately before it, adjacent on the wire. Contract as
 * rcp_conn_send_argv. */
int rcp__conn_send_raw(struct rcp_conn *c, rcp_future *f, const char *raw, size_t len, int asking);
/* Queue n pre-formatted commands in one critical section: adjacent on the
 * wire, nothing of another caller's between them (with `asking`, ASKING
 * first). All or nothing: RCP_OK and every f[i] resolved once, or an error
 * and none called. More than max_inflight commands: RCP_ERR_TOO_LARGE. */
int rcp__conn_send_group(struct rcp_conn *c, size_t n, rcp_future *const *f,
                         const char *const *raw, const size_t *len, int asking);
/* The sync form (lone-caller fast path when not asking); timeout_ms as a
 * future's. Never NULL. */
rcp_reply *rcp__conn_command_raw(struct rcp_conn *c, const char *raw, size_t len, int asking,
                                 int timeout_ms);
/* The sync form only if the lone-caller path is free (connected, nothing
 * queued or in flight): the reply, or NULL and nothing was sent. */
rcp_reply *rcp__conn_command_fast_only(struct rcp_conn *c, const char *raw, size_t len,
                                       int timeout_ms);
/* 1 if exactly one request is outstanding and a lone caller is doing its
 * I/O (the connection is busy, but not with a batch the loop is driving). */
int rcp__conn_lone_busy(struct rcp_conn *c);
int rcp__conn_healthy(struct rcp_conn *c);        /* connected and ready */
/* "addr: why" of the connection's last failure (a refused connect, a lost
 * connection), or "addr: no failure recorded". */
void rcp__conn_last_error(struct rcp_conn *c, char *buf, size_t len);
uint64_t rcp__conn_outstanding(struct rcp_conn *c); /* requests queued or in flight */

#endif
