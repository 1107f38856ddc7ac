/* lib/reply.c: the reply type. Replies are built by the hiredis reader
 * through our own object functions, so a GET's reply is one allocation
 * (header and bytes together) instead of hiredis's two; the same functions
 * are the place where a streaming sink can later divert large bulk values. */
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include <hiredis/sds.h>

#include "alloc.h"
#include "reply.h"
#include "thread_local.h"

static rcp_reply oom_reply = {
    RCP_REPLY_ERROR, RCP_ERR_OOM, 0, 13, "out of memory", 0, NULL, RCP__REPLY_STATIC,
};

/* Small replies (a GET's value, an integer, OK, nil) are recycled through
 * a cache per thread, so that in steady state the thread that parses
 * replies and frees them again (an I/O thread running async callbacks, a
 * lone caller doing its own I/O) calls no allocator per reply. Every small
 * reply is allocated with SMALL_BYTES, whatever its size; a thread keeps
 * at most SMALL_CACHE_MAX of them, and gives them back to the allocator
 * when it exits. */
#define SMALL_BYTES 192
#define SMALL_CACHE_MAX 64

typedef struct small_block {
    struct small_block *next;
} small_block;

static RCP__THREAD_LOCAL small_block *small_head;
static RCP__THREAD_LOCAL unsigned small_count;
static RCP__THREAD_LOCAL int small_registered; /* small_key set on this thread */
static pthread_key_t small_key;
static pthread_once_t small_once = PTHREAD_ONCE_INIT;
static int small_key_ok;

static void small_cache_drop(void *at_exit)
{
    /* At thread exit the key's value is cleared: a reply freed by a later
     * destructor must set it again, so this one runs once more. */
    if (at_exit)
        small_registered = 0;
    while (small_head) {
        small_block *b = small_head;
        small_head = b->next;
        rcp__free(b);
    }
    small_count = 0;
}

void rcp__reply_cache_drop(void)
{
    small_cache_drop(NULL);
}

static void small_key_init(void)
{
    small_key_ok = pthread_key_create(&small_key, small_cache_drop) == 0;
}

/* Keeps b for reuse, or frees it. */
static void small_put(void *b)
{
    if (!small_registered) {
        /* The key's value only makes the destructor run at thread exit;
         * set once per thread, not each time the cache runs empty. */
        pthread_once(&small_once, small_key_init);
        if (!small_key_ok || pthread_setspecific(small_key, &small_head) != 0) {
            rcp__free(b);
            return;
        }
        small_registered = 1;
    }
    if (small_count >= SMALL_CACHE_MAX) {
        rcp__free(b);
        return;
    }
    ((small_block *)b)->next = small_head;
    small_head = b;
    small_count++;
}

static void *small_get(void)
{
    small_block *b = small_head;
    if (!b)
        return rcp__malloc(SMALL_BYTES);
    small_head = b->next;
    small_count--;
    return b;
}

static inline __attribute__((always_inline)) rcp_reply *alloc_node(int type, size_t extra)
{
    int small = extra <= SMALL_BYTES - sizeof(rcp_reply);
    rcp_reply *r = small ? small_get() : rcp__malloc(sizeof(*r) + extra);
    if (!r)
        return NULL;
    memset(r, 0, sizeof(*r));
    if (small)
        r->rcp__flags = RCP__REPLY_SMALL;
    r->type = type;
    r->err = type == RCP_REPLY_ERROR ? RCP_ERR_SERVER : RCP_OK;
    return r;
}

/* Arrays announced larger than this get an element array that grows with
 * the elements actually received: a header announcing two billion of them
 * costs nothing until they come, and freeing a partial reply walks only
 * what arrived. Smaller ones are allocated whole, in one block. */
#define ARRAY_GROW_FROM 256

/* Room for element idx of a growing array; -1 when out of memory. */
static int grow_to(rcp_reply *a, size_t idx)
{
    size_t cap = a->len, announced = (size_t)a->integer;
    rcp_reply **ne;
    if (idx < cap)
        return 0;
    while (cap <= idx)
        cap = cap * 2;
    if (cap > announced)
        cap = announced;
    ne = rcp__realloc(a->element, cap * sizeof(*ne));
    if (!ne)
        return -1;
    a->element = ne;
    a->len = cap;
    return 0;
}

/* Counts n more bytes of the reply being read against the reader's
 * budget b (if it has one); 0, or -1 once past it. top: the object
 * starts a new reply (a task without a parent). */
static inline int charge_budget(rcp__reply_budget *b, int top, size_t n)
{
    if (!b)
        return 0;
    if (top)
        b->used = 0;
    b->used += n + sizeof(rcp_reply);
    if (b->used <= b->max)
        return 0;
    b->exceeded = 1;
    return -1;
}

static int charge(const redisReadTask *task, size_t n)
{
    return charge_budget(task->privdata, !task->parent, n);
}

static void *attach(const redisReadTask *task, rcp_reply *r)
{
    if (r && task->parent) {
        rcp_reply *parent = task->parent->obj;
        size_t idx = (size_t)task->idx;
        if (parent->rcp__flags & RCP__REPLY_GROWING) {
            if (grow_to(parent, idx) < 0) {
                rcp_reply_free(r);
                return NULL;
            }
            parent->element[idx] = r;
            parent->elements = idx + 1;
            if (parent->elements == (size_t)parent->integer) {
                /* Complete: an ordinary array from here on. */
                parent->rcp__flags &= ~RCP__REPLY_GROWING;
                parent->integer = 0;
                parent->len = 0;
            }
        } else {
            parent->element[idx] = r;
        }
    }
    return r;
}

/* A string, status or error object: one block, header and bytes. */
static inline __attribute__((always_inline)) rcp_reply *string_node(int type, const char *str,
                                                                    size_t len)
{
    rcp_reply *r = alloc_node(type, len + 1);
    char *dst;
    if (!r)
        return NULL;
    dst = (char *)(r + 1);
    memcpy(dst, str, len);
    dst[len] = '\0';
    r->str = dst;
    r->len = len;
    return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    if (len > (size_t)-1 - sizeof(rcp_reply) - 1 || charge(task, len) < 0)
        return NULL;
    return attach(task, string_node(task->type, str, len));
}

static void *create_array(const redisReadTask *task, int elements)
{
    rcp_reply *r;
    if (charge(task, (elements > 0 && elements <= ARRAY_GROW_FROM ? (size_t)elements : 0) *
                         sizeof(rcp_reply *)) < 0)
        return NULL;
    if (elements <= ARRAY_GROW_FROM)
        return attach(task, rcp__reply_array_new(elements > 0 ? (size_t)elements : 0));
    r = rcp__calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->type = RCP_REPLY_ARRAY;
    r->element = rcp__malloc(ARRAY_GROW_FROM * sizeof(*r->element));
    if (!r->element) {
        rcp__free(r);
        return NULL;
    }
    r->rcp__flags = RCP__REPLY_GROWING;
    r->integer = elements; /* announced */
    r->len = ARRAY_GROW_FROM; /* room */
    r->elements = 0;          /* received */
    return attach(task, r);
}

static void *create_integer(const redisReadTask *task, long long v)
{
    if (charge(task, 0) < 0)
        return NULL;
    return attach(task, rcp__reply_integer_new(v));
}

static void *create_nil(const redisReadTask *task)
{
    if (charge(task, 0) < 0)
        return NULL;
    return attach(task, alloc_node(RCP_REPLY_NIL, 0));
}

static void free_object(void *p)
{
    rcp_reply_free(p);
}

redisReplyObjectFunctions rcp__reply_functions = {
    create_string, create_array, create_integer, create_nil, free_object,
};

redisReader *rcp__reader_new(void)
{
    return redisReaderCreateWithFunctions(&rcp__reply_functions);
}

redisReader *rcp__reader_new_budget(rcp__reply_budget *b)
{
    redisReader *r = rcp__reader_new();
    if (r)
        r->privdata = b;
    return r;
}

/* The common reply, a whole bulk string ("$<len>\r\n<bytes>\r\n") at
 * the reader's cursor with no reply in progress, built without hiredis's
 * task machinery: hiredis spends about 220 instructions per GET reply in
 * redisReaderGetReply and its helpers, this about 110 (the object built
 * as create_string builds it aside). What it builds is what hiredis would
 * (create_string with a top-level task: the same budget charge, the same
 * object); anything else, a header that is not plain digits as hiredis
 * reads them, a nil, a value not yet whole, a failed allocation, is left
 * to redisReaderGetReply, which then sees the reader as it was. After a
 * reply it drops the parsed bytes (hiredis: once 1 KiB is consumed; here
 * also once all is, and only when they are at least what is left).
 * Returns 1 with *reply set, or 0. */
int rcp__reader_fast(redisReader *rd, void **reply)
{
    const char *p, *end;
    size_t n = 0, avail;
    int digits;
    void *obj;
    if (rd->err || rd->pos >= rd->len || rd->buf[rd->pos] != '$' ||
        rd->fn != &rcp__reply_functions ||
        !(rd->ridx == -1 || (rd->ridx == 0 && rd->rstack[0].type < 0)))
        return 0;
    p = rd->buf + rd->pos + 1;
    end = rd->buf + rd->len;
    /* The buffer is an sds string: a NUL follows its last byte, so the
     * digits stop at end at the latest. A 19th digit may wrap n: such a
     * header is refused below. */
    while ((unsigned)(*p - '0') <= 9)
        n = n * 10 + (size_t)(*p++ - '0');
    digits = (int)(p - (rd->buf + rd->pos + 1));
    /* hiredis (string2ll) refuses a leading zero: so does this, by
     * leaving such a header to it. */
    if (!digits || digits > 18 || (digits > 1 && p[-digits] == '0') || end - p < 2 ||
        p[0] != '\r' || p[1] != '\n')
        return 0;
    p += 2;
    avail = (size_t)(end - p);
    if (avail < 2 || avail - 2 < n)
        return 0;
    /* create_string's work for a top-level task, inline, without a task
     * or attach (n has at most 18 digits: no overflow check needed). */
    if (charge_budget(rd->privdata, 1, n) < 0 || !(obj = string_node(REDIS_REPLY_STRING, p, n)))
        return 0;
    rd->pos = (size_t)(p - rd->buf) + n + 2;
    if (rd->pos == rd->len) {
        /* All parsed (a read's last reply): emptied in place, as
         * sdsrange would leave it, without its call and move. */
        sdssetlen(rd->buf, 0);
        rd->buf[0] = '\0';
        rd->pos = rd->len = 0;
    } else if (rd->pos >= 1024 && rd->pos >= rd->len - rd->pos) {
        /* Once the parsed bytes outweigh the rest: each byte is moved
         * about once, not once per KiB parsed before it. */
        sdsrange(rd->buf, (int)rd->pos, -1);
        rd->pos = 0;
        rd->len = sdslen(rd->buf);
    }
    *reply = obj;
    return 1;
}

void rcp_reply_free(rcp_reply *r)
{
    size_t i;
    if (!r || (r->rcp__flags & (RCP__REPLY_STATIC | RCP__REPLY_STACK)))
        return;
    if (r->type == RCP_REPLY_ARRAY && r->element) {
        for (i = 0; i < r->elements; i++)
            rcp_reply_free(r->element[i]);
        /* Heap copies made by dup keep their element array separately. */
        if (r->element != (rcp_reply **)(r + 1))
            rcp__free(r->element);
    }
    if (r->rcp__flags & RCP__REPLY_SMALL)
        small_put(r);
    else
        rcp__free(r);
}

rcp_reply *rcp_reply_dup(const rcp_reply *src)
{
    rcp_reply *r;
    size_t i;
    if (!src)
        return NULL;
    switch (src->type) {
    case RCP_REPLY_STRING:
    case RCP_REPLY_STATUS:
    case RCP_REPLY_ERROR:
        r = alloc_node(src->type, src->len + 1);
        if (!r)
            return NULL;
        memcpy((char *)(r + 1), src->str ? src->str : "", src->str ? src->len : 0);
        ((char *)(r + 1))[src->str ? src->len : 0] = '\0';
        r->str = (char *)(r + 1);
        r->len = src->str ? src->len : 0;
        r->err = src->err;
        return r;
    case RCP_REPLY_ARRAY:
        r = alloc_node(RCP_REPLY_ARRAY, src->elements * sizeof(rcp_reply *));
        if (!r)
            return NULL;
        r->elements = src->elements;
        r->element = src->elements ? (rcp_reply **)(r + 1) : NULL;
        for (i = 0; i < src->elements; i++) {
            r->element[i] = rcp_reply_dup(src->element[i]);
            if (!r->element[i] && src->element[i]) {
                r->elements = i;
                rcp_reply_free(r);
                return NULL;
            }
        }
        return r;
    default:
        r = alloc_node(src->type, 0);
        if (!r)
            return NULL;
        r->integer = src->integer;
        r->err = src->err;
        return r;
    }
}

/* Which reply the current thread's callback kept. A thread-local, not a
 * flag in the reply: once a callback has handed the reply to another
 * thread (a sync caller), the library must not touch it again. */
static RCP__THREAD_LOCAL rcp_reply *kept_reply;

rcp_reply *rcp_reply_keep(rcp_reply *r)
{
    if (!r)
        return NULL;
    if (r->rcp__flags & (RCP__REPLY_STACK | RCP__REPLY_STATIC))
        return rcp_reply_dup(r);
    kept_reply = r;
    return r;
}

void rcp__reply_rekeep(rcp_reply *r)
{
    kept_reply = r; /* no dereference: r may be freed by now, by whoever got it */
}

int rcp_reply_is_error(const rcp_reply *r)
{
    return r && r->type == RCP_REPLY_ERROR;
}

int rcp_reply_is_nil(const rcp_reply *r)
{
    return r && r->type == RCP_REPLY_NIL;
}

/* Redis's own rule for an integer argument (string2ll): "0", or an
 * optional '-' then a non-zero digit and more digits, nothing else. */
static int text_to_ll(const char *s, size_t len, long long *out)
{
    unsigned long long v = 0, limit;
    size_t i = 0;
    int neg = 0;
    if (len == 1 && s[0] == '0') {
        *out = 0;
        return 0;
    }
    if (len > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i >= len || s[i] < '1' || s[i] > '9')
        return -1;
    limit = neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
    for (; i < len; i++) {
        unsigned d;
        if (s[i] < '0' || s[i] > '9')
            return -1;
        d = (unsigned)(s[i] - '0');
        if (v > (limit - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = neg ? (v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v)
               : (long long)v;
    return 0;
}

int rcp_reply_int(const rcp_reply *r, long long *out)
{
    if (!r || !out)
        return RCP_ERR_INVALID;
    switch (r->type) {
    case RCP_REPLY_INTEGER:
        *out = r->integer;
        return RCP_OK;
    case RCP_REPLY_STRING:
    case RCP_REPLY_STATUS:
        return text_to_ll(r->str, r->len, out) == 0 ? RCP_OK : RCP_ERR_TYPE;
    case RCP_REPLY_ERROR:
        return r->err != RCP_OK ? r->err : RCP_ERR_SERVER;
    default:
        return RCP_ERR_TYPE;
    }
}

const char *rcp_reply_str(const rcp_reply *r, size_t *len)
{
    int text = r && r->str &&
               (r->type == RCP_REPLY_STRING || r->type == RCP_REPLY_STATUS ||
                r->type == RCP_REPLY_ERROR);
    if (len)
        *len = text ? r->len : 0;
    return text ? r->str : "";
}

void rcp__reply_error_init(rcp_reply *r, int code, const char *msg)
{
    memset(r, 0, sizeof(*r));
    r->type = RCP_REPLY_ERROR;
    r->err = code;
    r->str = msg ? msg : rcp_strerror(code);
    r->len = strlen(r->str);
    r->rcp__flags = RCP__REPLY_STACK;
}

rcp_reply *rcp__reply_error_new(int code, const char *msg)
{
    rcp_reply tmp;
    rcp_reply *r;
    rcp__reply_error_init(&tmp, code, msg);
    r = rcp_reply_dup(&tmp);
    return r ? r : &oom_reply;
}

rcp_reply *rcp__reply_array_new(size_t n)
{
    rcp_reply *r;
    if (n > ((size_t)-1 - sizeof(*r)) / sizeof(rcp_reply *))
        return NULL;
    /* calloc, not malloc + memset: a header announcing billions of
     * elements must not make us touch that much memory before a single
     * element has arrived (the pages stay untouched until filled). */
    r = rcp__calloc(1, sizeof(*r) + n * sizeof(rcp_reply *));
    if (!r)
        return NULL;
    r->type = RCP_REPLY_ARRAY;
    r->elements = n;
    r->element = n ? (rcp_reply **)(r + 1) : NULL;
    return r;
}

rcp_reply *rcp__reply_integer_new(long long v)
{
    rcp_reply *r = alloc_node(RCP_REPLY_INTEGER, 0);
    if (r)
        r->integer = v;
    return r;
}

rcp_reply *rcp__reply_status_new(const char *s)
{
    size_t len = strlen(s);
    rcp_reply *r = alloc_node(RCP_REPLY_STATUS, len + 1);
    if (!r)
        return NULL;
    memcpy((char *)(r + 1), s, len + 1);
    r->str = (char *)(r + 1);
    r->len = len;
    return r;
}

void rcp__reply_release(rcp_reply *r)
{
    if (!r)
        return;
    if (kept_reply == r) {
        kept_reply = NULL;
        return;
    }
    kept_reply = NULL;
    rcp_reply_free(r);
}
