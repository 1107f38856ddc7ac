/* tests/fuzz/fuzz_reply.c: the reply path as a connection runs it. The
 * bytes after the first are a RESP stream fed to a reader made by
 * rcp__reader_new (rcpipe's own reply-object functions), in chunks chosen
 * by the first byte (all at once, byte by byte, or pseudo-random sizes), the
 * way recv() may split them. Every reply is checked, duplicated, compared
 * with its copy, then released through the keep/release/free paths a
 * resolve callback can take.
 *
 * The same chunks go to a reader with hiredis's own object functions: both
 * must agree reply for reply, and on where the stream turns invalid. (When
 * the fuzz allocator refused an allocation of ours, hiredis's unhooked
 * allocation succeeds, so the comparison stops there.) */
#include <hiredis/hiredis.h>
#include <string.h>

#include "fuzz.h"
#include "reply.h"

static int same_reply(const rcp_reply *a, const redisReply *b, int depth)
{
    size_t i;
    if (!a || !b || a->type != b->type || depth > 16)
        return 0;
    switch (a->type) {
    case RCP_REPLY_STRING:
    case RCP_REPLY_STATUS:
    case RCP_REPLY_ERROR:
        return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
    case RCP_REPLY_INTEGER:
        return a->integer == b->integer;
    case RCP_REPLY_ARRAY:
        if (a->elements != b->elements)
            return 0;
        for (i = 0; i < a->elements; i++)
            if (!same_reply(a->element[i], b->element[i], depth + 1))
                return 0;
        return 1;
    default:
        return 1;
    }
}

static int equal(const rcp_reply *a, const rcp_reply *b, int depth)
{
    size_t i;
    if (a->type != b->type || a->err != b->err || depth > 16)
        return 0;
    switch (a->type) {
    case RCP_REPLY_STRING:
    case RCP_REPLY_STATUS:
    case RCP_REPLY_ERROR:
        return a->len == b->len && memcmp(a->str, b->str, a->len + 1) == 0;
    case RCP_REPLY_INTEGER:
        return a->integer == b->integer;
    case RCP_REPLY_ARRAY:
        if (a->elements != b->elements)
            return 0;
        for (i = 0; i < a->elements; i++)
            if (!equal(a->element[i], b->element[i], depth + 1))
                return 0;
        return 1;
    default:
        return 1;
    }
}

/* What a resolve callback and its caller may do with a reply; which path
 * is chosen by the reply's position in the stream. */
static void use_reply(rcp_reply *r, unsigned nth)
{
    rcp_reply *d, *kept;

    rcp_fuzz_check_reply(r, 0);
    d = rcp_reply_dup(r);
    if (d) {
        FUZZ_CHECK(equal(r, d, 0));
        rcp_reply_free(d);
    }
    if (r->type == RCP_REPLY_ARRAY && r->elements) {
        d = rcp_reply_dup(r->element[nth % r->elements]);
        if (d) {
            FUZZ_CHECK(equal(r->element[nth % r->elements], d, 0));
            rcp_reply_free(d);
        }
    }
    if (r->type == RCP_REPLY_ERROR) {
        /* A client error made from a server's text, as the cluster layer
         * does when it gives up on a redirect. */
        rcp_reply *e = rcp__reply_error_new(RCP_ERR_PROTOCOL, r->str);
        FUZZ_CHECK(e && e->type == RCP_REPLY_ERROR);
        FUZZ_CHECK(e->err == RCP_ERR_PROTOCOL || e->err == RCP_ERR_OOM);
        rcp_reply_free(e);
    }
    switch (nth % 3) {
    case 0: /* the callback does not keep it: released after the callback */
        rcp__reply_release(r);
        break;
    case 1: /* the callback keeps it: release leaves it to the caller */
        kept = rcp_reply_keep(r);
        FUZZ_CHECK(kept == r);
        rcp__reply_release(r);
        rcp_fuzz_check_reply(kept, 0);
        rcp_reply_free(kept);
        break;
    default: /* a sync caller owns it */
        rcp_reply_free(r);
        break;
    }
}

/* 1 if some "*N" in the bytes announces an array hiredis's own reader
 * would allocate beyond the fuzz cap (it allocates the whole announced
 * array up front and walks it on free, which ours no longer does): the
 * comparison with it is skipped for such an input. A '*' inside a bulk
 * string may skip a comparison needlessly; that is all. */
static int announces_huge_array(const uint8_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned long long v = 0;
        size_t j = i + 1;
        if (p[i] != '*')
            continue;
        while (j < n && p[j] >= '0' && p[j] <= '9' && v <= FUZZ_ALLOC_CAP)
            v = v * 10 + (unsigned)(p[j++] - '0');
        if (v > FUZZ_ALLOC_CAP / sizeof(void *))
            return 1;
    }
    return 0;
}

/* Chunk sizes: mode 0 everything at once, 1 byte by byte, else an LCG. */
static size_t next_chunk(unsigned mode, unsigned *state, size_t left)
{
    size_t n;
    if (mode == 0)
        return left;
    if (mode == 1)
        return 1;
    *state = *state * 1103515245u + 12345u;
    n = 1 + (*state >> 16) % (mode * 4);
    return n < left ? n : left;
}

int rcp_fuzz_reply(const uint8_t *data, size_t size)
{
    redisReader *ours, *theirs;
    unsigned mode, state, nth = 0;
    size_t pos = 1;
    int ours_ok = 1, theirs_ok = 1, compare = 1;

    if (size < 1)
        return 0;
    rcp_fuzz_alloc_init();
    rcp_fuzz_alloc_refused();
    mode = data[0] & 7;
    state = data[0];
    compare = !announces_huge_array(data + 1, size - 1);
    ours = rcp__reader_new();
    theirs = redisReaderCreate();
    FUZZ_CHECK(ours && theirs);

    while (pos < size && ours_ok) {
        size_t n = next_chunk(mode, &state, size - pos);
        ours_ok = redisReaderFeed(ours, (const char *)data + pos, n) == REDIS_OK;
        theirs_ok = redisReaderFeed(theirs, (const char *)data + pos, n) == REDIS_OK;
        pos += n;
        while (ours_ok) {
            void *a = NULL, *b = NULL;
            ours_ok = redisReaderGetReply(ours, &a) == REDIS_OK;
            if (rcp_fuzz_alloc_refused()) {
                FUZZ_CHECK(!ours_ok && !a); /* NULL from create_* ends the stream */
                compare = 0; /* and hiredis must not be asked for that much */
            }
            if (compare && theirs_ok)
                theirs_ok = redisReaderGetReply(theirs, &b) == REDIS_OK;
            if (compare) {
                FUZZ_CHECK(ours_ok == theirs_ok);
                FUZZ_CHECK((a == NULL) == (b == NULL));
                if (a)
                    FUZZ_CHECK(same_reply(a, b, 0));
            }
            if (b)
                freeReplyObject(b);
            if (!ours_ok) {
                FUZZ_CHECK(!a);
                FUZZ_CHECK(ours->err != 0 && ours->errstr[0] != '\0');
                break;
            }
            if (!a)
                break;
            use_reply(a, nth++);
        }
    }
    redisReaderFree(ours);
    redisReaderFree(theirs);
    return 0;
}
