/* test_multikey.c: MGET, MSET, DEL, UNLINK, EXISTS and TOUCH whose keys
 * span slots are split per slot and merged.
 *
 * Over 1,000 random keys across all slots, each multi-key answer must equal
 * what the single-key commands say (values in the caller's order, counts
 * summed). Other multi-key commands spanning slots, and MSETNX, are refused
 * before anything is sent, with an error naming the slots. Then 8 threads
 * keep doing MSET/MGET/EXISTS/DEL over their own keys (so they know every
 * answer) while 2,000 slots move to another master and back: no failure. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

#define NRANDOM 1000
#define NTHREADS 8
#define NKEYS 64 /* per thread */
#define PICK 16  /* keys per multi-key call */
#define MOVE_SLOTS 2000

static rcpc_cluster cl;
static rcp_cluster *h;
static atomic_int stop_flag;
static rcpc_problem prob = RCPC_PROBLEM_INIT;

static void open_handle(void)
{
    h = rcpc_open_default(&cl);
}

static void close_handle(void)
{
    rcp_cluster_close(h);
    h = NULL;
}

/* argv = {cmd, keys...} or, with vals, {cmd, key, val, ...}. */
static rcp_reply *multi(int async, const char *cmd, int n, char (*keys)[32], char (*vals)[32])
{
    const char *argv[1 + 2 * NRANDOM];
    int argc = 0, i;

    argv[argc++] = cmd;
    for (i = 0; i < n; i++) {
        argv[argc++] = keys[i];
        if (vals)
            argv[argc++] = vals[i];
    }
    if (async) {
        int rc;
        rcp_reply *r = rcpc_call_async(h, -1, argc, argv, NULL, &rc);
        ck_assert_msg(rc == RCP_OK, "%s: send refused: %s", cmd, rcp_strerror(rc));
        ck_assert_msg(r != NULL, "%s: not resolved in time", cmd);
        return r;
    }
    return rcp_cluster_command_argv(h, argc, argv, NULL);
}

static long long int_of(rcp_reply *r, const char *what)
{
    char d[512];
    long long v;
    ck_assert_msg(r->type == RCP_REPLY_INTEGER, "%s: %s", what, rcptest_describe(r, d, sizeof d));
    v = r->integer;
    rcp_reply_free(r);
    return v;
}

START_TEST(test_split_equals_single)
{
    static char keys[NRANDOM][32], vals[NRANDOM][32];
    char d[512];
    int i, nset = 0, async;
    unsigned rnd = 12345u, slots[16384];
    int distinct = 0;
    rcp_reply *r;

    open_handle();
    memset(slots, 0, sizeof slots);
    for (i = 0; i < NRANDOM; i++) {
        rnd = rnd * 1103515245u + 12345u;
        snprintf(keys[i], sizeof keys[i], "mk:r:%u:%d", rnd >> 8, i);
        if (!slots[rcp_keyslot(keys[i], strlen(keys[i]))]++)
            distinct++;
    }
    ck_assert_int_gt(distinct, 900); /* spread over the slots indeed */

    for (async = 0; async < 2; async++) {
        /* Half the keys set, one by one. */
        for (i = 0; i < NRANDOM; i++) {
            rcp_reply_free(rcp_cluster_command(h, "DEL %s", keys[i]));
            if ((i + async) % 2)
                continue;
            snprintf(vals[i], sizeof vals[i], "v%d.%d", i, async);
            r = rcp_cluster_command(h, "SET %s %s", keys[i], vals[i]);
            ck_assert_msg(rcpc_is_status(r, "OK"), "SET: %s", rcptest_describe(r, d, sizeof d));
            rcp_reply_free(r);
        }
        nset = NRANDOM / 2;

        r = multi(async, "MGET", NRANDOM, keys, NULL);
        ck_assert_msg(r->type == RCP_REPLY_ARRAY && r->elements == NRANDOM, "MGET: %s",
                      rcptest_describe(r, d, sizeof d));
        for (i = 0; i < NRANDOM; i++) {
            rcp_reply *one = rcp_cluster_command(h, "GET %s", keys[i]);
            if (one->type == RCP_REPLY_NIL)
                ck_assert_msg(rcptest_is_nil(r->element[i]), "MGET[%d] %s: %s, GET says nil", i,
                              keys[i], rcptest_describe(r->element[i], d, sizeof d));
            else
                ck_assert_msg(rcpc_is_string(r->element[i], one->str), "MGET[%d] %s: %s, GET says %s",
                              i, keys[i], rcptest_describe(r->element[i], d, sizeof d), one->str);
            rcp_reply_free(one);
        }
        rcp_reply_free(r);

        ck_assert_int_eq(int_of(multi(async, "EXISTS", NRANDOM, keys, NULL), "EXISTS"), nset);
        /* A key named twice counts twice, as on one node. */
        {
            char two[3][32];
            memcpy(two[0], keys[async], 32);
            memcpy(two[1], keys[async], 32);
            memcpy(two[2], keys[500 + async], 32);
            ck_assert_int_eq(int_of(multi(async, "EXISTS", 3, two, NULL), "EXISTS dup"), 3);
        }
        ck_assert_int_eq(int_of(multi(async, "TOUCH", NRANDOM, keys, NULL), "TOUCH"), nset);
        ck_assert_int_eq(int_of(multi(async, async ? "UNLINK" : "DEL", NRANDOM, keys, NULL), "DEL"),
                         nset);
        ck_assert_int_eq(int_of(multi(async, "EXISTS", NRANDOM, keys, NULL), "EXISTS after DEL"), 0);

        /* MSET all, read back one by one. */
        for (i = 0; i < NRANDOM; i++)
            snprintf(vals[i], sizeof vals[i], "m%d.%d", i, async);
        r = multi(async, "mset", NRANDOM, keys, vals);
        ck_assert_msg(rcpc_is_status(r, "OK"), "MSET: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        for (i = 0; i < NRANDOM; i++) {
            r = rcp_cluster_command(h, "GET %s", keys[i]);
            ck_assert_msg(rcpc_is_string(r, vals[i]), "GET %s after MSET: %s", keys[i],
                          rcptest_describe(r, d, sizeof d));
            rcp_reply_free(r);
        }
        ck_assert_int_eq(int_of(multi(async, "DEL", NRANDOM, keys, NULL), "DEL all"), NRANDOM);
    }
    close_handle();
}
END_TEST

static void never_called(rcp_future *f, rcp_reply *r)
{
    (void)f;
    (void)r;
    abort(); /* a refused send must never call back */
}

START_TEST(test_other_cross_slot_refused)
{
    char d[512];
    rcp_reply *r;
    unsigned sa = rcp_keyslot("a", 1), sb = rcp_keyslot("b", 1);
    char want[64];
    rcp_future f;

    ck_assert_uint_ne(sa, sb);
    open_handle();
    r = rcp_cluster_command(h, "SUNION a b");
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_CROSS_SLOT, "SUNION: %s",
                  rcptest_describe(r, d, sizeof d));
    snprintf(want, sizeof want, "slot %u", sa);
    ck_assert_msg(strstr(r->str, want) != NULL, "message does not name slot %u: %s", sa, r->str);
    snprintf(want, sizeof want, "slot %u", sb);
    ck_assert_msg(strstr(r->str, want) != NULL, "message does not name slot %u: %s", sb, r->str);
    rcp_reply_free(r);

    r = rcp_cluster_command(h, "MSETNX a 1 b 2");
    ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err == RCP_ERR_CROSS_SLOT, "MSETNX: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_cluster_command(h, "EXISTS a");
    ck_assert_msg(rcptest_is_int(r, 0), "MSETNX must not have written: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    memset(&f, 0, sizeof f);
    f.resolve = never_called;
    ck_assert_int_eq(rcp_cluster_send(h, &f, "RENAME a b"), RCP_ERR_CROSS_SLOT);
    /* Same slot (hash tag): not split, sent as one. */
    r = rcp_cluster_command(h, "MSET {t}a 1 {t}b 2");
    ck_assert_msg(rcpc_is_status(r, "OK"), "MSET one slot: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_cluster_command(h, "DEL {t}a {t}b");
    ck_assert_msg(rcptest_is_int(r, 2), "DEL one slot: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    close_handle();
}
END_TEST

struct worker {
    pthread_t th;
    int id;
    long version[NKEYS]; /* 0: absent */
    long ops, failures;
};

static struct worker workers[NTHREADS];

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    unsigned rnd = 99u + (unsigned)w->id * 7919u;
    char keys[PICK][32], vals[PICK][32], d[512];
    int idx[PICK];

    while (!atomic_load(&stop_flag)) {
        int i, op, async;
        rcp_reply *r;
        long long want = 0;

        rnd = rnd * 1103515245u + 12345u;
        op = (int)((rnd >> 8) % 4);
        async = (int)((rnd >> 12) % 2);
        for (i = 0; i < PICK; i++) {
            int j, dup;
            do {
                rnd = rnd * 1103515245u + 12345u;
                idx[i] = (int)((rnd >> 8) % NKEYS);
                for (dup = 0, j = 0; j < i; j++)
                    dup |= idx[j] == idx[i];
            } while (dup); /* distinct keys: MSET of one key twice would be ambiguous */
            snprintf(keys[i], sizeof keys[i], "mk:%d:%d", w->id, idx[i]);
        }
        w->ops++;
        if (op == 0) {
            for (i = 0; i < PICK; i++)
                snprintf(vals[i], sizeof vals[i], "%ld", w->version[idx[i]] + 1);
            r = multi(async, "MSET", PICK, keys, vals);
            if (rcpc_is_status(r, "OK")) {
                for (i = 0; i < PICK; i++)
                    w->version[idx[i]]++;
            } else {
                w->failures++;
                rcpc_problem_note(&prob, "MSET: %s", rcptest_describe(r, d, sizeof d));
            }
        } else if (op == 1) {
            r = multi(async, "MGET", PICK, keys, NULL);
            if (r->type != RCP_REPLY_ARRAY || r->elements != PICK) {
                w->failures++;
                rcpc_problem_note(&prob, "MGET: %s", rcptest_describe(r, d, sizeof d));
            } else {
                for (i = 0; i < PICK; i++) {
                    int ok;
                    snprintf(vals[i], sizeof vals[i], "%ld", w->version[idx[i]]);
                    ok = w->version[idx[i]] ? rcpc_is_string(r->element[i], vals[i])
                                            : rcptest_is_nil(r->element[i]);
                    if (!ok) {
                        w->failures++;
                        rcpc_problem_note(&prob, "MGET[%d] %s: expected %s, got %s", i, keys[i],
                                          w->version[idx[i]] ? vals[i] : "nil",
                                          rcptest_describe(r->element[i], d, sizeof d));
                        break;
                    }
                }
            }
        } else {
            for (i = 0; i < PICK; i++)
                want += w->version[idx[i]] != 0;
            r = multi(async, op == 2 ? "EXISTS" : "DEL", PICK, keys, NULL);
            if (!rcptest_is_int(r, want)) {
                w->failures++;
                rcpc_problem_note(&prob, "%s: expected %lld, got %s", op == 2 ? "EXISTS" : "DEL",
                                  want, rcptest_describe(r, d, sizeof d));
            }
            if (op == 3 && r->type == RCP_REPLY_INTEGER)
                for (i = 0; i < PICK; i++)
                    w->version[idx[i]] = 0;
        }
        rcp_reply_free(r);
    }
    return NULL;
}

START_TEST(test_split_during_reshard)
{
    rcpc_topo topo;
    rcp_cluster_stats st;
    char err[4096];
    int from = 0, to = 0, i, t, rc;
    long ops = 0, failures = 0;

    open_handle();
    ck_assert_int_eq(rcpc_topology_any(&cl, &topo), 0);
    for (i = 0; i < topo.n; i++)
        if (topo.node[i].is_master && topo.node[i].nslots >= MOVE_SLOTS) {
            if (!from)
                from = topo.node[i].port;
            else if (!to)
                to = topo.node[i].port;
        }
    ck_assert_msg(from && to, "two masters with %d slots each", MOVE_SLOTS);

    atomic_store(&stop_flag, 0);
    for (t = 0; t < NTHREADS; t++) {
        memset(&workers[t], 0, sizeof workers[t]);
        workers[t].id = t;
        ck_assert_int_eq(pthread_create(&workers[t].th, NULL, worker_main, &workers[t]), 0);
    }
    rcptest_sleep_ms(300);
    rc = rcpc_reshard(&cl, from, to, MOVE_SLOTS, err, sizeof err);
    if (rc == 0)
        rc = rcpc_reshard(&cl, to, from, MOVE_SLOTS, err, sizeof err);
    rcptest_sleep_ms(300);
    atomic_store(&stop_flag, 1);
    for (t = 0; t < NTHREADS; t++) {
        pthread_join(workers[t].th, NULL);
        ops += workers[t].ops;
        failures += workers[t].failures;
    }
    ck_assert_msg(rc == 0, "reshard: %s", err);
    ck_assert_int_eq(rcp_cluster_get_stats(h, &st), RCP_OK);
    fprintf(stderr, "multikey under reshard: %ld multi-key calls, %ld failed; moved %llu ask %llu\n",
            ops, failures, (unsigned long long)st.moved, (unsigned long long)st.ask);
    ck_assert_msg(failures == 0, "%ld of %ld failed; first: %s", failures, ops, prob.first);
    ck_assert_msg(st.moved + st.ask > 0, "no redirect seen: the reshard did not touch the load");
    close_handle();
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, test_split_equals_single, test_other_cross_slot_refused,
                test_split_during_reshard);
}

int main(void)
{
    static const char *const extra[] = {"--cluster-allow-replica-migration", "no", NULL};
    return rcpc_main(&cl, "multikey", 3, 1, extra, 280, add_tests);
}
