/* common.h: helpers every test layer shares (the integration harness, the
 * cluster harness, the fake node of the sim tests, the chaos soak and the
 * test programs).
 *
 * Only what is the same logic everywhere lives here: time, sanitizer
 * detection and the timeouts scaled for it, test selection and
 * registration, the check runner, error text, temporary directories, the
 * child side of a fork/exec, cluster options, and reply descriptions for
 * assertion messages. Each harness keeps what is its own (servers,
 * clusters, fake nodes); the unit tests use it too. Nothing here uses rcpipe's allocator
 * hooks (plain malloc, or none): a test run with a failing allocator
 * installed fails the library, not the harness. */
#ifndef RCPTEST_COMMON_H
#define RCPTEST_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>

#include "rcpipe.h"

#if defined(__GNUC__)
#define RCPTEST_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RCPTEST_PRINTF(f, a)
#endif

/* Monotonic time, and a sleep that resumes after a signal. */
int64_t rcptest_now_ms(void);
uint64_t rcptest_now_ns(void);
void rcptest_sleep_ms(int ms);

/* 1 when built with AddressSanitizer or ThreadSanitizer: tests use fewer
 * iterations there (not looser checks). */
int rcptest_sanitized(void);
/* base (a timeout, in any unit) tripled under a sanitizer. */
int rcptest_scale(int base);

/* Test selection for debugging: RCP_IT_ONLY="name1,name2" runs only the
 * test functions whose names contain one of those words; unset runs all. */
int rcptest_selected(const char *test_name);
/* Adds the n tests (START_TEST names) to tc in that order, the selected
 * ones only. RCPTEST_ADD(tc, test_a, test_b, ...) counts them itself. */
void rcptest_add(TCase *tc, const TTest *const *tests, size_t n);
#define RCPTEST_ADD(tc, ...)                                                                      \
    rcptest_add((tc), (const TTest *const[]){__VA_ARGS__},                                        \
                sizeof((const TTest *const[]){__VA_ARGS__}) / sizeof(const TTest *))

/* snprintf into err; nothing when err is NULL or errlen 0. */
void rcptest_fmt_err(char *err, size_t errlen, const char *fmt, ...) RCPTEST_PRINTF(3, 4);

/* 1 if the environment variable is set to something other than "" or "0"
 * (e.g. RCP_IT_KEEP: keep the temporary directories for a post-mortem). */
int rcptest_env_flag(const char *name);

/* Checks RCP_REDIS_SERVER's value (not NULL): 0 if it names an executable
 * file, else -1 with a message saying what to do (empty: redis-server was
 * not found at configure time). */
int rcptest_check_server_env(const char *value, char *err, size_t errlen);

/* Makes $TMPDIR/PREFIX.XXXXXX (TMPDIR defaults to /tmp) and copies its path
 * into out. 0, or -1 with a message in err. */
int rcptest_mkdtemp(const char *prefix, char *out, size_t outlen, char *err, size_t errlen);
/* rm -rf dir (no link followed); nothing for "". */
void rcptest_remove_tree(const char *dir);

/* The child side of a fork before exec: stdin, stdout and stderr from the
 * three descriptors, keep_fd (unless -1) as descriptor 3, every other
 * descriptor closed (the test process holds client sockets, eventfds,
 * epoll fds), every signal back to its default and none blocked. Only
 * async-signal-safe calls: the parent may have many threads. */
void rcptest_child_reset(int infd, int outfd, int errfd, int keep_fd);
/* waitpid(pid) until it is reaped, through EINTR. */
void rcptest_reap(pid_t pid);

/* rcp_cluster_options_init and rcp_conn_options_init, then o->seeds and
 * o->node (node must outlive the open call); the node's connect timeout
 * connect_ms and its request and I/O timeouts io_ms, both scaled
 * (rcptest_scale); reconnect backoff from reconnect_min_ms to
 * reconnect_max_ms. */
void rcptest_cluster_options(rcp_cluster_options *o, rcp_conn_options *node, const char *seeds,
                             int connect_ms, int io_ms, int reconnect_min_ms,
                             int reconnect_max_ms);

/* A test case called name, added to s (tests may be added to it after);
 * timeout_s > 0 sets its timeout as given (scale it with rcptest_scale
 * where wanted), 0 keeps check's default. */
TCase *rcptest_tcase(Suite *s, const char *name, int timeout_s);

/* Runs every test case of s (check's default fork mode, CK_NORMAL
 * output) and frees the runner; returns how many tests failed. */
int rcptest_run(Suite *s);

/* A short human-readable description of a reply for assertion messages:
 * type, error code, and the text (non-printable bytes as '.', cut at 92)
 * or the integer or the element count. */
const char *rcptest_describe(const rcp_reply *r, char *buf, size_t buflen);

/* Reply predicates: 1 if r is exactly that (no error set), else 0;
 * NULL-safe. */
int rcptest_is_int(const rcp_reply *r, long long v);
int rcptest_is_nil(const rcp_reply *r);

/* A blocking TCP connection to 127.0.0.1:port with send and receive
 * timeouts of timeout_ms; the fd, or -1. */
int rcptest_connect_loopback(int port, int timeout_ms);

/* TLS (tests/common/tls.c): the test certificates (tests/scripts/tls-certs.sh),
 * made on first call in a temporary directory removed at exit; the
 * directory, or NULL with err. rcptest_tls_file("ca.crt") is a path in it
 * (one of 16 rotating static buffers). */
const char *rcptest_tls_certs(char *err, size_t errlen);
const char *rcptest_tls_file(const char *name);

#endif
