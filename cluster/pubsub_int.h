/* cluster/pubsub_int.h: the subscriber's internals, shared by pubsub.c
 * (the thread and the public API) and pubsub_chan.c (channels, their
 * placement on the slot's owner, the subscriber's connections and their
 * replies). Everything here belongs to the subscriber's thread, except
 * what is marked "under mu". The connections are lib/'s push connections
 * (lib/connection.h): their replies and events arrive on I/O threads and
 * are handed to the subscriber's thread through a queue. */
#ifndef RCP_PUBSUB_INT_H
#define RCP_PUBSUB_INT_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "cluster_int.h"
#include "logic.h"
#include "reply.h"
#include "rcpipe/pubsub.h"

#define MS 1000000ull
#define MAX_POLL 256       /* connections watched at once (one per master + classic) */

enum { OP_SUB, OP_UNSUB, OP_PING };
enum { CH_IDLE, CH_PENDING, CH_ACTIVE };

/* A caller's request, shared by the caller (waiting) and the thread; the
 * last of the two to let go frees it. done/code/refs under ps->mu. */
typedef struct req {
    int op, kind;
    char *name;
    size_t len;
    int done, code, refs;
    struct req *next; /* the queue, then the channel's waiters */
} req;

/* What a connection's I/O thread hands the subscriber's thread: a reply
 * (kept) or a connection event. */
typedef struct psitem {
    struct psconn *k;
    rcp_reply *r;          /* NULL: an event */
    int type, err;         /* event: RCP_EVENT_*, its error */
    char why[200];
    struct psitem *next;
} psitem;

/* A command written on a connection, awaiting its answer. */
typedef struct pend {
    int op, kind;
    char *name;
    size_t len;
    struct req *waiter;    /* an unsubscribe: the caller, answered with the server's */
    struct pend *next;
} pend;

typedef struct psconn {
    struct rcp_pubsub *ps;
    char host[256];
    int port;
    char addr[280];
    int classic;           /* the classic (SUBSCRIBE/PSUBSCRIBE) connection */
    struct rcp_conn *conn; /* a push connection (lib/conn_push.c); NULL until needed */
    int up;                /* connected: between its CONNECTED and DISCONNECTED events */
    uint64_t last_read;    /* ns */
    int ping_out;          /* a PING awaits its answer */
    pend *phead, *ptail;
    int users;             /* channels on it (counted at each check) */
    struct psconn *next;
} psconn;

typedef struct chan {
    int kind;
    char *name;
    size_t len;
    unsigned slot;
    int state;             /* CH_* */
    psconn *conn;          /* PENDING/ACTIVE: where */
    uint64_t retry_at;     /* IDLE: not placed before */
    int tries;             /* transient refusals in a row */
    int interrupted;       /* lost since last confirmed: report the next confirmation */
    int confirmed_once;
    char was[280];         /* the node it was lost on */
    req *waiters;
    struct chan *next;
} chan;

struct rcp_pubsub {
    rcp_cluster *cl;
    rcp_pubsub_msg_fn msg_cb;
    void *msg_data;
    int timeout_ms, recheck_ms;
    int io_timeout_ms;     /* a subscribed connection's liveness: PING, then give up */
    int classic_fixed;     /* classic node given by the caller */
    char classic_host[256];
    int classic_port;      /* 0: pick one */
    unsigned classic_pick;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    req *qhead, *qtail;    /* under mu */
    psitem *ihead, *itail; /* under mu: from the connections' I/O threads */
    int stopping;          /* under mu */
    int inside;            /* callers in call(), under mu */
    int efd;
    pthread_t th;
    atomic_int done;       /* the thread returned */

    /* the thread's own */
    chan *chans;
    psconn *conns;
    uint64_t next_check;

    _Atomic unsigned long long st_messages, st_dropped, st_resubscribes, st_interruptions,
        st_moved, st_connects, st_connect_failures;
};

/* pubsub_chan.c, for pubsub.c */
/* The caller or the thread is done with r: the last one frees it.
 * Returns 1 if the caller was still waiting. */
int rcp__ps_req_complete(rcp_pubsub *ps, req *r, int code);
/* A caller's (un)subscribe or ping, on the thread. */
void rcp__ps_handle_req(rcp_pubsub *ps, req *r, uint64_t now);
/* Act on what the connections' I/O threads handed over: replies and
 * connection events, in order. */
void rcp__ps_drain(rcp_pubsub *ps, uint64_t now);
/* Close k's connection and drop what it still had queued for us. */
void rcp__ps_conn_close(rcp_pubsub *ps, psconn *k);
/* Subscribe c on its owner now if possible, else set when to try again. */
void rcp__ps_chan_place(rcp_pubsub *ps, chan *c, uint64_t now);
/* The re-check of every channel's owner against the map, PINGs of quiet
 * connections, and the freeing of unused connections. */
void rcp__ps_periodic(rcp_pubsub *ps, uint64_t now);
void rcp__ps_free_chan(rcp_pubsub *ps, chan *c);
void rcp__ps_free_pends(psconn *k);
char *rcp__ps_dup_bytes(const char *s, size_t len);

#endif
