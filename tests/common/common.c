/* common.c: the helpers every test layer shares (see common.h).
 *
 * Owns nothing but its code: no globals, no threads, no allocation beyond
 * what nftw does. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t rcptest_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t rcptest_now_ms(void)
{
    return (int64_t)(rcptest_now_ns() / 1000000u);
}

void rcptest_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int rcptest_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return 1;
#else
    return 0;
#endif
#else
    return 0;
#endif
}

int rcptest_scale(int base)
{
    return rcptest_sanitized() ? base * 3 : base;
}

int rcptest_selected(const char *test_name)
{
    const char *only = getenv("RCP_IT_ONLY");
    char buf[512];
    char *save = NULL;
    char *w;

    if (only == NULL || only[0] == '\0')
        return 1;
    snprintf(buf, sizeof buf, "%s", only);
    for (w = strtok_r(buf, ", ", &save); w != NULL; w = strtok_r(NULL, ", ", &save))
        if (strstr(test_name, w) != NULL)
            return 1;
    return 0;
}

void rcptest_add(TCase *tc, const TTest *const *tests, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (rcptest_selected(tests[i]->name))
            tcase_add_test(tc, tests[i]);
}

void rcptest_fmt_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int rcptest_env_flag(const char *name)
{
    const char *k = getenv(name);

    return k != NULL && k[0] != '\0' && strcmp(k, "0") != 0;
}

int rcptest_check_server_env(const char *value, char *err, size_t errlen)
{
    if (value[0] == '\0') {
        rcptest_fmt_err(err, errlen,
                        "RCP_REDIS_SERVER is empty: redis-server was not found at configure time; "
                        "install redis-server (Debian package redis-server) and reconfigure");
        return -1;
    }
    if (access(value, X_OK) != 0) {
        rcptest_fmt_err(err, errlen, "RCP_REDIS_SERVER=%s is not an executable file", value);
        return -1;
    }
    return 0;
}

int rcptest_mkdtemp(const char *prefix, char *out, size_t outlen, char *err, size_t errlen)
{
    const char *tmp = getenv("TMPDIR");
    char tmpl[4096];

    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    snprintf(tmpl, sizeof tmpl, "%s/%s.XXXXXX", tmp, prefix);
    if (strlen(tmpl) >= outlen) {
        rcptest_fmt_err(err, errlen, "temporary directory path too long: %s", tmpl);
        return -1;
    }
    if (mkdtemp(tmpl) == NULL) {
        rcptest_fmt_err(err, errlen, "mkdtemp(%s): %s", tmpl, strerror(errno));
        return -1;
    }
    snprintf(out, outlen, "%s", tmpl);
    return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void rcptest_remove_tree(const char *dir)
{
    if (dir[0] != '\0')
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void rcptest_child_reset(int infd, int outfd, int errfd, int keep_fd)
{
    struct sigaction sa;
    sigset_t none;
    unsigned from = 3;
    int sig;

    dup2(infd, 0);
    dup2(outfd, 1);
    dup2(errfd, 2);
    if (keep_fd >= 0) {
        dup2(keep_fd, 3);
        from = 4;
    }
    if (syscall(SYS_close_range, from, ~0u, 0u) != 0) {
        int fd;
        for (fd = (int)from; fd < 65536; fd++)
            close(fd);
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (sig = 1; sig < 32; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &sa, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

void rcptest_reap(pid_t pid)
{
    int st;

    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
}

void rcptest_cluster_options(rcp_cluster_options *o, rcp_conn_options *node, const char *seeds,
                             int connect_ms, int io_ms, int reconnect_min_ms,
                             int reconnect_max_ms)
{
    rcp_cluster_options_init(o);
    rcp_conn_options_init(node);
    node->connect_timeout_ms = rcptest_scale(connect_ms);
    node->request_timeout_ms = rcptest_scale(io_ms);
    node->io_timeout_ms = rcptest_scale(io_ms);
    node->reconnect_min_ms = reconnect_min_ms;
    node->reconnect_max_ms = reconnect_max_ms;
    o->seeds = seeds;
    o->node = node;
}

TCase *rcptest_tcase(Suite *s, const char *name, int timeout_s)
{
    TCase *tc = tcase_create(name);

    if (timeout_s > 0)
        tcase_set_timeout(tc, timeout_s);
    suite_add_tcase(s, tc);
    return tc;
}

int rcptest_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

const char *rcptest_describe(const rcp_reply *r, char *buf, size_t buflen)
{
    static const char *const names[] = {"?", "STRING", "ARRAY", "INTEGER", "NIL", "STATUS", "ERROR"};
    const char *tn;
    char text[96];
    size_t i;

    if (r == NULL) {
        snprintf(buf, buflen, "(NULL reply)");
        return buf;
    }
    tn = (r->type >= 1 && r->type <= 6) ? names[r->type] : names[0];
    switch (r->type) {
    case RCP_REPLY_STRING:
    case RCP_REPLY_STATUS:
    case RCP_REPLY_ERROR:
        for (i = 0; i < r->len && i < sizeof text - 4 && r->str != NULL; i++) {
            unsigned char ch = (unsigned char)r->str[i];
            text[i] = (ch >= 32 && ch < 127) ? (char)ch : '.';
        }
        text[i] = '\0';
        if (i < r->len)
            strcat(text, "...");
        snprintf(buf, buflen, "%s(err=%d %s, len=%zu) \"%s\"", tn, r->err,
                 rcp_strerror(r->err), r->len, text);
        break;
    case RCP_REPLY_INTEGER:
        snprintf(buf, buflen, "INTEGER(err=%d) %lld", r->err, r->integer);
        break;
    case RCP_REPLY_ARRAY:
        snprintf(buf, buflen, "ARRAY(err=%d) of %zu", r->err, r->elements);
        break;
    default:
        snprintf(buf, buflen, "%s(type=%d, err=%d)", tn, r->type, r->err);
        break;
    }
    return buf;
}

int rcptest_is_int(const rcp_reply *r, long long v)
{
    return r != NULL && r->type == RCP_REPLY_INTEGER && r->err == RCP_OK && r->integer == v;
}

int rcptest_is_nil(const rcp_reply *r)
{
    return r != NULL && r->type == RCP_REPLY_NIL && r->err == RCP_OK;
}

int rcptest_connect_loopback(int port, int timeout_ms)
{
    struct sockaddr_in a;
    struct timeval tv;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (timeout_ms % 1000) * 1000;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}
