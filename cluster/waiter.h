/* cluster/waiter.h: a sync call over the async path (waiter.c). */
#ifndef RCP_WAITER_H
#define RCP_WAITER_H

#include <pthread.h>

#include "rcpipe/conn.h"

typedef struct rcp__waiter {
    rcp_future f; /* hand this to the async send */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    rcp_reply *r;
} rcp__waiter;

void rcp__waiter_init(rcp__waiter *w);

/* The refusal every sync call gives on an I/O thread (it would wait for
 * the loop it is stopping): an error reply the caller returns, or NULL
 * when the call may go on. */
rcp_reply *rcp__sync_refused_on_loop(void);
/* Both: the refusal (w untouched), or NULL and w initialised. */
rcp_reply *rcp__waiter_start(rcp__waiter *w);

/* send_rv is what the async send returned: RCP_OK waits for the future,
 * anything else makes an error reply (what says which call refused).
 * Always a reply the caller frees; w is finished with. */
rcp_reply *rcp__waiter_wait(rcp__waiter *w, int send_rv, const char *what);
/* Instead of rcp__waiter_wait when the send was refused: tears the waiter
 * down and returns an error reply of code with msg as its text. */
rcp_reply *rcp__waiter_fail(rcp__waiter *w, int code, const char *msg);

/* Many requests waited for together: each slot's future gets its reply
 * (kept, owned by the slot). */
typedef struct rcp__gather rcp__gather;

typedef struct rcp__gather_slot {
    rcp_future f; /* hand this to the async send */
    rcp__gather *g;
    rcp_reply *r;
} rcp__gather_slot;

struct rcp__gather {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t left;
};

/* n slots; the sender holds one more reference until rcp__gather_wait. */
void rcp__gather_init(rcp__gather *g, rcp__gather_slot *slots, size_t n);
/* A slot whose send was refused: its reply is an error made here. */
void rcp__gather_refused(rcp__gather_slot *s, int code, const char *msg);
/* Waits for every slot; g is finished with. */
void rcp__gather_wait(rcp__gather *g);

#endif
