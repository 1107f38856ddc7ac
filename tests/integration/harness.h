/* harness.h: start, signal and stop real redis-server processes for the
 * integration tests, plus small helpers the test programs share (those
 * every test layer shares are in tests/common/common.h).
 *
 * Every server runs on 127.0.0.1 in its own temporary directory (under one
 * per-program base directory) with persistence off. Signals only ever go to
 * a pid this harness started. A server left behind by a failing or crashing
 * test is killed three ways: the checked fixture teardown, an atexit handler,
 * and PR_SET_PDEATHSIG (the server dies with the test process even when it
 * is killed or calls _exit).
 *
 * The server functions are not thread-safe: call them from the thread that
 * runs the test function (PR_SET_PDEATHSIG fires when the *thread* that
 * forked the server exits, so it must be the long-lived main thread). */
#ifndef RCPIT_HARNESS_H
#define RCPIT_HARNESS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>

#include "common.h"
#include "rcpipe.h"

#define RCPT_MAX_EXTRA_ARGS 32

typedef struct rcpt_server {
    pid_t pid;        /* > 0 while running (or paused); 0 after kill/stop */
    int port;         /* kept across kill/restart */
    int paused;       /* SIGSTOPped by rcpt_server_pause */
    int slot;         /* internal: registry slot, -1 when none */
    char dir[PATH_MAX];
    int nargs;
    char *args[RCPT_MAX_EXTRA_ARGS]; /* extra redis-server arguments, copied */
} rcpt_server;

/* Call once from main() before running the suite. Checks that the
 * redis-server binary is there (RCP_REDIS_SERVER, or redis-server in PATH
 * when that variable is unset) and creates the base temporary directory,
 * removed when the program exits. Returns 0, or -1 with a message in err. */
int rcpt_init(char *err, size_t errlen);

/* Path of the redis-server binary in use ("" if none). */
const char *rcpt_server_path(void);

/* Starts a server on a free port. extra_args is NULL or a NULL-terminated
 * list appended to the command line (e.g. "--requirepass", "pw"). Waits
 * until it answers PING (or refuses it for lack of AUTH). Returns 0, or -1
 * with a message (including the server's log tail) in err. */
int rcpt_server_start(rcpt_server *s, const char *const *extra_args, char *err, size_t errlen);

/* An extra argument replaced by the port picked (the same on restart):
 * {"--port", "0", "--tls-port", RCPT_PORT_ARG, ...} starts a TLS-only
 * server; such a server counts as started once its port takes a TCP
 * connection (a plain PING cannot reach it). */
#define RCPT_PORT_ARG "@PORT@"

/* A TLS-only server (--port 0 --tls-port, rcptest_tls_certs) presenting
 * cert ("server", "expired", "wrongname": NAME.crt and NAME.key) and
 * trusting the test CA for client certificates (--tls-auth-clients no
 * unless extra says otherwise; extra as for rcpt_server_start). Fails the
 * test on error. */
void rcpt_tls_server_start_ok(rcpt_server *s, const char *cert, const char *const *extra);
/* rcpt_options with tls on, trusting the test CA. */
void rcpt_tls_options(rcp_conn_options *o, const rcpt_server *s);

/* kill -9 and reap; the port, directory and arguments are kept. */
int rcpt_server_kill(rcpt_server *s);

/* After rcpt_server_kill: starts the server again on the same port with the
 * same arguments and waits until it answers. */
int rcpt_server_restart(rcpt_server *s, char *err, size_t errlen);

/* SIGSTOP / SIGCONT; both return only once the state change is observed
 * (waitpid WUNTRACED / WCONTINUED), so a paused server answers nothing. */
int rcpt_server_pause(rcpt_server *s);
int rcpt_server_resume(rcpt_server *s);

/* SIGTERM (plus SIGCONT if paused), SIGKILL after a grace period, reap, and
 * remove the directory (kept if RCP_IT_KEEP is set). Idempotent. */
void rcpt_server_stop(rcpt_server *s);

/* 1 if something on 127.0.0.1:port answers a RESP PING within timeout_ms
 * (PONG, or a NOAUTH refusal), else 0. */
int rcpt_ping(int port, int timeout_ms);

/* rcp_conn_options_init plus host 127.0.0.1 and the server's port. */
void rcpt_options(rcp_conn_options *o, const rcpt_server *s);

/* Reply predicates: 1 if r is exactly that, else 0 (NULL-safe); integers
 * and nil: rcptest_is_int, rcptest_is_nil (common.h). */
int rcpt_is_string(const rcp_reply *r, const char *s, size_t len);
int rcpt_is_cstring(const rcp_reply *r, const char *s);
int rcpt_is_status(const rcp_reply *r, const char *s);
int rcpt_is_client_error(const rcp_reply *r, int err);

/* Check-based helpers: they fail the running test on error, with the
 * error text in the failure message. */
/* rcpt_server_start. */
void rcpt_server_start_ok(rcpt_server *s, const char *const *extra_args);
/* rcp_conn_open; the handle is the caller's. */
rcp_conn *rcpt_conn_open_ok(const rcp_conn_options *o);
/* ECHO tok as a sync call on conn; fails the test unless tok comes back
 * (a connection whose replies went out of step answers something else). */
void rcpt_expect_echo(rcp_conn *conn, const char *tok);
/* The usual fixture teardown: resumes the server if a test left it paused,
 * closes *conn (NULL is fine) and sets it to NULL, stops the server. */
void rcpt_teardown(rcpt_server *s, rcp_conn **conn);

/* Extra server arguments that enable the DEBUG command: DEBUG SLEEP makes
 * a server slow on purpose. */
extern const char *const rcpt_debug_args[];

/* The checked fixture of a test case whose tests share one server and one
 * connection: setup starts *s with extra_args (NULL, or a NULL-terminated
 * array that stays valid, e.g. static), teardown is rcpt_teardown(s, c).
 * Call it while building the suite: the test children check forks inherit
 * the pointers. One such fixture per program. */
void rcpt_fixture(TCase *tc, rcpt_server *s, rcp_conn **c, const char *const *extra_args);

/* Large values (test_sink.c, test_source.c). The byte at offset i of a
 * value made from seed: position-dependent, so a chunk given twice,
 * skipped or shifted does not check out. */
unsigned char rcpt_pattern(uint64_t i, unsigned seed);
/* A field of /proc/self/status in KiB ("VmHWM:", "VmRSS:"). */
long rcpt_proc_kb(const char *field);
/* Resets the peak (VmHWM) to the current RSS (Linux >= 4.0), so that a
 * peak read after is what came since; returns that VmHWM. */
long rcpt_peak_reset(void);

/* main() of an integration test program: rcpt_init, then runs the suite
 * make_suite builds. Returns the exit status. */
int rcpt_main(Suite *(*make_suite)(void));
/* The same for a program with one test case: suite "integration-NAME"
 * holding case tcase_name (timeout_s, scaled), whose fixture and tests
 * add() registers. */
int rcpt_main_case(const char *name, const char *tcase_name, int timeout_s,
                   void (*add)(TCase *tc));

#endif
