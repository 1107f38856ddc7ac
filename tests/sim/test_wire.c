/* test_wire.c: exact bytes on the wire, read from the fake nodes' logs.
 * - ASK: ASKING and its command are adjacent on one connection, with 32
 *   threads being redirected to the same node at once.
 * - The handshake: AUTH, CLIENT SETNAME, then READONLY only on connections
 *   used for replica reads; the connection that carries a node's master
 *   traffic never sends READONLY. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define THREADS 32
#define PER_THREAD 20

typedef struct worker {
    pthread_t th;
    rcp_cluster *cl;
    int id, ok, bad;
    char first_bad[200];
} worker;

static void *ask_worker(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        char key[32];
        rcp_reply *r;
        snprintf(key, sizeof key, "{t}%d.%d", w->id, i);
        r = rcp_cluster_command(w->cl, "GET %s", key);
        if (r->type == RCP_REPLY_STRING && strcmp(r->str, "v") == 0) {
            w->ok++;
        } else if (!w->bad++) {
            snprintf(w->first_bad, sizeof w->first_bad, "type %d err %d %s", r->type, r->err,
                     r->str ? r->str : "");
        }
        rcp_reply_free(r);
    }
    return NULL;
}

START_TEST(asking_adjacent_under_threads)
{
    sim_node *n[2];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    rcp_cluster_stats st;
    worker w[THREADS];
    char a0[64];
    unsigned s = rcp_keyslot("{t}", 3);
    size_t len, asks = 0, gets = 0;
    int conns;
    int last_asking[64];

    ck_assert_int_eq(sim_start(n, 2), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\non GET ** => send \"-ASK %u 127.0.0.1:$P1\\r\\n\"\n",
              sim_prelude, s);
    sim_loadf(n[1], "%son GET ** => send \"$1\\r\\nv\\r\\n\"\n", sim_prelude);
    sim_cluster_options(&o, &no, sim_addr(n[0], a0, sizeof a0));
    no.request_timeout_ms = rcptest_scale(10000);
    cl = sim_open(&o);
    for (int i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].cl = cl;
        w[i].id = i;
        ck_assert_int_eq(pthread_create(&w[i].th, NULL, ask_worker, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(w[i].th, NULL);
        ck_assert_msg(w[i].bad == 0, "thread %d: %d bad replies, first: %s", i, w[i].bad, w[i].first_bad);
        ck_assert_int_eq(w[i].ok, PER_THREAD);
    }
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    ck_assert_uint_eq(st.ask, THREADS * PER_THREAD);
    rcp_cluster_close(cl);

    /* Per connection: every GET right after an ASKING, every ASKING right
     * before a GET. */
    conns = sim_conns(n[1]);
    ck_assert_int_le(conns, 64);
    for (int c = 0; c < 64; c++)
        last_asking[c] = 0;
    len = sim_log_len(n[1]);
    for (size_t i = 0; i < len; i++) {
        sim_cmd e;
        ck_assert_int_eq(sim_log_at(n[1], i, &e), 0);
        if (strcmp(e.line, "ASKING") == 0) {
            ck_assert_msg(!last_asking[e.conn], "entry %zu: two ASKING in a row on connection %d", i, e.conn);
            last_asking[e.conn] = 1;
            asks++;
        } else if (strncmp(e.line, "GET ", 4) == 0) {
            ck_assert_msg(last_asking[e.conn], "entry %zu: %s without ASKING before it on connection %d", i,
                          e.line, e.conn);
            last_asking[e.conn] = 0;
            gets++;
        } else {
            ck_assert_msg(!last_asking[e.conn], "entry %zu: %s between ASKING and its command", i, e.line);
        }
    }
    ck_assert_uint_eq(gets, THREADS * PER_THREAD);
    ck_assert_uint_eq(asks, gets);
    sim_free_all(n, 2);
}
END_TEST

/* One connection's commands from a node's log, joined by '|'. */
static void conn_lines(sim_node *n, int conn, char *out, size_t len)
{
    size_t o = 0, k = sim_log_len(n);
    out[0] = '\0';
    for (size_t i = 0; i < k && o < len; i++) {
        sim_cmd e;
        if (sim_log_at(n, i, &e) == 0 && e.conn == conn)
            o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "|" : "", e.line);
    }
}

/* The connection of node n whose log contains line; -1 if none. */
static int conn_with(sim_node *n, const char *line)
{
    size_t k = sim_log_len(n);
    for (size_t i = 0; i < k; i++) {
        sim_cmd e;
        if (sim_log_at(n, i, &e) == 0 && strcmp(e.line, line) == 0)
            return e.conn;
    }
    return -1;
}

/* Two shards, each node master of one and replica of the other, read
 * policy PREFER_REPLICA, AUTH and CLIENT SETNAME configured. On each node
 * the connection carrying replica reads starts AUTH, SETNAME, READONLY;
 * the one carrying master traffic (a write, and a read with MASTER_ONLY)
 * starts AUTH, SETNAME and never says READONLY. */
START_TEST(readonly_only_on_replica_connections)
{
    sim_node *n[2];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    char a0[64], lines[4096];
    /* bar: slot 5061 (shard 0: master 0, replica 1); foo: 12182 (shard 1:
     * master 1, replica 0). */
    static const char *const keys[2] = {"foo", "bar"}; /* key whose replica is node i */

    ck_assert_int_eq(sim_start(n, 2), 0);
    for (int i = 0; i < 2; i++)
        sim_loadf(n[i], "%son AUTH simuser s3cret => send \"+OK\\r\\n\"\n"
                        "on CLIENT SETNAME simclient => send \"+OK\\r\\n\"\n"
                        "on CLUSTER SLOTS => slots 0-8191=$P0,$P1 8192-16383=$P1,$P0\n"
                        "on GET ** => send \"$1\\r\\nv\\r\\n\"\non SET ** => send \"+OK\\r\\n\"\n",
                  sim_prelude);
    sim_cluster_options(&o, &no, sim_addr(n[0], a0, sizeof a0));
    no.username = "simuser";
    no.password = "s3cret";
    no.client_name = "simclient";
    o.read_policy = RCP_READ_PREFER_REPLICA;
    cl = sim_open(&o);
    /* Replica connections are made when first needed and reads go to the
     * master until one is up: read until a replica answered. */
    for (int i = 0; i < 2; i++) {
        char want[64];
        uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(3000) * 1000000ull;
        snprintf(want, sizeof want, "GET %s", keys[i]);
        while (sim_count(n[i], want) == 0 && rcptest_now_ns() < until) {
            rcp_reply *r = rcp_cluster_command(cl, "GET %s", keys[i]);
            ck_assert_int_eq(r->type, RCP_REPLY_STRING);
            rcp_reply_free(r);
            rcptest_sleep_ms(2);
        }
        ck_assert_msg(sim_count(n[i], want) > 0, "no read reached the replica (node %d)", i);
        rcp_reply_free(rcp_cluster_command(cl, "SET %s x", keys[1 - i]));
        {
            const char *argv[2] = {"GET", keys[1 - i]};
            sim_fut sf;
            sim_fut_init(&sf, 0);
            ck_assert_int_eq(rcp_cluster_send_argv_policy(cl, &sf.f, RCP_READ_MASTER_ONLY, 2, argv, NULL),
                             RCP_OK);
            ck_assert_int_eq(sim_fut_wait(&sf, rcptest_scale(5000)), 0);
            ck_assert_int_eq(sf.type, RCP_REPLY_STRING);
            sim_fut_destroy(&sf);
        }
    }
    rcp_cluster_close(cl);

    for (int i = 0; i < 2; i++) {
        char line[64];
        int rc, mc, mr;
        snprintf(line, sizeof line, "GET %s", keys[i]);
        rc = conn_with(n[i], line);
        snprintf(line, sizeof line, "SET %s x", keys[1 - i]);
        mc = conn_with(n[i], line);
        snprintf(line, sizeof line, "GET %s", keys[1 - i]);
        mr = conn_with(n[i], line);
        ck_assert_int_ge(rc, 0);
        ck_assert_int_ge(mc, 0);
        ck_assert_msg(rc != mc, "node %d: replica reads and master writes share connection %d", i, rc);
        ck_assert_msg(mr == mc, "node %d: master-only read on connection %d, writes on %d", i, mr, mc);
        conn_lines(n[i], rc, lines, sizeof lines);
        ck_assert_msg(strncmp(lines, "AUTH simuser s3cret|CLIENT SETNAME simclient|READONLY|", 54) == 0,
                      "node %d replica connection: %s", i, lines);
        conn_lines(n[i], mc, lines, sizeof lines);
        ck_assert_msg(strncmp(lines, "AUTH simuser s3cret|CLIENT SETNAME simclient|", 45) == 0,
                      "node %d master connection: %s", i, lines);
        ck_assert_msg(strstr(lines, "READONLY") == NULL, "node %d master connection: %s", i, lines);
    }
    /* No connection anywhere sends READONLY twice or after its first
     * command. */
    for (int i = 0; i < 2; i++) {
        for (int c = 0; c < sim_conns(n[i]); c++) {
            char *ro;
            conn_lines(n[i], c, lines, sizeof lines);
            ro = strstr(lines, "READONLY");
            if (ro)
                ck_assert_msg(strstr(ro + 1, "READONLY") == NULL && ro - lines == 45,
                              "node %d connection %d: %s", i, c, lines);
        }
    }
    sim_free_all(n, 2);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("wire");
    RCPTEST_ADD(tc, asking_adjacent_under_threads, readonly_only_on_replica_connections);
    return sim_run("sim-wire", tc);
}
