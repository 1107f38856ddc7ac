/* test_readpolicy.c: where reads and writes really go, by the per-node
 * request counters of rcp_cluster_get_nodes.
 *
 * PREFER_REPLICA: GETs go to replicas (every replica gets some), masters
 * get none, and no MOVED is needed (the connections used for replica reads
 * are READONLY).
 * MASTER_AND_REPLICAS: GETs spread over both masters and replicas.
 * MASTER_ONLY: replicas get nothing. Writes go to masters under every
 * policy. The per-request policy (rcp_cluster_send_argv_policy) overrides
 * the handle's. The library's own refresher may ask any node for the slot
 * table: each node may get up to one request per refresh on top. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NPRELOAD 1000
#define NTHREADS 8

static rcpc_cluster cl;
static rcp_cluster *h;
static rcpc_topo topo;
static rcpc_problem prob = RCPC_PROBLEM_INIT;

struct snap {
    rcp_cluster_stats st;
    uint64_t req[RCPC_MAX_NODES]; /* by index in topo */
};

static void take(struct snap *s)
{
    int i;

    memset(s, 0, sizeof *s);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &s->st), RCP_OK);
    for (i = 0; i < topo.n; i++) {
        rcp_cluster_node_info ni;
        if (rcpc_node_info(h, topo.node[i].port, &ni))
            s->req[i] = ni.conn.requests;
    }
}

struct delta {
    uint64_t masters, replicas;
    uint64_t node[RCPC_MAX_NODES];
    uint64_t refreshes, moved;
    int nodes_hit_m, nodes_hit_r;
};

static struct delta diff(const struct snap *a, const struct snap *b)
{
    struct delta d;
    int i;

    memset(&d, 0, sizeof d);
    for (i = 0; i < topo.n; i++) {
        d.node[i] = b->req[i] - a->req[i];
        if (topo.node[i].is_master) {
            d.masters += d.node[i];
            d.nodes_hit_m += d.node[i] > 0;
        } else {
            d.replicas += d.node[i];
            d.nodes_hit_r += d.node[i] > 0;
        }
    }
    d.refreshes = (b->st.refreshes_forced + b->st.refreshes_periodic) -
                  (a->st.refreshes_forced + a->st.refreshes_periodic);
    d.moved = b->st.moved - a->st.moved;
    return d;
}

static void print_delta(const char *what, const struct delta *d)
{
    int i;

    fprintf(stderr, "%s: masters %llu replicas %llu refreshes %llu moved %llu |", what,
            (unsigned long long)d->masters, (unsigned long long)d->replicas,
            (unsigned long long)d->refreshes, (unsigned long long)d->moved);
    for (i = 0; i < topo.n; i++)
        fprintf(stderr, " %d%s:%llu", topo.node[i].port, topo.node[i].is_master ? "M" : "R",
                (unsigned long long)d->node[i]);
    fprintf(stderr, "\n");
}

static void open_handle(int policy, int pick_ms)
{
    rcp_cluster_options o;
    rcp_conn_options node;

    rcpc_options(&o, &node, cl.seed);
    o.read_policy = policy;
    if (pick_ms > 0)
        o.replica_pick_ms = pick_ms;
    h = rcpc_open(&o);
}

static void setup(void)
{
    char err[2048];

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rcpc_topology_any(&cl, &topo), 0);
}

static void teardown(void)
{
    rcp_cluster_close(h);
    h = NULL;
}

struct job {
    int write;        /* SET instead of GET */
    int policy;       /* per request; -1: the handle's */
    int duration_ms;  /* run for this long... */
    int count;        /* ...or this many requests per thread */
    atomic_long done;
    atomic_long bad;
};

static void *worker(void *arg)
{
    struct job *j = arg;
    unsigned rnd = (unsigned)(uintptr_t)&rnd;
    int64_t end = rcptest_now_ms() + j->duration_ms;
    long n;

    for (n = 0; j->count ? n < j->count : rcptest_now_ms() < end; n++) {
        char key[32], val[32], d[256];
        const char *argv[3];
        rcp_reply *r;
        int i;

        rnd = rnd * 1103515245u + 12345u;
        i = (int)((rnd >> 8) % NPRELOAD);
        snprintf(key, sizeof key, "rp:%d", i);
        snprintf(val, sizeof val, "v%d", i);
        argv[0] = j->write ? "SET" : "GET";
        argv[1] = key;
        argv[2] = val;
        if (j->policy >= 0 || (n % 2) == 1) {
            int rc;
            r = rcpc_call_async(h, j->policy, j->write ? 3 : 2, argv, NULL, &rc);
        } else {
            r = rcp_cluster_command_argv(h, j->write ? 3 : 2, argv, NULL);
        }
        if (j->write ? !rcpc_is_status(r, "OK") : !rcpc_is_string(r, val)) {
            atomic_fetch_add(&j->bad, 1);
            rcpc_problem_note(&prob, "%s %s: %s", argv[0], key, rcptest_describe(r, d, sizeof d));
        }
        rcp_reply_free(r);
        atomic_fetch_add(&j->done, 1);
    }
    return NULL;
}

static struct delta run(const char *what, int write, int policy, int duration_ms, int count)
{
    struct job j;
    pthread_t th[NTHREADS];
    struct snap a, b;
    struct delta d;
    int i;

    memset(&j, 0, sizeof j);
    j.write = write;
    j.policy = policy;
    j.duration_ms = duration_ms;
    j.count = count;
    take(&a);
    for (i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker, &j), 0);
    for (i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    take(&b);
    d = diff(&a, &b);
    print_delta(what, &d);
    ck_assert_msg(atomic_load(&j.bad) == 0, "%s: %ld of %ld requests failed; first: %s", what,
                  atomic_load(&j.bad), atomic_load(&j.done), prob.first);
    ck_assert_msg(d.masters + d.replicas >= (uint64_t)atomic_load(&j.done),
                  "%s: %ld requests done but the nodes counted only %llu", what,
                  atomic_load(&j.done), (unsigned long long)(d.masters + d.replicas));
    return d;
}

/* The refresher may ask any node: at most one request per refresh and
 * node, plus a little slack for the handshake. */
static uint64_t allowance(const struct delta *d)
{
    /* Each refresh: CLUSTER SLOTS to one node, and a periodic one also
     * PINGs every node (round-trip times for RCP_READ_NEAREST). */
    return d->refreshes * 4 + 3;
}

static void preload(void)
{
    int i;

    for (i = 0; i < NPRELOAD; i++) {
        char d[256];
        rcp_reply *r = rcp_cluster_command(h, "SET rp:%d v%d", i, i);
        ck_assert_msg(rcpc_is_status(r, "OK"), "preload: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    ck_assert_msg(rcpc_wait_replicas_synced(&cl, rcptest_scale(15000)) == 0,
                  "replicas not in sync");
}

START_TEST(test_prefer_replica)
{
    struct delta d;

    open_handle(RCP_READ_PREFER_REPLICA, 0);
    preload();
    d = run("PREFER_REPLICA GET", 0, -1, 0, 300);
    ck_assert_msg(d.masters <= allowance(&d), "PREFER_REPLICA: masters got %llu GETs",
                  (unsigned long long)d.masters);
    ck_assert_msg(d.nodes_hit_r == 3, "PREFER_REPLICA: only %d of 3 replicas got reads",
                  d.nodes_hit_r);
    ck_assert_msg(d.moved == 0, "PREFER_REPLICA: %llu MOVED (replica not READONLY?)",
                  (unsigned long long)d.moved);
    /* Writes from the same handle go to masters. */
    d = run("PREFER_REPLICA SET", 1, -1, 0, 200);
    ck_assert_msg(d.replicas <= allowance(&d), "writes reached replicas: %llu",
                  (unsigned long long)d.replicas);
    ck_assert_msg(d.moved == 0, "writes were redirected %llu times", (unsigned long long)d.moved);
}
END_TEST

START_TEST(test_master_and_replicas)
{
    struct delta d;
    uint64_t total;

    open_handle(RCP_READ_MASTER_AND_REPLICAS, 5);
    preload();
    d = run("MASTER_AND_REPLICAS GET", 0, -1, rcptest_scale(1500), 0);
    total = d.masters + d.replicas;
    ck_assert_msg(d.masters * 10 >= total && d.replicas * 10 >= total,
                  "MASTER_AND_REPLICAS: masters %llu, replicas %llu: not spread",
                  (unsigned long long)d.masters, (unsigned long long)d.replicas);
    ck_assert_msg(d.nodes_hit_m == 3 && d.nodes_hit_r == 3,
                  "MASTER_AND_REPLICAS: %d masters and %d replicas got reads", d.nodes_hit_m,
                  d.nodes_hit_r);
    ck_assert_msg(d.moved == 0, "MASTER_AND_REPLICAS: %llu MOVED", (unsigned long long)d.moved);
    d = run("MASTER_AND_REPLICAS SET", 1, -1, 0, 200);
    ck_assert_msg(d.replicas <= allowance(&d), "writes reached replicas: %llu",
                  (unsigned long long)d.replicas);
    ck_assert_msg(d.moved == 0, "writes were redirected %llu times", (unsigned long long)d.moved);
}
END_TEST

START_TEST(test_master_only)
{
    struct delta d;

    open_handle(RCP_READ_MASTER_ONLY, 0);
    preload();
    d = run("MASTER_ONLY GET", 0, -1, 0, 300);
    ck_assert_msg(d.replicas <= allowance(&d), "MASTER_ONLY: replicas got %llu requests",
                  (unsigned long long)d.replicas);
    ck_assert_int_eq(d.nodes_hit_m, 3);
    d = run("MASTER_ONLY SET", 1, -1, 0, 200);
    ck_assert_msg(d.replicas <= allowance(&d), "writes reached replicas: %llu",
                  (unsigned long long)d.replicas);
}
END_TEST

/* The per-request policy wins over the handle's, both ways; writes ignore
 * it. */
START_TEST(test_per_request_policy)
{
    struct delta d;

    open_handle(RCP_READ_MASTER_ONLY, 0);
    preload();
    d = run("MASTER_ONLY handle, PREFER_REPLICA request GET", 0, RCP_READ_PREFER_REPLICA, 0, 200);
    ck_assert_msg(d.masters <= allowance(&d), "per-request PREFER_REPLICA: masters got %llu",
                  (unsigned long long)d.masters);
    d = run("MASTER_ONLY handle, PREFER_REPLICA request SET", 1, RCP_READ_PREFER_REPLICA, 0, 100);
    ck_assert_msg(d.replicas <= allowance(&d), "writes reached replicas: %llu",
                  (unsigned long long)d.replicas);
    rcp_cluster_close(h);
    h = NULL;

    open_handle(RCP_READ_PREFER_REPLICA, 0);
    d = run("PREFER_REPLICA handle, MASTER_ONLY request GET", 0, RCP_READ_MASTER_ONLY, 0, 200);
    ck_assert_msg(d.replicas <= allowance(&d), "per-request MASTER_ONLY: replicas got %llu",
                  (unsigned long long)d.replicas);
}
END_TEST

/* NEAREST: reads succeed without redirects, and every node in the map has
 * a measured round trip. */
START_TEST(test_nearest)
{
    struct delta d;
    rcp_cluster_node_info info[16];
    size_t n, i, measured = 0, in_map = 0;

    open_handle(RCP_READ_NEAREST, 0);
    preload();
    d = run("NEAREST GET", 0, -1, 0, 300);
    ck_assert_msg(d.moved == 0, "NEAREST: %llu MOVED", (unsigned long long)d.moved);
    n = rcp_cluster_get_nodes(h, info, 16);
    for (i = 0; i < n && i < 16; i++) {
        if (!info[i].in_map)
            continue;
        in_map++;
        if (info[i].rtt_us > 0)
            measured++;
    }
    ck_assert_uint_eq(in_map, 6);
    ck_assert_msg(measured == in_map, "only %zu of %zu nodes have a round-trip time", measured,
                  in_map);
    d = run("NEAREST SET", 1, -1, 0, 200);
    ck_assert_msg(d.replicas <= allowance(&d), "writes reached replicas: %llu",
                  (unsigned long long)d.replicas);
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_checked_fixture(tc, setup, teardown);
    RCPTEST_ADD(tc, test_prefer_replica, test_master_and_replicas, test_master_only,
                test_per_request_policy, test_nearest);
}

int main(void)
{
    return rcpc_main(&cl, "readpolicy", 3, 1, NULL, 60, add_tests);
}
