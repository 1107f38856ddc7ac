/* cluster/refresh.c: the refresher thread.
 *
 * One thread per handle. It refreshes the slot map every
 * refresh_interval_ms (with 10% jitter) and on demand: a MOVED, an ASK, a
 * CLUSTERDOWN, a lost connection all ask for a refresh, and those asks are
 * coalesced (one refresh in flight) and rate-limited (min_refresh_gap_ms),
 * so a burst of thousands of redirects during a reshard makes one
 * CLUSTER SLOTS, not thousands. A refresh asks the current map's masters
 * (starting at a random one), then its replicas, then the seeds; builds a
 * complete new map (slotmap.c); publishes it with one atomic exchange; frees
 * the old one after a grace period; and closes the connections of nodes
 * that left the map once their requests are answered.
 *
 * The same thread runs the delayed retries of every kind of request (a
 * queue of rcp__later items) and, after each periodic refresh, measures
 * every node's round trip for RCP_READ_NEAREST. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <urcu-bp.h>

#include "alloc.h"
#include "cache.h"
#include "clock.h"
#include "cluster_int.h"

void rcp__cluster_refresh_soon(struct rcp_cluster *cl)
{
    pthread_mutex_lock(&cl->wmu);
    if (!cl->force) {
        cl->force = 1;
        pthread_cond_signal(&cl->wcv);
    }
    pthread_mutex_unlock(&cl->wmu);
}

static const char slots_cmd[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";

/* The connection's last failure without its "addr: " prefix (the caller
 * names the node itself). */
static void last_cause(struct rcp_conn *conn, const rcp__node *n, char *why, size_t whylen)
{
    char last[600];
    size_t al = strlen(n->addr);
    const char *from = last;
    rcp__conn_last_error(conn, last, sizeof last);
    if (strncmp(last, n->addr, al) == 0 && last[al] == ':' && last[al + 1] == ' ')
        from = last + al + 2;
    snprintf(why, whylen, "%.*s", (int)(whylen > 0 ? whylen - 1 : 0), from);
}

/* Ask one node for CLUSTER SLOTS; 0 and a table, or -1 with a reason (the
 * server's error, the connection's real failure, or what is wrong with the
 * table), without the node's address. */
static int ask_slots(struct rcp_cluster *cl, rcp__node *n, rcp__slots_table **out, char *why,
                     size_t whylen)
{
    struct rcp_conn *conn;
    rcp_reply *r;
    int rv;
    conn = rcp__node_pin_control(cl, n);
    if (!conn) {
        snprintf(why, whylen, "no connection");
        return -1;
    }
    r = rcp__conn_command_raw(conn, slots_cmd, sizeof slots_cmd - 1, 0,
                              cl->node_opt.connect_timeout_ms + 1000);
    if (r->type == RCP_REPLY_ERROR) {
        if (r->err == RCP_ERR_NOT_SENT || r->err == RCP_ERR_IO || r->err == RCP_ERR_CONNECT ||
            r->err == RCP_ERR_AUTH)
            last_cause(conn, n, why, whylen); /* "connect failed: Connection refused" */
        else
            snprintf(why, whylen, "%.*s", (int)r->len, r->str);
        rcp__cluster_unpin(conn);
        rcp_reply_free(r);
        return -1;
    }
    rcp__cluster_unpin(conn);
    rv = rcp__slots_parse(r, n->host, out, why, whylen);
    rcp_reply_free(r);
    return rv;
}

/* Appends "addr: why" to errs (separated by "; ") while it fits; once it
 * does not, counts the rest in *cut. */
static void refresh_note_failure(char *errs, size_t errlen, size_t *used, size_t *cut,
                                 const char *addr, const char *why)
{
    size_t room = errlen > 80 ? errlen - 80 : 0; /* the rest: to say the list was cut */
    int w;
    if (!errs || !errlen)
        return;
    if (*cut == 0 && *used < room) {
        w = snprintf(errs + *used, errlen - *used, "%s%s: %s", *used ? "; " : "", addr, why);
        if (w > 0 && *used + (size_t)w < room) {
            *used += (size_t)w;
            return;
        }
        errs[*used] = '\0';
    }
    (*cut)++;
}

int rcp__refresh(struct rcp_cluster *cl, const char *reason, char *errs, size_t errlen)
{
    rcp__slots_table *t = NULL;
    rcp__node *cands[256];
    size_t nc = 0, i, used = 0, cut = 0, nmasters, r0, kept;
    rcp__map *m, *old;
    char why[300], msg[400];
    struct rcp_conn *closing[256];
    size_t nclosing = 0;
    rcp__node *promoted[64];
    size_t npromoted = 0;
    rcp__node *n;

    /* Candidates: the current map's masters, then its replicas, then the
     * seeds. */
    urcu_bp_read_lock();
    old = rcp__map_current(cl);
    if (old) {
        for (i = 0; i < old->nshards && nc < 128; i++)
            cands[nc++] = old->shards[i].master;
        for (i = 0; i < old->nshards; i++)
            for (size_t j = 0; j < old->shards[i].nreplicas && nc < 192; j++)
                cands[nc++] = old->shards[i].replicas[j];
    }
    urcu_bp_read_unlock();
    nmasters = old ? (old->nshards < 128 ? old->nshards : 128) : 0;
    r0 = nmasters ? (size_t)rcp__rnd() % nmasters : 0;
    for (i = 0; i < (size_t)cl->nseeds && nc < 256; i++) {
        rcp__node *s = rcp__node_get(cl, cl->seeds[i].host, cl->seeds[i].port, rcp__seed_role(cl));
        size_t j;
        for (j = 0; s && j < nc; j++)
            if (cands[j] == s)
                s = NULL; /* each node asked once */
        if (s)
            cands[nc++] = s;
    }
    /* Start at a random master so one slow node does not take every
     * refresh. */
    for (i = 0; i < nc && !t && !atomic_load(&cl->closing); i++) {
        size_t k = i < nmasters ? (i + r0) % nmasters : i;
        n = cands[k];
        if (ask_slots(cl, n, &t, why, sizeof why) == 0)
            break;
        refresh_note_failure(errs, errlen, &used, &cut, n->addr, why);
    }
    if (cut && errs && errlen > used + 1)
        snprintf(errs + used, errlen - used, "; and %zu more not listed (the message buffer is full)",
                 cut);
    if (!t) {
        rcp__stat_add(&cl->st.refresh_failures, 1);
        return -1;
    }
    m = rcp__map_build(cl, t, old, &kept);
    rcp__slots_free(t);
    if (!m) {
        rcp__stat_add(&cl->st.refresh_failures, 1);
        return -1;
    }
    m->version = atomic_load(&cl->st.version) + 1;

    /* Which nodes are in the new map. */
    pthread_mutex_lock(&cl->reg_mu);
    for (n = cl->nodes; n; n = n->next) {
        atomic_store(&n->in_map, 0);
        n->was_master = atomic_exchange(&n->is_master, 0);
    }
    for (i = 0; i < m->nshards; i++) {
        atomic_store(&m->shards[i].master->in_map, 1);
        atomic_store(&m->shards[i].master->is_master, 1);
        for (size_t j = 0; j < m->shards[i].nreplicas; j++)
            atomic_store(&m->shards[i].replicas[j]->in_map, 1);
    }
    /* A demoted master's cached entries go (cache.c): its slots' reads
     * go elsewhere now, and its own replies are a replica's. */
    for (n = cl->nodes; n; n = n->next) {
        if (n->was_master && !atomic_load(&n->is_master))
            rcp__cache_node_detached(n);
        else if (!n->was_master && atomic_load(&n->is_master) && npromoted < 64)
            promoted[npromoted++] = n;
    }
    /* Nodes that left the map lose their connection, after the grace
     * period and once their requests are answered (below). Seeds stay. */
    for (n = cl->nodes; n; n = n->next) {
        int is_seed = 0;
        for (int k = 0; k < cl->nseeds; k++)
            if (n->port == cl->seeds[k].port && strcmp(n->host, cl->seeds[k].host) == 0)
                is_seed = 1;
        if (atomic_load(&n->in_map) || is_seed)
            continue;
        for (int role = 0; role < RCP__ROLES && nclosing < 256; role++) {
            struct rcp_conn *cn = atomic_exchange(&n->conn[role], NULL);
            rcp_conn_stats st;
            if (!cn)
                continue;
            rcp__cache_node_detached(n);
            rcp_conn_get_stats(cn, &st);
            rcp_conn_stats_add(&n->last, &st);
            closing[nclosing++] = cn;
        }
        nclosing += rcp__bulk_detach(n, closing + nclosing, 256 - nclosing, &n->last);
    }
    pthread_mutex_unlock(&cl->reg_mu);

    old = atomic_exchange_explicit(&cl->map, m, memory_order_acq_rel);
    atomic_store(&cl->st.version, m->version);
    urcu_bp_synchronize_rcu();
    rcp__map_free(old);

    /* A node promoted (a failback) with its connections kept: its
     * tracking is armed again once the map sends reads there. */
    for (i = 0; i < npromoted; i++)
        rcp__cache_node_promoted(cl, promoted[i]);

    snprintf(msg, sizeof msg, "slot map v%llu (%s): %zu shards, %zu slots covered%s",
             (unsigned long long)m->version, reason, m->nshards, m->covered,
             kept ? " (some kept from the previous map: the answer left them out)" : "");
    rcp__cluster_emit(cl, RCP_EVENT_MAP_UPDATED, RCP_OK, msg);

    for (i = 0; i < nclosing; i++) {
        /* Let requests already queued there finish (bounded). */
        uint64_t until = rcp__now_ns() + 2000000000ull;
        while (rcp__conn_outstanding(closing[i]) && rcp__now_ns() < until &&
               !atomic_load(&cl->closing))
            usleep(2000);
        rcp_conn_close(closing[i]);
    }
    return 0;
}

/* Worker thread: PING every node in the map and smooth the round trip
 * (1/4 new, 3/4 old), for RCP_READ_NEAREST. A PING shares the node's
 * pipeline, so it measures what a request would see; on an application
 * loop it goes on the refresher's own connection instead (the network's
 * round trip, without the application loop's delays). */
void rcp__refresh_rtt(struct rcp_cluster *cl)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    rcp__node *list[256], *n;
    size_t k = 0, i;
    pthread_mutex_lock(&cl->reg_mu);
    for (n = cl->nodes; n && k < 256; n = n->next)
        if (atomic_load(&n->in_map))
            list[k++] = n;
    pthread_mutex_unlock(&cl->reg_mu);
    for (i = 0; i < k && !atomic_load(&cl->closing); i++) {
        struct rcp_conn *conn;
        rcp_reply *r;
        uint64_t t0, rtt, old;
        conn = rcp__node_pin_control(cl, list[i]);
        if (!conn)
            continue;
        t0 = rcp__now_ns();
        r = rcp__conn_command_raw(conn, ping, sizeof ping - 1, 0, 1000);
        rtt = rcp__now_ns() - t0;
        rcp__cluster_unpin(conn);
        if (r->type == RCP_REPLY_STATUS) {
            old = atomic_load(&list[i]->rtt_ns);
            atomic_store(&list[i]->rtt_ns, old ? (old * 3 + rtt) / 4 : rtt);
        }
        rcp_reply_free(r);
    }
}

int rcp__later_add(struct rcp_cluster *cl, rcp__later *l, uint64_t delay_ns, uint64_t deadline)
{
    l->at = rcp__now_ns() + delay_ns;
    if (deadline && l->at > deadline)
        l->at = deadline;
    pthread_mutex_lock(&cl->wmu);
    if (cl->retries_closed) {
        pthread_mutex_unlock(&cl->wmu);
        return -1;
    }
    l->next = cl->retries;
    cl->retries = l;
    pthread_cond_signal(&cl->wcv);
    pthread_mutex_unlock(&cl->wmu);
    return 0;
}

int rcp__later_remove(struct rcp_cluster *cl, rcp__later *l)
{
    rcp__later **pp;
    int found = 0;
    pthread_mutex_lock(&cl->wmu);
    for (pp = &cl->retries; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            l->next = NULL;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&cl->wmu);
    return found;
}

void *rcp__refresher_main(void *arg)
{
    struct rcp_cluster *cl = arg;
    pthread_mutex_lock(&cl->wmu);
    while (!cl->stop) {
        uint64_t now = rcp__now_ns(), wake = cl->next_periodic;
        uint64_t gap = (uint64_t)cl->opt.min_refresh_gap_ms * 1000000ull;
        rcp__later *due = NULL, **pp;
        int do_refresh = 0, forced = 0;

        if (cl->force && now >= cl->last_refresh + gap) {
            do_refresh = forced = 1;
        } else if (now >= cl->next_periodic) {
            do_refresh = 1;
        }
        if (cl->force && cl->last_refresh + gap < wake)
            wake = cl->last_refresh + gap;
        for (pp = &cl->retries; *pp;) {
            rcp__later *l = *pp;
            if (l->at <= now) {
                *pp = l->next;
                l->next = due;
                due = l;
            } else {
                if (l->at < wake)
                    wake = l->at;
                pp = &l->next;
            }
        }
        if (do_refresh) {
            uint64_t jitter;
            cl->force = 0;
            cl->last_refresh = now;
            jitter = (uint64_t)cl->opt.refresh_interval_ms * 100000ull; /* 10% */
            cl->next_periodic = now + (uint64_t)cl->opt.refresh_interval_ms * 1000000ull -
                                jitter + (jitter ? rcp__rnd() % (2 * jitter) : 0);
        }
        if (!do_refresh && !due) {
            rcp__cond_wait_until(&cl->wcv, &cl->wmu, wake ? wake : 1);
            continue;
        }
        pthread_mutex_unlock(&cl->wmu);
        if (do_refresh) {
            char errs[1500] = "";
            rcp__stat_add(forced ? &cl->st.forced : &cl->st.periodic, 1);
            if (rcp__refresh(cl, forced ? "forced" : "periodic", errs, sizeof errs) < 0) {
                char msg[1600];
                snprintf(msg, sizeof msg, "slot map refresh failed, the old map stays: %s",
                         errs[0] ? errs : "out of memory building the map");
                rcp__cluster_emit(cl, RCP_EVENT_REFRESH_FAILED, RCP_ERR_CLUSTER_DOWN, msg);
            }
            if (!forced)
                rcp__refresh_rtt(cl);
        }
        while (due) {
            rcp__later *l = due;
            due = l->next;
            l->next = NULL;
            l->fire(l, atomic_load(&cl->closing));
        }
        pthread_mutex_lock(&cl->wmu);
    }
    pthread_mutex_unlock(&cl->wmu);
    atomic_store(&cl->worker_done, 1);
    return NULL;
}

void rcp__refresher_wake(struct rcp_cluster *cl)
{
    pthread_mutex_lock(&cl->wmu);
    cl->stop = 1;
    pthread_cond_signal(&cl->wcv);
    pthread_mutex_unlock(&cl->wmu);
}

void rcp__refresher_stop(struct rcp_cluster *cl)
{
    rcp__later *l;
    rcp__refresher_wake(cl);
    if (cl->worker_started)
        rcp__cluster_join(cl, cl->worker, &cl->worker_done);
    cl->worker_started = 0;
    /* Queued retries: resolved now, and no more are taken. */
    pthread_mutex_lock(&cl->wmu);
    l = cl->retries;
    cl->retries = NULL;
    cl->retries_closed = 1;
    pthread_mutex_unlock(&cl->wmu);
    while (l) {
        rcp__later *next = l->next;
        l->next = NULL;
        l->fire(l, 1);
        l = next;
    }
}
