/* cluster/nodewide.c: commands for every node (rcp_cluster_command_nodes)
 * and the cluster-wide SCAN iterator. Both use the nodes' shared
 * pipelined connections: a master through its plain connection, a replica
 * through its READONLY one. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "loop.h"
#include "cluster_int.h"
#include "format.h"
#include "reply.h"
#include "waiter.h"

#define MAX_NODES 1024

/* The command, formatted once; RCP_OK or a refusal. */
static int prepare(rcp_cluster *cl, int argc, const char **argv, const size_t *argvlen,
                   char **buf, size_t *len)
{
    return rcp__format_new(argc, argv, argvlen, rcp__cluster_node_options(cl)->max_request_bytes,
                           buf, len);
}

size_t rcp_cluster_command_nodes(rcp_cluster *cl, int which, rcp_node_reply *out, size_t max,
                                 int argc, const char **argv, const size_t *argvlen)
{
    rcp__node **nodes;
    int *is_master;
    rcp__gather_slot *w;
    rcp__gather g;
    char *buf = NULL;
    size_t len = 0, n, i;

    if (!cl || (which != RCP_NODES_MASTERS && which != RCP_NODES_ALL) || (max && !out) ||
        rcp__cluster_closing(cl))
        return 0;
    if (rcp__loop_on_thread())
        return 0; /* on an I/O thread it would wait for its own replies */
    if (prepare(cl, argc, argv, argvlen, &buf, &len) != RCP_OK)
        return 0;
    nodes = rcp__malloc(MAX_NODES * sizeof(*nodes));
    is_master = rcp__malloc(MAX_NODES * sizeof(*is_master));
    w = rcp__calloc(MAX_NODES, sizeof(*w));
    if (!nodes || !is_master || !w) {
        rcp__free(nodes);
        rcp__free(is_master);
        rcp__free(w);
        rcp__free(buf);
        return 0;
    }
    n = rcp__cluster_map_nodes(cl, which == RCP_NODES_ALL, nodes, is_master, MAX_NODES);
    rcp__gather_init(&g, w, n);
    for (i = 0; i < n; i++) {
        int role = is_master[i] ? RCP__AS_MASTER : RCP__AS_REPLICA;
        struct rcp_conn *conn = rcp__cluster_pin(nodes[i], role);
        int rv = RCP_ERR_NOT_SENT;
        if (conn) {
            rv = rcp__conn_send_raw(conn, &w[i].f, buf, len, 0);
            rcp__cluster_unpin(conn);
        }
        if (rv != RCP_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s: not sent: %s", nodes[i]->addr, rcp_strerror(rv));
            rcp__gather_refused(&w[i], rv, msg);
        }
    }
    rcp__gather_wait(&g);

    for (i = 0; i < n; i++) {
        if (i < max) {
            snprintf(out[i].addr, sizeof out[i].addr, "%s", nodes[i]->addr);
            out[i].is_master = is_master[i];
            out[i].reply = w[i].r;
        } else {
            rcp_reply_free(w[i].r);
        }
    }
    rcp__free(nodes);
    rcp__free(is_master);
    rcp__free(w);
    rcp__free(buf);
    return n;
}

void rcp_cluster_node_replies_free(rcp_node_reply *out, size_t n)
{
    size_t i;
    if (!out)
        return;
    for (i = 0; i < n; i++) {
        rcp_reply_free(out[i].reply);
        out[i].reply = NULL;
    }
}

/* ------------------------------------------------------------------ */
/* SCAN over every master                                              */

struct rcp_cluster_scan {
    rcp_cluster *cl;
    size_t nnodes, cur;
    char **host;
    int *port;
    char cursor[32];
    char *match, *type;
    char count[24];
};

void rcp_cluster_scan_free(rcp_cluster_scan *s)
{
    size_t i;
    if (!s)
        return;
    for (i = 0; i < s->nnodes; i++)
        rcp__free(s->host[i]);
    rcp__free(s->host);
    rcp__free(s->port);
    rcp__free(s->match);
    rcp__free(s->type);
    rcp__free(s);
}

rcp_cluster_scan *rcp_cluster_scan_new(rcp_cluster *cl, const char *match, long count,
                                       const char *type)
{
    rcp__node **nodes;
    int *is_master;
    rcp_cluster_scan *s;
    size_t n, i;

    if (!cl || count < 0)
        return NULL;
    s = rcp__calloc(1, sizeof(*s));
    nodes = rcp__malloc(MAX_NODES * sizeof(*nodes));
    is_master = rcp__malloc(MAX_NODES * sizeof(*is_master));
    if (!s || !nodes || !is_master)
        goto fail;
    s->cl = cl;
    snprintf(s->cursor, sizeof s->cursor, "0");
    if (count)
        snprintf(s->count, sizeof s->count, "%ld", count);
    if ((match && !(s->match = rcp__strdup(match))) || (type && !(s->type = rcp__strdup(type))))
        goto fail;
    n = rcp__cluster_map_nodes(cl, 0, nodes, is_master, MAX_NODES);
    s->host = rcp__calloc(n ? n : 1, sizeof(char *));
    s->port = rcp__calloc(n ? n : 1, sizeof(int));
    if (!s->host || !s->port)
        goto fail;
    /* By address, not by node record: a node of a later map with the same
     * address is the same server. */
    for (i = 0; i < n; i++) {
        s->host[i] = rcp__strdup(nodes[i]->host);
        if (!s->host[i])
            goto fail;
        s->port[i] = nodes[i]->port;
        s->nnodes++;
    }
    rcp__free(nodes);
    rcp__free(is_master);
    return s;
fail:
    rcp__free(nodes);
    rcp__free(is_master);
    rcp_cluster_scan_free(s);
    return NULL;
}

int rcp_cluster_scan_next(rcp_cluster_scan *s, rcp_reply **keys)
{
    const char *argv[8];
    int argc = 0;
    rcp__node *node;
    struct rcp_conn *conn;
    rcp_reply *r, *batch;
    char *buf;
    size_t len;
    int rv;

    if (!keys)
        return -1;
    *keys = NULL;
    if (!s) {
        *keys = rcp__reply_error_new(RCP_ERR_INVALID, "rcp_cluster_scan_next: NULL iterator");
        return -1;
    }
    if (s->cur >= s->nnodes)
        return 0;
    argv[argc++] = "SCAN";
    argv[argc++] = s->cursor;
    if (s->match) {
        argv[argc++] = "MATCH";
        argv[argc++] = s->match;
    }
    if (s->count[0]) {
        argv[argc++] = "COUNT";
        argv[argc++] = s->count;
    }
    if (s->type) {
        argv[argc++] = "TYPE";
        argv[argc++] = s->type;
    }
    rv = prepare(s->cl, argc, argv, NULL, &buf, &len);
    if (rv != RCP_OK) {
        *keys = rcp__reply_error_new(rv, "SCAN: could not format the command");
        return -1;
    }
    node = rcp__cluster_node(s->cl, s->host[s->cur], s->port[s->cur], RCP__AS_MASTER);
    conn = node ? rcp__cluster_pin(node, RCP__AS_MASTER) : NULL;
    if (!conn) {
        char msg[400];
        rcp__free(buf);
        snprintf(msg, sizeof msg, "SCAN: no connection to %s:%d", s->host[s->cur], s->port[s->cur]);
        *keys = rcp__reply_error_new(node ? RCP_ERR_NOT_SENT : RCP_ERR_CLOSED, msg);
        return -1;
    }
    r = rcp__conn_command_raw(conn, buf, len, 0, 0);
    rcp__cluster_unpin(conn);
    rcp__free(buf);
    if (r->type == RCP_REPLY_ERROR) {
        *keys = r;
        return -1;
    }
    if (r->type != RCP_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != RCP_REPLY_STRING ||
        r->element[0]->len >= sizeof s->cursor || r->element[1]->type != RCP_REPLY_ARRAY) {
        rcp_reply_free(r);
        *keys = rcp__reply_error_new(RCP_ERR_PROTOCOL, "SCAN: unexpected reply shape");
        return -1;
    }
    memcpy(s->cursor, r->element[0]->str, r->element[0]->len);
    s->cursor[r->element[0]->len] = '\0';
    batch = r->element[1];
    r->element[1] = NULL;
    rcp_reply_free(r);
    if (strcmp(s->cursor, "0") == 0)
        s->cur++; /* this master is done; the next starts at cursor 0 */
    *keys = batch;
    return 1;
}
