/* test_slots.c: CLUSTER SLOTS answers a client must not trust: empty,
 * malformed, an error, partial (holes), naming unreachable nodes. At
 * bootstrap the error names every seed and the cause; after bootstrap a
 * bad answer leaves the old map in place (refresh_failures counts it) and
 * traffic goes on. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define KEY "foo" /* slot 12182 */

static const struct {
    const char *resp; /* the scenario's quoted bytes */
    const char *cause; /* a word the error must contain */
} bad[] = {
    {"*0\\r\\n", "empty slot table"},
    {"+OK\\r\\n", "not an array"},
    {"-ERR This instance has cluster support disabled\\r\\n", "cluster support disabled"},
    {"*1\\r\\n:5\\r\\n", "range 0"},
    {"*1\\r\\n*3\\r\\n:0\\r\\n:100\\r\\n:7\\r\\n", "range 0 node 0"},
    {"*1\\r\\n*3\\r\\n:0\\r\\n:16383\\r\\n*2\\r\\n$9\\r\\n127.0.0.1\\r\\n:0\\r\\n", "port"},
    {"*1\\r\\n*3\\r\\n:100\\r\\n:50\\r\\n*2\\r\\n$9\\r\\n127.0.0.1\\r\\n:7000\\r\\n", "not within"},
    {"*1\\r\\n*3\\r\\n:0\\r\\n:16384\\r\\n*2\\r\\n$9\\r\\n127.0.0.1\\r\\n:7000\\r\\n", "not within"},
    {"*2\\r\\n*3\\r\\n:0\\r\\n:100\\r\\n*2\\r\\n$9\\r\\n127.0.0.1\\r\\n:7000\\r\\n"
     "*3\\r\\n:50\\r\\n:200\\r\\n*2\\r\\n$9\\r\\n127.0.0.1\\r\\n:7001\\r\\n", "overlaps"},
};
#define NBAD ((int)(sizeof bad / sizeof bad[0]))

static void options(rcp_cluster_options *o, rcp_conn_options *no, const char *seeds)
{
    sim_cluster_options(o, no, seeds);
}

static rcp_cluster *open_ok(const char *seeds)
{
    rcp_cluster_options o;
    rcp_conn_options no;
    options(&o, &no, seeds);
    return sim_open(&o);
}

static void get_ok(rcp_cluster *cl, const char *key)
{
    rcp_reply *r = rcp_cluster_command(cl, "GET %s", key);
    ck_assert_msg(r->type == RCP_REPLY_STRING && strcmp(r->str, "ok") == 0, "GET %s: type %d err %d %s",
                  key, r->type, r->err, r->str ? r->str : "");
    rcp_reply_free(r);
}

/* Every seed answers garbage (or is not there): open fails and says, for
 * each seed, its address and why. */
START_TEST(bootstrap_bad_table)
{
    sim_node *n[2];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl = NULL;
    char seeds[128], err[2048] = "", a0[64], a1[64], dead[64];
    int rc;
    ck_assert_int_eq(sim_start(n, 2), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => send \"%s\"\n", sim_prelude, bad[_i].resp);
    sim_loadf(n[1], "%son CLUSTER SLOTS => send \"%s\"\n", sim_prelude, bad[(_i + 1) % NBAD].resp);
    snprintf(dead, sizeof dead, "127.0.0.1:%d", sim_dead_port());
    snprintf(seeds, sizeof seeds, "%s,%s,%s", sim_addr(n[0], a0, sizeof a0), dead,
             sim_addr(n[1], a1, sizeof a1));
    options(&o, &no, seeds);
    rc = rcp_cluster_open(&o, &cl, err, sizeof err);
    ck_assert_int_eq(rc, RCP_ERR_CONNECT);
    ck_assert_ptr_null(cl);
    ck_assert_msg(strstr(err, a0) && strstr(err, a1) && strstr(err, dead), "error names every seed: %s",
                  err);
    ck_assert_msg(strstr(err, bad[_i].cause) && strstr(err, bad[(_i + 1) % NBAD].cause),
                  "error names the causes (%s, %s): %s", bad[_i].cause, bad[(_i + 1) % NBAD].cause, err);
    /* A good seed after bad ones is enough. */
    sim_loadf(n[1], "on CLUSTER SLOTS => slots 0-16383=$P1\n");
    cl = NULL;
    ck_assert_int_eq(rcp_cluster_open(&o, &cl, err, sizeof err), RCP_OK);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

/* After a good bootstrap, every refresh gets a bad answer: the map stays
 * (same version), the failure is counted, requests still work. */
START_TEST(refresh_bad_table_keeps_map)
{
    sim_node *n[1];
    rcp_cluster *cl;
    rcp_cluster_stats st;
    rcp_reply *r;
    char a0[64];
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => send \"%s\"\non x1 CLUSTER SLOTS => slots 0-16383=$P0\n"
                    "expect GET " KEY "\nsend \"-MOVED garbage\\r\\n\"\n"
                    "on GET ** => send \"$2\\r\\nok\\r\\n\"\n",
              sim_prelude, bad[_i].resp);
    cl = open_ok(sim_addr(n[0], a0, sizeof a0));
    /* The garbage MOVED asks for a refresh; it gets the bad table. */
    r = rcp_cluster_command(cl, "GET %s", KEY);
    ck_assert_int_eq(r->err, RCP_ERR_SERVER);
    rcp_reply_free(r);
    ck_assert_uint_ge(sim_wait_stat(cl, offsetof(rcp_cluster_stats, refresh_failures), 1,
                                    rcptest_scale(3000)),
                      1);
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    ck_assert_uint_ge(sim_count(n[0], "CLUSTER SLOTS"), 2);
    ck_assert_uint_eq(st.map_version, 1);
    ck_assert_uint_eq(st.nodes, 1);
    get_ok(cl, KEY);
    get_ok(cl, "bar");
    rcp_cluster_close(cl);
    sim_free_all(n, 1);
}
END_TEST

/* A refresh answered with a table that covers only part of the slots
 * (e.g. from a node with a partial view): the slots it leaves out keep
 * their old owner, as the old map said (issue 5: "the old map stays"). */
START_TEST(refresh_partial_table_keeps_old_owner)
{
    sim_node *n[1];
    rcp_cluster *cl;
    sim_fut sf;
    char a0[64];
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-99=$P0\non x1 CLUSTER SLOTS => slots 0-16383=$P0\n"
                    "expect GET " KEY "\nsend \"-MOVED garbage\\r\\n\"\n"
                    "on GET ** => send \"$2\\r\\nok\\r\\n\"\n",
              sim_prelude);
    cl = open_ok(sim_addr(n[0], a0, sizeof a0));
    rcp_reply_free(rcp_cluster_command(cl, "GET %s", KEY));
    ck_assert_uint_ge(sim_wait_count(n[0], "CLUSTER SLOTS", 2, rcptest_scale(3000)), 2);
    rcptest_sleep_ms(50); /* the refresh publishes (or not) right after its answer */
    sim_fut_init(&sf, rcptest_scale(1000));
    ck_assert_int_eq(rcp_cluster_send(cl, &sf.f, "GET %s", KEY), RCP_OK);
    ck_assert_int_eq(sim_fut_wait(&sf, rcptest_scale(5000)), 0);
    ck_assert_msg(sf.type == RCP_REPLY_STRING && strcmp(sf.str, "ok") == 0,
                  "slot %u (covered by the old map, not by the partial table) lost: err %d %s",
                  rcp_keyslot(KEY, 3), sf.err, sf.str);
    rcp_cluster_close(cl);
    sim_fut_destroy(&sf);
    sim_free_all(n, 1);
}
END_TEST

/* Bootstrap from a table with holes: covered slots are served, a hole
 * gives RCP_ERR_CLUSTER_DOWN naming the slot (within the deadline). */
START_TEST(bootstrap_partial_table)
{
    sim_node *n[1];
    rcp_cluster *cl;
    sim_fut sf;
    char a0[64], slot[16];
    unsigned s = rcp_keyslot(KEY, 3);
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-%u=$P0\non GET ** => send \"$2\\r\\nok\\r\\n\"\n",
              sim_prelude, s - 1);
    cl = open_ok(sim_addr(n[0], a0, sizeof a0));
    get_ok(cl, "bar"); /* slot 5061 */
    sim_fut_init(&sf, rcptest_scale(300));
    ck_assert_int_eq(rcp_cluster_send(cl, &sf.f, "GET %s", KEY), RCP_OK);
    ck_assert_int_eq(sim_fut_wait(&sf, rcptest_scale(5000)), 0);
    snprintf(slot, sizeof slot, "%u", s);
    ck_assert_int_eq(sf.err, RCP_ERR_CLUSTER_DOWN);
    ck_assert_msg(strstr(sf.str, slot) != NULL, "message names the slot: %s", sf.str);
    ck_assert_uint_eq(sim_count(n[0], "GET " KEY), 0);
    rcp_cluster_close(cl);
    sim_fut_destroy(&sf);
    sim_free_all(n, 1);
}
END_TEST

/* The table names a master nobody listens on: its slots fail with an
 * error naming that node, within the deadline; the others are served. */
START_TEST(table_names_unreachable_node)
{
    sim_node *n[1];
    rcp_cluster *cl;
    sim_fut sf;
    char a0[64], dead[64];
    int dp = sim_dead_port();
    unsigned s = rcp_keyslot(KEY, 3);
    ck_assert_int_eq(sim_start(n, 1), 0);
    snprintf(dead, sizeof dead, "127.0.0.1:%d", dp);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-%u=$P0 %u-16383=%d\n"
                    "on GET ** => send \"$2\\r\\nok\\r\\n\"\n",
              sim_prelude, s - 1, s, dp);
    cl = open_ok(sim_addr(n[0], a0, sizeof a0));
    get_ok(cl, "bar");
    sim_fut_init(&sf, rcptest_scale(1000));
    ck_assert_int_eq(rcp_cluster_send(cl, &sf.f, "GET %s", KEY), RCP_OK);
    ck_assert_int_eq(sim_fut_wait(&sf, rcptest_scale(5000)), 0);
    ck_assert_int_eq(sf.type, RCP_REPLY_ERROR);
    ck_assert_msg(sf.err == RCP_ERR_NOT_SENT || sf.err == RCP_ERR_CONNECT || sf.err == RCP_ERR_TIMEOUT,
                  "err %d %s", sf.err, sf.str);
    ck_assert_msg(strstr(sf.str, dead) != NULL, "message names %s: %s", dead, sf.str);
    get_ok(cl, "bar");
    rcp_cluster_close(cl);
    sim_fut_destroy(&sf);
    sim_free_all(n, 1);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("slots");
    tcase_add_loop_test(tc, bootstrap_bad_table, 0, NBAD);
    tcase_add_loop_test(tc, refresh_bad_table_keeps_map, 0, NBAD);
    RCPTEST_ADD(tc, refresh_partial_table_keeps_old_owner, bootstrap_partial_table,
                table_names_unreachable_node);
    return sim_run("sim-slots", tc);
}
