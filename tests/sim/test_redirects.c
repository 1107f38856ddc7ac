/* test_redirects.c: MOVED and ASK from fake nodes: to a node already in the
 * map, to one not yet known, to a hostname, to IPv6 [::1]; a redirect loop
 * (max_redirects honoured, RCP_ERR_REDIRECT_LIMIT); MOVED/ASK whose payload
 * is truncated or garbage (handed to the caller as is, a refresh asked). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define KEY "foo"

static char seeds[64];

/* CLUSTER SLOTS words: every slot on port a, except slot s on port b. */
static void map_except(char *out, size_t len, unsigned s, int a, int b)
{
    int o = 0;
    if (s > 0)
        o += snprintf(out + o, len - (size_t)o, "0-%u=%d ", s - 1, a);
    o += snprintf(out + o, len - (size_t)o, "%u-%u=%d ", s, s, b);
    if (s < 16383)
        snprintf(out + o, len - (size_t)o, "%u-16383=%d", s + 1, a);
}

static rcp_cluster *open_on(sim_node *seed, int max_redirects)
{
    rcp_cluster_options o;
    rcp_conn_options no;
    sim_cluster_options(&o, &no, sim_addr(seed, seeds, sizeof seeds));
    if (max_redirects >= 0)
        o.max_redirects = max_redirects;
    return sim_open(&o);
}

static void script_ok(sim_node *n)
{
    sim_assert_done(n, rcptest_scale(5000));
}

static int has_node(rcp_cluster *cl, const char *addr)
{
    rcp_cluster_node_info info[16];
    size_t k = rcp_cluster_get_nodes(cl, info, 16);
    for (size_t i = 0; i < k && i < 16; i++)
        if (strcmp(info[i].addr, addr) == 0)
            return 1;
    return 0;
}

static void expect_str(rcp_reply *r, const char *want)
{
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == RCP_REPLY_STRING && strcmp(r->str, want) == 0,
                  "want \"%s\", got type %d err %d \"%s\"", want, r->type, r->err,
                  r->str ? r->str : "");
    rcp_reply_free(r);
}

/* MOVED to the other node of the map (then: the slot's requests go there
 * at once) or to a node not yet known (unknown = 1: the old map has only
 * node 0). The refresh that MOVED asks for sees the new owner. */
static void moved_case(int unknown)
{
    sim_node *n[3];
    rcp_cluster *cl;
    rcp_cluster_stats st;
    unsigned s = rcp_keyslot(KEY, 3);
    char newmap[200], oldmap[200], addr[64];
    int to = unknown ? 2 : 1;
    ck_assert_int_eq(sim_start(n, 3), 0);
    map_except(newmap, sizeof newmap, s, sim_port(n[0]), sim_port(n[to]));
    /* Known: node 1 serves every slot but ours, which is node 0's. */
    map_except(oldmap, sizeof oldmap, s, sim_port(n[1]), sim_port(n[0]));
    for (int i = 0; i < 3; i++) {
        sim_loadf(n[i], "%son CLUSTER SLOTS => slots %s\n", sim_prelude, newmap);
    }
    if (unknown)
        sim_loadf(n[0], "on x1 CLUSTER SLOTS => slots 0-16383=$P0\n");
    else
        sim_loadf(n[0], "on x1 CLUSTER SLOTS => slots %s\n", oldmap);
    sim_loadf(n[0], "expect GET " KEY "\nsend \"-MOVED %u 127.0.0.1:$P%d\\r\\n\"\n", s, to);
    sim_loadf(n[to], "expect GET " KEY "\nsend \"$3\\r\\nbar\\r\\n\"\n"
                     "expect GET " KEY "\nsend \"$3\\r\\nbaz\\r\\n\"\n");
    cl = open_on(n[0], -1);
    ck_assert(!has_node(cl, sim_addr(n[2], addr, sizeof addr)));
    expect_str(rcp_cluster_command(cl, "GET %s", KEY), "bar");
    expect_str(rcp_cluster_command(cl, "GET %s", KEY), "baz");
    script_ok(n[0]);
    script_ok(n[to]);
    ck_assert_uint_eq(sim_count(n[0], "GET " KEY), 1);
    ck_assert(has_node(cl, sim_addr(n[to], addr, sizeof addr)));
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    ck_assert_uint_eq(st.moved, 1);
    ck_assert_uint_eq(st.ask, 0);
    /* The MOVED asked for a refresh: a second CLUSTER SLOTS somewhere. */
    {
        uint64_t until = rcptest_now_ns() + (uint64_t)rcptest_scale(3000) * 1000000ull;
        size_t c = 0;
        while (rcptest_now_ns() < until) {
            c = sim_count(n[0], "CLUSTER SLOTS") + sim_count(n[to], "CLUSTER SLOTS");
            if (c >= 2)
                break;
            rcptest_sleep_ms(5);
        }
        ck_assert_uint_ge(c, 2);
    }
    rcp_cluster_close(cl);
    sim_free_all(n, 3);
}

START_TEST(moved_to_known_node)
{
    moved_case(0);
}
END_TEST

START_TEST(moved_to_unknown_node)
{
    moved_case(1);
}
END_TEST

/* ASK to a node not in the map: ASKING then the command on that node's
 * connection, and the next request for the slot goes to the owner again. */
START_TEST(ask_to_unknown_node)
{
    sim_node *n[2];
    rcp_cluster *cl;
    rcp_cluster_stats st;
    unsigned s = rcp_keyslot(KEY, 3);
    sim_cmd a, b;
    ck_assert_int_eq(sim_start(n, 2), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n"
                    "expect GET " KEY "\nsend \"-ASK %u 127.0.0.1:$P1\\r\\n\"\n"
                    "expect GET " KEY "\nsend \"$5\\r\\nowner\\r\\n\"\n",
              sim_prelude, s);
    sim_loadf(n[1], "on PING => send \"+PONG\\r\\n\"\n"
                    "expect ASKING\nsend \"+OK\\r\\n\"\n"
                    "expect GET " KEY "\nsend \"$8\\r\\nimporter\\r\\n\"\n");
    cl = open_on(n[0], -1);
    expect_str(rcp_cluster_command(cl, "GET %s", KEY), "importer");
    expect_str(rcp_cluster_command(cl, "GET %s", KEY), "owner");
    script_ok(n[0]);
    script_ok(n[1]);
    /* Adjacent, on one connection. */
    ck_assert_uint_eq(sim_log_len(n[1]), 2);
    ck_assert_int_eq(sim_log_at(n[1], 0, &a), 0);
    ck_assert_int_eq(sim_log_at(n[1], 1, &b), 0);
    ck_assert_str_eq(a.line, "ASKING");
    ck_assert_str_eq(b.line, "GET " KEY);
    ck_assert_int_eq(a.conn, b.conn);
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    ck_assert_uint_eq(st.ask, 1);
    ck_assert_uint_eq(st.moved, 0);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}
END_TEST

/* MOVED naming the target some other way than the map's IP: a hostname,
 * a bracketed IPv6 address, an unbracketed one (as Redis writes it). The
 * target listens on bind_host. */
static void moved_to(const char *bind_host, const char *host_fmt)
{
    sim_node *n[2];
    rcp_cluster *cl;
    unsigned s = rcp_keyslot(KEY, 3);
    char target[80], addr[80];
    int ports[2];
    n[0] = sim_new(NULL);
    n[1] = sim_new(bind_host);
    ck_assert_ptr_nonnull(n[0]);
    ck_assert_msg(n[1] != NULL, "cannot listen on %s", bind_host);
    ports[0] = sim_port(n[0]);
    ports[1] = sim_port(n[1]);
    sim_set_ports(n[0], ports, 2);
    sim_set_ports(n[1], ports, 2);
    snprintf(target, sizeof target, host_fmt, ports[1]);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n"
                    "expect GET " KEY "\nsend \"-MOVED %u %s\\r\\n\"\n",
              sim_prelude, s, target);
    sim_loadf(n[1], "%sexpect GET " KEY "\nsend \"$2\\r\\nv6\\r\\n\"\n", sim_prelude);
    cl = open_on(n[0], -1);
    expect_str(rcp_cluster_command(cl, "GET %s", KEY), "v6");
    script_ok(n[0]);
    script_ok(n[1]);
    /* The node is registered under the name the redirect gave. */
    if (strchr(bind_host, ':'))
        snprintf(addr, sizeof addr, "[%s]:%d", bind_host, ports[1]);
    else
        snprintf(addr, sizeof addr, "%s", target);
    ck_assert_msg(has_node(cl, addr), "no node %s", addr);
    rcp_cluster_close(cl);
    sim_free_all(n, 2);
}

START_TEST(moved_to_hostname)
{
    moved_to("127.0.0.1", "localhost:%d");
}
END_TEST

START_TEST(moved_to_ipv6_bracketed)
{
    moved_to("::1", "[::1]:%d");
}
END_TEST

START_TEST(moved_to_ipv6_plain)
{
    moved_to("::1", "::1:%d");
}
END_TEST

/* Two nodes sending each other's address back: the request gives up after
 * max_redirects with a clear error, having been sent max_redirects + 1
 * times, on both paths. */
START_TEST(redirect_loop)
{
    sim_node *n[2];
    rcp_cluster *cl;
    rcp_reply *r;
    sim_fut sf;
    unsigned s = rcp_keyslot(KEY, 3);
    const int limit = 3;
    ck_assert_int_eq(sim_start(n, 2), 0);
    for (int i = 0; i < 2; i++)
        sim_loadf(n[i], "%son CLUSTER SLOTS => slots 0-16383=$P0\n"
                        "on GET ** => send \"-%s %u 127.0.0.1:$P%d\\r\\n\"\n",
                  sim_prelude, _i ? "ASK" : "MOVED", s, 1 - i);
    cl = open_on(n[0], limit);
    r = rcp_cluster_command(cl, "GET %s", KEY);
    ck_assert_int_eq(r->type, RCP_REPLY_ERROR);
    ck_assert_int_eq(r->err, RCP_ERR_REDIRECT_LIMIT);
    ck_assert_msg(strstr(r->str, "redirect") != NULL, "message: %s", r->str);
    rcp_reply_free(r);
    ck_assert_uint_eq(sim_count(n[0], "GET " KEY) + sim_count(n[1], "GET " KEY), limit + 1);

    sim_fut_init(&sf, 0);
    ck_assert_int_eq(rcp_cluster_send(cl, &sf.f, "GET %s", KEY), RCP_OK);
    ck_assert_int_eq(sim_fut_wait(&sf, rcptest_scale(5000)), 0);
    ck_assert_int_eq(sf.err, RCP_ERR_REDIRECT_LIMIT);
    ck_assert_uint_eq(sim_count(n[0], "GET " KEY) + sim_count(n[1], "GET " KEY), 2 * (limit + 1));
    rcp_cluster_close(cl);
    ck_assert_int_eq(sf.calls, 1);
    sim_fut_destroy(&sf);
    sim_free_all(n, 2);
}
END_TEST

/* MOVED/ASK that cannot be followed: the caller gets the server's text as
 * is (nothing guessed, nothing followed) and the map is asked for again. */
START_TEST(moved_garbage)
{
    static const char *bad[] = {
        "MOVED", "MOVED ", "MOVED 12", "MOVED 12 ", "MOVED 12 127.0.0.1", "MOVED 12 127.0.0.1:",
        "MOVED x 127.0.0.1:7000", "MOVED 16384 127.0.0.1:7000", "MOVED 12 127.0.0.1:99999",
        "MOVED 12 127.0.0.1:70x0", "MOVED -1 127.0.0.1:7000", "ASK", "ASK 1 nocolon",
        "MOVED 123456789012345678901234567890 h:1",
    };
    sim_node *n[1];
    rcp_cluster *cl;
    rcp_cluster_stats st;
    size_t nb = sizeof bad / sizeof bad[0];
    ck_assert_int_eq(sim_start(n, 1), 0);
    sim_loadf(n[0], "%son CLUSTER SLOTS => slots 0-16383=$P0\n", sim_prelude);
    for (size_t i = 0; i < nb; i++)
        sim_loadf(n[0], "expect GET " KEY "\nsend \"-%s\\r\\n\"\n", bad[i]);
    cl = open_on(n[0], -1);
    for (size_t i = 0; i < nb; i++) {
        size_t before = sim_count(n[0], "CLUSTER SLOTS");
        rcp_reply *r = rcp_cluster_command(cl, "GET %s", KEY);
        ck_assert_int_eq(r->type, RCP_REPLY_ERROR);
        ck_assert_int_eq(r->err, RCP_ERR_SERVER);
        ck_assert_str_eq(r->str, bad[i]);
        rcp_reply_free(r);
        ck_assert_msg(sim_wait_count(n[0], "CLUSTER SLOTS", before + 1,
                                     rcptest_scale(3000)) > before,
                      "no refresh after -%s", bad[i]);
    }
    script_ok(n[0]);
    ck_assert_uint_eq(sim_count(n[0], "GET " KEY), nb);
    ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
    ck_assert_uint_eq(st.moved + st.ask, 0);
    ck_assert_uint_eq(st.nodes, 1);
    rcp_cluster_close(cl);
    sim_free_all(n, 1);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("redirects");
    RCPTEST_ADD(tc, moved_to_known_node, moved_to_unknown_node, ask_to_unknown_node,
                moved_to_hostname, moved_to_ipv6_bracketed, moved_to_ipv6_plain);
    tcase_add_loop_test(tc, redirect_loop, 0, 2);
    RCPTEST_ADD(tc, moved_garbage);
    return sim_run("sim-redirects", tc);
}
