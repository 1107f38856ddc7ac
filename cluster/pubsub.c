/* cluster/pubsub.c: the subscriber (rcp_pubsub). Owns one thread, the
 * subscriber's dedicated connections and its table of channels.
 *
 * Everything about channels and connections belongs to the thread alone:
 * callers hand it (un)subscribe requests through a queue and an eventfd and
 * sleep until it completes them, so no lock is held on any data the
 * message path reads.
 *
 * A sharded channel lives on the connection to its slot's master, taken
 * from the handle's RCU map (rcp__cluster_slot_master, lock-free). It is
 * put back "to place" (and placed again at once) when
 *   - the server says it dropped it (Redis 7.0 sends an unsolicited
 *     "sunsubscribe" when a slot leaves the node: reshard, failover),
 *   - the server answers MOVED (recorded in the shared slot map by the
 *     cluster's retry rules, retry.c, so every request follows it too),
 *   - its connection is lost or stops answering,
 *   - the periodic re-check finds another owner in the map.
 * Each loss is reported (RCP_EVENT_PUBSUB_INTERRUPTED) and each
 * re-establishment confirmed by the server (RCP_EVENT_PUBSUB_RESUBSCRIBED).
 *
 * Connections are lib/'s push connections (lib/connection.h): the same
 * handshake, reconnect and backoff as every other connection of the
 * handle. Their replies and events arrive on I/O threads, which hand them
 * to this thread through a queue and the eventfd, so the channel table
 * stays the thread's alone and the message callback runs here, as before.
 * Commands written on a connection wait in
 * its FIFO of pending commands until their confirmation (or error) comes;
 * replies come in command order, and the only unsolicited replies besides
 * messages are "sunsubscribe"s, which are told apart by that FIFO. */
#include "pubsub_int.h"

/* ------------------------------------------------------------------ */
/* the thread                                                          */

static void *ps_main(void *arg)
{
    rcp_pubsub *ps = arg;

    for (;;) {
        int stop, tick = ps->recheck_ms < 50 ? ps->recheck_ms : 50;
        struct pollfd fd;
        req *q;
        chan *c;
        uint64_t now;

        /* The eventfd rings for a caller's request and for a reply or an
         * event a connection's I/O thread handed over. */
        fd.fd = ps->efd;
        fd.events = POLLIN;
        fd.revents = 0;
        if (poll(&fd, 1, tick) < 0 && errno != EINTR)
            break;
        if (fd.revents & POLLIN) {
            uint64_t v;
            if (read(ps->efd, &v, sizeof v) < 0) {
                /* nothing: the counter was already read */
            }
        }
        pthread_mutex_lock(&ps->mu);
        stop = ps->stopping;
        q = ps->qhead;
        ps->qhead = ps->qtail = NULL;
        pthread_mutex_unlock(&ps->mu);
        now = rcp__now_ns();
        while (q) {
            req *next = q->next;
            if (stop)
                rcp__ps_req_complete(ps, q, RCP_ERR_CLOSED);
            else
                rcp__ps_handle_req(ps, q, now);
            q = next;
        }
        if (stop)
            break;
        /* Connections are freed only by periodic(), after this. */
        rcp__ps_drain(ps, rcp__now_ns());
        now = rcp__now_ns();
        for (c = ps->chans; c; c = c->next)
            if (c->state == CH_IDLE && c->retry_at <= now)
                rcp__ps_chan_place(ps, c, now);
        if (now >= ps->next_check) {
            rcp__ps_periodic(ps, now);
            ps->next_check = now + (uint64_t)ps->recheck_ms * MS;
        }
    }
    while (ps->chans)
        rcp__ps_free_chan(ps, ps->chans);
    while (ps->conns) {
        psconn *k = ps->conns;
        ps->conns = k->next;
        rcp__ps_free_pends(k);
        rcp__ps_conn_close(ps, k);
        rcp__free(k);
    }
    atomic_store(&ps->done, 1);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* the public API                                                      */

void rcp_pubsub_options_init(rcp_pubsub_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->recheck_ms = 100;
}

static void ps_free(rcp_pubsub *ps)
{
    if (ps->efd >= 0)
        close(ps->efd);
    pthread_mutex_destroy(&ps->mu);
    pthread_cond_destroy(&ps->cv);
    rcp__free(ps);
}

int rcp_pubsub_open(rcp_cluster *c, const rcp_pubsub_options *o, rcp_pubsub **out, char *errbuf,
                    size_t errbuf_len)
{
    const rcp_conn_options *no;
    rcp_pubsub *ps;
    char eb[8];

    if (!errbuf || errbuf_len == 0) {
        errbuf = eb;
        errbuf_len = sizeof eb;
    }
    errbuf[0] = '\0';
    if (out)
        *out = NULL;
    if (!c || !o || !out || !o->msg_cb) {
        snprintf(errbuf, errbuf_len, "rcp_pubsub_open: NULL handle, options, out or msg_cb");
        return RCP_ERR_INVALID;
    }
    if (rcp__cluster_closing(c)) {
        snprintf(errbuf, errbuf_len, "rcp_pubsub_open: the cluster handle is closing");
        return RCP_ERR_CLOSED;
    }
    ps = rcp__calloc(1, sizeof *ps);
    if (!ps) {
        snprintf(errbuf, errbuf_len, "rcp_pubsub_open: out of memory");
        return RCP_ERR_OOM;
    }
    ps->efd = -1;
    ps->cl = c;
    ps->msg_cb = o->msg_cb;
    ps->msg_data = o->msg_data;
    ps->recheck_ms = o->recheck_ms > 0 ? o->recheck_ms : 100;
    no = rcp__cluster_node_options(c);
    ps->timeout_ms = o->timeout_ms > 0                 ? o->timeout_ms
                     : no->request_timeout_ms > 0 ? no->request_timeout_ms
                                                  : 5000;
    ps->io_timeout_ms = no->io_timeout_ms;
    pthread_mutex_init(&ps->mu, NULL);
    rcp__cond_init_monotonic(&ps->cv);
    if (o->classic_node) {
        const char *colon = strrchr(o->classic_node, ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        size_t hl = colon ? (size_t)(colon - o->classic_node) : 0;
        if (!colon || hl == 0 || hl >= sizeof ps->classic_host || !end || *end || port < 1 ||
            port > 65535) {
            snprintf(errbuf, errbuf_len, "rcp_pubsub_open: classic_node \"%.200s\" is not host:port",
                     o->classic_node);
            ps_free(ps);
            return RCP_ERR_INVALID;
        }
        memcpy(ps->classic_host, o->classic_node, hl);
        ps->classic_host[hl] = '\0';
        ps->classic_port = (int)port;
        ps->classic_fixed = 1;
    }
    ps->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ps->efd < 0) {
        snprintf(errbuf, errbuf_len, "rcp_pubsub_open: eventfd: %s", strerror(errno));
        ps_free(ps);
        return RCP_ERR_OOM;
    }
    if (pthread_create(&ps->th, NULL, ps_main, ps) != 0) {
        snprintf(errbuf, errbuf_len, "rcp_pubsub_open: cannot start the subscriber thread");
        ps_free(ps);
        return RCP_ERR_OOM;
    }
    *out = ps;
    return RCP_OK;
}

void rcp_pubsub_close(rcp_pubsub *ps)
{
    uint64_t one = 1;
    if (!ps)
        return;
    pthread_mutex_lock(&ps->mu);
    ps->stopping = 1;
    pthread_mutex_unlock(&ps->mu);
    if (write(ps->efd, &one, sizeof one) < 0) {
        /* the thread polls every few tens of ms anyway */
    }
    rcp__cluster_join(ps->cl, ps->th, &ps->done); /* it closes connections on the handle's loop */
    /* Requests queued after the thread's last look. */
    while (ps->qhead) {
        req *r = ps->qhead;
        ps->qhead = r->next;
        rcp__ps_req_complete(ps, r, RCP_ERR_CLOSED);
    }
    /* Callers woken by their completion still need ps->mu to leave. */
    pthread_mutex_lock(&ps->mu);
    while (ps->inside > 0)
        pthread_cond_wait(&ps->cv, &ps->mu);
    pthread_mutex_unlock(&ps->mu);
    ps_free(ps);
}

/* Hands a request to the thread and waits for its completion. */
static int call(rcp_pubsub *ps, int op, int kind, const char *name, size_t len)
{
    uint64_t one = 1;
    uint64_t dl;
    req *r;
    int code;

    if (!ps || (!name && len))
        return RCP_ERR_INVALID;
    r = rcp__calloc(1, sizeof *r);
    if (!r || !(r->name = rcp__ps_dup_bytes(name ? name : "", len))) {
        rcp__free(r);
        return RCP_ERR_OOM;
    }
    r->op = op;
    r->kind = kind;
    r->len = len;
    r->refs = 2;
    dl = rcp__now_ns() + (uint64_t)ps->timeout_ms * 1000000ull;
    pthread_mutex_lock(&ps->mu);
    if (ps->stopping) {
        pthread_mutex_unlock(&ps->mu);
        rcp__free(r->name);
        rcp__free(r);
        return RCP_ERR_CLOSED;
    }
    if (ps->qtail)
        ps->qtail->next = r;
    else
        ps->qhead = r;
    ps->qtail = r;
    ps->inside++;
    pthread_mutex_unlock(&ps->mu);
    if (write(ps->efd, &one, sizeof one) < 0) {
        /* the thread polls every few tens of ms anyway */
    }
    pthread_mutex_lock(&ps->mu);
    while (!r->done)
        if (rcp__cond_wait_until(&ps->cv, &ps->mu, dl) == ETIMEDOUT)
            break;
    code = r->done ? r->code : RCP_ERR_TIMEOUT;
    r->done = 1;
    r->code = code;
    if (--r->refs == 0) {
        rcp__free(r->name);
        rcp__free(r);
    }
    if (--ps->inside == 0 && ps->stopping)
        pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
    return code;
}

/* The six (un)subscribe calls: one operation on one kind of channel each. */
#define PS_CALL(fn, op, kind)                                                                      \
    int fn(rcp_pubsub *ps, const char *name, size_t len)                                           \
    {                                                                                              \
        return call(ps, op, kind, name, len);                                                      \
    }
PS_CALL(rcp_pubsub_ssubscribe, OP_SUB, RCP_PUBSUB_SHARD)
PS_CALL(rcp_pubsub_sunsubscribe, OP_UNSUB, RCP_PUBSUB_SHARD)
PS_CALL(rcp_pubsub_subscribe, OP_SUB, RCP_PUBSUB_CHANNEL)
PS_CALL(rcp_pubsub_unsubscribe, OP_UNSUB, RCP_PUBSUB_CHANNEL)
PS_CALL(rcp_pubsub_psubscribe, OP_SUB, RCP_PUBSUB_PATTERN)
PS_CALL(rcp_pubsub_punsubscribe, OP_UNSUB, RCP_PUBSUB_PATTERN)
#undef PS_CALL

int rcp_pubsub_get_stats(rcp_pubsub *ps, rcp_pubsub_stats *out)
{
    if (!ps || !out)
        return RCP_ERR_INVALID;
    out->messages = atomic_load(&ps->st_messages);
    out->dropped = atomic_load(&ps->st_dropped);
    out->resubscribes = atomic_load(&ps->st_resubscribes);
    out->interruptions = atomic_load(&ps->st_interruptions);
    out->moved = atomic_load(&ps->st_moved);
    out->connects = atomic_load(&ps->st_connects);
    out->connect_failures = atomic_load(&ps->st_connect_failures);
    return RCP_OK;
}
