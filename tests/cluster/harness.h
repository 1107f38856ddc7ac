/* harness.h: a real local Redis Cluster for the cluster tests, driven
 * through the project's own tests/scripts/cluster.sh, plus a side channel
 * (hiredis, one short connection per question) to ask nodes what they
 * think, and helpers the test programs share (those every test layer
 * shares are in tests/common/common.h).
 *
 * The cluster's nodes run in their own session (see cluster.sh), so a test
 * runner killing its process group does not leave them half-dead; they are
 * stopped instead three ways: rcpc_stop (call it from main or a fixture),
 * an atexit handler in the process that started the cluster, and a guardian
 * process that runs "cluster.sh stop" as soon as that process is gone, how
 * ever it ended (crash, _exit, SIGKILL from a timeout).
 *
 * Start the cluster from main() (the long-lived process), before the
 * suite runs: tests in check's fork mode then share it, and kill, restart,
 * reshard... from a test child change it for the tests after it (every
 * helper here re-reads DIR/cluster.env, never a cached copy). Not
 * thread-safe: call from the thread that runs the test. */
#ifndef RCPC_HARNESS_H
#define RCPC_HARNESS_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>
#include <hiredis/hiredis.h>

#include "common.h"
#include "rcpipe.h"

#define RCPC_MAX_NODES 16
#define RCPC_SLOTS 16384

typedef struct rcpc_cluster {
    char dir[PATH_MAX - 64]; /* the cluster directory (cluster.env inside) */
    char seed[64];           /* "127.0.0.1:port" of the first node */
    pid_t owner;             /* the process that started it */
    pid_t guardian;          /* stops the cluster when owner is gone */
    int guard_fd;            /* owner's end of the guardian's pipe */
    int reg;                 /* internal: atexit registry slot */
} rcpc_cluster;

/* The nodes recorded in cluster.env: ports and pids (0 while killed). */
typedef struct rcpc_env {
    int n;
    int port[RCPC_MAX_NODES];
    pid_t pid[RCPC_MAX_NODES];
} rcpc_env;

/* One node as CLUSTER NODES describes it. */
typedef struct rcpc_node {
    char id[41];
    int port;
    int is_master;
    int failed;               /* flagged fail or fail? */
    int myself;
    char master_id[41];       /* replicas: their master's id */
    int master_port;          /* replicas: their master's port (0: unknown) */
    int nslots;
    unsigned char slots[RCPC_SLOTS / 8];
} rcpc_node;

typedef struct rcpc_topo {
    int n;
    rcpc_node node[RCPC_MAX_NODES];
} rcpc_topo;

/* Checks RCP_SOURCE_ROOT (the script), RCP_REDIS_SERVER (if set) and makes
 * a base temporary directory removed at exit. Call once from main(). */
int rcpc_init(char *err, size_t errlen);

/* cluster.sh start --masters M --replicas R --node-timeout 1000 [-- extra].
 * extra is NULL or a NULL-terminated list of redis-server arguments.
 * Waits (bounded) until the cluster is ok. */
int rcpc_start(rcpc_cluster *c, int masters, int replicas, const char *const *extra, char *err,
               size_t errlen);

/* Stops every node (cluster.sh stop) and the guardian. Idempotent; does
 * nothing in a process other than the one that started the cluster. */
void rcpc_stop(rcpc_cluster *c);

/* Runs "cluster.sh SUB DIR args..." (args NULL-terminated, may be NULL) and
 * waits at most timeout_s. out gets its stdout (trimmed), err its stderr
 * tail on failure. Returns the exit status, or -1 (timed out: killed;
 * could not run). */
int rcpc_script(const rcpc_cluster *c, const char *sub, const char *const *args, int timeout_s,
                char *out, size_t outlen, char *err, size_t errlen);

/* Wrappers. 0 on success, -1 with a message in err. */
int rcpc_wait_ok(const rcpc_cluster *c, int timeout_s, char *err, size_t errlen);
int rcpc_kill(const rcpc_cluster *c, int port, char *err, size_t errlen);
int rcpc_restart(const rcpc_cluster *c, int port, char *err, size_t errlen);
int rcpc_reshard(const rcpc_cluster *c, int from_port, int to_port, int nslots, char *err,
                 size_t errlen);
/* New empty master (master_port 0) or replica of master_port; *port set. */
int rcpc_add_node(const rcpc_cluster *c, int master_port, int *port, char *err, size_t errlen);
int rcpc_del_node(const rcpc_cluster *c, int port, char *err, size_t errlen);
/* args: extra redis-cli rebalance options (NULL-terminated) or NULL. */
int rcpc_rebalance(const rcpc_cluster *c, const char *const *args, char *err, size_t errlen);

/* Reads DIR/cluster.env. */
int rcpc_env_read(const rcpc_cluster *c, rcpc_env *e);

/* A cluster.sh subcommand run in the background (a child process): the
 * caller keeps working (e.g. generating load) and joins it later. */
typedef struct rcpc_job {
    pid_t pid;
    int done;
    int status; /* exit status once done; -1 killed or not run */
    int64_t started_ms, ended_ms;
    char out_path[PATH_MAX];
    char err_path[PATH_MAX];
} rcpc_job;

int rcpc_job_start(rcpc_job *j, const rcpc_cluster *c, const char *sub, const char *const *args);
/* 1 once the job has ended (then j->status is set), else 0. Never blocks. */
int rcpc_job_poll(rcpc_job *j);
/* Waits up to timeout_ms (then kills the job's process group). Returns its
 * exit status, or -1; err gets the stderr tail when it is not 0. */
int rcpc_job_join(rcpc_job *j, int timeout_ms, char *err, size_t errlen);
/* rcpc_job_start, then polls (every 100 ms: the caller's load threads run
 * meanwhile) until it ends or timeout_s (scaled) pass, then joins it.
 * Returns its exit status, or -1; err says why it is not 0. */
int rcpc_job_run(const rcpc_cluster *c, const char *sub, const char *const *args, int timeout_s,
                 char *err, size_t errlen);

/* Side channel: a fresh hiredis connection to 127.0.0.1:port (timeout 2 s),
 * one command, closed again. The reply is the caller's (freeReplyObject);
 * NULL when the node does not answer. */
redisReply *rcpc_ask(int port, const char *fmt, ...);
/* A connection to keep for many questions (redisFree it). */
redisContext *rcpc_connect(int port);

/* CLUSTER NODES from that node. 0 or -1. */
int rcpc_topology(int port, rcpc_topo *t);
/* CLUSTER NODES from the first live node of the cluster that answers. */
int rcpc_topology_any(const rcpc_cluster *c, rcpc_topo *t);
/* Index in t of the master serving slot, or -1. */
int rcpc_slot_owner(const rcpc_topo *t, unsigned slot);
int rcpc_has_slot(const rcpc_node *n, unsigned slot);
/* Index in t of the node on that port, or -1. */
int rcpc_find_port(const rcpc_topo *t, int port);
/* The first master with slots and a replica: indices in t of both; -1 if
 * there is none. */
int rcpc_master_with_replica(const rcpc_topo *t, int *master, int *replica);
/* ROLE: 1 master, 0 replica, -1 no answer. */
int rcpc_role_is_master(int port);
/* An integer field of INFO section (e.g. "clients", "connected_clients");
 * -1 if not found. */
long long rcpc_info_int(int port, const char *section, const char *field);
/* DBSIZE, -1 if no answer. */
long long rcpc_dbsize(int port);

/* Waits (up to timeout_ms) until every replica holds as many keys as its
 * master (DBSIZE; good enough for insert-only preloads). 0 or -1. */
int rcpc_wait_replicas_synced(const rcpc_cluster *c, int timeout_ms);

/* A short key that hashes to slot (a "{tag}" found by search), as a
 * static string valid until exit. */
const char *rcpc_slot_tag(unsigned slot);

/* Handle options with timeouts suited to a busy test machine (longer under
 * a sanitizer). node must outlive the open call. */
void rcpc_options(rcp_cluster_options *o, rcp_conn_options *node, const char *seed);
/* Opens or fails the test with the error text. */
rcp_cluster *rcpc_open(const rcp_cluster_options *o);
/* The loop driver rcpc_open puts node connections on: "threads" (the
 * library's own I/O threads, the default) or "libevent" (RCPTEST_DRIVER). */
const char *rcpc_driver(void);
/* 1 on the thread that runs the libevent driver's loop. */
int rcpc_on_driver_thread(void);
/* rcpc_wait_ok, rcpc_options and rcpc_open: a handle with the defaults. */
rcp_cluster *rcpc_open_default(const rcpc_cluster *c);
/* The same with no periodic refresh (10 min): its map stays stale until a
 * redirect or an error, so a test can make the handle meet a moved slot. */
rcp_cluster *rcpc_open_stale(const rcpc_cluster *c);
/* Moves every slot of the master owning key's slot to another master with
 * slots (redis-cli --cluster reshard); 0 and *to = the new owner's port, or
 * -1 with err. */
int rcpc_move_owner_away(const rcpc_cluster *c, const char *key, int *to, char *err,
                         size_t errlen);

/* main() of a cluster test program: starts c (masters, replicas, extra
 * server arguments or NULL), runs one test case `name` holding the tests
 * that add() registers (RCPTEST_ADD), with a timeout of timeout_s
 * (scaled), stops the cluster. Returns the exit status. */
int rcpc_main(rcpc_cluster *c, const char *name, int masters, int replicas,
              const char *const *extra, int timeout_s, void (*add)(TCase *tc));

/* The async API used like a sync call: rcp_cluster_send_argv_policy with
 * a future, then a wait (bounded: rcptest_scale(60) s). Returns the kept
 * reply (caller frees). NULL when the send was refused (*send_rc says
 * why) or the future was not resolved in time (*send_rc = -1; its memory
 * is then leaked on purpose: the library may still write to it). */
rcp_reply *rcpc_call_async(rcp_cluster *h, int read_policy, int argc, const char **argv,
                           const size_t *lens, int *send_rc);

/* GET key through h and asserts the value: want, or nil when want is NULL
 * (rcpc_is_string / rcptest_is_nil). what names the check in the failure
 * message. */
void rcpc_assert_get(rcp_cluster *h, const char *what, const char *key, const char *want);

/* That node's entry in rcp_cluster_get_nodes (by "127.0.0.1:port"); 1 if
 * found, 0 if not. */
int rcpc_node_info(rcp_cluster *h, int port, rcp_cluster_node_info *out);

/* Reply checks (integers and nil: rcptest_is_int, rcptest_is_nil). The
 * string check compares the bytes only; the status check the text up to
 * its first NUL. */
int rcpc_is_string(const rcp_reply *r, const char *s);
int rcpc_is_status(const rcp_reply *r, const char *s);

/* A small thread-safe "first problem" note for worker threads: the first
 * message is kept, later ones only counted. */
typedef struct rcpc_problem {
    pthread_mutex_t lock;
    int count;
    char first[512];
} rcpc_problem;
#define RCPC_PROBLEM_INIT {PTHREAD_MUTEX_INITIALIZER, 0, ""}
void rcpc_problem_note(rcpc_problem *p, const char *fmt, ...) RCPTEST_PRINTF(2, 3);
int rcpc_problem_count(rcpc_problem *p);

#endif
