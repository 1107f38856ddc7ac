/* lib/tls.h: TLS for a connection (tls.c, OpenSSL 3), behind the few
 * calls conn*.c make. A connection with TLS has c->tls set from the end of
 * its TCP connect until its socket is closed; every read and write of the
 * loop and of the lone caller then goes through rcp__tls_read and
 * rcp__tls_write (conn_int.h), so the flush, the fast path and both loop
 * drivers share one TLS path.
 *
 * The SSL object reads and writes the socket through a BIO of ours that
 * calls send/recv with the connection's flags: MSG_DONTWAIT on the loop
 * (the socket itself is blocking once connected), none on the lone
 * caller's blocking read (bounded by SO_RCVTIMEO as in plain text).
 *
 * Contexts (trust store, client certificate, versions, ciphers) are
 * shared: one refcounted rcp__tls_cfg per distinct set of TLS options,
 * used by every connection made with them. Each connection keeps the
 * last session (ticket) the server gave it and offers it on its next
 * connect: a reconnect to the same node is an abbreviated handshake
 * while the server still knows the ticket.
 *
 * In a build without TLS (tls_none.c) the config calls refuse and the
 * session calls are never reached (options.c refuses every TLS option). */
#ifndef RCP_TLS_H
#define RCP_TLS_H

#include <stddef.h>
#include <sys/types.h>

#include "rcpipe/conn.h"

struct rcp_conn;
typedef struct rcp__tls_cfg rcp__tls_cfg;
typedef struct rcp__tls rcp__tls;

/* ---- shared configuration ---------------------------------------------- */

/* A config for o's TLS options (o->tls set), found among the live ones or
 * made (the files are loaded then). RCP_OK and *out with one reference,
 * or RCP_ERR_INVALID (a file that does not load, a cipher list OpenSSL
 * refuses) / RCP_ERR_OOM / RCP_ERR_UNSUPPORTED (no TLS in this build)
 * with why. Any thread. */
int rcp__tls_cfg_get(const rcp_conn_options *o, rcp__tls_cfg **out, char *why, size_t len);
/* Point o's tls_* strings at the config's own copies (valid while the
 * reference is held). */
void rcp__tls_cfg_apply(const rcp__tls_cfg *cfg, rcp_conn_options *o);
/* Drop a reference; the last one frees the config. NULL: no-op. */
void rcp__tls_cfg_put(rcp__tls_cfg *cfg);

/* ---- one connection's session (loop thread, or the lone caller while it
 * owns the socket) -------------------------------------------------------- */

/* TCP is connected on c->fd: make the session. 0, or -1 with why. */
int rcp__tls_start(struct rcp_conn *c, char *why, size_t len);
/* Drive the handshake: 1 done, 0 not yet (*want_write: it waits for
 * writability, else for readability), -1 failed with why (the cause in
 * words: verification and its reason, a plain-text server, ...). */
int rcp__tls_handshake(struct rcp_conn *c, int *want_write, char *why, size_t len);
/* Decrypted bytes into buf: > 0, 0 on the server's close_notify, -1 with
 * errno EAGAIN (nothing more now), or CONN_IO_TLS: failed, rcp__tls_why
 * says why (and says it again on every later call). flags: recv flags. */
ssize_t rcp__tls_read(struct rcp_conn *c, char *buf, size_t cap, int flags);
/* buf[*off, len) as TLS records, as few as the socket takes (partial
 * writes on): conn_write_some's contract; on CONN_IO_ERR rcp__tls_why. */
int rcp__tls_write(struct rcp_conn *c, const char *buf, size_t len, size_t *off);
/* Without blocking: 1 if decrypted data waits (in OpenSSL's buffers or on
 * the socket), 0 if the connection is closed or broken, -1 if nothing. */
int rcp__tls_peek(struct rcp_conn *c);
/* The last failure's cause ("" if none). */
const char *rcp__tls_why(struct rcp_conn *c);
/* For the CONNECTED event: "TLSv1.3 TLS_AES_256_GCM_SHA384" and ", session
 * resumed" when the handshake resumed the connection's previous session. */
void rcp__tls_describe(struct rcp_conn *c, char *buf, size_t len);
/* At the connection's free: drop the session kept for resumption. */
void rcp__tls_forget(struct rcp_conn *c);
/* Send close_notify if the session is healthy, free it; c->tls NULL. */
void rcp__tls_end(struct rcp_conn *c);

#endif
