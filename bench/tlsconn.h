/* tlsconn.h: a small blocking RESP client over OpenSSL, because hiredis 0.14
 * has no TLS. It carries the bench's side channels (INFO, CLUSTER SLOTS,
 * the preload) and the classic baseline with --tls: one TCP connection, one
 * SSL session, requests formatted by hiredis (redisFormatCommandArgv),
 * replies parsed by a hiredis redisReader fed with what SSL_read returns,
 * so replies are ordinary redisReply objects (freeReplyObject).
 *
 * The bench reaches it only through bconn.h, which picks hiredis or this.
 * Built only when rcp-bench has TLS (RCP_BENCH_TLS). */
#ifndef RCP_BENCH_TLSCONN_H
#define RCP_BENCH_TLSCONN_H

#include <stdbool.h>
#include <stddef.h>

/* --tls, --cacert, --cert, --key, --sni, --tls-skip-verify. Strings are not
 * copied; NULL: not given. */
typedef struct tlsconn_settings {
    const char *ca_file;   /* NULL: the system's default store */
    const char *cert_file; /* client certificate (PEM), with key_file */
    const char *key_file;
    const char *sni;       /* NULL: the host connected to (an address: no SNI) */
    bool skip_verify;      /* no verification of the server at all */
} tlsconn_settings;

/* The one OpenSSL context of the process: trust store, client certificate,
 * verification mode. Made once before any thread connects, shared by every
 * connection (SSL_new on a shared context is thread-safe). false with a
 * message naming the file or the cause in err. */
bool tlsconn_init(const tlsconn_settings *s, char *err, size_t errlen);
void tlsconn_cleanup(void);

typedef struct tlsconn tlsconn;

/* TCP connect (within connect_timeout_s), then the TLS handshake (within
 * the same bound) checking the server against the settings; afterwards
 * every read and write is bounded by io_timeout_s. NULL with the cause in
 * err ("host:port: ..."). */
tlsconn *tlsconn_connect(const char *host, int port, int connect_timeout_s, int io_timeout_s,
                         char *err, size_t errlen);
void tlsconn_free(tlsconn *c);

/* Queues one request (sent by the next tlsconn_get_reply). -1: out of
 * memory. */
int tlsconn_append_argv(tlsconn *c, int argc, const char **argv, const size_t *argvlen);

/* The next reply, as redisGetReply: a reply already parsed is returned at
 * once, otherwise the queued requests are written (SSL_write) and replies
 * read (SSL_read) until one is complete. 0 with *reply set, or -1 and the
 * connection is broken for good (tlsconn_errstr says why). */
int tlsconn_get_reply(tlsconn *c, void **reply);

/* Why the last call failed ("" if none did). */
const char *tlsconn_errstr(const tlsconn *c);

#endif
