/* slotmap.c: see slotmap.h. */
#include "slotmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SM_IO_TIMEOUT_S 10

/* Caller holds mu (or is the only thread). */
static int node_index_locked(slotmap *m, const char *host, int port)
{
    unsigned n = atomic_load_explicit(&m->nnodes, memory_order_relaxed), i;
    sm_node *nd;

    for (i = 0; i < n; i++)
        if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
            return (int)i;
    if (n >= SLOTMAP_MAX_NODES || strlen(host) >= sizeof(nd->host))
        return -1;
    nd = &m->nodes[n];
    strcpy(nd->host, host);
    nd->port = port;
    atomic_init(&nd->master, false);
    atomic_init(&nd->replica, false);
    /* Release: whoever sees the new count (or a slot naming n) sees the entry. */
    atomic_store_explicit(&m->nnodes, n + 1, memory_order_release);
    return (int)n;
}

int slotmap_node_index(slotmap *m, const char *host, int port)
{
    int i;

    pthread_mutex_lock(&m->mu);
    i = node_index_locked(m, host, port);
    pthread_mutex_unlock(&m->mu);
    return i;
}

/* One "[host, port, id, ...]" element of a CLUSTER SLOTS range; -1 if bad. */
static int endpoint_index(slotmap *m, const redisReply *e, const char *asked_host)
{
    const char *host;

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    host = e->element[0]->str;
    /* "" or "?": the node does not know its own address; it is the one asked. */
    if (!*host || strcmp(host, "?") == 0)
        host = asked_host;
    return node_index_locked(m, host, (int)e->element[1]->integer);
}

/* Caller holds mu. */
static bool load_locked(slotmap *m, const char *host, int port, char *err, size_t errlen)
{
    bconn *c = bconn_connect(host, port, m->user, m->password, SM_IO_TIMEOUT_S, err, errlen);
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    redisReply *r;
    static uint16_t fresh[SLOTMAP_SLOTS]; /* only touched under mu */
    bool is_master[SLOTMAP_MAX_NODES] = {false}, is_replica[SLOTMAP_MAX_NODES] = {false};
    unsigned i, s;
    size_t k;

    if (!c)
        return false;
    r = bconn_command_argv(c, 2, argv, NULL);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "CLUSTER SLOTS on %s:%d failed: %s", host, port,
                 !r ? bconn_errstr(c)
                    : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply type");
        if (r)
            freeReplyObject(r);
        bconn_free(c);
        return false;
    }
    for (s = 0; s < SLOTMAP_SLOTS; s++)
        fresh[s] = SLOTMAP_NONE;
    for (k = 0; k < r->elements; k++) {
        const redisReply *e = r->element[k];
        long long lo, hi;
        int mi;

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER)
            goto bad;
        lo = e->element[0]->integer;
        hi = e->element[1]->integer;
        if (lo < 0 || hi < lo || hi >= (long long)SLOTMAP_SLOTS)
            goto bad;
        mi = endpoint_index(m, e->element[2], host);
        if (mi < 0)
            goto bad;
        is_master[mi] = true;
        for (i = 3; i < e->elements; i++) {
            int ri = endpoint_index(m, e->element[i], host);

            if (ri < 0)
                goto bad;
            is_replica[ri] = true;
        }
        for (s = (unsigned)lo; s <= (unsigned)hi; s++)
            fresh[s] = (uint16_t)mi;
    }
    freeReplyObject(r);
    bconn_free(c);
    for (i = 0; i < atomic_load_explicit(&m->nnodes, memory_order_relaxed); i++) {
        atomic_store_explicit(&m->nodes[i].master, is_master[i], memory_order_relaxed);
        atomic_store_explicit(&m->nodes[i].replica, is_replica[i], memory_order_relaxed);
    }
    for (s = 0; s < SLOTMAP_SLOTS; s++)
        atomic_store_explicit(&m->slot[s], fresh[s], memory_order_release);
    return true;
bad:
    snprintf(err, errlen, "CLUSTER SLOTS on %s:%d: malformed reply (or more than %u nodes)", host,
             port, SLOTMAP_MAX_NODES);
    freeReplyObject(r);
    bconn_free(c);
    return false;
}

bool slotmap_init(slotmap *m, const char *seed_host, int seed_port, const char *user,
                  const char *password, char *err, size_t errlen)
{
    unsigned s;
    bool ok;

    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->mu, NULL);
    atomic_init(&m->nnodes, 0);
    atomic_init(&m->reloads, 0);
    for (s = 0; s < SLOTMAP_SLOTS; s++)
        atomic_init(&m->slot[s], SLOTMAP_NONE);
    snprintf(m->seed_host, sizeof(m->seed_host), "%s", seed_host);
    m->seed_port = seed_port;
    m->user = user;
    m->password = password;
    pthread_mutex_lock(&m->mu);
    ok = load_locked(m, seed_host, seed_port, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return ok;
}

void slotmap_destroy(slotmap *m)
{
    pthread_mutex_destroy(&m->mu);
}

int slotmap_moved(slotmap *m, unsigned slot, const char *host, int port, char *err, size_t errlen)
{
    int target, now;

    slot &= SLOTMAP_SLOTS - 1;
    pthread_mutex_lock(&m->mu);
    target = node_index_locked(m, host, port);
    if (target < 0) {
        pthread_mutex_unlock(&m->mu);
        snprintf(err, errlen, "MOVED to %s:%d: more than %u nodes", host, port,
                 SLOTMAP_MAX_NODES);
        return -1;
    }
    now = slotmap_node_of(m, slot);
    if (now != target) { /* nobody has caught up with this move yet */
        atomic_fetch_add_explicit(&m->reloads, 1, memory_order_relaxed);
        if (!load_locked(m, host, port, err, errlen) &&
            !load_locked(m, m->seed_host, m->seed_port, err, errlen)) {
            pthread_mutex_unlock(&m->mu);
            return target; /* the redirect itself is still good */
        }
        now = slotmap_node_of(m, slot);
        if (now < 0)
            now = target;
    }
    pthread_mutex_unlock(&m->mu);
    return now;
}

bool slotmap_parse_redirect(const slotmap *m, const char *s, size_t len, bool *ask,
                            unsigned *slot, char *host, size_t hostlen, int *port)
{
    char buf[512];
    char *p, *end, *colon;
    unsigned long v;

    if (len >= sizeof(buf))
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (strncmp(buf, "MOVED ", 6) == 0) {
        *ask = false;
        p = buf + 6;
    } else if (strncmp(buf, "ASK ", 4) == 0) {
        *ask = true;
        p = buf + 4;
    } else {
        return false;
    }
    v = strtoul(p, &end, 10);
    if (end == p || *end != ' ' || v >= SLOTMAP_SLOTS)
        return false;
    *slot = (unsigned)v;
    p = end + 1;
    colon = strrchr(p, ':');
    if (!colon)
        return false;
    *colon = '\0';
    v = strtoul(colon + 1, &end, 10);
    if (end == colon + 1 || v == 0 || v > 65535)
        return false;
    *port = (int)v;
    if (*p == '[') { /* [v6]:port */
        size_t n = strlen(p);

        if (n >= 2 && p[n - 1] == ']') {
            p[n - 1] = '\0';
            p++;
        }
    }
    snprintf(host, hostlen, "%s", *p ? p : m->seed_host);
    return true;
}
