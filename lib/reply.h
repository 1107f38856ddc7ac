/* lib/reply.h: reply objects built straight from the hiredis reader, and
 * client-error replies. */
#ifndef RCP_REPLY_INT_H
#define RCP_REPLY_INT_H

#include <hiredis/read.h>

#include "rcpipe/reply.h"

#define RCP__REPLY_STACK 0x2u  /* lives on a stack frame: keep must copy */
#define RCP__REPLY_STATIC 0x4u /* static storage: never freed */
#define RCP__REPLY_SMALL 0x8u  /* from the per-thread cache of small replies */
#define RCP__REPLY_GROWING 0x10u /* an array still being read: its element array grows with
                                * the elements received (integer: how many are announced,
                                * len: the room there is) */

/* Reader object functions producing rcp_reply trees (one allocation per
 * node: strings and element arrays are stored inline). */
extern redisReplyObjectFunctions rcp__reply_functions;

/* A client-error reply in caller-provided storage (flagged STACK). The
 * message is not copied: it must outlive the reply's use. */
void rcp__reply_error_init(rcp_reply *r, int code, const char *msg);

/* A heap client-error reply the caller owns; on OOM a static reply. */
rcp_reply *rcp__reply_error_new(int code, const char *msg);

/* Heap replies built by the library itself (merged multi-key answers):
 * NULL on OOM. An array's elements start NULL and are owned by it. */
rcp_reply *rcp__reply_array_new(size_t n);
rcp_reply *rcp__reply_integer_new(long long v);
rcp_reply *rcp__reply_status_new(const char *s);

/* After a resolve callback, on the thread that ran it: free the reply
 * unless the callback kept it (rcp_reply_keep). Never reads a kept reply. */
void rcp__reply_release(rcp_reply *r);

/* A callback that kept its reply and then ran another callback (whose
 * keep/release cleared the mark): marks the reply kept again, so its own
 * caller does not free it. Only for a reply rcp_reply_keep returned as
 * itself (a heap reply); r is not dereferenced (it may be freed already
 * by whoever received it meanwhile). */
void rcp__reply_rekeep(rcp_reply *r);

/* Frees the calling thread's cache of small replies (see reply.c). */
void rcp__reply_cache_drop(void);

/* Creates a reader using rcp__reply_functions; NULL on OOM. */
redisReader *rcp__reader_new(void);

/* A whole bulk string at the reader's cursor, parsed without hiredis's
 * general path: 1 with *reply set, 0 if redisReaderGetReply must run. */
int rcp__reader_fast(redisReader *rd, void **reply);

/* How much of one reply a reader may build (the connection's
 * max_reply_bytes): object bytes are counted from each reply's first
 * object on; past max the reader stops with an error and exceeded is set.
 * Hung off the reader's privdata by rcp__reader_new_budget. */
typedef struct rcp__reply_budget {
    size_t max, used;
    int exceeded;
} rcp__reply_budget;
redisReader *rcp__reader_new_budget(rcp__reply_budget *b);

#endif
