/* lib/conn.c: a pipelined connection to one Redis node: open, close,
 * options, and the request path every sender takes (stats and the state
 * others read: conn_stats.c).
 *
 * Any thread may send. A request is formatted straight into the pending
 * buffer under the connection mutex and its future recorded in the ring
 * (see conn_int.h). The sender that opens a flush pokes the loop, which
 * writes it and reads the replies (conn_io.c). A lone synchronous caller
 * that finds the connection idle does its own I/O instead (conn_fast.c).
 * Getting connected and every failure: conn_connect.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "conn_int.h"
#include "options.h"
#include "format.h"
#include "reply.h"

#define RBUF_SIZE (64 * 1024)

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
    o->max_reply_bytes = 512u * 1024 * 1024;
    o->queue_policy = RCP_QUEUE_BLOCK;
    o->reconnect_min_ms = 10;
    o->reconnect_max_ms = 2000;
    o->keepalive_s = 60;
    o->fast_path = 1;
    o->spare_conns = 3;
}

/* ------------------------------------------------------------------ */
/* the pending buffer and the ring                                     */

/* Mutex held. Append one slot; bytes must already be in the pending buffer. */
/* Returns 1 if the deadline lowered the connection's timer. */
static int push_slot(struct rcp_conn *c, rcp_future *f, uint64_t deadline, size_t len,
                     const rcp_sink *sink, const rcp_source *src, unsigned flags)
{
    rcp__slot *s = &c->ring[c->tail & c->mask];
    s->f = f;
    s->deadline = deadline;
    s->len = len;
    s->sink = sink;
    s->src = src;
    conn_sink_count(c, sink);
    s->flags = flags;
    c->tail++;
    if (deadline && deadline < c->min_deadline) {
        c->min_deadline = deadline;
        return conn_set_timer(c, deadline);
    }
    return 0;
}

/* Mutex held, the send's requests queued from index `first`: whether the
 * sending thread may write them itself now (rcp__conn_caller_flush)
 * instead of waking the loop. Only on an idle connection (nothing else
 * queued or awaiting a reply: the send is alone, as a lone sync caller
 * is), and only when the send before found it idle too: the first send
 * of a burst (a worker refilling its window, a fan-out) would go alone and
 * split the burst's flush in two, while one-at-a-time traffic (depth 1)
 * finds the connection idle every time. Then only if waking the loop would
 * cost a wake (it waits: a running loop takes the request on its next
 * pass for free, and many threads are better batched by it), if the loop
 * listens to the socket (the reply wakes the loop, which reads it), with
 * nobody else on the socket, in plain text (a TLS session is the loop's
 * alone) and without a flush pause. */
static inline int caller_may_write(struct rcp_conn *c, uint64_t first)
{
    if (c->head != first || c->taken != first) {
        c->idle_sends = 0;
        return 0;
    }
    if (c->idle_sends < 2 && ++c->idle_sends < 2)
        return 0;
    /* loop_io before wlen/woff: those are the loop's while it serves. */
    return c->opt.fast_path && c->state == RCP__ST_READY && !c->wake_pending &&
           !c->fast_active && !c->loop_io && !c->caller_writing && !c->need_close &&
           !c->need_read && !c->closing && !c->tls && !c->push_fn && !c->opt.batch_delay_us &&
           c->wlen == c->woff && __atomic_load_n(&c->armed, __ATOMIC_RELAXED) &&
           !rcp__loop_awake(c->loop);
}

/* Mutex held, after queueing. Adaptive corking (option cork): a write is
 * in flight and not one byte of its replies has come back, so the loop
 * will read soon and write after it (conn_io.c serve: do_read, then
 * do_write): requests sent meanwhile wait for that instead of waking the
 * loop for a write of their own, up to a full flush. Nagle's rule, with
 * the first reply byte for the acknowledgement. No timer is needed: a
 * request held here waits at most until the first reply byte of the
 * requests already written, which the server sends before it would even
 * read this one (it answers a connection's requests in order), plus one
 * round trip; a server that never answers trips the I/O timeout, which
 * fails the held requests as not sent. Not while a caller is on the
 * socket (it writes what queues behind it) nor on a push connection. */
static inline int conn_corked(struct rcp_conn *c)
{
    if (!c->opt.cork || !atomic_load_explicit(&c->unheard, memory_order_relaxed))
        return 0;
    if (c->head == c->wr || c->fast_active || c->caller_writing || c->push_fn ||
        c->state != RCP__ST_READY || c->tail - c->taken >= c->opt.max_batch_commands ||
        c->pend_len - c->pend_off >= c->opt.max_batch_bytes)
        return 0;
    conn_stat_add(&c->st.corked, 1);
    return 1;
}

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
    rcp__free(c->so.buf);
    rcp__free(c->rbuf);
    rcp__free(c->host);
    rcp__free(c->username);
    rcp__free(c->password);
    rcp__free(c->client_name);
    rcp__tls_forget(c);
    rcp__tls_cfg_put(c->tls_cfg);
    rcp__free(c);
}

int rcp__conn_create(rcp__loop *loop, const rcp_conn_options *o, unsigned flags,
                     struct rcp_conn **out)
{
    struct rcp_conn *c;
    uint64_t cap = 1;

    *out = NULL;
    {
        char why[200];
        int rv = rcp__conn_options_check(o, 1, why, sizeof why);
        if (rv != RCP_OK)
            return rv;
    }
    c = rcp__calloc(1, sizeof(*c));
    if (!c)
        return RCP_ERR_OOM;
    c->opt = *o;
    /* Critical sections are a few hundred ns (a memcpy of one request):
     * the mutex spins briefly before it sleeps (lock.h). */
    rcp__mutex_init(&c->mu);
    rcp__cond_init(&c->space_cv);
    rcp__cond_init(&c->state_cv);
    c->fd = -1;
    c->open_result = -1;
    c->min_deadline = UINT64_MAX;
    atomic_init(&c->timer_at, UINT64_MAX);
    c->loop = loop;
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
    c->budget.max = c->opt.max_reply_bytes;
    c->reader = rcp__reader_new_budget(&c->budget);
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
    if (o->tls) {
        char why[300];
        int rv = rcp__tls_cfg_get(o, &c->tls_cfg, why, sizeof why);
        if (rv != RCP_OK) {
            conn_free(c);
            return rv;
        }
        rcp__tls_cfg_apply(c->tls_cfg, &c->opt);
    }
    if (strchr(c->host, ':'))
        snprintf(c->addr, sizeof c->addr, "[%s]:%d", c->host, o->port);
    else
        snprintf(c->addr, sizeof c->addr, "%s:%d", c->host, o->port);
    rcp__conn_connect_init(c);
    c->src.ops = &rcp__conn_src_ops;
    c->readonly = (flags & RCP__CONN_READONLY) != 0;
    c->once = (flags & RCP__CONN_ONCE) != 0;
    conn_set_state(c, RCP__ST_DISCONNECTED);
    c->reconnect_at = 0;
    if (loop && rcp__loop_attach(loop, &c->src) < 0) {
        conn_free(c);
        return RCP_ERR_OOM;
    }
    *out = c;
    if (loop) {
        /* The loop connects on its first timer pass. */
        conn_set_timer(c, 0);
        rcp__loop_notify(loop, &c->src);
    }
    return RCP_OK;
}

static int open_checked(const rcp_conn_options *o, rcp_conn **out, char *errbuf, size_t errbuf_len);

int rcp_conn_open(const rcp_conn_options *o, rcp_conn **out, char *errbuf, size_t errbuf_len)
{
    int rv;

    if (errbuf && errbuf_len)
        errbuf[0] = '\0';
    if (!out) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "rcp_conn_open: out is NULL");
        return RCP_ERR_INVALID;
    }
    *out = NULL;
    {
        char why[300];
        rcp__tls_cfg *keep = NULL;
        rv = rcp__conn_options_check(o, 1, why, sizeof why);
        /* TLS files are loaded here, so that a bad one is named at open;
         * the connection created below shares this config. */
        if (rv == RCP_OK && o->tls)
            rv = rcp__tls_cfg_get(o, &keep, why, sizeof why);
        if (rv != RCP_OK) {
            if (errbuf)
                snprintf(errbuf, errbuf_len, "rcp_conn_open: %s", why);
            return rv;
        }
        rv = open_checked(o, out, errbuf, errbuf_len);
        rcp__tls_cfg_put(keep);
        return rv;
    }
}

/* rcp_conn_open once the options passed their checks. */
static int open_checked(const rcp_conn_options *o, rcp_conn **out, char *errbuf, size_t errbuf_len)
{
    struct rcp_conn *c = NULL;
    rcp__loop **loops;
    unsigned n, i;
    int rv;
    struct timespec ts;
    uint64_t deadline;

    if (o->loop) {
        /* The application's loop: nothing to wait on here (the loop may
         * be this thread's, not running yet). It connects when it runs. */
        rv = rcp__conn_create(rcp__loop_of(o->loop), o, 0, out);
        if (rv == RCP_OK)
            (*out)->spare_ok = o->spare_conns > 0;
        if (rv != RCP_OK && errbuf)
            snprintf(errbuf, errbuf_len, "rcp_conn_open: %s", rcp_strerror(rv));
        return rv;
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
    c->spare_ok = o->spare_conns > 0;
    c->loop = loops[0];
    if (rcp__loop_attach(c->loop, &c->src) < 0) {
        conn_free(c);
        return RCP_ERR_OOM;
    }
    conn_set_timer(c, 0);
    rcp__loop_notify(c->loop, &c->src);

    deadline = rcp__now_ns() + conn_ms_to_ns(o->connect_timeout_ms) + conn_ms_to_ns(1000);
    ts.tv_sec = (time_t)(deadline / 1000000000ull);
    ts.tv_nsec = (long)(deadline % 1000000000ull);
    rcp__mutex_lock(&c->mu);
    while (c->open_result < 0) {
        if (rcp__cond_wait(&c->state_cv, &c->mu, &ts) == ETIMEDOUT)
            break;
    }
    rv = c->open_result;
    if (rv < 0) {
        rv = RCP_ERR_CONNECT;
        snprintf(c->open_msg, sizeof c->open_msg, "%s: connect timed out", c->addr);
    }
    if (rv != RCP_OK && errbuf)
        snprintf(errbuf, errbuf_len, "%s", c->open_msg);
    rcp__mutex_unlock(&c->mu);
    if (rv != RCP_OK) {
        rcp_conn_close(c);
        return rv;
    }
    *out = c;
    return RCP_OK;
}

void rcp__conn_close_begin(struct rcp_conn *c)
{
    rcp__mutex_lock(&c->mu);
    c->closing = 1;
    if (c->fast_active && c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR); /* the lone caller's poll returns */
    rcp__cond_broadcast(&c->space_cv);
    rcp__mutex_unlock(&c->mu);
    if (c->loop)
        rcp__loop_notify(c->loop, &c->src);
}

void rcp_conn_close(rcp_conn *c)
{
    if (!c)
        return;
    rcp__conn_close_begin(c);
    /* A caller on a spare returns now too, not at its deadline. */
    rcp__conn_spares_interrupt(c);
    if (c->loop) {
        /* An application loop run by this thread (adapter.h) is not
         * running while we wait: do its passes here. */
        for (;;) {
            int done;
            rcp__mutex_lock(&c->mu);
            done = c->closed;
            rcp__mutex_unlock(&c->mu);
            if (done || !rcp__loop_run_pending(c->loop))
                break;
        }
        rcp__mutex_lock(&c->mu);
        while (!c->closed) {
            struct timespec ts;
            uint64_t t = rcp__now_ns() + conn_ms_to_ns(50);
            ts.tv_sec = (time_t)(t / 1000000000ull);
            ts.tv_nsec = (long)(t % 1000000000ull);
            rcp__cond_wait(&c->state_cv, &c->mu, &ts);
            if (!c->closed) {
                rcp__mutex_unlock(&c->mu);
                rcp__loop_notify(c->loop, &c->src);
                rcp__mutex_lock(&c->mu);
            }
        }
        rcp__mutex_unlock(&c->mu);
    }
    /* Calls in progress (senders blocked for room, sync callers) finish. */
    while (atomic_load(&c->active_calls) > 0) {
        rcp__mutex_lock(&c->mu);
        rcp__cond_broadcast(&c->space_cv);
        rcp__mutex_unlock(&c->mu);
        usleep(1000);
    }
    rcp__conn_spares_close(c); /* on c's loops: before they go */
    if (c->loop) {
        rcp__loop_detach(c->loop, &c->src);
        /* It may still sit on the loop's ready stack: let the loop drain
         * it before the memory goes. */
        rcp__loop_quiesce(c->loop);
    }
    rcp__conn_close_socket(c);
    conn_free(c);
}

/* ------------------------------------------------------------------ */
/* the request path                                                    */

/* Mutex held. Whether nslots requests of len bytes may be queued now:
 * RCP_OK, an error, or ROOM_WAIT (the queue is full). Inline: every
 * request passes here, and usually finds room. */
enum { ROOM_WAIT = -1 };
static inline int room_now(struct rcp_conn *c, size_t len, unsigned nslots)
{
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
    return ROOM_WAIT;
}

/* Mutex held, room_now said ROOM_WAIT: wait for room. Out of line, with
 * its timespec's division: inlined, the compiler hoisted that onto every
 * request. */
static __attribute__((noinline)) int wait_room(struct rcp_conn *c, size_t len, unsigned nslots,
                                               uint64_t deadline)
{
    for (;;) {
        struct timespec ts;
        int rv = room_now(c, len, nslots);
        if (rv != ROOM_WAIT)
            return rv;
        if (c->opt.queue_policy == RCP_QUEUE_FAIL || rcp__loop_on_thread())
            return RCP_ERR_QUEUE_FULL;
        c->space_waiters++;
        if (deadline) {
            ts.tv_sec = (time_t)(deadline / 1000000000ull);
            ts.tv_nsec = (long)(deadline % 1000000000ull);
            rv = rcp__cond_wait(&c->space_cv, &c->mu, &ts);
            c->space_waiters--;
            if (rv == ETIMEDOUT && rcp__now_ns() >= deadline)
                return RCP_ERR_TIMEOUT;
        } else {
            rcp__cond_wait(&c->space_cv, &c->mu, NULL);
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
 * pre-formatted bytes, and its future. Its deadline: `until` (ns, 0:
 * none) when has_until, else from f->timeout_ms. */
typedef struct req_desc {
    rcp_future *f;
    int argc;
    const char **argv;
    const size_t *argvlen;
    const char *raw;
    size_t len;
    int has_until;
    uint64_t until;
    const rcp_sink *sink; /* its reply streams there (conn_sink.c); NULL: none */
    const rcp_source *src; /* its last argument streams from there (conn_source.c): len
                            * is then its head's, formatted from argv */
} req_desc;

/* A request's deadline; reads the clock (into *now, once) only for a
 * deadline given in milliseconds. */
static uint64_t desc_deadline(struct rcp_conn *c, const req_desc *d, uint64_t *now)
{
    if (d->has_until)
        return d->until;
    if (!*now)
        *now = rcp__now_ns();
    return conn_deadline_for(c, d->f, *now);
}

/* The first half of an enqueue (nslots checked against max_inflight by
 * the caller): the mutex taken, room for nslots requests of total bytes
 * (waiting for it by the queue policy), the pending buffer reserved.
 * RCP_OK with the mutex held, or an error with it released. */
static inline int enqueue_begin(struct rcp_conn *c, size_t total, unsigned nslots,
                                uint64_t deadline)
{
    int rv;
    rcp__mutex_lock(&c->mu);
    rv = room_now(c, total, nslots);
    if (rv == ROOM_WAIT)
        rv = wait_room(c, total, nslots, deadline);
    if (rv != RCP_OK) {
        rcp__mutex_unlock(&c->mu);
        return rv;
    }
    if (rcp__conn_pend_reserve(c, total) < 0) {
        rcp__mutex_unlock(&c->mu);
        return RCP_ERR_OOM;
    }
    return RCP_OK;
}

/* Mutex held, room reserved: ASKING into the pending buffer and the ring,
 * in front of the command that follows it (glued to it). */
static void push_asking(struct rcp_conn *c, int asks_source)
{
    memcpy(c->pend + c->pend_len, asking_cmd, ASKING_LEN);
    c->pend_len += ASKING_LEN;
    push_slot(c, &asking_future, 0, ASKING_LEN, NULL, NULL,
              asks_source ? RCP__SLOT_ASKS_SOURCE : 0);
}

/* The second half: n requests queued from ring index `first` (lowered:
 * one of them lowered the timer; sources: one streams its value; deadline:
 * the soonest of theirs). The sender writes them itself, or the loop is
 * woken if it must be, or neither; the mutex is released. */
static inline __attribute__((always_inline)) void
enqueue_end(struct rcp_conn *c, uint64_t first, size_t n, int lowered, int sources,
            uint64_t deadline)
{
    int ring;
    conn_stat_add(&c->st.requests, n);
    rcp__loop_note_send();
    if (!sources && caller_may_write(c, first)) { /* a source is the loop's to write */
        rcp__conn_caller_flush(c, lowered); /* unlocks */
        return;
    }
    if (!lowered && conn_corked(c))
        ring = 0; /* the first reply byte of the write in flight flushes them;
                   * a sooner deadline than the loop knows of still rings */
    else
        ring = conn_want_loop(c);
    if (c->fast_active)
        atomic_store_explicit(&c->behind, 1, memory_order_relaxed); /* it writes them */
    if (!ring && c->fast_active && deadline) {
        /* Queued behind a lone caller, who pokes the loop when it leaves:
         * in time, unless this deadline comes before the lone caller's
         * own (a per-call deadline shorter than its). Then the loop must
         * look at its timers now, or it would notice this one only when
         * the lone caller is done. */
        uint64_t lone = c->ring[c->fast_idx & c->mask].deadline;
        ring = !lone || deadline < lone;
    }
    rcp__mutex_unlock(&c->mu);
    if (ring)
        conn_ring_loop(c);
}

/* Queue requests in one critical section, so they are adjacent on the wire
 * and in the ring (no other caller's request can land between them). With
 * `asking`, ASKING goes first. */
static int enqueue_many(struct rcp_conn *c, const req_desc *d, size_t n, int asking)
{
    uint64_t now = 0, deadline = 0, first;
    size_t extra = asking ? ASKING_LEN : 0, total = extra, i;
    int rv, lowered = 0, sources = 0;

    for (i = 0; i < n; i++) {
        uint64_t dl = desc_deadline(c, &d[i], &now);
        total += d[i].len;
        sources |= d[i].src != NULL;
        if (dl && (!deadline || dl < deadline))
            deadline = dl;
    }
    if (n + (asking ? 1 : 0) > c->opt.max_inflight)
        return RCP_ERR_TOO_LARGE;
    rv = enqueue_begin(c, total, (unsigned)(n + (asking ? 1 : 0)), deadline);
    if (rv != RCP_OK)
        return rv;
    first = c->tail;
    if (asking)
        push_asking(c, d[0].src != NULL);
    for (i = 0; i < n; i++) {
        if (d[i].raw)
            memcpy(c->pend + c->pend_len, d[i].raw, d[i].len);
        else if (d[i].src)
            rcp__format_source_write(c->pend + c->pend_len, d[i].argc, d[i].argv, d[i].argvlen,
                                     d[i].src->len);
        else
            rcp__format_write(c->pend + c->pend_len, d[i].argc, d[i].argv, d[i].argvlen);
        c->pend_len += d[i].len;
        lowered |= push_slot(c, d[i].f, n == 1 ? deadline : desc_deadline(c, &d[i], &now),
                             d[i].len, d[i].sink, d[i].src, asking && i == 0 ? RCP__SLOT_GLUED : 0);
    }
    enqueue_end(c, first, n, lowered, sources, deadline);
    return RCP_OK;
}

/* enqueue_many for one pre-formatted request without a source (every
 * cluster request but an upload): no descriptor to fill and no loop over
 * one, on the path every such request takes. */
static int enqueue_raw(struct rcp_conn *c, rcp_future *f, const char *raw, size_t len,
                       int asking, uint64_t deadline, const rcp_sink *sink)
{
    uint64_t first;
    int rv, lowered;
    if ((asking ? 2u : 1u) > c->opt.max_inflight)
        return RCP_ERR_TOO_LARGE;
    rv = enqueue_begin(c, len + (asking ? ASKING_LEN : 0), asking ? 2 : 1, deadline);
    if (rv != RCP_OK)
        return rv;
    first = c->tail;
    if (asking)
        push_asking(c, 0);
    memcpy(c->pend + c->pend_len, raw, len);
    c->pend_len += len;
    lowered = push_slot(c, f, deadline, len, sink, NULL, asking ? RCP__SLOT_GLUED : 0);
    enqueue_end(c, first, 1, lowered, 0, deadline);
    return RCP_OK;
}

int rcp__conn_enqueue(struct rcp_conn *c, rcp_future *f, int argc, const char **argv,
                      const size_t *argvlen, const char *raw, size_t len, int asking,
                      const rcp_sink *sink, const rcp_source *src)
{
    req_desc d;
    d.f = f;
    d.argc = argc;
    d.argv = argv;
    d.argvlen = argvlen;
    d.raw = raw;
    d.len = len;
    d.has_until = 0;
    d.until = 0;
    d.sink = sink;
    d.src = src;
    return enqueue_many(c, &d, 1, asking);
}

static int precheck(rcp_conn *c, int argc, const char **argv, const size_t *argvlen,
                    const rcp_source *src, size_t *len, const char **why)
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
    conn_spare_note(c, argc, argv, argvlen);
    if (src) {
        /* The head only goes to the pending buffer; the whole command
         * (value and CRLF included) is what max_request_bytes bounds. */
        *len = rcp__format_source_len(argc, argv, argvlen, src->len);
        if (src->len > c->opt.max_request_bytes || *len + 2 > c->opt.max_request_bytes - src->len)
            return RCP_ERR_TOO_LARGE;
        return RCP_OK;
    }
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
    conn_spare_note(c, cmd.argc, cmd.argv, cmd.argvlen);
    *buf = cmd.buf;
    *len = cmd.len;
    return RCP_OK;
}

/* The public async sends: screen the command (argv, or a format string
 * and its arguments when ap is set), queue it for f. Always inlined: each
 * entry point keeps the one call level it had before they shared this. */
__attribute__((always_inline)) static inline int
public_send(rcp_conn *c, rcp_future *f, int argc, const char **argv, const size_t *argvlen,
            const char *fmt, va_list *ap, const rcp_sink *sink, const rcp_source *src)
{
    char *buf = NULL;
    size_t len;
    const char *why;
    int rv;
    if (!c || !f || !f->resolve)
        return RCP_ERR_INVALID;
    f->rcp__reserved[1] = c; /* whose it is, for rcp_conn_cancel */
    if (c->spare_ok && !atomic_load_explicit(&c->async_seen, memory_order_relaxed))
        atomic_store_explicit(&c->async_seen, 1, memory_order_relaxed); /* no lanes */
    call_enter(c);
    if (ap)
        rv = format_fmt(c, fmt, *ap, &buf, &len, &why);
    else
        rv = precheck(c, argc, argv, argvlen, src, &len, &why);
    if (rv == RCP_OK)
        rv = rcp__conn_enqueue(c, f, argc, argv, argvlen, buf, len, 0, sink, src);
    if (buf)
        rcp__free(buf);
    call_leave(c);
    return rv;
}

int rcp_conn_send_argv(rcp_conn *c, rcp_future *f, int argc, const char **argv,
                       const size_t *argvlen)
{
    return public_send(c, f, argc, argv, argvlen, NULL, NULL, NULL, NULL);
}

int rcp_conn_send_argv_sink(rcp_conn *c, rcp_future *f, int argc, const char **argv,
                            const size_t *argvlen, const rcp_sink *sink)
{
    if (rcp__sink_check(sink) != RCP_OK)
        return RCP_ERR_INVALID;
    return public_send(c, f, argc, argv, argvlen, NULL, NULL, sink, NULL);
}

int rcp_conn_send_argv_source(rcp_conn *c, rcp_future *f, int argc, const char **argv,
                              const size_t *argvlen, const rcp_source *src)
{
    if (rcp__source_check(src) != RCP_OK)
        return RCP_ERR_INVALID;
    return public_send(c, f, argc, argv, argvlen, NULL, NULL, NULL, src);
}

int rcp_conn_sendv(rcp_conn *c, rcp_future *f, const char *fmt, va_list ap)
{
    va_list cp;
    int rv;
    va_copy(cp, ap); /* a va_list parameter may be an array: pass a copy's address */
    rv = public_send(c, f, 0, NULL, NULL, fmt, &cp, NULL, NULL);
    va_end(cp);
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
/* sync calls (the waiting and the lone-caller path: conn_fast.c)      */

rcp_reply *rcp__conn_error_reply(int code, const char *why, const char *what)
{
    char msg[400];
    if (why)
        return rcp__reply_error_new(code, why);
    snprintf(msg, sizeof msg, "%s: %s", what, rcp_strerror(code));
    return rcp__reply_error_new(code, msg);
}

/* A sync call from a loop thread would wait for the loop it stops. */
static rcp_reply *on_loop_refusal(void)
{
    return rcp__conn_error_reply(RCP_ERR_INVALID,
                                 "sync call from an I/O thread (a callback) would deadlock", NULL);
}

int rcp__conn_send_raw(struct rcp_conn *c, rcp_future *f, const char *raw, size_t len, int asking)
{
    int rv;
    call_enter(c);
    rv = rcp__conn_enqueue(c, f, 0, NULL, NULL, raw, len, asking, NULL, NULL);
    call_leave(c);
    return rv;
}

int rcp__conn_send_raw_sink(struct rcp_conn *c, rcp_future *f, const char *raw, size_t len,
                            int asking, uint64_t deadline, const rcp_sink *sink)
{
    /* The caller holds c (connection.h): no call_enter of its own, two
     * atomic operations on c's shared counter fewer per request. */
    return enqueue_raw(c, f, raw, len, asking, deadline, sink);
}

/* A pre-formatted head whose last argument streams from src: through
 * enqueue_many, which knows sources. */
int rcp__conn_send_raw_source(struct rcp_conn *c, rcp_future *f, const char *raw, size_t len,
                              int asking, uint64_t deadline, const rcp_source *src)
{
    req_desc d;
    int rv;
    memset(&d, 0, sizeof d);
    d.f = f;
    d.raw = raw;
    d.len = len;
    d.has_until = 1;
    d.until = deadline;
    d.src = src;
    call_enter(c);
    rv = enqueue_many(c, &d, 1, asking);
    call_leave(c);
    return rv;
}

rcp_reply *rcp__conn_command_raw_source(struct rcp_conn *c, const char *raw, size_t len,
                                        int asking, int timeout_ms, const rcp_source *src)
{
    rcp_reply *r;
    if (rcp__loop_on_thread())
        return on_loop_refusal();
    call_enter(c);
    r = rcp__conn_sync_command(c, 0, NULL, NULL, raw, len, asking, timeout_ms, NULL, src);
    call_leave(c);
    return r;
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
    return rcp__conn_command_raw_sink(c, raw, len, asking, timeout_ms, NULL);
}

rcp_reply *rcp__conn_command_raw_sink(struct rcp_conn *c, const char *raw, size_t len, int asking,
                                      int timeout_ms, const rcp_sink *sink)
{
    rcp_reply *r;
    if (rcp__loop_on_thread())
        return on_loop_refusal();
    call_enter(c);
    r = asking < 0 ? rcp__conn_sync_lone(c, raw, len, timeout_ms, asking == RCP__CONN_SPILL)
                   : rcp__conn_sync_command(c, 0, NULL, NULL, raw, len, asking, timeout_ms, sink, NULL);
    call_leave(c);
    return r;
}


/* The public sync calls: refuse a NULL handle and a loop thread, screen
 * the command (argv, or a format string and its arguments when ap is
 * set), run it. Always inlined, as public_send. */
__attribute__((always_inline)) static inline rcp_reply *
public_command(rcp_conn *c, const char *fn, int argc, const char **argv, const size_t *argvlen,
               const char *fmt, va_list *ap, const rcp_sink *sink, const rcp_source *src)
{
    char *buf = NULL, whybuf[300];
    size_t len;
    const char *why;
    int rv;
    rcp_reply *r;
    if (!c) {
        char msg[80];
        snprintf(msg, sizeof msg, "%s: NULL handle", fn);
        return rcp__conn_error_reply(RCP_ERR_INVALID, msg, NULL);
    }
    if (rcp__loop_on_thread())
        return on_loop_refusal();
    call_enter(c);
    if (ap)
        rv = format_fmt(c, fmt, *ap, &buf, &len, &why);
    else
        rv = precheck(c, argc, argv, argvlen, src, &len, &why);
    if (rv == RCP_OK && src && src->len <= RCP__SOURCE_INLINE) {
        /* Small: read now, sent as any request (connection.h). */
        rv = rcp__source_inline(argc, argv, argvlen, src, &buf, &len, whybuf, sizeof whybuf);
        why = whybuf;
        src = NULL;
    }
    if (rv != RCP_OK)
        r = rcp__conn_error_reply(rv, why, "request refused");
    else
        r = rcp__conn_sync_command(c, argc, argv, argvlen, buf, len, 0, 0, sink, src);
    if (buf)
        rcp__free(buf);
    call_leave(c);
    return r;
}

rcp_reply *rcp_conn_command_argv(rcp_conn *c, int argc, const char **argv, const size_t *argvlen)
{
    return public_command(c, "rcp_conn_command_argv", argc, argv, argvlen, NULL, NULL, NULL, NULL);
}

rcp_reply *rcp_conn_command_argv_sink(rcp_conn *c, int argc, const char **argv,
                                      const size_t *argvlen, const rcp_sink *sink)
{
    if (rcp__sink_check(sink) != RCP_OK)
        return rcp__conn_error_reply(RCP_ERR_INVALID, "rcp_conn_command_argv_sink: invalid sink",
                                     NULL);
    return public_command(c, "rcp_conn_command_argv_sink", argc, argv, argvlen, NULL, NULL, sink,
                          NULL);
}

rcp_reply *rcp_conn_command_argv_source(rcp_conn *c, int argc, const char **argv,
                                        const size_t *argvlen, const rcp_source *src)
{
    if (rcp__source_check(src) != RCP_OK)
        return rcp__conn_error_reply(RCP_ERR_INVALID,
                                     "rcp_conn_command_argv_source: invalid source", NULL);
    return public_command(c, "rcp_conn_command_argv_source", argc, argv, argvlen, NULL, NULL,
                          NULL, src);
}

rcp_reply *rcp_conn_commandv(rcp_conn *c, const char *fmt, va_list ap)
{
    va_list cp;
    rcp_reply *r;
    va_copy(cp, ap); /* a va_list parameter may be an array: pass a copy's address */
    r = public_command(c, "rcp_conn_command", 0, NULL, NULL, fmt, &cp, NULL, NULL);
    va_end(cp);
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

void rcp__conn_hold(struct rcp_conn *c)
{
    atomic_fetch_add(&c->active_calls, 1);
}

void rcp__conn_release(struct rcp_conn *c)
{
    atomic_fetch_sub(&c->active_calls, 1);
}
