/* lib/conn_connect.c: getting a connection to ready, and losing it.
 *
 * A non-blocking connect on the loop thread (getaddrinfo, the first
 * address that takes), then the handshake (AUTH, CLIENT SETNAME,
 * READONLY) queued in front of whatever callers queued meanwhile, so that
 * none of theirs reaches the server before it. Every failure of the
 * connection, here or in conn_io.c / conn_fast.c, ends in rcp__conn_fail:
 * it resolves written requests with RCP_ERR_IO and unwritten ones with
 * RCP_ERR_NOT_SENT (what the cluster layer may resend), and schedules the
 * reconnect with a jittered exponential backoff. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static void conn_emit(struct rcp_conn *c, int type, int err, const char *msg)
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

/* ------------------------------------------------------------------ */
/* failure and the reconnect backoff                                   */

void rcp__conn_close_socket(struct rcp_conn *c)
{
    rcp__tls_end(c);
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

/* Resolves everything outstanding and drops the socket (conn_int.h). */
void rcp__conn_fail(struct rcp_conn *c, int code, const char *cause)
{
    char written_msg[400], unsent_msg[400], source_msg[700];
    uint64_t i, n_written = 0, n = 0;
    rcp_future *source_f = NULL;
    int source_code = 0;
    int was_state, closing;
    int written_code = code == RCP_ERR_CLOSED ? RCP_ERR_CLOSED : RCP_ERR_IO;
    int unsent_code = code == RCP_ERR_CLOSED ? RCP_ERR_CLOSED : RCP_ERR_NOT_SENT;

    if (code == RCP_ERR_PROTOCOL || code == RCP_ERR_OOM || code == RCP_ERR_TOO_LARGE)
        written_code = code;
    snprintf(written_msg, sizeof written_msg, "%s: %s (the request was written; it may have been applied)",
             c->addr, cause);
    snprintf(unsent_msg, sizeof unsent_msg, "%s: %s (the request was not sent)", c->addr, cause);

    rcp__mutex_lock(&c->mu);
    was_state = c->state;
    closing = c->closing;
    snprintf(c->last_err, sizeof c->last_err, "%s: %s", c->addr, cause);
    for (i = c->head; i < c->tail; i++) {
        rcp__slot *s = &c->ring[i & c->mask];
        if (s->f && c->so.on && i == c->so.idx) {
            /* A value being written from its source: never complete on
             * the server. Once a byte was pulled the source may not be
             * readable again, so it is not NOT_SENT (which a cluster
             * resends): RCP_ERR_IO, with the source's own failure if
             * that is why we are here. */
            source_f = s->f;
            s->f = NULL;
            source_code = code == RCP_ERR_CLOSED ? RCP_ERR_CLOSED
                          : c->so.off || c->so.why[0] ? RCP_ERR_IO
                                                      : unsent_code;
            if (c->so.why[0])
                snprintf(source_msg, sizeof source_msg,
                         "%s: %s (the connection was dropped mid-value: nothing was stored)",
                         c->addr, c->so.why);
            else
                snprintf(source_msg, sizeof source_msg,
                         "%s: %s (while its value was being written, at byte %llu of %zu: "
                         "not stored)",
                         c->addr, cause, (unsigned long long)c->so.off, c->so.src->len);
        } else if (s->f) {
            if (i < c->wr)
                n_written++;
            c->scratch[n++] = s->f;
            s->f = NULL;
        }
        s->sink = NULL;
    }
    c->head = c->wr = c->taken = c->tail = 0;
    c->pend_len = c->pend_off = 0;
    c->wlen = c->woff = c->wslot_off = 0;
    rcp__conn_source_reset(c);
    c->wake_pending = 0;
    c->need_close = 0;
    c->need_read = 0;
    c->hs_end = 0;
    c->min_deadline = UINT64_MAX;
    rcp__conn_close_socket(c);
    if (c->reader) {
        redisReaderFree(c->reader);
        c->reader = rcp__reader_new_budget(&c->budget);
    }
    rcp__conn_sink_reset(c); /* with the reader: the stream's bytes are gone too */
    c->reply_too_large = 0;
    c->budget.exceeded = 0;
    if (was_state == RCP__ST_READY)
        conn_stat_add(&c->st.disconnects, 1);
    if (closing || (c->once && c->ever_connected)) {
        conn_set_state(c, RCP__ST_CLOSED);
    } else {
        conn_set_state(c, RCP__ST_DISCONNECTED);
        c->reconnect_at = rcp__now_ns() + conn_ms_to_ns(next_backoff(c));
        conn_set_timer(c, c->reconnect_at);
    }
    if (c->open_result < 0 && (code == RCP_ERR_CONNECT || code == RCP_ERR_AUTH || closing ||
                               was_state != RCP__ST_READY)) {
        c->open_result = code == RCP_ERR_CLOSED ? RCP_ERR_CLOSED
                         : code == RCP_ERR_AUTH ? RCP_ERR_AUTH
                                                : RCP_ERR_CONNECT;
        snprintf(c->open_msg, sizeof c->open_msg, "%s: %s", c->addr, cause);
    }
    rcp__cond_broadcast(&c->state_cv);
    if (c->space_waiters)
        rcp__cond_broadcast(&c->space_cv);
    rcp__mutex_unlock(&c->mu);

    /* Slots were in ring order: the first n_written were written. */
    for (i = 0; i < n; i++) {
        rcp_future *f = c->scratch[i];
        if (i < n_written)
            rcp__conn_resolve_error(f, written_code, written_msg);
        else
            rcp__conn_resolve_error(f, unsent_code, unsent_msg);
    }
    if (source_f)
        rcp__conn_resolve_error(source_f, source_code, source_msg);
    /* A refused handshake is a failed connect attempt, not the loss of a
     * ready connection. */
    if (was_state == RCP__ST_READY)
        conn_emit(c, RCP_EVENT_DISCONNECTED, code, cause);
    else if (code != RCP_ERR_CLOSED)
        conn_emit(c, RCP_EVENT_CONNECT_FAILED, code, cause);
    if (closing) {
        conn_emit(c, RCP_EVENT_CLOSED, RCP_ERR_CLOSED, "handle closed");
        /* Only now may rcp_conn_close free the handle: the futures and
         * events above still used it. */
        rcp__mutex_lock(&c->mu);
        c->closed = 1;
        rcp__cond_broadcast(&c->state_cv);
        rcp__mutex_unlock(&c->mu);
    }
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
    if (c->opt.tls && k == 0) {
        /* With TLS 1.3 the client's handshake ends before the server has
         * judged the client (its certificate, or its absence): a refusal
         * comes as an alert on the first read. One round trip makes the
         * connect itself fail with that cause instead of the first
         * request; any command above does the same. */
        argv[0] = "PING";
        lens[k] = rcp__format_len(1, argv, NULL);
        rcp__format_write(buf + total, 1, argv, NULL);
        total += lens[k++];
    }
    n = k;
    if (n) {
        /* Bytes: the handshake first, then what was queued. */
        if (rcp__conn_pend_reserve(c, total) < 0)
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
            sl->sink = NULL;
            sl->src = NULL; /* the place may have held a queued source request's slot */
            sl->flags = 0;
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
    c->rcvtimeo_dflt_ms = c->rcvtimeo_ms = ms > 0 ? ms : 0;
    if (ms > 0) {
        tv.tv_sec = ms / 1000;
        tv.tv_usec = (ms % 1000) * 1000;
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
}

/* Loop thread. Start a non-blocking connect; failures go to conn_fail. */
void rcp__conn_start_connect(struct rcp_conn *c)
{
    struct addrinfo hints, *res = NULL, *ai;
    char port[16], cause[256];
    int rv, fd = -1, err = 0;

    /* From here the connection is "connecting": senders queue behind the
     * handshake instead of being refused. */
    rcp__mutex_lock(&c->mu);
    c->attempts++;
    conn_set_state(c, RCP__ST_CONNECTING);
    c->connect_deadline = rcp__now_ns() + conn_ms_to_ns(c->opt.connect_timeout_ms);
    conn_set_timer(c, c->connect_deadline);
    rcp__mutex_unlock(&c->mu);
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof port, "%d", c->opt.port);
    rv = getaddrinfo(c->host, port, &hints, &res);
    if (rv != 0) {
        snprintf(cause, sizeof cause, "cannot resolve host: %s", gai_strerror(rv));
        rcp__conn_fail(c, RCP_ERR_CONNECT, cause);
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
        rcp__conn_fail(c, RCP_ERR_CONNECT, cause);
        return;
    }
    rcp__mutex_lock(&c->mu);
    c->fd = fd;
    if (queue_handshake(c) < 0) {
        rcp__mutex_unlock(&c->mu);
        rcp__conn_fail(c, RCP_ERR_CONNECT, "out of memory queueing the handshake");
        return;
    }
    rcp__mutex_unlock(&c->mu);
    __atomic_store_n(&c->armed, 1, __ATOMIC_RELAXED);
    if (rcp__loop_watch(c->loop, fd, &c->src) < 0) {
        snprintf(cause, sizeof cause, "cannot watch the socket: %s", strerror(errno));
        rcp__conn_fail(c, RCP_ERR_CONNECT, cause);
    }
}

/* The CONNECTED event's text: "connected", with TLS its version, cipher
 * and whether the session was resumed. */
static void emit_connected(struct rcp_conn *c)
{
    char msg[160], d[120];
    if (c->tls) {
        rcp__tls_describe(c, d, sizeof d);
        snprintf(msg, sizeof msg, "connected (%s)", d);
    } else {
        snprintf(msg, sizeof msg, "connected");
    }
    conn_emit(c, RCP_EVENT_CONNECTED, RCP_OK, msg);
}

/* Mutex held. The handshake is complete. Returns 1 if an event is due. */
static int become_ready(struct rcp_conn *c)
{
    conn_set_state(c, RCP__ST_READY);
    c->backoff_ms = 0;
    c->last_read_ns = rcp__now_ns();
    if (c->ever_connected)
        conn_stat_add(&c->st.reconnects, 1);
    c->ever_connected = 1;
    if (c->open_result < 0)
        c->open_result = RCP_OK;
    rcp__cond_broadcast(&c->state_cv);
    return 1;
}

void rcp__conn_connect_init(struct rcp_conn *c)
{
    c->rng = rcp__now_ns() ^ (uint64_t)(uintptr_t)c;
    for (int k = 0; k < 3; k++) {
        c->hs[k].c = c;
        c->hs[k].f.resolve = hs_resolve;
    }
}

/* Loop thread, TCP connected, TLS on: drive the handshake on any event
 * (it reads and writes until OpenSSL wants to wait). Returns 1 once done,
 * 0 while it waits or if it failed (the connection is then failed). */
static int tls_step(struct rcp_conn *c)
{
    char cause[512];
    int want_write, r = rcp__tls_handshake(c, &want_write, cause, sizeof cause);
    if (r > 0)
        return 1;
    if (r < 0)
        rcp__conn_fail(c, RCP_ERR_CONNECT, cause);
    else if (want_write)
        rcp__loop_want_write(c->loop, c->fd, &c->src); /* a level-triggered driver's one-shot */
    return 0;
}

int rcp__conn_finish_connect(struct rcp_conn *c, uint32_t events)
{
    int err = 0, ready = 0;
    socklen_t len = sizeof err;
    char cause[512];

    if (c->tls) {
        if (!tls_step(c))
            return 0;
    } else {
        if (!(events & (RCP__EV_WRITE | RCP__EV_ERR | RCP__EV_HUP)))
            return 0;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err) {
            snprintf(cause, sizeof cause, "connect failed: %s", strerror(err));
            rcp__conn_fail(c, RCP_ERR_CONNECT, cause);
            return 0;
        }
        set_blocking(c, c->fd);
        if (c->opt.tls) {
            /* The socket is blocking from here; the TLS BIO passes
             * MSG_DONTWAIT on the loop, as plain reads and writes do. */
            if (rcp__tls_start(c, cause, sizeof cause) < 0) {
                rcp__conn_fail(c, RCP_ERR_CONNECT, cause);
                return 0;
            }
            if (!tls_step(c))
                return 0;
        }
    }
    rcp__mutex_lock(&c->mu);
    if (c->hs_end > c->head)
        conn_set_state(c, RCP__ST_HANDSHAKE);
    else
        ready = become_ready(c);
    rcp__mutex_unlock(&c->mu);
    if (ready)
        emit_connected(c);
    return 1;
}

int rcp__conn_check_handshake(struct rcp_conn *c)
{
    int ready = 0;
    if (c->hs_failed) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", c->hs_msg);
        rcp__conn_fail(c, RCP_ERR_AUTH, msg);
        return 0;
    }
    rcp__mutex_lock(&c->mu);
    if (c->state == RCP__ST_HANDSHAKE && c->head >= c->hs_end)
        ready = become_ready(c);
    rcp__mutex_unlock(&c->mu);
    if (ready)
        emit_connected(c);
    return 1;
}
