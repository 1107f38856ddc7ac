/* lib/options.c: what values the connection options may take. A value out
 * of range is refused when the handle is opened, with the option's name,
 * the value and the range, instead of failing later as an empty "connect
 * failed". The ranges are documented in docs/api.md. */
#include <limits.h>
#include <stdio.h>

#include "options.h"

#define MAX_INFLIGHT (1u << 24)

/* A size for the range check (no size option comes near LLONG_MAX). */
static long long as_ll(size_t v)
{
    return v > (size_t)LLONG_MAX ? LLONG_MAX : (long long)v;
}

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
    {
        const rcp__opt_range r[] = {
            {"connect_timeout_ms", o->connect_timeout_ms, 1, RCP__NO_MAX},
            {"max_inflight", o->max_inflight, 1, MAX_INFLIGHT},
            {"max_batch_commands", o->max_batch_commands, 1, RCP__NO_MAX},
            {"max_batch_bytes", as_ll(o->max_batch_bytes), 1, RCP__NO_MAX},
            {"max_pending_bytes", as_ll(o->max_pending_bytes), 1, RCP__NO_MAX},
            {"max_request_bytes", as_ll(o->max_request_bytes), 1, RCP__NO_MAX},
            {"max_reply_bytes", as_ll(o->max_reply_bytes), 1, RCP__NO_MAX},
        };
        if (rcp__opt_ranges_check(r, sizeof r / sizeof r[0], why, len) != RCP_OK)
            return RCP_ERR_INVALID;
    }
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

int rcp__opt_ranges_check(const rcp__opt_range *r, size_t n, char *why, size_t len)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if (r[i].value >= r[i].lo &&
            (r[i].hi == RCP__NO_MAX || (unsigned long long)r[i].value <= r[i].hi))
            continue;
        if (r[i].hi == RCP__NO_MAX)
            snprintf(why, len, "%s %lld is out of range (at least %lld)", r[i].name, r[i].value,
                     r[i].lo);
        else
            snprintf(why, len, "%s %lld is out of range (%lld..%llu)", r[i].name, r[i].value,
                     r[i].lo, r[i].hi);
        return RCP_ERR_INVALID;
    }
    return RCP_OK;
}
