/* lib/errors.c: names of error codes and the library version. */
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
};

const char *rcp_strerror(int code)
{
    if (code < 0 || code >= RCP_ERR__COUNT || !names[code])
        return "unknown error code";
    return names[code];
}

const char *rcp_version(void)
{
    return RCP_VERSION_STRING;
}

int rcp_version_number(void)
{
    return RCP_VERSION_NUMBER;
}
