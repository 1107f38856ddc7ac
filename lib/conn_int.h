/* lib/conn_int.h: the connection's internals, shared by the files of
 * lib/ that make up a connection (one per mechanism, as libuv's src/unix/)
 * and unit tests; never by cluster/, which sees connection.h only.
 *
 *   conn.c          open, close, options, stats; the public send/command API
 *   conn_connect.c  socket connect, handshake, reconnect backoff, failure
 *   conn_io.c       the loop's side: flush (write the pending requests;
 *                   the pending buffer's compaction and growth), read,
 *                   dispatch replies, timers
 *   conn_fast.c     sync calls: the caller's own future, and the lone-caller
 *                   fast path (the caller does its own write and read)
 *   conn_sink.c     streaming reads: a request's bulk-string reply goes to
 *                   its sink (rcp_sink) in chunks as it is read, never
 *                   assembled; hooked into conn_recv_feed and conn_get_reply
 *                   below, so the loop and the fast path stream alike
 *   conn_source.c   streaming writes: a request's last argument pulled from its
 *                   source (rcp_source) in chunks as the socket accepts them,
 *                   by the loop's writer (do_write), or by a lone sync
 *                   caller on an idle connection (conn_fast.c)
 *   tls.c           TLS (tls.h): with c->tls set, the write and read below
 *                   go through OpenSSL, for the loop and the fast path alike
 *
 * Write and read go through conn_write_some and conn_recv_feed below, on
 * the loop and on the fast path alike; both are inline so that neither
 * path pays a call for sharing them.
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
 * A slot whose future is NULL has been resolved early (timeout, or a
 * cancel after it was taken); its reply is read and discarded when it
 * comes. A cancel of a pending request removes its slot and its bytes
 * instead (conn_cancel.c). */
#ifndef RCP_CONN_INT_H
#define RCP_CONN_INT_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <hiredis/read.h>

#include "clock.h"
#include "connection.h"
#include "lock.h"
#include "reply.h"
#include "loop.h"
#include "rcpipe/conn.h"
#include "tls.h"

enum {
    RCP__ST_DISCONNECTED = 0, /* waiting for the reconnect timer */
    RCP__ST_CONNECTING,       /* TCP connect in progress */
    RCP__ST_HANDSHAKE,        /* AUTH / SETNAME written, replies awaited */
    RCP__ST_READY,
    RCP__ST_CLOSED
};

/* rcp__slot.flags: what a cancel (conn_cancel.c) must know to cut a
 * pending request out without desynchronising the connection. */
enum {
    RCP__SLOT_PARTIAL = 1, /* its first bytes were written (the fast path handed the rest
                            * over as pending): the server has them */
    RCP__SLOT_GLUED = 2,   /* goes with the slot before it (the command after its ASKING):
                            * cut out both, or neither */
    RCP__SLOT_ASKS_SOURCE = 4 /* an ASKING whose glued command is a source request: taken
                               * by the loop with it in one flush, or not at all */
};

typedef struct rcp__slot {
    rcp_future *f;
    uint64_t deadline; /* ns, 0: none */
    size_t len;        /* bytes of this request still to write */
    const rcp_sink *sink; /* a bulk reply streams there (conn_sink.c); NULL: none. Cleared
                           * when the reply is taken (counted by rcp_conn.sinks) */
    const rcp_source *src; /* the request's last argument streams from here after its
                            * len bytes of head (conn_source.c); NULL: none */
    unsigned flags;    /* RCP__SLOT_* */
} rcp__slot;

/* The streamed write in progress (conn_source.c). A source slot is always
 * the last of the flush that takes it (only the loop takes one; a lone
 * sync caller claims its own, try_fast), and is counted written
 * (moves past wr) only once its value and CRLF are out. `on` and `idx`
 * change under the mutex (a cancel and expire() read them); the rest is
 * the uploading thread's: the loop's, or the caller's while it has the
 * socket (fast_active). */
typedef struct rcp__source_state {
    int on;               /* a source slot is taken: its value is being written */
    uint64_t idx;         /* that slot */
    const rcp_source *src;
    uint64_t off;         /* bytes pulled from the source so far */
    int last;             /* the chunk in buf ends the value (its CRLF appended) */
    char *buf;            /* the chunk being written (allocated once, kept) */
    size_t blen, boff;
    int sendfile;         /* -1: not decided yet; 1: sendfile (an fd on a file, plain
                           * text); 0: chunks through buf */
    char why[256];        /* how the source failed, for its request's RCP_ERR_IO */
} rcp__source_state;

/* The streaming read in progress (conn_sink.c), owned like the reader: by
 * whoever owns the socket's I/O. */
typedef struct rcp__sink_state {
    int on;               /* bytes read go to the value, not to the reader */
    int phase;            /* CONN_SK_*: idle, in the value, its CRLF, done (reply due) */
    int fail;             /* 0, or why nothing more reaches the sink (RCP_ERR_SINK,
                           * RCP_ERR_TIMEOUT: its future was resolved already) */
    int fd_write;         /* an fd sink that is no socket: write(), not send() */
    uint64_t idx;         /* the slot whose reply it is */
    const rcp_sink *sink;
    uint64_t total, off;  /* the value's announced length, bytes read of it */
    unsigned crlf;        /* bytes of the CRLF after the value seen */
    char why[512];        /* RCP_ERR_SINK's message */
} rcp__sink_state;

enum { CONN_SK_IDLE = 0, CONN_SK_DATA, CONN_SK_CRLF, CONN_SK_DONE };

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
    rcp__push_fn push_fn; /* a push connection (conn_push.c): every reply after the
                           * handshake goes here; NULL: replies match the ring */
    void *push_data;
    unsigned nowned;
    int spare_ok;         /* a public handle with spare_conns > 0 (conn_spare.c) */
    uint64_t cap;         /* ring size, a power of two >= max_inflight */
    uint64_t mask;

    rcp__mutex mu;        /* guards everything below up to "loop-owned" (lock.h) */
    rcp__cond space_cv;
    rcp__cond state_cv;
    int space_waiters;
    rcp__slot *ring;
    uint64_t head, wr, taken, tail;
    char *pend;
    size_t pend_len, pend_off, pend_cap;
    int state;
    int fd;
    int reply_too_large;  /* the reader holds more than max_reply_bytes: drop */
    atomic_uint sinks;    /* slots in the ring with a sink: nonzero turns on conn_get_reply's
                           * streaming branch (changed under the mutex) */
    uint64_t sink_claim;  /* 1 + the slot whose value is being delivered to its sink, 0:
                           * none. expire() leaves that slot to whoever streams it */
    rcp__reply_budget budget; /* the reader's: objects of the reply being read */
    int rcvtimeo_ms;      /* the socket's SO_RCVTIMEO now (0: none); owned by whoever owns the
                           * socket's I/O */
    int rcvtimeo_dflt_ms; /* what set_blocking gave it: min(request, io timeout) */
    int fast_active;      /* a calling thread owns the socket's I/O: a lone caller, or a
                           * waiting one handed the lead (conn_fast.c) */
    uint64_t fast_idx;    /* its slot: the loop never expires it */
    uint64_t flush_avg;   /* commands per write, moving average over ~8 writes, in 16ths
                           * (mutex): above one, callers batch here (rcp__conn_spill_ok) */
    int loop_io;          /* the loop is inside process: no fast path */
    int wake_pending;     /* the loop has been asked to flush the pending requests */
    int need_close;       /* the fast path hands a failure to the loop */
    int need_read;        /* the fast path hands the reader role back */
    atomic_int behind;    /* requests were queued while a calling thread had the socket */
    atomic_int unheard;   /* cork: written requests are in flight and no byte came back
                           * since the last write (set under the mutex when a write
                           * lands, cleared by whoever reads bytes) */
    int caller_writing;   /* a sending thread writes the pending requests itself
                           * (rcp__conn_caller_flush): the loop keeps off the socket */
    int loop_deferred;    /* the loop was called meanwhile: the writer rings it after */
    unsigned idle_sends;  /* sends in a row that found the connection idle (0: the last
                           * found requests in flight or queued): one-at-a-time traffic */
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
    uint64_t flush_opened_ns; /* first request of the pending flush (pause only) */
    uint64_t min_deadline;
    atomic_uint active_calls; /* calls in progress: rcp__conn_hold, close waits */
    /* Spare connections (conn_spare.c): opened once, closed with the handle. */
    _Atomic(struct rcp_conn *) spare[RCP__SPARE_MAX];
    int spare_opening;   /* (mutex) a caller is opening one */
    atomic_int stateful; /* a CLIENT command went out (connection state): no spares */
    atomic_int async_seen; /* an async request was sent on the handle: no lanes */
    atomic_uint lanes;     /* sync callers are dealt over this many connections */

    /* Loop-owned (or fast-path-owned while fast_active). */
    rcp__loop_src src;    /* this connection as a source of its loop */
    int armed;            /* the loop is woken on readable/writable, not only hang-ups;
                           * stored atomically: a sender reads it under the mutex */
    char *wbuf;
    size_t wlen, woff, wcap, wslot_off;
    redisReader *reader;
    rcp__sink_state sk;
    rcp__source_state so;
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
    rcp__tls_cfg *tls_cfg; /* the shared TLS config (opt.tls), held for the handle's life */
    rcp__tls *tls;        /* the TLS session, from TCP connected to socket closed; NULL in
                           * plain text. Owned like the socket's I/O (loop or lone caller) */
    void *tls_resume;     /* the last SSL_SESSION the server gave (tls.c), offered on the
                           * next connect; owned like tls */
    _Atomic uint64_t timer_at;

    struct {
        _Atomic uint64_t requests, replies, batches, commands_written, write_calls, read_calls,
            bytes_out, bytes_in, timeouts, late_replies, reconnects, disconnects, fast_path,
            futex_wakes, loop_wakes, caller_writes, leads, caller_replies, loop_leads, corked,
            sendfile_bytes, caller_uploads, spare_requests;
    } st;
};

/* ---- small helpers, inline: they sit on the request path ------------ */

static inline uint64_t conn_ms_to_ns(long long ms)
{
    return (uint64_t)ms * 1000000ull;
}

static inline void conn_stat_add(_Atomic uint64_t *s, uint64_t v)
{
    atomic_fetch_add_explicit(s, v, memory_order_relaxed);
}

/* Mutex held: a write of n commands goes into flush_avg (capped at 64,
 * so that one huge write does not stand for many). */
static inline void conn_note_flush(struct rcp_conn *c, uint64_t n)
{
    c->flush_avg = (c->flush_avg * 7 + (n > 64 ? 64 : n) * 16) / 8;
}

static inline struct rcp_conn *conn_of_src(rcp__loop_src *s)
{
    return (struct rcp_conn *)((char *)s - offsetof(struct rcp_conn, src));
}

/* Any thread: lower the time the loop next runs this connection's timers.
 * Returns 1 if it did: a loop asleep until a later time must be rung to
 * see it (a sender that writes itself does not otherwise ring). */
static inline int conn_set_timer(struct rcp_conn *c, uint64_t t)
{
    uint64_t cur = atomic_load_explicit(&c->timer_at, memory_order_relaxed);
    while (t < cur) {
        if (atomic_compare_exchange_weak_explicit(&c->timer_at, &cur, t, memory_order_relaxed,
                                                  memory_order_relaxed))
            return 1;
    }
    return 0;
}

/* Mutex held. The state is also read without the mutex (rcp__conn_healthy,
 * by the cluster's replica choice), so it is stored atomically. */
static inline void conn_set_state(struct rcp_conn *c, int st)
{
    __atomic_store_n(&c->state, st, __ATOMIC_RELAXED);
}

/* Mutex held. Ask the loop to flush the pending requests, once per flush.
 * The caller rings (outside the mutex where it can) when this returns 1.
 * Not while a lone caller or a sending thread has the socket: they hand
 * over what is left when they leave. */
static inline int conn_want_loop(struct rcp_conn *c)
{
    if (c->wake_pending || c->fast_active || c->caller_writing)
        return 0;
    c->wake_pending = 1;
    c->flush_opened_ns = c->opt.batch_delay_us ? rcp__now_ns() : 0;
    return 1;
}

static inline void conn_ring_loop(struct rcp_conn *c)
{
    if (rcp__loop_notify(c->loop, &c->src))
        conn_stat_add(&c->st.loop_wakes, 1);
}

/* Mutex held. Make sure the loop checks the I/O timeout in time. Returns
 * 1 if that lowered the connection's timer (conn_set_timer). */
static inline int conn_arm_io_timer(struct rcp_conn *c)
{
    if (c->opt.io_timeout_ms > 0)
        return conn_set_timer(c, c->last_read_ns + conn_ms_to_ns(c->opt.io_timeout_ms));
    return 0;
}

static inline uint64_t conn_deadline_for(struct rcp_conn *c, const rcp_future *f, uint64_t now)
{
    int ms = f->timeout_ms ? f->timeout_ms : c->opt.request_timeout_ms;
    if (ms <= 0)
        return 0;
    return now + conn_ms_to_ns(ms);
}

/* ---- the one write and the one read, for the loop and the fast path -- */

enum {
    CONN_IO_DONE = 0,
    CONN_IO_AGAIN = 1,
    CONN_IO_YIELD = 2, /* conn_source.c: wrote its share of a pass, more to come */
    CONN_IO_ERR = -1,
    CONN_IO_BAD = -2,
    CONN_IO_TLS = -3,
    CONN_IO_SHORT = -4, /* conn_source.c: the source ended early (c->so.why) */
    CONN_IO_TIMEOUT = -5 /* rcp__conn_source_upload: the request's deadline passed */
};

/* Write buf[*off, len) to the socket, retrying EINTR, counting each call.
 * CONN_IO_DONE once all is written, CONN_IO_AGAIN when the socket buffer
 * is full (*off says how far it got), CONN_IO_ERR on a failure (errno).
 * `more`: more bytes of the same request follow at once (a streamed
 * value's chunks, conn_source.c): MSG_MORE, so the kernel does not push
 * a partial segment at the end of every call (plain text only). */
static inline int conn_write_more(struct rcp_conn *c, const char *buf, size_t len, size_t *off,
                                  int more)
{
    if (c->tls)
        return rcp__tls_write(c, buf, len, off); /* counts its send() calls itself */
    while (*off < len) {
        ssize_t w = send(c->fd, buf + *off, len - *off,
                         MSG_NOSIGNAL | MSG_DONTWAIT | (more ? MSG_MORE : 0));
        if (w > 0) {
            *off += (size_t)w;
            conn_stat_add(&c->st.write_calls, 1);
            conn_stat_add(&c->st.bytes_out, (uint64_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return CONN_IO_AGAIN;
        return CONN_IO_ERR;
    }
    return CONN_IO_DONE;
}

static inline int conn_write_some(struct rcp_conn *c, const char *buf, size_t len, size_t *off)
{
    return conn_write_more(c, buf, len, off, 0);
}

/* One recv() into buf (with TLS one SSL_read: the bytes it decrypts),
 * counted. Results as conn_recv_feed's, without the reader. */
static inline ssize_t conn_recv_raw(struct rcp_conn *c, char *buf, size_t cap, int flags)
{
    ssize_t r;
    if (c->tls) {
        r = rcp__tls_read(c, buf, cap, flags);
    } else {
        r = recv(c->fd, buf, cap, flags);
        if (r > 0) {
            conn_stat_add(&c->st.read_calls, 1);
            conn_stat_add(&c->st.bytes_in, (uint64_t)r);
        }
    }
    if (r > 0 && c->opt.cork) /* no store to a line senders read unless it is used */
        atomic_store_explicit(&c->unheard, 0, memory_order_relaxed);
    return r;
}

/* Hand n bytes read to the reply reader. 0, or CONN_IO_BAD if it refused
 * them or holds too much. */
static inline int conn_reader_take(struct rcp_conn *c, const char *p, size_t n)
{
    if (redisReaderFeed(c->reader, p, n) != REDIS_OK)
        return CONN_IO_BAD;
    /* What the reader holds is at most the reply in progress (every
     * complete one was taken before this read) and this read: a reply
     * larger than the cap stops here, whatever the server announced. */
    if (c->reader->len - c->reader->pos > c->opt.max_reply_bytes) {
        c->reply_too_large = 1;
        return CONN_IO_BAD;
    }
    return 0;
}

/* conn_sink.c: the read while a value streams (c->sk.on), and the reply
 * taking while any slot has a sink. */
ssize_t rcp__conn_sink_recv(struct rcp_conn *c, int flags);
int rcp__conn_sink_get_reply(struct rcp_conn *c, uint64_t next, void **reply);

/* One recv() into rbuf (flags: MSG_DONTWAIT on the loop, 0 on the fast
 * path, whose socket is blocking with SO_RCVTIMEO), fed to the reply
 * reader; with TLS one SSL_read (the bytes it decrypts). Returns the
 * bytes read (> 0), 0 if the peer closed, -1 on a recv failure (errno:
 * EINTR and EAGAIN are the caller's to handle), CONN_IO_BAD if the reader
 * refused the bytes (rcp__conn_reader_failure), or CONN_IO_TLS if TLS
 * failed (conn_io_cause). A result of at least rbuf_cap means the socket
 * may hold more (the loop reads on).
 *
 * In the middle of a streamed value the bytes go to its sink instead
 * (conn_sink.c): one branch, not taken on the ordinary path. */
static inline ssize_t conn_recv_feed(struct rcp_conn *c, int flags)
{
    ssize_t r;
    if (__builtin_expect(c->sk.on, 0))
        return rcp__conn_sink_recv(c, flags);
    r = conn_recv_raw(c, c->rbuf, c->rbuf_cap, flags);
    if (r > 0 && conn_reader_take(c, c->rbuf, (size_t)r))
        return CONN_IO_BAD;
    return r;
}

/* The next parsed reply, for the slot `next` (head + the replies taken
 * from the reader and not yet dispatched): redisReaderGetReply's
 * contract. While any slot has a sink, conn_sink.c looks first: a bulk
 * reply for a slot with a sink is streamed, not parsed, and comes back as
 * its length (or an RCP_ERR_SINK error). */
static inline int conn_get_reply(struct rcp_conn *c, uint64_t next, void **reply)
{
    if (__builtin_expect(atomic_load_explicit(&c->sinks, memory_order_relaxed) != 0, 0))
        return rcp__conn_sink_get_reply(c, next, reply);
    if (rcp__reader_fast(c->reader, reply))
        return REDIS_OK;
    return redisReaderGetReply(c->reader, reply);
}

/* The cause of a failed read or write for messages: "what failed:
 * strerror(errno)", or TLS's own words. r is the read's result (0: the
 * peer closed) or CONN_IO_ERR for a write. */
static inline void conn_io_cause(struct rcp_conn *c, ssize_t r, const char *what, char *cause,
                                 size_t len)
{
    if (r == 0)
        snprintf(cause, len, "connection closed by the server");
    else if (c->tls && rcp__tls_why(c)[0])
        snprintf(cause, len, "%s", rcp__tls_why(c));
    else
        snprintf(cause, len, "%s failed: %s", what, strerror(errno));
}

/* Without blocking, whether the idle socket holds bytes: 1 yes (with TLS:
 * decrypted data waits), 0 the peer closed (or TLS failed), -1 nothing. */
static inline int conn_peek_idle(struct rcp_conn *c)
{
    char b;
    ssize_t pk;
    if (c->tls)
        return rcp__tls_peek(c);
    pk = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return pk > 0 ? 1 : pk == 0 ? 0 : -1;
}

/* ---- across the files of a connection -------------------------------- */

/* conn_push.c */
/* Loop thread, a push connection: hand replies to the handshake's futures
 * while it lasts, then to push_fn; mutex not held. Returns 1. */
int rcp__conn_push_dispatch(struct rcp_conn *c, rcp_reply **replies, size_t n);
/* Mutex held, a push connection: written commands need no reply slot, so
 * once the handshake is answered the ring's head follows what was
 * written. */
static inline void conn_push_retire(struct rcp_conn *c)
{
    if (c->push_fn && c->head >= c->hs_end && c->head < c->wr)
        c->head = c->wr;
}

/* conn_io.c */
/* Mutex held. Room for `len` more pending bytes: the bytes flushes took
 * (pend_off) compacted away, or the buffer grown; -1 when out of memory. */
int rcp__conn_pend_grow(struct rcp_conn *c, size_t len);

/* conn.c */
/* The first step of rcp_conn_close: closing set, a lone caller's socket
 * shut (its read returns), senders blocked for room woken, the loop told.
 * Repeating it does nothing more. */
void rcp__conn_close_begin(struct rcp_conn *c);
/* Mutex held. Room for `len` more pending bytes (pend_off compacted);
 * -1 when out of memory. Inline: a request usually finds room and
 * nothing to compact (rcp__conn_pend_grow's no-op case). */
static inline int rcp__conn_pend_reserve(struct rcp_conn *c, size_t len)
{
    if (c->pend_len + len <= c->pend_cap && (!c->pend_off || c->pend_off < c->pend_cap / 2))
        return 0;
    return rcp__conn_pend_grow(c, len);
}
/* Queue one request (argv formatted under the mutex, or raw bytes):
 * rcp__conn_send_raw's contract. */
int rcp__conn_enqueue(struct rcp_conn *c, rcp_future *f, int argc, const char **argv,
                      const size_t *argvlen, const char *raw, size_t len, int asking,
                      const rcp_sink *sink, const rcp_source *src);
/* An error reply: `why` if set, else "what: rcp_strerror(code)". */
rcp_reply *rcp__conn_error_reply(int code, const char *why, const char *what);

/* conn_connect.c */
/* Loop thread (or close). Stop watching and close the socket. */
void rcp__conn_close_socket(struct rcp_conn *c);
/* Loop thread. Resolve everything outstanding and drop the socket; code
 * is the cause (RCP_ERR_IO-like failures, RCP_ERR_CONNECT, RCP_ERR_AUTH,
 * RCP_ERR_PROTOCOL, RCP_ERR_CLOSED). Written requests get RCP_ERR_IO,
 * unwritten ones RCP_ERR_NOT_SENT. Schedules the reconnect. */
void rcp__conn_fail(struct rcp_conn *c, int code, const char *cause);
/* At create: the handshake futures and the backoff's random seed. */
void rcp__conn_connect_init(struct rcp_conn *c);
/* Loop thread. Start a non-blocking connect; failures go to rcp__conn_fail. */
void rcp__conn_start_connect(struct rcp_conn *c);
/* Loop thread, state CONNECTING, readiness `events`: finish the connect.
 * Returns 1 once connected (processing goes on: the handshake is queued),
 * 0 if the socket is not writable yet or the connect failed. */
int rcp__conn_finish_connect(struct rcp_conn *c, uint32_t events);
/* Loop thread, after replies were dispatched: finish the handshake.
 * Returns 0 if the connection was failed. */
int rcp__conn_check_handshake(struct rcp_conn *c);

/* conn_io.c */
/* The connection's ops as a loop source (process, next_timer, timers). */
extern const rcp__loop_src_ops rcp__conn_src_ops;
/* Why the reply reader failed: RCP_ERR_OOM or RCP_ERR_PROTOCOL; cause
 * gets the text. Either way the connection must be closed. */
int rcp__conn_reader_failure(struct rcp_conn *c, char *cause, size_t len);
void rcp__conn_resolve_error(rcp_future *f, int code, const char *msg);
/* Mutex held, by whoever owns the socket's I/O (the loop, a sending
 * thread, a leading caller). Take the pending requests of [taken, limit)
 * into wbuf, up to the caps of one flush (max_batch_commands,
 * max_batch_bytes). A request with a source ends the flush: with
 * sources set (the loop) it is taken last and its upload starts (c->so);
 * without, the flush stops before it. Returns 0 on OOM. */
int rcp__conn_take_flush(struct rcp_conn *c, uint64_t limit, int sources);
/* Mutex held. Count the slots the flush wrote whole ([wr, taken) up to
 * woff). The first one written on an idle connection starts the I/O
 * timeout. Returns 1 if that lowered the connection's timer. */
int rcp__conn_account_written(struct rcp_conn *c);
/* Mutex not held, by the reader of the socket. Hand parsed replies to
 * their futures in order (resolved outside the mutex). Returns 0 if a
 * reply had no request (protocol violation). */
int rcp__conn_dispatch(struct rcp_conn *c, rcp_reply **replies, size_t n);
/* Mutex held, by the reader of the socket: take the futures of up to n
 * written requests ([head, wr)) for n replies in order; returns how many
 * (fewer: replies with no request). Counts replies and late replies. */
size_t rcp__conn_take_replies(struct rcp_conn *c, rcp_future **futs, size_t n);
/* Mutex not held: resolve what rcp__conn_take_replies took, in order (a
 * NULL future timed out: its reply is dropped). */
void rcp__conn_resolve_taken(rcp_future **futs, rcp_reply **replies, size_t n);

/* A sending thread that found the connection idle (conn.c, enqueue_end;
 * mutex held, released on return): write the pending requests as the
 * loop's flush would, the loop kept off the socket meanwhile
 * (caller_writing), then hand the connection back, ringing the loop only
 * if something is left for it. lowered: the send lowered the timer. */
void rcp__conn_caller_flush(struct rcp_conn *c, int lowered);

/* conn_sink.c */
/* Mutex held, by expire() or a caller on the socket giving up on slot i:
 * 1 if i may be resolved now. The value being streamed for it switches to
 * discard (the rest is read and dropped, the connection stays in step)
 * when the caller owns the stream (owner: 1 for the thread on the
 * socket); a value another thread streams is left to it (0). */
int rcp__conn_sink_abandon(struct rcp_conn *c, uint64_t i, int owner);
/* Loop thread, failing the connection (mutex held): no stream, no sinks. */
void rcp__conn_sink_reset(struct rcp_conn *c);
/* Mutex held, queueing a slot: count it if it has a sink. */
static inline void conn_sink_count(struct rcp_conn *c, const rcp_sink *sink)
{
    if (sink)
        atomic_fetch_add_explicit(&c->sinks, 1, memory_order_relaxed);
}

/* conn_fast.c */
/* A sync call: a future on the caller's stack, the lone-caller path when
 * it is free (not with asking), else queued behind whoever has the socket
 * (a caller or the loop). Never NULL. */
/* Loop thread, after a pass (conn_fast.c): hand the socket to a sync
 * caller if only sync callers' requests are in flight. */
void rcp__conn_offer_lead(struct rcp_conn *c);

rcp_reply *rcp__conn_sync_command(struct rcp_conn *c, int argc, const char **argv,
                                  const size_t *argvlen, const char *raw, size_t len, int asking,
                                  int timeout_ms, const rcp_sink *sink, const rcp_source *src);
/* The lone-caller path for raw (a formatted command): the reply if the
 * socket was free. If it was not: with queue 0, NULL (nothing queued);
 * with queue 1, NULL only if the caller had better use another idle
 * connection to the server (fast_claim's spill rule), else the request
 * is queued here and its reply returned; with queue 2 (a lane, conn_spare.c)
 * queued whatever the spill rule says, NULL only if c is not ready. */
rcp_reply *rcp__conn_sync_lone(struct rcp_conn *c, const char *raw, size_t len, int timeout_ms,
                               int queue);

/* conn_spare.c */
void rcp__conn_spare_note_slow(struct rcp_conn *c, int argc, const char **argv,
                               const size_t *argvlen);
/* A public call's command, screened: a CLIENT command (SETNAME,
 * TRACKING ...: per-connection state; SELECT, MULTI and the like are
 * refused on a handle) turns the spares off for good, since they would
 * not share that state. One load once it has; until then a look at
 * the first letter spares the call for every command not starting
 * with C. */
static inline void conn_spare_note(struct rcp_conn *c, int argc, const char **argv,
                                   const size_t *argvlen)
{
    if (c->spare_ok && (!argvlen || argvlen[0] > 0) && (argv[0][0] | 0x20) == 'c' &&
        !atomic_load_explicit(&c->stateful, memory_order_relaxed))
        rcp__conn_spare_note_slow(c, argc, argv, argvlen);
}
/* A sync call on c (a public handle, its command raw or argv, len bytes
 * formatted) that found c busy with one other sync caller's request: its
 * reply from an idle spare connection, or NULL (nothing sent: the caller
 * queues on c, within *timeout_ms, which a spare that dropped the request
 * unsent has shortened by the time spent there). May start opening one
 * more spare for the next time. */
rcp_reply *rcp__conn_spare_command(struct rcp_conn *c, int argc, const char **argv,
                                   const size_t *argvlen, const char *raw, size_t len,
                                   int *timeout_ms);
/* A sync call on c (as rcp__conn_spare_command's) when enough calls are
 * inside c to deal callers over the connection and its spares (lanes,
 * conn_spare.c): its reply from the spare of this thread's lane, or NULL
 * to go on on c (its lane is c's own, the spare is not open or not ready,
 * no lanes now, or the spare dropped the request unsent: *timeout_ms as
 * rcp__conn_spare_command's). */
rcp_reply *rcp__conn_spare_lane(struct rcp_conn *c, int argc, const char **argv,
                                const size_t *argvlen, const char *raw, size_t len,
                                int *timeout_ms);
/* Calls inside a handle per lane; below two lanes' worth, and with no
 * lanes dealt, a sync call does not look further (two loads). */
#define RCP__LANE_CALLERS 16
static inline int conn_lanes_maybe(struct rcp_conn *c)
{
    return atomic_load_explicit(&c->active_calls, memory_order_relaxed) >= 2 * RCP__LANE_CALLERS ||
           atomic_load_explicit(&c->lanes, memory_order_relaxed) >= 2;
}
/* rcp_conn_close, first: every spare marked closing, its lone caller's
 * socket shut, so a call hung on a spare ends now (RCP_ERR_CLOSED), not
 * at its deadline; the spares stay allocated for calls still inside. */
void rcp__conn_spares_interrupt(struct rcp_conn *c);
/* rcp_conn_close, once no call is in progress: close the spares. */
void rcp__conn_spares_close(struct rcp_conn *c);
/* rcp_conn_get_stats: add the spares' counters. */
void rcp__conn_spares_stats(struct rcp_conn *c, rcp_conn_stats *o);

/* conn_cancel.c */
/* Mutex held. Cut the pending requests [i, j) out: their bytes from the
 * pending buffer, their slots from the ring (the later ones move down). */
void rcp__conn_cut_pending(struct rcp_conn *c, uint64_t i, uint64_t j);

/* conn_source.c */
/* Loop thread, after wbuf (ending with the source slot's head) is
 * written: pull the source and write it, then its CRLF. CONN_IO_DONE once
 * all is out, CONN_IO_AGAIN when the socket is full, CONN_IO_YIELD after
 * a pass's share (the loop comes back after serving reads), CONN_IO_ERR
 * (a write failed: errno), CONN_IO_SHORT (the source ended or failed
 * early: c->so.why; the connection must be dropped). */
int rcp__conn_source_write(struct rcp_conn *c);
/* Mutex held, failing the connection: no upload any more (the chunk
 * buffer is kept). */
void rcp__conn_source_reset(struct rcp_conn *c);
/* A sync caller's thread on the socket (the lone-caller path, conn_fast.c),
 * its source slot taken and c->so set up for it: write the request's head
 * (hlen bytes) and then its value, waiting in poll(2) when the socket is
 * full. CONN_IO_DONE once the value and its CRLF are out; CONN_IO_ERR
 * (cause), CONN_IO_SHORT (the source failed: cause), CONN_IO_TIMEOUT
 * (deadline passed). On anything but CONN_IO_DONE the connection is out of
 * step: the caller must fail it. */
int rcp__conn_source_upload(struct rcp_conn *c, const char *head, size_t hlen,
                            uint64_t deadline, char *cause, size_t causelen);

#endif
