/* lib/conn_fast.c: sync calls. The caller's future lives on its stack
 * and it sleeps on a futex word in it until the loop resolves it.
 *
 * A lone synchronous caller that finds the connection idle does its own
 * write and read instead (the fast path): no loop hop, no wake, the two
 * system calls of a plain client. It uses the same write and read helpers
 * as the loop (conn_int.h), and hands the socket back to the loop on
 * anything unusual (partial write, timeout, error, stray bytes). */
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "conn_int.h"
#include "format.h"
#include "reply.h"

#define FAST_STACK_BUF 4096

/* ------------------------------------------------------------------ */
/* a future on the caller's stack, a futex word to sleep on            */

typedef struct sync_future {
    rcp_future f;
    atomic_uint state; /* 0 pending, 1 a waiter sleeps, 2 resolved */
    rcp_reply *reply;
    struct rcp_conn *c;
} sync_future;

static void futex_wait(atomic_uint *addr, unsigned val)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *addr)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void sync_resolve(rcp_future *f, rcp_reply *r)
{
    sync_future *s = (sync_future *)f;
    struct rcp_conn *c = s->c;
    rcp_reply *kept = rcp_reply_keep(r);
    s->reply = kept ? kept : rcp__reply_error_new(RCP_ERR_OOM, NULL);
    /* After this store the waiter may return: touch nothing of s after. */
    if (atomic_exchange(&s->state, 2) == 1) {
        futex_wake(&s->state);
        conn_stat_add(&c->st.futex_wakes, 1);
    }
}

static rcp_reply *sync_wait(sync_future *s)
{
    unsigned v = atomic_load(&s->state);
    while (v != 2) {
        if (v == 0) {
            unsigned expect = 0;
            if (!atomic_compare_exchange_strong(&s->state, &expect, 1)) {
                v = expect;
                continue;
            }
        }
        futex_wait(&s->state, 1);
        v = atomic_load(&s->state);
    }
    return s->reply;
}

/* ------------------------------------------------------------------ */
/* the lone caller                                                     */

/* Mutex held. Release the socket from the fast path; the loop takes over.
 * Returns 1 if the loop must be rung. */
static int fast_handback(struct rcp_conn *c)
{
    conn_arm_io_timer(c);
    c->fast_active = 0;
    c->wake_pending = 1;
    return 1;
}

/* The lone caller's blocking read is bounded by SO_RCVTIMEO, set at
 * connect to the connection's request (or I/O) timeout. A request whose
 * deadline comes sooner (a per-call deadline, the time left after a
 * cluster retry) lowers it for as long as such requests come, and a later
 * ordinary request puts it back: in the steady state no system call is
 * added. */
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

/* The lone-caller path. Returns a reply, or NULL if the request was handed
 * to the loop (then wait on s). Entered with the slot queued at index idx,
 * c->wr == c->taken == idx + 1 (we write it ourselves), fast_active set. */
static rcp_reply *fast_io(struct rcp_conn *c, uint64_t idx, const char *buf,
                          size_t len, uint64_t deadline)
{
    size_t off = 0;
    int fd = c->fd, wr;
    uint64_t started = rcp__now_ns();
    void *rep = NULL;
    char cause[512];
    int code = RCP_ERR_IO;

    wr = conn_write_some(c, buf, len, &off);
    if (wr != CONN_IO_DONE) {
        if (wr == CONN_IO_AGAIN) {
            /* Socket buffer full: give the rest to the loop as pending. */
            size_t rest = len - off;
            pthread_mutex_lock(&c->mu);
            if (rcp__conn_pend_reserve(c, rest) < 0) {
                c->wr = idx; /* incomplete: never executed */
                c->need_close = 1;
                c->close_code = RCP_ERR_IO;
                snprintf(c->close_msg, sizeof c->close_msg, "out of memory handing a write to the loop");
            } else {
                size_t used = c->pend_len - c->pend_off;
                memmove(c->pend + c->pend_off + rest, c->pend + c->pend_off, used);
                memcpy(c->pend + c->pend_off, buf + off, rest);
                c->pend_len += rest;
                c->ring[idx & c->mask].len = rest;
                c->wr = c->taken = idx;
            }
            fast_handback(c);
            pthread_mutex_unlock(&c->mu);
            conn_ring_loop(c);
            return NULL;
        }
        conn_io_cause(c, CONN_IO_ERR, "write", cause, sizeof cause);
        pthread_mutex_lock(&c->mu);
        c->wr = idx; /* not (completely) written: never executed */
        goto handoff_fail;
    }
    conn_stat_add(&c->st.batches, 1);
    conn_stat_add(&c->st.commands_written, 1);
    fast_rcvtimeo(c, deadline);

    for (;;) {
        ssize_t r;
        if (redisReaderGetReply(c->reader, &rep) != REDIS_OK) {
            code = rcp__conn_reader_failure(c, cause, sizeof cause);
            pthread_mutex_lock(&c->mu);
            goto handoff_fail;
        }
        if (rep)
            break;
        /* A blocking read (the socket is in blocking mode; the loop always
         * passes MSG_DONTWAIT): one system call, as a plain client makes.
         * SO_RCVTIMEO bounds it. */
        r = conn_recv_feed(c, 0);
        if (r > 0)
            continue;
        if (r == CONN_IO_BAD) {
            code = rcp__conn_reader_failure(c, cause, sizeof cause);
            pthread_mutex_lock(&c->mu);
            goto handoff_fail;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            uint64_t now = rcp__now_ns();
            if (deadline && now >= deadline)
                break; /* request timeout */
            if (c->opt.io_timeout_ms > 0 && now >= started + conn_ms_to_ns(c->opt.io_timeout_ms)) {
                snprintf(cause, sizeof cause, "I/O timeout: no reply byte for %d ms",
                         c->opt.io_timeout_ms);
                pthread_mutex_lock(&c->mu);
                goto handoff_fail;
            }
            if (!deadline && c->opt.io_timeout_ms <= 0) {
                /* No receive timeout configured: wait for readability. */
                struct pollfd p;
                p.fd = fd;
                p.events = POLLIN;
                p.revents = 0;
                poll(&p, 1, 100);
            }
            continue;
        }
        conn_io_cause(c, r, "read", cause, sizeof cause);
        pthread_mutex_lock(&c->mu);
        goto handoff_fail;
    }

    pthread_mutex_lock(&c->mu);
    if (rep) {
        int ring;
        c->ring[idx & c->mask].f = NULL;
        c->head = idx + 1;
        c->last_read_ns = rcp__now_ns();
        c->fast_active = 0;
        ring = c->taken < c->tail && conn_want_loop(c);
        if (c->reader->pos < c->reader->len) {
            /* More bytes than our one reply: the server answered something
             * nobody asked. Ours came first; the connection is not to be
             * trusted any more. */
            c->need_close = 1;
            c->close_code = RCP_ERR_PROTOCOL;
            snprintf(c->close_msg, sizeof c->close_msg,
                     "protocol error: a reply arrived with no request waiting for it");
            c->wake_pending = 1;
            ring = 1;
        }
        pthread_mutex_unlock(&c->mu);
        if (ring)
            conn_ring_loop(c);
        conn_stat_add(&c->st.replies, 1);
        conn_stat_add(&c->st.fast_path, 1);
        return rep;
    }
    /* Request timeout: resolve it here, leave the late reply to the loop. */
    c->ring[idx & c->mask].f = NULL;
    c->need_read = 1;
    fast_handback(c);
    pthread_mutex_unlock(&c->mu);
    conn_ring_loop(c);
    conn_stat_add(&c->st.timeouts, 1);
    snprintf(cause, sizeof cause, "%s: request timed out (no reply before its deadline)", c->addr);
    return rcp__reply_error_new(RCP_ERR_TIMEOUT, cause);

handoff_fail:
    /* Mutex held. The loop fails the connection and resolves our future. */
    c->need_close = 1;
    c->close_code = code;
    snprintf(c->close_msg, sizeof c->close_msg, "%s", cause);
    fast_handback(c);
    pthread_mutex_unlock(&c->mu);
    conn_ring_loop(c);
    return NULL;
}

/* Try the lone-caller path. Returns the reply, NULL if not taken (then the
 * caller queues normally), or sets *handed if the request was queued and
 * must be waited for. */
static rcp_reply *try_fast(struct rcp_conn *c, sync_future *s, int argc, const char **argv,
                           const size_t *argvlen, const char *raw, size_t len, int *handed)
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
    pthread_mutex_lock(&c->mu);
    if (c->state != RCP__ST_READY || c->closing || c->fast_active || c->loop_io ||
        c->caller_writing || c->need_close || c->need_read || c->head != c->tail || c->fd < 0) {
        pthread_mutex_unlock(&c->mu);
        if (buf != stackbuf)
            rcp__free(buf);
        return NULL;
    }
    {
        /* Bytes already waiting on an idle connection are not a reply to
         * anything we are about to send (a misbehaving server, or a close):
         * let the loop read and judge them instead of taking them as ours. */
        if (conn_peek_idle(c) >= 0) {
            int ring = !c->need_read;
            c->need_read = 1;
            pthread_mutex_unlock(&c->mu);
            if (ring)
                conn_ring_loop(c);
            if (buf != stackbuf)
                rcp__free(buf);
            return NULL;
        }
    }
    idx = c->tail;
    {
        rcp__slot *sl = &c->ring[idx & c->mask];
        sl->f = &s->f;
        sl->deadline = deadline;
        sl->len = len;
    }
    c->tail = c->taken = c->wr = idx + 1;
    c->fast_active = 1;
    c->fast_idx = idx;
    c->last_read_ns = now;
    conn_stat_add(&c->st.requests, 1);
    pthread_mutex_unlock(&c->mu);

    if (!raw) {
        rcp__format_write(buf, argc, argv, argvlen);
        raw = buf;
    }
    r = fast_io(c, idx, raw, len, deadline);
    if (buf != stackbuf)
        rcp__free(buf);
    if (!r)
        *handed = 1;
    return r;
}

/* fast_only: return NULL (nothing sent) instead of queueing when the
 * lone-caller path is not available. */
rcp_reply *rcp__conn_sync_command(rcp_conn *c, int argc, const char **argv,
                                  const size_t *argvlen, const char *raw, size_t len, int asking,
                                  int timeout_ms, int fast_only)
{
    sync_future s;
    rcp_reply *r;
    int rv, handed = 0;

    memset(&s, 0, sizeof s);
    s.f.resolve = sync_resolve;
    s.f.timeout_ms = timeout_ms;
    s.c = c;
    if (!asking) {
        r = try_fast(c, &s, argc, argv, argvlen, raw, len, &handed);
        if (r)
            return r;
    }
    if (!handed && fast_only)
        return NULL;
    if (!handed) {
        rv = rcp__conn_enqueue(c, &s.f, argc, argv, argvlen, raw, len, asking);
        if (rv != RCP_OK)
            return rcp__conn_error_reply(rv, NULL, "request refused");
    }
    return sync_wait(&s);
}

