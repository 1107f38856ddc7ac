/* lib/tls_none.c: the TLS calls of a build without TLS (-Dtls=disabled,
 * or no OpenSSL found with -Dtls=auto). options.c refuses every TLS
 * option first (RCP_ERR_UNSUPPORTED); what is left here only answers the
 * same if reached, and the session calls are never reached (c->tls stays
 * NULL). */
#include <errno.h>
#include <stdio.h>

#include "conn_int.h"
#include "tls.h"

int rcp__tls_cfg_get(const rcp_conn_options *o, rcp__tls_cfg **out, char *why, size_t len)
{
    (void)o;
    *out = NULL;
    snprintf(why, len, "this build of rcpipe has no TLS (built with -Dtls=disabled or without OpenSSL)");
    return RCP_ERR_UNSUPPORTED;
}

void rcp__tls_cfg_apply(const rcp__tls_cfg *cfg, rcp_conn_options *o)
{
    (void)cfg;
    (void)o;
}

void rcp__tls_cfg_put(rcp__tls_cfg *cfg)
{
    (void)cfg;
}

int rcp__tls_start(struct rcp_conn *c, char *why, size_t len)
{
    (void)c;
    snprintf(why, len, "this build of rcpipe has no TLS");
    return -1;
}

int rcp__tls_handshake(struct rcp_conn *c, int *want_write, char *why, size_t len)
{
    (void)c;
    *want_write = 0;
    snprintf(why, len, "this build of rcpipe has no TLS");
    return -1;
}

ssize_t rcp__tls_read(struct rcp_conn *c, char *buf, size_t cap, int flags)
{
    (void)c;
    (void)buf;
    (void)cap;
    (void)flags;
    errno = EPROTO;
    return CONN_IO_TLS;
}

int rcp__tls_write(struct rcp_conn *c, const char *buf, size_t len, size_t *off)
{
    (void)c;
    (void)buf;
    (void)len;
    (void)off;
    errno = EPROTO;
    return CONN_IO_ERR;
}

int rcp__tls_peek(struct rcp_conn *c)
{
    (void)c;
    return 0;
}

const char *rcp__tls_why(struct rcp_conn *c)
{
    (void)c;
    return "this build of rcpipe has no TLS";
}

void rcp__tls_describe(struct rcp_conn *c, char *buf, size_t len)
{
    (void)c;
    snprintf(buf, len, "no TLS");
}

void rcp__tls_forget(struct rcp_conn *c)
{
    (void)c;
}

void rcp__tls_end(struct rcp_conn *c)
{
    (void)c;
}
