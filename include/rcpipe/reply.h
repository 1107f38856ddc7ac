/* rcpipe/reply.h: the reply type handed to callers.
 *
 * A reply is a read-only tree. Server replies and client-side errors share
 * one type: a client error is an RCP_REPLY_ERROR whose err is the rcp_err
 * code and whose str is a message; a server error reply has err
 * RCP_ERR_SERVER and keeps the server's text. Every other reply has err
 * RCP_OK. */
#ifndef RCPIPE_REPLY_H
#define RCPIPE_REPLY_H

#include <stddef.h>

#include "rcpipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Same numbers as hiredis's REDIS_REPLY_*. */
typedef enum rcp_reply_type {
    RCP_REPLY_STRING = 1,  /* bulk string: str/len, binary-safe, NUL-terminated too */
    RCP_REPLY_ARRAY = 2,   /* element[0 .. elements-1] */
    RCP_REPLY_INTEGER = 3, /* integer */
    RCP_REPLY_NIL = 4,     /* null bulk or null array */
    RCP_REPLY_STATUS = 5,  /* simple string such as "OK": str/len */
    RCP_REPLY_ERROR = 6    /* server or client error: str/len, err */
} rcp_reply_type;

typedef struct rcp_reply {
    int type;                  /* rcp_reply_type */
    int err;                   /* RCP_OK, RCP_ERR_SERVER, or a client error code */
    long long integer;         /* RCP_REPLY_INTEGER */
    size_t len;                /* length of str, without the trailing NUL */
    const char *str;           /* STRING, STATUS, ERROR: NUL-terminated, binary-safe via len */
    size_t elements;           /* RCP_REPLY_ARRAY */
    struct rcp_reply **element;
    unsigned rcp__flags;       /* internal: do not touch */
} rcp_reply;

/* Frees a reply the caller owns (one returned by a sync call, by
 * rcp_reply_keep or by rcp_reply_dup), with all its elements. NULL is
 * ignored. Never call it on a reply a callback merely received, nor on an
 * element of an array. */
RCP_API void rcp_reply_free(rcp_reply *r);

/* Inside a resolve callback: take ownership of the reply it received, so it
 * stays valid after the callback returns; free it later with
 * rcp_reply_free. Costs no copy for server replies. Returns NULL only if a
 * copy was needed and memory ran out. Call at most once per callback. */
RCP_API rcp_reply *rcp_reply_keep(rcp_reply *r);

/* A deep copy the caller owns, or NULL when out of memory. */
RCP_API rcp_reply *rcp_reply_dup(const rcp_reply *r);

/* 1 if the reply is an error reply (server or client), else 0. */
RCP_API int rcp_reply_is_error(const rcp_reply *r);

/* 1 if the reply is nil (a null bulk string or null array: GET of a
 * missing key, a watched EXEC that did not run), else 0 (NULL too). */
RCP_API int rcp_reply_is_nil(const rcp_reply *r);

/* The integer a reply holds: an RCP_REPLY_INTEGER's, or that of a STRING or
 * STATUS whose whole text is a base-10 integer within long long (what
 * INCR accepts: an optional '-', digits, no spaces, no '+', no leading
 * zero), as a counter read with GET is. Returns RCP_OK and sets *out; an
 * error reply's own code (its err: RCP_ERR_SERVER, or the client error,
 * say RCP_ERR_TIMEOUT); RCP_ERR_TYPE for anything else (nil, an array,
 * other text); RCP_ERR_INVALID if r or out is NULL. *out is set only on
 * RCP_OK. */
RCP_API int rcp_reply_int(const rcp_reply *r, long long *out);

/* The text of a STRING, STATUS or ERROR reply (binary-safe: *len bytes,
 * NUL-terminated too); for anything else (nil, integer, array, NULL) ""
 * with *len 0. Never NULL. len may be NULL. Valid as long as the reply. */
RCP_API const char *rcp_reply_str(const rcp_reply *r, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
