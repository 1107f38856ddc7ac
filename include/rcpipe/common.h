/* rcpipe/common.h: export macro, version, error codes, allocator hooks.
 *
 * Everything here is shared by every other public header. The error enum is
 * only ever appended to: a code's number never changes once released. */
#ifndef RCPIPE_COMMON_H
#define RCPIPE_COMMON_H

#include <stddef.h>

#include "rcpipe/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(RCP_BUILDING_LIBRARY) && defined(__GNUC__)
#define RCP_API __attribute__((visibility("default")))
#else
#define RCP_API
#endif

/* Error codes. RCP_OK is 0; every other value is a distinct failure.
 * Client-side errors reach callers as error replies (rcp_reply.err) or as
 * return values of functions that take no callback. */
typedef enum rcp_err {
    RCP_OK = 0,
    RCP_ERR_INVALID = 1,           /* bad argument from the caller (NULL, argc 0, ...) */
    RCP_ERR_OOM = 2,               /* an allocation failed */
    RCP_ERR_IO = 3,                /* written, then the connection failed: the server may have applied it */
    RCP_ERR_NOT_SENT = 4,          /* never written to any server: safe to resend anywhere */
    RCP_ERR_TIMEOUT = 5,           /* the request's deadline passed before its reply came */
    RCP_ERR_QUEUE_FULL = 6,        /* the connection's in-flight or pending-bytes cap was reached */
    RCP_ERR_PROTOCOL = 7,          /* the server sent something that is not valid RESP */
    RCP_ERR_CLOSED = 8,            /* the handle was closed */
    RCP_ERR_CONNECT = 9,           /* could not connect (refused, unreachable, connect timeout) */
    RCP_ERR_AUTH = 10,             /* AUTH / CLIENT SETNAME refused during the handshake */
    RCP_ERR_BLOCKING_COMMAND = 11, /* a blocking command on a shared pipelined connection */
    RCP_ERR_UNSUPPORTED = 12,      /* a command that changes connection state (MULTI, SUBSCRIBE, SELECT...) */
    RCP_ERR_TOO_LARGE = 13,        /* a request larger than max_request_bytes */
    RCP_ERR_SERVER = 14,           /* the server answered with an error reply; its text is kept */
    RCP_ERR_CLUSTER_DOWN = 15,     /* the slot is served by no node of the map (a server's own
                                    * CLUSTERDOWN past retries is RCP_ERR_SERVER) */
    RCP_ERR_CROSS_SLOT = 16,       /* a command's keys hash to different slots */
    RCP_ERR_REDIRECT_LIMIT = 17,   /* more MOVED/ASK redirects than max_redirects */
    RCP_ERR_TYPE = 18,             /* a reply is not of the type asked for (rcp_reply_int of a nil...) */
    RCP_ERR_CANCELLED = 19,        /* cancelled by the caller (rcp_conn_cancel, rcp_cluster_cancel):
                                    * the call's result says whether it was ever written */
    RCP_ERR_SINK = 20,             /* a streamed value's sink failed, or the value was larger than
                                    * its buffer: the rest of the value was read and discarded, the
                                    * connection kept (rcp_sink) */
    RCP_ERR__COUNT                 /* not an error: the number of codes */
} rcp_err;

/* Static text naming the code (never NULL, never to be freed). */
RCP_API const char *rcp_strerror(int code);
/* The code's identifier, e.g. "RCP_ERR_IO" (static text; "RCP_ERR_UNKNOWN"
 * for a value that is no code), for logs and tests. */
RCP_API const char *rcp_err_name(int code);

/* Every event type, of connections, cluster handles and subscribers
 * (rcp_event.type). Only ever appended to. */
typedef enum rcp_event_type {
    /* A connection to one node (rcp_conn, or a cluster handle's node
     * connection: host and port name the node). */
    RCP_EVENT_CONNECTED = 1,      /* handshake done, ready for requests */
    RCP_EVENT_DISCONNECTED = 2,   /* connection lost or closed; err says why */
    RCP_EVENT_CONNECT_FAILED = 3, /* a (re)connect attempt failed; err says why */
    RCP_EVENT_CLOSED = 4,         /* the handle finished closing */
    /* A cluster handle (host ""). */
    RCP_EVENT_MAP_UPDATED = 16,   /* a new slot map was published; message says why */
    RCP_EVENT_REFRESH_FAILED = 17, /* no node gave a valid slot table; message names each
                                    * node asked and why; the old map stays */
    /* A subscriber (rcp_pubsub; host "", the message names the channel and
     * the node(s)). */
    RCP_EVENT_PUBSUB_INTERRUPTED = 32, /* a subscription was lost: its slot left the node
                                        * (the server's own "sunsubscribe"), MOVED, or its
                                        * connection dropped; err says why; the subscriber
                                        * is already re-subscribing it */
    RCP_EVENT_PUBSUB_RESUBSCRIBED = 33 /* a subscription lost earlier is established
                                        * again: the server confirmed it on the node named
                                        * in the message */
} rcp_event_type;

/* The type's identifier, e.g. "RCP_EVENT_MAP_UPDATED" (static text;
 * "RCP_EVENT_UNKNOWN" for a value that is no type). */
RCP_API const char *rcp_event_name(int type);

typedef struct rcp_event {
    int type;            /* rcp_event_type */
    int err;             /* rcp_err, RCP_OK for CONNECTED */
    const char *host;    /* valid during the callback */
    int port;
    const char *message; /* human-readable, valid during the callback */
} rcp_event;

/* Called on an I/O thread (a subscriber's events: its own thread); must
 * not block and must not close the handle that reports it. */
typedef void (*rcp_event_fn)(const rcp_event *ev, void *data);

/* Library version: "MAJOR.MINOR.PATCH" (static text), and as a number
 * MAJOR*10000 + MINOR*100 + PATCH. */
RCP_API const char *rcp_version(void);
RCP_API int rcp_version_number(void);

/* Allocator hooks. Set once, before any other rcpipe call; every allocation
 * the library makes for its own objects (handles, buffers, replies) goes
 * through them. All four must be thread-safe. hiredis 0.14's reader buffer
 * uses the C library's allocator directly: it cannot be hooked in that
 * version. Returns RCP_ERR_INVALID if any pointer is NULL. */
typedef struct rcp_allocator {
    void *(*malloc_fn)(size_t size);
    void *(*calloc_fn)(size_t n, size_t size);
    void *(*realloc_fn)(void *ptr, size_t size);
    void (*free_fn)(void *ptr);
} rcp_allocator;

RCP_API int rcp_set_allocator(const rcp_allocator *a);
/* Back to the C library's allocator. */
RCP_API void rcp_reset_allocator(void);

/* Waiting for a group of async requests, instead of spinning on a flag:
 * rcp_waitgroup_add(wg, 1) before each send, rcp_waitgroup_done(wg) in its
 * resolve callback (or right away if the send returned an error: then the
 * callback never runs), rcp_waitgroup_wait(wg, ms) until every one is
 * done. Any thread may add and done; the count may dip below zero while a
 * callback outruns its add. wait: RCP_OK once the count is zero;
 * RCP_ERR_TIMEOUT if it is not after timeout_ms (0: do not wait; < 0: no
 * limit); RCP_ERR_INVALID for NULL, or on an I/O or loop thread (a resolve
 * callback), where the callbacks it waits for could not run. Free it once
 * no callback can still call done. */
typedef struct rcp_waitgroup rcp_waitgroup;
RCP_API rcp_waitgroup *rcp_waitgroup_new(void); /* NULL when out of memory */
RCP_API void rcp_waitgroup_add(rcp_waitgroup *wg, int n);
RCP_API void rcp_waitgroup_done(rcp_waitgroup *wg);
RCP_API int rcp_waitgroup_wait(rcp_waitgroup *wg, int timeout_ms);
RCP_API long rcp_waitgroup_pending(const rcp_waitgroup *wg); /* adds minus dones */
RCP_API void rcp_waitgroup_free(rcp_waitgroup *wg);

#ifdef __cplusplus
}
#endif

#endif
