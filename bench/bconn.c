/* bconn.c: see bconn.h. Each call is one branch on the kind of connection;
 * the plain branch is the hiredis call the bench made before TLS, so the
 * classic baseline without --tls costs what it did. */
#include "bconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#define BCONN_CONNECT_TIMEOUT_S 5

struct bconn {
    redisContext *rc; /* plain */
#ifdef RCP_BENCH_TLS
    tlsconn *tc; /* --tls */
#endif
};

#ifdef RCP_BENCH_TLS
static bool bconn_tls;

bool bconn_have_tls(void)
{
    return true;
}

bool bconn_tls_init(const tlsconn_settings *s, char *err, size_t errlen)
{
    if (!tlsconn_init(s, err, errlen))
        return false;
    bconn_tls = true;
    return true;
}

void bconn_tls_cleanup(void)
{
    if (bconn_tls)
        tlsconn_cleanup();
    bconn_tls = false;
}
#else
bool bconn_have_tls(void)
{
    return false;
}

bool bconn_tls_init(const tlsconn_settings *s, char *err, size_t errlen)
{
    (void)s;
    snprintf(err, errlen, "--tls: this rcp-bench was built without TLS");
    return false;
}

void bconn_tls_cleanup(void)
{
}
#endif

/* The unauthenticated connection; NULL with a message in err. */
static bconn *bconn_open(const char *host, int port, int io_timeout_s, char *err, size_t errlen)
{
    struct timeval tv = {BCONN_CONNECT_TIMEOUT_S, 0};
    bconn *c = calloc(1, sizeof(*c));

    if (!c) {
        snprintf(err, errlen, "cannot connect to %s:%d: out of memory", host, port);
        return NULL;
    }
#ifdef RCP_BENCH_TLS
    if (bconn_tls) {
        c->tc = tlsconn_connect(host, port, BCONN_CONNECT_TIMEOUT_S, io_timeout_s, err, errlen);
        if (!c->tc) {
            free(c);
            return NULL;
        }
        return c;
    }
#endif
    c->rc = redisConnectWithTimeout(host, port, tv);
    if (!c->rc || c->rc->err) {
        snprintf(err, errlen, "cannot connect to %s:%d: %s", host, port,
                 c->rc ? c->rc->errstr : "out of memory");
        bconn_free(c);
        return NULL;
    }
    /* The run must stop by itself even if the server hangs. */
    tv.tv_sec = io_timeout_s;
    redisSetTimeout(c->rc, tv);
    return c;
}

bconn *bconn_connect(const char *host, int port, const char *user, const char *password,
                     int io_timeout_s, char *err, size_t errlen)
{
    bconn *c = bconn_open(host, port, io_timeout_s, err, errlen);
    const char *argv[3];
    int argc = 0;
    redisReply *r;

    if (!c || !password)
        return c;
    argv[argc++] = "AUTH";
    if (user)
        argv[argc++] = user;
    argv[argc++] = password;
    r = bconn_command_argv(c, argc, argv, NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "AUTH on %s:%d failed: %s", host, port,
                 r ? r->str : bconn_errstr(c));
        if (r)
            freeReplyObject(r);
        bconn_free(c);
        return NULL;
    }
    freeReplyObject(r);
    return c;
}

void bconn_free(bconn *c)
{
    if (!c)
        return;
    if (c->rc)
        redisFree(c->rc);
#ifdef RCP_BENCH_TLS
    tlsconn_free(c->tc);
#endif
    free(c);
}

redisReply *bconn_command_argv(bconn *c, int argc, const char **argv, const size_t *argvlen)
{
#ifdef RCP_BENCH_TLS
    if (c->tc) {
        void *r = NULL;

        return bconn_append_argv(c, argc, argv, argvlen) == REDIS_OK &&
                       bconn_get_reply(c, &r) == REDIS_OK
                   ? r
                   : NULL;
    }
#endif
    return redisCommandArgv(c->rc, argc, argv, argvlen);
}

int bconn_append_argv(bconn *c, int argc, const char **argv, const size_t *argvlen)
{
#ifdef RCP_BENCH_TLS
    if (c->tc)
        return tlsconn_append_argv(c->tc, argc, argv, argvlen) == 0 ? REDIS_OK : REDIS_ERR;
#endif
    return redisAppendCommandArgv(c->rc, argc, argv, argvlen);
}

int bconn_get_reply(bconn *c, void **reply)
{
#ifdef RCP_BENCH_TLS
    if (c->tc)
        return tlsconn_get_reply(c->tc, reply) == 0 ? REDIS_OK : REDIS_ERR;
#endif
    return redisGetReply(c->rc, reply);
}

const char *bconn_errstr(const bconn *c)
{
#ifdef RCP_BENCH_TLS
    if (c->tc)
        return tlsconn_errstr(c->tc);
#endif
    return c->rc->errstr;
}
