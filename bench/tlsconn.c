/* tlsconn.c: see tlsconn.h. Blocking sockets throughout: SO_RCVTIMEO and
 * SO_SNDTIMEO bound every wait, as hiredis's socket timeout does for the
 * plain side channels. The context turns OpenSSL's read-ahead on (one
 * recv() per SSL_read instead of one for a record's header and one for its
 * body), as rcpipe's own connections do, so the classic baseline is not
 * handicapped by a system call per record that the library avoids. */
#include "tlsconn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define TLSCONN_READ_CHUNK 16384

struct tlsconn {
    int fd;
    SSL *ssl;
    redisReader *reader;
    char *obuf; /* formatted requests not yet written */
    size_t olen, ocap;
    bool broken;
    char where[300]; /* "host:port" for messages */
    char errstr[768];
};

static SSL_CTX *tc_ctx;
static bool tc_skip_verify;
static const char *tc_sni;

/* OpenSSL's first queued error in words (the queue is emptied), or dflt. */
static const char *tc_ssl_reason(char *buf, size_t len, const char *dflt)
{
    unsigned long e = ERR_get_error();

    if (!e)
        return dflt;
    ERR_error_string_n(e, buf, len);
    ERR_clear_error();
    return buf;
}

bool tlsconn_init(const tlsconn_settings *s, char *err, size_t errlen)
{
    char why[256];

    ERR_clear_error();
    tc_ctx = SSL_CTX_new(TLS_client_method());
    if (!tc_ctx) {
        snprintf(err, errlen, "TLS: cannot make an OpenSSL context: %s",
                 tc_ssl_reason(why, sizeof why, "out of memory"));
        return false;
    }
    SSL_CTX_set_read_ahead(tc_ctx, 1);
    if (s->ca_file ? !SSL_CTX_load_verify_locations(tc_ctx, s->ca_file, NULL)
                   : !SSL_CTX_set_default_verify_paths(tc_ctx)) {
        snprintf(err, errlen, "--cacert: cannot load the CA file '%s': %s",
                 s->ca_file ? s->ca_file : "(system default)",
                 tc_ssl_reason(why, sizeof why, "unknown error"));
        goto fail;
    }
    if (s->cert_file && !SSL_CTX_use_certificate_chain_file(tc_ctx, s->cert_file)) {
        snprintf(err, errlen, "--cert: cannot load the certificate '%s': %s", s->cert_file,
                 tc_ssl_reason(why, sizeof why, "unknown error"));
        goto fail;
    }
    if (s->key_file && !SSL_CTX_use_PrivateKey_file(tc_ctx, s->key_file, SSL_FILETYPE_PEM)) {
        snprintf(err, errlen, "--key: cannot load the private key '%s': %s", s->key_file,
                 tc_ssl_reason(why, sizeof why, "unknown error"));
        goto fail;
    }
    if (s->key_file && !SSL_CTX_check_private_key(tc_ctx)) {
        snprintf(err, errlen, "--key '%s' does not match --cert '%s': %s", s->key_file,
                 s->cert_file, tc_ssl_reason(why, sizeof why, "unknown error"));
        goto fail;
    }
    SSL_CTX_set_verify(tc_ctx, s->skip_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    tc_skip_verify = s->skip_verify;
    tc_sni = s->sni;
    return true;
fail:
    SSL_CTX_free(tc_ctx);
    tc_ctx = NULL;
    return false;
}

void tlsconn_cleanup(void)
{
    SSL_CTX_free(tc_ctx);
    tc_ctx = NULL;
}

static bool tc_is_ip(const char *s)
{
    unsigned char b[16];

    return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

static void tc_set_timeout(int fd, int seconds)
{
    struct timeval tv = {seconds, 0};

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* A connected blocking TCP socket to host:port within timeout_s, or -1 with
 * the cause in err. */
static int tc_tcp_connect(const char *host, int port, int timeout_s, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[16];
    int fd = -1, rc, one = 1;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof portstr, "%d", port);
    rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    snprintf(err, errlen, "no address for %s", host);
    for (ai = res; ai; ai = ai->ai_next) {
        struct pollfd p;
        int soerr = 0;
        socklen_t sl = sizeof(soerr);

        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            continue;
        }
        /* Non-blocking only for the connect, so that it honours the timeout. */
        fcntl(fd, F_SETFL, O_NONBLOCK);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
            snprintf(err, errlen, "connect: %s", strerror(errno));
        } else {
            p.fd = fd;
            p.events = POLLOUT;
            do
                rc = poll(&p, 1, timeout_s * 1000);
            while (rc < 0 && errno == EINTR);
            if (rc == 0)
                snprintf(err, errlen, "connect timed out after %d s", timeout_s);
            else if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
                snprintf(err, errlen, "connect: %s", strerror(errno));
            else if (soerr)
                snprintf(err, errlen, "connect: %s", strerror(soerr));
            else
                break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return -1;
    fcntl(fd, F_SETFL, 0);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* as hiredis does */
    return fd;
}

/* The cause of a failed SSL call (ret its return value) in words. */
static void tc_describe(tlsconn *c, int ret, int saved_errno, const char *what)
{
    char why[256];
    int e = SSL_get_error(c->ssl, ret);
    long v = SSL_get_verify_result(c->ssl);
    const char *text;

    c->broken = true;
    if (e == SSL_ERROR_SSL && v != X509_V_OK) {
        ERR_clear_error();
        snprintf(c->errstr, sizeof c->errstr, "%s: %s: the server's certificate did not verify: %s",
                 c->where, what, X509_verify_cert_error_string(v));
        return;
    }
    if (e == SSL_ERROR_ZERO_RETURN)
        text = "the server closed the connection";
    else if (e == SSL_ERROR_SYSCALL && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK))
        text = "timed out";
    else if (e == SSL_ERROR_SYSCALL && saved_errno)
        text = strerror(saved_errno);
    else if (e == SSL_ERROR_SYSCALL)
        text = tc_ssl_reason(why, sizeof why,
                             "the server closed the connection without a TLS close_notify");
    else
        text = tc_ssl_reason(why, sizeof why, "unknown OpenSSL error");
    snprintf(c->errstr, sizeof c->errstr, "%s: %s: %s", c->where, what, text);
}

tlsconn *tlsconn_connect(const char *host, int port, int connect_timeout_s, int io_timeout_s,
                         char *err, size_t errlen)
{
    tlsconn *c;
    const char *name = tc_sni ? tc_sni : host;
    char why[256];
    int ret;

    if (!tc_ctx) {
        snprintf(err, errlen, "%s:%d: TLS is not set up (tlsconn_init)", host, port);
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "%s:%d: out of memory", host, port);
        return NULL;
    }
    snprintf(c->where, sizeof c->where, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    c->fd = tc_tcp_connect(host, port, connect_timeout_s, why, sizeof why);
    if (c->fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", c->where, why);
        free(c);
        return NULL;
    }
    tc_set_timeout(c->fd, connect_timeout_s); /* the handshake */
    ERR_clear_error();
    c->ssl = SSL_new(tc_ctx);
    c->reader = redisReaderCreate();
    if (!c->ssl || !c->reader || !SSL_set_fd(c->ssl, c->fd)) {
        snprintf(err, errlen, "%s: TLS: cannot make a session: %s", c->where,
                 tc_ssl_reason(why, sizeof why, "out of memory"));
        tlsconn_free(c);
        return NULL;
    }
    if (!tc_is_ip(name))
        SSL_set_tlsext_host_name(c->ssl, name); /* SNI carries names only */
    if (!tc_skip_verify &&
        !(tc_is_ip(name) ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), name)
                         : SSL_set1_host(c->ssl, name))) {
        snprintf(err, errlen, "%s: TLS: cannot verify against the name '%s'", c->where, name);
        tlsconn_free(c);
        return NULL;
    }
    errno = 0;
    ret = SSL_connect(c->ssl);
    if (ret != 1) {
        tc_describe(c, ret, errno, "TLS handshake failed");
        snprintf(err, errlen, "%s", c->errstr);
        tlsconn_free(c);
        return NULL;
    }
    tc_set_timeout(c->fd, io_timeout_s);
    return c;
}

void tlsconn_free(tlsconn *c)
{
    if (!c)
        return;
    if (c->ssl) {
        if (!c->broken)
            SSL_shutdown(c->ssl); /* close_notify; the server's answer is not awaited */
        SSL_free(c->ssl);
    }
    if (c->fd >= 0)
        close(c->fd);
    if (c->reader)
        redisReaderFree(c->reader);
    free(c->obuf);
    free(c);
}

int tlsconn_append_argv(tlsconn *c, int argc, const char **argv, const size_t *argvlen)
{
    char *cmd;
    int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);

    if (len < 0) {
        snprintf(c->errstr, sizeof c->errstr, "%s: out of memory", c->where);
        return -1;
    }
    if (c->olen + (size_t)len > c->ocap) {
        size_t cap = c->ocap ? c->ocap : 256;
        char *grown;

        while (cap < c->olen + (size_t)len)
            cap *= 2;
        grown = realloc(c->obuf, cap);
        if (!grown) {
            redisFreeCommand(cmd);
            snprintf(c->errstr, sizeof c->errstr, "%s: out of memory", c->where);
            return -1;
        }
        c->obuf = grown;
        c->ocap = cap;
    }
    memcpy(c->obuf + c->olen, cmd, (size_t)len);
    c->olen += (size_t)len;
    redisFreeCommand(cmd);
    return 0;
}

/* Writes every queued request. Without SSL_MODE_ENABLE_PARTIAL_WRITE an
 * SSL_write on a blocking socket returns only when all of it is sent. */
static int tc_flush(tlsconn *c)
{
    size_t off = 0;

    while (off < c->olen) {
        size_t n = c->olen - off;
        int ret;

        if (n > INT_MAX / 2)
            n = INT_MAX / 2;
        errno = 0;
        ret = SSL_write(c->ssl, c->obuf + off, (int)n);
        if (ret <= 0) {
            tc_describe(c, ret, errno, "TLS write failed");
            return -1;
        }
        off += (size_t)ret;
    }
    c->olen = 0;
    return 0;
}

int tlsconn_get_reply(tlsconn *c, void **reply)
{
    char buf[TLSCONN_READ_CHUNK];

    *reply = NULL;
    if (c->broken)
        return -1;
    if (redisReaderGetReply(c->reader, reply) != REDIS_OK)
        goto protocol;
    if (*reply)
        return 0;
    if (tc_flush(c) != 0)
        return -1;
    for (;;) {
        int ret;

        errno = 0;
        ret = SSL_read(c->ssl, buf, sizeof buf);
        if (ret <= 0) {
            tc_describe(c, ret, errno, "TLS read failed");
            return -1;
        }
        if (redisReaderFeed(c->reader, buf, (size_t)ret) != REDIS_OK ||
            redisReaderGetReply(c->reader, reply) != REDIS_OK)
            goto protocol;
        if (*reply)
            return 0;
    }
protocol:
    c->broken = true;
    snprintf(c->errstr, sizeof c->errstr, "%s: %s", c->where, redisReaderGetError(c->reader));
    return -1;
}

const char *tlsconn_errstr(const tlsconn *c)
{
    return c->errstr;
}
