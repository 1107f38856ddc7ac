/* test_topology.c: the cluster grows and shrinks under load.
 *
 * A node added with redis-cli --cluster add-node and given slots with
 * rebalance --cluster-use-empty-masters joins the handle's map and gets
 * traffic. The same node, emptied and removed with del-node, leaves the
 * map (in_map 0 or gone from the list) and the library closes its
 * connection: the node (still running, now alone) sees no client but our
 * side connection, and its counters stop growing. All the while 8 threads
 * do SET/GET across all slots: no request fails, every write reads back. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NTHREADS 8
#define NKEYS 512

static rcpc_cluster cl;
static rcp_cluster *h;
static atomic_int stop_flag;
static rcpc_problem prob = RCPC_PROBLEM_INIT;

struct worker {
    pthread_t th;
    int id;
    long version[NKEYS];
    long ops, failures;
};

static struct worker workers[NTHREADS];

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    unsigned rnd = 4242u + (unsigned)w->id * 7u;

    while (!atomic_load(&stop_flag)) {
        char key[32], val[48], d[256];
        const char *argv[3];
        rcp_reply *r;
        int i;

        rnd = rnd * 1103515245u + 12345u;
        i = (int)((rnd >> 8) % NKEYS);
        snprintf(key, sizeof key, "tp:%d:%d", w->id, i);
        argv[1] = key;
        argv[2] = val;
        w->ops++;
        if ((rnd >> 20) % 2) {
            snprintf(val, sizeof val, "%d.%ld", i, w->version[i] + 1);
            argv[0] = "SET";
            if (w->ops % 2) {
                r = rcp_cluster_command_argv(h, 3, argv, NULL);
            } else {
                int rc;
                r = rcpc_call_async(h, -1, 3, argv, NULL, &rc);
            }
            if (rcpc_is_status(r, "OK")) {
                w->version[i]++;
            } else {
                w->failures++;
                rcpc_problem_note(&prob, "SET %s: %s", key, rcptest_describe(r, d, sizeof d));
            }
        } else {
            snprintf(val, sizeof val, "%d.%ld", i, w->version[i]);
            argv[0] = "GET";
            r = rcp_cluster_command_argv(h, 2, argv, NULL);
            if (w->version[i] ? !rcpc_is_string(r, val) : !rcptest_is_nil(r)) {
                w->failures++;
                rcpc_problem_note(&prob, "GET %s: expected %s, got %s", key,
                                  w->version[i] ? val : "nil", rcptest_describe(r, d, sizeof d));
            }
        }
        rcp_reply_free(r);
    }
    return NULL;
}

static void stop_workers(void)
{
    int t;

    if (atomic_exchange(&stop_flag, 1))
        return;
    for (t = 0; t < NTHREADS; t++)
        pthread_join(workers[t].th, NULL);
}

START_TEST(test_add_rebalance_del)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    rcp_cluster_node_info ni;
    rcp_cluster_stats st;
    char err[4096], portbuf[16];
    int newport = 0, t, i;
    int64_t deadline;
    long ops = 0, failures = 0;

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    rcpc_options(&o, &node, cl.seed);
    h = rcpc_open(&o);
    atomic_store(&stop_flag, 0);
    for (t = 0; t < NTHREADS; t++) {
        memset(&workers[t], 0, sizeof workers[t]);
        workers[t].id = t;
        ck_assert_int_eq(pthread_create(&workers[t].th, NULL, worker_main, &workers[t]), 0);
    }
    rcptest_sleep_ms(300);

    /* Add an empty master, then give it a quarter of the slots. */
    if (rcpc_add_node(&cl, 0, &newport, err, sizeof err) != 0) {
        stop_workers();
        ck_abort_msg("add-node: %s", err);
    }
    {
        const char *args[] = {"--cluster-use-empty-masters", NULL};
        if (rcpc_job_run(&cl, "rebalance", args, 240, err, sizeof err) != 0) {
            stop_workers();
            ck_abort_msg("rebalance: %s", err);
        }
    }
    {
        rcpc_topo topo;
        int k;
        ck_assert_int_eq(rcpc_topology(newport, &topo), 0);
        k = rcpc_find_port(&topo, newport);
        ck_assert_msg(k >= 0 && topo.node[k].nslots > 1000, "new node %d has %d slots", newport,
                      k >= 0 ? topo.node[k].nslots : -1);
    }
    /* Traffic follows: the new node is in the map and its requests grow. */
    deadline = rcptest_now_ms() + rcptest_scale(15000);
    for (;;) {
        uint64_t before;
        int found = rcpc_node_info(h, newport, &ni);
        if (found && ni.in_map && ni.is_master) {
            before = ni.conn.requests;
            rcptest_sleep_ms(300);
            rcpc_node_info(h, newport, &ni);
            if (ni.conn.requests > before + 10)
                break;
        }
        if (rcptest_now_ms() > deadline) {
            stop_workers();
            ck_abort_msg("new node %d: in list %d, in_map %d, master %d, requests %llu", newport,
                         found, ni.in_map, ni.is_master, (unsigned long long)ni.conn.requests);
        }
        rcptest_sleep_ms(100);
    }

    /* Remove it again: its slots move away under load, then del-node. */
    snprintf(portbuf, sizeof portbuf, "%d", newport);
    {
        const char *args[] = {portbuf, NULL};
        if (rcpc_job_run(&cl, "del-node", args, 240, err, sizeof err) != 0) {
            stop_workers();
            ck_abort_msg("del-node: %s", err);
        }
    }
    /* Out of the map... */
    deadline = rcptest_now_ms() + rcptest_scale(15000);
    for (;;) {
        int found = rcpc_node_info(h, newport, &ni);
        if (!found || !ni.in_map)
            break;
        if (rcptest_now_ms() > deadline) {
            stop_workers();
            ck_abort_msg("removed node %d still in the map (master %d)", newport, ni.is_master);
        }
        rcptest_sleep_ms(100);
    }
    /* ...and its connection closed: the node, still running on its own,
     * has no client left but the one asking. */
    deadline = rcptest_now_ms() + rcptest_scale(30000);
    for (;;) {
        long long clients = rcpc_info_int(newport, "clients", "connected_clients");
        if (clients == 1)
            break;
        if (rcptest_now_ms() > deadline) {
            stop_workers();
            ck_abort_msg("removed node %d still has %lld clients (1 is the side connection)",
                         newport, clients);
        }
        rcptest_sleep_ms(100);
    }
    if (rcpc_node_info(h, newport, &ni)) {
        uint64_t before = ni.conn.requests;
        rcptest_sleep_ms(500);
        rcpc_node_info(h, newport, &ni);
        ck_assert_msg(ni.conn.requests == before,
                      "removed node %d: requests still growing (%llu -> %llu)", newport,
                      (unsigned long long)before, (unsigned long long)ni.conn.requests);
    }
    rcptest_sleep_ms(300);
    stop_workers();

    for (t = 0; t < NTHREADS; t++) {
        ops += workers[t].ops;
        failures += workers[t].failures;
    }
    ck_assert_int_eq(rcp_cluster_get_stats(h, &st), RCP_OK);
    fprintf(stderr,
            "topology: %ld requests, %ld failed; moved %llu ask %llu refreshes forced %llu "
            "periodic %llu; nodes %llu\n",
            ops, failures, (unsigned long long)st.moved, (unsigned long long)st.ask,
            (unsigned long long)st.refreshes_forced, (unsigned long long)st.refreshes_periodic,
            (unsigned long long)st.nodes);
    ck_assert_msg(failures == 0, "%ld of %ld requests failed; first: %s", failures, ops,
                  prob.first);
    ck_assert_uint_eq(st.nodes, 6);

    for (t = 0; t < NTHREADS; t++) {
        for (i = 0; i < NKEYS; i++) {
            char key[32], val[48];
            snprintf(key, sizeof key, "tp:%d:%d", t, i);
            snprintf(val, sizeof val, "%d.%ld", i, workers[t].version[i]);
            rcpc_assert_get(h, "final GET", key, workers[t].version[i] ? val : NULL);
        }
    }
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_add_rebalance_del);
}

int main(void)
{
    return rcpc_main(&cl, "topology", 3, 1, NULL, 280, add_tests);
}
