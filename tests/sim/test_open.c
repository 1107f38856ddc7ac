/* test_open.c: rcp_cluster_open refuses bad options and seeds at once,
 * naming what is wrong; an open that fails against dead seeds names each
 * seed once with its real cause (no fake node needed: refused ports); and
 * max_request_bytes holds for transactions and batches too. */
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sim.h"

/* Opens with o and expects code, with every word of want in the message. */
static void refuse(const rcp_cluster_options *o, int code, const char *want1, const char *want2)
{
    rcp_cluster *cl = (rcp_cluster *)1;
    char err[1024] = "";
    int rv = rcp_cluster_open(o, &cl, err, sizeof err);
    ck_assert_msg(rv == code, "want %s, got %s: %s", rcp_err_name(code), rcp_err_name(rv), err);
    ck_assert_ptr_null(cl);
    ck_assert_msg(strstr(err, want1) != NULL, "\"%s\" not in: %s", want1, err);
    if (want2)
        ck_assert_msg(strstr(err, want2) != NULL, "\"%s\" not in: %s", want2, err);
}

START_TEST(out_of_range_options_refused)
{
    rcp_cluster_options o;
    rcp_conn_options no;
#define CASE(field, value, name)                                                                   \
    do {                                                                                           \
        sim_cluster_options(&o, &no, "127.0.0.1:1");                                               \
        field = value;                                                                             \
        refuse(&o, RCP_ERR_INVALID, name, "range");                                                \
    } while (0)
    CASE(no.max_inflight, 0, "max_inflight");
    CASE(no.max_batch_commands, 0, "max_batch_commands");
    CASE(no.max_batch_bytes, 0, "max_batch_bytes");
    CASE(no.connect_timeout_ms, 0, "connect_timeout_ms");
    CASE(o.refresh_interval_ms, 0, "refresh_interval_ms");
    CASE(o.max_redirects, -1, "max_redirects");
    CASE(o.blocking_pool, 0, "blocking_pool");
    CASE(o.blocking_pool, 65, "blocking_pool");
    CASE(no.spare_conns, -1, "spare_conns");
    CASE(no.spare_conns, 9, "spare_conns");
#undef CASE
    sim_cluster_options(&o, &no, "127.0.0.1:1");
    no.queue_policy = 7;
    refuse(&o, RCP_ERR_INVALID, "queue_policy", "RCP_QUEUE_FAIL");
    sim_cluster_options(&o, &no, "127.0.0.1:1");
    no.reconnect_min_ms = 500;
    no.reconnect_max_ms = 100;
    refuse(&o, RCP_ERR_INVALID, "reconnect_max_ms", "reconnect_min_ms");
    sim_cluster_options(&o, &no, "127.0.0.1:1");
    o.read_policy = 9;
    refuse(&o, RCP_ERR_INVALID, "read_policy", NULL);
    sim_cluster_options(&o, &no, NULL);
    refuse(&o, RCP_ERR_INVALID, "seeds", NULL);
    /* The single-node handle: the same check, with host and port. */
    {
        rcp_conn_options co;
        rcp_conn *c = (rcp_conn *)1;
        char err[300];
        rcp_conn_options_init(&co);
        co.max_inflight = 0;
        ck_assert_int_eq(rcp_conn_open(&co, &c, err, sizeof err), RCP_ERR_INVALID);
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(err, "max_inflight 0") && strstr(err, "range"), "%s", err);
        rcp_conn_options_init(&co);
        co.port = 70000;
        ck_assert_int_eq(rcp_conn_open(&co, &c, err, sizeof err), RCP_ERR_INVALID);
        ck_assert_msg(strstr(err, "port 70000"), "%s", err);
        rcp_conn_options_init(&co);
        co.host = "";
        ck_assert_int_eq(rcp_conn_open(&co, &c, err, sizeof err), RCP_ERR_INVALID);
        ck_assert_msg(strstr(err, "host"), "%s", err);
        rcp_conn_options_init(&co);
        co.spare_conns = 9;
        ck_assert_int_eq(rcp_conn_open(&co, &c, err, sizeof err), RCP_ERR_INVALID);
        ck_assert_msg(strstr(err, "spare_conns 9") && strstr(err, "0..8"), "%s", err);
    }
}
END_TEST

START_TEST(malformed_seeds_refused_by_name)
{
    rcp_cluster_options o;
    rcp_conn_options no;
    static const char *const bad[][2] = {
        {"[::1", "[::1"},          {"[::1]", "[::1]"},        {"::1]:7000", "brackets"},
        {"127.0.0.1", "host:port"}, {"127.0.0.1:", "host:port"}, {"127.0.0.1:0", "1..65535"},
        {"127.0.0.1:x", "1..65535"}, {"a:1,,b:2", "empty seed"}, {"a:1,", "empty seed"},
        {"", "empty"},             {"[a]b]:1", "bracket"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sim_cluster_options(&o, &no, bad[i][0]);
        refuse(&o, RCP_ERR_INVALID, bad[i][1], NULL);
    }
}
END_TEST

START_TEST(too_many_seeds_says_so)
{
    rcp_cluster_options o;
    rcp_conn_options no;
    char seeds[65 * 20] = "";
    size_t used = 0;
    for (int i = 0; i < 65; i++)
        used += (size_t)snprintf(seeds + used, sizeof seeds - used, "%s127.0.0.1:%d", i ? "," : "",
                                 1000 + i);
    sim_cluster_options(&o, &no, seeds);
    refuse(&o, RCP_ERR_INVALID, "too many seeds", "at most 64");
}
END_TEST

/* Ports nobody listens on: bound, then closed. */
static int dead_port(void)
{
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

START_TEST(every_dead_seed_named_once_with_its_cause)
{
    enum { N = 60 };
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl = NULL;
    char seeds[N * 24] = "", addr[32], *err = malloc(65536), small[1024];
    int ports[N];
    size_t used = 0;
    ck_assert_ptr_nonnull(err);
    for (int i = 0; i < N; i++) {
        ports[i] = dead_port();
        used += (size_t)snprintf(seeds + used, sizeof seeds - used, "%s127.0.0.1:%d", i ? "," : "",
                                 ports[i]);
    }
    sim_cluster_options(&o, &no, seeds);
    ck_assert_int_eq(rcp_cluster_open(&o, &cl, err, 65536), RCP_ERR_CONNECT);
    ck_assert_ptr_null(cl);
    for (int i = 0; i < N; i++) {
        char *at, *again;
        snprintf(addr, sizeof addr, "127.0.0.1:%d: ", ports[i]);
        at = strstr(err, addr);
        ck_assert_msg(at != NULL, "seed %s not named in: %.300s...", addr, err);
        again = strstr(at + 1, addr);
        ck_assert_msg(again == NULL, "seed %s named twice", addr);
        ck_assert_msg(strncmp(at + strlen(addr), "connect failed", 14) == 0 &&
                          strstr(at, "refused") != NULL,
                      "seed %s: not its real cause: %.120s", addr, at);
    }
    ck_assert_ptr_null(strstr(err, "not listed"));
    /* A small buffer: as many as fit, and a word that the list was cut. */
    ck_assert_int_eq(rcp_cluster_open(&o, &cl, small, sizeof small), RCP_ERR_CONNECT);
    ck_assert_msg(strstr(small, "more not listed") != NULL, "no word of the cut: %s", small);
    ck_assert_msg(strstr(small, "connect failed") != NULL, "%s", small);
    free(err);
}
END_TEST

/* max_request_bytes holds for every way in: a command of a transaction
 * or of a batch larger than it is refused when it is added. A NULL string
 * (or NULL pointer with a length) given to a printf-style call is the
 * caller's error, named by position, through every entry. */
START_TEST(request_cap_and_null_arguments)
{
    sim_node *n[1];
    rcp_cluster_options o;
    rcp_conn_options no;
    rcp_cluster *cl;
    rcp_txn *t;
    rcp_batch *b;
    rcp_reply *r;
    char a0[64];
    size_t big = 2u << 20;
    char *v = malloc(big);
    ck_assert_ptr_nonnull(v);
    memset(v, 'x', big);
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n", sim_prelude);
    sim_cluster_options(&o, &no, sim_addr(n[0], a0, sizeof a0));
    no.max_request_bytes = 1u << 20;
    cl = sim_open(&o);
    t = rcp_txn_new(cl);
    ck_assert_int_eq(rcp_txn_add(t, "SET k %b", v, big), RCP_ERR_TOO_LARGE);
    ck_assert_int_eq(rcp_txn_add(t, "SET k %b", v, (size_t)100), RCP_OK);
    rcp_txn_free(t);
    b = rcp_batch_new(cl);
    ck_assert_int_eq(rcp_batch_add(b, "SET k %b", v, big), RCP_ERR_TOO_LARGE);
    ck_assert_uint_eq(rcp_batch_count(b), 0);
    rcp_batch_free(b);
    r = rcp_cluster_command(cl, "SET k %b", v, big);
    ck_assert_int_eq(r->err, RCP_ERR_TOO_LARGE);
    rcp_reply_free(r);
    /* NULL arguments to the printf-style calls: a clear error naming the
     * argument, through every entry; nothing sent, nothing crashes. */
    r = rcp_cluster_command(cl, "GET %s", (const char *)NULL);
    ck_assert_int_eq(r->err, RCP_ERR_INVALID);
    ck_assert_msg(strstr(r->str, "argument 1") != NULL, "%s", r->str);
    rcp_reply_free(r);
    r = rcp_cluster_command(cl, "SET k %b", (const void *)NULL, (size_t)5);
    ck_assert_int_eq(r->err, RCP_ERR_INVALID);
    ck_assert_msg(strstr(r->str, "argument 2") != NULL, "%s", r->str);
    rcp_reply_free(r);
    {
        sim_fut f;
        sim_fut_init(&f, 1000);
        ck_assert_int_eq(rcp_cluster_send(cl, &f.f, "SET k %b", (const void *)NULL, (size_t)5),
                         RCP_ERR_INVALID);
        ck_assert_int_eq(f.calls, 0);
        sim_fut_destroy(&f);
    }
    t = rcp_txn_new(cl);
    ck_assert_int_eq(rcp_txn_add(t, "GET %s", (const char *)NULL), RCP_ERR_INVALID);
    rcp_txn_free(t);
    {
        rcp_conn_options co;
        rcp_conn *c = NULL;
        char err[256];
        rcp_conn_options_init(&co);
        co.port = sim_port(n[0]);
        ck_assert_int_eq(rcp_conn_open(&co, &c, err, sizeof err), RCP_OK);
        r = rcp_conn_command(c, "GET %s", (const char *)NULL);
        ck_assert_int_eq(r->err, RCP_ERR_INVALID);
        ck_assert_msg(strstr(r->str, "argument 1") != NULL, "%s", r->str);
        rcp_reply_free(r);
        rcp_conn_close(c);
    }
    ck_assert_uint_eq(sim_count(n[0], "SET **"), 0);
    ck_assert_uint_eq(sim_count(n[0], "GET **"), 0);
    ck_assert_uint_eq(sim_count(n[0], "MULTI"), 0);
    rcp_cluster_close(cl);
    sim_free_all(n, 1);
    free(v);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("open");
    RCPTEST_ADD(tc, out_of_range_options_refused, malformed_seeds_refused_by_name,
                too_many_seeds_says_so, every_dead_seed_named_once_with_its_cause,
                request_cap_and_null_arguments);
    return sim_run("sim-open", tc);
}
