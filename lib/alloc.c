/* lib/alloc.c: allocator hooks. The hooks are read with relaxed atomics so
 * that a test may swap them between runs; the contract is still "set before
 * first use". */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "rcpipe/common.h"
#include "reply.h"

static const rcp_allocator default_allocator = {malloc, calloc, realloc, free};
static _Atomic(const rcp_allocator *) current = &default_allocator;
static rcp_allocator user_allocator;

int rcp_set_allocator(const rcp_allocator *a)
{
    if (!a || !a->malloc_fn || !a->calloc_fn || !a->realloc_fn || !a->free_fn)
        return RCP_ERR_INVALID;
    rcp__reply_cache_drop(); /* its blocks came from the previous allocator */
    user_allocator = *a;
    atomic_store(&current, &user_allocator);
    return RCP_OK;
}

void rcp_reset_allocator(void)
{
    rcp__reply_cache_drop();
    atomic_store(&current, &default_allocator);
}

static const rcp_allocator *cur(void)
{
    return atomic_load_explicit(&current, memory_order_acquire);
}

void *rcp__malloc(size_t n) { return cur()->malloc_fn(n ? n : 1); }
void *rcp__calloc(size_t n, size_t size) { return cur()->calloc_fn(n ? n : 1, size ? size : 1); }
void *rcp__realloc(void *p, size_t n) { return cur()->realloc_fn(p, n ? n : 1); }
void rcp__free(void *p) { if (p) cur()->free_fn(p); }

char *rcp__strdup(const char *s)
{
    size_t n;
    char *d;
    if (!s)
        return NULL;
    n = strlen(s) + 1;
    d = rcp__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
