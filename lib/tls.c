/* lib/tls.c: TLS on a connection with OpenSSL 3 (see tls.h).
 *
 * What it owns: the shared configs (an SSL_CTX per distinct set of TLS
 * options, refcounted, found by comparing the options' contents), the
 * BIO that lets one SSL object be driven non-blocking by the loop and
 * blocking by a lone caller, the handshake, and the translation of
 * OpenSSL's failures into causes a user can act on (a certificate that
 * does not verify and why, a plain-text server on a TLS port, a missing
 * client certificate, a close without close_notify).
 *
 * OpenSSL allocates with its own allocator: the library's hooks do not see
 * TLS buffers (docs/tls.md). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "alloc.h"
#include "conn_int.h"
#include "tls.h"

struct rcp__tls_cfg {
    rcp__tls_cfg *next;
    unsigned refs; /* under cfg_mu */
    SSL_CTX *ctx;
    /* The options it was made from: the key, and the copies apply() hands out. */
    char *ca_file, *ca_dir, *cert_file, *key_file, *server_name, *ciphers, *suites;
    int insecure, min_version;
};

struct rcp__tls {
    SSL *ssl;
    struct rcp_conn *c;
    int rflags;       /* recv flags of the read in progress */
    int done;         /* handshake finished */
    int failed;       /* a fatal error: why holds it; no more I/O, no close_notify */
    int cert_asked;   /* the server asked for a client certificate we do not have */
    char name[256];   /* the name verified (for messages) */
    char why[400];
};

static pthread_mutex_t cfg_mu = PTHREAD_MUTEX_INITIALIZER;
static rcp__tls_cfg *cfgs;

/* ------------------------------------------------------------------ */
/* the BIO: send/recv on the connection's fd with the session's flags   */

static BIO_METHOD *bio_meth;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_write(BIO *b, const char *buf, int len)
{
    rcp__tls *t = BIO_get_data(b);
    ssize_t w;
    BIO_clear_retry_flags(b);
    do
        w = send(t->c->fd, buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w >= 0) {
        conn_stat_add(&t->c->st.write_calls, 1);
        conn_stat_add(&t->c->st.bytes_out, (uint64_t)w);
        return (int)w;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        BIO_set_retry_write(b);
    return -1;
}

static int bio_read(BIO *b, char *buf, int len)
{
    rcp__tls *t = BIO_get_data(b);
    ssize_t r;
    BIO_clear_retry_flags(b);
    do
        r = recv(t->c->fd, buf, (size_t)len, t->rflags);
    while (r < 0 && errno == EINTR);
    if (r > 0) {
        conn_stat_add(&t->c->st.read_calls, 1);
        conn_stat_add(&t->c->st.bytes_in, (uint64_t)r);
        return (int)r;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_read(b);
    return (int)r;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0; /* send() buffers nothing of ours */
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static void bio_meth_make(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "rcpipe socket");
    if (m && BIO_meth_set_write(m, bio_write) && BIO_meth_set_read(m, bio_read) &&
        BIO_meth_set_ctrl(m, bio_ctrl) && BIO_meth_set_create(m, bio_create))
        bio_meth = m;
    else if (m)
        BIO_meth_free(m);
}

/* ------------------------------------------------------------------ */
/* shared configs                                                      */

/* OpenSSL's first queued error as text, or dflt. Empties the queue. */
static const char *ssl_err_text(char *buf, size_t len, const char *dflt)
{
    unsigned long e = ERR_get_error();
    ERR_clear_error();
    if (!e)
        return dflt;
    ERR_error_string_n(e, buf, len);
    return buf;
}

static int str_eq(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static int cfg_matches(const rcp__tls_cfg *g, const rcp_conn_options *o)
{
    return str_eq(g->ca_file, o->tls_ca_file) && str_eq(g->ca_dir, o->tls_ca_dir) &&
           str_eq(g->cert_file, o->tls_cert_file) && str_eq(g->key_file, o->tls_key_file) &&
           str_eq(g->server_name, o->tls_server_name) && str_eq(g->ciphers, o->tls_ciphers) &&
           str_eq(g->suites, o->tls_ciphersuites) && g->insecure == o->tls_insecure_skip_verify &&
           g->min_version == o->tls_min_version;
}

static void cfg_free(rcp__tls_cfg *g)
{
    SSL_CTX_free(g->ctx);
    rcp__free(g->ca_file);
    rcp__free(g->ca_dir);
    rcp__free(g->cert_file);
    rcp__free(g->key_file);
    rcp__free(g->server_name);
    rcp__free(g->ciphers);
    rcp__free(g->suites);
    rcp__free(g);
}

static int dup_opt(char **dst, const char *src)
{
    *dst = src ? rcp__strdup(src) : NULL;
    return !src || *dst;
}

/* Called during the handshake only when the server asks for a client
 * certificate and none is configured: remember it, so that the failure
 * that follows names the cause; answer with no certificate. */
static int client_cert_cb(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
    rcp__tls *t = SSL_get_app_data(ssl);
    (void)x509;
    (void)pkey;
    if (t)
        t->cert_asked = 1;
    return 0;
}

/* A new session (TLS 1.3: a ticket after the handshake; TLS 1.2: at its
 * end) on the thread doing the connection's I/O: keep it for the next
 * connect. Returning 1 keeps OpenSSL's reference. */
static int new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
    rcp__tls *t = SSL_get_app_data(ssl);
    if (!t)
        return 0;
    if (t->c->tls_resume)
        SSL_SESSION_free(t->c->tls_resume);
    t->c->tls_resume = sess;
    return 1;
}

static int ctx_setup(rcp__tls_cfg *g, char *why, size_t len)
{
    char e[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        snprintf(why, len, "TLS: cannot make a context: %s", ssl_err_text(e, sizeof e, "?"));
        return RCP_ERR_OOM;
    }
    g->ctx = ctx;
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* One recv() per read, not two per record (header, then body): the
     * bytes read ahead stay in OpenSSL's buffer, where the loop's reads
     * (until WANT_READ) and rcp__tls_peek (SSL_peek) find them. */
    SSL_CTX_set_read_ahead(ctx, 1);
    /* Sessions are kept per connection (new_session_cb), not in a cache
     * shared by every node of a cluster. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
    if (!SSL_CTX_set_min_proto_version(ctx, g->min_version == 13 ? TLS1_3_VERSION
                                                                  : TLS1_2_VERSION)) {
        snprintf(why, len, "TLS: cannot set the minimum version: %s", ssl_err_text(e, sizeof e, "?"));
        return RCP_ERR_INVALID;
    }
    if (g->insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        if (g->ca_file || g->ca_dir) {
            if (!SSL_CTX_load_verify_locations(ctx, g->ca_file, g->ca_dir)) {
                snprintf(why, len, "TLS: cannot load the CA %s '%s': %s",
                         g->ca_file ? "file" : "directory", g->ca_file ? g->ca_file : g->ca_dir,
                         ssl_err_text(e, sizeof e, "?"));
                return RCP_ERR_INVALID;
            }
        } else if (!SSL_CTX_set_default_verify_paths(ctx)) {
            snprintf(why, len, "TLS: cannot load the system's CA store: %s",
                     ssl_err_text(e, sizeof e, "?"));
            return RCP_ERR_INVALID;
        }
    }
    if (g->cert_file) {
        if (!SSL_CTX_use_certificate_chain_file(ctx, g->cert_file)) {
            snprintf(why, len, "TLS: cannot load the client certificate '%s': %s", g->cert_file,
                     ssl_err_text(e, sizeof e, "?"));
            return RCP_ERR_INVALID;
        }
        if (!SSL_CTX_use_PrivateKey_file(ctx, g->key_file, SSL_FILETYPE_PEM)) {
            snprintf(why, len, "TLS: cannot load the client key '%s': %s", g->key_file,
                     ssl_err_text(e, sizeof e, "?"));
            return RCP_ERR_INVALID;
        }
        if (!SSL_CTX_check_private_key(ctx)) {
            snprintf(why, len, "TLS: the key '%s' does not match the certificate '%s': %s",
                     g->key_file, g->cert_file, ssl_err_text(e, sizeof e, "?"));
            return RCP_ERR_INVALID;
        }
    } else {
        SSL_CTX_set_client_cert_cb(ctx, client_cert_cb);
    }
    if (g->ciphers && !SSL_CTX_set_cipher_list(ctx, g->ciphers)) {
        snprintf(why, len, "TLS: tls_ciphers '%s' refused: %s", g->ciphers,
                 ssl_err_text(e, sizeof e, "?"));
        return RCP_ERR_INVALID;
    }
    if (g->suites && !SSL_CTX_set_ciphersuites(ctx, g->suites)) {
        snprintf(why, len, "TLS: tls_ciphersuites '%s' refused: %s", g->suites,
                 ssl_err_text(e, sizeof e, "?"));
        return RCP_ERR_INVALID;
    }
    return RCP_OK;
}

int rcp__tls_cfg_get(const rcp_conn_options *o, rcp__tls_cfg **out, char *why, size_t len)
{
    rcp__tls_cfg *g;
    int rv;
    *out = NULL;
    pthread_mutex_lock(&cfg_mu);
    for (g = cfgs; g; g = g->next) {
        if (cfg_matches(g, o)) {
            g->refs++;
            pthread_mutex_unlock(&cfg_mu);
            *out = g;
            return RCP_OK;
        }
    }
    pthread_mutex_unlock(&cfg_mu);
    /* Made outside the lock (files are read); a twin made meanwhile by
     * another thread is harmless: both work, the list holds both. */
    g = rcp__calloc(1, sizeof(*g));
    if (!g || !dup_opt(&g->ca_file, o->tls_ca_file) || !dup_opt(&g->ca_dir, o->tls_ca_dir) ||
        !dup_opt(&g->cert_file, o->tls_cert_file) || !dup_opt(&g->key_file, o->tls_key_file) ||
        !dup_opt(&g->server_name, o->tls_server_name) || !dup_opt(&g->ciphers, o->tls_ciphers) ||
        !dup_opt(&g->suites, o->tls_ciphersuites)) {
        if (g)
            cfg_free(g);
        snprintf(why, len, "TLS: out of memory");
        return RCP_ERR_OOM;
    }
    g->insecure = o->tls_insecure_skip_verify;
    g->min_version = o->tls_min_version;
    ERR_clear_error();
    rv = ctx_setup(g, why, len);
    if (rv != RCP_OK) {
        cfg_free(g);
        return rv;
    }
    g->refs = 1;
    pthread_mutex_lock(&cfg_mu);
    g->next = cfgs;
    cfgs = g;
    pthread_mutex_unlock(&cfg_mu);
    *out = g;
    return RCP_OK;
}

void rcp__tls_cfg_apply(const rcp__tls_cfg *g, rcp_conn_options *o)
{
    o->tls_ca_file = g->ca_file;
    o->tls_ca_dir = g->ca_dir;
    o->tls_cert_file = g->cert_file;
    o->tls_key_file = g->key_file;
    o->tls_server_name = g->server_name;
    o->tls_ciphers = g->ciphers;
    o->tls_ciphersuites = g->suites;
}

void rcp__tls_cfg_put(rcp__tls_cfg *g)
{
    rcp__tls_cfg **p;
    if (!g)
        return;
    pthread_mutex_lock(&cfg_mu);
    if (--g->refs) {
        pthread_mutex_unlock(&cfg_mu);
        return;
    }
    for (p = &cfgs; *p; p = &(*p)->next) {
        if (*p == g) {
            *p = g->next;
            break;
        }
    }
    pthread_mutex_unlock(&cfg_mu);
    cfg_free(g);
}

/* ------------------------------------------------------------------ */
/* a session                                                           */

static int is_ip(const char *s)
{
    unsigned char b[16];
    return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

int rcp__tls_start(struct rcp_conn *c, char *why, size_t len)
{
    rcp__tls *t;
    BIO *bio;
    const char *name = c->opt.tls_server_name ? c->opt.tls_server_name : c->host;
    char e[256];

    pthread_once(&bio_once, bio_meth_make);
    if (!bio_meth) {
        snprintf(why, len, "TLS: cannot make the socket BIO");
        return -1;
    }
    t = rcp__calloc(1, sizeof(*t));
    if (!t) {
        snprintf(why, len, "TLS: out of memory");
        return -1;
    }
    t->c = c;
    t->rflags = MSG_DONTWAIT;
    snprintf(t->name, sizeof t->name, "%s", name);
    ERR_clear_error();
    t->ssl = SSL_new(c->tls_cfg->ctx);
    bio = t->ssl ? BIO_new(bio_meth) : NULL;
    if (!bio) {
        snprintf(why, len, "TLS: cannot make a session: %s", ssl_err_text(e, sizeof e, "out of memory"));
        SSL_free(t->ssl);
        rcp__free(t);
        return -1;
    }
    BIO_set_data(bio, t);
    SSL_set_bio(t->ssl, bio, bio);
    SSL_set_app_data(t->ssl, t);
    if (!is_ip(name))
        SSL_set_tlsext_host_name(t->ssl, name); /* SNI carries names, never addresses */
    if (!c->opt.tls_insecure_skip_verify) {
        int ok = is_ip(name) ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), name)
                             : SSL_set1_host(t->ssl, name);
        if (!ok) {
            snprintf(why, len, "TLS: cannot verify against the name '%s'", name);
            SSL_free(t->ssl);
            rcp__free(t);
            return -1;
        }
    }
    SSL_set_connect_state(t->ssl);
    if (c->tls_resume && !SSL_set_session(t->ssl, c->tls_resume)) {
        /* Not resumable with this context: a full handshake. */
        SSL_SESSION_free(c->tls_resume);
        c->tls_resume = NULL;
        ERR_clear_error();
    }
    c->tls = t;
    return 0;
}

/* The cause of a failed TLS call, in words (t->why), from SSL_get_error's
 * code e, the errno of the call, and OpenSSL's error queue (emptied). */
static void describe(rcp__tls *t, int e, int err, const char *what)
{
    char buf[256];
    unsigned long code = ERR_peek_error();
    int reason = ERR_GET_REASON(code);
    const char *hint = "";
    const char *text;

    if (t->cert_asked)
        hint = " (the server asked for a client certificate and none is set: tls_cert_file, "
               "tls_key_file)";
    t->failed = 1;
    if (e == SSL_ERROR_SSL && reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        long v = SSL_get_verify_result(t->ssl);
        ERR_clear_error();
        snprintf(t->why, sizeof t->why,
                 "TLS %s failed: the server's certificate did not verify: %s (verifying '%s')",
                 what, X509_verify_cert_error_string(v), t->name);
        return;
    }
    if (e == SSL_ERROR_SSL &&
        (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
         reason == SSL_R_HTTP_REQUEST)) {
        text = ssl_err_text(buf, sizeof buf, "?");
        snprintf(t->why, sizeof t->why,
                 "TLS %s failed: the server does not speak TLS (a plain-text server on this "
                 "port?): %s",
                 what, text);
        return;
    }
    if ((e == SSL_ERROR_SSL && reason == SSL_R_UNEXPECTED_EOF_WHILE_READING) ||
        (e == SSL_ERROR_SYSCALL && err == 0)) {
        ERR_clear_error();
        snprintf(t->why, sizeof t->why,
                 "TLS %s failed: the server closed the connection without a TLS close_notify%s",
                 what, hint);
        return;
    }
    if (e == SSL_ERROR_SYSCALL) {
        ERR_clear_error();
        snprintf(t->why, sizeof t->why, "TLS %s failed: %s%s", what, strerror(err), hint);
        return;
    }
    text = ssl_err_text(buf, sizeof buf, "unknown OpenSSL error");
    snprintf(t->why, sizeof t->why, "TLS %s failed: %s%s", what, text, hint);
}

int rcp__tls_handshake(struct rcp_conn *c, int *want_write, char *why, size_t len)
{
    rcp__tls *t = c->tls;
    int r, e, err;
    *want_write = 0;
    ERR_clear_error();
    errno = 0;
    r = SSL_connect(t->ssl);
    err = errno;
    if (r == 1) {
        t->done = 1;
        return 1;
    }
    e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        return 0;
    if (e == SSL_ERROR_WANT_WRITE) {
        *want_write = 1;
        return 0;
    }
    describe(t, e, err, "handshake");
    snprintf(why, len, "%s", t->why);
    return -1;
}

ssize_t rcp__tls_read(struct rcp_conn *c, char *buf, size_t cap, int flags)
{
    rcp__tls *t = c->tls;
    size_t n = 0;
    int ok, e, err;
    if (t->failed) {
        errno = EPROTO;
        return CONN_IO_TLS;
    }
    t->rflags = flags;
    ERR_clear_error();
    errno = 0;
    ok = SSL_read_ex(t->ssl, buf, cap, &n);
    err = errno;
    t->rflags = MSG_DONTWAIT;
    if (ok) {
        /* SSL_read returns one record's bytes; read-ahead may have brought
         * more records in the same recv(). Take them now, without waiting:
         * the replies to two writes are then one read for the caller, as
         * in plain text, instead of two (between which a leading caller
         * would write what queued meanwhile, one more thin batch). */
        while (n < cap && SSL_has_pending(t->ssl)) {
            size_t more = 0;
            ERR_clear_error();
            errno = 0;
            if (!SSL_read_ex(t->ssl, buf + n, cap - n, &more)) {
                err = errno;
                e = SSL_get_error(t->ssl, 0);
                if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE &&
                    e != SSL_ERROR_ZERO_RETURN)
                    describe(t, e, err, "read"); /* the next call reports it */
                else
                    ERR_clear_error();
                break; /* a close_notify comes again on the next call */
            }
            n += more;
        }
        return (ssize_t)n;
    }
    e = SSL_get_error(t->ssl, 0);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0; /* close_notify: an orderly close */
    describe(t, e, err, "read");
    errno = EPROTO;
    return CONN_IO_TLS;
}

int rcp__tls_write(struct rcp_conn *c, const char *buf, size_t len, size_t *off)
{
    rcp__tls *t = c->tls;
    if (t->failed) {
        errno = EPROTO;
        return CONN_IO_ERR;
    }
    while (*off < len) {
        size_t w = 0;
        int e, err;
        ERR_clear_error();
        errno = 0;
        /* One call for the whole flush: OpenSSL cuts it into records of
         * up to 16 KiB, each one send(); partial writes return what the
         * socket took. */
        if (SSL_write_ex(t->ssl, buf + *off, len - *off, &w)) {
            *off += w;
            continue;
        }
        err = errno;
        e = SSL_get_error(t->ssl, 0);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
            return CONN_IO_AGAIN;
        describe(t, e, err, "write");
        errno = EPROTO;
        return CONN_IO_ERR;
    }
    return CONN_IO_DONE;
}

int rcp__tls_peek(struct rcp_conn *c)
{
    rcp__tls *t = c->tls;
    char b;
    size_t n = 0;
    int e, err;
    if (t->failed)
        return 0;
    if (SSL_pending(t->ssl) > 0)
        return 1;
    ERR_clear_error();
    errno = 0;
    t->rflags = MSG_DONTWAIT;
    /* Processes what is buffered or waiting (a session ticket is consumed
     * here) but keeps any data in OpenSSL's buffer for the next read. */
    if (SSL_peek_ex(t->ssl, &b, 1, &n))
        return 1;
    err = errno;
    e = SSL_get_error(t->ssl, 0);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return -1;
    if (e == SSL_ERROR_ZERO_RETURN) {
        snprintf(t->why, sizeof t->why, "connection closed by the server (TLS close_notify)");
        t->failed = 1;
        return 0;
    }
    describe(t, e, err, "read");
    return 0;
}

const char *rcp__tls_why(struct rcp_conn *c)
{
    return c->tls ? c->tls->why : "";
}

void rcp__tls_describe(struct rcp_conn *c, char *buf, size_t len)
{
    const SSL_CIPHER *ci = SSL_get_current_cipher(c->tls->ssl);
    snprintf(buf, len, "%s %s%s", SSL_get_version(c->tls->ssl), ci ? SSL_CIPHER_get_name(ci) : "?",
             SSL_session_reused(c->tls->ssl) ? ", session resumed" : "");
}

void rcp__tls_forget(struct rcp_conn *c)
{
    if (c->tls_resume)
        SSL_SESSION_free(c->tls_resume);
    c->tls_resume = NULL;
}

void rcp__tls_end(struct rcp_conn *c)
{
    rcp__tls *t = c->tls;
    if (!t)
        return;
    if (t->done && !t->failed) {
        /* close_notify, without waiting for the server's: best effort. */
        ERR_clear_error();
        t->rflags = MSG_DONTWAIT;
        SSL_shutdown(t->ssl);
    }
    ERR_clear_error();
    SSL_free(t->ssl);
    rcp__free(t);
    c->tls = NULL;
}
