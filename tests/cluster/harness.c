/* harness.c: a local Redis Cluster for the cluster tests, through
 * tests/scripts/cluster.sh.
 *
 * Owns: the child processes that run the script (each in its own process
 * group, so that a timed-out script and its redis-cli children can be ended
 * together without touching the servers, which the script starts in their
 * own session), the guardian process of each cluster, and a base temporary
 * directory. Everything between fork and exec is async-signal-safe: the
 * tests fork while their load threads run. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "harness.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "rcpipe/libevent.h"

#define MAX_CLUSTERS 4
#define MAX_ARGS 48

static char script_path[PATH_MAX];
static char base_dir[PATH_MAX - 128];
static pid_t base_owner;
static rcpc_cluster *registry[MAX_CLUSTERS];
static unsigned job_seq;

static int keep_dirs(void)
{
    return rcptest_env_flag("RCP_CLUSTER_KEEP");
}

static void cleanup_at_exit(void)
{
    pid_t me = getpid();
    int i;

    for (i = 0; i < MAX_CLUSTERS; i++)
        if (registry[i] != NULL && registry[i]->owner == me)
            rcpc_stop(registry[i]);
    if (base_owner == me && !keep_dirs())
        rcptest_remove_tree(base_dir);
}

static int tls_mode_init(char *err, size_t errlen); /* TLS mode, below */

int rcpc_init(char *err, size_t errlen)
{
    const char *root = getenv("RCP_SOURCE_ROOT");
    const char *srv = getenv("RCP_REDIS_SERVER");

    if (base_owner == getpid())
        return 0;
    if (root == NULL || root[0] == '\0') {
        rcptest_fmt_err(err, errlen,
                        "RCP_SOURCE_ROOT is not set: it must name the rcpipe source tree");
        return -1;
    }
    snprintf(script_path, sizeof script_path, "%s/tests/scripts/cluster.sh", root);
    if (access(script_path, R_OK) != 0) {
        rcptest_fmt_err(err, errlen, "%s: %s", script_path, strerror(errno));
        return -1;
    }
    if (srv != NULL && rcptest_check_server_env(srv, err, errlen) != 0)
        return -1;
    if (rcptest_mkdtemp("rcpcl", base_dir, sizeof base_dir, err, errlen) != 0)
        return -1;
    if (tls_mode_init(err, errlen) != 0)
        return -1;
    base_owner = getpid();
    atexit(cleanup_at_exit);
    return 0;
}

/* Starts "bash cluster.sh argv..." in its own process group with stdout and
 * stderr into files. Returns the pid or -1. */
static pid_t spawn_script(const char *const *args, const char *out_path, const char *err_path)
{
    const char *argv[MAX_ARGS + 3];
    int n = 0;
    int i;
    int infd, outfd, errfd;
    pid_t pid;

    argv[n++] = "bash";
    argv[n++] = script_path;
    for (i = 0; args[i] != NULL && n < MAX_ARGS + 2; i++)
        argv[n++] = args[i];
    argv[n] = NULL;

    infd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    outfd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    errfd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (infd < 0 || outfd < 0 || errfd < 0) {
        if (infd >= 0)
            close(infd);
        if (outfd >= 0)
            close(outfd);
        if (errfd >= 0)
            close(errfd);
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        rcptest_child_reset(infd, outfd, errfd, -1);
        execv("/bin/bash", (char *const *)argv);
        _exit(127);
    }
    if (pid > 0)
        setpgid(pid, pid); /* also from here: no window where it is not yet set */
    close(infd);
    close(outfd);
    close(errfd);
    return pid;
}

static void read_file(const char *path, char *buf, size_t buflen, int tail)
{
    FILE *f;
    long sz;
    size_t n;

    if (buf == NULL || buflen == 0)
        return;
    buf[0] = '\0';
    f = fopen(path, "r");
    if (f == NULL)
        return;
    fseek(f, 0, SEEK_END);
    sz = ftell(f);
    if (tail && sz > (long)buflen - 1)
        fseek(f, sz - (long)buflen + 1, SEEK_SET);
    else
        fseek(f, 0, SEEK_SET);
    n = fread(buf, 1, buflen - 1, f);
    buf[n] = '\0';
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
}

/* Waits for pid until deadline; past it, TERM then KILL its process group.
 * Returns the exit status or -1. */
static int wait_script(pid_t pid, int64_t deadline)
{
    int st;

    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (w < 0 && errno != EINTR)
            return -1;
        if (rcptest_now_ms() >= deadline)
            break;
        rcptest_sleep_ms(20);
    }
    kill(-pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return -1;
        rcptest_sleep_ms(20);
    }
    kill(-pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return -1;
}

static void job_paths(char *out, size_t outlen, char *errp, size_t errlen)
{
    unsigned k = ++job_seq;
    pid_t me = getpid();

    snprintf(out, outlen, "%s/job.%d.%u.out", base_dir[0] ? base_dir : "/tmp", (int)me, k);
    snprintf(errp, errlen, "%s/job.%d.%u.err", base_dir[0] ? base_dir : "/tmp", (int)me, k);
}

static int build_args(const char **argv, const rcpc_cluster *c, const char *sub,
                      const char *const *args)
{
    int n = 0;
    int i;

    argv[n++] = sub;
    argv[n++] = c->dir;
    for (i = 0; args != NULL && args[i] != NULL && n < MAX_ARGS; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return n;
}

int rcpc_script(const rcpc_cluster *c, const char *sub, const char *const *args, int timeout_s,
                char *out, size_t outlen, char *err, size_t errlen)
{
    const char *argv[MAX_ARGS + 1];
    char op[PATH_MAX], ep[PATH_MAX];
    pid_t pid;
    int rc;

    if (out != NULL && outlen > 0)
        out[0] = '\0';
    if (script_path[0] == '\0' || c->dir[0] == '\0') {
        rcptest_fmt_err(err, errlen, "cluster %s: no cluster (rcpc_init/rcpc_start not done)", sub);
        return -1;
    }
    build_args(argv, c, sub, args);
    job_paths(op, sizeof op, ep, sizeof ep);
    pid = spawn_script(argv, op, ep);
    if (pid < 0) {
        rcptest_fmt_err(err, errlen, "cluster.sh %s: fork/exec: %s", sub, strerror(errno));
        return -1;
    }
    rc = wait_script(pid, rcptest_now_ms() + (int64_t)timeout_s * 1000);
    read_file(op, out, outlen, 0);
    if (rc != 0) {
        char tail[1500];
        read_file(ep, tail, sizeof tail, 1);
        if (rc > 0)
            rcptest_fmt_err(err, errlen, "cluster.sh %s %s: exit %d; stderr: %s", sub, c->dir, rc,
                            tail);
        else
            rcptest_fmt_err(err, errlen, "cluster.sh %s %s: killed or timed out; stderr: %s", sub,
                            c->dir,
                    tail);
    }
    unlink(op);
    unlink(ep);
    return rc;
}

/* The guardian: waits for EOF on its pipe (every copy of the write end is
 * gone, i.e. the owner and its forked children have ended, however), then
 * stops the cluster if it is still there. */
static pid_t start_guardian(const rcpc_cluster *c, int *wfd)
{
    int p[2];
    int nullfd;
    char envpath[PATH_MAX];
    const char *argv[] = {"bash", script_path, "stop", c->dir, NULL};
    const char *base = base_dir;
    pid_t pid;

    snprintf(envpath, sizeof envpath, "%s/cluster.env", c->dir);
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    nullfd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (nullfd < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        struct sigaction sa;
        char b;

        setsid();
        rcptest_child_reset(nullfd, nullfd, nullfd, p[0]);
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        sigaction(SIGPIPE, &sa, NULL);
        for (;;) {
            ssize_t r = read(3, &b, 1);
            if (r == 0 || (r < 0 && errno != EINTR))
                break;
        }
        if (access(envpath, F_OK) == 0) {
            pid_t s = fork();
            int st;
            if (s == 0) {
                execv("/bin/bash", (char *const *)argv);
                _exit(127);
            }
            if (s > 0)
                while (waitpid(s, &st, 0) < 0 && errno == EINTR)
                    ;
            rmdir(base); /* only if empty: the owner's atexit may not have run */
        }
        _exit(0);
    }
    close(p[0]);
    close(nullfd);
    if (pid < 0) {
        close(p[1]);
        return -1;
    }
    *wfd = p[1];
    return pid;
}

int rcpc_start(rcpc_cluster *c, int masters, int replicas, const char *const *extra, char *err,
               size_t errlen)
{
    char mbuf[16], rbuf[16];
    const char *argv[MAX_ARGS + 1];
    char op[PATH_MAX], ep[PATH_MAX];
    int n = 0;
    int i;
    int slot = -1;
    pid_t pid;
    int rc;
    static unsigned nclusters;

    memset(c, 0, sizeof *c);
    c->guard_fd = -1;
    c->reg = -1;
    if (base_owner == 0 && rcpc_init(err, errlen) != 0)
        return -1;
    for (i = 0; i < MAX_CLUSTERS; i++)
        if (registry[i] == NULL) {
            slot = i;
            break;
        }
    if (slot < 0) {
        rcptest_fmt_err(err, errlen, "too many clusters in one test program");
        return -1;
    }
    snprintf(c->dir, sizeof c->dir, "%s/cluster%u", base_dir, nclusters++);
    c->owner = getpid();
    c->guardian = start_guardian(c, &c->guard_fd);
    if (c->guardian < 0) {
        rcptest_fmt_err(err, errlen, "guardian: %s", strerror(errno));
        return -1;
    }
    registry[slot] = c;
    c->reg = slot;

    snprintf(mbuf, sizeof mbuf, "%d", masters);
    snprintf(rbuf, sizeof rbuf, "%d", replicas);
    argv[n++] = "start";
    argv[n++] = "--masters";
    argv[n++] = mbuf;
    argv[n++] = "--replicas";
    argv[n++] = rbuf;
    argv[n++] = "--node-timeout";
    /* RCPTEST_NODE_TIMEOUT_MS: for runs by hand that block a node longer
     * (test_largevalues.c at hundreds of MiB). */
    argv[n++] = getenv("RCPTEST_NODE_TIMEOUT_MS") ? getenv("RCPTEST_NODE_TIMEOUT_MS") : "1000";
    argv[n++] = "--dir";
    argv[n++] = c->dir;
    if (extra != NULL) {
        argv[n++] = "--";
        for (i = 0; extra[i] != NULL && n < MAX_ARGS; i++)
            argv[n++] = extra[i];
    }
    argv[n] = NULL;
    job_paths(op, sizeof op, ep, sizeof ep);
    pid = spawn_script(argv, op, ep);
    if (pid < 0) {
        rcptest_fmt_err(err, errlen, "cluster.sh start: fork/exec: %s", strerror(errno));
        rcpc_stop(c);
        return -1;
    }
    rc = wait_script(pid, rcptest_now_ms() + 120000);
    read_file(op, c->seed, sizeof c->seed, 0);
    if (rc != 0 || strncmp(c->seed, "127.0.0.1:", 10) != 0) {
        char tail[1500];
        read_file(ep, tail, sizeof tail, 1);
        rcptest_fmt_err(err, errlen, "cluster.sh start (exit %d, stdout \"%s\"): %s", rc, c->seed,
                        tail);
        unlink(op);
        unlink(ep);
        rcpc_stop(c);
        return -1;
    }
    unlink(op);
    unlink(ep);
    return 0;
}

void rcpc_stop(rcpc_cluster *c)
{
    char err[2048];

    if (c == NULL || c->owner != getpid() || c->dir[0] == '\0')
        return;
    {
        char envpath[PATH_MAX];
        snprintf(envpath, sizeof envpath, "%s/cluster.env", c->dir);
        if (access(envpath, F_OK) == 0 &&
            rcpc_script(c, "stop", NULL, 60, NULL, 0, err, sizeof err) != 0)
            fprintf(stderr, "harness: %s\n", err);
    }
    if (c->guard_fd >= 0) {
        close(c->guard_fd);
        c->guard_fd = -1;
    }
    if (c->guardian > 0) {
        int64_t deadline = rcptest_now_ms() + 30000;
        int st;
        for (;;) {
            pid_t w = waitpid(c->guardian, &st, WNOHANG);
            if (w == c->guardian || (w < 0 && errno != EINTR))
                break;
            if (rcptest_now_ms() > deadline) {
                kill(c->guardian, SIGKILL);
                waitpid(c->guardian, &st, 0);
                break;
            }
            rcptest_sleep_ms(10);
        }
        c->guardian = 0;
    }
    if (c->reg >= 0 && c->reg < MAX_CLUSTERS && registry[c->reg] == c)
        registry[c->reg] = NULL;
    c->reg = -1;
    c->dir[0] = '\0';
}

int rcpc_wait_ok(const rcpc_cluster *c, int timeout_s, char *err, size_t errlen)
{
    char t[16];
    const char *args[] = {t, NULL};

    snprintf(t, sizeof t, "%d", timeout_s);
    return rcpc_script(c, "wait-ok", args, timeout_s + 30, NULL, 0, err, errlen) == 0 ? 0 : -1;
}

int rcpc_kill(const rcpc_cluster *c, int port, char *err, size_t errlen)
{
    char p[16];
    const char *args[] = {p, NULL};

    snprintf(p, sizeof p, "%d", port);
    return rcpc_script(c, "kill", args, 30, NULL, 0, err, errlen) == 0 ? 0 : -1;
}

int rcpc_restart(const rcpc_cluster *c, int port, char *err, size_t errlen)
{
    char p[16];
    const char *args[] = {p, NULL};

    snprintf(p, sizeof p, "%d", port);
    return rcpc_script(c, "restart", args, 60, NULL, 0, err, errlen) == 0 ? 0 : -1;
}

int rcpc_reshard(const rcpc_cluster *c, int from_port, int to_port, int nslots, char *err,
                 size_t errlen)
{
    char f[16], t[16], n[16];
    const char *args[] = {f, t, n, NULL};

    snprintf(f, sizeof f, "%d", from_port);
    snprintf(t, sizeof t, "%d", to_port);
    snprintf(n, sizeof n, "%d", nslots);
    return rcpc_script(c, "reshard", args, 600, NULL, 0, err, errlen) == 0 ? 0 : -1;
}

int rcpc_add_node(const rcpc_cluster *c, int master_port, int *port, char *err, size_t errlen)
{
    char m[16];
    char out[64];
    const char *args[] = {master_port > 0 ? m : NULL, NULL};

    snprintf(m, sizeof m, "%d", master_port);
    if (rcpc_script(c, "add-node", args, 120, out, sizeof out, err, errlen) != 0)
        return -1;
    *port = atoi(out);
    if (*port <= 0) {
        rcptest_fmt_err(err, errlen, "cluster.sh add-node printed \"%s\", not a port", out);
        return -1;
    }
    return 0;
}

int rcpc_del_node(const rcpc_cluster *c, int port, char *err, size_t errlen)
{
    char p[16];
    const char *args[] = {p, NULL};

    snprintf(p, sizeof p, "%d", port);
    return rcpc_script(c, "del-node", args, 600, NULL, 0, err, errlen) == 0 ? 0 : -1;
}

int rcpc_rebalance(const rcpc_cluster *c, const char *const *args, char *err, size_t errlen)
{
    return rcpc_script(c, "rebalance", args, 600, NULL, 0, err, errlen) == 0 ? 0 : -1;
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;

    while (*s != '\0' && *s != '"' && n < max) {
        char *end;
        long v;
        while (*s == ' ')
            s++;
        if (*s == '"' || *s == '\0')
            break;
        v = strtol(s, &end, 10);
        if (end == s)
            break;
        out[n++] = (int)v;
        s = end;
    }
    return n;
}

int rcpc_env_read(const rcpc_cluster *c, rcpc_env *e)
{
    char path[PATH_MAX];
    char line[1024];
    int pids[RCPC_MAX_NODES];
    int np = 0;
    FILE *f;
    int i;

    memset(e, 0, sizeof *e);
    snprintf(path, sizeof path, "%s/cluster.env", c->dir);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "PORTS=\"", 7) == 0)
            e->n = parse_list(line + 7, e->port, RCPC_MAX_NODES);
        else if (strncmp(line, "PIDS=\"", 6) == 0)
            np = parse_list(line + 6, pids, RCPC_MAX_NODES);
    }
    fclose(f);
    for (i = 0; i < e->n && i < np; i++)
        e->pid[i] = (pid_t)pids[i];
    return e->n > 0 ? 0 : -1;
}

int rcpc_job_start(rcpc_job *j, const rcpc_cluster *c, const char *sub, const char *const *args)
{
    const char *argv[MAX_ARGS + 1];

    memset(j, 0, sizeof *j);
    j->status = -1;
    build_args(argv, c, sub, args);
    job_paths(j->out_path, sizeof j->out_path, j->err_path, sizeof j->err_path);
    j->started_ms = rcptest_now_ms();
    j->pid = spawn_script(argv, j->out_path, j->err_path);
    if (j->pid < 0) {
        j->done = 1;
        j->ended_ms = j->started_ms;
        return -1;
    }
    return 0;
}

int rcpc_job_poll(rcpc_job *j)
{
    int st;

    if (j->done)
        return 1;
    if (waitpid(j->pid, &st, WNOHANG) == j->pid) {
        j->done = 1;
        j->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        j->ended_ms = rcptest_now_ms();
        return 1;
    }
    return 0;
}

int rcpc_job_join(rcpc_job *j, int timeout_ms, char *err, size_t errlen)
{
    if (!j->done) {
        j->status = wait_script(j->pid, rcptest_now_ms() + timeout_ms);
        j->done = 1;
        j->ended_ms = rcptest_now_ms();
    }
    if (j->status != 0) {
        char tail[1500];
        read_file(j->err_path, tail, sizeof tail, 1);
        rcptest_fmt_err(err, errlen, "background cluster.sh job: exit %d; stderr: %s", j->status,
                        tail);
    }
    unlink(j->out_path);
    unlink(j->err_path);
    return j->status;
}

int rcpc_job_run(const rcpc_cluster *c, const char *sub, const char *const *args, int timeout_s,
                 char *err, size_t errlen)
{
    rcpc_job j;

    if (rcpc_job_start(&j, c, sub, args) != 0) {
        rcptest_fmt_err(err, errlen, "could not start cluster.sh %s", sub);
        return -1;
    }
    while (!rcpc_job_poll(&j) &&
           rcptest_now_ms() - j.started_ms < (int64_t)rcptest_scale(timeout_s) * 1000)
        rcptest_sleep_ms(100);
    return rcpc_job_join(&j, 1000, err, errlen);
}

/* ---- TLS mode (RCPTEST_TLS=1) -------------------------------------------
 * The cluster is TLS-only (cluster.sh with RCP_CLUSTER_TLS_DIR: --port 0
 * --tls-port, --tls-cluster yes, --tls-replication yes) and rcpc_options
 * gives every handle TLS node options trusting the test CA. The side
 * channel stays hiredis 0.14, which has no TLS: each of its connections is
 * one end of a socketpair whose other end a thread pumps through an
 * OpenSSL connection to the node. */
static int tls_mode;
#ifdef RCPC_WITH_TLS
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

static SSL_CTX *side_ctx;

typedef struct tls_pump {
    SSL *ssl;
    int tcp, local;
} tls_pump;

/* Both sockets non-blocking: a TLS read never waits for data that is not
 * there (a session ticket makes the socket readable with nothing for
 * hiredis), and bytes for hiredis wait in obuf while it is still writing
 * a long pipeline (neither side blocks on the other). */
static void *tls_pump_main(void *p)
{
    tls_pump *pu = p;
    char ibuf[16384], obuf[16384];
    size_t olen = 0, ooff = 0;
    for (;;) {
        struct pollfd f[2] = {{pu->local, POLLIN, 0}, {pu->tcp, 0, 0}};
        int n;
        if (ooff < olen)
            f[0].events |= POLLOUT;
        else
            f[1].events = POLLIN;
        if (!(ooff == olen && SSL_pending(pu->ssl) > 0) && poll(f, 2, 30000) <= 0)
            break; /* 30 s of silence: hiredis is gone or stuck */
        if (ooff < olen && (f[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = send(pu->local, obuf + ooff, olen - ooff, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN)
                break;
            if (w > 0)
                ooff += (size_t)w;
        }
        if (ooff == olen) {
            n = SSL_read(pu->ssl, obuf, sizeof obuf);
            if (n > 0) {
                olen = (size_t)n;
                ooff = 0;
            } else if (SSL_get_error(pu->ssl, n) != SSL_ERROR_WANT_READ) {
                break;
            }
        }
        if (f[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = recv(pu->local, ibuf, sizeof ibuf, MSG_DONTWAIT);
            size_t off = 0;
            if (r == 0 || (r < 0 && errno != EAGAIN))
                break;
            while (r > 0 && off < (size_t)r) {
                n = SSL_write(pu->ssl, ibuf + off, (int)((size_t)r - off));
                if (n > 0) {
                    off += (size_t)n;
                } else {
                    struct pollfd w = {pu->tcp, POLLOUT, 0};
                    if (SSL_get_error(pu->ssl, n) != SSL_ERROR_WANT_WRITE || poll(&w, 1, 10000) <= 0)
                        goto out;
                }
            }
        }
    }
out:
    SSL_free(pu->ssl);
    close(pu->tcp);
    close(pu->local);
    free(pu);
    return NULL;
}

/* A plain fd whose bytes reach 127.0.0.1:port over TLS; -1 on failure. */
static int tls_side_fd(int port)
{
    int sv[2], tcp = rcptest_connect_loopback(port, 10000);
    tls_pump *pu;
    pthread_t th;
    SSL *ssl;
    if (tcp < 0)
        return -1;
    ssl = SSL_new(side_ctx);
    if (!ssl || !SSL_set_fd(ssl, tcp) || SSL_connect(ssl) != 1 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
        fcntl(tcp, F_SETFL, O_NONBLOCK) != 0) {
        SSL_free(ssl);
        close(tcp);
        return -1;
    }
    pu = malloc(sizeof *pu);
    pu->ssl = ssl;
    pu->tcp = tcp;
    pu->local = sv[1];
    if (pthread_create(&th, NULL, tls_pump_main, pu) != 0) {
        SSL_free(ssl);
        close(tcp);
        close(sv[0]);
        close(sv[1]);
        free(pu);
        return -1;
    }
    pthread_detach(th);
    return sv[0];
}

/* From rcpc_init: RCPTEST_TLS=1 turns TLS mode on. */
static int tls_mode_init(char *err, size_t errlen)
{
    const char *dir;
    if (!rcptest_env_flag("RCPTEST_TLS"))
        return 0;
    dir = rcptest_tls_certs(err, errlen);
    side_ctx = dir ? SSL_CTX_new(TLS_client_method()) : NULL;
    if (!side_ctx || !SSL_CTX_load_verify_locations(side_ctx, rcptest_tls_file("ca.crt"), NULL)) {
        if (dir)
            rcptest_fmt_err(err, errlen, "TLS mode: cannot set up the side channel's context");
        return -1;
    }
    SSL_CTX_set_verify(side_ctx, SSL_VERIFY_PEER, NULL);
    setenv("RCP_CLUSTER_TLS_DIR", dir, 1);
    tls_mode = 1;
    return 0;
}
#else
static int tls_side_fd(int port)
{
    (void)port;
    return -1;
}

static int tls_mode_init(char *err, size_t errlen)
{
    if (!rcptest_env_flag("RCPTEST_TLS"))
        return 0;
    rcptest_fmt_err(err, errlen, "RCPTEST_TLS=1 but rcpipe is built without TLS");
    return -1;
}
#endif

/* TLS mode: node options speak TLS and trust the test CA. */
static void tls_mode_options(rcp_conn_options *node)
{
    if (tls_mode) {
        node->tls = 1;
        node->tls_ca_file = rcptest_tls_file("ca.crt");
    }
}

redisContext *rcpc_connect(int port)
{
    struct timeval tv = {2, 0};
    struct timeval rw = {10, 0};
    redisContext *ctx;
    if (tls_mode) {
        int fd = tls_side_fd(port);
        ctx = fd < 0 ? NULL : redisConnectFd(fd);
    } else {
        ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
    }

    if (ctx == NULL)
        return NULL;
    if (ctx->err) {
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, rw);
    return ctx;
}

redisReply *rcpc_ask(int port, const char *fmt, ...)
{
    redisContext *ctx = rcpc_connect(port);
    redisReply *r;
    va_list ap;

    if (ctx == NULL)
        return NULL;
    va_start(ap, fmt);
    r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    redisFree(ctx);
    return r;
}

static void set_slot(rcpc_node *n, unsigned s)
{
    if (s < RCPC_SLOTS && !rcpc_has_slot(n, s)) {
        n->slots[s / 8] |= (unsigned char)(1u << (s % 8));
        n->nslots++;
    }
}

int rcpc_has_slot(const rcpc_node *n, unsigned slot)
{
    return slot < RCPC_SLOTS && (n->slots[slot / 8] >> (slot % 8)) & 1u;
}

static void parse_node_line(char *line, rcpc_node *n)
{
    char *save = NULL;
    char *tok;
    int field = 0;

    memset(n, 0, sizeof *n);
    for (tok = strtok_r(line, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        field++;
        if (field == 1) {
            snprintf(n->id, sizeof n->id, "%.40s", tok);
        } else if (field == 2) {
            char *colon = strrchr(tok, ':');
            char *at = strchr(tok, '@');
            if (at != NULL) {
                *at = '\0';
                colon = strrchr(tok, ':');
            }
            n->port = colon ? atoi(colon + 1) : 0;
        } else if (field == 3) {
            n->is_master = strstr(tok, "master") != NULL;
            n->failed = strstr(tok, "fail") != NULL;
            n->myself = strstr(tok, "myself") != NULL;
        } else if (field == 4) {
            if (strcmp(tok, "-") != 0)
                snprintf(n->master_id, sizeof n->master_id, "%.40s", tok);
        } else if (field >= 9) {
            unsigned a, b;
            if (tok[0] == '[')
                continue; /* an open (migrating/importing) slot */
            if (sscanf(tok, "%u-%u", &a, &b) == 2) {
                for (; a <= b && a < RCPC_SLOTS; a++)
                    set_slot(n, a);
            } else if (sscanf(tok, "%u", &a) == 1) {
                set_slot(n, a);
            }
        }
    }
}

int rcpc_topology(int port, rcpc_topo *t)
{
    redisReply *r = rcpc_ask(port, "CLUSTER NODES");
    char *text;
    char *save = NULL;
    char *line;
    int i, k;

    memset(t, 0, sizeof *t);
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    text = strdup(r->str);
    freeReplyObject(r);
    if (text == NULL)
        return -1;
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        size_t L = strlen(line);
        if (L > 0 && line[L - 1] == '\r')
            line[L - 1] = '\0';
        if (line[0] == '\0' || t->n >= RCPC_MAX_NODES)
            continue;
        parse_node_line(line, &t->node[t->n]);
        t->n++;
    }
    free(text);
    for (i = 0; i < t->n; i++) {
        if (t->node[i].master_id[0] == '\0')
            continue;
        for (k = 0; k < t->n; k++)
            if (strcmp(t->node[k].id, t->node[i].master_id) == 0)
                t->node[i].master_port = t->node[k].port;
    }
    return t->n > 0 ? 0 : -1;
}

int rcpc_topology_any(const rcpc_cluster *c, rcpc_topo *t)
{
    rcpc_env e;
    int i;

    if (rcpc_env_read(c, &e) != 0)
        return -1;
    for (i = 0; i < e.n; i++)
        if (e.pid[i] > 0 && rcpc_topology(e.port[i], t) == 0)
            return 0;
    return -1;
}

int rcpc_slot_owner(const rcpc_topo *t, unsigned slot)
{
    int i;

    for (i = 0; i < t->n; i++)
        if (t->node[i].is_master && !t->node[i].failed && rcpc_has_slot(&t->node[i], slot))
            return i;
    return -1;
}

int rcpc_master_with_replica(const rcpc_topo *t, int *master, int *replica)
{
    int i, k;

    for (i = 0; i < t->n; i++) {
        if (!t->node[i].is_master || t->node[i].nslots == 0)
            continue;
        for (k = 0; k < t->n; k++)
            if (!t->node[k].is_master && t->node[k].master_port == t->node[i].port) {
                *master = i;
                *replica = k;
                return 0;
            }
    }
    return -1;
}

int rcpc_find_port(const rcpc_topo *t, int port)
{
    int i;

    for (i = 0; i < t->n; i++)
        if (t->node[i].port == port)
            return i;
    return -1;
}

int rcpc_role_is_master(int port)
{
    redisReply *r = rcpc_ask(port, "ROLE");
    int res = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
        r->element[0]->type == REDIS_REPLY_STRING)
        res = strcmp(r->element[0]->str, "master") == 0 ? 1 : 0;
    if (r != NULL)
        freeReplyObject(r);
    return res;
}

long long rcpc_info_int(int port, const char *section, const char *field)
{
    redisReply *r = rcpc_ask(port, "INFO %s", section);
    long long v = -1;

    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        size_t fl = strlen(field);
        const char *p = r->str;
        while ((p = strstr(p, field)) != NULL) {
            if ((p == r->str || p[-1] == '\n') && p[fl] == ':') {
                v = atoll(p + fl + 1);
                break;
            }
            p += fl;
        }
    }
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

long long rcpc_dbsize(int port)
{
    redisReply *r = rcpc_ask(port, "DBSIZE");
    long long v = -1;

    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

int rcpc_wait_replicas_synced(const rcpc_cluster *c, int timeout_ms)
{
    int64_t deadline = rcptest_now_ms() + timeout_ms;
    rcpc_topo t;
    int i, k;

    for (;;) {
        int behind = 0;
        if (rcpc_topology_any(c, &t) != 0) {
            behind = 1;
        } else {
            for (i = 0; i < t.n; i++) {
                if (t.node[i].is_master || t.node[i].failed)
                    continue;
                k = rcpc_find_port(&t, t.node[i].master_port);
                if (k >= 0 && rcpc_dbsize(t.node[i].port) != rcpc_dbsize(t.node[k].port))
                    behind++;
            }
        }
        if (behind == 0)
            return 0;
        if (rcptest_now_ms() > deadline)
            return -1;
        rcptest_sleep_ms(50);
    }
}

static char slot_tags[RCPC_SLOTS][16];
static pthread_once_t tags_once = PTHREAD_ONCE_INIT;

static void build_tags(void)
{
    unsigned filled = 0;
    unsigned long k;

    for (k = 0; filled < RCPC_SLOTS && k < 100000000ul; k++) {
        char key[16];
        unsigned s;
        int len = snprintf(key, sizeof key, "{t%lx}", k);
        s = rcp_keyslot(key, (size_t)len);
        if (s < RCPC_SLOTS && slot_tags[s][0] == '\0') {
            memcpy(slot_tags[s], key, (size_t)len + 1);
            filled++;
        }
    }
}

const char *rcpc_slot_tag(unsigned slot)
{
    pthread_once(&tags_once, build_tags);
    return slot < RCPC_SLOTS ? slot_tags[slot] : "";
}

/* RCP_CL_EVENTS=1: every library event on stderr, for debugging. */
static void print_event(const rcp_event *ev, void *data)
{
    (void)data;
    fprintf(stderr, "[%lld] event %d err %d (%s) %s:%d %s\n", (long long)rcptest_now_ms(), ev->type,
            ev->err, rcp_strerror(ev->err), ev->host ? ev->host : "-", ev->port,
            ev->message ? ev->message : "");
}

void rcpc_options(rcp_cluster_options *o, rcp_conn_options *node, const char *seed)
{
    const char *evs = getenv("RCP_CL_EVENTS");

    rcptest_cluster_options(o, node, seed, 2000, 10000, 10, 500);
    tls_mode_options(node);
    if (evs != NULL && evs[0] != '\0' && strcmp(evs, "0") != 0) {
        o->event_cb = print_event;
        node->event_cb = print_event;
    }
}

/* RCPTEST_DRIVER=libevent: every handle the harness opens runs its node
 * connections on one libevent event_base, run by a thread of the test
 * program for as long as it lives (the shape of an application with its
 * own loop thread: callbacks fire there, the test's threads send). */
static struct event_base *drv_base;
static rcp_loop *drv_loop;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static pthread_t drv_thread;
static atomic_int drv_running;

static void *drv_main(void *arg)
{
    (void)arg;
    drv_thread = pthread_self();
    atomic_store(&drv_running, 1);
    event_base_loop(drv_base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static void drv_start(void)
{
    pthread_t th;
    drv_base = event_base_new();
    ck_assert_msg(drv_base != NULL, "event_base_new failed");
    drv_loop = rcp_libevent_loop(drv_base);
    ck_assert_msg(drv_loop != NULL, "rcp_libevent_loop failed");
    ck_assert_int_eq(pthread_create(&th, NULL, drv_main, NULL), 0);
    pthread_detach(th);
}

int rcpc_on_driver_thread(void)
{
    return atomic_load(&drv_running) && pthread_equal(pthread_self(), drv_thread);
}

const char *rcpc_driver(void)
{
    const char *d = getenv("RCPTEST_DRIVER");
    return d && d[0] ? d : "threads";
}

rcp_cluster *rcpc_open(const rcp_cluster_options *o)
{
    rcp_cluster *h = NULL;
    char err[2048] = "";
    rcp_cluster_options oo = *o;
    rcp_conn_options node;
    int rc;

    if (strcmp(rcpc_driver(), "libevent") == 0) {
        pthread_once(&drv_once, drv_start);
        if (o->node)
            node = *o->node;
        else
            rcp_conn_options_init(&node);
        node.loop = drv_loop;
        oo.node = &node;
    } else {
        ck_assert_msg(strcmp(rcpc_driver(), "threads") == 0,
                      "RCPTEST_DRIVER=%s: want threads or libevent", rcpc_driver());
    }
    rc = rcp_cluster_open(&oo, &h, err, sizeof err);

    ck_assert_msg(rc == RCP_OK && h != NULL, "rcp_cluster_open(%s): %s (%s)", o->seeds,
                  rcp_strerror(rc), err);
    return h;
}

static rcp_cluster *open_with_refresh(const rcpc_cluster *c, int refresh_ms)
{
    rcp_cluster_options o;
    rcp_conn_options node;
    char err[4096];

    ck_assert_msg(rcpc_wait_ok(c, 30, err, sizeof err) == 0, "%s", err);
    rcpc_options(&o, &node, c->seed);
    if (refresh_ms)
        o.refresh_interval_ms = refresh_ms;
    return rcpc_open(&o);
}

rcp_cluster *rcpc_open_default(const rcpc_cluster *c)
{
    return open_with_refresh(c, 0);
}

rcp_cluster *rcpc_open_stale(const rcpc_cluster *c)
{
    return open_with_refresh(c, 600000);
}

int rcpc_move_owner_away(const rcpc_cluster *c, const char *key, int *to, char *err,
                         size_t errlen)
{
    rcpc_topo t;
    int owner, i;

    *to = 0;
    if (rcpc_topology_any(c, &t) != 0) {
        rcptest_fmt_err(err, errlen, "no topology");
        return -1;
    }
    owner = rcpc_slot_owner(&t, rcp_keyslot(key, strlen(key)));
    for (i = 0; i < t.n && owner >= 0; i++)
        if (t.node[i].is_master && i != owner && t.node[i].nslots > 0) {
            *to = t.node[i].port;
            break;
        }
    if (!*to) {
        rcptest_fmt_err(err, errlen, "no owner for %s, or no other master", key);
        return -1;
    }
    return rcpc_reshard(c, t.node[owner].port, *to, t.node[owner].nslots, err, errlen);
}

int rcpc_main(rcpc_cluster *c, const char *name, int masters, int replicas,
              const char *const *extra, int timeout_s, void (*add)(TCase *tc))
{
    char err[4096], suite[128];
    Suite *s;
    int failed;

    snprintf(suite, sizeof suite, "cluster-%s", name);
    if (rcpc_init(err, sizeof err) != 0 ||
        rcpc_start(c, masters, replicas, extra, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", suite, err);
        return 1;
    }
    s = suite_create(suite);
    add(rcptest_tcase(s, name, rcptest_scale(timeout_s)));
    failed = rcptest_run(s);
    rcpc_stop(c);
    return failed == 0 ? 0 : 1;
}

struct acall {
    rcp_future f;
    pthread_mutex_t m;
    pthread_cond_t cv;
    int done;
    rcp_reply *r;
};

static void acall_resolve(rcp_future *f, rcp_reply *reply)
{
    struct acall *a = f->data;
    rcp_reply *k = rcp_reply_keep(reply);

    pthread_mutex_lock(&a->m);
    a->r = k;
    a->done++;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->m);
}

rcp_reply *rcpc_call_async(rcp_cluster *h, int read_policy, int argc, const char **argv,
                           const size_t *lens, int *send_rc)
{
    struct acall *a = calloc(1, sizeof *a);
    struct timespec deadline;
    rcp_reply *r;
    int rc;

    if (a == NULL) {
        *send_rc = RCP_ERR_OOM;
        return NULL;
    }
    pthread_mutex_init(&a->m, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->f.resolve = acall_resolve;
    a->f.data = a;
    rc = rcp_cluster_send_argv_policy(h, &a->f, read_policy, argc, argv, lens);
    *send_rc = rc;
    if (rc != RCP_OK) {
        pthread_mutex_destroy(&a->m);
        pthread_cond_destroy(&a->cv);
        free(a);
        return NULL;
    }
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += rcptest_scale(60);
    pthread_mutex_lock(&a->m);
    while (!a->done) {
        if (pthread_cond_timedwait(&a->cv, &a->m, &deadline) == ETIMEDOUT)
            break;
    }
    if (!a->done) {
        pthread_mutex_unlock(&a->m);
        *send_rc = -1;
        return NULL; /* leaked on purpose */
    }
    r = a->r;
    pthread_mutex_unlock(&a->m);
    pthread_mutex_destroy(&a->m);
    pthread_cond_destroy(&a->cv);
    free(a);
    return r;
}

void rcpc_assert_get(rcp_cluster *h, const char *what, const char *key, const char *want)
{
    char d[256];
    rcp_reply *r = rcp_cluster_command(h, "GET %s", key);

    ck_assert_msg(want != NULL ? rcpc_is_string(r, want) : rcptest_is_nil(r),
                  "%s %s: expected %s, got %s", what, key, want != NULL ? want : "nil",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}

int rcpc_node_info(rcp_cluster *h, int port, rcp_cluster_node_info *out)
{
    rcp_cluster_node_info nodes[64];
    char want[32];
    size_t n = rcp_cluster_get_nodes(h, nodes, 64);
    size_t i;

    snprintf(want, sizeof want, "127.0.0.1:%d", port);
    if (n > 64)
        n = 64;
    for (i = 0; i < n; i++) {
        if (strcmp(nodes[i].addr, want) == 0) {
            *out = nodes[i];
            return 1;
        }
    }
    memset(out, 0, sizeof *out);
    return 0;
}

int rcpc_is_string(const rcp_reply *r, const char *s)
{
    size_t len = strlen(s);
    return r != NULL && r->type == RCP_REPLY_STRING && r->err == RCP_OK && r->len == len &&
           r->str != NULL && memcmp(r->str, s, len) == 0;
}

int rcpc_is_status(const rcp_reply *r, const char *s)
{
    return r != NULL && r->type == RCP_REPLY_STATUS && r->err == RCP_OK && r->str != NULL &&
           strcmp(r->str, s) == 0;
}

void rcpc_problem_note(rcpc_problem *p, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&p->lock);
    if (p->count++ == 0) {
        va_start(ap, fmt);
        vsnprintf(p->first, sizeof p->first, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&p->lock);
}

int rcpc_problem_count(rcpc_problem *p)
{
    int n;

    pthread_mutex_lock(&p->lock);
    n = p->count;
    pthread_mutex_unlock(&p->lock);
    return n;
}
