/* cluster/classify.c: what route a command takes.
 *
 * One look-up in the generated command table (lib's command facts: flags
 * and key positions) gives everything routing needs: the key slot (CRC16
 * with {hash tags}), whether the command is read-only (replica reads; safe
 * to resend after a connection failure), whether it blocks (dedicated
 * connections), and whether it changes connection state (refused on a
 * shared pipeline). The answer is a route, not an error code: one request,
 * a multi-key command split by slot, a blocking command, or a refusal with
 * its reason. */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "cache.h"
#include "cluster_int.h"
#include "format.h"
#include "multi.h"

/* The refusal of a command whose keys span slots, naming two of them; in
 * a per-thread buffer (valid until the thread's next refusal). */
static const char *cross_slot_why(const char **argv, const size_t *argvlen, int a, unsigned sa,
                                  int b, unsigned sb)
{
    static _Thread_local char buf[300];
    size_t la = argvlen ? argvlen[a] : strlen(argv[a]);
    size_t lb = argvlen ? argvlen[b] : strlen(argv[b]);
    snprintf(buf, sizeof buf,
             "CROSSSLOT: keys in different slots: '%.*s' (slot %u) and '%.*s' (slot %u); only "
             "MGET, MSET, DEL, UNLINK, EXISTS and TOUCH are split by slot, other commands need "
             "their keys in one slot (use a {hash tag})",
             (int)(la < 60 ? la : 60), argv[a], sa, (int)(lb < 60 ? lb : 60), argv[b], sb);
    return buf;
}

/* The slot of every key, checked to be one. RCP_OK, RCP_ERR_CROSS_SLOT
 * with *why, or RCP_ERR_OOM. */
static int one_slot(const rcp__cmd *cmd, int argc, const char **argv, const size_t *argvlen,
                    const int *idx, int nk, rcp__req *rq, const char **why)
{
    int *all = (int *)idx, i, rv = RCP_OK;
    if (nk > 64) {
        /* Rare: more than 64 keys; read them all. */
        all = rcp__malloc((size_t)nk * sizeof(int));
        if (!all)
            return RCP_ERR_OOM;
        rcp__cmd_keys(cmd, argc, argv, argvlen, all, nk);
    }
    for (i = 0; i < nk; i++) {
        size_t l = argvlen ? argvlen[all[i]] : strlen(argv[all[i]]);
        unsigned s = rcp__keyslot(argv[all[i]], l);
        if (i == 0) {
            rq->slot = s;
        } else if (s != rq->slot) {
            *why = cross_slot_why(argv, argvlen, all[0], rq->slot, all[i], s);
            rv = RCP_ERR_CROSS_SLOT;
            break;
        }
    }
    if (all != idx)
        rcp__free(all);
    return rv;
}

/* rcp__classify for any command but the one-key kind: the key specs and
 * the screening. Out of line, so that the common case does not pay for
 * its frame (the key indices). */
static __attribute__((noinline)) rcp__route_kind
classify_general(struct rcp_cluster *cl, const rcp__cmd *cmd, unsigned flags, int argc,
                 const char **argv, const size_t *argvlen, rcp__req *rq, int *code,
                 const char **why)
{
    int idx[64], nk, rv, screen;

    screen = rcp__cmd_screen(cmd, argc, argv, argvlen, why);
    if (screen != RCP_OK && screen != RCP_ERR_BLOCKING_COMMAND) {
        *code = screen;
        return RCP__ROUTE_REFUSED;
    }
    rq->policy = rq->policy < 0 ? cl->opt.read_policy : rq->policy;
    if (!cmd) {
        /* Unknown (a module's command?): any master, never resent. */
        rq->flags = RCP__CMD_NOKEY;
        rq->has_slot = 0;
        return RCP__ROUTE_ONE;
    }
    rq->flags = flags;
    if (rq->flags & RCP__CMD_PER_NODE) {
        *why = "command refused: DBSIZE, KEYS, SCAN, FLUSHALL and FLUSHDB as one request would "
               "act on one master only, not the cluster: run them on every master with "
               "rcp_cluster_command_nodes (SCAN: rcp_cluster_scan_new)";
        *code = RCP_ERR_INVALID;
        return RCP__ROUTE_REFUSED;
    }
    nk = rcp__cmd_keys(cmd, argc, argv, argvlen, idx, 64);
    if (nk < 0) {
        *why = "wrong number of arguments for the command's keys";
        *code = RCP_ERR_INVALID;
        return RCP__ROUTE_REFUSED;
    }
    rq->has_slot = nk > 0;
    if (cl->cache && nk > 0 && !(rq->flags & RCP__CMD_READONLY))
        rcp__cache_drop_keys(cl, cmd, argc, argv, argvlen); /* before it is sent */
    rv = one_slot(cmd, argc, argv, argvlen, idx, nk, rq, why);
    if (rv == RCP_ERR_CROSS_SLOT && (rq->flags & RCP__CMD_SPLIT) &&
        rcp__multi_kind(argc, argv, argvlen)) {
        *why = NULL;
        return RCP__ROUTE_SPLIT;
    }
    if (rv != RCP_OK) {
        *code = rv;
        return RCP__ROUTE_REFUSED;
    }
    *why = NULL;
    return screen == RCP_ERR_BLOCKING_COMMAND ? RCP__ROUTE_BLOCKING : RCP__ROUTE_ONE;
}

rcp__route_kind rcp__classify(struct rcp_cluster *cl, int argc, const char **argv,
                              const size_t *argvlen, rcp__req *rq, int *code, const char **why)
{
    const rcp__cmd *cmd;
    unsigned flags;

    *why = NULL;
    *code = RCP_OK;
    if (argc < 1) {
        *code = RCP_ERR_INVALID;
        return RCP__ROUTE_REFUSED;
    }
    if (!rcp__cmd_lookup_key1(argc, argv, argvlen, &cmd, &flags))
        return classify_general(cl, cmd, flags, argc, argv, argvlen, rq, code, why);
    /* The common case (GET, SET, ...): one key, argv[1], nothing to
     * screen; classify_general would find the same. */
    rq->policy = rq->policy < 0 ? cl->opt.read_policy : rq->policy;
    rq->flags = flags;
    rq->has_slot = 1;
    rq->slot = rcp__keyslot(argv[1], argvlen ? argvlen[1] : argv[1] ? strlen(argv[1]) : 0);
    if (cl->cache && !(rq->flags & RCP__CMD_READONLY))
        rcp__cache_drop_keys(cl, cmd, argc, argv, argvlen); /* before it is sent */
    return RCP__ROUTE_ONE;
}

rcp__route_kind rcp__classify_source(struct rcp_cluster *cl, int argc, const char **argv,
                                     const size_t *argvlen, rcp__req *rq, int *code,
                                     const char **why)
{
    const char *av[64];
    size_t al[64];
    int i;
    if (argc < 1 || argc >= 64) {
        *code = argc < 1 ? RCP_ERR_INVALID : RCP_ERR_UNSUPPORTED;
        *why = argc < 1 ? NULL : "a streamed write takes at most 63 arguments before its source";
        return RCP__ROUTE_REFUSED;
    }
    for (i = 0; i < argc; i++) {
        av[i] = argv[i];
        al[i] = argvlen ? argvlen[i] : strlen(argv[i]);
    }
    av[argc] = "";
    al[argc] = 0;
    return rcp__classify(cl, argc + 1, av, al, rq, code, why);
}
