/* test_reshard.c: 16 threads doing SET/GET/INCR across all slots while
 * redis-cli --cluster reshard moves a third of the slots (5462) from one
 * master to another and back.
 *
 * Zero failed requests: every reply is checked. Each thread owns its keys,
 * so it knows what every GET must return; each INCR's result must be
 * exactly one more than the thread's own count (an INCR run twice after a
 * retry shows up at once), and at the end every key and counter reads back
 * what was acknowledged. The handle must have followed redirects (MOVED or
 * ASK > 0). The cluster keeps emptied masters as masters
 * (cluster-allow-replica-migration no), so the slots can move back. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NTHREADS 16
#define NKEYS 256    /* per thread */
#define NCOUNTERS 16 /* per thread */
#define MOVE_SLOTS 5462

static rcpc_cluster cl;
static rcp_cluster *h;
static atomic_int stop_flag;
static rcpc_problem prob = RCPC_PROBLEM_INIT;

struct worker {
    pthread_t th;
    int id;
    unsigned rnd;
    long version[NKEYS];       /* last acknowledged SET, 0 = never */
    long long count[NCOUNTERS]; /* acknowledged INCRs */
    long ops;
    long failures;
};

static struct worker workers[NTHREADS];

static void key_of(char *buf, size_t len, int t, int i)
{
    snprintf(buf, len, "rs:%d:%d", t, i);
}

static void counter_of(char *buf, size_t len, int t, int i)
{
    snprintf(buf, len, "rc:%d:%d", t, i);
}

static rcp_reply *call(struct worker *w, int argc, const char **argv)
{
    /* Odd threads use the async API, even ones the sync API. */
    if (w->id % 2) {
        int rc;
        rcp_reply *r = rcpc_call_async(h, -1, argc, argv, NULL, &rc);
        if (r == NULL)
            rcpc_problem_note(&prob, "thread %d: %s send/wait failed: %d (%s)", w->id, argv[0], rc,
                              rc >= 0 ? rcp_strerror(rc) : "not resolved in time");
        return r;
    }
    return rcp_cluster_command_argv(h, argc, argv, NULL);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;

    while (!atomic_load(&stop_flag)) {
        char key[64], val[64], d[256];
        const char *argv[3];
        rcp_reply *r;
        int i, op;

        w->rnd = w->rnd * 1103515245u + 12345u;
        i = (int)((w->rnd >> 8) % NKEYS);
        op = (int)((w->rnd >> 20) % 3);
        w->ops++;
        if (op == 0) {
            key_of(key, sizeof key, w->id, i);
            snprintf(val, sizeof val, "%d.%d.%ld", w->id, i, w->version[i] + 1);
            argv[0] = "SET";
            argv[1] = key;
            argv[2] = val;
            r = call(w, 3, argv);
            if (rcpc_is_status(r, "OK")) {
                w->version[i]++;
            } else {
                w->failures++;
                rcpc_problem_note(&prob, "thread %d: SET %s: %s", w->id, key,
                                  rcptest_describe(r, d, sizeof d));
            }
        } else if (op == 1) {
            key_of(key, sizeof key, w->id, i);
            snprintf(val, sizeof val, "%d.%d.%ld", w->id, i, w->version[i]);
            argv[0] = "GET";
            argv[1] = key;
            r = call(w, 2, argv);
            if (w->version[i] == 0 ? !rcptest_is_nil(r) : !rcpc_is_string(r, val)) {
                w->failures++;
                rcpc_problem_note(&prob, "thread %d: GET %s: expected %s, got %s", w->id, key,
                                  w->version[i] ? val : "nil", rcptest_describe(r, d, sizeof d));
            }
        } else {
            int c = i % NCOUNTERS;
            counter_of(key, sizeof key, w->id, c);
            argv[0] = "INCR";
            argv[1] = key;
            r = call(w, 2, argv);
            if (rcptest_is_int(r, w->count[c] + 1)) {
                w->count[c]++;
            } else {
                w->failures++;
                rcpc_problem_note(&prob, "thread %d: INCR %s: expected %lld, got %s", w->id, key,
                                  w->count[c] + 1, rcptest_describe(r, d, sizeof d));
                /* Resynchronise with the server so one problem is not
                 * reported as thousands. */
                if (r != NULL && r->type == RCP_REPLY_INTEGER)
                    w->count[c] = r->integer;
            }
        }
        rcp_reply_free(r);
    }
    return NULL;
}

static int slots_of(int port)
{
    rcpc_topo t;
    int i;

    if (rcpc_topology(port, &t) != 0)
        return -1;
    i = rcpc_find_port(&t, port);
    return i >= 0 ? t.node[i].nslots : -1;
}

/* Runs a reshard in the background while the load goes on; returns the
 * job's exit status, err says why not 0. */
static int reshard_under_load(int from, int to, char *err, size_t errlen)
{
    char f[16], t[16], n[16];
    const char *args[] = {f, t, n, NULL};

    snprintf(f, sizeof f, "%d", from);
    snprintf(t, sizeof t, "%d", to);
    snprintf(n, sizeof n, "%d", MOVE_SLOTS);
    return rcpc_job_run(&cl, "reshard", args, 240, err, errlen);
}

static void stop_workers(void)
{
    int t;

    atomic_store(&stop_flag, 1);
    for (t = 0; t < NTHREADS; t++)
        pthread_join(workers[t].th, NULL);
}

START_TEST(test_reshard_under_load)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    rcp_cluster_stats st;
    rcpc_topo topo;
    char err[4096];
    int from = 0, to = 0, i, t;
    long ops = 0, failures = 0;
    int64_t t0;

    ck_assert_msg(rcpc_wait_ok(&cl, 30, err, sizeof err) == 0, "%s", err);
    rcpc_options(&o, &node, cl.seed);
    h = rcpc_open(&o);

    /* The master with the most slots (5462 of a fresh 3-master cluster)
     * gives them all away, then gets as many back. */
    ck_assert_int_eq(rcpc_topology_any(&cl, &topo), 0);
    for (i = 0; i < topo.n; i++) {
        if (!topo.node[i].is_master)
            continue;
        if (from == 0 || topo.node[i].nslots > slots_of(from))
            from = topo.node[i].port;
    }
    for (i = 0; i < topo.n; i++)
        if (topo.node[i].is_master && topo.node[i].port != from) {
            to = topo.node[i].port;
            break;
        }
    ck_assert_int_ge(slots_of(from), MOVE_SLOTS);

    atomic_store(&stop_flag, 0);
    for (t = 0; t < NTHREADS; t++) {
        memset(&workers[t], 0, sizeof workers[t]);
        workers[t].id = t;
        workers[t].rnd = 777u + (unsigned)t * 7919u;
        ck_assert_int_eq(pthread_create(&workers[t].th, NULL, worker_main, &workers[t]), 0);
    }
    rcptest_sleep_ms(500);

    t0 = rcptest_now_ms();
    if (reshard_under_load(from, to, err, sizeof err) != 0) {
        stop_workers();
        ck_abort_msg("reshard %d -> %d: %s", from, to, err);
    }
    ck_assert_msg(slots_of(to) >= 2 * MOVE_SLOTS - 1, "after the reshard %d has %d slots", to,
                  slots_of(to));
    if (reshard_under_load(to, from, err, sizeof err) != 0) {
        stop_workers();
        ck_abort_msg("reshard %d -> %d: %s", to, from, err);
    }
    ck_assert_int_eq(slots_of(from), MOVE_SLOTS);
    rcptest_sleep_ms(500);
    stop_workers();
    for (t = 0; t < NTHREADS; t++) {
        ops += workers[t].ops;
        failures += workers[t].failures;
    }
    ck_assert_int_eq(rcp_cluster_get_stats(h, &st), RCP_OK);
    fprintf(stderr,
            "reshard: %ld requests in %lld ms, %ld failed; moved %llu ask %llu "
            "refreshes forced %llu periodic %llu map_version %llu\n",
            ops, (long long)(rcptest_now_ms() - t0), failures, (unsigned long long)st.moved,
            (unsigned long long)st.ask, (unsigned long long)st.refreshes_forced,
            (unsigned long long)st.refreshes_periodic, (unsigned long long)st.map_version);
    ck_assert_msg(failures == 0 && rcpc_problem_count(&prob) == 0,
                  "%ld of %ld requests failed (%d problems); first: %s", failures, ops,
                  rcpc_problem_count(&prob), prob.first);
    ck_assert_msg(st.moved + st.ask > 0, "no redirect followed during two reshards");

    /* Everything acknowledged reads back. */
    for (t = 0; t < NTHREADS; t++) {
        for (i = 0; i < NKEYS; i++) {
            char key[64], val[64];
            key_of(key, sizeof key, t, i);
            snprintf(val, sizeof val, "%d.%d.%ld", t, i, workers[t].version[i]);
            rcpc_assert_get(h, "final GET", key, workers[t].version[i] == 0 ? NULL : val);
        }
        for (i = 0; i < NCOUNTERS; i++) {
            char key[64], want[32];
            counter_of(key, sizeof key, t, i);
            snprintf(want, sizeof want, "%lld", workers[t].count[i]);
            rcpc_assert_get(h, "counter", key, workers[t].count[i] == 0 ? NULL : want);
        }
    }
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_reshard_under_load);
}

int main(void)
{
    static const char *const extra[] = {"--cluster-allow-replica-migration", "no", NULL};
    return rcpc_main(&cl, "reshard", 3, 1, extra, 280, add_tests);
}
