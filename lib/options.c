/* lib/options.c: what values the connection options may take. A value out
 * of range is refused when the handle is opened, with the option's name,
 * the value and the range, instead of failing later as an empty "connect
 * failed". The ranges are documented in docs/api.md. */
#include <stdio.h>

#include "options.h"

#define MAX_INFLIGHT (1u << 24)

int rcp__conn_options_check(const rcp_conn_options *o, int with_address, char *why, size_t len)
{
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, len, __VA_ARGS__);                                                           \
        return RCP_ERR_INVALID;                                                                    \
    } while (0)
    if (!o)
        BAD("options are NULL");
    if (with_address && (!o->host || !*o->host))
        BAD("host is NULL or empty");
    if (with_address && (o->port < 1 || o->port > 65535))
        BAD("port %d is out of range (1..65535)", o->port);
    if (o->connect_timeout_ms < 1)
        BAD("connect_timeout_ms %d is out of range (at least 1)", o->connect_timeout_ms);
    if (o->max_inflight < 1 || o->max_inflight > MAX_INFLIGHT)
        BAD("max_inflight %u is out of range (1..%u)", o->max_inflight, MAX_INFLIGHT);
    if (o->max_batch_commands < 1)
        BAD("max_batch_commands %u is out of range (at least 1)", o->max_batch_commands);
    if (o->max_batch_bytes < 1)
        BAD("max_batch_bytes %zu is out of range (at least 1)", o->max_batch_bytes);
    if (o->max_pending_bytes < 1)
        BAD("max_pending_bytes %zu is out of range (at least 1)", o->max_pending_bytes);
    if (o->max_request_bytes < 1)
        BAD("max_request_bytes %zu is out of range (at least 1)", o->max_request_bytes);
    if (o->max_reply_bytes < 1)
        BAD("max_reply_bytes %zu is out of range (at least 1)", o->max_reply_bytes);
    if (o->queue_policy != RCP_QUEUE_BLOCK && o->queue_policy != RCP_QUEUE_FAIL)
        BAD("queue_policy %d is not RCP_QUEUE_BLOCK (0) or RCP_QUEUE_FAIL (1)", o->queue_policy);
    if (o->reconnect_min_ms < 0)
        BAD("reconnect_min_ms %d is out of range (at least 0)", o->reconnect_min_ms);
    if (o->reconnect_max_ms < o->reconnect_min_ms)
        BAD("reconnect_max_ms %d is less than reconnect_min_ms %d", o->reconnect_max_ms,
            o->reconnect_min_ms);
    if (o->io_threads > 64)
        BAD("io_threads %u is out of range (0 or 1..64)", o->io_threads);
    return RCP_OK;
#undef BAD
}
