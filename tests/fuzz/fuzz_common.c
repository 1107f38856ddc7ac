/* tests/fuzz/fuzz_common.c: what the fuzz targets share: the failure
 * report, the capped allocator, RESP bytes to a reply, and the reply
 * invariants. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "rcpipe.h"
#include "reply.h"

void rcp_fuzz_fail(const char *what, const char *file, int line)
{
    fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", what, file, line);
    abort();
}

static atomic_ulong refused;

static int over_cap(size_t n, size_t size)
{
    if (size && n > FUZZ_ALLOC_CAP / size) {
        atomic_fetch_add(&refused, 1);
        return 1;
    }
    return 0;
}

static void *cap_malloc(size_t n) { return over_cap(n, 1) ? NULL : malloc(n); }
static void *cap_calloc(size_t n, size_t s) { return over_cap(n, s) ? NULL : calloc(n, s); }
static void *cap_realloc(void *p, size_t n) { return over_cap(n, 1) ? NULL : realloc(p, n); }

void rcp_fuzz_alloc_init(void)
{
    static const rcp_allocator a = {cap_malloc, cap_calloc, cap_realloc, free};
    static atomic_int done;
    if (!atomic_exchange(&done, 1))
        FUZZ_CHECK(rcp_set_allocator(&a) == RCP_OK);
}

unsigned long rcp_fuzz_alloc_refused(void)
{
    return atomic_exchange(&refused, 0);
}

rcp_reply *rcp_fuzz_parse_one(const uint8_t *data, size_t size)
{
    redisReader *rd = rcp__reader_new();
    void *out = NULL;
    FUZZ_CHECK(rd != NULL);
    if (redisReaderFeed(rd, (const char *)data, size) != REDIS_OK ||
        redisReaderGetReply(rd, &out) != REDIS_OK)
        out = NULL;
    redisReaderFree(rd);
    return out;
}

void rcp_fuzz_check_reply(const rcp_reply *r, int depth)
{
    size_t i;
    FUZZ_CHECK(r != NULL);
    FUZZ_CHECK(depth <= 16);
    FUZZ_CHECK((r->rcp__flags & ~RCP__REPLY_SMALL) == 0);
    switch (r->type) {
    case RCP_REPLY_STRING:
    case RCP_REPLY_STATUS:
    case RCP_REPLY_ERROR:
        FUZZ_CHECK(r->str != NULL);
        FUZZ_CHECK(r->str[r->len] == '\0');
        FUZZ_CHECK(r->err == (r->type == RCP_REPLY_ERROR ? RCP_ERR_SERVER : RCP_OK));
        FUZZ_CHECK(rcp_reply_is_error(r) == (r->type == RCP_REPLY_ERROR));
        break;
    case RCP_REPLY_ARRAY:
        FUZZ_CHECK(r->err == RCP_OK);
        FUZZ_CHECK(r->elements == 0 || r->element != NULL);
        for (i = 0; i < r->elements; i++)
            rcp_fuzz_check_reply(r->element[i], depth + 1);
        break;
    case RCP_REPLY_INTEGER:
    case RCP_REPLY_NIL:
        FUZZ_CHECK(r->err == RCP_OK);
        break;
    default:
        FUZZ_CHECK(!"reply type out of range");
    }
}

rcp_fuzz_fn rcp_fuzz_find(const char *name)
{
    static const struct {
        const char *name;
        rcp_fuzz_fn fn;
    } targets[] = {
        {"reply", rcp_fuzz_reply},
        {"slots", rcp_fuzz_slots},
        {"redirect", rcp_fuzz_redirect},
        {"cmd", rcp_fuzz_cmd},
    };
    size_t i;
    for (i = 0; i < sizeof targets / sizeof targets[0]; i++)
        if (strcmp(name, targets[i].name) == 0)
            return targets[i].fn;
    return NULL;
}
