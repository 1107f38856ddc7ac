/* pubsub: a sharded channel and a classic one on a Redis Cluster.
 *
 *   pubsub SEED_HOST:PORT [SECONDS]
 *
 * Subscribes to the sharded channel "orders" and the classic channel
 * "news", publishes to both once a second through the cluster handle, and
 * prints what arrives and every subscription event (a reshard or failover
 * run meanwhile shows up as "lost ... re-subscribing" then "subscribed on
 * ..."). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rcpipe.h>
#include <rcpipe/pubsub.h>

/* On the subscriber's thread: short, no rcp_pubsub_* call. */
static void on_message(const rcp_pubsub_msg *m, void *data)
{
    (void)data;
    printf("%s %.*s: %.*s\n", m->kind == RCP_PUBSUB_SHARD ? "smessage" : "message",
           (int)m->channel_len, m->channel, (int)m->message_len, m->message);
    fflush(stdout);
}

static void on_event(const rcp_event *ev, void *data)
{
    (void)data;
    if (ev->type == RCP_EVENT_PUBSUB_INTERRUPTED || ev->type == RCP_EVENT_PUBSUB_RESUBSCRIBED)
        fprintf(stderr, "event: %s\n", ev->message);
}

int main(int argc, char **argv)
{
    rcp_cluster_options co;
    rcp_pubsub_options po;
    rcp_cluster *cl = NULL;
    rcp_pubsub *ps = NULL;
    char err[1024];
    int rc, i, seconds = argc > 2 ? atoi(argv[2]) : 5;

    if (argc < 2) {
        fprintf(stderr, "usage: %s SEED_HOST:PORT [SECONDS]\n", argv[0]);
        return 2;
    }
    rcp_cluster_options_init(&co);
    co.seeds = argv[1];
    co.event_cb = on_event; /* the subscriber reports through the handle */
    rc = rcp_cluster_open(&co, &cl, err, sizeof err);
    if (rc != RCP_OK) {
        fprintf(stderr, "open: %s: %s\n", rcp_strerror(rc), err);
        return 1;
    }
    rcp_pubsub_options_init(&po);
    po.msg_cb = on_message;
    rc = rcp_pubsub_open(cl, &po, &ps, err, sizeof err);
    if (rc != RCP_OK) {
        fprintf(stderr, "pubsub: %s: %s\n", rcp_strerror(rc), err);
        rcp_cluster_close(cl);
        return 1;
    }
    if ((rc = rcp_pubsub_ssubscribe(ps, "orders", 6)) != RCP_OK ||
        (rc = rcp_pubsub_subscribe(ps, "news", 4)) != RCP_OK) {
        fprintf(stderr, "subscribe: %s\n", rcp_strerror(rc));
        rcp_pubsub_close(ps);
        rcp_cluster_close(cl);
        return 1;
    }
    for (i = 0; i < seconds; i++) {
        char msg[32];
        rcp_reply *r;
        snprintf(msg, sizeof msg, "order %d", i);
        /* SPUBLISH is routed by the channel's slot, like a key. */
        r = rcp_cluster_command(cl, "SPUBLISH orders %s", msg);
        if (r->type != RCP_REPLY_INTEGER)
            fprintf(stderr, "SPUBLISH: %s\n", r->str);
        rcp_reply_free(r);
        r = rcp_cluster_command(cl, "PUBLISH news %s", msg);
        rcp_reply_free(r);
        sleep(1);
    }
    rcp_pubsub_close(ps); /* before the handle */
    rcp_cluster_close(cl);
    return 0;
}
