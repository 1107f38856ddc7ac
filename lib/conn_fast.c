/* lib/conn_fast.c: sync calls. The caller's future lives on its stack
 * and it sleeps on a futex word in it until its reply is there.
 *
 * A lone synchronous caller that finds the connection idle does its own
 * write and read instead (the fast path): no loop hop, no wake, the two
 * system calls of a plain client. Callers that come while it is on the
 * socket queue behind it and sleep. When it has its reply it does not
 * wake the loop for them: it writes what they queued as one batch and
 * hands the socket to the last of them (leader/follower), which reads the
 * batch's replies, wakes each of the others once, and passes the socket
 * on the same way when its own reply is in. The loop is needed only when
 * nobody is on the socket, or for what a caller cannot do (async
 * futures, whose callbacks run on a loop thread; a partial write). A lone
 * caller whose value streams from a source uploads it itself
 * (fast_upload), then reads as any lone caller. Both
 * use the same write and read helpers as the loop (conn_int.h), and hand
 * the socket back to the loop on anything unusual (partial write,
 * timeout, error, stray bytes). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "conn_int.h"
#include "format.h"
#include "reply.h"

#define FAST_STACK_BUF 4096
#define LEAD_READ_MAX 64

/* ------------------------------------------------------------------ */
/* a future on the caller's stack, a futex word to sleep on            */

enum { SF_PENDING = 0, SF_SLEEPING = 1, SF_DONE = 2, SF_LEAD = 3 };

typedef struct sync_future {
    rcp_future f;
    atomic_uint state; /* SF_*: a waiter sleeps while SF_SLEEPING */
    rcp_reply *reply;
    struct rcp_conn *c;
    uint64_t idx;      /* its slot, set by whoever hands it the lead */
} sync_future;

static void sync_resolve(rcp_future *f, rcp_reply *r)
{
    sync_future *s = (sync_future *)f;
    struct rcp_conn *c = s->c;
    rcp_reply *kept = rcp_reply_keep(r);
    s->reply = kept ? kept : rcp__reply_error_new(RCP_ERR_OOM, NULL);
    /* After this store the waiter may return: touch nothing of s after.
     * A leading caller resolving its own future finds SF_LEAD: no wake. */
    if (atomic_exchange(&s->state, SF_DONE) == SF_SLEEPING) {
        rcp__futex_wake(&s->state, 1);
        conn_stat_add(&c->st.futex_wakes, 1);
    }
}

/* Sleep until the future is resolved (SF_DONE) or handed the lead
 * (SF_LEAD); returns which. */
static unsigned sync_wait(sync_future *s)
{
    unsigned v = atomic_load(&s->state);
    while (v != SF_DONE && v != SF_LEAD) {
        if (v == SF_PENDING) {
            unsigned expect = SF_PENDING;
            if (!atomic_compare_exchange_strong(&s->state, &expect, SF_SLEEPING)) {
                v = expect;
                continue;
            }
        }
        rcp__futex_wait(&s->state, SF_SLEEPING, NULL);
        v = atomic_load(&s->state);
    }
    return v;
}

/* ------------------------------------------------------------------ */
/* a calling thread on the socket                                      */

/* Mutex held. Release the socket from the fast path; the loop takes over.
 * Returns 1 if the loop must be rung. */
static int fast_handback(struct rcp_conn *c)
{
    conn_arm_io_timer(c);
    c->fast_active = 0;
    c->wake_pending = 1;
    return 1;
}

/* Mutex held. A calling thread on the socket fails: the loop fails the
 * connection and resolves what is outstanding. Releases the mutex. */
static void fast_fail(struct rcp_conn *c, int code, const char *cause)
{
    c->need_close = 1;
    c->close_code = code;
    snprintf(c->close_msg, sizeof c->close_msg, "%s", cause);
    fast_handback(c);
    rcp__mutex_unlock(&c->mu);
    conn_ring_loop(c);
}

/* The caller's blocking read is bounded by SO_RCVTIMEO, set at connect
 * to the connection's request (or I/O) timeout. A request whose deadline
 * comes sooner (a per-call deadline, the time left after a cluster retry)
 * lowers it for as long as such requests come, and a later ordinary
 * request puts it back: in the steady state no system call is added. */
static void fast_rcvtimeo(struct rcp_conn *c, uint64_t deadline)
{
    int want = c->rcvtimeo_dflt_ms;
    struct timeval tv;
    if (deadline) {
        uint64_t now = rcp__now_ns();
        uint64_t left = deadline > now ? (deadline - now + 999999) / 1000000 : 1;
        if (want == 0 || left < (uint64_t)want)
            want = (int)left;
    }
    if (want == c->rcvtimeo_ms ||
        (c->rcvtimeo_ms && want > c->rcvtimeo_ms && want < 2 * c->rcvtimeo_ms))
        return;
    tv.tv_sec = want / 1000;
    tv.tv_usec = (want % 1000) * 1000;
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0)
        c->rcvtimeo_ms = want;
}

/* One blocking read (the socket is in blocking mode; the loop always
 * passes MSG_DONTWAIT): one system call, as a plain client makes.
 * SO_RCVTIMEO bounds it. Returns 1 once bytes were fed to the reader, 0
 * when `deadline` passed first, -1 on a failure (cause and *code set: the
 * connection must be closed). `since`: the last byte read, for the I/O
 * timeout. */
static int fast_read(struct rcp_conn *c, uint64_t deadline, uint64_t since, char *cause,
                     size_t len, int *code)
{
    for (;;) {
        ssize_t r = conn_recv_feed(c, 0);
        if (r > 0)
            return 1;
        if (r == CONN_IO_BAD) {
            *code = rcp__conn_reader_failure(c, cause, len);
            return -1;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            uint64_t now = rcp__now_ns();
            if (deadline && now >= deadline)
                return 0;
            if (c->opt.io_timeout_ms > 0 && now >= since + conn_ms_to_ns(c->opt.io_timeout_ms)) {
                snprintf(cause, len, "I/O timeout: no reply byte for %d ms", c->opt.io_timeout_ms);
                *code = RCP_ERR_IO;
                return -1;
            }
            if (!deadline && c->opt.io_timeout_ms <= 0) {
                /* No receive timeout configured: wait for readability. */
                struct pollfd p;
                p.fd = c->fd;
                p.events = POLLIN;
                p.revents = 0;
                poll(&p, 1, 100);
            }
            continue;
        }
        conn_io_cause(c, r, "read", cause, len);
        *code = RCP_ERR_IO;
        return -1;
    }
}

/* Mutex held. The last of the requests queued from `taken` on that a
 * calling thread may write and read for: every one before it a sync
 * caller's (or already timed out), itself a sync caller's. A loop
 * thread's futures (async callbacks, ASKING) are not for a caller's
 * thread to resolve. UINT64_MAX if none. */
static uint64_t lead_candidate(struct rcp_conn *c)
{
    uint64_t i, last = UINT64_MAX;
    if (c->state != RCP__ST_READY || c->closing || c->need_close || c->need_read || c->push_fn ||
        c->wlen != c->woff || c->so.on)
        return UINT64_MAX;
    for (i = c->taken; i < c->tail; i++) {
        rcp_future *f = c->ring[i & c->mask].f;
        if (c->ring[i & c->mask].src)
            break; /* a source is the loop's to write (conn_source.c) */
        if (!f)
            continue;
        if (f->resolve != sync_resolve)
            break;
        last = i;
    }
    return last;
}

/* Mutex held, by the thread on the socket waiting for its reply to `own`,
 * callers queued behind it: whether to hold their requests until its
 * reply is in (fast_leave then writes them all as one batch) instead of
 * writing them before its next read. In plain text they go at once: a
 * server's read takes every write that has arrived, so an early write
 * costs it nothing when it lands in the same read. Under TLS each write
 * is a record, and the server reads a record at a time: every write
 * costs it a read, a reply write and a pass of its event loop, and the
 * leader's read of each reply record is the occasion for the next thin
 * write, so the number of writes in flight never goes down (docs/tls.md,
 * "What thinned the batches under TLS"). Held, the callers that come
 * during one round trip ride in one write. Not held: a flush's worth
 * queued (the caps of conn_io.c), or a request whose deadline comes
 * before ours (it must not wait for a reply that may come after it). */
static int lead_holds(struct rcp_conn *c, uint64_t own)
{
    uint64_t i, mine = c->ring[own & c->mask].deadline;
    if (!c->tls || c->tail - c->taken >= c->opt.max_batch_commands ||
        c->pend_len - c->pend_off >= c->opt.max_batch_bytes)
        return 0;
    for (i = c->taken; i < c->tail; i++) {
        uint64_t d = c->ring[i & c->mask].deadline;
        if (d && (!mine || d < mine))
            return 0;
    }
    return 1;
}

/* Mutex held, by the thread on the socket. Write the queued requests of
 * [taken, j] as one batch (more flushes if it passes a flush's caps).
 * Returns 1 once written; 0 if the socket went to the loop (a full socket
 * buffer: the loop writes the rest and reads; a failure), mutex released. */
static int write_queued(struct rcp_conn *c, uint64_t j)
{
    char cause[512];
    while (c->taken <= j) {
        int rv;
        if (!rcp__conn_take_flush(c, j + 1, 0)) {
            fast_fail(c, RCP_ERR_IO, "out of memory taking a flush");
            return 0;
        }
        rcp__mutex_unlock(&c->mu);
        rv = conn_write_some(c, c->wbuf, c->wlen, &c->woff);
        if (rv == CONN_IO_ERR)
            conn_io_cause(c, CONN_IO_ERR, "write", cause, sizeof cause);
        rcp__mutex_lock(&c->mu);
        rcp__conn_account_written(c);
        if (rv == CONN_IO_ERR) {
            fast_fail(c, RCP_ERR_IO, cause);
            return 0;
        }
        if (rv == CONN_IO_AGAIN) {
            c->need_read = 1;
            fast_handback(c);
            rcp__mutex_unlock(&c->mu);
            conn_ring_loop(c);
            return 0;
        }
        c->wlen = c->woff = c->wslot_off = 0;
    }
    return 1;
}

/* Mutex held (released on return), by the thread on the socket (a
 * leaving caller, or the loop). Hand the socket to the caller of slot j,
 * a sync future written and unanswered: it reads the replies up to its
 * own, waking their callers, and passes the socket on in turn. */
static void give_lead(struct rcp_conn *c, uint64_t j)
{
    sync_future *next = (sync_future *)c->ring[j & c->mask].f;
    c->fast_active = 1;
    c->fast_idx = j; /* the loop's timers keep off it from here */
    next->idx = j;
    rcp__mutex_unlock(&c->mu);
    /* From here the socket is next's: touch nothing of c's I/O state.
     * next cannot be resolved meanwhile: only the thread on the socket
     * reads, the loop's timers skip fast_idx, and the loop fails the
     * connection only once the socket is handed back to it. */
    conn_stat_add(&c->st.leads, 1);
    if (atomic_exchange(&next->state, SF_LEAD) == SF_SLEEPING) {
        rcp__futex_wake(&next->state, 1);
        conn_stat_add(&c->st.futex_wakes, 1);
    }
}

/* Mutex held (released on return), by the thread on the socket once its
 * own reply is in. Write what callers queued meanwhile, then hand the
 * socket to the last caller whose request is written and unanswered: it
 * reads the replies up to its own, waking their callers. With nothing in
 * flight and nothing a caller can take, the socket goes back to the loop
 * (rung if something is queued). */
static void fast_leave(struct rcp_conn *c)
{
    uint64_t j = UINT64_MAX, i;
    int ring;

    if (c->head == c->wr && c->reader->pos < c->reader->len) {
        /* More bytes than the replies asked for: the server answered
         * something nobody asked. The connection is not to be trusted. */
        fast_fail(c, RCP_ERR_PROTOCOL, "protocol error: a reply arrived with no request waiting for it");
        return;
    }
    if (c->taken < c->tail) {
        uint64_t q = lead_candidate(c);
        if (q != UINT64_MAX && !write_queued(c, q))
            return;
    }
    for (i = c->wr; i > c->head; i--) {
        /* Written by callers on the socket: sync futures, or timed out. */
        if (c->ring[(i - 1) & c->mask].f) {
            j = i - 1;
            break;
        }
    }
    if (j == UINT64_MAX) {
        if (c->head < c->wr) {
            c->need_read = 1; /* only late replies are due: the loop reads them */
            ring = fast_handback(c);
        } else {
            c->fast_active = 0;
            /* need_read: the loop heard a hang-up while we had the socket. */
            ring = (c->taken < c->tail && conn_want_loop(c)) || c->need_read;
        }
        rcp__mutex_unlock(&c->mu);
        if (ring)
            conn_ring_loop(c);
        return;
    }
    give_lead(c, j);
}

/* Loop thread, at the end of a pass that left every queued request
 * written. If all that is in flight is sync callers' (a chain of leaders
 * broke off: an async request in the queue, a partial write), hand the
 * socket to the last of them instead of reading for them. With callers
 * queueing all the time the connection is never idle again, so the
 * lone-caller path cannot restart the chain; without this the loop would
 * read for everyone from then on, a wake per batch. The wake is one the
 * loop would pay anyway (the reply of that caller). */
void rcp__conn_offer_lead(struct rcp_conn *c)
{
    uint64_t i, j = UINT64_MAX;
    if (!c->opt.fast_path || c->opt.batch_delay_us)
        return;
    rcp__mutex_lock(&c->mu);
    if (c->state != RCP__ST_READY || c->closing || c->need_close || c->need_read || c->push_fn ||
        c->fast_active || c->caller_writing || c->wake_pending || c->fd < 0 ||
        c->wlen != c->woff || c->taken != c->tail || c->reply_too_large || c->so.on) {
        rcp__mutex_unlock(&c->mu);
        return;
    }
    for (i = c->head; i < c->wr; i++) {
        rcp_future *f = c->ring[i & c->mask].f;
        if (!f)
            continue; /* timed out: its late reply is read and dropped */
        if (f->resolve != sync_resolve) {
            j = UINT64_MAX;
            break;
        }
        j = i;
    }
    if (j == UINT64_MAX) {
        rcp__mutex_unlock(&c->mu);
        return;
    }
    conn_stat_add(&c->st.loop_leads, 1);
    give_lead(c, j);
}

/* Mutex held. The thread on the socket gives up waiting for its own
 * reply (its deadline passed): resolve it here, leave the late reply and
 * the others' to the loop (mutex released). */
static rcp_reply *fast_timeout(struct rcp_conn *c, uint64_t idx)
{
    char cause[400];
    rcp__conn_sink_abandon(c, idx, 1); /* our value, if it streams: the loop discards the rest */
    c->ring[idx & c->mask].f = NULL;
    c->need_read = 1;
    fast_handback(c);
    rcp__mutex_unlock(&c->mu);
    conn_ring_loop(c);
    conn_stat_add(&c->st.timeouts, 1);
    snprintf(cause, sizeof cause, "%s: request timed out (no reply before its deadline)", c->addr);
    return rcp__reply_error_new(RCP_ERR_TIMEOUT, cause);
}

/* The thread on the socket (a lone caller after its write, or a waiting
 * caller handed the lead), its request `own` written: read replies in
 * order up to its own, resolving each (a sleeping caller is woken once),
 * and before each blocking read write what callers queued behind it
 * (under TLS only when lead_holds says so).
 * Then pass the socket on (fast_leave). Returns its reply, or NULL if the
 * socket went to the loop before its reply came (then wait on s). */
static rcp_reply *lead_io(struct rcp_conn *c, sync_future *s, uint64_t own, uint64_t deadline)
{
    rcp_reply *replies[LEAD_READ_MAX];
    rcp_future *futs[LEAD_READ_MAX];
    size_t n;
    uint64_t since = rcp__now_ns();
    char cause[512];
    int code = RCP_ERR_IO;

    fast_rcvtimeo(c, deadline);
    for (;;) {
        int got;
        n = 0;
        for (;;) {
            void *rep = NULL;
            if (conn_get_reply(c, c->head + n, &rep) != REDIS_OK) {
                code = rcp__conn_reader_failure(c, cause, sizeof cause);
                goto fail;
            }
            if (!rep)
                break;
            replies[n++] = rep;
            /* Only the thread on the socket moves head: read unlocked. */
            if (n == LEAD_READ_MAX || (uint64_t)n > own - c->head)
                break;
        }
        if (n) {
            conn_stat_add(&c->st.caller_replies, n);
            if ((uint64_t)n == own - c->head + 1)
                break; /* ours is the last of them */
            if (!rcp__conn_dispatch(c, replies, n)) {
                code = RCP_ERR_PROTOCOL;
                snprintf(cause, sizeof cause,
                         "protocol error: a reply arrived with no request waiting for it");
                goto fail;
            }
            continue;
        }
        if (atomic_load_explicit(&c->behind, memory_order_relaxed)) {
            uint64_t q;
            rcp__mutex_lock(&c->mu);
            atomic_store_explicit(&c->behind, 0, memory_order_relaxed);
            q = lead_holds(c, own) ? UINT64_MAX : lead_candidate(c);
            if (q != UINT64_MAX && !write_queued(c, q))
                goto handed;
            rcp__mutex_unlock(&c->mu);
        }
        got = fast_read(c, deadline, since, cause, sizeof cause, &code);
        if (got > 0) {
            since = rcp__now_ns();
            continue;
        }
        if (got < 0)
            goto fail;
        rcp__mutex_lock(&c->mu);
        return fast_timeout(c, own); /* ours is not in: only we read */
    }
    /* Our reply is in, the last of replies[]: take their slots, wake the
     * others first (those woken first queue again meanwhile: the batch we
     * write on leaving grows), then pass the socket on. */
    rcp__mutex_lock(&c->mu);
    rcp__conn_take_replies(c, futs, n); /* all n: ours, written, ends them */
    c->last_read_ns = since;
    if (n > 1) {
        rcp__mutex_unlock(&c->mu);
        rcp__conn_resolve_taken(futs, replies, n - 1);
        rcp__mutex_lock(&c->mu);
    }
    fast_leave(c);
    conn_stat_add(&c->st.fast_path, 1);
    return replies[n - 1];

fail:
    rcp__mutex_lock(&c->mu);
    fast_fail(c, code, cause);
handed : {
    /* The loop has the socket; our reply (if not in yet) comes from it. */
    unsigned lead = SF_LEAD;
    atomic_compare_exchange_strong(&s->state, &lead, SF_PENDING);
    if (atomic_load(&s->state) == SF_DONE)
        return s->reply;
    return NULL;
}
}

/* The lone-caller path. Returns a reply, or NULL if the request was handed
 * to the loop (then wait on s). Entered with the slot queued at index idx,
 * c->wr == c->taken == idx + 1 (we write it ourselves), fast_active set. */
static rcp_reply *fast_io(struct rcp_conn *c, sync_future *s, uint64_t idx, const char *buf,
                          size_t len, uint64_t deadline)
{
    size_t off = 0;
    int wr;
    char cause[512];

    wr = conn_write_some(c, buf, len, &off);
    if (wr == CONN_IO_AGAIN) {
        /* Socket buffer full: give the rest to the loop as pending. */
        size_t rest = len - off;
        rcp__mutex_lock(&c->mu);
        if (rcp__conn_pend_reserve(c, rest) < 0) {
            c->wr = idx; /* incomplete: never executed */
            fast_fail(c, RCP_ERR_IO, "out of memory handing a write to the loop");
            return NULL;
        }
        {
            size_t used = c->pend_len - c->pend_off;
            memmove(c->pend + c->pend_off + rest, c->pend + c->pend_off, used);
            memcpy(c->pend + c->pend_off, buf + off, rest);
            c->pend_len += rest;
            c->ring[idx & c->mask].len = rest;
            c->ring[idx & c->mask].flags |= RCP__SLOT_PARTIAL; /* not to be cut out */
            c->wr = c->taken = idx;
        }
        fast_handback(c);
        rcp__mutex_unlock(&c->mu);
        conn_ring_loop(c);
        return NULL;
    }
    if (wr != CONN_IO_DONE) {
        conn_io_cause(c, CONN_IO_ERR, "write", cause, sizeof cause);
        rcp__mutex_lock(&c->mu);
        c->wr = idx; /* not (completely) written: never executed */
        fast_fail(c, RCP_ERR_IO, cause);
        return NULL;
    }
    conn_stat_add(&c->st.batches, 1);
    conn_stat_add(&c->st.commands_written, 1);
    return lead_io(c, s, idx, deadline);
}

/* Mutex held, the connection busy. Whether a sync caller had better go
 * to another idle connection to the same server than queue here: one
 * request at most outstanding, another sync caller's (an async request
 * may be the caller's own, which its next request must not overtake),
 * and nothing to thin: the recent writes under 1.25 commands on average
 * (flush_avg is in 16ths). On a public handle with spares, exactly one
 * outstanding instead: a sync caller behind one other pays a futex wait
 * and a wake where a connection of its own costs nothing more than the
 * write and read it makes anyway; many callers keep more than one
 * outstanding, and batch here; with none outstanding the connection is
 * only busy for a moment (the loop on it, stray bytes to judge) and the
 * caller waits for it rather than open a spare for a lone thread. */
static int spill_rule(struct rcp_conn *c)
{
    rcp_future *f;
    uint64_t n = c->tail - c->head;
    if (c->state != RCP__ST_READY || n > 1 || (c->spare_ok ? n != 1 : c->flush_avg >= 20))
        return 0;
    f = n ? c->ring[c->head & c->mask].f : NULL;
    return !f || f->resolve == sync_resolve;
}

/* Take the mutex and see whether a calling thread may have the socket:
 * the connection is ready, idle, and nobody is on it. Returns 1 with the
 * mutex held, or 0 with it released. On 0, *spill (if not NULL) is the
 * spill rule's answer, or -1 if the connection is not ready. */
static int fast_claim(struct rcp_conn *c, int *spill)
{
    rcp__mutex_lock(&c->mu);
    if (c->state != RCP__ST_READY || c->closing || c->fast_active || c->loop_io ||
        c->caller_writing || c->need_close || c->need_read || c->head != c->tail || c->fd < 0) {
        if (spill) /* -1: not ready (connecting, down, closing) */
            *spill = c->state != RCP__ST_READY || c->closing ? -1 : spill_rule(c);
        rcp__mutex_unlock(&c->mu);
        return 0;
    }
    if (conn_peek_idle(c) >= 0) {
        /* Bytes already waiting on an idle connection are not a reply to
         * anything we are about to send (a misbehaving server, or a close):
         * let the loop read and judge them instead of taking them as ours. */
        int ring = !c->need_read;
        c->need_read = 1;
        rcp__mutex_unlock(&c->mu);
        if (ring)
            conn_ring_loop(c);
        return 0;
    }
    return 1;
}

/* The lone-caller path for a request whose value streams from a source
 * (slot idx taken, c->so set for it, fast_active): the caller's thread
 * writes the head and pulls the value itself (rcp__conn_source_upload:
 * the loop's own writer, waiting in poll when the socket is full), then
 * reads the reply as any lone caller. No hand-off to the loop and back
 * (two wakes), and callers on different connections upload at once
 * instead of one after another on the loop. Returns as fast_io. */
static rcp_reply *fast_upload(struct rcp_conn *c, sync_future *s, uint64_t idx, const char *head,
                              size_t hlen, uint64_t deadline)
{
    char cause[512];
    int rv = rcp__conn_source_upload(c, head, hlen, deadline, cause, sizeof cause);
    rcp__mutex_lock(&c->mu);
    if (rv == CONN_IO_DONE) {
        c->so.on = 0;
        c->wr = idx + 1;
        rcp__mutex_unlock(&c->mu);
        conn_stat_add(&c->st.batches, 1);
        conn_stat_add(&c->st.commands_written, 1);
        return lead_io(c, s, idx, deadline);
    }
    if (rv == CONN_IO_TIMEOUT) {
        /* As the loop does (expire): the request times out, and the
         * connection, inside a value it cannot finish, is dropped. */
        c->ring[idx & c->mask].f = NULL;
        fast_fail(c, RCP_ERR_IO,
                  "a request's deadline passed while its source was being written (an "
                  "upload cannot stop without desynchronising the connection)");
        conn_stat_add(&c->st.timeouts, 1);
        snprintf(cause, sizeof cause, "%s: request timed out (no reply before its deadline)",
                 c->addr);
        return rcp__reply_error_new(RCP_ERR_TIMEOUT, cause);
    }
    fast_fail(c, RCP_ERR_IO, cause); /* the loop fails it, with the source's cause */
    return NULL;
}

/* Try the lone-caller path (with a source, its upload too: fast_upload).
 * Returns the reply, NULL if not taken (then the caller queues normally),
 * or sets *handed if the request was queued and must be waited for. */
static rcp_reply *try_fast(struct rcp_conn *c, sync_future *s, int argc, const char **argv,
                           const size_t *argvlen, const char *raw, size_t len,
                           const rcp_sink *sink, const rcp_source *src, int *handed, int *spill)
{
    char stackbuf[FAST_STACK_BUF];
    char *buf = stackbuf;
    uint64_t idx, now, deadline;
    rcp_reply *r;

    *handed = 0;
    if (!c->opt.fast_path)
        return NULL;
    if (!raw && len > sizeof stackbuf) {
        buf = rcp__malloc(len);
        if (!buf)
            return NULL;
    }
    now = rcp__now_ns();
    deadline = conn_deadline_for(c, &s->f, now);
    if (!fast_claim(c, spill)) {
        if (buf != stackbuf)
            rcp__free(buf);
        return NULL;
    }
    idx = c->tail;
    {
        rcp__slot *sl = &c->ring[idx & c->mask];
        sl->f = &s->f;
        sl->deadline = deadline;
        sl->len = len;
        sl->sink = sink;
        sl->src = src;
        conn_sink_count(c, sink);
        sl->flags = 0;
    }
    c->tail = c->taken = c->wr = idx + 1;
    if (src) {
        /* Taken, not written until its value is out: a failure meanwhile
         * finds it so (rcp__conn_fail reads c->so for its error). */
        c->wr = idx;
        rcp__conn_source_reset(c);
        c->so.on = 1;
        c->so.idx = idx;
        c->so.src = src;
        conn_stat_add(&c->st.caller_uploads, 1);
    }
    c->fast_active = 1;
    c->fast_idx = idx;
    conn_note_flush(c, 1);
    atomic_store_explicit(&c->behind, 0, memory_order_relaxed);
    c->last_read_ns = now;
    conn_stat_add(&c->st.requests, 1);
    rcp__mutex_unlock(&c->mu);

    if (!raw) {
        if (src)
            rcp__format_source_write(buf, argc, argv, argvlen, src->len);
        else
            rcp__format_write(buf, argc, argv, argvlen);
        raw = buf;
    }
    r = src ? fast_upload(c, s, idx, raw, len, deadline) : fast_io(c, s, idx, raw, len, deadline);
    if (buf != stackbuf)
        rcp__free(buf);
    if (!r)
        *handed = 1;
    return r;
}

static void sync_init(sync_future *s, rcp_conn *c, int timeout_ms)
{
    memset(s, 0, sizeof *s);
    s->f.resolve = sync_resolve;
    s->f.timeout_ms = timeout_ms;
    s->c = c;
}

/* A queued sync request: sleep until it is resolved, or until the socket
 * is handed to this caller, then lead (lead_io) until it is. */
static rcp_reply *sync_finish(rcp_conn *c, sync_future *s)
{
    rcp_reply *r;
    uint64_t deadline;
    for (;;) {
        if (sync_wait(s) == SF_DONE)
            return s->reply;
        rcp__mutex_lock(&c->mu);
        deadline = c->ring[s->idx & c->mask].deadline;
        rcp__mutex_unlock(&c->mu);
        r = lead_io(c, s, s->idx, deadline);
        if (r)
            return r;
    }
}

rcp_reply *rcp__conn_sync_command(rcp_conn *c, int argc, const char **argv,
                                  const size_t *argvlen, const char *raw, size_t len, int asking,
                                  int timeout_ms, const rcp_sink *sink, const rcp_source *src)
{
    sync_future s;
    rcp_reply *r;
    int rv, handed = 0, spill = 0;
    int spares =
        c->spare_ok && !sink && !src && !atomic_load_explicit(&c->stateful, memory_order_relaxed);

    if (spares && !asking && conn_lanes_maybe(c) &&
        (r = rcp__conn_spare_lane(c, argc, argv, argvlen, raw, len, &timeout_ms)))
        return r;
    sync_init(&s, c, timeout_ms);
    if (!asking) { /* an ASKING first: the loop glues the two (conn_io.c) */
        r = try_fast(c, &s, argc, argv, argvlen, raw, len, sink, src, &handed,
                     spares ? &spill : NULL);
        if (r)
            return r;
        if (spill > 0 && !handed &&
            (r = rcp__conn_spare_command(c, argc, argv, argvlen, raw, len, &timeout_ms)))
            return r;
        s.f.timeout_ms = timeout_ms; /* less what a spare spent on it */
    }
    if (!handed) {
        rv = rcp__conn_enqueue(c, &s.f, argc, argv, argvlen, raw, len, asking, sink, src);
        if (rv != RCP_OK)
            return rcp__conn_error_reply(rv, NULL, "request refused");
    }
    return sync_finish(c, &s);
}

rcp_reply *rcp__conn_sync_lone(rcp_conn *c, const char *raw, size_t len, int timeout_ms, int queue)
{
    sync_future s;
    rcp_reply *r;
    int rv, handed = 0, spill = 0;

    sync_init(&s, c, timeout_ms);
    r = try_fast(c, &s, 0, NULL, NULL, raw, len, NULL, NULL, &handed, &spill);
    if (r)
        return r;
    if (!handed) {
        /* A lane (queue 2) queues whatever the spill rule says, unless
         * c is not ready: then the caller's own handle serves it. */
        if (!queue || (queue == 2 ? spill < 0 : spill > 0))
            return NULL;
        rv = rcp__conn_enqueue(c, &s.f, 0, NULL, NULL, raw, len, 0, NULL, NULL);
        if (rv != RCP_OK)
            return rcp__conn_error_reply(rv, NULL, "request refused");
    }
    return sync_finish(c, &s);
}
