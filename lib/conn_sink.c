/* lib/conn_sink.c: streaming reads (issue 14, docs/large-values.md).
 *
 * A request may carry a sink (rcp_sink): the bytes of its bulk-string
 * reply go there in chunks as they come off the socket, never assembled.
 * hiredis 0.14 keeps a whole bulk in its buffer before it emits it, so
 * the value has to be taken before the reader parses it:
 *
 *   - While any slot of the ring has a sink (c->sinks), conn_get_reply
 *     comes here first. At a reply boundary (the reader has no reply in
 *     progress) for a slot with a sink, a "$<len>\r\n" header at the
 *     reader's cursor is parsed here and the cursor moved past it and past
 *     the value's bytes the reader already holds (at most one read's).
 *     From then on (c->sk.on) conn_recv_feed hands the bytes it reads to
 *     this file instead of to the reader, up to the value's end and its
 *     CRLF; the rest of that read goes to the reader as usual. The reply
 *     taken for the slot is the value's length (an integer reply) or an
 *     RCP_ERR_SINK error.
 *   - Anything that is not a bulk header (nil "$-1", "-MOVED", "-ASK",
 *     "-TRYAGAIN", "-WRONGTYPE", integers, arrays) is left to the reader:
 *     the cluster layer sees redirects as it always did and retries them
 *     before a single byte has reached the sink.
 *
 * A buffer sink is read into directly (recv into the caller's buffer, up
 * to the value's end): no copy after the kernel's. Memory stays at the
 * read buffer whatever the value's size. A sink that fails, and a value
 * whose future was resolved meanwhile (a timeout), switch to discard: the
 * rest of the value is read and dropped, the connection stays in step.
 *
 * All of this runs on whoever owns the socket's I/O (the loop, or a
 * caller on the fast path), like the reader it stands in front of. Only
 * the claim on the slot being delivered to (c->sink_claim) is under the
 * mutex: expire() must not resolve a future whose sink another thread is
 * writing to. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/sds.h>

#include "conn_int.h"
#include "reply.h"

/* "$" + a sign + 19 digits + CRLF: a header longer than this is garbage. */
#define SINK_HEADER_MAX 24

int rcp__sink_check(const rcp_sink *s)
{
    if (!s)
        return RCP_ERR_INVALID;
    switch (s->kind) {
    case RCP_SINK_CALLBACK:
        return s->fn ? RCP_OK : RCP_ERR_INVALID;
    case RCP_SINK_FD:
        return s->fd >= 0 ? RCP_OK : RCP_ERR_INVALID;
    case RCP_SINK_BUFFER:
        return s->buf || !s->cap ? RCP_OK : RCP_ERR_INVALID;
    default:
        return RCP_ERR_INVALID;
    }
}

void rcp__conn_sink_reset(struct rcp_conn *c)
{
    memset(&c->sk, 0, sizeof c->sk);
    c->sink_claim = 0;
    atomic_store_explicit(&c->sinks, 0, memory_order_relaxed);
}

int rcp__conn_sink_abandon(struct rcp_conn *c, uint64_t i, int owner)
{
    if (c->sink_claim != i + 1)
        return 1; /* not streaming: resolve it, its value is discarded when it comes */
    if (!owner)
        return 0;
    c->sk.fail = RCP_ERR_TIMEOUT;
    return 1;
}

/* The reader holds no reply in progress: what is at its cursor starts a
 * new reply. (hiredis 0.14 sets up its first task, ridx 0, on a call that
 * found no byte to read its type from.) */
static int reader_at_boundary(const redisReader *rd)
{
    return rd->err == 0 && (rd->ridx == -1 || (rd->ridx == 0 && rd->rstack[0].type < 0));
}

/* A bulk header "$<len>\r\n" at p (n bytes there). Returns its length
 * with *len set (-1: nil), 0 if it is not complete yet, -1 if it is no
 * valid header. */
static int sink_header(const char *p, size_t n, long long *len)
{
    size_t i = 1, digits = 0;
    int neg = 0;
    unsigned long long v = 0;
    if (i < n && p[i] == '-') {
        neg = 1;
        i++;
    }
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
        if (++digits > 19)
            return -1;
        v = v * 10 + (unsigned)(p[i] - '0');
    }
    if (i + 1 >= n)
        return n >= SINK_HEADER_MAX ? -1 : 0;
    if (!digits || p[i] != '\r' || p[i + 1] != '\n' || v > (unsigned long long)INT64_MAX ||
        (neg && v != 1))
        return -1;
    *len = neg ? -1 : (long long)v;
    return (int)(i + 2);
}

/* Stop the reply stream: the reader reports it (rcp__conn_reader_failure
 * reads its errstr), the connection is dropped. */
static void sink_protocol_error(struct rcp_conn *c, const char *what)
{
    c->reader->err = REDIS_ERR_PROTOCOL;
    snprintf(c->reader->errstr, sizeof c->reader->errstr, "%s", what);
}

/* Nothing more reaches the sink; the rest of the value is read and
 * dropped. */
static void sink_fail(struct rcp_conn *c, const char *what, int err)
{
    c->sk.fail = RCP_ERR_SINK;
    if (err)
        snprintf(c->sk.why, sizeof c->sk.why,
                 "%.200s: sink failed at byte %llu of %llu (%s: %s); rest of the value discarded",
                 c->addr, (unsigned long long)c->sk.off, (unsigned long long)c->sk.total, what,
                 strerror(err));
    else
        snprintf(c->sk.why, sizeof c->sk.why,
                 "%.200s: sink failed at byte %llu of %llu (%s); rest of the value discarded", c->addr,
                 (unsigned long long)c->sk.off, (unsigned long long)c->sk.total, what);
}

static void sink_write_fd(struct rcp_conn *c, const char *p, size_t n)
{
    while (n) {
        ssize_t w;
        if (!c->sk.fd_write) {
            w = send(c->sk.sink->fd, p, n, MSG_NOSIGNAL);
            if (w < 0 && errno == ENOTSOCK) {
                c->sk.fd_write = 1; /* a file or a pipe */
                continue;
            }
        } else {
            w = write(c->sk.sink->fd, p, n);
        }
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else {
            sink_fail(c, "write to the fd", w < 0 ? errno : EIO);
            return;
        }
    }
}

/* n bytes of the value, at offset sk.off, that came through a buffer of
 * ours: to the sink unless it failed. */
static void sink_deliver(struct rcp_conn *c, const char *p, size_t n)
{
    const rcp_sink *s = c->sk.sink;
    if (c->sk.fail)
        return;
    switch (s->kind) {
    case RCP_SINK_CALLBACK:
        if (s->fn(s->ud, p, n, c->sk.off, c->sk.total) != 0)
            sink_fail(c, "the callback returned nonzero", 0);
        break;
    case RCP_SINK_FD:
        sink_write_fd(c, p, n);
        break;
    default:
        memcpy(s->buf + c->sk.off, p, n); /* bytes the reader had read already */
        break;
    }
}

/* The value's end and its CRLF are in: the slot's reply is due. Off the
 * socket's owner only the claim is shared. */
static void sink_done(struct rcp_conn *c)
{
    c->sk.phase = CONN_SK_DONE;
    c->sk.on = 0;
    rcp__mutex_lock(&c->mu);
    c->sink_claim = 0;
    rcp__mutex_unlock(&c->mu);
}

/* Consume up to n bytes of the value and its CRLF from p. Returns the
 * bytes used, or (size_t)-1 on a protocol error (the value was longer
 * than announced). */
static size_t sink_eat(struct rcp_conn *c, const char *p, size_t n)
{
    size_t used = 0;
    if (c->sk.phase == CONN_SK_DATA) {
        uint64_t left = c->sk.total - c->sk.off;
        size_t k = (uint64_t)n < left ? n : (size_t)left;
        if (k) {
            sink_deliver(c, p, k);
            c->sk.off += k;
            used = k;
        }
        if (c->sk.off == c->sk.total)
            c->sk.phase = CONN_SK_CRLF;
    }
    while (c->sk.phase == CONN_SK_CRLF && used < n) {
        if (p[used] != (c->sk.crlf ? '\n' : '\r')) {
            sink_protocol_error(c, "bulk string longer than its announced length (streamed value)");
            return (size_t)-1;
        }
        used++;
        if (++c->sk.crlf == 2)
            sink_done(c);
    }
    return used;
}

ssize_t rcp__conn_sink_recv(struct rcp_conn *c, int flags)
{
    ssize_t r;
    size_t k;
    if (c->sk.phase == CONN_SK_DATA && !c->sk.fail && c->sk.sink->kind == RCP_SINK_BUFFER) {
        /* Straight into the caller's buffer, never past the value. */
        size_t want = (size_t)(c->sk.total - c->sk.off);
        r = conn_recv_raw(c, c->sk.sink->buf + c->sk.off, want, flags);
        if (r <= 0)
            return r;
        c->sk.off += (uint64_t)r;
        if (c->sk.off < c->sk.total)
            return r;
        c->sk.phase = CONN_SK_CRLF;
        /* It read all it asked for: the socket may hold more (the CRLF,
         * the next replies). Say so, so that the loop reads on. */
        return r < (ssize_t)c->rbuf_cap ? (ssize_t)c->rbuf_cap : r;
    }
    r = conn_recv_raw(c, c->rbuf, c->rbuf_cap, flags);
    if (r <= 0)
        return r;
    k = sink_eat(c, c->rbuf, (size_t)r);
    if (k == (size_t)-1)
        return CONN_IO_BAD;
    if (k < (size_t)r && conn_reader_take(c, c->rbuf + k, (size_t)r - k))
        return CONN_IO_BAD;
    return r;
}

/* Slot `next` has a sink and its reply starts at the reader's cursor with
 * a complete header of len bytes (hlen of header): claim the slot and
 * start the value. Mutex held. */
static void sink_start(struct rcp_conn *c, uint64_t next, const rcp__slot *s, long long len)
{
    memset(&c->sk, 0, sizeof c->sk);
    c->sk.idx = next;
    c->sk.sink = s->sink;
    c->sk.total = (uint64_t)len;
    c->sk.phase = CONN_SK_DATA;
    c->sk.on = 1;
    c->sink_claim = next + 1;
    if (!s->f) {
        c->sk.fail = RCP_ERR_TIMEOUT; /* resolved already: nobody to deliver to */
    } else if (s->sink->kind == RCP_SINK_BUFFER && (uint64_t)len > s->sink->cap) {
        c->sk.fail = RCP_ERR_SINK;
        snprintf(c->sk.why, sizeof c->sk.why,
                 "%.200s: value of %lld bytes larger than the sink's buffer (%zu bytes); value "
                 "discarded",
                 c->addr, len, s->sink->cap);
    }
}

/* The value's bytes the reader held were consumed here, not by
 * redisReaderGetReply, which is where hiredis drops what it has parsed:
 * drop them the same way, or a run of values that each arrive whole would
 * keep every one of them in the reader's buffer. */
static void reader_compact(redisReader *rd)
{
    if (rd->pos == 0)
        return;
    sdsrange(rd->buf, (int)rd->pos, -1);
    rd->pos = 0;
    rd->len = sdslen(rd->buf);
}

/* The reply for the finished value. */
static rcp_reply *sink_reply(struct rcp_conn *c)
{
    rcp_reply *r;
    int fail = c->sk.fail;
    c->sk.phase = CONN_SK_IDLE;
    if (fail == RCP_ERR_SINK)
        return rcp__reply_error_new(RCP_ERR_SINK, c->sk.why);
    if (fail) /* its future is gone: the reply is dropped as a late one */
        return rcp__reply_error_new(fail, "streamed value discarded");
    r = rcp__reply_integer_new((long long)c->sk.total);
    return r ? r : rcp__reply_error_new(RCP_ERR_OOM, "out of memory after a streamed value");
}

int rcp__conn_sink_get_reply(struct rcp_conn *c, uint64_t next, void **reply)
{
    redisReader *rd = c->reader;
    *reply = NULL;
    if (c->sk.phase == CONN_SK_DONE) {
        *reply = sink_reply(c); /* for `next`: nothing was parsed since it began */
        return REDIS_OK;
    }
    if (c->sk.phase != CONN_SK_IDLE)
        return REDIS_OK; /* the value streams: more bytes first */
    if (reader_at_boundary(rd) && rd->pos < rd->len && rd->buf[rd->pos] == '$') {
        long long len = 0;
        int h, streamed = 0;
        rcp__mutex_lock(&c->mu);
        {
            rcp__slot *s = &c->ring[next & c->mask];
            if (next >= c->head && next < c->wr && s->sink) {
                h = sink_header(rd->buf + rd->pos, rd->len - rd->pos, &len);
                if (h == 0) {
                    rcp__mutex_unlock(&c->mu);
                    return REDIS_OK; /* the header is split across reads */
                }
                if (h < 0) {
                    rcp__mutex_unlock(&c->mu);
                    sink_protocol_error(c, "bad bulk string header");
                    return REDIS_ERR;
                }
                if (len >= 0) {
                    sink_start(c, next, s, len);
                    rd->pos += (size_t)h;
                    streamed = 1;
                }
            }
        }
        rcp__mutex_unlock(&c->mu);
        if (streamed) {
            size_t k = sink_eat(c, rd->buf + rd->pos, rd->len - rd->pos);
            if (k == (size_t)-1)
                return REDIS_ERR;
            rd->pos += k;
            reader_compact(rd);
            if (c->sk.phase == CONN_SK_DONE)
                *reply = sink_reply(c);
            return REDIS_OK;
        }
    } else if (reader_at_boundary(rd) && rd->pos == rd->len) {
        return REDIS_OK; /* nothing to parse: keep hiredis from starting a reply */
    }
    return redisReaderGetReply(rd, reply);
}
