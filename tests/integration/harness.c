/* harness.c: redis-server processes for the integration tests.
 *
 * Owns the child processes and their temporary directories. A registry of
 * the servers this process started lets an atexit handler kill whatever a
 * failed test left running; PR_SET_PDEATHSIG covers the exits that skip
 * atexit handlers (check's fork mode may leave a failed test with _exit, a
 * crash, a timeout kill). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "harness.h"

#include <check.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define START_TIMEOUT_MS 10000
#define STOP_GRACE_MS 5000
#define MAX_REG 16

struct reg_entry {
    int used;
    pid_t owner; /* the process that started it: forked test children inherit the table */
    pid_t pid;
    char dir[PATH_MAX];
};

static struct reg_entry reg[MAX_REG];
static char server_path[PATH_MAX];
static char base_dir[PATH_MAX - 64];
static pid_t base_owner;
static pid_t atexit_pid;

static int keep_dirs(void)
{
    return rcptest_env_flag("RCP_IT_KEEP");
}

/* Kills what this very process started and is still running. */
static void cleanup_at_exit(void)
{
    pid_t me = getpid();
    int i;

    for (i = 0; i < MAX_REG; i++) {
        if (!reg[i].used || reg[i].owner != me)
            continue;
        if (reg[i].pid > 0) {
            kill(reg[i].pid, SIGKILL);
            rcptest_reap(reg[i].pid);
        }
        if (!keep_dirs())
            rcptest_remove_tree(reg[i].dir);
        reg[i].used = 0;
    }
    if (base_owner == me && !keep_dirs())
        rcptest_remove_tree(base_dir);
}

static void ensure_atexit(void)
{
    /* Handlers registered by a parent are inherited across fork and check
     * the owner pid, so one registration per process tree is enough. */
    if (atexit_pid == 0) {
        atexit_pid = getpid();
        atexit(cleanup_at_exit);
    }
}

static int is_executable(const char *p)
{
    return p[0] != '\0' && access(p, X_OK) == 0;
}

static int find_in_path(const char *name, char *out, size_t outlen)
{
    const char *path = getenv("PATH");
    const char *p;

    if (path == NULL)
        return -1;
    p = path;
    while (*p != '\0') {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 0 && n + strlen(name) + 2 < outlen) {
            snprintf(out, outlen, "%.*s/%s", (int)n, p, name);
            if (is_executable(out))
                return 0;
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    out[0] = '\0';
    return -1;
}

int rcpt_init(char *err, size_t errlen)
{
    const char *env = getenv("RCP_REDIS_SERVER");

    if (env != NULL) {
        if (rcptest_check_server_env(env, err, errlen) != 0)
            return -1;
        snprintf(server_path, sizeof server_path, "%s", env);
    } else if (find_in_path("redis-server", server_path, sizeof server_path) != 0) {
        rcptest_fmt_err(err, errlen, "redis-server not found: RCP_REDIS_SERVER is unset and "
                                     "there is no redis-server in PATH");
        return -1;
    }
    if (rcptest_mkdtemp("rcpit", base_dir, sizeof base_dir, err, errlen) != 0)
        return -1;
    base_owner = getpid();
    ensure_atexit();
    return 0;
}

const char *rcpt_server_path(void)
{
    return server_path;
}

static int try_bind(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    int got = -1;
    socklen_t alen = sizeof a;

    if (fd < 0)
        return -1;
    /* Same option redis uses: a port only held by TIME_WAIT sockets is free
     * for it, one with a listener is not. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
        got = ntohs(a.sin_port);
    close(fd);
    return got;
}

/* A free port. Prefer one below the kernel's ephemeral range: a client
 * reconnecting to a dead server on an ephemeral port can, rarely, be given
 * that very port as its own and connect to itself (TCP simultaneous open),
 * which would then keep the restarted server from binding. Falls back to
 * port 0 (the kernel's choice). */
static int pick_port(void)
{
    static unsigned seed;
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int i;

    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    if (seed == 0)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)rcptest_now_ms();
    if (lo > 12000) {
        for (i = 0; i < 64; i++) {
            int p;
            seed = seed * 1103515245u + 12345u;
            p = 10000 + (int)((seed >> 8) % (unsigned)(lo - 10000));
            if (try_bind(p) == p)
                return p;
        }
    }
    return try_bind(0);
}

static int reg_add(const char *dir)
{
    int i;

    for (i = 0; i < MAX_REG; i++) {
        if (!reg[i].used) {
            reg[i].used = 1;
            reg[i].owner = getpid();
            reg[i].pid = 0;
            snprintf(reg[i].dir, sizeof reg[i].dir, "%s", dir);
            return i;
        }
    }
    return -1;
}

static void reg_set_pid(const rcpt_server *s)
{
    if (s->slot >= 0 && s->slot < MAX_REG)
        reg[s->slot].pid = s->pid;
}

static void log_tail(const rcpt_server *s, char *out, size_t outlen)
{
    char path[PATH_MAX + 32];
    static const char *const files[] = {"redis.log", "stdout.log"};
    size_t used = 0;
    size_t k;

    out[0] = '\0';
    for (k = 0; k < 2; k++) {
        FILE *f;
        long sz;
        size_t n;
        size_t room;

        snprintf(path, sizeof path, "%s/%s", s->dir, files[k]);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        fseek(f, 0, SEEK_END);
        sz = ftell(f);
        room = outlen - used - 1;
        if (room > 600)
            room = 600;
        if (sz > (long)room)
            fseek(f, sz - (long)room, SEEK_SET);
        else
            fseek(f, 0, SEEK_SET);
        n = fread(out + used, 1, room, f);
        used += n;
        out[used] = '\0';
        fclose(f);
        if (outlen - used < 8)
            break;
    }
}

/* fork + exec one redis-server on s->port. Everything the child needs is
 * prepared before fork: between fork and exec only async-signal-safe calls
 * (the parent may have many threads). */
static int spawn(rcpt_server *s)
{
    char portbuf[16];
    char logpath[PATH_MAX + 16];
    char outpath[PATH_MAX + 16];
    const char *argv[24 + RCPT_MAX_EXTRA_ARGS];
    int n = 0;
    int i;
    int outfd;
    int nullfd;
    pid_t parent = getpid();
    pid_t pid;

    snprintf(portbuf, sizeof portbuf, "%d", s->port);
    snprintf(logpath, sizeof logpath, "%s/redis.log", s->dir);
    snprintf(outpath, sizeof outpath, "%s/stdout.log", s->dir);
    argv[n++] = server_path;
    argv[n++] = "--bind";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--port";
    argv[n++] = portbuf;
    argv[n++] = "--save";
    argv[n++] = "";
    argv[n++] = "--appendonly";
    argv[n++] = "no";
    argv[n++] = "--dir";
    argv[n++] = s->dir;
    argv[n++] = "--logfile";
    argv[n++] = logpath;
    argv[n++] = "--daemonize";
    argv[n++] = "no";
    for (i = 0; i < s->nargs; i++)
        argv[n++] = strcmp(s->args[i], RCPT_PORT_ARG) == 0 ? portbuf : s->args[i];
    argv[n] = NULL;

    outfd = open(outpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (outfd < 0 || nullfd < 0) {
        if (outfd >= 0)
            close(outfd);
        if (nullfd >= 0)
            close(nullfd);
        return -1;
    }

    pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        rcptest_child_reset(nullfd, outfd, outfd, -1);
        execv(server_path, (char *const *)argv);
        _exit(127);
    }
    close(outfd);
    close(nullfd);
    if (pid < 0)
        return -1;
    s->pid = pid;
    s->paused = 0;
    reg_set_pid(s);
    return 0;
}

/* A server whose arguments move the port elsewhere (RCPT_PORT_ARG, e.g.
 * "--port 0 --tls-port @PORT@") cannot answer a plain PING: it is ready
 * once its port takes a TCP connection (nothing to load: no persistence). */
static int port_moved(const rcpt_server *s)
{
    int i;
    for (i = 0; i < s->nargs; i++)
        if (strcmp(s->args[i], RCPT_PORT_ARG) == 0)
            return 1;
    return 0;
}

static int tcp_accepts(int port)
{
    int fd = rcptest_connect_loopback(port, 500);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

/* 1: answering; 0: the process exited (reaped); -1: timed out. */
static int wait_ready(rcpt_server *s, int timeout_ms)
{
    int64_t deadline = rcptest_now_ms() + timeout_ms;

    for (;;) {
        int st;
        pid_t w = waitpid(s->pid, &st, WNOHANG);

        if (w == s->pid) {
            s->pid = 0;
            reg_set_pid(s);
            return 0;
        }
        if (port_moved(s) ? tcp_accepts(s->port) : rcpt_ping(s->port, 500))
            return 1;
        if (rcptest_now_ms() > deadline)
            return -1;
        rcptest_sleep_ms(10);
    }
}

static void hard_kill(rcpt_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        rcptest_reap(s->pid);
        s->pid = 0;
        s->paused = 0;
        reg_set_pid(s);
    }
}

int rcpt_server_start(rcpt_server *s, const char *const *extra_args, char *err, size_t errlen)
{
    char tmpl[PATH_MAX];
    int attempt;

    memset(s, 0, sizeof *s);
    s->slot = -1;
    if (server_path[0] == '\0') {
        char e[256];
        if (rcpt_init(e, sizeof e) != 0) {
            rcptest_fmt_err(err, errlen, "%s", e);
            return -1;
        }
    }
    ensure_atexit();
    /* In check's fork mode this is a test child of the runner: if the
     * runner is killed, the child (and through PR_SET_PDEATHSIG its
     * servers) must not live on. */
    if (base_owner != 0 && getpid() != base_owner) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != base_owner)
            _exit(1);
    }
    if (extra_args != NULL) {
        while (extra_args[s->nargs] != NULL) {
            if (s->nargs >= RCPT_MAX_EXTRA_ARGS) {
                rcptest_fmt_err(err, errlen, "too many extra redis-server arguments");
                return -1;
            }
            s->args[s->nargs] = strdup(extra_args[s->nargs]);
            s->nargs++;
        }
    }
    snprintf(tmpl, sizeof tmpl, "%s/srv.XXXXXX", base_dir[0] ? base_dir : "/tmp");
    if (mkdtemp(tmpl) == NULL) {
        rcptest_fmt_err(err, errlen, "mkdtemp(%s): %s", tmpl, strerror(errno));
        return -1;
    }
    snprintf(s->dir, sizeof s->dir, "%s", tmpl);
    s->slot = reg_add(s->dir);
    if (s->slot < 0) {
        rcptest_fmt_err(err, errlen, "too many servers in one test process");
        rcptest_remove_tree(s->dir);
        return -1;
    }

    for (attempt = 0; attempt < 8; attempt++) {
        int r;

        s->port = pick_port();
        if (s->port <= 0) {
            rcptest_fmt_err(err, errlen, "no free port on 127.0.0.1: %s", strerror(errno));
            continue;
        }
        if (spawn(s) != 0) {
            rcptest_fmt_err(err, errlen, "fork/exec %s: %s", server_path, strerror(errno));
            continue;
        }
        r = wait_ready(s, START_TIMEOUT_MS);
        if (r == 1)
            return 0;
        {
            char tail[1300];
            log_tail(s, tail, sizeof tail);
            rcptest_fmt_err(err, errlen, "%s on port %d %s (attempt %d); log tail:\n%s",
                            server_path,
                    s->port, r == 0 ? "exited" : "did not answer PING in time", attempt + 1, tail);
        }
        hard_kill(s);
        /* An exit is most likely a port taken between our probe and its
         * bind: try another port. A hang is not going to get better. */
        if (r != 0)
            break;
    }
    return -1;
}

int rcpt_server_kill(rcpt_server *s)
{
    if (s->pid <= 0)
        return -1;
    hard_kill(s);
    return 0;
}

int rcpt_server_restart(rcpt_server *s, char *err, size_t errlen)
{
    int64_t deadline = rcptest_now_ms() + START_TIMEOUT_MS;

    if (s->pid > 0) {
        rcptest_fmt_err(err, errlen, "restart: the server (pid %d) is still running", (int)s->pid);
        return -1;
    }
    for (;;) {
        int r;

        if (spawn(s) != 0) {
            rcptest_fmt_err(err, errlen, "restart: fork/exec: %s", strerror(errno));
            return -1;
        }
        r = wait_ready(s, START_TIMEOUT_MS);
        if (r == 1)
            return 0;
        {
            char tail[1300];
            log_tail(s, tail, sizeof tail);
            rcptest_fmt_err(err, errlen, "restart on port %d: server %s; log tail:\n%s", s->port,
                    r == 0 ? "exited" : "did not answer PING in time", tail);
        }
        hard_kill(s);
        if (r != 0 || rcptest_now_ms() > deadline)
            return -1;
        /* The same port must be used: wait for it to be released. */
        rcptest_sleep_ms(100);
    }
}

int rcpt_server_pause(rcpt_server *s)
{
    int st;

    if (s->pid <= 0 || s->paused)
        return -1;
    if (kill(s->pid, SIGSTOP) != 0)
        return -1;
    for (;;) {
        pid_t w = waitpid(s->pid, &st, WUNTRACED);
        if (w < 0 && errno == EINTR)
            continue;
        if (w != s->pid)
            return -1;
        if (WIFSTOPPED(st)) {
            s->paused = 1;
            return 0;
        }
        /* It died instead. */
        s->pid = 0;
        reg_set_pid(s);
        return -1;
    }
}

int rcpt_server_resume(rcpt_server *s)
{
    int st;

    if (s->pid <= 0 || !s->paused)
        return -1;
    if (kill(s->pid, SIGCONT) != 0)
        return -1;
    for (;;) {
        pid_t w = waitpid(s->pid, &st, WCONTINUED);
        if (w < 0 && errno == EINTR)
            continue;
        if (w != s->pid)
            return -1;
        if (WIFCONTINUED(st)) {
            s->paused = 0;
            return 0;
        }
        s->pid = 0;
        reg_set_pid(s);
        return -1;
    }
}

void rcpt_server_stop(rcpt_server *s)
{
    int i;

    if (s->pid > 0) {
        int64_t deadline = rcptest_now_ms() + STOP_GRACE_MS;
        int st;
        int done = 0;

        kill(s->pid, SIGTERM);
        if (s->paused)
            kill(s->pid, SIGCONT);
        while (rcptest_now_ms() < deadline) {
            pid_t w = waitpid(s->pid, &st, WNOHANG);
            if (w == s->pid && (WIFEXITED(st) || WIFSIGNALED(st))) {
                done = 1;
                break;
            }
            rcptest_sleep_ms(10);
        }
        if (!done) {
            kill(s->pid, SIGKILL);
            rcptest_reap(s->pid);
        }
        s->pid = 0;
        s->paused = 0;
        reg_set_pid(s);
    }
    if (s->slot >= 0 && s->slot < MAX_REG) {
        reg[s->slot].used = 0;
        s->slot = -1;
    }
    if (s->dir[0] != '\0' && !keep_dirs())
        rcptest_remove_tree(s->dir);
    s->dir[0] = '\0';
    for (i = 0; i < s->nargs; i++) {
        free(s->args[i]);
        s->args[i] = NULL;
    }
    s->nargs = 0;
}

int rcpt_ping(int port, int timeout_ms)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    char buf[256];
    size_t got = 0;
    int fd = rcptest_connect_loopback(port, timeout_ms);
    int ok = 0;

    if (fd < 0)
        return 0;
    if (send(fd, ping, sizeof ping - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof ping - 1))
        goto out;
    while (got < sizeof buf - 1) {
        ssize_t n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        if (strstr(buf, "\r\n") != NULL)
            break;
    }
    buf[got] = '\0';
    if (strncmp(buf, "+PONG\r\n", 7) == 0 || strncmp(buf, "-NOAUTH", 7) == 0)
        ok = 1;
out:
    close(fd);
    return ok;
}

void rcpt_options(rcp_conn_options *o, const rcpt_server *s)
{
    rcp_conn_options_init(o);
    o->host = "127.0.0.1";
    o->port = s->port;
}

void rcpt_tls_server_start_ok(rcpt_server *s, const char *cert, const char *const *extra)
{
    char err[2048], crt[64], key[64];
    const char *args[RCPT_MAX_EXTRA_ARGS + 1];
    int n = 0;
    ck_assert_msg(rcptest_tls_certs(err, sizeof err) != NULL, "TLS certificates: %s", err);
    snprintf(crt, sizeof crt, "%s.crt", cert);
    snprintf(key, sizeof key, "%s.key", cert);
    args[n++] = "--port";
    args[n++] = "0";
    args[n++] = "--tls-port";
    args[n++] = RCPT_PORT_ARG;
    args[n++] = "--tls-cert-file";
    args[n++] = rcptest_tls_file(crt);
    args[n++] = "--tls-key-file";
    args[n++] = rcptest_tls_file(key);
    args[n++] = "--tls-ca-cert-file";
    args[n++] = rcptest_tls_file("ca.crt");
    args[n++] = "--tls-auth-clients";
    args[n++] = "no";
    while (extra && *extra && n < RCPT_MAX_EXTRA_ARGS)
        args[n++] = *extra++;
    args[n] = NULL;
    ck_assert_msg(rcpt_server_start(s, args, err, sizeof err) == 0, "%s", err);
}

void rcpt_tls_options(rcp_conn_options *o, const rcpt_server *s)
{
    rcpt_options(o, s);
    o->tls = 1;
    o->tls_ca_file = rcptest_tls_file("ca.crt");
}

int rcpt_is_string(const rcp_reply *r, const char *s, size_t len)
{
    return r != NULL && r->type == RCP_REPLY_STRING && r->err == RCP_OK && r->len == len &&
           r->str != NULL && memcmp(r->str, s, len) == 0 && r->str[len] == '\0';
}

int rcpt_is_cstring(const rcp_reply *r, const char *s)
{
    return rcpt_is_string(r, s, strlen(s));
}

int rcpt_is_status(const rcp_reply *r, const char *s)
{
    return r != NULL && r->type == RCP_REPLY_STATUS && r->err == RCP_OK && r->str != NULL &&
           r->len == strlen(s) && strcmp(r->str, s) == 0;
}

int rcpt_is_client_error(const rcp_reply *r, int err)
{
    return r != NULL && r->type == RCP_REPLY_ERROR && r->err == err && r->str != NULL &&
           r->len > 0 && r->len == strlen(r->str);
}

void rcpt_server_start_ok(rcpt_server *s, const char *const *extra_args)
{
    char err[2048];

    ck_assert_msg(rcpt_server_start(s, extra_args, err, sizeof err) == 0, "%s", err);
}

rcp_conn *rcpt_conn_open_ok(const rcp_conn_options *o)
{
    rcp_conn *conn = NULL;
    char err[512] = "";
    int rc = rcp_conn_open(o, &conn, err, sizeof err);

    ck_assert_msg(rc == RCP_OK, "rcp_conn_open: %s (%s)", rcp_strerror(rc), err);
    return conn;
}

void rcpt_expect_echo(rcp_conn *conn, const char *tok)
{
    char d[256];
    rcp_reply *r = rcp_conn_command(conn, "ECHO %s", tok);

    ck_assert_msg(rcpt_is_cstring(r, tok), "ECHO %s: %s", tok, rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}

void rcpt_teardown(rcpt_server *s, rcp_conn **conn)
{
    if (s->paused)
        rcpt_server_resume(s);
    rcp_conn_close(*conn);
    *conn = NULL;
    rcpt_server_stop(s);
}

const char *const rcpt_debug_args[] = {"--enable-debug-command", "yes", NULL};

static struct {
    rcpt_server *srv;
    rcp_conn **conn;
    const char *const *args;
} fixture;

static void fixture_setup(void)
{
    rcpt_server_start_ok(fixture.srv, fixture.args);
}

static void fixture_teardown(void)
{
    rcpt_teardown(fixture.srv, fixture.conn);
}

void rcpt_fixture(TCase *tc, rcpt_server *s, rcp_conn **c, const char *const *extra_args)
{
    fixture.srv = s;
    fixture.conn = c;
    fixture.args = extra_args;
    tcase_add_checked_fixture(tc, fixture_setup, fixture_teardown);
}

int rcpt_main(Suite *(*make_suite)(void))
{
    char err[512];

    if (rcpt_init(err, sizeof err) != 0) {
        fprintf(stderr, "FAIL (cannot run integration tests): %s\n", err);
        return EXIT_FAILURE;
    }
    return rcptest_run(make_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

int rcpt_main_case(const char *name, const char *tcase_name, int timeout_s,
                   void (*add)(TCase *tc))
{
    char err[512], suite[128];
    Suite *s;

    if (rcpt_init(err, sizeof err) != 0) {
        fprintf(stderr, "FAIL (cannot run integration tests): %s\n", err);
        return EXIT_FAILURE;
    }
    snprintf(suite, sizeof suite, "integration-%s", name);
    s = suite_create(suite);
    add(rcptest_tcase(s, tcase_name, rcptest_scale(timeout_s)));
    return rcptest_run(s) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

unsigned char rcpt_pattern(uint64_t i, unsigned seed)
{
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    x ^= x >> 29;
    return (unsigned char)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

long rcpt_proc_kb(const char *field)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0)
            v = strtol(line + strlen(field) + 1, NULL, 10);
    fclose(f);
    return v;
}

long rcpt_peak_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    ck_assert_ptr_nonnull(f);
    fputs("5", f);
    fclose(f);
    return rcpt_proc_kb("VmHWM:");
}
