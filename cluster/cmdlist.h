/* cluster/cmdlist.h: a growable list of formatted commands, for
 * transactions and batches (cmdlist.c). */
#ifndef RCP_CMDLIST_H
#define RCP_CMDLIST_H

#include <stdarg.h>
#include <stddef.h>

typedef struct rcp__cmdlist {
    size_t n, cap;
    char **buf;
    size_t *len;
} rcp__cmdlist;

/* Formats and appends argv (screened: blocking and connection-state
 * commands are refused; one larger than max_bytes, the handle's
 * max_request_bytes, gets RCP_ERR_TOO_LARGE). RCP_OK or an error code, the
 * list unchanged. */
int rcp__cmdlist_add(rcp__cmdlist *l, size_t max_bytes, int argc, const char **argv,
                     const size_t *argvlen);
/* Formats a hiredis-style command and hands its arguments to take(data,
 * ...); returns take's code (or the formatting error). */
/* The body of a printf-style add function (rcp_batch_add, rcp_txn_add):
 * RCP_ERR_INVALID for a NULL object, else the variadic arguments after
 * fmt formatted and handed to take(obj, ...). */
#define RCP__CMD_FORMATTED_ADD(obj, fmt, take)                                                     \
    do {                                                                                           \
        va_list ap_;                                                                               \
        int rv_;                                                                                   \
        if (!(obj))                                                                                \
            return RCP_ERR_INVALID;                                                                \
        va_start(ap_, fmt);                                                                        \
        rv_ = rcp__cmd_formatted(fmt, ap_, take, obj);                                             \
        va_end(ap_);                                                                               \
        return rv_;                                                                                \
    } while (0)

int rcp__cmd_formatted(const char *fmt, va_list ap,
                       int (*take)(void *data, int argc, const char **argv, const size_t *argvlen),
                       void *data);
void rcp__cmdlist_clear(rcp__cmdlist *l);
void rcp__cmdlist_free(rcp__cmdlist *l);

#endif
