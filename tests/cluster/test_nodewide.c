/* test_nodewide.c: commands sent to every node, and the cluster-wide SCAN.
 *
 * FLUSHALL on every master empties the cluster; DBSIZE summed over the
 * masters equals the keys written, and each replica (RCP_NODES_ALL) reports
 * its master's count once in sync; SCRIPT LOAD gives every master the same
 * SHA1; CONFIG GET answers per node; a blocking command is refused. SCAN
 * over all masters returns each of 3,000 keys exactly once, with MATCH,
 * COUNT and TYPE honoured. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NSCAN 3000

static rcpc_cluster cl;
static rcp_cluster *h;

static size_t on_nodes(int which, rcp_node_reply *out, size_t max, const char *a0, const char *a1,
                       const char *a2)
{
    const char *argv[3] = {a0, a1, a2};
    int argc = a2 ? 3 : a1 ? 2 : 1;
    return rcp_cluster_command_nodes(h, which, out, max, argc, argv, NULL);
}

static void never_called(rcp_future *f, rcp_reply *r)
{
    (void)f;
    (void)r;
    ck_abort_msg("a refused send called back");
}

START_TEST(test_node_wide)
{
    rcp_node_reply nr[16];
    char d[512];
    size_t n, i;
    long long sum = 0;
    int masters = 0;

    h = rcpc_open_default(&cl);
    n = on_nodes(RCP_NODES_MASTERS, nr, 16, "FLUSHALL", NULL, NULL);
    ck_assert_uint_eq(n, 3);
    for (i = 0; i < n; i++) {
        ck_assert_msg(nr[i].is_master, "%s listed as a master", nr[i].addr);
        ck_assert_msg(rcpc_is_status(nr[i].reply, "OK"), "FLUSHALL on %s: %s", nr[i].addr,
                      rcptest_describe(nr[i].reply, d, sizeof d));
    }
    rcp_cluster_node_replies_free(nr, n);

    for (i = 0; i < 500; i++) {
        rcp_reply *r = rcp_cluster_command(h, "SET nw:%d x", (int)i);
        ck_assert_msg(rcpc_is_status(r, "OK"), "SET: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    n = on_nodes(RCP_NODES_MASTERS, nr, 16, "DBSIZE", NULL, NULL);
    ck_assert_uint_eq(n, 3);
    for (i = 0; i < n; i++) {
        ck_assert_msg(nr[i].reply->type == RCP_REPLY_INTEGER, "DBSIZE on %s: %s", nr[i].addr,
                      rcptest_describe(nr[i].reply, d, sizeof d));
        ck_assert_msg(nr[i].reply->integer > 0, "%s holds no key of 500", nr[i].addr);
        sum += nr[i].reply->integer;
    }
    rcp_cluster_node_replies_free(nr, n);
    ck_assert_int_eq(sum, 500);

    /* As one request, a command about a node's whole keyspace would act
     * on one master: refused, pointing at the call that does it right,
     * and nothing is sent (the keys are all still there). */
    {
        static const char *const per_node[] = {"DBSIZE", "KEYS *", "SCAN 0", "FLUSHALL",
                                               "FLUSHDB"};
        for (i = 0; i < sizeof per_node / sizeof per_node[0]; i++) {
            rcp_future f;
            rcp_reply *r = rcp_cluster_command(h, per_node[i]);
            ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_INVALID &&
                              strstr(r->str, "rcp_cluster_command_nodes"),
                          "%s as one request: %s", per_node[i], rcptest_describe(r, d, sizeof d));
            rcp_reply_free(r);
            memset(&f, 0, sizeof f);
            f.resolve = never_called;
            ck_assert_int_eq(rcp_cluster_send(h, &f, per_node[i]), RCP_ERR_INVALID);
        }
        n = on_nodes(RCP_NODES_MASTERS, nr, 16, "DBSIZE", NULL, NULL);
        for (i = 0, sum = 0; i < n; i++)
            sum += nr[i].reply->integer;
        rcp_cluster_node_replies_free(nr, n);
        ck_assert_int_eq(sum, 500);
    }

    ck_assert_msg(rcpc_wait_replicas_synced(&cl, rcptest_scale(15000)) == 0,
                  "replicas not in sync");
    n = on_nodes(RCP_NODES_ALL, nr, 16, "DBSIZE", NULL, NULL);
    ck_assert_uint_eq(n, 6);
    sum = 0;
    for (i = 0; i < n; i++) {
        ck_assert_msg(nr[i].reply->type == RCP_REPLY_INTEGER, "DBSIZE on %s: %s", nr[i].addr,
                      rcptest_describe(nr[i].reply, d, sizeof d));
        masters += nr[i].is_master;
        sum += nr[i].reply->integer;
    }
    rcp_cluster_node_replies_free(nr, n);
    ck_assert_int_eq(masters, 3);
    ck_assert_int_eq(sum, 1000); /* every key on its master and its replica */

    n = on_nodes(RCP_NODES_MASTERS, nr, 16, "SCRIPT", "LOAD", "return 42");
    ck_assert_uint_eq(n, 3);
    for (i = 0; i < n; i++) {
        ck_assert_msg(nr[i].reply->type == RCP_REPLY_STRING && nr[i].reply->len == 40,
                      "SCRIPT LOAD on %s: %s", nr[i].addr,
                      rcptest_describe(nr[i].reply, d, sizeof d));
        ck_assert_str_eq(nr[i].reply->str, nr[0].reply->str);
    }
    rcp_cluster_node_replies_free(nr, n);

    /* Fewer slots than nodes: the count is still every node, the rest is
     * freed by the library. */
    n = on_nodes(RCP_NODES_ALL, nr, 2, "CONFIG", "GET", "cluster-enabled");
    ck_assert_uint_eq(n, 6);
    for (i = 0; i < 2; i++) {
        ck_assert_msg(nr[i].reply->type == RCP_REPLY_ARRAY && nr[i].reply->elements == 2 &&
                          rcpc_is_string(nr[i].reply->element[1], "yes"),
                      "CONFIG GET on %s: %s", nr[i].addr,
                      rcptest_describe(nr[i].reply, d, sizeof d));
    }
    rcp_cluster_node_replies_free(nr, 2);

    ck_assert_uint_eq(on_nodes(RCP_NODES_MASTERS, nr, 16, "BLPOP", "l", "1"), 0);
    ck_assert_uint_eq(rcp_cluster_command_nodes(h, 7, nr, 16, 1, (const char *[]){"PING"}, NULL), 0);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

static int scan_all(const char *match, long count, const char *type, unsigned char *seen,
                    int *others)
{
    rcp_cluster_scan *s = rcp_cluster_scan_new(h, match, count, type);
    rcp_reply *keys;
    char d[512];
    int rc, total = 0;
    size_t i;

    ck_assert_ptr_nonnull(s);
    while ((rc = rcp_cluster_scan_next(s, &keys)) == 1) {
        ck_assert_int_eq(keys->type, RCP_REPLY_ARRAY);
        for (i = 0; i < keys->elements; i++) {
            int k;
            char tail;
            if (sscanf(keys->element[i]->str, "sc:%d%c", &k, &tail) == 1 && k >= 0 && k < NSCAN)
                seen[k]++;
            else
                (*others)++;
            total++;
        }
        rcp_reply_free(keys);
    }
    ck_assert_msg(rc == 0, "scan: %s", rcptest_describe(keys, d, sizeof d));
    ck_assert_ptr_null(keys);
    rcp_cluster_scan_free(s);
    return total;
}

START_TEST(test_scan)
{
    static unsigned char seen[NSCAN];
    char d[512];
    int i, others = 0, total;

    h = rcpc_open_default(&cl);
    for (i = 0; i < NSCAN; i++) {
        rcp_reply *r = rcp_cluster_command(h, i % 10 ? "SET sc:%d v" : "RPUSH sc:%d v", i);
        ck_assert_msg(!rcp_reply_is_error(r), "write: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    for (i = 0; i < 10; i++) {
        rcp_reply *r = rcp_cluster_command(h, "SET other:%d v", i);
        rcp_reply_free(r);
    }

    memset(seen, 0, sizeof seen);
    total = scan_all("sc:*", 100, NULL, seen, &others);
    for (i = 0; i < NSCAN; i++)
        ck_assert_msg(seen[i] == 1, "sc:%d seen %d times", i, seen[i]);
    ck_assert_int_eq(others, 0);
    ck_assert_int_eq(total, NSCAN);

    memset(seen, 0, sizeof seen);
    total = scan_all("sc:*", 0, "list", seen, &others);
    ck_assert_int_eq(total, NSCAN / 10);
    for (i = 0; i < NSCAN; i++)
        ck_assert_int_eq(seen[i], i % 10 ? 0 : 1);

    memset(seen, 0, sizeof seen);
    others = 0;
    total = scan_all(NULL, 1000, NULL, seen, &others);
    ck_assert_int_ge(others, 10);
    for (i = 0; i < NSCAN; i++)
        ck_assert_int_eq(seen[i], 1);

    {
        rcp_reply *k = NULL;
        ck_assert_int_eq(rcp_cluster_scan_next(NULL, &k), -1);
        ck_assert_int_eq(k->err, RCP_ERR_INVALID);
        rcp_reply_free(k);
        ck_assert_ptr_null(rcp_cluster_scan_new(h, NULL, -1, NULL));
    }
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

struct from_cb {
    rcp_waitgroup *wg;
    size_t asked;
};

static void nodes_from_callback(rcp_future *f, rcp_reply *r)
{
    struct from_cb *c = f->data;
    rcp_node_reply nr[16];
    (void)r;
    c->asked = on_nodes(RCP_NODES_MASTERS, nr, 16, "DBSIZE", NULL, NULL);
    rcp_waitgroup_done(c->wg);
}

/* From a callback (an I/O thread) the node-wide call would wait for
 * replies that thread must read itself: it refuses at once (0 asked)
 * instead of hanging the handle. */
START_TEST(test_nodes_from_callback)
{
    struct from_cb c = {rcp_waitgroup_new(), 99};
    rcp_future f = {0};
    const char *argv[] = {"PING"};

    h = rcpc_open_default(&cl);
    ck_assert_ptr_nonnull(c.wg);
    f.resolve = nodes_from_callback;
    f.data = &c;
    rcp_waitgroup_add(c.wg, 1);
    ck_assert_int_eq(rcp_cluster_send_argv(h, &f, 1, argv, NULL), RCP_OK);
    ck_assert_int_eq(rcp_waitgroup_wait(c.wg, rcptest_scale(10000)), RCP_OK);
    ck_assert_uint_eq(c.asked, 0);
    rcp_waitgroup_free(c.wg);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_node_wide, test_scan, test_nodes_from_callback);
}

int main(void)
{
    return rcpc_main(&cl, "nodewide", 3, 1, NULL, 120, add_tests);
}
