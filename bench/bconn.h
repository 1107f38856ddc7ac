/* bconn.h: the bench's blocking connection for everything that is not
 * rcpipe: the side channels (INFO for the server's CPU, CLUSTER SLOTS for
 * slotmap.c, the preload) and the classic request/response baseline. A
 * plain hiredis redisContext, or with --tls the OpenSSL client of
 * tlsconn.h; the callers are written once against this interface and do
 * not know which.
 *
 * Replies are hiredis redisReply objects either way (freeReplyObject). A
 * connection is used by one thread at a time; after an I/O error it is
 * broken for good, as a hiredis context is. */
#ifndef RCP_BENCH_BCONN_H
#define RCP_BENCH_BCONN_H

#include <stdbool.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

#include "tlsconn.h"

typedef struct bconn bconn;

/* true if this rcp-bench was built with TLS (RCP_BENCH_TLS). */
bool bconn_have_tls(void);

/* With --tls, before any connection (and any thread): every bconn from now
 * on speaks TLS with these settings. false with the cause in err (a file
 * that does not load, or a build without TLS). */
bool bconn_tls_init(const tlsconn_settings *s, char *err, size_t errlen);
void bconn_tls_cleanup(void);

/* A connection to host:port, authenticated (AUTH [user] password when
 * password is not NULL), with io_timeout_s bounding every later read and
 * write. NULL on failure with a message in err. */
bconn *bconn_connect(const char *host, int port, const char *user, const char *password,
                     int io_timeout_s, char *err, size_t errlen);
void bconn_free(bconn *c);

/* One request and its reply, as redisCommandArgv: NULL on an I/O error
 * (bconn_errstr says why). */
redisReply *bconn_command_argv(bconn *c, int argc, const char **argv, const size_t *argvlen);

/* Pipelining, as redisAppendCommandArgv and redisGetReply: REDIS_OK or
 * REDIS_ERR (out of memory, or an I/O error: bconn_errstr). */
int bconn_append_argv(bconn *c, int argc, const char **argv, const size_t *argvlen);
int bconn_get_reply(bconn *c, void **reply);

/* Why the last call failed. */
const char *bconn_errstr(const bconn *c);

#endif
