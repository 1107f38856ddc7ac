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
 * RCP_ERR_IO (rcp__conn_fail reads c->so). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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
    c->so.why[0] = '\0';
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
