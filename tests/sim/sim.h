/* sim.h: a scriptable fake Redis node for the sim tests.
 *
 * A node listens on a free port of 127.0.0.1 (or ::1) and serves every
 * connection from one thread of the test process. A scenario (the format is
 * described in README.md) tells it what to expect on the wire and what to
 * send back: raw bytes, so it can answer what no real server would.
 * Several nodes play a cluster; a node's scenario names the others' ports
 * as $P0..$P9. Every command a node receives is logged (connection, time,
 * arguments) for the test to read afterwards.
 *
 * The node never uses rcpipe's allocator hooks (plain malloc): a test run
 * with a failing allocator installed fails the library, not the fake.
 * Nothing is global: each node is its own object, freed with sim_free.
 * Time and the sanitizer scale the tests use: tests/common/common.h
 * (rcptest_now_ns, rcptest_sleep_ms, rcptest_scale). */
#ifndef RCP_SIM_H
#define RCP_SIM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "rcpipe.h"

#define SIM_MAX_NODES 10

typedef struct sim_node sim_node;

/* One logged command. */
typedef struct sim_cmd {
    int conn;          /* connection number on that node, 0, 1, ... in accept order */
    uint64_t t_ns;     /* CLOCK_MONOTONIC when it was read */
    char line[512];    /* arguments joined by spaces; bytes outside 0x21..0x7e as \xHH
                        * (truncated to fit) */
} sim_cmd;

/* Listens on a free port of bind_host ("127.0.0.1" when NULL) and starts
 * the node's thread with an empty scenario. NULL on failure. */
sim_node *sim_new(const char *bind_host);

/* Starts n nodes on 127.0.0.1 and tells each the ports of all ($P0..).
 * Returns 0, or -1 (nothing left running). */
int sim_start(sim_node **nodes, int n);

/* Stops the thread, closes every socket, frees the log. NULL ignored. */
void sim_free(sim_node *n);
void sim_free_all(sim_node **nodes, int n);

int sim_port(const sim_node *n);

/* Values of $P0..$P9 for scenarios loaded afterwards. */
void sim_set_ports(sim_node *n, const int *ports, int nports);

/* Appends a scenario's steps (text, see README.md) to the node's script;
 * they run after the steps already there. Returns 0, or -1 with a message
 * naming the bad line in err. sim_load_file reads the text from a file. */
int sim_load(sim_node *n, const char *script, char *err, size_t errlen);
int sim_load_file(sim_node *n, const char *path, char *err, size_t errlen);
/* sim_load with a printf format; fails the test (abort) on a bad script. */
void sim_loadf(sim_node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Waits until every step loaded so far has run. Returns 0, or -1 when a
 * step failed or timeout_ms passed first; sim_status then says why. */
int sim_wait(sim_node *n, int timeout_ms);

/* "ok", "running: line N ..." or "failed: line N: ...", copied to buf. */
const char *sim_status(sim_node *n, char *buf, size_t len);

/* Commands received so far that match pattern (the syntax of `expect`). */
size_t sim_count(sim_node *n, const char *pattern);
/* Waits (bounded by timeout_ms) until sim_count reaches at least want;
 * returns the count. */
size_t sim_wait_count(sim_node *n, const char *pattern, size_t want, int timeout_ms);

/* The i-th logged command; 0, or -1 past the end. */
int sim_log_at(sim_node *n, size_t i, sim_cmd *out);
size_t sim_log_len(sim_node *n);

/* Connections accepted so far, and how many of them the client closed. */
int sim_conns(sim_node *n);
int sim_conns_closed_by_peer(sim_node *n);

/* Cluster options for the tests: seeds, short timeouts scaled for the
 * build, a long periodic refresh (the tests trigger refreshes themselves).
 * node is filled and linked from o. */
void sim_cluster_options(rcp_cluster_options *o, rcp_conn_options *node, const char *seeds);

/* A future for async tests: resolve records the reply (type, err, text
 * and the kept reply) and the time; wait bounds the wait. */
typedef struct sim_fut {
    rcp_future f;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;        /* resolve calls: must end at exactly 1 */
    int type, err;
    long long integer;
    char str[512];    /* str of a string/status/error reply, NUL-terminated */
    size_t len;
    uint64_t t_ns;
} sim_fut;

void sim_fut_init(sim_fut *sf, int timeout_ms);
/* 0 once resolved, -1 if timeout_ms passed first. */
int sim_fut_wait(sim_fut *sf, int timeout_ms);
void sim_fut_destroy(sim_fut *sf);

/* A port of 127.0.0.1 nothing listens on (a node's, just closed). */
int sim_dead_port(void);
/* "127.0.0.1:PORT" of a node, in buf. */
const char *sim_addr(const sim_node *n, char *buf, size_t len);

/* Check-based helpers (they fail the running test on error). */
struct TCase;
/* rcp_cluster_open, asserting success (the error text in the failure). */
rcp_cluster *sim_open(const rcp_cluster_options *o);
/* Asserts that every step loaded into n so far ran within timeout_ms. */
void sim_assert_done(sim_node *n, int timeout_ms);
/* Polls the cluster's stats until the counter at byte offset `off` of
 * rcp_cluster_stats (offsetof) reaches want, or timeout_ms; returns it. */
uint64_t sim_wait_stat(rcp_cluster *cl, size_t off, uint64_t want, int timeout_ms);
/* Runs one test case as suite `name` (timeout scaled for the build) and
 * returns main's exit status. */
int sim_run(const char *name, struct TCase *tc);

/* "on" rules every node of a test usually wants: PING, READONLY and
 * ASKING answered (logged all the same). */
extern const char sim_prelude[];

#endif
