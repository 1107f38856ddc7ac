/* commands.c: the commands that do not fit a shared pipeline (see
 * docs/commands.md), one short use of each. Run against any cluster node:
 *
 *     ./commands 127.0.0.1:7000
 */
#include <stdio.h>
#include <string.h>

#include "rcpipe.h"

static void show(const char *what, const rcp_reply *r)
{
    if (r->type == RCP_REPLY_ERROR)
        printf("%-28s error: %s\n", what, r->str);
    else if (r->type == RCP_REPLY_ARRAY)
        printf("%-28s array of %zu\n", what, r->elements);
    else if (r->type == RCP_REPLY_INTEGER)
        printf("%-28s %lld\n", what, r->integer);
    else if (r->type == RCP_REPLY_NIL)
        printf("%-28s nil\n", what);
    else
        printf("%-28s %s\n", what, r->str);
}

int main(int argc, char **argv)
{
    rcp_cluster_options o;
    rcp_cluster *h;
    rcp_reply *r;
    char err[1024];
    const char *seed = argc > 1 ? argv[1] : "127.0.0.1:7000";

    rcp_cluster_options_init(&o);
    o.seeds = seed;
    if (rcp_cluster_open(&o, &h, err, sizeof err) != RCP_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }

    /* Multi-key across slots: split per slot, merged in key order. */
    r = rcp_cluster_command(h, "MSET user:1 ann user:2 bob user:3 cid");
    show("MSET (3 slots)", r);
    rcp_reply_free(r);
    r = rcp_cluster_command(h, "MGET user:1 user:2 user:3");
    show("MGET (3 slots)", r);
    rcp_reply_free(r);

    /* A transaction: all keys in one slot (a hash tag). */
    {
        rcp_txn *t = rcp_txn_new(h);
        rcp_txn_add(t, "INCR {acct:7}:balance");
        rcp_txn_add(t, "RPUSH {acct:7}:log deposit");
        r = rcp_txn_exec(t);
        show("MULTI/EXEC", r);
        rcp_reply_free(r);
        rcp_txn_free(t);
    }

    /* A batch: any slots, replies in order. */
    {
        rcp_batch *b = rcp_batch_new(h);
        int i;
        for (i = 0; i < 100; i++)
            rcp_batch_add(b, "SET batch:%d %d", i, i);
        r = rcp_batch_exec(b);
        show("batch of 100 SETs", r);
        rcp_reply_free(r);
        rcp_batch_free(b);
    }

    /* A script: EVALSHA, EVAL only when the node does not have it. */
    {
        static const char body[] = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
        rcp_script *s = rcp_script_new(body, strlen(body));
        const char *keys[] = {"counter"}, *args[] = {"5"};
        r = rcp_cluster_script_run(h, s, 0, 1, keys, NULL, 1, args, NULL);
        show("script INCRBY 5", r);
        rcp_reply_free(r);
        rcp_script_free(s);
    }

    /* A blocking pop, on a dedicated connection (times out after 1 s). */
    r = rcp_cluster_command(h, "BLPOP queue:empty 1");
    show("BLPOP (1 s)", r);
    rcp_reply_free(r);

    /* Every master at once, then a cluster-wide SCAN. */
    {
        rcp_node_reply nr[32];
        const char *dbsize[] = {"DBSIZE"};
        size_t n = rcp_cluster_command_nodes(h, RCP_NODES_MASTERS, nr, 32, 1, dbsize, NULL), i;
        for (i = 0; i < n && i < 32; i++)
            printf("DBSIZE %-21s %lld\n", nr[i].addr,
                   nr[i].reply->type == RCP_REPLY_INTEGER ? nr[i].reply->integer : -1);
        rcp_cluster_node_replies_free(nr, n < 32 ? n : 32);
    }
    {
        rcp_cluster_scan *sc = rcp_cluster_scan_new(h, "batch:*", 100, NULL);
        size_t total = 0;
        int rc;
        while (sc && (rc = rcp_cluster_scan_next(sc, &r)) != 0) {
            if (rc < 0) {
                show("SCAN", r); /* the next call retries the same step */
                rcp_reply_free(r);
                break;
            }
            total += r->elements;
            rcp_reply_free(r);
        }
        rcp_cluster_scan_free(sc);
        printf("%-28s %zu keys\n", "SCAN batch:*", total);
    }
    rcp_cluster_close(h);
    return 0;
}
