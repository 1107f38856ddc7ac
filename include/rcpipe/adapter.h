/* rcpipe/adapter.h: run connections on the application's own event loop.
 *
 * By default an rcp_conn runs on I/O threads of its own. With an rcp_loop
 * (rcp_conn_options.loop) it runs on the application's loop instead:
 * resolve callbacks and events fire on the thread that runs that loop,
 * while any thread may still send (a cross-thread wake through an eventfd
 * the loop watches). The library needs three things of a loop, in the
 * spirit of hiredis's adapters: watch a file descriptor for readability
 * and writability, one timer, and a way to call back in. Ready-made
 * adapters: rcpipe/libevent.h (libevent 2), rcpipe/libuv.h (libuv 1), each
 * header-only; write your own for another loop with rcp_loop_adapter.
 *
 * Rules:
 *   - Create the loop, open connections on it, run the application's loop;
 *     close every connection before rcp_loop_free. rcp_conn_open with a
 *     loop does not wait for the connection: it returns at once and the
 *     connection connects when the loop runs (RCP_EVENT_CONNECTED, or
 *     RCP_EVENT_CONNECT_FAILED). Requests sent meanwhile wait behind the
 *     handshake.
 *   - rcp_conn_close of such a connection must be called on the loop's
 *     thread outside rcpipe's callbacks (from one of the application's own
 *     callbacks, or after its loop returned), or on another thread while
 *     the loop runs.
 *   - The sync calls (rcp_conn_command...) must not be made on the loop's
 *     thread: once the loop has called into rcpipe on a thread they are
 *     refused there with RCP_ERR_INVALID (they would wait for the loop they
 *     block). Other threads may use them as usual.
 *   - A cluster handle with node options on a loop (rcp_cluster_options.node
 *     ->loop) follows the same rules for rcp_cluster_close and
 *     rcp_pubsub_close, and may be opened on the loop's thread before the
 *     loop runs: its refresher keeps one I/O thread of its own for
 *     CLUSTER SLOTS, so the bootstrap and refreshes never wait for it.
 *   - Timer precision is the loop's: libuv's timers are in milliseconds, so
 *     a batch_delay_us pause under libuv lasts at least a millisecond. */
#ifndef RCPIPE_ADAPTER_H
#define RCPIPE_ADAPTER_H

#include "rcpipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rcp_loop rcp_loop;

/* Interest and readiness bits. */
enum { RCP_LOOP_READ = 1, RCP_LOOP_WRITE = 2 };

/* What the library asks of the application's loop. Every function is
 * called on the loop's thread (or before the loop runs, from the thread
 * that creates the loop and its connections), never concurrently. */
typedef struct rcp_loop_adapter {
    void *data; /* handed back to every function below */
    /* Watch fd: when it is readable (interest has RCP_LOOP_READ) or
     * writable (RCP_LOOP_WRITE), call rcp_loop_on_fd(loop, fd, ready) with
     * the bits that are ready. Level-triggered is expected (as select,
     * libevent and libuv are). Replaces the previous interest for fd;
     * interest 0 stops watching it but keeps it known. *fd_data is the
     * adapter's own per-fd slot, kept by the library: NULL the first time
     * an fd is watched; store the watcher there (an event, a handle).
     * Returns 0, or -1 if the fd cannot be watched. */
    int (*watch)(void *data, rcp_loop *loop, int fd, int interest, void **fd_data);
    /* Forget fd (it is about to be closed) and release its fd_data. */
    void (*unwatch)(void *data, int fd, void *fd_data);
    /* Arm the one timer to call rcp_loop_on_timer(loop) after timeout_us
     * microseconds, replacing any armed one; timeout_us < 0 disarms it.
     * 0: as soon as possible, and best after the events the loop has
     * ready now but before it waits again: after a socket event rcpipe
     * arms it at 0 to write, once, what that event's and the other ready
     * events' callbacks sent (libevent: event_active; libuv: a 0 ms timer
     * runs before the next poll). A plain zero timeout works too, at the
     * cost of one more wait call per pass. */
    void (*timer)(void *data, rcp_loop *loop, long long timeout_us);
    /* The rcp_loop is being freed: release what the adapter holds (its
     * watchers, its timer, data). Called once, from rcp_loop_free. */
    void (*cleanup)(void *data);
} rcp_loop_adapter;

/* Create a loop driven by the application's loop through `a` (copied).
 * Watches an eventfd of its own through a->watch. Returns NULL on failure
 * (out of memory, no eventfd, a->watch refused it); then a->cleanup has
 * been called. */
RCP_API rcp_loop *rcp_loop_new(const rcp_loop_adapter *a);

/* Free the loop; every connection on it must have been closed. Calls the
 * adapter's cleanup. On the loop's thread, outside rcpipe's callbacks.
 * NULL is ignored. */
RCP_API void rcp_loop_free(rcp_loop *loop);

/* Called by the adapter, on the loop's thread. */
RCP_API void rcp_loop_on_fd(rcp_loop *loop, int fd, int ready);
RCP_API void rcp_loop_on_timer(rcp_loop *loop);

#ifdef __cplusplus
}
#endif

#endif
