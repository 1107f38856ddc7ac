/* lib/errors.c: names of error codes and event types, and the library
 * version. */
#include "rcpipe/common.h"

static const char *const names[RCP_ERR__COUNT] = {
    [RCP_OK] = "success",
    [RCP_ERR_INVALID] = "invalid argument",
    [RCP_ERR_OOM] = "out of memory",
    [RCP_ERR_IO] = "I/O error after the request was written (it may have been applied)",
    [RCP_ERR_NOT_SENT] = "request not sent (safe to resend)",
    [RCP_ERR_TIMEOUT] = "request timed out",
    [RCP_ERR_QUEUE_FULL] = "queue full",
    [RCP_ERR_PROTOCOL] = "protocol error in server reply",
    [RCP_ERR_CLOSED] = "handle closed",
    [RCP_ERR_CONNECT] = "connection failed",
    [RCP_ERR_AUTH] = "authentication or handshake refused",
    [RCP_ERR_BLOCKING_COMMAND] = "blocking command refused on a shared pipelined connection",
    [RCP_ERR_UNSUPPORTED] = "command changes connection state; not allowed on a shared connection",
    [RCP_ERR_TOO_LARGE] = "request too large",
    [RCP_ERR_SERVER] = "server error reply",
    [RCP_ERR_CLUSTER_DOWN] = "cluster down or slot not served",
    [RCP_ERR_CROSS_SLOT] = "keys in request don't hash to the same slot",
    [RCP_ERR_REDIRECT_LIMIT] = "too many redirects",
    [RCP_ERR_TYPE] = "reply is not of the type asked for",
    [RCP_ERR_CANCELLED] = "cancelled by the caller (the cancel call said whether it was "
                          "written)",
    [RCP_ERR_SINK] = "sink failed or value larger than the buffer; rest of the value discarded, "
                     "connection kept",
};

const char *rcp_strerror(int code)
{
    if (code < 0 || code >= RCP_ERR__COUNT || !names[code])
        return "unknown error code";
    return names[code];
}

#define N(x) [x] = #x
static const char *const ids[RCP_ERR__COUNT] = {
    N(RCP_OK), N(RCP_ERR_INVALID), N(RCP_ERR_OOM), N(RCP_ERR_IO), N(RCP_ERR_NOT_SENT),
    N(RCP_ERR_TIMEOUT), N(RCP_ERR_QUEUE_FULL), N(RCP_ERR_PROTOCOL), N(RCP_ERR_CLOSED),
    N(RCP_ERR_CONNECT), N(RCP_ERR_AUTH), N(RCP_ERR_BLOCKING_COMMAND), N(RCP_ERR_UNSUPPORTED),
    N(RCP_ERR_TOO_LARGE), N(RCP_ERR_SERVER), N(RCP_ERR_CLUSTER_DOWN), N(RCP_ERR_CROSS_SLOT),
    N(RCP_ERR_REDIRECT_LIMIT), N(RCP_ERR_TYPE), N(RCP_ERR_CANCELLED), N(RCP_ERR_SINK),
};

static const char *const events[RCP_EVENT_PUBSUB_RESUBSCRIBED + 1] = {
    N(RCP_EVENT_CONNECTED), N(RCP_EVENT_DISCONNECTED), N(RCP_EVENT_CONNECT_FAILED),
    N(RCP_EVENT_CLOSED), N(RCP_EVENT_MAP_UPDATED), N(RCP_EVENT_REFRESH_FAILED),
    N(RCP_EVENT_PUBSUB_INTERRUPTED), N(RCP_EVENT_PUBSUB_RESUBSCRIBED),
};
#undef N

const char *rcp_err_name(int code)
{
    if (code < 0 || code >= RCP_ERR__COUNT || !ids[code])
        return "RCP_ERR_UNKNOWN";
    return ids[code];
}

const char *rcp_event_name(int type)
{
    if (type < 0 || type >= (int)(sizeof events / sizeof events[0]) || !events[type])
        return "RCP_EVENT_UNKNOWN";
    return events[type];
}

const char *rcp_version(void)
{
    return RCP_VERSION_STRING;
}

int rcp_version_number(void)
{
    return RCP_VERSION_NUMBER;
}
