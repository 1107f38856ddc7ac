/* test_txn.c: transactions and explicit batches on a real cluster.
 *
 * 8 threads run MULTI; INCR {t}n; INCR {t}n; EXEC while 24 others send
 * plain INCR {t}n to the same node on the same shared pipeline: every EXEC
 * returns exactly two consecutive values and every plain INCR an integer
 * (a command landing inside someone's MULTI would answer QUEUED), and the
 * counter ends at the number of acknowledged increments. A cross-slot
 * transaction is refused before sending; a queued error gives EXECABORT
 * naming the command; a runtime error stays in its EXEC element. WATCH:
 * a concurrent write makes EXEC answer nil, no write lets it run. After
 * every slot of the transaction's master moved away (the handle's map is
 * stale on purpose) the transaction follows the redirect as a unit.
 * Batches: 600 mixed commands over all slots answer in order. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NTXN 8
#define NPLAIN 24

static rcpc_cluster cl;
static rcp_cluster *h;
static atomic_int stop_flag;
static atomic_long acked, bad;
static rcpc_problem prob = RCPC_PROBLEM_INIT;

static void *txn_main(void *arg)
{
    rcp_txn *t = rcp_txn_new(h);
    char d[512];
    (void)arg;
    while (!atomic_load(&stop_flag)) {
        rcp_reply *r;
        ck_assert_int_eq(rcp_txn_add(t, "INCR {t}n"), RCP_OK);
        ck_assert_int_eq(rcp_txn_add(t, "INCR {t}n"), RCP_OK);
        r = rcp_txn_exec(t);
        if (r->type == RCP_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == RCP_REPLY_INTEGER && r->element[1]->type == RCP_REPLY_INTEGER &&
            r->element[1]->integer == r->element[0]->integer + 1) {
            atomic_fetch_add(&acked, 2);
        } else {
            atomic_fetch_add(&bad, 1);
            rcpc_problem_note(&prob, "EXEC: %s", rcptest_describe(r, d, sizeof d));
        }
        rcp_reply_free(r);
    }
    rcp_txn_free(t);
    return NULL;
}

static void *plain_main(void *arg)
{
    char d[512];
    long n = 0;
    (void)arg;
    while (!atomic_load(&stop_flag)) {
        rcp_reply *r;
        if (n++ % 2) {
            const char *argv[] = {"INCR", "{t}n"};
            int rc;
            r = rcpc_call_async(h, -1, 2, argv, NULL, &rc);
        } else {
            r = rcp_cluster_command(h, "INCR {t}n");
        }
        if (r && r->type == RCP_REPLY_INTEGER) {
            atomic_fetch_add(&acked, 1);
        } else {
            atomic_fetch_add(&bad, 1);
            rcpc_problem_note(&prob, "INCR: %s", rcptest_describe(r, d, sizeof d));
        }
        rcp_reply_free(r);
    }
    return NULL;
}

START_TEST(test_never_interleaved)
{
    pthread_t th[NTXN + NPLAIN];
    rcp_reply *r;
    char d[512];
    int i;

    h = rcpc_open_default(&cl);
    rcp_reply_free(rcp_cluster_command(h, "DEL {t}n"));
    atomic_store(&stop_flag, 0);
    for (i = 0; i < NTXN + NPLAIN; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, i < NTXN ? txn_main : plain_main, NULL), 0);
    rcptest_sleep_ms(rcptest_scale(3000));
    atomic_store(&stop_flag, 1);
    for (i = 0; i < NTXN + NPLAIN; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr, "txn: %ld increments acknowledged, %ld bad\n", atomic_load(&acked),
            atomic_load(&bad));
    ck_assert_msg(atomic_load(&bad) == 0, "%ld bad answers; first: %s", atomic_load(&bad),
                  prob.first);
    r = rcp_cluster_command(h, "GET {t}n");
    ck_assert_msg(r->type == RCP_REPLY_STRING && atoll(r->str) == atomic_load(&acked),
                  "counter %s, acknowledged %ld", rcptest_describe(r, d, sizeof d),
                  atomic_load(&acked));
    rcp_reply_free(r);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

START_TEST(test_errors_and_watch)
{
    rcp_txn *t, *t2;
    rcp_reply *r;
    char d[512];
    const char *wk[] = {"{t}w"};

    h = rcpc_open_default(&cl);
    t = rcp_txn_new(h);
    ck_assert_int_eq(rcp_txn_add(t, "SET a 1"), RCP_OK);
    ck_assert_str_eq(rcp_txn_error(t), "");
    ck_assert_int_eq(rcp_txn_add(t, "SET b 1"), RCP_ERR_CROSS_SLOT);
    /* The refusal names the command, the key and both slots. */
    ck_assert_msg(strstr(rcp_txn_error(t), "command 2 (SET)") && strstr(rcp_txn_error(t), "'b'") &&
                      strstr(rcp_txn_error(t), "slot 3300") && strstr(rcp_txn_error(t), "slot 15495"),
                  "%s", rcp_txn_error(t));
    ck_assert_int_eq(rcp_txn_add(t, "SUBSCRIBE x"), RCP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rcp_txn_error(t), "command 2 (SUBSCRIBE)"), "%s", rcp_txn_error(t));
    r = rcp_txn_exec(t); /* the refused commands left nothing behind */
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 1, "SET a alone: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* A command the server refuses while queueing: EXECABORT, nothing run. */
    rcp_reply_free(rcp_cluster_command(h, "SET {t}s abc"));
    ck_assert_int_eq(rcp_txn_add(t, "SET {t}s before"), RCP_OK);
    ck_assert_int_eq(rcp_txn_add(t, "NOSUCHCOMMAND {t}s"), RCP_OK);
    r = rcp_txn_exec(t);
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_SERVER &&
                      strstr(r->str, "EXECABORT") && strstr(r->str, "command 2"),
                  "EXECABORT: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_cluster_command(h, "GET {t}s");
    ck_assert_msg(rcpc_is_string(r, "abc"), "aborted transaction ran: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* A runtime error stays in its element; the rest runs. */
    ck_assert_int_eq(rcp_txn_add(t, "INCR {t}s"), RCP_OK);
    ck_assert_int_eq(rcp_txn_add(t, "SET {t}s2 ok"), RCP_OK);
    r = rcp_txn_exec(t);
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 2 &&
                      r->element[0]->type == RCP_REPLY_ERROR &&
                      rcpc_is_status(r->element[1], "OK"),
                  "runtime error: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* WATCH: a write by someone else between WATCH and EXEC: nil. */
    rcp_reply_free(rcp_cluster_command(h, "SET {t}w 1"));
    r = rcp_txn_watch(t, 1, wk, NULL);
    ck_assert_msg(rcpc_is_status(r, "OK"), "WATCH: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    {
        const char *get[] = {"GET", "{t}w"};
        r = rcp_txn_command_argv(t, 2, get, NULL);
        ck_assert_msg(rcpc_is_string(r, "1"), "GET on the WATCH connection: %s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    rcp_reply_free(rcp_cluster_command(h, "SET {t}w 2")); /* the other writer */
    ck_assert_int_eq(rcp_txn_add(t, "SET {t}w 3"), RCP_OK);
    r = rcp_txn_exec(t);
    ck_assert_msg(rcptest_is_nil(r), "EXEC after a concurrent write: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_cluster_command(h, "GET {t}w");
    ck_assert_msg(rcpc_is_string(r, "2"), "value: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    /* WATCH with no concurrent write: it runs. */
    r = rcp_txn_watch(t, 1, wk, NULL);
    rcp_reply_free(r);
    r = rcp_txn_command(t, "GET %s", "{t}w"); /* the printf-style form */
    ck_assert_msg(rcpc_is_string(r, "2"), "GET on the WATCH connection: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_txn_command(t, "GET %s", (const char *)NULL);
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_INVALID, "NULL %%s: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_int_eq(rcp_txn_add(t, "SET {t}w 4"), RCP_OK);
    r = rcp_txn_exec(t);
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 1, "watched EXEC: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    {
        const char *other[] = {"{x}"};
        t2 = rcp_txn_new(h);
        ck_assert_int_eq(rcp_txn_add(t2, "SET {t}q 1"), RCP_OK);
        r = rcp_txn_watch(t2, 1, other, NULL);
        ck_assert_msg(r->err == RCP_ERR_CROSS_SLOT, "WATCH in another slot: %s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        rcp_txn_free(t2);
    }
    r = rcp_txn_exec(t);
    ck_assert_int_eq(r->err, RCP_ERR_INVALID); /* empty */
    rcp_reply_free(r);
    rcp_txn_free(t);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

START_TEST(test_batch)
{
    rcp_batch *b;
    rcp_reply *r;
    char d[512];
    int i;

    h = rcpc_open_default(&cl);
    b = rcp_batch_new(h);
    for (i = 0; i < 200; i++) {
        ck_assert_int_eq(rcp_batch_add(b, "SET bt:%d v%d", i, i), RCP_OK);
        ck_assert_int_eq(rcp_batch_add(b, "GET bt:%d", i), RCP_OK);
        ck_assert_int_eq(rcp_batch_add(b, "INCR btc:%d", i % 7), RCP_OK);
    }
    ck_assert_uint_eq(rcp_batch_count(b), 600);
    r = rcp_batch_exec(b);
    ck_assert_uint_eq(rcp_batch_count(b), 0);
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 600, "batch: %s",
                  rcptest_describe(r, d, sizeof d));
    for (i = 0; i < 200; i++) {
        char v[32];
        snprintf(v, sizeof v, "v%d", i);
        ck_assert_msg(rcpc_is_status(r->element[3 * i], "OK"), "SET %d: %s", i,
                      rcptest_describe(r->element[3 * i], d, sizeof d));
        ck_assert_msg(rcpc_is_string(r->element[3 * i + 1], v), "GET %d: %s", i,
                      rcptest_describe(r->element[3 * i + 1], d, sizeof d));
        ck_assert_msg(r->element[3 * i + 2]->type == RCP_REPLY_INTEGER &&
                          r->element[3 * i + 2]->integer == i / 7 + 1,
                      "INCR %d: %s", i, rcptest_describe(r->element[3 * i + 2], d, sizeof d));
    }
    rcp_reply_free(r);

    /* A split MGET inside a batch, and a refused command. */
    ck_assert_int_eq(rcp_batch_add(b, "MGET bt:1 bt:2 bt:3"), RCP_OK);
    ck_assert_int_eq(rcp_batch_add(b, "PING"), RCP_OK);
    r = rcp_batch_exec(b);
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 2 &&
                      r->element[0]->type == RCP_REPLY_ARRAY && r->element[0]->elements == 3 &&
                      rcpc_is_string(r->element[0]->element[2], "v3") &&
                      rcpc_is_status(r->element[1], "PONG"),
                  "MGET + PING: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    /* A command the batch could never send is refused when added, naming
     * its position and keys; the batch keeps the rest. */
    ck_assert_int_eq(rcp_batch_add(b, "SET never 1"), RCP_OK);
    ck_assert_int_eq(rcp_batch_add(b, "SUNION a b"), RCP_ERR_CROSS_SLOT);
    ck_assert_msg(strstr(rcp_batch_error(b), "command 2 (SUNION)") &&
                      strstr(rcp_batch_error(b), "'a' (slot 15495)") &&
                      strstr(rcp_batch_error(b), "'b' (slot 3300)"),
                  "%s", rcp_batch_error(b));
    ck_assert_int_eq(rcp_batch_add(b, "BLPOP q 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_msg(strstr(rcp_batch_error(b), "command 2 (BLPOP)"), "%s", rcp_batch_error(b));
    ck_assert_uint_eq(rcp_batch_count(b), 1);
    rcp_batch_free(b);
    /* Refused at send: an empty batch says so. */
    b = rcp_batch_new(h);
    r = rcp_batch_exec(b);
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_INVALID && strstr(r->str, "empty"),
                  "empty batch: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_cluster_command(h, "EXISTS never");
    ck_assert_msg(rcptest_is_int(r, 0), "a refused batch sent something: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    rcp_batch_free(b);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

/* rcp_txn_discard drops the queued commands and the WATCH: a write by
 * someone else after it no longer aborts the reused transaction. */
START_TEST(test_txn_discard)
{
    rcp_txn *t;
    rcp_reply *r;
    char d[512];
    const char *wk[] = {"{t}d"};

    h = rcpc_open_default(&cl);
    t = rcp_txn_new(h);
    r = rcp_txn_watch(t, 1, wk, NULL);
    ck_assert_msg(rcpc_is_status(r, "OK"), "WATCH: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    ck_assert_int_eq(rcp_txn_add(t, "SET {t}d never"), RCP_OK);
    rcp_txn_discard(t);
    rcp_reply_free(rcp_cluster_command(h, "SET {t}d other"));
    /* A key of another slot is fine now: nothing of the old one is left. */
    ck_assert_int_eq(rcp_txn_add(t, "SET a 1"), RCP_OK);
    r = rcp_txn_exec(t);
    ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 1 && rcpc_is_status(r->element[0], "OK"),
                  "after discard: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_cluster_command(h, "GET {t}d");
    ck_assert_msg(rcpc_is_string(r, "other"), "discarded SET ran: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    rcp_txn_free(t);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

START_TEST(test_txn_follows_redirect)
{
    rcp_txn *x;
    rcp_reply *r;
    char err[4096], d[512];
    int to, k;

    h = rcpc_open_stale(&cl);
    rcp_reply_free(rcp_cluster_command(h, "SET {t}m 0"));
    ck_assert_msg(rcpc_move_owner_away(&cl, "{t}m", &to, err, sizeof err) == 0, "reshard: %s",
                  err);

    x = rcp_txn_new(h);
    for (k = 1; k <= 3; k++) {
        ck_assert_int_eq(rcp_txn_add(x, "INCR {t}m"), RCP_OK);
        ck_assert_int_eq(rcp_txn_add(x, "INCR {t}m"), RCP_OK);
        r = rcp_txn_exec(x);
        ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == 2 &&
                          rcptest_is_int(r->element[1], 2 * k),
                      "transaction %d after the reshard: %s", k, rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
    rcp_txn_free(x);
    rcp_cluster_close(h);
    h = NULL;
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_errors_and_watch, test_txn_discard, test_batch, test_never_interleaved,
                test_txn_follows_redirect);
}

int main(void)
{
    static const char *const extra[] = {"--cluster-allow-replica-migration", "no", NULL};
    return rcpc_main(&cl, "txn", 3, 1, extra, 240, add_tests);
}
