/* lib/conn.c: a pipelined connection to one Redis node.
 *
 * Any thread may send. A request is formatted straight into the pending
 * batch under the connection mutex and its future recorded in the ring (see
 * conn_int.h). The sender that opens a batch pokes the I/O loop; the loop
 * takes the batch (capped in commands and bytes), writes it with as few
 * send() calls as the socket allows, reads replies with a hiredis reader and
 * resolves futures in order, outside the mutex.
 *
 * A lone synchronous caller that finds the connection idle does its own
 * write and read (the fast path): no loop hop, no wake. It hands the socket
 * back to the loop on anything unusual (partial write, timeout, error).
 *
 * Every failure of the connection goes through conn_fail on the loop
 * thread, which resolves written requests with RCP_ERR_IO and unwritten ones
 * with RCP_ERR_NOT_SENT, so the cluster layer knows what is safe to resend. */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "conn_int.h"
#include "format.h"
#include "loop.h"
#include "reply.h"

#define RBUF_SIZE (64 * 1024)
#define DISPATCH_MAX 128
#define FAST_STACK_BUF 4096

void rcp_conn_options_init(rcp_conn_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 6379;
    o->connect_timeout_ms = 2000;
    o->request_timeout_ms = 5000;
    o->io_timeout_ms = 10000;
    o->io_threads = 1;
    o->batch_delay_us = 0;
    o->max_batch_commands = 1000;
    o->max_batch_bytes = 1024 * 1024;
    o->max_inflight = 4096;
    o->max_pending_bytes = 64u * 1024 * 1024;
    o->max_request_bytes = 512u * 1024 * 1024;
    o->queue_policy = RCP_QUEUE_BLOCK;
    o->reconnect_min_ms = 10;
    o->reconnect_max_ms = 2000;
    o->keepalive_s = 60;
    o->fast_path = 1;
}

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

static uint64_t ms_to_ns(long long ms)
{
    return (uint64_t)ms * 1000000ull;
}

static void stat_add(_Atomic uint64_t *s, uint64_t v)
{
    atomic_fetch_add_explicit(s, v, memory_order_relaxed);
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static void set_timer(struct rcp_conn *c, uint64_t t)
{
    uint64_t cur = atomic_load_explicit(&c->timer_at, memory_order_relaxed);
    while (t < cur &&
           !atomic_compare_exchange_weak_explicit(&c->timer_at, &cur, t, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

static void emit(struct rcp_conn *c, int type, int err, const char *msg)
{
    rcp_event ev;
    if (!c->opt.event_cb)
        return;
    ev.type = type;
    ev.err = err;
    ev.host = c->host;
    ev.port = c->opt.port;
    ev.message = msg;
    c->opt.event_cb(&ev, c->opt.event_data);
}

static void resolve_error(rcp_future *f, int code, const char *msg)
{
    rcp_reply r;
    rcp__reply_error_init(&r, code, msg);
    f->resolve(f, &r);
}

/* Mutex held. The state is also read without the mutex (rcp__conn_healthy,
 * by the cluster's replica choice), so it is stored atomically. */
static void set_state(struct rcp_conn *c, int st)
{
    __atomic_store_n(&c->state, st, __ATOMIC_RELAXED);
}

/* Mutex held. Append one slot; bytes must already be in the pending buffer. */
static void push_slot(struct rcp_conn *c, rcp_future *f, uint64_t deadline, size_t len)
{
    rcp__slot *s = &c->ring[c->tail & c->mask];
    s->f = f;
    s->deadline = deadline;
    s->len = len;
    c->tail++;
    if (deadline && deadline < c->min_deadline) {
        c->min_deadline = deadline;
        set_timer(c, deadline);
    }
}

/* Mutex held. Room for `len` more pending bytes (pend_off compacted). */
static int pend_reserve(struct rcp_conn *c, size_t len)
{
    size_t used = c->pend_len - c->pend_off;
    if (c->pend_off && (c->pend_off >= c->pend_cap / 2 || c->pend_len + len > c->pend_cap)) {
        memmove(c->pend, c->pend + c->pend_off, used);
        c->pend_len = used;
        c->pend_off = 0;
    }
    if (c->pend_len + len > c->pend_cap) {
        size_t n = c->pend_cap ? c->pend_cap : 4096;
        char *p;
        while (n < c->pend_len + len)
            n *= 2;
        p = rcp__realloc(c->pend, n);
        if (!p)
            return -1;
        c->pend = p;
        c->pend_cap = n;
    }
    return 0;
}

/* Mutex held. Ask the loop to flush the batch, once per batch. The caller
 * rings (outside the mutex where it can) when this returns 1. */
static int want_loop(struct rcp_conn *c)
{
    if (c->wake_pending || c->fast_active)
        return 0;
    c->wake_pending = 1;
    c->batch_opened_ns = c->opt.batch_delay_us ? rcp__now_ns() : 0;
    return 1;
}

/* Mutex held. Make sure the loop checks the I/O timeout in time. */
static void arm_io_timer(struct rcp_conn *c)
{
    if (c->opt.io_timeout_ms > 0)
        set_timer(c, c->last_read_ns + ms_to_ns(c->opt.io_timeout_ms));
}

/* Why the reply reader failed: out of memory (RCP_ERR_OOM) or bytes that
 * are not RESP (RCP_ERR_PROTOCOL); cause gets the text. Either way the
 * connection is closed: the reader's state is lost. */
static int reader_failure(struct rcp_conn *c, char *cause, size_t len)
{
    if (c->reader->err == REDIS_ERR_OOM) {
        snprintf(cause, len, "out of memory reading a reply");
        return RCP_ERR_OOM;
    }
    snprintf(cause, len, "protocol error: %s", c->reader->errstr);
    return RCP_ERR_PROTOCOL;
}

static void ring_loop(struct rcp_conn *c)
{
    if (rcp__loop_notify(c->loop, &c->src))
        stat_add(&c->st.loop_wakes, 1);
}

/* ------------------------------------------------------------------ */
/* failure, timeouts                                                   */

static void close_socket(struct rcp_conn *c)
{
    if (c->fd >= 0) {
        rcp__loop_unwatch(c->loop, c->fd);
        close(c->fd);
        c->fd = -1;
    }
}

static unsigned next_backoff(struct rcp_conn *c)
{
    unsigned base = c->backoff_ms ? c->backoff_ms : (unsigned)c->opt.reconnect_min_ms;
    unsigned jitter;
    if (base < 1)
        base = 1;
    c->backoff_ms = base * 2;
    if (c->backoff_ms > (unsigned)c->opt.reconnect_max_ms)
        c->backoff_ms = (unsigned)c->opt.reconnect_max_ms;
    /* +-25% so that many clients of one restarted server spread out. */
    jitter = base / 2 ? (unsigned)(xorshift(&c->rng) % (base / 2 + 1)) : 0;
    return base - base / 4 + jitter;
}

/* Loop thread. Resolves everything outstanding and drops the socket. code
 * is the cause (RCP_ERR_IO-like failures, RCP_ERR_CONNECT, RCP_ERR_AUTH,
 * RCP_ERR_PROTOCOL, RCP_ERR_CLOSED). */
static void conn_fail(struct rcp_conn *c, int code, const char *cause)
{
    char written_msg[400], unsent_msg[400];
    uint64_t i, n_written = 0, n = 0;
    int was_state, closing;
    int written_code = code == RCP_ERR_CLOSED ? RCP_ERR_CLOSED : RCP_ERR_IO;
    int unsent_code = code == RCP_ERR_CLOSED ? RCP_ERR_CLOSED : RCP_ERR_NOT_SENT;

    if (code == RCP_ERR_PROTOCOL || code == RCP_ERR_OOM)
        written_code = code;
    snprintf(written_msg, sizeof written_msg, "%s: %s (the request was written; it may have been applied)",
             c->addr, cause);
    snprintf(unsent_msg, sizeof unsent_msg, "%s: %s (the request was not sent)", c->addr, cause);

    pthread_mutex_lock(&c->mu);
    was_state = c->state;
    closing = c->closing;
    snprintf(c->last_err, sizeof c->last_err, "%s: %s", c->addr, cause);
    for (i = c->head; i < c->tail; i++) {
        rcp__slot *s = &c->ring[i & c->mask];
        if (s->f) {
            if (i < c->wr)
                n_written++;
            c->scratch[n++] = s->f;
            s->f = NULL;
        }
    }
    c->head = c->wr = c->taken = c->tail = 0;
    c->pend_len = c->pend_off = 0;
    c->wlen = c->woff = c->wslot_off = 0;
    c->wake_pending = 0;
    c->need_close = 0;
    c->need_read = 0;
    c->hs_end = 0;
    c->min_deadline = UINT64_MAX;
    close_socket(c);
    if (c->reader) {
        redisReaderFree(c->reader);
        c->reader = rcp__reader_new();
    }
    if (was_state == RCP__ST_READY)
        stat_add(&c->st.disconnects, 1);
    if (closing || (c->once && c->ever_connected)) {
        set_state(c, RCP__ST_CLOSED);
    } else {
        set_state(c, RCP__ST_DISCONNECTED);
        c->reconnect_at = rcp__now_ns() + ms_to_ns(next_backoff(c));
        set_timer(c, c->reconnect_at);
    }
    if (c->open_result < 0 && (code == RCP_ERR_CONNECT || code == RCP_ERR_AUTH || closing ||
                               was_state != RCP__ST_READY)) {
        c->open_result = code == RCP_ERR_CLOSED ? RCP_ERR_CLOSED
                         : code == RCP_ERR_AUTH ? RCP_ERR_AUTH
                                                : RCP_ERR_CONNECT;
        snprintf(c->open_msg, sizeof c->open_msg, "%s: %s", c->addr, cause);
    }
    pthread_cond_broadcast(&c->state_cv);
    if (c->space_waiters)
        pthread_cond_broadcast(&c->space_cv);
    pthread_mutex_unlock(&c->mu);

    /* Slots were in ring order: the first n_written were written. */
    for (i = 0; i < n; i++) {
        rcp_future *f = c->scratch[i];
        if (i < n_written)
            resolve_error(f, written_code, written_msg);
        else
            resolve_error(f, unsent_code, unsent_msg);
    }
    /* A refused handshake is a failed connect attempt, not the loss of a
     * ready connection. */
    if (was_state == RCP__ST_READY)
        emit(c, RCP_EVENT_DISCONNECTED, code, cause);
    else if (code != RCP_ERR_CLOSED)
        emit(c, RCP_EVENT_CONNECT_FAILED, code, cause);
    if (closing) {
        emit(c, RCP_EVENT_CLOSED, RCP_ERR_CLOSED, "handle closed");
        /* Only now may rcp_conn_close free the handle: the futures and
         * events above still used it. */
        pthread_mutex_lock(&c->mu);
        c->closed = 1;
        pthread_cond_broadcast(&c->state_cv);
        pthread_mutex_unlock(&c->mu);
    }
}

/* Loop thread: resolve requests whose deadline passed. */
static void expire(struct rcp_conn *c, uint64_t now)
{
    char msg[400];
    uint64_t i, n = 0, min = UINT64_MAX;
    pthread_mutex_lock(&c->mu);
    if (c->min_deadline > now) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    for (i = c->head; i < c->tail; i++) {
        rcp__slot *s = &c->ring[i & c->mask];
        if (!s->f || !s->deadline || (c->fast_active && i == c->fast_idx))
            continue;
        if (s->deadline <= now) {
            c->scratch[n++] = s->f;
            s->f = NULL;
        } else if (s->deadline < min) {
            min = s->deadline;
        }
    }
    c->min_deadline = min;
    if (n && c->space_waiters)
        pthread_cond_broadcast(&c->space_cv);
    pthread_mutex_unlock(&c->mu);
    if (!n)
        return;
    stat_add(&c->st.timeouts, n);
    snprintf(msg, sizeof msg, "%s: request timed out (no reply before its deadline)", c->addr);
    for (i = 0; i < n; i++)
        resolve_error(c->scratch[i], RCP_ERR_TIMEOUT, msg);
}

/* ------------------------------------------------------------------ */
/* connecting and the handshake                                        */

static void hs_resolve(rcp_future *f, rcp_reply *r)
{
    rcp__hs_future *h = (rcp__hs_future *)f;
    struct rcp_conn *c = h->c;
    /* Client-side failures mean the connection is already being failed. */
    if (r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_SERVER && !c->hs_failed) {
        c->hs_failed = 1;
        snprintf(c->hs_msg, sizeof c->hs_msg, "handshake refused: %.*s", (int)r->len, r->str);
    }
}

/* Mutex held, nothing written yet on this connection. Put AUTH, CLIENT
 * SETNAME and READONLY in front of everything: requests may already be
 * queued (a new connection accepts them before its first connect), and
 * none of them may reach the server before the handshake. */
static int queue_handshake(struct rcp_conn *c)
{
    const char *argv[3];
    char buf[1200];
    size_t lens[3], total = 0, used, i;
    int argc, k = 0, n;
    uint64_t j;

    if (c->password) {
        argc = 0;
        argv[argc++] = "AUTH";
        if (c->username)
            argv[argc++] = c->username;
        argv[argc++] = c->password;
        lens[k] = rcp__format_len(argc, argv, NULL);
        if (total + lens[k] > sizeof buf)
            return -1;
        rcp__format_write(buf + total, argc, argv, NULL);
        total += lens[k++];
    }
    if (c->client_name) {
        argv[0] = "CLIENT";
        argv[1] = "SETNAME";
        argv[2] = c->client_name;
        lens[k] = rcp__format_len(3, argv, NULL);
        if (total + lens[k] > sizeof buf)
            return -1;
        rcp__format_write(buf + total, 3, argv, NULL);
        total += lens[k++];
    }
    if (c->readonly) {
        argv[0] = "READONLY";
        lens[k] = rcp__format_len(1, argv, NULL);
        rcp__format_write(buf + total, 1, argv, NULL);
        total += lens[k++];
    }
    n = k;
    if (n) {
        /* Bytes: the handshake first, then what was queued. */
        if (pend_reserve(c, total) < 0)
            return -1;
        used = c->pend_len - c->pend_off;
        memmove(c->pend + c->pend_off + total, c->pend + c->pend_off, used);
        memcpy(c->pend + c->pend_off, buf, total);
        c->pend_len += total;
        /* Slots: shift the queued ones back by n (the ring has room: its
         * size leaves space for the handshake beyond max_inflight). */
        for (j = c->tail; j > c->head; j--)
            c->ring[(j - 1 + (uint64_t)n) & c->mask] = c->ring[(j - 1) & c->mask];
        for (i = 0; i < (size_t)n; i++) {
            rcp__slot *sl = &c->ring[(c->head + i) & c->mask];
            sl->f = &c->hs[i].f;
            sl->deadline = 0;
            sl->len = lens[i];
        }
        c->tail += (uint64_t)n;
    }
    c->hs_end = c->head + (uint64_t)n;
    c->hs_failed = 0;
    return 0;
}

static void set_sockopts(struct rcp_conn *c, int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (c->opt.keepalive_s > 0) {
        int idle = c->opt.keepalive_s, intvl = c->opt.keepalive_s / 3 ? c->opt.keepalive_s / 3 : 1;
        int cnt = 3;
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    }
}

/* Once connected the socket is put in blocking mode with a receive
 * timeout: the loop passes MSG_DONTWAIT on every call, and the fast path
 * gets a plain blocking read. */
static void set_blocking(struct rcp_conn *c, int fd)
{
    int fl = fcntl(fd, F_GETFL);
    int ms = c->opt.request_timeout_ms;
    struct timeval tv;
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (c->opt.io_timeout_ms > 0 && (ms <= 0 || c->opt.io_timeout_ms < ms))
        ms = c->opt.io_timeout_ms;
    if (ms > 0) {
        tv.tv_sec = ms / 1000;
        tv.tv_usec = (ms % 1000) * 1000;
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
}

/* Loop thread. Start a non-blocking connect; failures go to conn_fail. */
static void start_connect(struct rcp_conn *c)
{
    struct addrinfo hints, *res = NULL, *ai;
    char port[16], cause[256];
    int rv, fd = -1, err = 0;

    /* From here the connection is "connecting": senders queue behind the
     * handshake instead of being refused. */
    pthread_mutex_lock(&c->mu);
    c->attempts++;
    set_state(c, RCP__ST_CONNECTING);
    c->connect_deadline = rcp__now_ns() + ms_to_ns(c->opt.connect_timeout_ms);
    set_timer(c, c->connect_deadline);
    pthread_mutex_unlock(&c->mu);
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof port, "%d", c->opt.port);
    rv = getaddrinfo(c->host, port, &hints, &res);
    if (rv != 0) {
        snprintf(cause, sizeof cause, "cannot resolve host: %s", gai_strerror(rv));
        conn_fail(c, RCP_ERR_CONNECT, cause);
        return;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        set_sockopts(c, fd);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS)
            break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(cause, sizeof cause, "connect failed: %s", strerror(err));
        conn_fail(c, RCP_ERR_CONNECT, cause);
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->fd = fd;
    if (queue_handshake(c) < 0) {
        pthread_mutex_unlock(&c->mu);
        conn_fail(c, RCP_ERR_CONNECT, "out of memory queueing the handshake");
        return;
    }
    pthread_mutex_unlock(&c->mu);
    c->armed = 1;
    if (rcp__loop_watch(c->loop, fd, &c->src) < 0) {
        snprintf(cause, sizeof cause, "cannot watch the socket: %s", strerror(errno));
        conn_fail(c, RCP_ERR_CONNECT, cause);
    }
}

/* Mutex held. The handshake is complete. Returns 1 if an event is due. */
static int become_ready(struct rcp_conn *c)
{
    set_state(c, RCP__ST_READY);
    c->backoff_ms = 0;
    c->last_read_ns = rcp__now_ns();
    if (c->ever_connected)
        stat_add(&c->st.reconnects, 1);
    c->ever_connected = 1;
    if (c->open_result < 0)
        c->open_result = RCP_OK;
    pthread_cond_broadcast(&c->state_cv);
    return 1;
}

/* ------------------------------------------------------------------ */
/* the loop side: write, read, dispatch                                */

/* Mutex held. Move up to the caps' worth of pending requests to wbuf.
 * Returns 0 on OOM. */
static int take_batch(struct rcp_conn *c)
{
    uint64_t limit = c->state == RCP__ST_READY ? c->tail : c->hs_end;
    uint64_t i = c->taken, n = 0;
    size_t bytes = 0;
    while (i < limit && n < c->opt.max_batch_commands) {
        size_t l = c->ring[i & c->mask].len;
        if (n && bytes + l > c->opt.max_batch_bytes)
            break;
        bytes += l;
        i++;
        n++;
    }
    if (!n)
        return 1;
    if (c->pend_off == 0 && bytes == c->pend_len) {
        /* The common case: take the whole buffer without copying. */
        char *t = c->wbuf;
        size_t tc = c->wcap;
        c->wbuf = c->pend;
        c->wcap = c->pend_cap;
        c->pend = t;
        c->pend_cap = tc;
        c->pend_len = 0;
    } else {
        if (bytes > c->wcap) {
            char *p = rcp__realloc(c->wbuf, bytes);
            if (!p)
                return 0;
            c->wbuf = p;
            c->wcap = bytes;
        }
        memcpy(c->wbuf, c->pend + c->pend_off, bytes);
        c->pend_off += bytes;
        if (c->pend_off == c->pend_len)
            c->pend_off = c->pend_len = 0;
    }
    c->wlen = bytes;
    c->woff = 0;
    c->wslot_off = 0;
    c->taken = i;
    stat_add(&c->st.batches, 1);
    stat_add(&c->st.commands_written, n);
    return 1;
}

/* Loop thread: listen for data again before writing or reading. */
static void arm(struct rcp_conn *c)
{
    if (!c->armed && c->fd >= 0 && rcp__loop_rearm(c->loop, c->fd, &c->src, 1) == 0)
        c->armed = 1;
}

/* Loop thread, before the first write after a lone caller had the socket
 * (the loop was not listening for data meanwhile). With nothing in flight,
 * any byte already waiting answers no request: the connection cannot be
 * trusted (our batch, not written yet, fails with RCP_ERR_NOT_SENT). A
 * closed socket is found the same way. Returns 0 if the connection was
 * failed. */
static int stray_check(struct rcp_conn *c)
{
    char b;
    ssize_t pk;
    int idle;
    pthread_mutex_lock(&c->mu);
    idle = c->head == c->wr;
    pthread_mutex_unlock(&c->mu);
    if (!idle || c->fd < 0)
        return 1;
    pk = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (pk > 0) {
        conn_fail(c, RCP_ERR_PROTOCOL, "protocol error: a reply arrived with no request waiting for it");
        return 0;
    }
    if (pk == 0) {
        conn_fail(c, RCP_ERR_IO, "connection closed by the server");
        return 0;
    }
    return 1;
}

/* Loop thread. Write what can be written. Returns 0 if the connection
 * failed (already handled). */
static int do_write(struct rcp_conn *c)
{
    int rounds;
    for (rounds = 0; rounds < 8; rounds++) {
        uint64_t now = 0;
        pthread_mutex_lock(&c->mu);
        if (c->wlen == c->woff) {
            if (c->state != RCP__ST_READY && c->state != RCP__ST_HANDSHAKE) {
                pthread_mutex_unlock(&c->mu);
                return 1;
            }
            if (c->opt.batch_delay_us && c->taken < c->tail && c->batch_opened_ns) {
                now = rcp__now_ns();
                if (now < c->batch_opened_ns + (uint64_t)c->opt.batch_delay_us * 1000) {
                    /* Let the batch fill; the timer flushes it. */
                    c->wake_pending = 1;
                    set_timer(c, c->batch_opened_ns + (uint64_t)c->opt.batch_delay_us * 1000);
                    pthread_mutex_unlock(&c->mu);
                    return 1;
                }
            }
            if (!take_batch(c)) {
                pthread_mutex_unlock(&c->mu);
                conn_fail(c, RCP_ERR_IO, "out of memory taking a batch");
                return 0;
            }
            if (c->taken == c->tail) {
                c->wake_pending = 0;
                c->batch_opened_ns = 0;
            }
        }
        pthread_mutex_unlock(&c->mu);
        if (c->wlen == c->woff)
            return 1;
        if (!c->armed && !stray_check(c))
            return 0;
        arm(c);
        while (c->woff < c->wlen) {
            ssize_t w = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                c->woff += (size_t)w;
                stat_add(&c->st.write_calls, 1);
                stat_add(&c->st.bytes_out, (uint64_t)w);
                continue;
            }
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            {
                char cause[200];
                snprintf(cause, sizeof cause, "write failed: %s", strerror(errno));
                /* Account what was fully written before failing. */
                pthread_mutex_lock(&c->mu);
                while (c->wr < c->taken &&
                       c->woff >= c->wslot_off + c->ring[c->wr & c->mask].len) {
                    c->wslot_off += c->ring[c->wr & c->mask].len;
                    c->wr++;
                }
                pthread_mutex_unlock(&c->mu);
                conn_fail(c, RCP_ERR_IO, cause);
                return 0;
            }
        }
        pthread_mutex_lock(&c->mu);
        while (c->wr < c->taken && c->woff >= c->wslot_off + c->ring[c->wr & c->mask].len) {
            if (c->head == c->wr) {
                c->last_read_ns = rcp__now_ns(); /* the I/O timeout counts from here */
                arm_io_timer(c);
            }
            c->wslot_off += c->ring[c->wr & c->mask].len;
            c->wr++;
        }
        if (c->woff == c->wlen)
            c->wlen = c->woff = c->wslot_off = 0;
        pthread_mutex_unlock(&c->mu);
        if (c->wlen)
            return 1; /* EAGAIN: EPOLLOUT will call us back */
    }
    /* Still more queued: come back after serving reads. */
    pthread_mutex_lock(&c->mu);
    c->wake_pending = 1;
    pthread_mutex_unlock(&c->mu);
    ring_loop(c);
    return 1;
}

/* Loop thread (or the fast path). Hand parsed replies to their futures in
 * order. Returns 0 if a reply had no request (protocol violation). */
static int dispatch(struct rcp_conn *c, rcp_reply **replies, size_t n)
{
    rcp_future *futs[DISPATCH_MAX];
    size_t i, late = 0;
    int ok = 1;
    pthread_mutex_lock(&c->mu);
    for (i = 0; i < n; i++) {
        rcp__slot *s;
        if (c->head == c->wr) {
            ok = 0;
            break;
        }
        s = &c->ring[c->head & c->mask];
        futs[i] = s->f;
        s->f = NULL;
        if (!futs[i])
            late++;
        c->head++;
    }
    if (c->space_waiters)
        pthread_cond_broadcast(&c->space_cv);
    pthread_mutex_unlock(&c->mu);
    stat_add(&c->st.replies, i);
    if (late)
        stat_add(&c->st.late_replies, late);
    for (size_t k = 0; k < i; k++) {
        if (futs[k]) {
            futs[k]->resolve(futs[k], replies[k]);
            rcp__reply_release(replies[k]);
        } else {
            rcp_reply_free(replies[k]);
        }
    }
    for (size_t k = i; k < n; k++)
        rcp_reply_free(replies[k]);
    return ok;
}

/* Loop thread. Read until EAGAIN. Returns 0 if the connection failed. */
static int do_read(struct rcp_conn *c)
{
    rcp_reply *replies[DISPATCH_MAX];
    size_t n = 0;
    for (;;) {
        ssize_t r = recv(c->fd, c->rbuf, c->rbuf_cap, MSG_DONTWAIT);
        if (r > 0) {
            void *rep;
            stat_add(&c->st.read_calls, 1);
            stat_add(&c->st.bytes_in, (uint64_t)r);
            c->last_read_ns = rcp__now_ns();
            if (redisReaderFeed(c->reader, c->rbuf, (size_t)r) != REDIS_OK)
                goto protocol;
            for (;;) {
                rep = NULL;
                if (redisReaderGetReply(c->reader, &rep) != REDIS_OK)
                    goto protocol;
                if (!rep)
                    break;
                replies[n++] = rep;
                if (n == DISPATCH_MAX) {
                    if (!dispatch(c, replies, n)) {
                        n = 0;
                        goto extra;
                    }
                    n = 0;
                }
            }
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n && !dispatch(c, replies, n))
            goto extra;
        if (r == 0) {
            conn_fail(c, RCP_ERR_IO, "connection closed by the server");
        } else {
            char cause[200];
            snprintf(cause, sizeof cause, "read failed: %s", strerror(errno));
            conn_fail(c, RCP_ERR_IO, cause);
        }
        return 0;
    }
    if (n && !dispatch(c, replies, n))
        goto extra;
    return 1;
protocol : {
    char cause[200];
    if (n && !dispatch(c, replies, n))
        goto extra;
    conn_fail(c, reader_failure(c, cause, sizeof cause), cause);
    return 0;
}
extra:
    conn_fail(c, RCP_ERR_PROTOCOL, "protocol error: a reply arrived with no request waiting for it");
    return 0;
}

/* Loop thread, after replies were dispatched: finish the handshake. */
static int check_handshake(struct rcp_conn *c)
{
    int ready = 0;
    if (c->hs_failed) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", c->hs_msg);
        conn_fail(c, RCP_ERR_AUTH, msg);
        return 0;
    }
    pthread_mutex_lock(&c->mu);
    if (c->state == RCP__ST_HANDSHAKE && c->head >= c->hs_end)
        ready = become_ready(c);
    pthread_mutex_unlock(&c->mu);
    if (ready)
        emit(c, RCP_EVENT_CONNECTED, RCP_OK, "connected");
    return 1;
}

static void process(struct rcp_conn *c, uint32_t events);

/* The loop's entry: readiness of the socket, or 0 when notified. */
static void conn_process(rcp__loop_src *src, uint32_t events)
{
    struct rcp_conn *c = (struct rcp_conn *)((char *)src - offsetof(struct rcp_conn, src));
    pthread_mutex_lock(&c->mu);
    if (c->fast_active) {
        /* A lone caller owns the socket right now; it hands back. If the
         * socket woke us for its reply, stop listening for data until we
         * write again: a lone caller should cost the loop nothing. */
        int fd = c->fd;
        pthread_mutex_unlock(&c->mu);
        if ((events & RCP__EV_READ) && c->armed && fd >= 0 && rcp__loop_rearm(c->loop, fd, &c->src, 0) == 0)
            c->armed = 0;
        return;
    }
    /* While the loop may read, no caller may take the fast path: both
     * would read the same socket. */
    c->loop_io = 1;
    pthread_mutex_unlock(&c->mu);
    process(c, events);
    pthread_mutex_lock(&c->mu);
    c->loop_io = 0;
    pthread_mutex_unlock(&c->mu);
}

static void process(struct rcp_conn *c, uint32_t events)
{
    int state, need_close, code, need_read;
    char cause[512];

    pthread_mutex_lock(&c->mu);
    state = c->state;
    need_close = c->need_close;
    need_read = c->need_read;
    c->need_read = 0;
    code = c->close_code;
    memcpy(cause, c->close_msg, sizeof cause);
    if (c->closing && state != RCP__ST_CLOSED) {
        need_close = 1;
        code = RCP_ERR_CLOSED;
        snprintf(cause, sizeof cause, "handle closed");
    }
    if (!(c->wake_pending && c->batch_opened_ns))
        c->wake_pending = 0;
    pthread_mutex_unlock(&c->mu);

    if (state == RCP__ST_CLOSED)
        return;
    if (need_close) {
        conn_fail(c, code, cause);
        return;
    }
    if (state == RCP__ST_DISCONNECTED)
        return;
    if (state == RCP__ST_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        int ready = 0;
        if (!(events & (RCP__EV_WRITE | RCP__EV_ERR | RCP__EV_HUP)))
            return;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err) {
            snprintf(cause, sizeof cause, "connect failed: %s", strerror(err));
            conn_fail(c, RCP_ERR_CONNECT, cause);
            return;
        }
        set_blocking(c, c->fd);
        pthread_mutex_lock(&c->mu);
        if (c->hs_end > c->head)
            set_state(c, RCP__ST_HANDSHAKE);
        else
            ready = become_ready(c);
        pthread_mutex_unlock(&c->mu);
        if (ready)
            emit(c, RCP_EVENT_CONNECTED, RCP_OK, "connected");
    }
    if (need_read)
        arm(c);
    if (events & (RCP__EV_READ | RCP__EV_ERR | RCP__EV_HUP | RCP__EV_RDHUP) || need_read) {
        if (!do_read(c))
            return;
        if (!check_handshake(c))
            return;
    }
    do_write(c);
}

static uint64_t next_timer(struct rcp_conn *c)
{
    return atomic_load_explicit(&c->timer_at, memory_order_relaxed);
}

static uint64_t conn_next_timer(rcp__loop_src *src)
{
    return next_timer((struct rcp_conn *)((char *)src - offsetof(struct rcp_conn, src)));
}

static uint64_t conn_timers(rcp__loop_src *src, uint64_t now)
{
    struct rcp_conn *c = (struct rcp_conn *)((char *)src - offsetof(struct rcp_conn, src));
    uint64_t next = UINT64_MAX;
    int state, fast, flush = 0, wake_flush;
    uint64_t waiting;

    atomic_store_explicit(&c->timer_at, UINT64_MAX, memory_order_relaxed);
    expire(c, now);

    pthread_mutex_lock(&c->mu);
    state = c->state;
    fast = c->fast_active;
    waiting = c->wr - c->head;
    wake_flush = c->wake_pending && c->batch_opened_ns;
    if (c->min_deadline < next)
        next = c->min_deadline;
    pthread_mutex_unlock(&c->mu);

    if (state == RCP__ST_CLOSED)
        return UINT64_MAX;
    if (state == RCP__ST_DISCONNECTED) {
        if (c->closing)
            return UINT64_MAX;
        if (now >= c->reconnect_at) {
            start_connect(c);
            return next_timer(c);
        }
        if (c->reconnect_at < next)
            next = c->reconnect_at;
    } else if (state == RCP__ST_CONNECTING || state == RCP__ST_HANDSHAKE) {
        if (now >= c->connect_deadline && !fast) {
            conn_fail(c, RCP_ERR_CONNECT, "connect/handshake timed out");
            return next_timer(c);
        }
        if (c->connect_deadline < next)
            next = c->connect_deadline;
    } else if (state == RCP__ST_READY && waiting && c->opt.io_timeout_ms > 0 && !fast) {
        uint64_t limit = c->last_read_ns + ms_to_ns(c->opt.io_timeout_ms);
        if (now >= limit) {
            char cause[120];
            snprintf(cause, sizeof cause, "I/O timeout: no reply byte for %d ms", c->opt.io_timeout_ms);
            conn_fail(c, RCP_ERR_IO, cause);
            return next_timer(c);
        }
        if (limit < next)
            next = limit;
    }
    if (wake_flush) {
        uint64_t due = 0;
        pthread_mutex_lock(&c->mu);
        if (c->wake_pending && c->batch_opened_ns) {
            due = c->batch_opened_ns + (uint64_t)c->opt.batch_delay_us * 1000;
            if (now >= due) {
                c->batch_opened_ns = 0;
                flush = 1;
            }
        }
        pthread_mutex_unlock(&c->mu);
        if (flush)
            conn_process(&c->src, 0);
        else if (due && due < next)
            next = due;
    }
    set_timer(c, next);
    return next_timer(c);
}

static const rcp__loop_src_ops conn_src_ops = {conn_process, conn_next_timer, conn_timers};

/* ------------------------------------------------------------------ */
/* open / close                                                        */

static void conn_free(struct rcp_conn *c)
{
    unsigned i;
    if (!c)
        return;
    if (c->reader)
        redisReaderFree(c->reader);
    for (i = 0; i < c->nowned; i++)
        rcp__loop_free(c->owned_loops[i]);
    rcp__free(c->owned_loops);
    rcp__free(c->ring);
    rcp__free(c->scratch);
    rcp__free(c->pend);
    rcp__free(c->wbuf);
    rcp__free(c->rbuf);
    rcp__free(c->host);
    rcp__free(c->username);
    rcp__free(c->password);
    rcp__free(c->client_name);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->space_cv);
    pthread_cond_destroy(&c->state_cv);
    rcp__free(c);
}

static int validate(const rcp_conn_options *o)
{
    if (!o || !o->host || !*o->host || o->port <= 0 || o->port > 65535)
        return 0;
    if (o->max_inflight < 1 || o->max_batch_commands < 1 || o->max_batch_bytes < 1)
        return 0;
    if (o->max_inflight > (1u << 24))
        return 0;
    if (o->connect_timeout_ms <= 0 || o->reconnect_min_ms < 0 ||
        o->reconnect_max_ms < o->reconnect_min_ms)
        return 0;
    if (o->queue_policy != RCP_QUEUE_BLOCK && o->queue_policy != RCP_QUEUE_FAIL)
        return 0;
    return 1;
}

int rcp__conn_create(rcp__loop *loop, const rcp_conn_options *o, unsigned flags,
                     struct rcp_conn **out)
{
    struct rcp_conn *c;
    pthread_condattr_t ca;
    uint64_t cap = 1;

    *out = NULL;
    if (!validate(o))
        return RCP_ERR_INVALID;
    c = rcp__calloc(1, sizeof(*c));
    if (!c)
        return RCP_ERR_OOM;
    c->opt = *o;
    {
        /* Critical sections are a few hundred ns (a memcpy of one request):
         * spinning briefly beats sleeping in the kernel when 64 callers
         * queue on one connection. */
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
        pthread_mutex_init(&c->mu, &ma);
        pthread_mutexattr_destroy(&ma);
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->space_cv, &ca);
    pthread_cond_init(&c->state_cv, &ca);
    pthread_condattr_destroy(&ca);
    c->fd = -1;
    c->open_result = -1;
    c->min_deadline = UINT64_MAX;
    atomic_init(&c->timer_at, UINT64_MAX);
    c->loop = loop;
    c->rng = rcp__now_ns() ^ (uint64_t)(uintptr_t)c;
    while (cap < (uint64_t)o->max_inflight + 4) /* + the handshake's slots */
        cap <<= 1;
    c->cap = cap;
    c->mask = cap - 1;
    c->host = rcp__strdup(o->host);
    c->username = o->username ? rcp__strdup(o->username) : NULL;
    c->password = o->password ? rcp__strdup(o->password) : NULL;
    c->client_name = o->client_name ? rcp__strdup(o->client_name) : NULL;
    c->ring = rcp__calloc(cap, sizeof(rcp__slot));
    c->scratch = rcp__calloc(cap, sizeof(rcp_future *));
    c->rbuf_cap = RBUF_SIZE;
    c->rbuf = rcp__malloc(c->rbuf_cap);
    c->reader = rcp__reader_new();
    if (!c->host || (o->username && !c->username) || (o->password && !c->password) ||
        (o->client_name && !c->client_name) || !c->ring || !c->scratch || !c->rbuf ||
        !c->reader) {
        conn_free(c);
        return RCP_ERR_OOM;
    }
    c->opt.host = c->host;
    c->opt.username = c->username;
    c->opt.password = c->password;
    c->opt.client_name = c->client_name;
    if (strchr(c->host, ':'))
        snprintf(c->addr, sizeof c->addr, "[%s]:%d", c->host, o->port);
    else
        snprintf(c->addr, sizeof c->addr, "%s:%d", c->host, o->port);
    for (int k = 0; k < 3; k++) {
        c->hs[k].c = c;
        c->hs[k].f.resolve = hs_resolve;
    }
    c->src.ops = &conn_src_ops;
    c->readonly = (flags & RCP__CONN_READONLY) != 0;
    c->once = (flags & RCP__CONN_ONCE) != 0;
    set_state(c, RCP__ST_DISCONNECTED);
    c->reconnect_at = 0;
    if (loop && rcp__loop_attach(loop, &c->src) < 0) {
        conn_free(c);
        return RCP_ERR_OOM;
    }
    *out = c;
    if (loop) {
        /* The loop connects on its first timer pass. */
        set_timer(c, 0);
        rcp__loop_notify(loop, &c->src);
    }
    return RCP_OK;
}

int rcp_conn_open(const rcp_conn_options *o, rcp_conn **out, char *errbuf, size_t errbuf_len)
{
    struct rcp_conn *c = NULL;
    rcp__loop **loops;
    unsigned n, i;
    int rv;
    struct timespec ts;
    uint64_t deadline;

    if (errbuf && errbuf_len)
        errbuf[0] = '\0';
    if (!out) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "rcp_conn_open: out is NULL");
        return RCP_ERR_INVALID;
    }
    *out = NULL;
    if (!validate(o)) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "rcp_conn_open: invalid options (NULL, host, port, caps or timeouts)");
        return RCP_ERR_INVALID;
    }
    n = o->io_threads ? o->io_threads : 1;
    loops = rcp__calloc(n, sizeof(*loops));
    if (!loops)
        return RCP_ERR_OOM;
    for (i = 0; i < n; i++) {
        loops[i] = rcp__loop_new();
        if (!loops[i]) {
            while (i--)
                rcp__loop_free(loops[i]);
            rcp__free(loops);
            if (errbuf)
                snprintf(errbuf, errbuf_len, "rcp_conn_open: cannot start an I/O thread");
            return RCP_ERR_OOM;
        }
    }
    /* Create detached from the loop first so owned_loops is set before the
     * loop can touch it, then attach. */
    rv = rcp__conn_create(NULL, o, 0, &c);
    if (rv != RCP_OK) {
        for (i = 0; i < n; i++)
            rcp__loop_free(loops[i]);
        rcp__free(loops);
        return rv;
    }
    c->owned_loops = loops;
    c->nowned = n;
    c->loop = loops[0];
    if (rcp__loop_attach(c->loop, &c->src) < 0) {
        conn_free(c);
        return RCP_ERR_OOM;
    }
    set_timer(c, 0);
    rcp__loop_notify(c->loop, &c->src);

    deadline = rcp__now_ns() + ms_to_ns(o->connect_timeout_ms) + ms_to_ns(1000);
    ts.tv_sec = (time_t)(deadline / 1000000000ull);
    ts.tv_nsec = (long)(deadline % 1000000000ull);
    pthread_mutex_lock(&c->mu);
    while (c->open_result < 0) {
        if (pthread_cond_timedwait(&c->state_cv, &c->mu, &ts) == ETIMEDOUT)
            break;
    }
    rv = c->open_result;
    if (rv < 0) {
        rv = RCP_ERR_CONNECT;
        snprintf(c->open_msg, sizeof c->open_msg, "%s: connect timed out", c->addr);
    }
    if (rv != RCP_OK && errbuf)
        snprintf(errbuf, errbuf_len, "%s", c->open_msg);
    pthread_mutex_unlock(&c->mu);
    if (rv != RCP_OK) {
        rcp_conn_close(c);
        return rv;
    }
    *out = c;
    return RCP_OK;
}

void rcp_conn_close(rcp_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->closing = 1;
    if (c->fast_active && c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR); /* the lone caller's poll returns */
    pthread_cond_broadcast(&c->space_cv);
    pthread_mutex_unlock(&c->mu);
    if (c->loop) {
        rcp__loop_notify(c->loop, &c->src);
        pthread_mutex_lock(&c->mu);
        while (!c->closed) {
            struct timespec ts;
            uint64_t t = rcp__now_ns() + ms_to_ns(50);
            ts.tv_sec = (time_t)(t / 1000000000ull);
            ts.tv_nsec = (long)(t % 1000000000ull);
            pthread_cond_timedwait(&c->state_cv, &c->mu, &ts);
            if (!c->closed) {
                pthread_mutex_unlock(&c->mu);
                rcp__loop_notify(c->loop, &c->src);
                pthread_mutex_lock(&c->mu);
            }
        }
        pthread_mutex_unlock(&c->mu);
    }
    /* Calls in progress (senders blocked for room, sync callers) finish. */
    while (atomic_load(&c->active_calls) > 0) {
        pthread_mutex_lock(&c->mu);
        pthread_cond_broadcast(&c->space_cv);
        pthread_mutex_unlock(&c->mu);
        usleep(1000);
    }
    if (c->loop) {
        rcp__loop_detach(c->loop, &c->src);
        /* It may still sit on the loop's ready stack: let the loop drain
         * it before the memory goes. */
        rcp__loop_quiesce(c->loop);
    }
    close_socket(c);
    conn_free(c);
}

/* ------------------------------------------------------------------ */
/* the request path                                                    */

static uint64_t deadline_for(struct rcp_conn *c, const rcp_future *f, uint64_t now)
{
    int ms = f->timeout_ms ? f->timeout_ms : c->opt.request_timeout_ms;
    if (ms <= 0)
        return 0;
    return now + ms_to_ns(ms);
}

/* Mutex held. Wait for room for one request of len bytes. */
static int wait_room(struct rcp_conn *c, size_t len, unsigned nslots, uint64_t deadline)
{
    for (;;) {
        size_t pend = c->pend_len - c->pend_off;
        if (c->closing || c->state == RCP__ST_CLOSED)
            return RCP_ERR_CLOSED;
        /* A new connection that has not tried yet queues (it connects on
         * the loop's next pass); one waiting to reconnect fails fast. */
        if (c->state == RCP__ST_DISCONNECTED && c->attempts)
            return RCP_ERR_NOT_SENT;
        if (c->tail - c->head + nslots <= c->opt.max_inflight &&
            (pend == 0 || pend + len <= c->opt.max_pending_bytes))
            return RCP_OK;
        if (c->opt.queue_policy == RCP_QUEUE_FAIL || rcp__loop_on_thread())
            return RCP_ERR_QUEUE_FULL;
        c->space_waiters++;
        if (deadline) {
            struct timespec ts;
            int rv;
            ts.tv_sec = (time_t)(deadline / 1000000000ull);
            ts.tv_nsec = (long)(deadline % 1000000000ull);
            rv = pthread_cond_timedwait(&c->space_cv, &c->mu, &ts);
            c->space_waiters--;
            if (rv == ETIMEDOUT && rcp__now_ns() >= deadline)
                return RCP_ERR_TIMEOUT;
        } else {
            pthread_cond_wait(&c->space_cv, &c->mu);
            c->space_waiters--;
        }
    }
}

/* ASKING, queued in front of a command sent after an ASK redirect; its
 * +OK is read and dropped. Shared by every connection: it keeps no state. */
static const char asking_cmd[] = "*1\r\n$6\r\nASKING\r\n";
#define ASKING_LEN (sizeof asking_cmd - 1)

static void asking_resolve(rcp_future *f, rcp_reply *r)
{
    (void)f;
    (void)r;
}

static rcp_future asking_future = {asking_resolve, NULL, -1, 0, {NULL, NULL}};

/* One request of a group: argv (formatted under the mutex) or
 * pre-formatted bytes, and its future. */
typedef struct req_desc {
    rcp_future *f;
    int argc;
    const char **argv;
    const size_t *argvlen;
    const char *raw;
    size_t len;
} req_desc;

/* Queue requests in one critical section, so they are adjacent on the wire
 * and in the ring (no other caller's request can land between them). With
 * `asking`, ASKING goes first. */
static int enqueue_many(struct rcp_conn *c, const req_desc *d, size_t n, int asking)
{
    uint64_t now = rcp__now_ns(), deadline = 0;
    size_t extra = asking ? ASKING_LEN : 0, total = extra, i;
    int rv, ring = 0;

    for (i = 0; i < n; i++) {
        uint64_t dl = deadline_for(c, d[i].f, now);
        total += d[i].len;
        if (dl && (!deadline || dl < deadline))
            deadline = dl;
    }
    if (n + (asking ? 1 : 0) > c->opt.max_inflight)
        return RCP_ERR_TOO_LARGE;
    pthread_mutex_lock(&c->mu);
    rv = wait_room(c, total, (unsigned)(n + (asking ? 1 : 0)), deadline);
    if (rv != RCP_OK) {
        pthread_mutex_unlock(&c->mu);
        return rv;
    }
    if (pend_reserve(c, total) < 0) {
        pthread_mutex_unlock(&c->mu);
        return RCP_ERR_OOM;
    }
    if (asking) {
        memcpy(c->pend + c->pend_len, asking_cmd, ASKING_LEN);
        c->pend_len += ASKING_LEN;
        push_slot(c, &asking_future, 0, ASKING_LEN);
    }
    for (i = 0; i < n; i++) {
        if (d[i].raw)
            memcpy(c->pend + c->pend_len, d[i].raw, d[i].len);
        else
            rcp__format_write(c->pend + c->pend_len, d[i].argc, d[i].argv, d[i].argvlen);
        c->pend_len += d[i].len;
        push_slot(c, d[i].f, deadline_for(c, d[i].f, now), d[i].len);
    }
    stat_add(&c->st.requests, n);
    ring = want_loop(c);
    pthread_mutex_unlock(&c->mu);
    if (ring)
        ring_loop(c);
    return RCP_OK;
}

static int enqueue(struct rcp_conn *c, rcp_future *f, int argc, const char **argv,
                   const size_t *argvlen, const char *raw, size_t len, int asking)
{
    req_desc d;
    d.f = f;
    d.argc = argc;
    d.argv = argv;
    d.argvlen = argvlen;
    d.raw = raw;
    d.len = len;
    return enqueue_many(c, &d, 1, asking);
}

static int precheck(rcp_conn *c, int argc, const char **argv, const size_t *argvlen, size_t *len,
                    const char **why)
{
    int i;
    *why = NULL;
    if (!c || argc < 1 || !argv)
        return RCP_ERR_INVALID;
    for (i = 0; i < argc; i++)
        if (!argv[i])
            return RCP_ERR_INVALID;
    i = rcp__command_check(argc, argv, argvlen, why);
    if (i != RCP_OK)
        return i;
    *len = rcp__format_len(argc, argv, argvlen);
    if (*len > c->opt.max_request_bytes)
        return RCP_ERR_TOO_LARGE;
    return RCP_OK;
}

static void call_enter(rcp_conn *c)
{
    atomic_fetch_add_explicit(&c->active_calls, 1, memory_order_acquire);
}

static void call_leave(rcp_conn *c)
{
    atomic_fetch_sub_explicit(&c->active_calls, 1, memory_order_release);
}

int rcp_conn_send_argv(rcp_conn *c, rcp_future *f, int argc, const char **argv,
                       const size_t *argvlen)
{
    size_t len;
    const char *why;
    int rv;
    if (!c || !f || !f->resolve)
        return RCP_ERR_INVALID;
    call_enter(c);
    rv = precheck(c, argc, argv, argvlen, &len, &why);
    if (rv == RCP_OK)
        rv = enqueue(c, f, argc, argv, argvlen, NULL, len, 0);
    call_leave(c);
    return rv;
}

/* Format with a hiredis-style format string, then screen the command. */
static int format_fmt(rcp_conn *c, const char *fmt, va_list ap, char **buf, size_t *len,
                      const char **why)
{
    rcp__fmt_cmd cmd;
    int rv = rcp__format_command(&cmd, fmt, ap, why);
    if (rv != RCP_OK)
        return rv;
    rv = rcp__command_check(cmd.argc, cmd.argv, cmd.argvlen, why);
    if (rv == RCP_OK && cmd.len > c->opt.max_request_bytes)
        rv = RCP_ERR_TOO_LARGE;
    if (rv != RCP_OK) {
        rcp__free(cmd.buf);
        return rv;
    }
    *buf = cmd.buf;
    *len = cmd.len;
    return RCP_OK;
}

int rcp_conn_sendv(rcp_conn *c, rcp_future *f, const char *fmt, va_list ap)
{
    char *buf;
    size_t len;
    const char *why;
    int rv;
    if (!c || !f || !f->resolve)
        return RCP_ERR_INVALID;
    call_enter(c);
    rv = format_fmt(c, fmt, ap, &buf, &len, &why);
    if (rv == RCP_OK) {
        rv = enqueue(c, f, 0, NULL, NULL, buf, len, 0);
        rcp__free(buf);
    }
    call_leave(c);
    return rv;
}

int rcp_conn_send(rcp_conn *c, rcp_future *f, const char *fmt, ...)
{
    va_list ap;
    int rv;
    va_start(ap, fmt);
    rv = rcp_conn_sendv(c, f, fmt, ap);
    va_end(ap);
    return rv;
}

/* ------------------------------------------------------------------ */
/* sync calls: a future on the caller's stack, a futex word to sleep on */

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
        stat_add(&c->st.futex_wakes, 1);
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

static rcp_reply *error_reply(int code, const char *why, const char *what)
{
    char msg[400];
    if (why)
        return rcp__reply_error_new(code, why);
    snprintf(msg, sizeof msg, "%s: %s", what, rcp_strerror(code));
    return rcp__reply_error_new(code, msg);
}

/* Mutex held. Release the socket from the fast path; the loop takes over.
 * Returns 1 if the loop must be rung. */
static int fast_handback(struct rcp_conn *c)
{
    arm_io_timer(c);
    c->fast_active = 0;
    c->wake_pending = 1;
    return 1;
}

/* The lone-caller path. Returns a reply, or NULL if the request was handed
 * to the loop (then wait on s). Entered with the slot queued at index idx,
 * c->wr == c->taken == idx + 1 (we write it ourselves), fast_active set. */
static rcp_reply *fast_io(struct rcp_conn *c, uint64_t idx, const char *buf,
                          size_t len, uint64_t deadline)
{
    size_t off = 0;
    int fd = c->fd;
    uint64_t started = rcp__now_ns();
    void *rep = NULL;
    char cause[512];
    int code = RCP_ERR_IO;

    while (off < len) {
        ssize_t w = send(fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off += (size_t)w;
            stat_add(&c->st.write_calls, 1);
            stat_add(&c->st.bytes_out, (uint64_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* Socket buffer full: give the rest to the loop as pending. */
            size_t rest = len - off;
            pthread_mutex_lock(&c->mu);
            if (pend_reserve(c, rest) < 0) {
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
            ring_loop(c);
            return NULL;
        }
        snprintf(cause, sizeof cause, "write failed: %s", strerror(errno));
        pthread_mutex_lock(&c->mu);
        c->wr = idx; /* not (completely) written: never executed */
        goto handoff_fail;
    }
    stat_add(&c->st.batches, 1);
    stat_add(&c->st.commands_written, 1);

    for (;;) {
        ssize_t r;
        if (redisReaderGetReply(c->reader, &rep) != REDIS_OK) {
            code = reader_failure(c, cause, sizeof cause);
            pthread_mutex_lock(&c->mu);
            goto handoff_fail;
        }
        if (rep)
            break;
        /* A blocking read (the socket is in blocking mode; the loop always
         * passes MSG_DONTWAIT): one system call, as a plain client makes.
         * SO_RCVTIMEO bounds it. */
        r = recv(fd, c->rbuf, c->rbuf_cap, 0);
        if (r > 0) {
            stat_add(&c->st.read_calls, 1);
            stat_add(&c->st.bytes_in, (uint64_t)r);
            if (redisReaderFeed(c->reader, c->rbuf, (size_t)r) != REDIS_OK) {
                code = reader_failure(c, cause, sizeof cause);
                pthread_mutex_lock(&c->mu);
                goto handoff_fail;
            }
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            uint64_t now = rcp__now_ns();
            if (deadline && now >= deadline)
                break; /* request timeout */
            if (c->opt.io_timeout_ms > 0 && now >= started + ms_to_ns(c->opt.io_timeout_ms)) {
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
        if (r == 0)
            snprintf(cause, sizeof cause, "connection closed by the server");
        else
            snprintf(cause, sizeof cause, "read failed: %s", strerror(errno));
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
        ring = c->taken < c->tail && want_loop(c);
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
            ring_loop(c);
        stat_add(&c->st.replies, 1);
        stat_add(&c->st.fast_path, 1);
        return rep;
    }
    /* Request timeout: resolve it here, leave the late reply to the loop. */
    c->ring[idx & c->mask].f = NULL;
    c->need_read = 1;
    fast_handback(c);
    pthread_mutex_unlock(&c->mu);
    ring_loop(c);
    stat_add(&c->st.timeouts, 1);
    snprintf(cause, sizeof cause, "%s: request timed out (no reply before its deadline)", c->addr);
    return rcp__reply_error_new(RCP_ERR_TIMEOUT, cause);

handoff_fail:
    /* Mutex held. The loop fails the connection and resolves our future. */
    c->need_close = 1;
    c->close_code = code;
    snprintf(c->close_msg, sizeof c->close_msg, "%s", cause);
    fast_handback(c);
    pthread_mutex_unlock(&c->mu);
    ring_loop(c);
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
    deadline = deadline_for(c, &s->f, now);
    pthread_mutex_lock(&c->mu);
    if (c->state != RCP__ST_READY || c->closing || c->fast_active || c->loop_io ||
        c->need_close || c->need_read || c->head != c->tail || c->fd < 0) {
        pthread_mutex_unlock(&c->mu);
        if (buf != stackbuf)
            rcp__free(buf);
        return NULL;
    }
    {
        /* Bytes already waiting on an idle connection are not a reply to
         * anything we are about to send (a misbehaving server, or a close):
         * let the loop read and judge them instead of taking them as ours. */
        char peek;
        ssize_t pk = recv(c->fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT);
        if (pk >= 0) {
            int ring = !c->need_read;
            c->need_read = 1;
            pthread_mutex_unlock(&c->mu);
            if (ring)
                ring_loop(c);
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
    stat_add(&c->st.requests, 1);
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
static rcp_reply *command(rcp_conn *c, int argc, const char **argv, const size_t *argvlen,
                          const char *raw, size_t len, int asking, int timeout_ms, int fast_only)
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
        rv = enqueue(c, &s.f, argc, argv, argvlen, raw, len, asking);
        if (rv != RCP_OK)
            return error_reply(rv, NULL, "request refused");
    }
    return sync_wait(&s);
}

int rcp__conn_send_raw(struct rcp_conn *c, rcp_future *f, const char *raw, size_t len, int asking)
{
    int rv;
    call_enter(c);
    rv = enqueue(c, f, 0, NULL, NULL, raw, len, asking);
    call_leave(c);
    return rv;
}

int rcp__conn_send_group(struct rcp_conn *c, size_t n, rcp_future *const *f,
                         const char *const *raw, const size_t *len, int asking)
{
    req_desc stackd[16], *d = stackd;
    size_t i;
    int rv;
    if (n == 0)
        return RCP_ERR_INVALID;
    if (n > sizeof stackd / sizeof stackd[0]) {
        d = rcp__malloc(n * sizeof(*d));
        if (!d)
            return RCP_ERR_OOM;
    }
    for (i = 0; i < n; i++) {
        memset(&d[i], 0, sizeof d[i]);
        d[i].f = f[i];
        d[i].raw = raw[i];
        d[i].len = len[i];
    }
    call_enter(c);
    rv = enqueue_many(c, d, n, asking);
    call_leave(c);
    if (d != stackd)
        rcp__free(d);
    return rv;
}

rcp_reply *rcp__conn_command_raw(struct rcp_conn *c, const char *raw, size_t len, int asking,
                                 int timeout_ms)
{
    rcp_reply *r;
    if (rcp__loop_on_thread())
        return error_reply(RCP_ERR_INVALID,
                           "sync call from an I/O thread (a callback) would deadlock", NULL);
    call_enter(c);
    r = command(c, 0, NULL, NULL, raw, len, asking, timeout_ms, 0);
    call_leave(c);
    return r;
}

int rcp__conn_lone_busy(struct rcp_conn *c)
{
    int busy;
    pthread_mutex_lock(&c->mu);
    busy = c->fast_active && c->tail == c->head + 1;
    pthread_mutex_unlock(&c->mu);
    return busy;
}

rcp_reply *rcp__conn_command_fast_only(struct rcp_conn *c, const char *raw, size_t len,
                                       int timeout_ms)
{
    rcp_reply *r;
    if (rcp__loop_on_thread())
        return NULL;
    call_enter(c);
    r = command(c, 0, NULL, NULL, raw, len, 0, timeout_ms, 1);
    call_leave(c);
    return r;
}

int rcp__conn_healthy(struct rcp_conn *c)
{
    return __atomic_load_n(&c->state, __ATOMIC_RELAXED) == RCP__ST_READY;
}

uint64_t rcp__conn_outstanding(struct rcp_conn *c)
{
    uint64_t n;
    pthread_mutex_lock(&c->mu);
    n = c->tail - c->head;
    pthread_mutex_unlock(&c->mu);
    return n;
}

rcp_reply *rcp_conn_command_argv(rcp_conn *c, int argc, const char **argv, const size_t *argvlen)
{
    size_t len;
    const char *why;
    int rv;
    rcp_reply *r;
    if (!c)
        return error_reply(RCP_ERR_INVALID, "rcp_conn_command_argv: NULL handle", NULL);
    if (rcp__loop_on_thread())
        return error_reply(RCP_ERR_INVALID,
                           "sync call from an I/O thread (a callback) would deadlock", NULL);
    call_enter(c);
    rv = precheck(c, argc, argv, argvlen, &len, &why);
    if (rv != RCP_OK)
        r = error_reply(rv, why, "request refused");
    else
        r = command(c, argc, argv, argvlen, NULL, len, 0, 0, 0);
    call_leave(c);
    return r;
}

rcp_reply *rcp_conn_commandv(rcp_conn *c, const char *fmt, va_list ap)
{
    char *buf;
    size_t len;
    const char *why;
    int rv;
    rcp_reply *r;
    if (!c)
        return error_reply(RCP_ERR_INVALID, "rcp_conn_command: NULL handle", NULL);
    if (rcp__loop_on_thread())
        return error_reply(RCP_ERR_INVALID,
                           "sync call from an I/O thread (a callback) would deadlock", NULL);
    call_enter(c);
    rv = format_fmt(c, fmt, ap, &buf, &len, &why);
    if (rv != RCP_OK) {
        r = error_reply(rv, why, "request refused");
    } else {
        r = command(c, 0, NULL, NULL, buf, len, 0, 0, 0);
        rcp__free(buf);
    }
    call_leave(c);
    return r;
}

rcp_reply *rcp_conn_command(rcp_conn *c, const char *fmt, ...)
{
    va_list ap;
    rcp_reply *r;
    va_start(ap, fmt);
    r = rcp_conn_commandv(c, fmt, ap);
    va_end(ap);
    return r;
}

void rcp__conn_last_error(struct rcp_conn *c, char *buf, size_t len)
{
    pthread_mutex_lock(&c->mu);
    if (c->last_err[0])
        snprintf(buf, len, "%s", c->last_err);
    else
        snprintf(buf, len, "%s: no failure recorded", c->addr);
    pthread_mutex_unlock(&c->mu);
}

int rcp_conn_get_stats(rcp_conn *c, rcp_conn_stats *o)
{
    if (!c || !o)
        return RCP_ERR_INVALID;
#define S(x) o->x = atomic_load_explicit(&c->st.x, memory_order_relaxed)
    S(requests);
    S(replies);
    S(batches);
    S(commands_written);
    S(write_calls);
    S(read_calls);
    S(bytes_out);
    S(bytes_in);
    S(timeouts);
    S(late_replies);
    S(reconnects);
    S(disconnects);
    S(fast_path);
    S(futex_wakes);
    S(loop_wakes);
#undef S
    return RCP_OK;
}

void rcp_conn_stats_add(rcp_conn_stats *sum, const rcp_conn_stats *add)
{
    if (!sum || !add)
        return;
#define A(x) sum->x += add->x
    A(requests);
    A(replies);
    A(batches);
    A(commands_written);
    A(write_calls);
    A(read_calls);
    A(bytes_out);
    A(bytes_in);
    A(timeouts);
    A(late_replies);
    A(reconnects);
    A(disconnects);
    A(fast_path);
    A(futex_wakes);
    A(loop_wakes);
#undef A
}
