/* cluster/cluster.c: the cluster handle: options, open (seeds, bootstrap,
 * the refresher thread), close (every future resolved, every connection
 * closed, every RCU callback run), stats and events.
 *
 * Everything a request goes through lives in a file of its own (see
 * cluster_int.h): classify.c, route.c, retry.c, async.c, sync.c, with the
 * node registry in nodes.c, the map in slotmap.c and the refresher in
 * refresh.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <urcu-bp.h>

#include "alloc.h"
#include "cache.h"
#include "clock.h"
#include "cluster_int.h"
#include "options.h"

void rcp_cluster_options_init(rcp_cluster_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    o->read_policy = RCP_READ_MASTER_ONLY;
    o->refresh_interval_ms = 5000;
    o->max_redirects = 5;
    o->max_retries = 12;
    o->min_refresh_gap_ms = 100;
    o->replica_pick_ms = 50;
    o->blocking_pool = 4;
    o->client_cache_ttl_ms = 60000;
    o->bulk_pool = 2;
    o->bulk_threshold = 256 * 1024; /* docs/large-values.md: the curve it was picked from */
}


void rcp__cluster_emit(struct rcp_cluster *cl, int type, int err, const char *msg)
{
    rcp_event ev;
    if (!cl->opt.event_cb)
        return;
    memset(&ev, 0, sizeof ev);
    ev.type = type;
    ev.err = err;
    ev.host = "";
    ev.message = msg;
    cl->opt.event_cb(&ev, cl->opt.event_data);
}

static void node_event(const rcp_event *ev, void *data)
{
    struct rcp_cluster *cl = data;
    rcp__cache_node_event(cl, ev);
    if ((ev->type == RCP_EVENT_DISCONNECTED || ev->type == RCP_EVENT_CONNECT_FAILED) &&
        ev->err != RCP_ERR_CLOSED && !atomic_load(&cl->closing))
        rcp__cluster_refresh_soon(cl);
    if (cl->opt.event_cb)
        cl->opt.event_cb(ev, cl->opt.event_data);
}

const rcp_conn_options *rcp__cluster_node_options(struct rcp_cluster *cl)
{
    return &cl->node_opt;
}

int rcp__cluster_closing(struct rcp_cluster *cl)
{
    return atomic_load(&cl->closing);
}

void *rcp__cluster_new_companion(struct rcp_cluster *cl, size_t size)
{
    return cl ? rcp__calloc(1, size) : NULL;
}

int rcp__cluster_blocking_pool(struct rcp_cluster *cl)
{
    int n = cl->opt.blocking_pool;
    return n < 1 ? 1 : n > RCP__POOL_MAX ? RCP__POOL_MAX : n;
}

/* open / close / stats                                                */

/* "host:port[,host:port...]", IPv6 as "[::1]:7000" (or bare "::1:7000":
 * the port follows the last ':'). RCP_OK, or RCP_ERR_INVALID with why
 * naming the bad seed and what is wrong with it. */
static int parse_seeds(struct rcp_cluster *cl, const char *s, char *why, size_t len)
{
    const char *p = s;
    int count = 0;
    for (const char *q = s; *q; q++)
        count += *q == ',';
    if (count + 1 > RCP__MAX_SEEDS) {
        snprintf(why, len, "too many seeds: %d given, at most %d (a few per shard are enough: "
                           "the rest of the cluster is learnt from CLUSTER SLOTS)",
                 count + 1, RCP__MAX_SEEDS);
        return RCP_ERR_INVALID;
    }
    while (*p) {
        const char *end = strchr(p, ','), *colon;
        size_t n = end ? (size_t)(end - p) : strlen(p), hl;
        char item[300], *host;
        long port;
        char *e;
        if (n == 0) {
            snprintf(why, len, "empty seed in the list \"%.200s\" (want host:port[,host:port...])", s);
            return RCP_ERR_INVALID;
        }
        if (n >= sizeof item) {
            snprintf(why, len, "seed \"%.40s...\" is too long (%zu bytes, at most %zu)", p, n,
                     sizeof item - 1);
            return RCP_ERR_INVALID;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        colon = strrchr(item, ':');
        if (!colon || colon == item || !colon[1]) {
            snprintf(why, len, "seed \"%s\" has no host:port (want e.g. 127.0.0.1:7000 or [::1]:7000)",
                     item);
            return RCP_ERR_INVALID;
        }
        port = strtol(colon + 1, &e, 10);
        if (*e || port <= 0 || port > 65535) {
            snprintf(why, len, "seed \"%s\": port \"%s\" is not a number in 1..65535", item,
                     colon + 1);
            return RCP_ERR_INVALID;
        }
        item[colon - item] = '\0';
        host = item;
        hl = strlen(host);
        if (host[0] == '[' || host[hl - 1] == ']') {
            if (host[0] != '[' || host[hl - 1] != ']' || hl < 3) {
                snprintf(why, len, "seed \"%.*s\": unbalanced brackets around the host (want "
                                   "[IPv6]:port)",
                         (int)n, p);
                return RCP_ERR_INVALID;
            }
            host[hl - 1] = '\0';
            host++;
        }
        if (strchr(host, '[') || strchr(host, ']')) {
            snprintf(why, len, "seed \"%.*s\": a bracket inside the host", (int)n, p);
            return RCP_ERR_INVALID;
        }
        cl->seeds[cl->nseeds].host = rcp__strdup(host);
        if (!cl->seeds[cl->nseeds].host) {
            snprintf(why, len, "out of memory");
            return RCP_ERR_OOM;
        }
        cl->seeds[cl->nseeds].port = (int)port;
        cl->nseeds++;
        p = end ? end + 1 : p + n;
        if (end && !*p) {
            snprintf(why, len, "empty seed at the end of \"%.200s\"", s);
            return RCP_ERR_INVALID;
        }
    }
    if (!cl->nseeds) {
        snprintf(why, len, "the seed list is empty (want host:port[,host:port...])");
        return RCP_ERR_INVALID;
    }
    return RCP_OK;
}

/* The cluster options' ranges; RCP_OK or RCP_ERR_INVALID naming the
 * option. */
static int check_options(const rcp_cluster_options *o, const rcp_conn_options *node, char *why,
                         size_t len)
{
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, len, __VA_ARGS__);                                                           \
        return RCP_ERR_INVALID;                                                                    \
    } while (0)
    char nwhy[200];
    if (!o->seeds)
        BAD("seeds is NULL (want \"host:port[,host:port...]\")");
    if (o->read_policy < RCP_READ_MASTER_ONLY || o->read_policy > RCP_READ_NEAREST)
        BAD("read_policy %d is not an rcp_read_policy (0..%d)", o->read_policy, RCP_READ_NEAREST);
    {
        const rcp__opt_range r[] = {
            {"refresh_interval_ms", o->refresh_interval_ms, 1, RCP__NO_MAX},
            {"max_redirects", o->max_redirects, 0, RCP__NO_MAX},
            {"max_retries", o->max_retries, 0, RCP__NO_MAX},
            {"min_refresh_gap_ms", o->min_refresh_gap_ms, 0, RCP__NO_MAX},
            {"replica_pick_ms", o->replica_pick_ms, 0, RCP__NO_MAX},
            {"blocking_pool", o->blocking_pool, 1, RCP__POOL_MAX},
            {"client_cache_ttl_ms", o->client_cache_ttl_ms, 1, 86400000},
            {"bulk_pool", o->bulk_pool, 0, RCP__POOL_MAX},
            {"bulk_threshold", (long long)o->bulk_threshold, 1024, RCP__NO_MAX},
        };
        if (rcp__opt_ranges_check(r, sizeof r / sizeof r[0], why, len) != RCP_OK)
            return RCP_ERR_INVALID;
    }
    if (o->client_cache_optin != 0 && o->client_cache_optin != 1)
        BAD("client_cache_optin %d is not 0 or 1", o->client_cache_optin);
    if (o->client_cache_bcast != 0 && o->client_cache_bcast != 1)
        BAD("client_cache_bcast %d is not 0 or 1", o->client_cache_bcast);
    if (o->client_cache_nprefixes < 0 || o->client_cache_nprefixes > 16)
        BAD("client_cache_nprefixes %d is not 0..16", o->client_cache_nprefixes);
    if (o->client_cache_nprefixes && !o->client_cache_bcast)
        BAD("client_cache_prefixes are for broadcast tracking: set client_cache_bcast too");
    if (o->client_cache_nprefixes && !o->client_cache_prefixes)
        BAD("client_cache_nprefixes is %d but client_cache_prefixes is NULL",
            o->client_cache_nprefixes);
    for (int i = 0; i < o->client_cache_nprefixes; i++) {
        const char *p = o->client_cache_prefixes[i];
        if (!p || !*p || strlen(p) > 256)
            BAD("client_cache_prefixes[%d] is NULL, empty or longer than 256 bytes", i);
        for (int j = 0; j < i; j++) {
            const char *q = o->client_cache_prefixes[j];
            size_t lp = strlen(p), lq = strlen(q);
            if (strncmp(p, q, lp < lq ? lp : lq) == 0)
                BAD("client_cache_prefixes '%s' and '%s' overlap (the servers refuse that)", q, p);
        }
    }
    if (o->client_cache_bytes && o->client_cache_bytes < 65536)
        BAD("client_cache_bytes %zu is too small: 0 turns the cache off, else at least 65536",
            o->client_cache_bytes);

    {
        int rv = rcp__conn_options_check(node, 0, nwhy, sizeof nwhy);
        if (rv != RCP_OK) { /* RCP_ERR_UNSUPPORTED: TLS in a build without it */
            snprintf(why, len, "node options: %s", nwhy);
            return rv;
        }
    }
    return RCP_OK;
#undef BAD
}

static void cluster_free(struct rcp_cluster *cl)
{
    rcp__node *n, *next;
    unsigned i;
    for (n = cl->nodes; n; n = next) {
        next = n->next;
        for (int role = 0; role < RCP__ROLES; role++) {
            struct rcp_conn *conn = atomic_exchange(&n->conn[role], NULL);
            if (conn)
                rcp_conn_close(conn);
        }
        rcp__bulk_detach_all(n);
        rcp__bulk_close_detached(n);
    }
    for (n = cl->nodes; n; n = next) {
        next = n->next;
        rcp__pool_destroy(n);
        rcp__free(n->host);
        rcp__free(n);
    }
    for (i = 0; cl->loops && i < cl->nloops && !cl->app_loop; i++)
        if (cl->loops[i])
            rcp__loop_free(cl->loops[i]);
    rcp__free(cl->loops);
    rcp__loop_free(cl->ctl_loop);
    rcp__map_free(atomic_load(&cl->map));
    rcp__cache_free(cl->cache);
    for (int k = 0; k < cl->nseeds; k++)
        rcp__free(cl->seeds[k].host);
    rcp__free(cl->node_user);
    rcp__free(cl->node_pass);
    rcp__free(cl->node_name);
    rcp__conn_options_drop(cl->node_tls);
    for (int k = 0; k < 2; k++) {
        rcp__cfut *cf = k ? atomic_exchange(&cl->cf_back, NULL) : cl->cf_free;
        while (cf) {
            rcp__cfut *next = cf->next_free;
            rcp__free(cf);
            cf = next;
        }
    }
    cl->cf_free = NULL;
    pthread_mutex_destroy(&cl->reg_mu);
    pthread_mutex_destroy(&cl->wmu);
    pthread_cond_destroy(&cl->wcv);
    rcp__free(cl);
}

int rcp_cluster_open(const rcp_cluster_options *o, rcp_cluster **out, char *errbuf,
                     size_t errbuf_len)
{
    struct rcp_cluster *cl;
    rcp_conn_options defaults;
    char why[400], *errs;
    size_t errs_len;
    unsigned i;
    int rv;

    if (errbuf && errbuf_len)
        errbuf[0] = '\0';
    if (!out || !o) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "rcp_cluster_open: %s is NULL", !out ? "out" : "options");
        return RCP_ERR_INVALID;
    }
    *out = NULL;
    rcp_conn_options_init(&defaults);
    rv = check_options(o, o->node ? o->node : &defaults, why, sizeof why);
    if (rv != RCP_OK) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "rcp_cluster_open: %s", why);
        return rv;
    }
    cl = rcp__calloc(1, sizeof(*cl));
    if (!cl)
        return RCP_ERR_OOM;
    cl->opt = *o;
    cl->opt.seeds = NULL;
    cl->opt.node = NULL;
    if (o->node)
        cl->node_opt = *o->node;
    else
        rcp_conn_options_init(&cl->node_opt);
    cl->node_user = cl->node_opt.username ? rcp__strdup(cl->node_opt.username) : NULL;
    cl->node_pass = cl->node_opt.password ? rcp__strdup(cl->node_opt.password) : NULL;
    cl->node_name = cl->node_opt.client_name ? rcp__strdup(cl->node_opt.client_name) : NULL;
    cl->node_opt.username = cl->node_user;
    cl->node_opt.password = cl->node_pass;
    cl->node_opt.client_name = cl->node_name;
    /* TLS strings copied, the TLS context loaded once for every node. */
    rv = rcp__conn_options_keep(&cl->node_opt, &cl->node_tls, why, sizeof why);
    if (rv != RCP_OK) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "rcp_cluster_open: node options: %s", why);
        cluster_free(cl);
        return rv;
    }
    /* Node connection events go through us: a lost connection is a
     * topology signal. They are passed on to the caller's callback. */
    cl->node_opt.event_cb = node_event;
    cl->node_opt.event_data = cl;
    rcp__forget_init(cl);
    pthread_mutex_init(&cl->reg_mu, NULL);
    pthread_mutex_init(&cl->wmu, NULL);
    rcp__cond_init_monotonic(&cl->wcv);
    rv = parse_seeds(cl, o->seeds, why, sizeof why);
    if (rv != RCP_OK) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "rcp_cluster_open: %s", why);
        cluster_free(cl);
        return rv;
    }
    cl->app_loop = cl->node_opt.loop != NULL;
    cl->nloops = cl->app_loop ? 1 : cl->node_opt.io_threads ? cl->node_opt.io_threads : 1;
    cl->loops = rcp__calloc(cl->nloops, sizeof(*cl->loops));
    atomic_store(&cl->map, rcp__map_new());
    if (!cl->loops || !atomic_load(&cl->map)) {
        cluster_free(cl);
        return RCP_ERR_OOM;
    }
    if (cl->app_loop) {
        /* Node connections on the application's loop; the refresher's on
         * one I/O thread of ours (RCP__AS_CONTROL). */
        cl->loops[0] = rcp__loop_of(cl->node_opt.loop);
        cl->ctl_loop = rcp__loop_new();
        if (!cl->ctl_loop) {
            cluster_free(cl);
            return RCP_ERR_OOM;
        }
    }
    if (cl->opt.client_cache_bytes && rcp__cache_new(cl, &cl->cache) != RCP_OK) {
        cluster_free(cl);
        return RCP_ERR_OOM;
    }
    cl->opt.client_cache_prefixes = NULL; /* the caller's: the cache copied them */
    for (i = 0; i < cl->nloops && !cl->app_loop; i++) {
        cl->loops[i] = rcp__loop_new();
        if (!cl->loops[i]) {
            cluster_free(cl);
            return RCP_ERR_OOM;
        }
    }
    /* Bootstrap: the first valid table from the seeds, in order. Each
     * seed that failed is named once, with its cause, as far as the
     * caller's buffer goes (64 KiB at most). */
    errs_len = errbuf_len < 256 ? 256 : errbuf_len > 65536 ? 65536 : errbuf_len;
    errs = rcp__calloc(1, errs_len);
    if (!errs) {
        cluster_free(cl);
        return RCP_ERR_OOM;
    }
    if (rcp__refresh(cl, "bootstrap", errs, errs_len - 40) < 0) {
        if (errbuf)
            snprintf(errbuf, errbuf_len, "no seed gave a usable slot table: %s",
                     errs[0] ? errs : "out of memory building the map");
        rcp__free(errs);
        atomic_store(&cl->closing, 1);
        cluster_free(cl);
        return RCP_ERR_CONNECT;
    }
    rcp__free(errs);
    rcp__refresh_rtt(cl);
    cl->last_refresh = rcp__now_ns();
    cl->next_periodic = cl->last_refresh + (uint64_t)cl->opt.refresh_interval_ms * 1000000ull;
    if (pthread_create(&cl->worker, NULL, rcp__refresher_main, cl) != 0) {
        atomic_store(&cl->closing, 1);
        cluster_free(cl);
        return RCP_ERR_OOM;
    }
    cl->worker_started = 1;
    *out = cl;
    return RCP_OK;
}

void rcp__cluster_join(struct rcp_cluster *cl, pthread_t th, atomic_int *done)
{
    /* rcp__loop_pass_here does a pass only on the application loop's own
     * thread, outside its callbacks; elsewhere that loop runs by itself. */
    while (cl->app_loop && !atomic_load(done) && rcp__loop_pass_here(cl->loops[0]))
        usleep(1000);
    pthread_join(th, NULL);
}

void rcp_cluster_close(rcp_cluster *cl)
{
    rcp__node *n, *first;
    if (!cl)
        return;
    atomic_store(&cl->closing, 1);
    rcp__refresher_wake(cl);
    /* Detach every connection, wait out one grace period, then close
     * them: closing resolves every request still on them (the refresher's
     * own CLUSTER SLOTS or PING to a hung node too, so it stops at once
     * instead of waiting out its timeout) and, with `closing` set, nothing
     * is resent and no connection is made. Then the refresher is joined. */
    pthread_mutex_lock(&cl->reg_mu);
    first = cl->nodes; /* nodes are only ever added at the head */
    for (n = first; n; n = n->next)
        for (int role = 0; role < RCP__ROLES; role++)
            n->detached[role] = atomic_exchange(&n->conn[role], NULL);
    for (n = first; n; n = n->next)
        rcp__bulk_detach_all(n);
    pthread_mutex_unlock(&cl->reg_mu);
    rcp__cache_close_conns(cl);
    urcu_bp_synchronize_rcu();
    for (n = first; n; n = n->next) {
        for (int role = 0; role < RCP__ROLES; role++) {
            if (n->detached[role])
                rcp_conn_close(n->detached[role]);
            n->detached[role] = NULL;
        }
        rcp__bulk_close_detached(n);
        rcp__pool_shutdown(n);
    }
    rcp__refresher_stop(cl);
    while (atomic_load(&cl->active_calls) > 0)
        usleep(1000);
    urcu_bp_barrier();
    cluster_free(cl);
}

int rcp_cluster_get_stats(rcp_cluster *cl, rcp_cluster_stats *o)
{
    if (!cl || !o)
        return RCP_ERR_INVALID;
    memset(o, 0, sizeof(*o));
#define L(x) atomic_load_explicit(&cl->st.x, memory_order_relaxed)
    o->requests = L(requests);
    o->moved = L(moved);
    o->ask = L(ask);
    o->retries_tryagain = L(tryagain);
    o->retries_clusterdown = L(clusterdown);
    o->retries_loading = L(loading);
    o->retries_masterdown = L(masterdown);
    o->retries_not_sent = L(not_sent);
    o->retries_io = L(io);
    o->retries_readonly = L(readonly);
    o->refreshes_periodic = L(periodic);
    o->refreshes_forced = L(forced);
    o->refresh_failures = L(refresh_failures);
    o->map_version = L(version);
    o->forgotten_errors = L(forgotten_errors);
#undef L
    o->bulk_requests = atomic_load_explicit(&cl->bulk_requests, memory_order_relaxed);
    pthread_mutex_lock(&cl->reg_mu);
    for (rcp__node *n = cl->nodes; n; n = n->next) {
        if (atomic_load(&n->in_map))
            o->nodes++;
        o->cache_invalidations += atomic_load(&n->cache_invalidations);
    }
    pthread_mutex_unlock(&cl->reg_mu);
    rcp__cache_stats(cl, o);
    return RCP_OK;
}

size_t rcp_cluster_get_nodes(rcp_cluster *cl, rcp_cluster_node_info *out, size_t max)
{
    rcp__node *n;
    size_t k = 0;
    if (!cl)
        return 0;
    pthread_mutex_lock(&cl->reg_mu);
    for (n = cl->nodes; n; n = n->next, k++) {
        if (k >= max || !out)
            continue;
        memset(&out[k], 0, sizeof out[k]);
        snprintf(out[k].addr, sizeof out[k].addr, "%s", n->addr);
        out[k].is_master = atomic_load(&n->is_master);
        out[k].in_map = atomic_load(&n->in_map);
        out[k].conn = n->last;
        for (int role = 0; role < RCP__ROLES; role++) {
            struct rcp_conn *conn = atomic_load(&n->conn[role]);
            rcp_conn_stats st;
            if (conn && rcp_conn_get_stats(conn, &st) == RCP_OK)
                rcp_conn_stats_add(&out[k].conn, &st);
        }
        out[k].moved = atomic_load(&n->moved);
        out[k].ask = atomic_load(&n->ask);
        out[k].rtt_us = atomic_load(&n->rtt_ns) / 1000;
        out[k].cache_invalidations = atomic_load(&n->cache_invalidations);
        out[k].cache_tracking = cl->cache && (atomic_load(&n->cache_epoch) & 1);
        out[k].bulk_requests = atomic_load(&n->bulk_requests);
        out[k].bulk_conns = rcp__bulk_stats(n, &out[k].conn);
    }
    pthread_mutex_unlock(&cl->reg_mu);
    return k;
}
