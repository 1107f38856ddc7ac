/* lib/conn_source.c: streaming writes. A request's last argument comes
 * from a source of known length (rcp_source): the request's head
 * ("*N", its other arguments, "$<len>\r\n") is queued in the pending
 * buffer like any request, and the loop's writer, once that head is out,
 * pulls the value from the source a chunk at a time (256 KiB) as the
 * socket accepts it, then writes the CRLF. No buffer grows with the
 * value.
 *
 * The loop writes a source (rcp__conn_take_flush takes a source slot only
 * for it; sending threads and sync leaders stop before one), except that
 * a lone sync caller on an idle connection uploads its own
 * (rcp__conn_source_upload, from conn_fast.c: the same writer, waiting in
 * poll when the socket is full). Either way one thread does the whole
 * upload: its state (c->so) never changes hands. A source slot ends its
 * flush and stays before wr until its last byte is out, so a failure
 * meanwhile finds it unwritten.
 *
 * A source that ends early leaves the server inside a bulk string it
 * will never see the end of: no byte we could add would make the stream
 * right without storing a wrong value. The connection is dropped instead
 * (the server discards a partial command), and the request fails with
 * RCP_ERR_IO (rcp__conn_fail reads c->so).
 *
 * An fd source on a regular file, in plain text, goes with sendfile(2)
 * instead: page cache to socket, without the copy through the chunk
 * buffer (0.4-0.7x of the client's CPU per 64 MiB SET here, see
 * docs/large-values.md). sendfile has neither MSG_DONTWAIT nor
 * MSG_NOSIGNAL, and the socket is in blocking mode (the lone-caller path
 * reads it with a receive timeout): a pass sets O_NONBLOCK for its calls
 * and clears it after, with SIGPIPE blocked on the thread meanwhile (and
 * a SIGPIPE it raised taken back), so a peer that closed is an EPIPE, as
 * for send(). Nobody else does I/O on the socket meanwhile: no other
 * thread takes a connection whose source is being written (conn_fast.c,
 * lead_candidate, fast_claim). A file sendfile refuses is read in chunks
 * from where it stopped.
 *
 * A chunk that is not the value's last goes with MSG_MORE: without it
 * the kernel pushes a partial segment at the end of every call. And a
 * chunk is filled by as many calls of a callback as it takes (a callback
 * may give less than asked): 256 KiB a send, not the 64 KiB a callback
 * tends to give. Both cut a 1 MiB upload's client CPU by a third here,
 * and the server's reads with it (docs/large-values.md). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "conn_int.h"
#include "format.h"

#define SOURCE_CHUNK (256 * 1024)
/* The bytes one pass writes before the loop serves its other work. */
#define SOURCE_PASS (1024 * 1024)

int rcp__source_check(const rcp_source *s)
{
    if (s && s->kind == RCP_SOURCE_CALLBACK && s->fn)
        return RCP_OK;
    if (s && s->kind == RCP_SOURCE_FD && s->fd >= 0 && s->offset >= 0)
        return RCP_OK;
    return RCP_ERR_INVALID;
}

int rcp__source_replayable(const rcp_source *s)
{
    struct stat st;
    if (s->kind == RCP_SOURCE_FD)
        return fstat(s->fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
    return (s->flags & RCP_SOURCE_REPLAYABLE) != 0;
}

void rcp__conn_source_reset(struct rcp_conn *c)
{
    c->so.on = 0;
    c->so.src = NULL;
    c->so.off = 0;
    c->so.last = 0;
    c->so.blen = c->so.boff = 0;
    c->so.sendfile = -1;
    c->so.why[0] = '\0';
}

/* Whether this upload goes with sendfile: plain text, an fd on a file. */
static int sendfile_fits(const struct rcp_conn *c, const rcp_source *src)
{
    struct stat st;
    return !c->tls && src->kind == RCP_SOURCE_FD && fstat(src->fd, &st) == 0 &&
           S_ISREG(st.st_mode);
}

/* A socket's failure (the connection's), as against the file's. */
static int socket_errno(int e)
{
    return e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ETIMEDOUT ||
           e == ECONNABORTED || e == ENETDOWN || e == ENETUNREACH || e == EHOSTUNREACH;
}

enum { SF_FALLBACK = 100 }; /* sendfile refused the file: go on in chunks */

/* One pass of sendfile from so->off, up to SOURCE_PASS bytes in all
 * (*written counts them): CONN_IO_DONE once the value is out (its CRLF
 * is not), CONN_IO_AGAIN, CONN_IO_YIELD, CONN_IO_ERR (errno), CONN_IO_SHORT
 * (so->why) or SF_FALLBACK. */
static int source_sendfile(struct rcp_conn *c, size_t *written)
{
    rcp__source_state *so = &c->so;
    const rcp_source *src = so->src;
    sigset_t pipe_only, old, pending;
    struct timespec zero = {0, 0};
    int fl, rv = CONN_IO_DONE, err = 0, was_pending;

    fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return SF_FALLBACK;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigpending(&pending);
    was_pending = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    while (so->off < src->len) {
        off_t pos = src->offset + (off_t)so->off;
        size_t want = src->len - so->off;
        ssize_t n;
        if (*written >= SOURCE_PASS) {
            rv = CONN_IO_YIELD;
            break;
        }
        if (want > SOURCE_PASS - *written)
            want = SOURCE_PASS - *written;
        n = sendfile(c->fd, src->fd, &pos, want);
        if (n > 0) {
            so->off += (size_t)n;
            *written += (size_t)n;
            conn_stat_add(&c->st.write_calls, 1);
            conn_stat_add(&c->st.bytes_out, (uint64_t)n);
            conn_stat_add(&c->st.sendfile_bytes, (uint64_t)n);
            continue;
        }
        err = n < 0 ? errno : 0;
        if (n < 0 && err == EINTR)
            continue;
        if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK))
            rv = CONN_IO_AGAIN;
        else if (n < 0 && (err == EINVAL || err == ENOSYS || err == EOVERFLOW))
            rv = SF_FALLBACK;
        else if (n < 0 && socket_errno(err))
            rv = CONN_IO_ERR;
        else {
            if (n == 0)
                snprintf(so->why, sizeof so->why, "source ended at byte %llu of %zu",
                         (unsigned long long)so->off, src->len);
            else
                snprintf(so->why, sizeof so->why,
                         "source failed at byte %llu of %zu: sendfile: %s",
                         (unsigned long long)so->off, src->len, strerror(err));
            rv = CONN_IO_SHORT;
        }
        break;
    }
    if (err == EPIPE && !was_pending)
        sigtimedwait(&pipe_only, NULL, &zero); /* the SIGPIPE it raised: not the process's */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    fcntl(c->fd, F_SETFL, fl);
    errno = err;
    return rv;
}

/* Up to want (> 0) bytes of the value from off into buf: how many, or
 * -1 with why (the source ended, failed, or gave more than asked). */
static ssize_t source_read(const rcp_source *src, char *buf, size_t want, uint64_t off,
                           char *why, size_t whylen)
{
    ssize_t n;
    if (src->kind == RCP_SOURCE_CALLBACK) {
        n = src->fn(src->ud, buf, want, off);
    } else {
        do
            n = pread(src->fd, buf, want, src->offset + (off_t)off);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == ESPIPE) {
            do
                n = read(src->fd, buf, want);
            while (n < 0 && errno == EINTR);
        }
    }
    if (n > 0 && (size_t)n <= want)
        return n;
    if (n < 0 && src->kind == RCP_SOURCE_FD)
        snprintf(why, whylen, "source failed at byte %llu of %zu: read: %s",
                 (unsigned long long)off, src->len, strerror(errno));
    else if (n > 0)
        snprintf(why, whylen, "source gave %zd bytes at byte %llu of %zu where %zu were asked for",
                 n, (unsigned long long)off, src->len, want);
    else
        snprintf(why, whylen, "source ended at byte %llu of %zu%s", (unsigned long long)off,
                 src->len, n == 0 ? "" : " (the callback failed)");
    return -1;
}

int rcp__source_inline(int argc, const char **argv, const size_t *argvlen, const rcp_source *src,
                       char **out, size_t *outlen, char *why, size_t whylen)
{
    size_t head = rcp__format_source_len(argc, argv, argvlen, src->len), got = 0;
    char *buf = rcp__malloc(head + src->len + 2);
    if (!buf) {
        snprintf(why, whylen, "out of memory for a %zu-byte value", src->len);
        return RCP_ERR_OOM;
    }
    rcp__format_source_write(buf, argc, argv, argvlen, src->len);
    while (got < src->len) {
        ssize_t n = source_read(src, buf + head + got, src->len - got, got, why, whylen);
        if (n < 0) {
            rcp__free(buf);
            return RCP_ERR_IO;
        }
        got += (size_t)n;
    }
    buf[head + got] = '\r';
    buf[head + got + 1] = '\n';
    *out = buf;
    *outlen = head + src->len + 2;
    return RCP_OK;
}

/* Pull the next chunk into so->buf; 0, or CONN_IO_SHORT with so->why. */
static int source_pull(struct rcp_conn *c)
{
    rcp__source_state *so = &c->so;
    const rcp_source *src = so->src;
    size_t want = src->len - so->off;
    ssize_t n = 0;

    if (want > SOURCE_CHUNK)
        want = SOURCE_CHUNK;
    so->blen = so->boff = 0;
    while (so->blen < want) {
        if ((n = source_read(src, so->buf + so->blen, want - so->blen, so->off, so->why,
                             sizeof so->why)) < 0)
            return CONN_IO_SHORT;
        so->off += (size_t)n;
        so->blen += (size_t)n;
        if (src->kind == RCP_SOURCE_FD)
            break; /* a file gives what was asked; a pipe: send what came, do not wait */
    }
    if (so->off == src->len) {
        /* The value's CRLF rides with its last chunk. */
        so->buf[so->blen++] = '\r';
        so->buf[so->blen++] = '\n';
        so->last = 1;
    }
    return 0;
}

int rcp__conn_source_write(struct rcp_conn *c)
{
    rcp__source_state *so = &c->so;
    size_t written = 0;

    if (!so->buf) {
        so->buf = rcp__malloc(SOURCE_CHUNK + 2);
        if (!so->buf) {
            snprintf(so->why, sizeof so->why, "out of memory for a source's chunk buffer");
            return CONN_IO_SHORT;
        }
    }
    if (so->sendfile < 0)
        so->sendfile = sendfile_fits(c, so->src);
    if (so->sendfile && !so->last) {
        int rv = source_sendfile(c, &written);
        if (rv == SF_FALLBACK) {
            so->sendfile = 0; /* the rest in chunks, from so->off */
        } else if (rv != CONN_IO_DONE) {
            return rv;
        } else {
            so->buf[0] = '\r'; /* the value is out: its CRLF */
            so->buf[1] = '\n';
            so->blen = 2;
            so->boff = 0;
            so->last = 1;
        }
    }
    for (;;) {
        if (so->boff < so->blen) {
            int rv = conn_write_more(c, so->buf, so->blen, &so->boff, !so->last);
            if (rv != CONN_IO_DONE)
                return rv;
            written += so->blen;
        }
        if (so->last)
            return CONN_IO_DONE;
        if (written >= SOURCE_PASS)
            return CONN_IO_YIELD;
        if (source_pull(c))
            return CONN_IO_SHORT;
    }
}

/* Wait (poll) until the socket may take more bytes, up to `until` (ns,
 * 0: none) and at most 100 ms a call, so a close (which shuts the socket
 * down) or a passed deadline is seen. Writability only, under TLS too:
 * waking on readable data would spin while a server that sent something
 * (an error before it closes) leaves the socket full. A TLS write that
 * needs a read first (renegotiation; SSL_ERROR_WANT_READ maps to
 * CONN_IO_AGAIN too) is retried at the 100 ms cap, never busy. */
static void upload_wait(struct rcp_conn *c, uint64_t until)
{
    struct pollfd p;
    int ms = 100;
    if (until) {
        uint64_t now = rcp__now_ns();
        uint64_t left = until > now ? (until - now + 999999) / 1000000 : 0;
        if (left < (uint64_t)ms)
            ms = (int)left;
    }
    p.fd = c->fd;
    p.events = POLLOUT;
    p.revents = 0;
    poll(&p, 1, ms);
}

int rcp__conn_source_upload(struct rcp_conn *c, const char *head, size_t hlen,
                            uint64_t deadline, char *cause, size_t causelen)
{
    size_t off = 0;
    uint64_t since = rcp__now_ns(), moved = 0;
    for (;;) {
        uint64_t now, io_end = 0;
        int rv = conn_write_more(c, head, hlen, &off, 1);
        if (rv == CONN_IO_DONE)
            rv = rcp__conn_source_write(c);
        if (rv == CONN_IO_DONE)
            return CONN_IO_DONE;
        if (rv == CONN_IO_ERR)
            conn_io_cause(c, CONN_IO_ERR, "write", cause, causelen);
        if (rv == CONN_IO_SHORT)
            snprintf(cause, causelen, "%s", c->so.why);
        if (rv != CONN_IO_AGAIN && rv != CONN_IO_YIELD)
            return rv;
        now = rcp__now_ns();
        if (off + c->so.off + c->so.boff != moved) {
            moved = off + c->so.off + c->so.boff; /* bytes went out: the stall clock restarts */
            since = now;
        }
        if (deadline && now >= deadline)
            return CONN_IO_TIMEOUT;
        if (c->opt.io_timeout_ms > 0) {
            io_end = since + conn_ms_to_ns(c->opt.io_timeout_ms);
            if (now >= io_end) {
                snprintf(cause, causelen, "I/O timeout: the socket took no byte of the value for %d ms",
                         c->opt.io_timeout_ms);
                return CONN_IO_ERR;
            }
        }
        if (rv == CONN_IO_AGAIN)
            upload_wait(c, deadline && (!io_end || deadline < io_end) ? deadline : io_end);
    }
}
