/* lib/conn_source.c: streaming writes. A request's last argument comes
 * from a source of known length (rcp_source): the request's head
 * ("*N", its other arguments, "$<len>\r\n") is queued in the pending
 * buffer like any request, and the loop's writer, once that head is out,
 * pulls the value from the source a chunk at a time (64 KiB) as the
 * socket accepts it, then writes the CRLF. No buffer grows with the
 * value.
 *
 * Only the loop writes a source (rcp__conn_take_flush takes a source slot
 * only for it; the fast path and sending threads stop before one), so the
 * upload needs no hand-over between threads: its state (c->so) is the
 * loop's. A source slot ends its flush and stays before wr until its last
 * byte is out, so a failure meanwhile finds it unwritten.
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
 * for send(). Nobody else does I/O on the socket meanwhile: no caller's
 * thread takes a connection whose source is being written
 * (conn_fast.c, lead_candidate). A file sendfile refuses is read in
 * chunks from where it stopped. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "conn_int.h"

#define SOURCE_CHUNK (64 * 1024)
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

/* Pull the next chunk into so->buf; 0, or CONN_IO_SHORT with so->why. */
static int source_pull(struct rcp_conn *c)
{
    rcp__source_state *so = &c->so;
    const rcp_source *src = so->src;
    size_t want = src->len - so->off;
    ssize_t n;

    if (want > SOURCE_CHUNK)
        want = SOURCE_CHUNK;
    if (want == 0) {
        n = 0;
    } else if (src->kind == RCP_SOURCE_CALLBACK) {
        n = src->fn(src->ud, so->buf, want, so->off);
    } else {
        do
            n = pread(src->fd, so->buf, want, src->offset + (off_t)so->off);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == ESPIPE) {
            do
                n = read(src->fd, so->buf, want);
            while (n < 0 && errno == EINTR);
        }
    }
    if (want && (n <= 0 || (size_t)n > want)) {
        if (n < 0 && src->kind == RCP_SOURCE_FD)
            snprintf(so->why, sizeof so->why, "source failed at byte %llu of %zu: read: %s",
                     (unsigned long long)so->off, src->len, strerror(errno));
        else if (n > 0)
            snprintf(so->why, sizeof so->why,
                     "source gave %zd bytes at byte %llu of %zu where %zu were asked for", n,
                     (unsigned long long)so->off, src->len, want);
        else
            snprintf(so->why, sizeof so->why, "source ended at byte %llu of %zu%s",
                     (unsigned long long)so->off, src->len,
                     n == 0 ? "" : " (the callback failed)");
        return CONN_IO_SHORT;
    }
    so->off += (size_t)n;
    so->blen = (size_t)n;
    so->boff = 0;
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
            int rv = conn_write_some(c, so->buf, so->blen, &so->boff);
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
