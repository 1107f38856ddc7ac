/* test_cork.c: adaptive corking (rcp_conn_options.cork) on one pipelined
 * connection, against a fake node that decides when replies go out.
 * With cork on, requests sent while a write is in flight and unanswered
 * wait for the first byte of its replies, then go out together; a full
 * flush (max_batch_commands) does not wait; a node that never answers
 * fails the held requests as never sent. With cork off, they are written
 * at once (the node reads them before it answers anything). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static rcp_conn *open_conn(sim_node *n, int cork, unsigned max_batch, int io_timeout_ms)
{
    rcp_conn_options o;
    rcp_conn *c = NULL;
    char err[512] = "";
    rcp_conn_options_init(&o);
    o.port = sim_port(n);
    o.connect_timeout_ms = rcptest_scale(1000);
    o.request_timeout_ms = rcptest_scale(5000);
    o.io_timeout_ms = io_timeout_ms;
    o.cork = cork;
    if (max_batch)
        o.max_batch_commands = max_batch;
    ck_assert_msg(rcp_conn_open(&o, &c, err, sizeof err) == RCP_OK, "open: %s", err);
    return c;
}

static void send_get(rcp_conn *c, sim_fut *sf, const char *key)
{
    sim_fut_init(sf, 0);
    ck_assert_int_eq(rcp_conn_send(c, &sf->f, "GET %s", key), RCP_OK);
}

static void want(sim_fut *sf, int type, int err, const char *s)
{
    ck_assert_msg(sim_fut_wait(sf, rcptest_scale(10000)) == 0, "a future was never resolved");
    ck_assert_msg(sf->type == type && sf->err == err && (!s || strcmp(sf->str, s) == 0),
                  "want type %d err %d \"%s\", got type %d err %d \"%s\"", type, err, s ? s : "",
                  sf->type, sf->err, sf->str);
    ck_assert_int_eq(sf->calls, 1);
}

/* The time the node read the first command matching `line` exactly. */
static uint64_t read_at(sim_node *n, const char *line)
{
    size_t i, len = sim_log_len(n);
    sim_cmd cmd;
    for (i = 0; i < len; i++)
        if (sim_log_at(n, i, &cmd) == 0 && strcmp(cmd.line, line) == 0)
            return cmd.t_ns;
    ck_abort_msg("the node never read %s", line);
    return 0;
}

/* The node holds a's reply for 500 ms. b and c, sent from this thread
 * meanwhile, reach it only after that: they waited for the first reply
 * byte instead of waking the loop; all three get their own replies. */
START_TEST(held_until_first_reply_byte)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a, b, cc;
    rcp_conn_stats st;
    uint64_t ta, tb, tc;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "expect GET a\nstall 500\nsend \"$1\\r\\na\\r\\n\"\n"
                 "expect GET b\nsend \"$1\\r\\nb\\r\\n\"\nexpect GET c\nsend \"$1\\r\\nc\\r\\n\"\n");
    c = open_conn(n, 1, 0, 0);
    send_get(c, &a, "a");
    ck_assert_uint_eq(sim_wait_count(n, "GET a", 1, rcptest_scale(5000)), 1);
    /* The node has a; the writer records the write just after the kernel
     * took it, a moment nothing public shows. b sent inside that moment
     * would find no write in flight and go at once, so wait it out: 50 ms
     * is long for it and short against the node's 500 ms stall. */
    rcptest_sleep_ms(50);
    send_get(c, &b, "b");
    send_get(c, &cc, "c");
    want(&a, RCP_REPLY_STRING, RCP_OK, "a");
    want(&b, RCP_REPLY_STRING, RCP_OK, "b");
    want(&cc, RCP_REPLY_STRING, RCP_OK, "c");
    sim_assert_done(n, rcptest_scale(5000));
    ta = read_at(n, "GET a");
    tb = read_at(n, "GET b");
    tc = read_at(n, "GET c");
    /* a lower bound only: written after a's reply went out */
    ck_assert_msg(tb >= ta + 500000000ull && tc >= ta + 500000000ull,
                  "b and c reached the node %.1f and %.1f ms after a, before its reply (500 ms)",
                  (double)(tb - ta) / 1e6, (double)(tc - ta) / 1e6);
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    ck_assert_uint_eq(st.corked, 2);
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_fut_destroy(&cc);
    sim_free(n);
}
END_TEST

/* The node answers nothing until it has read a, b and c: with cork off
 * (the default) b and c are written while a is unanswered; with cork on
 * and max_batch_commands 2, c fills the flush and is not held. */
START_TEST(written_at_once)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a, b, cc;
    rcp_conn_stats st;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "expect GET a\nexpect GET b\nexpect GET c\n"
                 "send \"$1\\r\\na\\r\\n$1\\r\\nb\\r\\n$1\\r\\nc\\r\\n\"\n");
    c = open_conn(n, _i, _i ? 2 : 0, 0);
    send_get(c, &a, "a");
    ck_assert_uint_eq(sim_wait_count(n, "GET a", 1, rcptest_scale(5000)), 1);
    /* As in held_until_first_reply_byte: let the writer record a's write
     * (the node answers nothing before c, so there is no hurry). */
    rcptest_sleep_ms(50);
    send_get(c, &b, "b");
    send_get(c, &cc, "c");
    want(&a, RCP_REPLY_STRING, RCP_OK, "a");
    want(&b, RCP_REPLY_STRING, RCP_OK, "b");
    want(&cc, RCP_REPLY_STRING, RCP_OK, "c");
    sim_assert_done(n, rcptest_scale(5000));
    ck_assert_int_eq(rcp_conn_get_stats(c, &st), RCP_OK);
    ck_assert_uint_eq(st.corked, _i ? 1 : 0);
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_fut_destroy(&cc);
    sim_free(n);
}
END_TEST

/* a is never answered: b, held behind it, is never written. The I/O
 * timeout drops the connection: a may have run (RCP_ERR_IO), b is
 * RCP_ERR_NOT_SENT, and the node never saw it. */
START_TEST(never_answered)
{
    sim_node *n = sim_new(NULL);
    rcp_conn *c;
    sim_fut a, b;
    ck_assert_ptr_nonnull(n);
    sim_loadf(n, "on GET a => hang\n");
    c = open_conn(n, 1, 0, rcptest_scale(400));
    send_get(c, &a, "a");
    ck_assert_uint_eq(sim_wait_count(n, "GET a", 1, rcptest_scale(5000)), 1);
    rcptest_sleep_ms(50); /* the writer records a's write (held_until_first_reply_byte) */
    send_get(c, &b, "b");
    want(&a, RCP_REPLY_ERROR, RCP_ERR_IO, NULL);
    want(&b, RCP_REPLY_ERROR, RCP_ERR_NOT_SENT, NULL);
    ck_assert_uint_eq(sim_count(n, "GET b"), 0);
    rcp_conn_close(c);
    sim_fut_destroy(&a);
    sim_fut_destroy(&b);
    sim_free(n);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("cork");
    RCPTEST_ADD(tc, held_until_first_reply_byte, never_answered);
    tcase_add_loop_test(tc, written_at_once, 0, 2);
    return sim_run("sim-cork", tc);
}
