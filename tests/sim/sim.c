/* sim.c: the scriptable fake Redis node (see sim.h and README.md).
 *
 * One thread per node polls the listening socket and every connection. Each
 * pass: accept, read and parse commands (RESP arrays of bulk strings, as
 * every client sends them), answer commands that match an "on" rule, then
 * run the script as far as it can go. A connection's commands are served
 * in order, like a real server: once its first waiting command matches no
 * rule it waits for the script (`expect`), and everything behind it waits
 * too, until the script has taken it and moved on to its next
 * expect/accept (or ran out of steps). Everything the test thread may read
 * is guarded by the node's mutex, which the node's thread holds for the
 * whole pass except while it sleeps in poll(). */
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

enum { S_ACCEPT, S_EXPECT, S_SEND, S_SENDBYTES, S_STALL, S_CLOSE, S_EXPECT_CLOSE, S_RULE, S_TIMEOUT, S_USE };
enum { A_SEND, A_HANG, A_CLOSE, A_ECHO };
enum { W_LIT = 0, W_ONE = 1, W_REST = 2 };

typedef struct pat {
    int argc;
    char **argv;
    size_t *lens;
    int *wild;
} pat;

typedef struct step {
    int kind, line;
    char text[96]; /* the line, for messages */
    pat p;
    char *data;
    size_t len;
    int ms;
    int action, times;
} step;

typedef struct rule {
    size_t step;   /* the S_RULE step holding pattern and data */
    int left;      /* answers left, -1: unlimited */
} rule;

typedef struct logent {
    int conn;
    uint64_t t_ns;
    int argc;
    char **argv;
    size_t *lens;
} logent;

typedef struct qcmd {
    size_t logi;
    struct qcmd *next;
} qcmd;

typedef struct sconn {
    int fd;          /* -1 once closed */
    int claimed;     /* taken by an `accept` step */
    int peer_closed;
    char *in;
    size_t inlen, incap;
    qcmd *qhead, *qtail;
    int head_pending; /* the first queued command waits for the script */
} sconn;

struct sim_node {
    int lfd, port;
    pthread_t th;
    int started;
    atomic_int stop;
    pthread_mutex_t mu;
    int ports[SIM_MAX_NODES];
    int nports;

    step *steps;
    size_t nsteps, capsteps, idx;
    int failed;
    char msg[700];
    int waiting;
    uint64_t step_start, stall_until, next_byte_at;
    size_t bytes_off;
    int step_timeout_ms;

    sconn *conns;
    size_t nconns, capconns;
    int cur, hold;
    rule *rules;
    size_t nrules, caprules;
    logent *log;
    size_t nlog, caplog;
};

const char sim_prelude[] = "on PING => send \"+PONG\\r\\n\"\n"
                           "on READONLY => send \"+OK\\r\\n\"\n"
                           "on ASKING => send \"+OK\\r\\n\"\n";

/* ------------------------------------------------------------------ */
/* small helpers (time and the sanitizer scale: tests/common/common.h)  */

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort(); /* the fake node's own memory: not what a test examines */
    return q;
}

#define GROW(arr, n, cap)                                                    \
    do {                                                                     \
        if ((n) == (cap)) {                                                  \
            (cap) = (cap) ? (cap) * 2 : 16;                                  \
            (arr) = xrealloc((arr), (cap) * sizeof(*(arr)));                 \
        }                                                                    \
    } while (0)

static void pat_free(pat *p)
{
    for (int i = 0; i < p->argc; i++)
        free(p->argv[i]);
    free(p->argv);
    free(p->lens);
    free(p->wild);
    memset(p, 0, sizeof *p);
}

static int ieq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i]))
            return 0;
    return 1;
}

/* Arguments compare case-insensitively; `*` is any one, `**` any rest. */
static int pat_match(const pat *p, int argc, char *const *argv, const size_t *lens)
{
    int i;
    for (i = 0; i < p->argc; i++) {
        if (p->wild[i] == W_REST)
            return 1;
        if (i >= argc)
            return 0;
        if (p->wild[i] == W_ONE)
            continue;
        if (p->lens[i] != lens[i] || !ieq(p->argv[i], argv[i], lens[i]))
            return 0;
    }
    return i == argc;
}

static void join_args(int argc, char *const *argv, const size_t *lens, char *out, size_t outlen)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < argc && o + 8 < outlen; i++) {
        if (i)
            out[o++] = ' ';
        for (size_t k = 0; k < lens[i] && o + 5 < outlen; k++) {
            unsigned char ch = (unsigned char)argv[i][k];
            if (ch >= 0x21 && ch <= 0x7e)
                out[o++] = (char)ch;
            else
                o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", ch);
        }
    }
    out[o < outlen ? o : outlen - 1] = '\0';
}

static int xsend(int fd, const char *p, size_t len)
{
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {fd, POLLOUT, 0};
            if (poll(&pf, 1, 2000) <= 0)
                return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* scenario parsing                                                    */

typedef struct tok {
    char *s;
    size_t len;
    int quoted;
} tok;

/* Splits a line into words and "quoted strings" (escapes \r \n \t \0 \\
 * \" \xHH). Returns the count, or -1 on a bad escape or open quote. */
static int tokenize(const char *line, tok *t, int max)
{
    int n = 0;
    const char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        if (n == max)
            return -1;
        t[n].s = xrealloc(NULL, strlen(p) + 1);
        t[n].len = 0;
        t[n].quoted = *p == '"';
        if (*p == '"') {
            p++;
            while (*p && *p != '"') {
                char ch = *p++;
                if (ch == '\\') {
                    ch = *p++;
                    switch (ch) {
                    case 'r': ch = '\r'; break;
                    case 'n': ch = '\n'; break;
                    case 't': ch = '\t'; break;
                    case '0': ch = '\0'; break;
                    case '\\': case '"': break;
                    case 'x': {
                        char hex[3] = {0, 0, 0};
                        if (!isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1])) {
                            free(t[n].s);
                            return -1;
                        }
                        hex[0] = p[0];
                        hex[1] = p[1];
                        p += 2;
                        ch = (char)strtol(hex, NULL, 16);
                        break;
                    }
                    default:
                        free(t[n].s);
                        return -1;
                    }
                }
                t[n].s[t[n].len++] = ch;
            }
            if (*p != '"') {
                free(t[n].s);
                return -1;
            }
            p++;
        } else {
            while (*p && *p != ' ' && *p != '\t')
                t[n].s[t[n].len++] = *p++;
        }
        t[n].s[t[n].len] = '\0';
        n++;
    }
    return n;
}

static void toks_free(tok *t, int n)
{
    for (int i = 0; i < n; i++)
        free(t[i].s);
}

static void make_pat(pat *p, const tok *t, int n)
{
    p->argc = n;
    p->argv = xrealloc(NULL, (size_t)n * sizeof(char *));
    p->lens = xrealloc(NULL, (size_t)n * sizeof(size_t));
    p->wild = xrealloc(NULL, (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        p->argv[i] = xrealloc(NULL, t[i].len + 1);
        memcpy(p->argv[i], t[i].s, t[i].len + 1);
        p->lens[i] = t[i].len;
        p->wild[i] = W_LIT;
        if (!t[i].quoted && strcmp(t[i].s, "*") == 0)
            p->wild[i] = W_ONE;
        if (!t[i].quoted && strcmp(t[i].s, "**") == 0)
            p->wild[i] = W_REST;
    }
}

static void concat(const tok *t, int n, char **data, size_t *len)
{
    size_t total = 0, o = 0;
    for (int i = 0; i < n; i++)
        total += t[i].len;
    *data = xrealloc(NULL, total + 1);
    for (int i = 0; i < n; i++) {
        memcpy(*data + o, t[i].s, t[i].len);
        o += t[i].len;
    }
    (*data)[o] = '\0';
    *len = o;
}

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void bprintf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(buf *b, const char *fmt, ...)
{
    va_list ap;
    int w;
    for (;;) {
        va_start(ap, fmt);
        w = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (b->p && (size_t)w < b->cap - b->len) {
            b->len += (size_t)w;
            return;
        }
        b->cap = b->cap * 2 + (size_t)w + 64;
        b->p = xrealloc(b->p, b->cap);
    }
}

/* "START-END=NODE[,NODE...]" words into a CLUSTER SLOTS reply. A NODE is
 * PORT (127.0.0.1), HOST:PORT or [IPV6]:PORT. Returns -1 on a bad word. */
static int make_slots(const tok *t, int n, char **data, size_t *len)
{
    buf b = {NULL, 0, 0};
    bprintf(&b, "*%d\r\n", n);
    for (int i = 0; i < n; i++) {
        unsigned a, z;
        int used = 0, nn = 1;
        char *nodes, *save = NULL, *item;
        if (sscanf(t[i].s, "%u-%u=%n", &a, &z, &used) != 2 || used == 0)
            goto bad;
        nodes = t[i].s + used;
        for (const char *c = nodes; *c; c++)
            nn += *c == ',';
        bprintf(&b, "*%d\r\n:%u\r\n:%u\r\n", 2 + nn, a, z);
        for (item = strtok_r(nodes, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            char host[256] = "127.0.0.1";
            char *colon = strrchr(item, ':');
            int port;
            if (colon) {
                size_t hl = (size_t)(colon - item);
                const char *h = item;
                if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
                    h++;
                    hl -= 2;
                }
                if (hl >= sizeof host)
                    goto bad;
                memcpy(host, h, hl);
                host[hl] = '\0';
                port = atoi(colon + 1);
            } else {
                port = atoi(item);
            }
            bprintf(&b, "*3\r\n$%zu\r\n%s\r\n:%d\r\n$40\r\n%040d\r\n", strlen(host), host, port,
                    port);
            nn--;
        }
        if (nn != 0)
            goto bad;
    }
    *data = b.p;
    *len = b.len;
    return 0;
bad:
    free(b.p);
    return -1;
}

/* $P0..$P9 replaced by the ports. */
static char *substitute(const sim_node *n, const char *line)
{
    buf b = {NULL, 0, 0};
    bprintf(&b, "%s", "");
    for (const char *p = line; *p; p++) {
        if (p[0] == '$' && p[1] == 'P' && isdigit((unsigned char)p[2])) {
            int k = p[2] - '0';
            bprintf(&b, "%d", k < n->nports ? n->ports[k] : 0);
            p += 2;
        } else {
            bprintf(&b, "%c", *p);
        }
    }
    return b.p;
}

/* One scenario line into a step. Returns 0, 1 for nothing (blank,
 * comment), -1 on error (message in err). */
static int parse_line(sim_node *n, const char *raw, int lineno, step *s, char *err, size_t errlen)
{
    tok t[256];
    int nt, rv = -1, k = 1;
    char *line = substitute(n, raw);
    const char *c;

    memset(s, 0, sizeof *s);
    s->line = lineno;
    snprintf(s->text, sizeof s->text, "%s", raw);
    for (c = line; *c == ' ' || *c == '\t'; c++)
        ;
    if (!*c || *c == '#') {
        free(line);
        return 1;
    }
    nt = tokenize(line, t, 256);
    free(line);
    if (nt < 0) {
        snprintf(err, errlen, "line %d: bad quoting or escape (or more than 256 words)", lineno);
        return -1;
    }
    if (nt == 0)
        return 1; /* blanks only */
    if (strcmp(t[0].s, "accept") == 0 && nt == 1) {
        s->kind = S_ACCEPT;
    } else if (strcmp(t[0].s, "expect") == 0 && nt >= 2) {
        s->kind = S_EXPECT;
        make_pat(&s->p, t + 1, nt - 1);
    } else if ((strcmp(t[0].s, "send") == 0 || strcmp(t[0].s, "send-bytewise") == 0) && nt >= 2) {
        s->kind = t[0].s[4] ? S_SENDBYTES : S_SEND;
        concat(t + 1, nt - 1, &s->data, &s->len);
    } else if (strcmp(t[0].s, "slots") == 0) {
        s->kind = S_SEND;
        if (make_slots(t + 1, nt - 1, &s->data, &s->len) < 0)
            goto bad;
    } else if ((strcmp(t[0].s, "stall") == 0 || strcmp(t[0].s, "timeout") == 0) && nt == 2 &&
               atoi(t[1].s) >= 0) {
        s->kind = t[0].s[0] == 's' ? S_STALL : S_TIMEOUT;
        s->ms = atoi(t[1].s);
    } else if (strcmp(t[0].s, "use") == 0 && nt == 2 && atoi(t[1].s) >= 0) {
        s->kind = S_USE;
        s->ms = atoi(t[1].s);
    } else if (strcmp(t[0].s, "close") == 0 && nt == 1) {
        s->kind = S_CLOSE;
    } else if (strcmp(t[0].s, "expect-close") == 0 && nt == 1) {
        s->kind = S_EXPECT_CLOSE;
    } else if (strcmp(t[0].s, "on") == 0 && nt >= 4) {
        int arrow;
        s->kind = S_RULE;
        s->times = -1;
        if (t[1].s[0] == 'x' && isdigit((unsigned char)t[1].s[1]) && !t[1].quoted) {
            s->times = atoi(t[1].s + 1);
            k = 2;
        }
        for (arrow = k; arrow < nt && !(strcmp(t[arrow].s, "=>") == 0 && !t[arrow].quoted); arrow++)
            ;
        if (arrow == k || arrow + 1 >= nt)
            goto bad;
        make_pat(&s->p, t + k, arrow - k);
        if (strcmp(t[arrow + 1].s, "send") == 0 && nt > arrow + 2) {
            s->action = A_SEND;
            concat(t + arrow + 2, nt - arrow - 2, &s->data, &s->len);
        } else if (strcmp(t[arrow + 1].s, "slots") == 0) {
            s->action = A_SEND;
            if (make_slots(t + arrow + 2, nt - arrow - 2, &s->data, &s->len) < 0)
                goto bad;
        } else if (strcmp(t[arrow + 1].s, "hang") == 0 && nt == arrow + 2) {
            s->action = A_HANG;
        } else if (strcmp(t[arrow + 1].s, "close") == 0 && nt == arrow + 2) {
            s->action = A_CLOSE;
        } else if (strcmp(t[arrow + 1].s, "echo") == 0 && nt == arrow + 2) {
            s->action = A_ECHO;
        } else {
            goto bad;
        }
    } else {
        goto bad;
    }
    rv = 0;
bad:
    if (rv < 0) {
        snprintf(err, errlen, "line %d: cannot parse \"%s\"", lineno, raw);
        pat_free(&s->p);
        free(s->data);
        s->data = NULL;
    }
    toks_free(t, nt);
    return rv;
}

int sim_load(sim_node *n, const char *script, char *err, size_t errlen)
{
    step *tmp = NULL;
    size_t ntmp = 0, cap = 0;
    int lineno = 0;
    const char *p = script;
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        char *line = xrealloc(NULL, l + 1);
        step s;
        int rv;
        memcpy(line, p, l);
        line[l] = '\0';
        lineno++;
        rv = parse_line(n, line, lineno, &s, err, errlen);
        free(line);
        if (rv < 0) {
            for (size_t i = 0; i < ntmp; i++) {
                pat_free(&tmp[i].p);
                free(tmp[i].data);
            }
            free(tmp);
            return -1;
        }
        if (rv == 0) {
            GROW(tmp, ntmp, cap);
            tmp[ntmp++] = s;
        }
        p = e ? e + 1 : p + l;
    }
    pthread_mutex_lock(&n->mu);
    for (size_t i = 0; i < ntmp; i++) {
        GROW(n->steps, n->nsteps, n->capsteps);
        n->steps[n->nsteps++] = tmp[i];
    }
    pthread_mutex_unlock(&n->mu);
    free(tmp);
    return 0;
}

int sim_load_file(sim_node *n, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *text;
    long sz;
    int rv;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fseek(f, 0, SEEK_END);
    sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = xrealloc(NULL, (size_t)(sz > 0 ? sz : 0) + 1);
    text[fread(text, 1, (size_t)(sz > 0 ? sz : 0), f)] = '\0';
    fclose(f);
    rv = sim_load(n, text, err, errlen);
    free(text);
    return rv;
}

void sim_loadf(sim_node *n, const char *fmt, ...)
{
    va_list ap;
    char *text = NULL, err[300];
    int w;
    va_start(ap, fmt);
    w = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (w < 0)
        abort();
    if (sim_load(n, text, err, sizeof err) < 0) {
        fprintf(stderr, "sim: bad scenario: %s\n", err);
        abort();
    }
    free(text);
}

/* ------------------------------------------------------------------ */
/* the node's thread                                                   */

static void conn_close(sim_node *n, int id)
{
    sconn *c = &n->conns[id];
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    while (c->qhead) {
        qcmd *q = c->qhead;
        c->qhead = q->next;
        free(q);
    }
    c->qtail = NULL;
    c->head_pending = 0;
}

static void script_fail(sim_node *n, const step *s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void script_fail(sim_node *n, const step *s, const char *fmt, ...)
{
    va_list ap;
    int o;
    if (n->failed)
        return;
    n->failed = 1;
    o = snprintf(n->msg, sizeof n->msg, "line %d (%s): ", s->line, s->text);
    va_start(ap, fmt);
    vsnprintf(n->msg + o, sizeof n->msg - (size_t)o, fmt, ap);
    va_end(ap);
}

/* Complete RESP arrays of bulk strings from the connection's input. */
static void parse_input(sim_node *n, int id)
{
    sconn *c = &n->conns[id];
    size_t off = 0;
    for (;;) {
        char *p = c->in + off, *end = c->in + c->inlen, *nl;
        long argc, i;
        char **argv;
        size_t *lens;
        logent *lg;
        qcmd *q;
        if (p >= end)
            break;
        if (*p != '*')
            goto garbage;
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break;
        argc = strtol(p + 1, NULL, 10);
        if (argc < 1 || argc > 1000000)
            goto garbage;
        p = nl + 1;
        argv = xrealloc(NULL, (size_t)argc * sizeof(char *));
        lens = xrealloc(NULL, (size_t)argc * sizeof(size_t));
        for (i = 0; i < argc; i++) {
            long l;
            if (p >= end || !(nl = memchr(p, '\n', (size_t)(end - p))))
                break;
            if (*p != '$' || (l = strtol(p + 1, NULL, 10)) < 0)
                break;
            if ((size_t)(end - (nl + 1)) < (size_t)l + 2)
                break;
            argv[i] = xrealloc(NULL, (size_t)l + 1);
            memcpy(argv[i], nl + 1, (size_t)l);
            argv[i][l] = '\0';
            lens[i] = (size_t)l;
            p = nl + 1 + l + 2;
        }
        if (i < argc) {
            int bad = p < end && *p != '$' && memchr(p, '\n', (size_t)(end - p));
            while (i > 0)
                free(argv[--i]);
            free(argv);
            free(lens);
            if (bad)
                goto garbage;
            break; /* incomplete: wait for more */
        }
        GROW(n->log, n->nlog, n->caplog);
        lg = &n->log[n->nlog];
        lg->conn = id;
        lg->t_ns = rcptest_now_ns();
        lg->argc = (int)argc;
        lg->argv = argv;
        lg->lens = lens;
        q = xrealloc(NULL, sizeof *q);
        q->logi = n->nlog++;
        q->next = NULL;
        if (c->qtail)
            c->qtail->next = q;
        else
            c->qhead = q;
        c->qtail = q;
        off = (size_t)(p - c->in);
    }
    memmove(c->in, c->in + off, c->inlen - off);
    c->inlen -= off;
    return;
garbage:
    /* Not what a client sends: drop the connection. */
    c->inlen = 0;
    conn_close(n, id);
}

static void read_conn(sim_node *n, int id)
{
    for (;;) {
        sconn *c = &n->conns[id];
        ssize_t r;
        if (c->fd < 0)
            return;
        if (c->incap - c->inlen < 4096) {
            c->incap = c->incap * 2 + 4096;
            c->in = xrealloc(c->in, c->incap);
        }
        r = recv(c->fd, c->in + c->inlen, c->incap - c->inlen, MSG_DONTWAIT);
        if (r > 0) {
            c->inlen += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        c->peer_closed = 1;
        parse_input(n, id);
        conn_close(n, id);
        return;
    }
    parse_input(n, id);
}

static void accept_all(sim_node *n)
{
    for (;;) {
        int fd = accept4(n->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
        sconn *c;
        if (fd < 0)
            return;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        GROW(n->conns, n->nconns, n->capconns);
        c = &n->conns[n->nconns++];
        memset(c, 0, sizeof *c);
        c->fd = fd;
    }
}

/* The `echo` action: the command's last argument as a bulk string. */
static int echo(int fd, const logent *lg)
{
    char head[32];
    size_t len = lg->lens[lg->argc - 1];
    int hl = snprintf(head, sizeof head, "$%zu\r\n", len);
    if (xsend(fd, head, (size_t)hl) < 0 || xsend(fd, lg->argv[lg->argc - 1], len) < 0)
        return -1;
    return xsend(fd, "\r\n", 2);
}

static const step *find_rule(sim_node *n, const logent *lg, rule **which)
{
    for (size_t i = n->nrules; i-- > 0;) {
        const step *s = &n->steps[n->rules[i].step];
        if (n->rules[i].left == 0)
            continue;
        if (pat_match(&s->p, lg->argc, lg->argv, lg->lens)) {
            *which = &n->rules[i];
            return s;
        }
    }
    return NULL;
}

static void serve_rules(sim_node *n)
{
    for (size_t id = 0; id < n->nconns; id++) {
        sconn *c = &n->conns[id];
        while (c->fd >= 0 && c->qhead && !c->head_pending && n->hold != (int)id) {
            rule *r = NULL;
            const logent *lg = &n->log[c->qhead->logi];
            const step *s = find_rule(n, lg, &r);
            qcmd *q;
            if (!s) {
                c->head_pending = 1;
                break;
            }
            q = c->qhead;
            c->qhead = q->next;
            if (!c->qhead)
                c->qtail = NULL;
            free(q);
            if (r->left > 0)
                r->left--;
            if (s->action == A_SEND && xsend(c->fd, s->data, s->len) < 0)
                conn_close(n, (int)id);
            else if (s->action == A_ECHO && echo(c->fd, lg) < 0)
                conn_close(n, (int)id);
            else if (s->action == A_CLOSE)
                conn_close(n, (int)id);
        }
    }
}

/* Runs steps until one has to wait. */
static void run_script(sim_node *n)
{
    for (;;) {
        step *s;
        uint64_t now = rcptest_now_ns();
        int done = 0, timed = 1;
        sconn *cur;
        if (n->failed)
            return;
        if (n->idx >= n->nsteps) {
            n->hold = -1;
            return;
        }
        s = &n->steps[n->idx];
        if (!n->waiting) {
            n->waiting = 1;
            n->step_start = now;
            n->stall_until = now + (uint64_t)s->ms * 1000000ull;
            n->bytes_off = 0;
            n->next_byte_at = 0;
        }
        cur = n->cur >= 0 ? &n->conns[n->cur] : NULL;
        switch (s->kind) {
        case S_ACCEPT:
            n->hold = -1;
            for (size_t i = 0; i < n->nconns && !done; i++) {
                if (!n->conns[i].claimed) {
                    n->conns[i].claimed = 1;
                    n->cur = (int)i;
                    done = 1;
                }
            }
            break;
        case S_EXPECT: {
            int best = -1;
            uint64_t best_seq = UINT64_MAX;
            n->hold = -1;
            serve_rules(n);
            for (size_t i = 0; i < n->nconns; i++) {
                sconn *c = &n->conns[i];
                if (c->head_pending && c->qhead && c->qhead->logi < best_seq) {
                    best = (int)i;
                    best_seq = c->qhead->logi;
                }
            }
            if (best >= 0) {
                sconn *c = &n->conns[best];
                qcmd *q = c->qhead;
                logent *lg = &n->log[q->logi];
                c->qhead = q->next;
                if (!c->qhead)
                    c->qtail = NULL;
                free(q);
                c->head_pending = 0;
                c->claimed = 1;
                n->cur = n->hold = best;
                if (!pat_match(&s->p, lg->argc, lg->argv, lg->lens)) {
                    char got[300];
                    join_args(lg->argc, lg->argv, lg->lens, got, sizeof got);
                    script_fail(n, s, "got [%s] on connection %d", got, best);
                    return;
                }
                done = 1;
            }
            break;
        }
        case S_SEND:
        case S_SENDBYTES:
            timed = 0;
            if (!cur || cur->fd < 0) {
                script_fail(n, s, "no open connection to send on");
                return;
            }
            if (s->kind == S_SEND) {
                if (xsend(cur->fd, s->data, s->len) < 0) {
                    /* A client that closed the connection did not want the
                     * rest (a reply past max_reply_bytes): how much of a
                     * long send lands before its reset is timing, not the
                     * test's subject. */
                    if (errno == EPIPE || errno == ECONNRESET) {
                        cur->peer_closed = 1;
                        done = 1;
                        break;
                    }
                    script_fail(n, s, "send failed: %s", strerror(errno));
                    return;
                }
                done = 1;
            } else if (now >= n->next_byte_at) {
                if (xsend(cur->fd, s->data + n->bytes_off, 1) < 0) {
                    script_fail(n, s, "send failed: %s", strerror(errno));
                    return;
                }
                n->next_byte_at = now + 1000000ull;
                done = ++n->bytes_off == s->len;
            }
            break;
        case S_STALL:
            timed = 0;
            done = now >= n->stall_until;
            break;
        case S_TIMEOUT:
            n->step_timeout_ms = rcptest_scale(s->ms);
            done = 1;
            break;
        case S_CLOSE:
            if (cur)
                conn_close(n, n->cur);
            done = 1;
            break;
        case S_USE:
            /* The connection held for the script (its queued commands
             * wait) stays held; only where send and close go changes. */
            if ((size_t)s->ms < n->nconns) {
                n->conns[s->ms].claimed = 1;
                n->cur = s->ms;
                done = 1;
            }
            break;
        case S_EXPECT_CLOSE:
            if (!cur) {
                script_fail(n, s, "no connection");
                return;
            }
            done = cur->peer_closed;
            break;
        case S_RULE:
            GROW(n->rules, n->nrules, n->caprules);
            n->rules[n->nrules].step = n->idx;
            n->rules[n->nrules].left = s->times;
            n->nrules++;
            /* Commands already waiting for the script get a look too:
             * the rule answers them from now on. */
            for (size_t i = 0; i < n->nconns; i++)
                n->conns[i].head_pending = 0;
            done = 1;
            break;
        }
        if (!done) {
            if (timed && now - n->step_start > (uint64_t)n->step_timeout_ms * 1000000ull)
                script_fail(n, s, "nothing happened within %d ms", n->step_timeout_ms);
            return;
        }
        n->idx++;
        n->waiting = 0;
    }
}

static void *node_main(void *arg)
{
    sim_node *n = arg;
    struct pollfd *pf = NULL;
    size_t cap = 0;
    while (!atomic_load(&n->stop)) {
        size_t k = 0;
        int ms = 5;
        pthread_mutex_lock(&n->mu);
        if (cap < n->nconns + 1) {
            cap = (n->nconns + 1) * 2;
            pf = xrealloc(pf, cap * sizeof *pf);
        }
        pf[k].fd = n->lfd;
        pf[k].events = POLLIN;
        pf[k++].revents = 0;
        for (size_t i = 0; i < n->nconns; i++) {
            pf[k].fd = n->conns[i].fd; /* -1: ignored by poll */
            pf[k].events = POLLIN;
            pf[k++].revents = 0;
        }
        if (n->idx < n->nsteps && n->waiting &&
            (n->steps[n->idx].kind == S_SENDBYTES || n->steps[n->idx].kind == S_STALL))
            ms = 1;
        pthread_mutex_unlock(&n->mu);

        poll(pf, (nfds_t)k, ms);

        pthread_mutex_lock(&n->mu);
        if (pf[0].revents)
            accept_all(n);
        for (size_t i = 1; i < k; i++)
            if (pf[i].revents && pf[i].fd >= 0)
                read_conn(n, (int)(i - 1));
        serve_rules(n);
        run_script(n);
        serve_rules(n);
        pthread_mutex_unlock(&n->mu);
    }
    free(pf);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* the test thread's side                                              */

sim_node *sim_new(const char *bind_host)
{
    sim_node *n = xrealloc(NULL, sizeof *n);
    struct addrinfo hints, *res = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int one = 1;

    memset(n, 0, sizeof *n);
    n->cur = n->hold = -1;
    n->step_timeout_ms = rcptest_scale(10000);
    pthread_mutex_init(&n->mu, NULL);
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
    if (getaddrinfo(bind_host ? bind_host : "127.0.0.1", "0", &hints, &res) != 0)
        goto fail;
    n->lfd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (n->lfd < 0)
        goto fail;
    setsockopt(n->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(n->lfd, res->ai_addr, res->ai_addrlen) < 0 || listen(n->lfd, 128) < 0 ||
        getsockname(n->lfd, (struct sockaddr *)&ss, &sl) < 0)
        goto fail;
    n->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    freeaddrinfo(res);
    res = NULL;
    n->ports[0] = n->port;
    n->nports = 1;
    if (pthread_create(&n->th, NULL, node_main, n) != 0)
        goto fail;
    n->started = 1;
    return n;
fail:
    if (res)
        freeaddrinfo(res);
    if (n->lfd > 0)
        close(n->lfd);
    pthread_mutex_destroy(&n->mu);
    free(n);
    return NULL;
}

void sim_free(sim_node *n)
{
    if (!n)
        return;
    atomic_store(&n->stop, 1);
    if (n->started)
        pthread_join(n->th, NULL);
    close(n->lfd);
    for (size_t i = 0; i < n->nconns; i++) {
        conn_close(n, (int)i);
        free(n->conns[i].in);
    }
    free(n->conns);
    for (size_t i = 0; i < n->nsteps; i++) {
        pat_free(&n->steps[i].p);
        free(n->steps[i].data);
    }
    free(n->steps);
    free(n->rules);
    for (size_t i = 0; i < n->nlog; i++) {
        for (int a = 0; a < n->log[i].argc; a++)
            free(n->log[i].argv[a]);
        free(n->log[i].argv);
        free(n->log[i].lens);
    }
    free(n->log);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

void sim_free_all(sim_node **nodes, int k)
{
    for (int i = 0; i < k; i++) {
        sim_free(nodes[i]);
        nodes[i] = NULL;
    }
}

int sim_start(sim_node **nodes, int k)
{
    int ports[SIM_MAX_NODES];
    if (k < 1 || k > SIM_MAX_NODES)
        return -1;
    for (int i = 0; i < k; i++) {
        nodes[i] = sim_new(NULL);
        if (!nodes[i]) {
            sim_free_all(nodes, i);
            return -1;
        }
        ports[i] = sim_port(nodes[i]);
    }
    for (int i = 0; i < k; i++)
        sim_set_ports(nodes[i], ports, k);
    return 0;
}

int sim_port(const sim_node *n)
{
    return n->port;
}

void sim_set_ports(sim_node *n, const int *ports, int k)
{
    pthread_mutex_lock(&n->mu);
    n->nports = k < SIM_MAX_NODES ? k : SIM_MAX_NODES;
    memcpy(n->ports, ports, (size_t)n->nports * sizeof(int));
    pthread_mutex_unlock(&n->mu);
}

int sim_wait(sim_node *n, int timeout_ms)
{
    uint64_t until = rcptest_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        int st;
        pthread_mutex_lock(&n->mu);
        st = n->failed ? -1 : n->idx >= n->nsteps ? 0 : 1;
        pthread_mutex_unlock(&n->mu);
        if (st <= 0)
            return st;
        if (rcptest_now_ns() >= until)
            return -1;
        rcptest_sleep_ms(2);
    }
}

const char *sim_status(sim_node *n, char *out, size_t len)
{
    pthread_mutex_lock(&n->mu);
    if (n->failed)
        snprintf(out, len, "failed: %s", n->msg);
    else if (n->idx < n->nsteps)
        snprintf(out, len, "running: waiting at line %d (%s)", n->steps[n->idx].line,
                 n->steps[n->idx].text);
    else
        snprintf(out, len, "ok");
    pthread_mutex_unlock(&n->mu);
    return out;
}

size_t sim_count(sim_node *n, const char *pattern)
{
    tok t[64];
    int nt = tokenize(pattern, t, 64);
    pat p;
    size_t c = 0;
    if (nt <= 0) {
        if (nt == 0)
            return 0;
        fprintf(stderr, "sim_count: bad pattern %s\n", pattern);
        abort();
    }
    make_pat(&p, t, nt);
    toks_free(t, nt);
    pthread_mutex_lock(&n->mu);
    for (size_t i = 0; i < n->nlog; i++)
        c += (size_t)pat_match(&p, n->log[i].argc, n->log[i].argv, n->log[i].lens);
    pthread_mutex_unlock(&n->mu);
    pat_free(&p);
    return c;
}

size_t sim_wait_count(sim_node *n, const char *pattern, size_t want, int timeout_ms)
{
    uint64_t until = rcptest_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    size_t c;
    while ((c = sim_count(n, pattern)) < want && rcptest_now_ns() < until)
        rcptest_sleep_ms(2);
    return c;
}

int sim_log_at(sim_node *n, size_t i, sim_cmd *out)
{
    int rv = -1;
    pthread_mutex_lock(&n->mu);
    if (i < n->nlog) {
        const logent *lg = &n->log[i];
        out->conn = lg->conn;
        out->t_ns = lg->t_ns;
        join_args(lg->argc, lg->argv, lg->lens, out->line, sizeof out->line);
        rv = 0;
    }
    pthread_mutex_unlock(&n->mu);
    return rv;
}

size_t sim_log_len(sim_node *n)
{
    size_t k;
    pthread_mutex_lock(&n->mu);
    k = n->nlog;
    pthread_mutex_unlock(&n->mu);
    return k;
}

int sim_conns(sim_node *n)
{
    int k;
    pthread_mutex_lock(&n->mu);
    k = (int)n->nconns;
    pthread_mutex_unlock(&n->mu);
    return k;
}

int sim_conns_closed_by_peer(sim_node *n)
{
    int k = 0;
    pthread_mutex_lock(&n->mu);
    for (size_t i = 0; i < n->nconns; i++)
        k += n->conns[i].peer_closed;
    pthread_mutex_unlock(&n->mu);
    return k;
}

int sim_dead_port(void)
{
    sim_node *d = sim_new(NULL);
    int p;
    ck_assert_ptr_nonnull(d);
    p = sim_port(d);
    sim_free(d);
    return p;
}

void sim_cluster_options(rcp_cluster_options *o, rcp_conn_options *node, const char *seeds)
{
    rcptest_cluster_options(o, node, seeds, 1000, 3000, 5, 100);
    o->refresh_interval_ms = 600000; /* the tests trigger refreshes */
}

static void fut_resolve(rcp_future *f, rcp_reply *r)
{
    sim_fut *sf = (sim_fut *)f;
    pthread_mutex_lock(&sf->mu);
    sf->calls++;
    sf->type = r->type;
    sf->err = r->err;
    sf->integer = r->integer;
    sf->len = 0;
    sf->str[0] = '\0';
    if (r->str) {
        sf->len = r->len < sizeof sf->str - 1 ? r->len : sizeof sf->str - 1;
        memcpy(sf->str, r->str, sf->len);
        sf->str[sf->len] = '\0';
    }
    sf->t_ns = rcptest_now_ns();
    pthread_cond_broadcast(&sf->cv);
    pthread_mutex_unlock(&sf->mu);
}

void sim_fut_init(sim_fut *sf, int timeout_ms)
{
    memset(sf, 0, sizeof *sf);
    sf->f.resolve = fut_resolve;
    sf->f.timeout_ms = timeout_ms;
    pthread_mutex_init(&sf->mu, NULL);
    pthread_cond_init(&sf->cv, NULL);
}

int sim_fut_wait(sim_fut *sf, int timeout_ms)
{
    struct timespec ts;
    int rv = 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&sf->mu);
    while (!sf->calls && rv == 0)
        rv = pthread_cond_timedwait(&sf->cv, &sf->mu, &ts);
    rv = sf->calls ? 0 : -1;
    pthread_mutex_unlock(&sf->mu);
    return rv;
}

void sim_fut_destroy(sim_fut *sf)
{
    pthread_mutex_destroy(&sf->mu);
    pthread_cond_destroy(&sf->cv);
}

const char *sim_addr(const sim_node *n, char *buf, size_t len)
{
    snprintf(buf, len, "127.0.0.1:%d", n->port);
    return buf;
}

rcp_cluster *sim_open(const rcp_cluster_options *o)
{
    rcp_cluster *cl = NULL;
    char err[2048] = "";
    int rc = rcp_cluster_open(o, &cl, err, sizeof err);
    ck_assert_msg(rc == RCP_OK, "rcp_cluster_open: %s (%s)", rcp_strerror(rc), err);
    return cl;
}

void sim_assert_done(sim_node *n, int timeout_ms)
{
    char st[800];
    ck_assert_msg(sim_wait(n, timeout_ms) == 0, "scenario: %s", sim_status(n, st, sizeof st));
}

uint64_t sim_wait_stat(rcp_cluster *cl, size_t off, uint64_t want, int timeout_ms)
{
    uint64_t until = rcptest_now_ns() + (uint64_t)timeout_ms * 1000000ull, v;
    for (;;) {
        rcp_cluster_stats st;
        ck_assert_int_eq(rcp_cluster_get_stats(cl, &st), RCP_OK);
        memcpy(&v, (const char *)&st + off, sizeof v);
        if (v >= want || rcptest_now_ns() >= until)
            return v;
        rcptest_sleep_ms(5);
    }
}

int sim_run(const char *name, TCase *tc)
{
    Suite *s = suite_create(name);

    tcase_set_timeout(tc, rcptest_scale(90));
    suite_add_tcase(s, tc);
    return rcptest_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
