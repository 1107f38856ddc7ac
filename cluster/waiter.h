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

/* send_rv is what the async send returned: RCP_OK waits for the future,
 * anything else makes an error reply (what says which call refused).
 * Always a reply the caller frees; w is finished with. */
rcp_reply *rcp__waiter_wait(rcp__waiter *w, int send_rv, const char *what);

#endif
