/* rcp-bench: N application threads, each a synchronous caller doing one
 * request at a time (or, with --async-depth, keeping N requests in flight
 * through futures; with --pipeline, sending groups of N and waiting for the
 * group), against one Redis node or a Redis Cluster. --rate-limiting makes
 * it an open loop whose latency counts from each request's intended send
 * time (coordinated omission corrected). docs/bench.md is the reference.
 *
 * --client rcpipe: all threads share ONE rcp_conn (implicit pipelining), or
 * in cluster mode ONE rcp_cluster handle.
 * --client classic: the request/response baseline, one blocking hiredis
 * connection per thread (in cluster mode, per thread and master, opened
 * before the timed phase, routed by the bench's own slot table from CLUSTER
 * SLOTS).
 *
 * --tls: every connection speaks TLS, rcpipe's through its tls_* options,
 * the classic baseline's and the side channels' through bconn.h (hiredis
 * 0.14 has none: a small OpenSSL client, tlsconn.c).
 *
 * Cluster mode is detected from INFO (cluster_enabled:1) or forced with
 * --cluster-mode; -s may name any node. Server CPU is then summed over the
 * masters (replicas are reported separately).
 *
 * Besides throughput and latency percentiles it reports what each command
 * costs: server CPU (from INFO before and after the timed phase), client
 * CPU and context switches (getrusage), and for rcpipe the library's own
 * counters (futex wakes, loop wakes, commands per write). Option names follow
 * memtier_benchmark where there is one. Results go to stdout (and, with
 * --json-out-file, to a JSON file); progress and diagnostics to stderr. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "rcpipe.h"

/* The classic async baseline (hiredis's own async API) and rcpipe on the
 * application's loop need the loop libraries; without them those modes
 * are refused with a message, the rest works. */
#ifdef RCP_BENCH_LIBEVENT
#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include "rcpipe/libevent.h"
#endif
#ifdef RCP_BENCH_LIBUV
#include <uv.h>
#include "rcpipe/libuv.h"
#endif

#include "bconn.h"
#include "hist.h"
#include "slotmap.h"

#if defined(__GNUC__)
#define BENCH_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BENCH_PRINTF(f, a)
#endif

#define PROG "rcp-bench"
#define EXIT_RUN_FAILED 1
#define EXIT_BAD_USAGE 2

#define MAX_THREADS 4096u
#define MAX_DATA_SIZE (64u * 1024 * 1024)
#define PRELOAD_CHUNK 1000u  /* commands per pipelined write while preloading */
#define PRELOAD_BYTES (8u * 1024 * 1024) /* ... and at most this many value bytes */
#define BIG_KEYS 2u          /* --big-thread: keys of the big thread, preloaded */
#define CONNECT_TIMEOUT_S 5
#define CLASSIC_IO_TIMEOUT_S 10 /* hiredis socket timeout of the baseline */
/* After the stop, a thread gets this long to return from its request (the
 * library's default request deadline is 5 s) before the run is declared hung. */
#define STOP_GRACE_S 15
#define MAX_SERIES 3600u   /* seconds kept in the per-second series */
#define MAX_DEPTH 65536u   /* --async-depth and --pipeline */
#define SLEEP_SLICE_NS 100000000u /* a rate-limited thread checks for the stop this often */
#define MIN_CACHE_BYTES 65536u /* rcp_cluster_options.client_cache_bytes, when not 0 */

enum client_kind { CLIENT_RCPIPE, CLIENT_CLASSIC };
enum loop_kind { LOOP_NONE, LOOP_LIBEVENT, LOOP_LIBUV };
/* Requests a loop-driven worker sends (and waits for) before the timed
 * phase, so every master's connection is up when it starts. */
#define WARMUP_REQUESTS 32u
/* rcp_conn's default max_inflight: a callback that refills past it would
 * get RCP_ERR_QUEUE_FULL (it may not block). */
#define CALLBACK_MAX_DEPTH 4096u

typedef struct config {
    char *host;
    int port;
    unsigned threads;
    unsigned ratio_set, ratio_get;
    size_t data_size;
    uint64_t key_min, key_max;
    const char *key_prefix;
    double test_time_s;
    uint64_t requests; /* per thread; 0: bound by test_time_s */
    int client;        /* enum client_kind */
    const char *json_out;
    bool preload;
    bool batch_delay_set;
    unsigned batch_delay_us;
    bool io_threads_set;
    unsigned io_threads;
    bool no_fast_path;
    bool cork;
    int spare_conns;     /* -1: the option's default */
    const char *password;
    const char *user;
    bool progress;
    bool cluster_forced; /* --cluster-mode */
    int read_policy;     /* rcp_read_policy; -1: not given */
    bool cluster;        /* decided at run time: forced or cluster_enabled:1 */
    char key_pattern[2]; /* [0] SETs, [1] GETs: 'R' uniform, 'S' sequential, 'G' gaussian */
    double key_median, key_stddev; /* G; NAN: memtier's defaults */
    bool distinct_seed;  /* --distinct-client-seed */
    uint64_t run_seed;   /* mixed into every thread's seed; 0 by default (reproducible) */
    unsigned async_depth; /* > 0: async mode (rcpipe) */
    unsigned pipeline;    /* > 1: explicit pipelining */
    uint64_t rate;        /* --rate-limiting, ops/s per thread; 0: closed loop */
    bool count_allocs;    /* --count-allocs (rcpipe) */
    int event_loop;       /* enum loop_kind: --event-loop (rcpipe async) */
    bool refill_callback; /* async: each completion sends the next request */
    unsigned series_min, series_max; /* --series: runs of MIN..MAX back to back */
    bool tls;             /* --tls: rcpipe, the classic baseline and the side channels */
    tlsconn_settings tls_s; /* --cacert, --cert, --key, --sni, --tls-skip-verify */
    bool stream;          /* --stream: rcpipe GETs into a counting sink (rcp_sink), SETs
                           * from a generating source (rcp_source) */
    size_t big_size;      /* --big-thread SIZE: thread 0 moves values of SIZE; 0: off */
    double big_rate;      /* --big-rate MBPS, in bytes/s: thread 0's cap; 0: none */
    size_t cache_bytes;   /* --client-cache-bytes: rcp_cluster_options.client_cache_bytes */
    int cache_ttl_ms;     /* --client-cache-ttl-ms; 0: the library's default */
    uint64_t writer_rate; /* --writer-rate: SETs/s from one extra thread and handle; 0: none */
    int bulk_pool;        /* --bulk-pool N: rcpipe cluster option bulk_pool; -1: default */
    size_t bulk_threshold; /* --bulk-threshold B: option bulk_threshold; 0: default */
} config;

struct bench;
struct worker;

/* What one request came to. A failed GET is neither a hit nor a miss. */
enum outcome { OUT_ERR, OUT_OK, OUT_HIT, OUT_MISS };

/* One request of async or pipeline mode. With rcpipe its future lives here
 * until the callback (on an I/O thread) has filled in the result and pushed
 * the slot onto its worker's completed stack; the worker then does all the
 * accounting on its own thread. */
typedef struct req {
    rcp_future f;
    struct worker *w;
    struct req *next;   /* completed stack */
    uint64_t t_start;   /* latency base: send, group send or intended time */
    uint64_t t_done;    /* written by the callback */
    size_t req_bytes, reply_bytes;
    int outcome;        /* enum outcome */
    bool is_set;
    char *key;          /* classic pipeline: kept for a redirect */
    size_t keylen;
    int node;           /* classic cluster pipeline: the node asked */
    size_t value_len;   /* GET hit: the value's length (written by the callback) */
    bool streamed;      /* a --stream GET: its reply is the value's length */
    rcp_sink sink;      /* --stream GETs: counts into sunk, must live until resolved */
    uint64_t sunk;      /* bytes the sink was given */
    rcp_source src;     /* --stream SETs: generates the value, must live until resolved */
    uint64_t pulled;    /* bytes the source gave */
    char err[160];      /* OUT_ERR: why */
} req;

typedef struct worker {
    struct bench *b;
    unsigned index;
    pthread_t tid;
    bconn *rc;              /* classic only */
    bconn **conns;          /* classic, cluster mode: per slot-map node, lazily */
    uint64_t moved, ask;    /* classic, cluster mode: redirects followed */
    bool connect_failed;
    bool broken;            /* classic: the connection failed mid-run */
    _Atomic uint64_t done;  /* requests completed, read by the progress line */
    uint64_t set_ops, get_ops, errors;
    uint64_t end_ns;        /* when this thread stopped issuing requests */
    char first_error[512];
    hist set_h, get_h;
    uint64_t rng;            /* key and SET/GET choice */
    uint64_t seq[2];         /* key pattern S: steps taken, SETs and GETs */
    uint64_t seq_off;        /* key pattern S: this thread's start in the range */
    uint64_t hits, misses;   /* GETs that found a value / got nil */
    uint64_t set_bytes, get_bytes; /* RESP bytes both ways */
    uint64_t value_bytes;    /* value bytes moved: SET values sent, GET values received */
    bool big;                /* --big-thread: this is thread 0, the one moving big values */
    const char *prefix;      /* key prefix (the big thread's keys are its own) */
    size_t plen;
    const char *value;       /* SET value, vsize bytes */
    size_t vsize;
    uint64_t lat_sum;        /* ns, owner's copy of lat_sum_ns */
    _Atomic uint64_t lat_sum_ns; /* read by the progress line */
    hist cur_h;              /* latencies of second cur_sec, for the series */
    uint64_t cur_sec;
    /* async and pipeline modes */
    req *reqs;
    unsigned *free_list, nfree, inflight;
    _Atomic(req *) done_head; /* pushed by callbacks, taken whole by the worker */
    atomic_ulong pushed;      /* completions pushed so far (callbacks) */
    unsigned long reaped;     /* completions taken so far (the worker) */
    atomic_ulong wake_at;     /* 0, or the `pushed` count the sleeping worker waits for */
    sem_t sem;
    bool sem_ok;
    uint64_t sleeps;          /* times it waited on sem (a futex wake each) */
    char *keys;               /* pipeline: one key buffer per request */
    /* Callback refill (--refill callback, classic async, --event-loop):
     * each completion sends the next request on its slot. */
    bool cb_lock;             /* callbacks run on another thread: take cb_mu */
    bool cb_mu_ok;
    pthread_mutex_t cb_mu;
    bool warmup;              /* before the timed phase: nothing accounted */
    bool window_done;         /* every slot of the first window was sent */
    uint64_t sent;            /* requests sent (this phase) */
    /* Own loop (classic async, --event-loop): the worker's loop and handles */
    struct event_base *evbase;
    void *uvloop;             /* uv_loop_t */
    rcp_loop *rloop;
    rcp_conn *own_conn;
    rcp_cluster *own_cluster;
    redisAsyncContext **actx; /* classic async: per slot-map node (or [0]) */
    bool own_st_ok;
    rcp_conn_stats own_st0, own_st1;    /* the worker's handle, around the run */
    rcp_cluster_stats own_cl0, own_cl1;
    size_t own_nodes;
} worker;

typedef struct bench {
    const config *cfg;
    rcp_conn *conn; /* rcpipe only */
    rcp_cluster *cluster; /* rcpipe, cluster mode */
    slotmap *map;   /* cluster mode */
    char *value;    /* data_size bytes of a fixed pattern */
    char *big_value; /* --big-thread: big_size bytes */
    char *big_prefix; /* --big-thread: key prefix of thread 0 */
    atomic_bool stop;
    pthread_barrier_t ready, go;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned finished;
    worker *workers;
    uint64_t start_ns;        /* start of the timed phase */
    pthread_mutex_t series_mu;
    hist *series;             /* one histogram per second of the run */
    rcp_conn_options opts;    /* rcpipe: node options (--event-loop: per worker) */
    rcp_cluster_options copts;
    char seeds[300];
    size_t series_n;
    bool series_truncated;    /* ran past MAX_SERIES seconds */
} bench;

typedef struct server_info {
    double cpu_user, cpu_sys; /* seconds */
    uint64_t commands;        /* total_commands_processed */
    bool cluster_enabled;
    double proc_cpu;          /* utime + stime of /proc/<process_id>/stat, seconds */
    bool proc_ok;             /* proc_cpu read (a local server) */
} server_info;

/* INFO over the cluster: masters summed, replicas summed separately. */
typedef struct cluster_info {
    server_info masters, replicas;
    bool replicas_ok;
} cluster_info;

static volatile sig_atomic_t interrupted;
static const char *hang_reason; /* set by supervise when the run hung */

/* ------------------------------------------------------------------ util */

static _Noreturn void die_usage(const char *fmt, ...) BENCH_PRINTF(1, 2);
static _Noreturn void die_usage(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, PROG ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '" PROG " --help'.\n");
    exit(EXIT_BAD_USAGE);
}

static _Noreturn void die_run(const char *fmt, ...) BENCH_PRINTF(1, 2);
static _Noreturn void die_run(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, PROG ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(EXIT_RUN_FAILED);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct timespec ns_to_timespec(uint64_t ns)
{
    struct timespec ts;

    ts.tv_sec = (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    return ts;
}

/* splitmix64: turns a small seed (the thread index) into a good xorshift
 * state, never zero. */
static uint64_t rng_seed(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 0x2545F4914F6CDD1Dull;
}

/* xorshift64*: per-thread, no locks, no shared state. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Decimal digits of v at dst (no NUL); returns their number. */
static size_t u64_to_dec(uint64_t v, char *dst)
{
    char tmp[20];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (i = 0; i < n; i++)
        dst[i] = tmp[n - 1 - i];
    return n;
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: " PROG " [options]\n"
        "\n"
        "N application threads, each doing one synchronous request at a time (see\n"
        "Mode for the others), against one Redis server or a Redis Cluster.\n"
        "--client rcpipe shares ONE rcpipe connection (in cluster mode ONE\n"
        "rcp_cluster handle) between all threads (implicit pipelining); --client\n"
        "classic gives each thread its own blocking hiredis connection, per master\n"
        "in cluster mode (request/response baseline).\n"
        "\n"
        "Connection:\n"
        "  -s, --server HOST:PORT   server address, in cluster mode any node (the seed)\n"
        "                           (default 127.0.0.1:6379)\n"
        "  -p, --port PORT          server port (overrides the one in --server)\n"
        "  -a, --auth PASSWORD      AUTH password\n"
        "      --user USER          ACL user name for AUTH (needs --auth)\n"
        "\n"
        "Load:\n"
        "  -t, --threads N          application threads (default 4)\n"
        "      --ratio SET:GET      SET to GET ratio (default 1:10)\n"
        "  -d, --data-size BYTES    value size of SETs and of --preload (default 32)\n"
        "      --key-minimum N      smallest key number (default 0)\n"
        "      --key-maximum N      largest key number (default 10000)\n"
        "      --key-prefix STR     key name prefix (default \"memtier-\")\n"
        "      --test-time SECS     timed phase length, may be fractional (default 10)\n"
        "  -n, --requests N         requests per thread; wins over --test-time\n"
        "      --preload            SET every key in [min,max] before the run (not timed)\n"
        "      --key-pattern P[:P]  key choice for SETs[:GETs]: R uniform random (default),\n"
        "                           S sequential (each thread from its own offset),\n"
        "                           G gaussian (see --key-median/--key-stddev)\n"
        "      --key-median N       G: centre of the keys (default the middle of the range)\n"
        "      --key-stddev N       G: standard deviation (default range/6)\n"
        "      --distinct-client-seed  a new random seed per thread and run (default: the\n"
        "                           same seed per thread index in every run)\n"
        "      --rate-limiting R    open loop: R requests/s per thread on a fixed schedule;\n"
        "                           latency from the intended send time\n"
        "      --series MIN:MAX     with --rate-limiting, sync mode: each due time starts a\n"
        "                           run of MIN..MAX (uniform) requests back to back (the\n"
        "                           RedisPipe article's load: 5:15); still R requests/s\n"
        "\n"
        "Mode (default sync: one request at a time per thread):\n"
        "      --async-depth N      async mode, N requests in flight per thread; classic:\n"
        "                           hiredis's async API on a libevent loop per thread, a\n"
        "                           redisAsyncContext per master, refilled from callbacks\n"
        "      --refill HOW         async, rcpipe: worker (default: the thread refills when\n"
        "                           half the window is back) or callback (each completion\n"
        "                           sends the next request from its callback)\n"
        "      --event-loop L       async, rcpipe: libevent or libuv; each thread runs its\n"
        "                           own loop with its own handle on it (rcp_conn_options\n"
        "                           .loop), refilled from the callbacks\n"
        "      --pipeline N         explicit pipelining: send N requests, then wait for\n"
        "                           all N (classic: per master in cluster mode)\n"
        "\n");
    /* two strings: C11 compilers need to support only 4095 characters in one */
    fprintf(f,
        "Client:\n"
        "      --client NAME        rcpipe (default) or classic\n"
        "      --batch-delay-us N   rcpipe: pause after a batch's first request\n"
        "      --io-threads N       rcpipe: I/O loop threads\n"
        "      --no-fast-path       rcpipe: disable the lone-caller fast path\n"
        "      --cork               rcpipe: adaptive corking (option cork, docs/tuning.md)\n"
        "      --spare-conns N      rcpipe, one server: spare connections for sync callers\n"
        "                           (option spare_conns, 0..8; default the option's, 3)\n"
        "      --count-allocs       rcpipe: count the library's allocations during the run\n"
        "      --stream             rcpipe: GETs stream their value into a sink that counts\n"
        "                           and discards it (rcp_sink); SETs send theirs from a\n"
        "                           source that generates the value's bytes (the same\n"
        "                           pattern as a plain SET's) as the socket takes them\n"
        "                           (rcp_source), without the value in memory\n"
        "\n"
        "Client-side cache (rcpipe, cluster, sync mode; docs/caching.md):\n"
        "      --client-cache-bytes N  cache up to N bytes of GET replies (0: off, the\n"
        "                           default; else at least 65536)\n"
        "      --client-cache-ttl-ms N  longest a cached reply is served (library default\n"
        "                           60000)\n"
        "      --writer-rate N      cluster mode: one extra thread SETs N keys/s (keys drawn\n"
        "                           like the GETs'), through its own handle without cache,\n"
        "                           so that the servers send invalidations (0: none)\n"
        "\n"
        "Large values:\n"
        "      --big-thread SIZE    sync mode, 2+ threads: thread 0 GETs/SETs values of\n"
        "                           SIZE bytes on keys of its own (PREFIXbig-0..1, set\n"
        "                           before the run), the others do the normal load; the\n"
        "                           table and latencies are the others' (head-of-line\n"
        "                           blocking), thread 0 is reported on its own\n"
        "      --big-rate MBPS      with --big-thread: thread 0 moves at most MBPS MB/s\n"
        "                           (10^6 bytes) of values: each request waits until the\n"
        "                           value bytes moved so far fit the rate since the start\n"
        "      --bulk-pool N        rcpipe cluster: bulk connections per node (option\n"
        "                           bulk_pool; 0: every request on the shared pipeline)\n"
        "      --bulk-threshold B   rcpipe cluster: commands over B bytes go to the bulk\n"
        "                           connections (option bulk_threshold)\n"
        "\n"
        "TLS (memtier_benchmark's flags; every connection: rcpipe's, the classic\n"
        "baseline's and the bench's own INFO, CLUSTER SLOTS and preload):\n"
        "      --tls                speak TLS (classic: a blocking OpenSSL client; not with\n"
        "                           --client classic --async-depth)\n"
        "      --cacert FILE        CA certificates (PEM) to verify the server (default:\n"
        "                           the system's store)\n"
        "      --cert FILE          client certificate (PEM), with --key\n"
        "      --key FILE           its private key (PEM, unencrypted)\n"
        "      --sni NAME           server name sent as SNI and verified (default: the\n"
        "                           host connected to)\n"
        "      --tls-skip-verify    do NOT verify the server's certificate (tests only)\n"
        "\n"
        "Output:\n"
        "      --json-out-file FILE write the results as one JSON object to FILE\n"
        "      --progress           progress line on stderr every second even when\n"
        "                           stderr is not a terminal\n"
        "  -h, --help               this text\n"
        "\n"
        "Cluster:\n"
        "  Cluster mode is used when the server's INFO says cluster_enabled:1.\n"
        "      --cluster-mode       use cluster mode even so (fails if not a cluster)\n"
        "      --read-policy P      rcpipe: master (default), prefer-replica or\n"
        "                           master-and-replicas\n"
        "  Server CPU us/op is then summed over the masters; the replicas' CPU is\n"
        "  reported on its own.\n"
        "\n"
        "At the end: memtier's ALL STATS table (Sets/Gets/Totals) plus server CPU,\n"
        "client CPU and commands per write; details below it. docs/bench.md explains\n"
        "every column and JSON key.\n"
        "\n"
        "Exit status: 0 on success, 1 when connecting failed or any request got\n"
        "an error, 2 on bad options.\n");
}

static uint64_t parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max)
{
    char *end;
    unsigned long long v;

    if (!s || !*s || *s < '0' || *s > '9')
        die_usage("%s: '%s' is not a non-negative integer", opt, s ? s : "");
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end)
        die_usage("%s: '%s' is not a non-negative integer", opt, s);
    if (v < min || v > max)
        die_usage("%s: %s is out of range [%" PRIu64 ", %" PRIu64 "]", opt, s, min, max);
    return (uint64_t)v;
}

static void parse_server(config *cfg, const char *s)
{
    const char *colon;
    size_t hostlen;

    if (!*s)
        die_usage("--server: empty address");
    if (*s == '[') { /* [v6addr]:port */
        const char *close = strchr(s, ']');
        if (!close || close == s + 1)
            die_usage("--server: bad address '%s'", s);
        hostlen = (size_t)(close - s - 1);
        free(cfg->host);
        cfg->host = strndup(s + 1, hostlen);
        if (close[1] == ':')
            cfg->port = (int)parse_u64("--server port", close + 2, 1, 65535);
        else if (close[1])
            die_usage("--server: bad address '%s'", s);
        return;
    }
    colon = strrchr(s, ':');
    if (colon && strchr(s, ':') != colon) /* bare IPv6 without a port */
        colon = NULL;
    hostlen = colon ? (size_t)(colon - s) : strlen(s);
    if (hostlen == 0)
        die_usage("--server: missing host in '%s'", s);
    free(cfg->host);
    cfg->host = strndup(s, hostlen);
    if (colon)
        cfg->port = (int)parse_u64("--server port", colon + 1, 1, 65535);
}

static void parse_ratio(config *cfg, const char *s)
{
    const char *colon = strchr(s, ':');
    char buf[64];
    size_t n;

    if (!colon || (n = (size_t)(colon - s)) == 0 || n >= sizeof(buf))
        die_usage("--ratio: expected SET:GET, got '%s'", s);
    memcpy(buf, s, n);
    buf[n] = '\0';
    cfg->ratio_set = (unsigned)parse_u64("--ratio", buf, 0, 1000000);
    cfg->ratio_get = (unsigned)parse_u64("--ratio", colon + 1, 0, 1000000);
    if (cfg->ratio_set + cfg->ratio_get == 0)
        die_usage("--ratio: SET and GET cannot both be 0");
}

static double parse_seconds(const char *opt, const char *s)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0.0) || v > 86400.0 * 365)
        die_usage("%s: '%s' is not a positive number of seconds", opt, s);
    return v;
}

enum {
    OPT_RATIO = 256,
    OPT_KEY_MIN,
    OPT_KEY_MAX,
    OPT_KEY_PREFIX,
    OPT_TEST_TIME,
    OPT_CLIENT,
    OPT_JSON,
    OPT_PRELOAD,
    OPT_BATCH_DELAY,
    OPT_IO_THREADS,
    OPT_NO_FAST_PATH,
    OPT_CORK,
    OPT_SPARE_CONNS,
    OPT_USER,
    OPT_PROGRESS,
    OPT_CLUSTER_MODE,
    OPT_READ_POLICY,
    OPT_KEY_PATTERN,
    OPT_KEY_MEDIAN,
    OPT_KEY_STDDEV,
    OPT_DISTINCT_SEED,
    OPT_ASYNC_DEPTH,
    OPT_PIPELINE,
    OPT_RATE,
    OPT_COUNT_ALLOCS,
    OPT_EVENT_LOOP,
    OPT_REFILL,
    OPT_SERIES,
    OPT_TLS,
    OPT_CACERT,
    OPT_CERT,
    OPT_KEY,
    OPT_TLS_SKIP_VERIFY,
    OPT_SNI,
    OPT_STREAM,
    OPT_BIG_THREAD,
    OPT_CACHE_BYTES,
    OPT_CACHE_TTL,
    OPT_WRITER_RATE,
    OPT_BULK_POOL,
    OPT_BULK_THRESHOLD,
    OPT_BIG_RATE
};

/* "X" or "X:Y" with X, Y in R, S, G (memtier's SET:GET form). */
static void parse_key_pattern(config *cfg, const char *s)
{
    size_t n = strlen(s);

    if (!((n == 1 || (n == 3 && s[1] == ':')) && strchr("RSG", s[0]) &&
          strchr("RSG", s[n - 1])))
        die_usage("--key-pattern: expected R, S or G, or SET:GET such as R:G, got '%s'", s);
    cfg->key_pattern[0] = s[0];
    cfg->key_pattern[1] = s[n - 1];
}

static double parse_double(const char *opt, const char *s, double min)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < min)
        die_usage("%s: '%s' is not a number >= %g", opt, s, min);
    return v;
}

static const char *read_policy_name(int p)
{
    switch (p) {
    case RCP_READ_PREFER_REPLICA: return "prefer-replica";
    case RCP_READ_MASTER_AND_REPLICAS: return "master-and-replicas";
    default: return "master";
    }
}

/* --cacert, --cert, --key: a file we can read, or exit 2 naming it (before
 * OpenSSL gives a vaguer message at connect time). */
static const char *tls_file_arg(const char *opt, const char *path)
{
    FILE *f;

    if (!*path)
        die_usage("%s: empty file name", opt);
    f = fopen(path, "r");
    if (!f)
        die_usage("%s: cannot read '%s': %s", opt, path, strerror(errno));
    fclose(f);
    return path;
}

/* The TLS flags together: they need --tls, a certificate needs its key,
 * and the build and the mode must be able to speak TLS. */
static void check_tls_options(const config *cfg)
{
    const tlsconn_settings *t = &cfg->tls_s;

    if (!cfg->tls) {
        if (t->ca_file || t->cert_file || t->key_file || t->sni || t->skip_verify)
            die_usage("--cacert, --cert, --key, --sni and --tls-skip-verify need --tls");
        return;
    }
    if (!bconn_have_tls())
        die_usage("--tls: this rcp-bench was built without TLS (rcpipe built without OpenSSL "
                  "3: install libssl-dev and reconfigure with -Dtls=auto or enabled)");
    if (t->cert_file && !t->key_file)
        die_usage("--cert needs --key (the client certificate's private key)");
    if (t->key_file && !t->cert_file)
        die_usage("--key needs --cert (the client certificate it belongs to)");
    if (cfg->client == CLIENT_CLASSIC && cfg->async_depth)
        die_usage("--tls: classic async has no TLS (hiredis 0.14's async API cannot speak it); "
                  "use --client classic in sync or --pipeline mode, or --client rcpipe");
}

static void parse_args(config *cfg, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"server", required_argument, NULL, 's'},
        {"port", required_argument, NULL, 'p'},
        {"auth", required_argument, NULL, 'a'},
        {"user", required_argument, NULL, OPT_USER},
        {"threads", required_argument, NULL, 't'},
        {"ratio", required_argument, NULL, OPT_RATIO},
        {"data-size", required_argument, NULL, 'd'},
        {"key-minimum", required_argument, NULL, OPT_KEY_MIN},
        {"key-maximum", required_argument, NULL, OPT_KEY_MAX},
        {"key-prefix", required_argument, NULL, OPT_KEY_PREFIX},
        {"test-time", required_argument, NULL, OPT_TEST_TIME},
        {"requests", required_argument, NULL, 'n'},
        {"preload", no_argument, NULL, OPT_PRELOAD},
        {"client", required_argument, NULL, OPT_CLIENT},
        {"batch-delay-us", required_argument, NULL, OPT_BATCH_DELAY},
        {"io-threads", required_argument, NULL, OPT_IO_THREADS},
        {"no-fast-path", no_argument, NULL, OPT_NO_FAST_PATH},
        {"cork", no_argument, NULL, OPT_CORK},
        {"spare-conns", required_argument, NULL, OPT_SPARE_CONNS},
        {"json-out-file", required_argument, NULL, OPT_JSON},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"cluster-mode", no_argument, NULL, OPT_CLUSTER_MODE},
        {"read-policy", required_argument, NULL, OPT_READ_POLICY},
        {"key-pattern", required_argument, NULL, OPT_KEY_PATTERN},
        {"key-median", required_argument, NULL, OPT_KEY_MEDIAN},
        {"key-stddev", required_argument, NULL, OPT_KEY_STDDEV},
        {"distinct-client-seed", no_argument, NULL, OPT_DISTINCT_SEED},
        {"async-depth", required_argument, NULL, OPT_ASYNC_DEPTH},
        {"pipeline", required_argument, NULL, OPT_PIPELINE},
        {"rate-limiting", required_argument, NULL, OPT_RATE},
        {"count-allocs", no_argument, NULL, OPT_COUNT_ALLOCS},
        {"event-loop", required_argument, NULL, OPT_EVENT_LOOP},
        {"refill", required_argument, NULL, OPT_REFILL},
        {"series", required_argument, NULL, OPT_SERIES},
        {"tls", no_argument, NULL, OPT_TLS},
        {"cacert", required_argument, NULL, OPT_CACERT},
        {"cert", required_argument, NULL, OPT_CERT},
        {"key", required_argument, NULL, OPT_KEY},
        {"tls-skip-verify", no_argument, NULL, OPT_TLS_SKIP_VERIFY},
        {"sni", required_argument, NULL, OPT_SNI},
        {"stream", no_argument, NULL, OPT_STREAM},
        {"big-thread", required_argument, NULL, OPT_BIG_THREAD},
        {"big-rate", required_argument, NULL, OPT_BIG_RATE},
        {"client-cache-bytes", required_argument, NULL, OPT_CACHE_BYTES},
        {"client-cache-ttl-ms", required_argument, NULL, OPT_CACHE_TTL},
        {"writer-rate", required_argument, NULL, OPT_WRITER_RATE},
        {"bulk-pool", required_argument, NULL, OPT_BULK_POOL},
        {"bulk-threshold", required_argument, NULL, OPT_BULK_THRESHOLD},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    const char *port_override = NULL;

    memset(cfg, 0, sizeof(*cfg));
    cfg->host = strdup("127.0.0.1");
    cfg->port = 6379;
    cfg->threads = 4;
    cfg->ratio_set = 1;
    cfg->ratio_get = 10;
    cfg->data_size = 32;
    cfg->key_min = 0;
    cfg->key_max = 10000;
    cfg->key_prefix = "memtier-";
    cfg->test_time_s = 10;
    cfg->client = CLIENT_RCPIPE;
    cfg->read_policy = -1;
    cfg->spare_conns = -1;
    cfg->bulk_pool = -1;
    cfg->key_pattern[0] = cfg->key_pattern[1] = 'R';
    cfg->key_median = cfg->key_stddev = NAN;
    cfg->pipeline = 1;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":s:p:a:t:d:n:h", longopts, NULL)) != -1) {
        switch (c) {
        case 's': parse_server(cfg, optarg); break;
        case 'p': port_override = optarg; break;
        case 'a': cfg->password = optarg; break;
        case OPT_USER: cfg->user = optarg; break;
        case 't': cfg->threads = (unsigned)parse_u64("--threads", optarg, 1, MAX_THREADS); break;
        case OPT_RATIO: parse_ratio(cfg, optarg); break;
        case 'd': cfg->data_size = (size_t)parse_u64("--data-size", optarg, 0, MAX_DATA_SIZE); break;
        case OPT_KEY_MIN: cfg->key_min = parse_u64("--key-minimum", optarg, 0, UINT64_MAX - 1); break;
        case OPT_KEY_MAX: cfg->key_max = parse_u64("--key-maximum", optarg, 0, UINT64_MAX - 1); break;
        case OPT_KEY_PREFIX: cfg->key_prefix = optarg; break;
        case OPT_TEST_TIME: cfg->test_time_s = parse_seconds("--test-time", optarg); break;
        case 'n': cfg->requests = parse_u64("--requests", optarg, 1, UINT64_MAX / 2); break;
        case OPT_PRELOAD: cfg->preload = true; break;
        case OPT_CLIENT:
            if (strcmp(optarg, "rcpipe") == 0)
                cfg->client = CLIENT_RCPIPE;
            else if (strcmp(optarg, "classic") == 0)
                cfg->client = CLIENT_CLASSIC;
            else
                die_usage("--client: expected rcpipe or classic, got '%s'", optarg);
            break;
        case OPT_BATCH_DELAY:
            cfg->batch_delay_us = (unsigned)parse_u64("--batch-delay-us", optarg, 0, 1000000);
            cfg->batch_delay_set = true;
            break;
        case OPT_IO_THREADS:
            cfg->io_threads = (unsigned)parse_u64("--io-threads", optarg, 1, 256);
            cfg->io_threads_set = true;
            break;
        case OPT_NO_FAST_PATH: cfg->no_fast_path = true; break;
        case OPT_CORK: cfg->cork = true; break;
        case OPT_SPARE_CONNS:
            cfg->spare_conns = (int)parse_u64("--spare-conns", optarg, 0, 8);
            break;
        case OPT_JSON: cfg->json_out = optarg; break;
        case OPT_PROGRESS: cfg->progress = true; break;
        case OPT_CLUSTER_MODE: cfg->cluster_forced = true; break;
        case OPT_READ_POLICY:
            if (strcmp(optarg, "master") == 0)
                cfg->read_policy = RCP_READ_MASTER_ONLY;
            else if (strcmp(optarg, "prefer-replica") == 0)
                cfg->read_policy = RCP_READ_PREFER_REPLICA;
            else if (strcmp(optarg, "master-and-replicas") == 0)
                cfg->read_policy = RCP_READ_MASTER_AND_REPLICAS;
            else
                die_usage("--read-policy: expected master, prefer-replica or "
                          "master-and-replicas, got '%s'", optarg);
            break;
        case OPT_KEY_PATTERN: parse_key_pattern(cfg, optarg); break;
        case OPT_KEY_MEDIAN: cfg->key_median = parse_double("--key-median", optarg, 0.0); break;
        case OPT_KEY_STDDEV:
            cfg->key_stddev = parse_double("--key-stddev", optarg, 0.0);
            if (!(cfg->key_stddev > 0))
                die_usage("--key-stddev: must be > 0");
            break;
        case OPT_DISTINCT_SEED: cfg->distinct_seed = true; break;
        case OPT_ASYNC_DEPTH:
            cfg->async_depth = (unsigned)parse_u64("--async-depth", optarg, 1, MAX_DEPTH);
            break;
        case OPT_PIPELINE:
            cfg->pipeline = (unsigned)parse_u64("--pipeline", optarg, 1, MAX_DEPTH);
            break;
        case OPT_RATE: cfg->rate = parse_u64("--rate-limiting", optarg, 1, 100000000); break;
        case OPT_COUNT_ALLOCS: cfg->count_allocs = true; break;
        case OPT_EVENT_LOOP:
            if (strcmp(optarg, "libevent") == 0)
                cfg->event_loop = LOOP_LIBEVENT;
            else if (strcmp(optarg, "libuv") == 0)
                cfg->event_loop = LOOP_LIBUV;
            else
                die_usage("--event-loop: expected libevent or libuv, got '%s'", optarg);
            break;
        case OPT_REFILL:
            if (strcmp(optarg, "callback") == 0)
                cfg->refill_callback = true;
            else if (strcmp(optarg, "worker") == 0)
                cfg->refill_callback = false;
            else
                die_usage("--refill: expected worker or callback, got '%s'", optarg);
            break;
        case OPT_SERIES: {
            const char *colon = strchr(optarg, ':');
            char buf[32];
            size_t n = colon ? (size_t)(colon - optarg) : 0;

            if (!colon || n == 0 || n >= sizeof(buf))
                die_usage("--series: expected MIN:MAX, got '%s'", optarg);
            memcpy(buf, optarg, n);
            buf[n] = '\0';
            cfg->series_min = (unsigned)parse_u64("--series", buf, 1, 1000000);
            cfg->series_max = (unsigned)parse_u64("--series", colon + 1, 1, 1000000);
            if (cfg->series_min > cfg->series_max)
                die_usage("--series: MIN %u is larger than MAX %u", cfg->series_min,
                          cfg->series_max);
            break;
        }
        case OPT_TLS: cfg->tls = true; break;
        case OPT_CACERT: cfg->tls_s.ca_file = tls_file_arg("--cacert", optarg); break;
        case OPT_CERT: cfg->tls_s.cert_file = tls_file_arg("--cert", optarg); break;
        case OPT_KEY: cfg->tls_s.key_file = tls_file_arg("--key", optarg); break;
        case OPT_TLS_SKIP_VERIFY: cfg->tls_s.skip_verify = true; break;
        case OPT_SNI:
            if (!*optarg)
                die_usage("--sni: empty name");
            cfg->tls_s.sni = optarg;
            break;
        case OPT_STREAM: cfg->stream = true; break;
        case OPT_BIG_THREAD:
            cfg->big_size = (size_t)parse_u64("--big-thread", optarg, 1, MAX_DATA_SIZE);
            break;
        case OPT_BIG_RATE:
            cfg->big_rate = parse_double("--big-rate", optarg, 0.001) * 1e6;
            break;
        case OPT_CACHE_BYTES:
            cfg->cache_bytes = (size_t)parse_u64("--client-cache-bytes", optarg, 0, SIZE_MAX);
            /* the library's own bound, said here rather than at open */
            if (cfg->cache_bytes && cfg->cache_bytes < MIN_CACHE_BYTES)
                die_usage("--client-cache-bytes: %zu is too small: 0 turns the cache off, "
                          "else at least %u", cfg->cache_bytes, MIN_CACHE_BYTES);
            break;
        case OPT_CACHE_TTL:
            cfg->cache_ttl_ms = (int)parse_u64("--client-cache-ttl-ms", optarg, 1, 86400000);
            break;
        case OPT_WRITER_RATE:
            cfg->writer_rate = parse_u64("--writer-rate", optarg, 0, 1000000);
            break;
        case OPT_BULK_POOL: cfg->bulk_pool = (int)parse_u64("--bulk-pool", optarg, 0, 64); break;
        case OPT_BULK_THRESHOLD:
            cfg->bulk_threshold = (size_t)parse_u64("--bulk-threshold", optarg, 1024, UINT64_MAX / 2);
            break;
        case 'h': usage(stdout); exit(0);
        case ':': die_usage("option '%s' needs an argument", argv[optind - 1]);
        default:
            if (optopt && optopt < 256)
                die_usage("unknown option '-%c'", optopt);
            die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die_usage("unexpected argument '%s'", argv[optind]);
    if (port_override)
        cfg->port = (int)parse_u64("--port", port_override, 1, 65535);
    if (cfg->key_min > cfg->key_max)
        die_usage("--key-minimum (%" PRIu64 ") is larger than --key-maximum (%" PRIu64 ")",
                  cfg->key_min, cfg->key_max);
    if (cfg->user && !cfg->password)
        die_usage("--user needs --auth PASSWORD");
    if (cfg->client == CLIENT_CLASSIC &&
        (cfg->batch_delay_set || cfg->io_threads_set || cfg->no_fast_path || cfg->cork ||
         cfg->spare_conns >= 0))
        die_usage("--batch-delay-us, --io-threads, --no-fast-path, --cork and --spare-conns "
                  "apply to --client rcpipe only");
    if (cfg->client == CLIENT_CLASSIC && cfg->read_policy > RCP_READ_MASTER_ONLY)
        die_usage("--read-policy %s applies to --client rcpipe only (classic reads masters)",
                  read_policy_name(cfg->read_policy));
    if (cfg->client == CLIENT_CLASSIC && cfg->count_allocs)
        die_usage("--count-allocs applies to --client rcpipe only");
    if (cfg->client == CLIENT_CLASSIC && cfg->stream)
        die_usage("--stream applies to --client rcpipe only (hiredis 0.14 cannot stream a "
                  "reply)");
    if (cfg->big_size && (cfg->async_depth || cfg->pipeline > 1))
        die_usage("--big-thread works in sync mode only (no --async-depth, no --pipeline)");
    if (cfg->big_size && cfg->threads < 2)
        die_usage("--big-thread needs 2 threads or more (thread 0 moves the big values)");
    if (cfg->big_rate > 0 && !cfg->big_size)
        die_usage("--big-rate needs --big-thread SIZE (it holds thread 0 to a byte rate)");
#ifndef RCP_BENCH_LIBEVENT
    if (cfg->client == CLIENT_CLASSIC && cfg->async_depth)
        die_usage("--client classic --async-depth needs libevent: this rcp-bench was built "
                  "without it (install libevent-dev and reconfigure)");
    if (cfg->event_loop == LOOP_LIBEVENT)
        die_usage("--event-loop libevent: this rcp-bench was built without libevent");
#endif
#ifndef RCP_BENCH_LIBUV
    if (cfg->event_loop == LOOP_LIBUV)
        die_usage("--event-loop libuv: this rcp-bench was built without libuv");
#endif
    if (cfg->event_loop && cfg->client != CLIENT_RCPIPE)
        die_usage("--event-loop applies to --client rcpipe (classic async always runs on "
                  "libevent)");
    if ((cfg->event_loop || cfg->refill_callback) && !cfg->async_depth)
        die_usage("--event-loop and --refill apply to async mode (--async-depth N)");
    if (cfg->refill_callback && cfg->client != CLIENT_RCPIPE)
        die_usage("--refill applies to --client rcpipe (classic async always refills "
                  "from its callbacks)");
    if (cfg->event_loop && (cfg->io_threads_set || cfg->no_fast_path))
        die_usage("--io-threads and --no-fast-path do not apply with --event-loop (no I/O "
                  "thread of rcpipe's own)");
    if (cfg->async_depth &&
        (cfg->event_loop || cfg->refill_callback || cfg->client == CLIENT_CLASSIC)) {
        if (cfg->rate)
            die_usage("--rate-limiting: not with callback refill (classic async, "
                      "--event-loop, --refill callback)");
        /* With one shared handle (--refill callback) every thread's window
         * lands on the same connections: the sum must fit, or a first
         * window's send would wait for room while holding the lock the
         * I/O thread's callbacks need. */
        unsigned long long total = (unsigned long long)cfg->async_depth *
                                   (cfg->event_loop ? 1u : cfg->threads);

        if (cfg->client == CLIENT_RCPIPE && total > CALLBACK_MAX_DEPTH)
            die_usage("--async-depth: at most %u requests in flight per connection when "
                      "callbacks refill (the library's max_inflight; a callback must not "
                      "block for room): %u%s", CALLBACK_MAX_DEPTH, cfg->async_depth,
                      cfg->event_loop ? "" : " x threads is more");
    }
    check_tls_options(cfg);
    /* The cache serves only sync rcp_cluster_command* calls: anywhere else
     * it would be opened and never asked, and the run would say nothing. */
    if (cfg->cache_ttl_ms && !cfg->cache_bytes)
        die_usage("--client-cache-ttl-ms needs --client-cache-bytes N (the cache is off)");
    if (cfg->cache_bytes && cfg->client != CLIENT_RCPIPE)
        die_usage("--client-cache-bytes applies to --client rcpipe only (the classic "
                  "baselines have no cache)");
    if (cfg->cache_bytes && (cfg->async_depth || cfg->pipeline > 1))
        die_usage("--client-cache-bytes works in sync mode only: the cache serves "
                  "rcp_cluster_command* calls, and the sends of --async-depth, --pipeline, "
                  "--refill and --event-loop bypass it");
    if (cfg->writer_rate && cfg->count_allocs)
        die_usage("--count-allocs: not with --writer-rate (the writer's handle allocates "
                  "through the same hooks)");
    if (cfg->cache_bytes && cfg->stream)
        die_usage("--client-cache-bytes: not with --stream (a GET into a sink bypasses the "
                  "cache)");
    if (cfg->series_max && (!cfg->rate || cfg->async_depth || cfg->pipeline > 1))
        die_usage("--series needs --rate-limiting and sync mode (no --async-depth, "
                  "no --pipeline)");
    if (cfg->async_depth && cfg->pipeline > 1)
        die_usage("--pipeline and --async-depth are two different modes: give one");
    if (cfg->rate && cfg->pipeline > 1)
        die_usage("--rate-limiting works in sync and async mode, not with --pipeline");
    if (!isnan(cfg->key_median) &&
        (cfg->key_median < (double)cfg->key_min || cfg->key_median > (double)cfg->key_max))
        die_usage("--key-median %g is outside [%" PRIu64 ", %" PRIu64 "]", cfg->key_median,
                  cfg->key_min, cfg->key_max);
    if (isnan(cfg->key_median)) /* memtier: the middle of the range */
        cfg->key_median = ((double)cfg->key_min + (double)cfg->key_max) / 2.0;
    if (isnan(cfg->key_stddev)) /* memtier: range / 6 */
        cfg->key_stddev = ((double)cfg->key_max - (double)cfg->key_min) / 6.0;
    if (cfg->distinct_seed)
        cfg->run_seed = rng_seed((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ now_ns());
    if (!cfg->progress)
        cfg->progress = isatty(STDERR_FILENO);
}

/* ---------------------------------------------------------- side channels */

/* A blocking connection to host:port (hiredis, or TLS with --tls: bconn.h),
 * authenticated. NULL on failure with a message in err. */
static bconn *side_connect_to(const config *cfg, const char *host, int port, char *err,
                              size_t errlen)
{
    return bconn_connect(host, port, cfg->user, cfg->password, CLASSIC_IO_TIMEOUT_S, err, errlen);
}

/* The same to the -s server. */
static bconn *side_connect(const config *cfg, char *err, size_t errlen)
{
    return side_connect_to(cfg, cfg->host, cfg->port, err, errlen);
}

/* Value of "name:value" in an INFO text, NULL if absent. Matches the whole
 * field name (used_cpu_sys is not used_cpu_sys_children). */
static const char *info_field(const char *text, const char *name)
{
    size_t n = strlen(name);
    const char *line = text;

    while (line && *line) {
        if (strncmp(line, name, n) == 0 && line[n] == ':')
            return line + n + 1;
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return NULL;
}

/* utime + stime of a local process in seconds (fields 14 and 15 of
 * /proc/PID/stat, counted after the ")" that ends the command name). */
static bool proc_cpu_read(long pid, double *out)
{
    char path[64], buf[1024];
    FILE *f;
    size_t n;
    const char *p;
    unsigned long long ut, st;
    int field;

    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    f = fopen(path, "r");
    if (!f)
        return false;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (!p)
        return false;
    for (field = 2; field < 14 && p; field++) /* p: the space before field 3, ..., 14 */
        p = strchr(p + 1, ' ');
    if (!p || sscanf(p, " %llu %llu", &ut, &st) != 2)
        return false;
    *out = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    return true;
}

static bool host_is_local(const char *host)
{
    return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0;
}

static bool server_info_read_at(const config *cfg, const char *host, int port, server_info *out,
                                char *err, size_t errlen)
{
    bconn *rc = side_connect_to(cfg, host, port, err, errlen);
    redisReply *r;
    const char *u, *s, *c, *ce;
    const char *argv[1] = {"INFO"};

    if (!rc)
        return false;
    r = bconn_command_argv(rc, 1, argv, NULL);
    if (!r || r->type != REDIS_REPLY_STRING) {
        snprintf(err, errlen, "INFO on %s:%d failed: %s", host, port,
                 r ? (r->str ? r->str : "unexpected reply type") : bconn_errstr(rc));
        if (r)
            freeReplyObject(r);
        bconn_free(rc);
        return false;
    }
    u = info_field(r->str, "used_cpu_user");
    s = info_field(r->str, "used_cpu_sys");
    c = info_field(r->str, "total_commands_processed");
    if (!u || !s || !c) {
        snprintf(err, errlen, "INFO on %s:%d lacks used_cpu_user, used_cpu_sys or "
                 "total_commands_processed", host, port);
        freeReplyObject(r);
        bconn_free(rc);
        return false;
    }
    out->cpu_user = strtod(u, NULL);
    out->cpu_sys = strtod(s, NULL);
    out->commands = strtoull(c, NULL, 10);
    ce = info_field(r->str, "cluster_enabled");
    out->cluster_enabled = ce && *ce == '1';
    ce = info_field(r->str, "process_id");
    out->proc_ok = ce && host_is_local(host) && proc_cpu_read(strtol(ce, NULL, 10),
                                                               &out->proc_cpu);
    freeReplyObject(r);
    bconn_free(rc);
    return true;
}

static bool server_info_read(const config *cfg, server_info *out, char *err, size_t errlen)
{
    return server_info_read_at(cfg, cfg->host, cfg->port, out, err, errlen);
}

/* INFO from every master and replica of the map as first read (the
 * topology is assumed stable during a run). false if a master failed; a
 * failed replica only clears replicas_ok (and is said on stderr). */
static bool cluster_info_read(const config *cfg, slotmap *m, cluster_info *out, char *err,
                              size_t errlen)
{
    unsigned n = atomic_load(&m->nnodes), i;

    memset(out, 0, sizeof(*out));
    out->replicas_ok = true;
    out->masters.proc_ok = true;
    for (i = 0; i < n; i++) {
        const sm_node *nd = &m->nodes[i];
        bool master = atomic_load(&nd->master);
        server_info si;
        server_info *sum = master ? &out->masters : &out->replicas;

        if (!master && !atomic_load(&nd->replica))
            continue;
        if (!server_info_read_at(cfg, nd->host, nd->port, &si, err, errlen)) {
            if (master)
                return false;
            fprintf(stderr, PROG ": replica: %s\n", err);
            out->replicas_ok = false;
            continue;
        }
        sum->cpu_user += si.cpu_user;
        sum->cpu_sys += si.cpu_sys;
        sum->commands += si.commands;
        sum->proc_cpu += si.proc_cpu;
        if (master && !si.proc_ok)
            out->masters.proc_ok = false;
    }
    return true;
}

static void count_roles(slotmap *m, unsigned *masters, unsigned *replicas)
{
    unsigned n = atomic_load(&m->nnodes), i;

    *masters = *replicas = 0;
    for (i = 0; i < n; i++) {
        if (atomic_load(&m->nodes[i].master))
            (*masters)++;
        else if (atomic_load(&m->nodes[i].replica))
            (*replicas)++;
    }
}

/* Commands per pipelined preload write: PRELOAD_CHUNK, fewer for large
 * values (hiredis holds the whole write in memory). */
static unsigned preload_chunk(size_t size)
{
    size_t n = PRELOAD_BYTES / (size ? size : 1);

    return n < 1 ? 1 : n > PRELOAD_CHUNK ? PRELOAD_CHUNK : (unsigned)n;
}

/* SET every key PREFIX + [kmin, kmax] to value (size bytes) on a pipelined
 * connection, preload_chunk(size) commands per write. */
static void preload(const config *cfg, const char *prefix, uint64_t kmin, uint64_t kmax,
                    const char *value, size_t size)
{
    char err[512];
    bconn *rc = side_connect(cfg, err, sizeof(err));
    size_t plen = strlen(prefix);
    char *key = malloc(plen + 21);
    uint64_t k = kmin, total = kmax - kmin + 1;
    uint64_t t0 = now_ns();
    unsigned chunk = preload_chunk(size);
    bool last = false;

    if (!rc)
        die_run("preload: %s", err);
    if (!key)
        die_run("preload: out of memory");
    memcpy(key, prefix, plen);
    fprintf(stderr, PROG ": preloading %" PRIu64 " keys of %zu bytes...\n", total, size);
    while (!last) {
        unsigned n = 0, i;

        for (; n < chunk && !last; n++, k++) {
            const char *argv[3] = {"SET", key, value};
            size_t argvlen[3] = {3, 0, size};

            argvlen[1] = plen + u64_to_dec(k, key + plen);
            if (bconn_append_argv(rc, 3, argv, argvlen) != REDIS_OK)
                die_run("preload: out of memory");
            if (k == kmax)
                last = true;
        }
        for (i = 0; i < n; i++) {
            void *vr = NULL;
            redisReply *r;

            if (bconn_get_reply(rc, &vr) != REDIS_OK)
                die_run("preload: connection to %s:%d failed: %s", cfg->host, cfg->port,
                        bconn_errstr(rc));
            r = vr;
            if (r->type == REDIS_REPLY_ERROR)
                die_run("preload: SET failed: %s", r->str);
            freeReplyObject(r);
        }
    }
    fprintf(stderr, PROG ": preloaded in %.2f s\n", (double)(now_ns() - t0) / 1e9);
    free(key);
    bconn_free(rc);
}

/* Cluster mode: each SET goes to its slot's master, pipelined per node,
 * preload_chunk(size) commands per round (spread over the nodes). */
static void preload_cluster(const config *cfg, slotmap *m, const char *prefix, uint64_t kmin,
                            uint64_t kmax, const char *value, size_t size)
{
    char err[512];
    bconn *rcs[SLOTMAP_MAX_NODES] = {NULL};
    unsigned pending[SLOTMAP_MAX_NODES];
    size_t plen = strlen(prefix);
    char *key = malloc(plen + 21);
    uint64_t k = kmin, total = kmax - kmin + 1;
    uint64_t t0 = now_ns();
    unsigned chunk = preload_chunk(size);
    bool last = false;
    unsigned i, nodes_used = 0;

    if (!key)
        die_run("preload: out of memory");
    memcpy(key, prefix, plen);
    fprintf(stderr, PROG ": preloading %" PRIu64 " keys of %zu bytes over the cluster...\n",
            total, size);
    while (!last) {
        unsigned n;

        memset(pending, 0, sizeof(pending));
        for (n = 0; n < chunk && !last; n++, k++) {
            const char *argv[3] = {"SET", key, value};
            size_t argvlen[3] = {3, 0, size};
            int node;

            argvlen[1] = plen + u64_to_dec(k, key + plen);
            node = slotmap_node_of(m, rcp_keyslot(key, argvlen[1]));
            if (node < 0)
                die_run("preload: slot %u is not served by any node",
                        rcp_keyslot(key, argvlen[1]));
            if (!rcs[node]) {
                rcs[node] = side_connect_to(cfg, m->nodes[node].host, m->nodes[node].port, err,
                                            sizeof(err));
                if (!rcs[node])
                    die_run("preload: %s", err);
                nodes_used++;
            }
            if (bconn_append_argv(rcs[node], 3, argv, argvlen) != REDIS_OK)
                die_run("preload: out of memory");
            pending[node]++;
            if (k == kmax)
                last = true;
        }
        for (i = 0; i < SLOTMAP_MAX_NODES; i++) {
            for (; pending[i]; pending[i]--) {
                void *vr = NULL;
                redisReply *r;

                if (bconn_get_reply(rcs[i], &vr) != REDIS_OK)
                    die_run("preload: connection to %s:%d failed: %s", m->nodes[i].host,
                            m->nodes[i].port, bconn_errstr(rcs[i]));
                r = vr;
                if (r->type == REDIS_REPLY_ERROR)
                    die_run("preload: SET on %s:%d failed: %s (is the cluster stable?)",
                            m->nodes[i].host, m->nodes[i].port, r->str);
                freeReplyObject(r);
            }
        }
    }
    fprintf(stderr, PROG ": preloaded in %.2f s (%u masters)\n",
            (double)(now_ns() - t0) / 1e9, nodes_used);
    free(key);
    for (i = 0; i < SLOTMAP_MAX_NODES; i++)
        if (rcs[i])
            bconn_free(rcs[i]);
}

/* --------------------------------------------------------------- workers */

static void note_error(worker *w, const char *fmt, ...) BENCH_PRINTF(2, 3);
static void note_error(worker *w, const char *fmt, ...)
{
    va_list ap;

    w->errors++;
    if (w->first_error[0])
        return;
    va_start(ap, fmt);
    vsnprintf(w->first_error, sizeof(w->first_error), fmt, ap);
    va_end(ap);
}

/* RESP bytes of a SET/GET reply on the wire: "+OK\r\n" and "-text\r\n" are
 * 1 + len + 2, a nil "$-1\r\n" 5, a bulk string "$len\r\n" + data + "\r\n". */
static size_t resp_reply_bytes(int type, size_t len)
{
    char tmp[20];

    if (type == RCP_REPLY_STRING)
        return 1 + u64_to_dec(len, tmp) + 2 + len + 2;
    if (type == RCP_REPLY_NIL)
        return 5;
    return 1 + len + 2;
}

/* RESP bytes of a request: "*argc\r\n", then "$len\r\n" + arg + "\r\n" each. */
static size_t resp_request_bytes(int argc, const size_t *argvlen)
{
    char tmp[20];
    size_t n = 1 + u64_to_dec((uint64_t)argc, tmp) + 2;
    int i;

    for (i = 0; i < argc; i++)
        n += 1 + u64_to_dec(argvlen[i], tmp) + 2 + argvlen[i] + 2;
    return n;
}

/* Judges one reply (rcpipe's and hiredis's types have the same numbers):
 * SET wants a status, GET a string (hit) or nil (miss). errname, if not
 * NULL, names the client-side error code. Sets *bytes to the reply's RESP
 * size and *vlen to a GET hit's value length (else 0); on OUT_ERR writes
 * why to err. */
static int judge_reply(bool is_set, int type, const char *str, size_t len, const char *errname,
                       char *err, size_t errlen, size_t *bytes, size_t *vlen)
{
    const char *cmd = is_set ? "SET" : "GET";

    *bytes = resp_reply_bytes(type, len);
    *vlen = !is_set && type == RCP_REPLY_STRING ? len : 0;
    if (type == RCP_REPLY_ERROR) {
        snprintf(err, errlen, "%s: error reply%s%s%s: %.*s", cmd, errname ? " (" : "",
                 errname ? errname : "", errname ? ")" : "", (int)(len > 200 ? 200 : len),
                 str ? str : "");
        return OUT_ERR;
    }
    if (is_set && type == RCP_REPLY_STATUS)
        return OUT_OK;
    if (!is_set && type == RCP_REPLY_STRING)
        return OUT_HIT;
    if (!is_set && type == RCP_REPLY_NIL)
        return OUT_MISS;
    snprintf(err, errlen, "%s: unexpected reply type %d", cmd, type);
    return OUT_ERR;
}

static int judge_rcpipe(bool is_set, const rcp_reply *r, char *err, size_t errlen, size_t *bytes,
                        size_t *vlen)
{
    if (!r) { /* the API promises never NULL */
        snprintf(err, errlen, "%s: NULL reply", is_set ? "SET" : "GET");
        *bytes = 0;
        *vlen = 0;
        return OUT_ERR;
    }
    if (rcp_reply_is_error(r))
        return judge_reply(is_set, RCP_REPLY_ERROR, r->str, r->len, rcp_strerror(r->err), err,
                           errlen, bytes, vlen);
    return judge_reply(is_set, r->type, r->str, r->len, NULL, err, errlen, bytes, vlen);
}

/* --stream: a GET's value goes to this sink, which counts and drops it
 * (the bench keeps nothing of a value; a plain GET's reply is freed as
 * soon as it is judged). */
static int sink_count(void *ud, const char *data, size_t len, uint64_t offset, uint64_t total)
{
    (void)data;
    (void)offset;
    (void)total;
    *(uint64_t *)ud += len;
    return 0;
}

static void sink_init(rcp_sink *s, uint64_t *counter)
{
    memset(s, 0, sizeof(*s));
    s->kind = RCP_SINK_CALLBACK;
    s->fn = sink_count;
    s->ud = counter;
    s->fd = -1;
    *counter = 0;
}

/* A streamed GET resolves with its value's length (an integer reply) once
 * the bytes went to the sink: a hit when the sink got exactly that many.
 * Nil and errors arrive as for a plain GET; its RESP size is the bulk
 * string's, as if it had been assembled. */
static int judge_stream(const rcp_reply *r, uint64_t sunk, char *err, size_t errlen,
                        size_t *bytes, size_t *vlen)
{
    if (!r || rcp_reply_is_error(r) || r->type != RCP_REPLY_INTEGER)
        return judge_rcpipe(false, r, err, errlen, bytes, vlen);
    *vlen = r->integer > 0 ? (size_t)r->integer : 0;
    *bytes = resp_reply_bytes(RCP_REPLY_STRING, *vlen);
    if (r->integer < 0 || (uint64_t)r->integer != sunk) {
        snprintf(err, errlen, "GET (streamed): the sink got %" PRIu64 " bytes of a %lld-byte "
                 "value", sunk, r->integer);
        return OUT_ERR;
    }
    return OUT_HIT;
}

/* The bytes of every value the bench sends: "0123...xyz" repeated, byte i
 * of a value being VALUE_PATTERN[i % 36]. */
#define VALUE_PATTERN "0123456789abcdefghijklmnopqrstuvwxyz"
#define PATTERN_LEN 36u
/* --stream SETs: the pattern from every phase, so that any window of up
 * to SOURCE_CHUNK bytes of a value is one memcpy (written once, before
 * the threads start). */
#define SOURCE_CHUNK 65536u
static char source_tab[SOURCE_CHUNK + PATTERN_LEN];

static void fill_pattern(char *buf, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        buf[i] = VALUE_PATTERN[i % PATTERN_LEN];
}

/* --stream: a SET's value comes from this source, which generates the
 * bytes at offset..offset+cap of the pattern (the value a plain SET sends)
 * and counts them; no value is held anywhere in the bench. */
static ssize_t source_gen(void *ud, char *buf, size_t cap, uint64_t offset)
{
    size_t n = cap < SOURCE_CHUNK ? cap : SOURCE_CHUNK;

    memcpy(buf, source_tab + offset % PATTERN_LEN, n);
    *(uint64_t *)ud += n;
    return (ssize_t)n;
}

static void source_init(rcp_source *s, uint64_t *counter, size_t len)
{
    memset(s, 0, sizeof(*s));
    s->kind = RCP_SOURCE_CALLBACK;
    s->len = len;
    s->fn = source_gen;
    s->ud = counter;
    s->fd = -1;
    *counter = 0;
}

/* A streamed SET wants its ordinary status reply, and the source must
 * have given exactly the value's length (the library pulls no byte more
 * than it announced, and none less for a stored value). */
static int judge_source(const rcp_reply *r, uint64_t pulled, size_t vsize, char *err,
                        size_t errlen, size_t *bytes, size_t *vlen)
{
    int out = judge_rcpipe(true, r, err, errlen, bytes, vlen);

    if (out == OUT_OK && pulled != vsize) {
        snprintf(err, errlen, "SET (streamed): OK, but the source gave %" PRIu64 " bytes of "
                 "a %zu-byte value", pulled, vsize);
        return OUT_ERR;
    }
    return out;
}

static int request_rcpipe(worker *w, bool is_set, int argc, const char **argv,
                          const size_t *argvlen, size_t *bytes, size_t *vlen)
{
    bench *b = w->b;
    bool stream = b->cfg->stream && !is_set;
    uint64_t sunk = 0;
    rcp_sink sink;
    rcp_reply *r;
    char err[256];
    int out;

    if (stream) {
        sink_init(&sink, &sunk);
        r = b->cluster ? rcp_cluster_command_argv_sink(b->cluster, argc, argv, argvlen, &sink)
                       : rcp_conn_command_argv_sink(b->conn, argc, argv, argvlen, &sink);
        out = judge_stream(r, sunk, err, sizeof(err), bytes, vlen);
    } else if (b->cfg->stream) { /* a SET: argv[argc - 1] is the value, from the source */
        uint64_t pulled = 0;
        rcp_source src;

        source_init(&src, &pulled, argvlen[argc - 1]);
        r = b->cluster
                ? rcp_cluster_command_argv_source(b->cluster, argc - 1, argv, argvlen, &src)
                : rcp_conn_command_argv_source(b->conn, argc - 1, argv, argvlen, &src);
        out = judge_source(r, pulled, argvlen[argc - 1], err, sizeof(err), bytes, vlen);
    } else {
        r = b->cluster ? rcp_cluster_command_argv(b->cluster, argc, argv, argvlen)
                       : rcp_conn_command_argv(b->conn, argc, argv, argvlen);
        out = judge_rcpipe(is_set, r, err, sizeof(err), bytes, vlen);
    }

    if (out == OUT_ERR)
        note_error(w, "%s", err);
    rcp_reply_free(r);
    return out;
}

/* Judges and frees a classic reply. */
static int classic_judge(worker *w, bool is_set, redisReply *r, size_t *bytes, size_t *vlen)
{
    char err[256];
    int out = judge_reply(is_set, r->type, r->str, r->len, NULL, err, sizeof(err), bytes, vlen);

    if (out == OUT_ERR)
        note_error(w, "%s", err);
    freeReplyObject(r);
    return out;
}

static int request_classic(worker *w, bool is_set, int argc, const char **argv,
                           const size_t *argvlen, size_t *bytes, size_t *vlen)
{
    redisReply *r = bconn_command_argv(w->rc, argc, argv, argvlen);

    *bytes = 0;
    *vlen = 0;
    if (!r) {
        note_error(w, "%s: connection error: %s", argv[0], bconn_errstr(w->rc));
        w->broken = true; /* a connection is unusable after an I/O error */
        return OUT_ERR;
    }
    return classic_judge(w, is_set, r, bytes, vlen);
}

/* Redirects one classic cluster request may follow (as rcpipe's default). */
#define CLASSIC_MAX_REDIRECTS 5

/* The thread's connection to a node of the bench's slot table, opened on
 * first use; NULL (error noted, thread broken) if that failed. */
static bconn *classic_node_conn(worker *w, int node)
{
    slotmap *m = w->b->map;
    char err[256];

    if (w->conns[node])
        return w->conns[node];
    w->conns[node] = side_connect_to(w->b->cfg, m->nodes[node].host, m->nodes[node].port, err,
                                     sizeof(err));
    if (!w->conns[node]) {
        note_error(w, "%s", err);
        w->broken = true;
    }
    return w->conns[node];
}

/* Cluster mode: the key's slot names the master (bench slot table); that
 * thread's connection to it is opened on first use. MOVED re-reads CLUSTER
 * SLOTS and retries; ASK retries once on the named node after ASKING. */
static int request_classic_cluster(worker *w, bool is_set, int argc, const char **argv,
                                   const size_t *argvlen, size_t *bytes, size_t *vlen)
{
    slotmap *m = w->b->map;
    unsigned slot = rcp_keyslot(argv[1], argvlen[1]);
    int node = slotmap_node_of(m, slot);
    bool asking = false;
    unsigned redirects;

    *bytes = 0;
    *vlen = 0;
    for (redirects = 0;; redirects++) {
        static const char *asking_argv[1] = {"ASKING"};
        bconn *rc;
        redisReply *r;
        void *vr = NULL;
        bool ask;
        unsigned rslot;
        char host[256];
        int port;

        if (node < 0) {
            note_error(w, "%s: slot %u is not served by any node", argv[0], slot);
            return OUT_ERR;
        }
        rc = classic_node_conn(w, node);
        if (!rc)
            return OUT_ERR;
        if (asking && bconn_append_argv(rc, 1, asking_argv, NULL) != REDIS_OK) {
            note_error(w, "out of memory");
            return OUT_ERR;
        }
        if (bconn_append_argv(rc, argc, argv, argvlen) != REDIS_OK) {
            note_error(w, "out of memory");
            return OUT_ERR;
        }
        if (asking) {
            if (bconn_get_reply(rc, &vr) != REDIS_OK)
                goto io_error;
            freeReplyObject(vr); /* +OK */
            vr = NULL;
        }
        if (bconn_get_reply(rc, &vr) != REDIS_OK)
            goto io_error;
        r = vr;
        if (r->type != REDIS_REPLY_ERROR || redirects >= CLASSIC_MAX_REDIRECTS ||
            !slotmap_parse_redirect(m, r->str, r->len, &ask, &rslot, host, sizeof(host), &port))
            return classic_judge(w, is_set, r, bytes, vlen);
        freeReplyObject(r);
        if (ask) {
            w->ask++;
            node = slotmap_node_index(m, host, port);
            asking = true;
        } else {
            char err[256];

            w->moved++;
            node = slotmap_moved(m, rslot, host, port, err, sizeof(err));
            if (node < 0) {
                note_error(w, "%s: after MOVED: %s", argv[0], err);
                return OUT_ERR;
            }
            asking = false;
        }
    }
io_error:
    note_error(w, "%s: connection error on %s:%d: %s", argv[0], m->nodes[node].host,
               m->nodes[node].port, bconn_errstr(w->conns[node]));
    w->broken = true; /* a connection is unusable after an I/O error */
    return OUT_ERR;
}

/* ------------------------------------------------------- keys and timing */

/* The next key number for a SET or a GET, by that type's --key-pattern. */
static uint64_t next_key(worker *w, bool is_set)
{
    const config *cfg = w->b->cfg;
    uint64_t range = cfg->key_max - cfg->key_min + 1; /* key_max < UINT64_MAX */

    switch (cfg->key_pattern[is_set ? 0 : 1]) {
    case 'S': { /* from this thread's offset, wrapping at the end of the range */
        uint64_t *s = &w->seq[is_set ? 0 : 1], d = range - w->seq_off, k;

        k = *s < d ? w->seq_off + *s : *s - d;
        *s = *s + 1 == range ? 0 : *s + 1;
        return cfg->key_min + k;
    }
    case 'G': { /* Box-Muller, rounded and clamped to the range */
        double u1 = ((double)(rng_next(&w->rng) >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
        double u2 = (double)(rng_next(&w->rng) >> 11) * 0x1p-53;
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        double v = floor(cfg->key_median + z * cfg->key_stddev + 0.5);

        if (!(v > (double)cfg->key_min))
            return cfg->key_min;
        if (v >= (double)cfg->key_max)
            return cfg->key_max;
        return (uint64_t)v;
    }
    default:
        return cfg->key_min + rng_next(&w->rng) % range;
    }
}

/* The next request: SET key value or GET key, by --ratio; the key is written
 * at key (room for the prefix and 20 digits). Returns argc. */
static int build_request(worker *w, bool *is_set, char *key, const char **argv,
                         size_t *argvlen)
{
    const config *cfg = w->b->cfg;
    uint64_t k;

    *is_set = rng_next(&w->rng) % (cfg->ratio_set + cfg->ratio_get) < cfg->ratio_set;
    /* The big thread keeps to its own few keys, preloaded */
    k = w->big ? rng_next(&w->rng) % BIG_KEYS : next_key(w, *is_set);
    memcpy(key, w->prefix, w->plen);
    argv[0] = *is_set ? "SET" : "GET";
    argvlen[0] = 3;
    argv[1] = key;
    argvlen[1] = w->plen + u64_to_dec(k, key + w->plen);
    argv[2] = w->value;
    argvlen[2] = w->vsize;
    return *is_set ? 3 : 2;
}

/* --rate-limiting: request k of thread i is due at start + (k + i/threads)/R,
 * so the threads' schedules interleave instead of firing together. */
static uint64_t due_ns(const worker *w, uint64_t k)
{
    const config *cfg = w->b->cfg;
    double at = ((double)k + (double)w->index / (double)cfg->threads) * 1e9 / (double)cfg->rate;

    return w->b->start_ns + (uint64_t)at;
}

/* Sleeps until t, checking the stop flag every SLEEP_SLICE_NS. false if the
 * run stopped first. */
static bool sleep_until(bench *b, uint64_t t)
{
    for (;;) {
        uint64_t now = now_ns();
        struct timespec ts;

        if (atomic_load_explicit(&b->stop, memory_order_relaxed))
            return false;
        if (now >= t)
            return true;
        ts = ns_to_timespec(t - now > SLEEP_SLICE_NS ? now + SLEEP_SLICE_NS : t);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
}

/* Adds the worker's histogram of second cur_sec to the run's series. */
static void series_flush(worker *w)
{
    bench *b = w->b;

    if (w->cur_h.count == 0)
        return;
    pthread_mutex_lock(&b->series_mu);
    if (w->cur_sec >= MAX_SERIES) {
        b->series_truncated = true;
    } else {
        if (w->cur_sec >= b->series_n) {
            size_t n = b->series_n * 2 > w->cur_sec + 1 ? b->series_n * 2 : w->cur_sec + 16;
            hist *grown;

            if (n > MAX_SERIES)
                n = MAX_SERIES;
            grown = realloc(b->series, n * sizeof(*grown));
            if (grown) {
                size_t i;

                for (i = b->series_n; i < n; i++)
                    hist_init(&grown[i]);
                b->series = grown;
                b->series_n = n;
            }
        }
        if (w->cur_sec < b->series_n)
            hist_merge(&b->series[w->cur_sec], &w->cur_h);
        else
            b->series_truncated = true; /* out of memory */
    }
    pthread_mutex_unlock(&b->series_mu);
    hist_init(&w->cur_h);
}

/* Records one finished request (on the worker's own thread). vlen: a GET
 * hit's value length (a SET that succeeded moved the thread's value). */
static void account(worker *w, bool is_set, int outcome, uint64_t lat_ns, uint64_t t_done,
                    size_t bytes, size_t vlen)
{
    uint64_t sec = t_done > w->b->start_ns ? (t_done - w->b->start_ns) / 1000000000u : 0;

    if (is_set) {
        hist_record(&w->set_h, lat_ns);
        w->set_ops++;
        w->set_bytes += bytes;
        if (outcome == OUT_OK)
            w->value_bytes += w->vsize;
    } else {
        hist_record(&w->get_h, lat_ns);
        w->get_ops++;
        w->get_bytes += bytes;
        w->hits += outcome == OUT_HIT;
        w->misses += outcome == OUT_MISS;
        w->value_bytes += vlen;
    }
    if (!w->big) { /* the series is the small requests' */
        if (sec > w->cur_sec) {
            series_flush(w);
            w->cur_sec = sec;
        }
        hist_record(&w->cur_h, lat_ns);
    }
    w->lat_sum += lat_ns;
    atomic_store_explicit(&w->lat_sum_ns, w->lat_sum, memory_order_relaxed);
    atomic_store_explicit(&w->done, w->set_ops + w->get_ops, memory_order_relaxed);
}

/* ------------------------------------------------------------ sync mode */

static void run_sync(worker *w)
{
    bench *b = w->b;
    const config *cfg = b->cfg;
    char *key = malloc(w->plen + 21);
    bool classic = cfg->client == CLIENT_CLASSIC;
    const char *argv[3];
    size_t argvlen[3];
    uint64_t k;

    if (!key) {
        note_error(w, "out of memory");
        return;
    }
    unsigned series_left = 0; /* --series: requests left in the current run */

    for (k = 0; !cfg->requests || k < cfg->requests; k++) {
        uint64_t due = 0, t0, t1;
        size_t rbytes = 0, vlen = 0;
        bool is_set;
        int argc, out;

        if (atomic_load_explicit(&b->stop, memory_order_relaxed))
            break;
        argc = build_request(w, &is_set, key, argv, argvlen);
        /* A run of a --series starts at the due time of its first request
         * (latency from there); the others follow at once (latency from
         * their own send), so the mean rate stays R per thread. */
        if (cfg->rate && !w->big && series_left == 0) { /* the big thread: closed loop */
            if (!sleep_until(b, due = due_ns(w, k)))
                break;
            series_left = cfg->series_max
                              ? cfg->series_min + (unsigned)(rng_next(&w->rng) %
                                                   (cfg->series_max - cfg->series_min + 1))
                              : 1;
        }
        if (series_left)
            series_left--;
        /* --big-rate: the big thread starts a request only once the value
         * bytes it moved so far fit the rate since the start (its
         * latency is still from its send). */
        if (w->big && cfg->big_rate > 0 &&
            !sleep_until(b, b->start_ns + (uint64_t)((double)w->value_bytes * 1e9 /
                                                     cfg->big_rate)))
            break;
        t0 = now_ns();
        if (classic && b->map)
            out = request_classic_cluster(w, is_set, argc, argv, argvlen, &rbytes, &vlen);
        else if (classic)
            out = request_classic(w, is_set, argc, argv, argvlen, &rbytes, &vlen);
        else
            out = request_rcpipe(w, is_set, argc, argv, argvlen, &rbytes, &vlen);
        t1 = now_ns();
        account(w, is_set, out, t1 - (due ? due : t0), t1,
                resp_request_bytes(argc, argvlen) + rbytes, vlen);
        if (w->broken)
            break;
    }
    free(key);
}

/* ------------------------------------------ async and pipeline (rcpipe) */

/* Judges an async rcpipe request's reply: a streamed GET's, a streamed
 * SET's (--stream, r->src) or a plain one's. */
static int judge_async(req *r, const rcp_reply *reply)
{
    if (r->streamed)
        return judge_stream(reply, r->sunk, r->err, sizeof(r->err), &r->reply_bytes,
                            &r->value_len);
    if (r->is_set && r->w->b->cfg->stream)
        return judge_source(reply, r->pulled, r->w->vsize, r->err, sizeof(r->err),
                            &r->reply_bytes, &r->value_len);
    return judge_rcpipe(r->is_set, reply, r->err, sizeof(r->err), &r->reply_bytes,
                        &r->value_len);
}

/* On an I/O thread: note the result, hand the slot back, wake the worker
 * only if it sleeps for want of a free slot. */
static void on_resolve(rcp_future *f, rcp_reply *reply)
{
    req *r = f->data;
    worker *w = r->w;
    req *head;

    r->t_done = now_ns();
    r->outcome = judge_async(r, reply);
    unsigned long n, want;

    head = atomic_load(&w->done_head);
    do
        r->next = head;
    while (!atomic_compare_exchange_weak(&w->done_head, &head, r));
    n = atomic_fetch_add(&w->pushed, 1) + 1;
    want = atomic_load(&w->wake_at);
    if (want && n >= want && atomic_exchange(&w->wake_at, 0))
        sem_post(&w->sem);
}

/* Accounts every completed request and frees its slot; returns how many. */
static unsigned reap(worker *w)
{
    req *r = atomic_exchange(&w->done_head, NULL);
    unsigned n = 0;

    while (r) {
        req *next = r->next;

        account(w, r->is_set, r->outcome, r->t_done > r->t_start ? r->t_done - r->t_start : 0,
                r->t_done, r->req_bytes + r->reply_bytes, r->value_len);
        if (r->outcome == OUT_ERR)
            note_error(w, "%s", r->err);
        w->free_list[w->nfree++] = (unsigned)(r - w->reqs);
        w->inflight--;
        n++;
        r = next;
    }
    w->reaped += n;
    return n;
}

/* Blocks until at least `want` requests have completed since the last reap
 * (1 <= want <= inflight). The callback posts only when its completion is
 * the one the sleeping worker waits for, so a worker that keeps finding
 * completions never makes a syscall, and one that sleeps is woken once per
 * `want` completions, not once per completion. */
static void wait_completion(worker *w, unsigned want)
{
    unsigned long target = w->reaped + (want ? want : 1);
    if (atomic_load(&w->pushed) >= target)
        return;
    atomic_store(&w->wake_at, target);
    if (atomic_load(&w->pushed) >= target && atomic_exchange(&w->wake_at, 0))
        return; /* no callback took the flag: nothing was posted */
    w->sleeps++;
    while (sem_wait(&w->sem) != 0 && errno == EINTR)
        ;
}

/* Takes a free slot, builds and sends the next request on it; t_start is
 * its latency base. false if the send was refused (accounted as an error). */
static bool send_next(worker *w, char *key, uint64_t t_start)
{
    bench *b = w->b;
    unsigned idx = w->free_list[--w->nfree];
    req *r = &w->reqs[idx];
    const char *argv[3];
    size_t argvlen[3];
    int argc = build_request(w, &r->is_set, key, argv, argvlen);
    int rc;

    r->req_bytes = resp_request_bytes(argc, argvlen);
    r->t_start = t_start ? t_start : now_ns();
    r->f.resolve = on_resolve;
    r->f.data = r;
    r->f.timeout_ms = 0;
    r->streamed = b->cfg->stream && !r->is_set;
    w->inflight++;
    if (r->streamed) {
        sink_init(&r->sink, &r->sunk);
        rc = b->cluster
                 ? rcp_cluster_send_argv_sink(b->cluster, &r->f, argc, argv, argvlen, &r->sink)
                 : rcp_conn_send_argv_sink(b->conn, &r->f, argc, argv, argvlen, &r->sink);
    } else if (b->cfg->stream) { /* a SET, its value from the source */
        source_init(&r->src, &r->pulled, argvlen[argc - 1]);
        rc = b->cluster ? rcp_cluster_send_argv_source(b->cluster, &r->f, argc - 1, argv,
                                                       argvlen, &r->src)
                        : rcp_conn_send_argv_source(b->conn, &r->f, argc - 1, argv, argvlen,
                                                    &r->src);
    } else {
        rc = b->cluster ? rcp_cluster_send_argv(b->cluster, &r->f, argc, argv, argvlen)
                        : rcp_conn_send_argv(b->conn, &r->f, argc, argv, argvlen);
    }
    if (rc != RCP_OK) {
        uint64_t t = now_ns();

        note_error(w, "%s: send refused: %s", argv[0], rcp_strerror(rc));
        w->inflight--;
        w->free_list[w->nfree++] = idx;
        account(w, r->is_set, OUT_ERR, t - r->t_start, t, r->req_bytes, 0);
        return false;
    }
    return true;
}

/* Async mode keeps async_depth requests in flight; pipeline mode sends
 * `pipeline` requests back to back and waits for all of them. */
static void run_async(worker *w)
{
    bench *b = w->b;
    const config *cfg = b->cfg;
    char *key = malloc(w->plen + 21);
    unsigned depth = cfg->async_depth ? cfg->async_depth : cfg->pipeline;
    uint64_t k = 0;

    if (!key) {
        note_error(w, "out of memory");
        return;
    }
    for (;;) {
        reap(w);
        if (atomic_load_explicit(&b->stop, memory_order_relaxed) ||
            (cfg->requests && k >= cfg->requests))
            break;
        if (cfg->async_depth) {
            uint64_t due = 0;

            if (w->nfree == 0) {
                /* Closed loop: refill when half the window is back (like
                 * redis-benchmark -P, which waits for a whole pipeline),
                 * so a sleeping worker costs one wake per depth/2
                 * requests; open loop (--rate-limiting): at once. */
                wait_completion(w, cfg->rate ? 1 : (depth + 1) / 2);
                continue;
            }
            if (cfg->rate && !sleep_until(b, due = due_ns(w, k)))
                break;
            send_next(w, key, due);
            k++;
        } else {
            uint64_t t_group = now_ns();
            unsigned i, n = depth;

            if (cfg->requests && cfg->requests - k < n)
                n = (unsigned)(cfg->requests - k);
            for (i = 0; i < n; i++)
                send_next(w, key, t_group);
            k += n;
            while (w->inflight) {
                wait_completion(w, w->inflight);
                reap(w);
            }
        }
    }
    while (w->inflight) {
        wait_completion(w, w->inflight);
        reap(w);
    }
    free(key);
}

/* ------------------------------------- callback refill (async, all clients) */

/* The library's counters of one handle: the connection's, or a cluster's
 * own plus the sum over its node connections. */
static bool handle_stats(rcp_conn *conn, rcp_cluster *cl, rcp_conn_stats *st,
                         rcp_cluster_stats *cs, size_t *nodes)
{
    memset(st, 0, sizeof(*st));
    memset(cs, 0, sizeof(*cs));
    *nodes = 0;
    if (conn)
        return rcp_conn_get_stats(conn, st) == RCP_OK;
    if (cl) {
        size_t cap = 64, n, i;
        rcp_cluster_node_info *ni;

        if (rcp_cluster_get_stats(cl, cs) != RCP_OK)
            return false;
        for (;;) {
            ni = malloc(cap * sizeof(*ni));
            if (!ni)
                return false;
            n = rcp_cluster_get_nodes(cl, ni, cap);
            if (n <= cap)
                break;
            free(ni);
            cap = n + 16;
        }
        for (i = 0; i < n; i++)
            rcp_conn_stats_add(st, &ni[i].conn);
        *nodes = n;
        free(ni);
        return true;
    }
    return false;
}

static void cl_stats_add(rcp_cluster_stats *a, const rcp_cluster_stats *b)
{
    a->requests += b->requests;
    a->moved += b->moved;
    a->ask += b->ask;
    a->retries_tryagain += b->retries_tryagain;
    a->retries_clusterdown += b->retries_clusterdown;
    a->retries_loading += b->retries_loading;
    a->retries_masterdown += b->retries_masterdown;
    a->retries_not_sent += b->retries_not_sent;
    a->retries_io += b->retries_io;
    a->retries_readonly += b->retries_readonly;
    a->refreshes_periodic += b->refreshes_periodic;
    a->refreshes_forced += b->refreshes_forced;
    a->refresh_failures += b->refresh_failures;
    a->map_version += b->map_version;
    a->nodes += b->nodes;
    a->cache_hits += b->cache_hits;
    a->cache_misses += b->cache_misses;
    a->cache_invalidations += b->cache_invalidations;
    a->cache_evictions += b->cache_evictions;
    a->cache_bytes += b->cache_bytes;
    a->cache_entries += b->cache_entries;
}

/* Whether a completion sends the next request on its slot: the warm-up
 * until WARMUP_REQUESTS are sent, the timed phase until the stop or -n. */
static bool cb_more(worker *w)
{
    const config *cfg = w->b->cfg;

    if (w->warmup)
        return w->sent < WARMUP_REQUESTS;
    return !atomic_load_explicit(&w->b->stop, memory_order_relaxed) &&
           (!cfg->requests || w->sent < cfg->requests);
}

/* The worker's own loop has nothing more to wait for: return from it. */
static void own_loop_break(worker *w)
{
#ifdef RCP_BENCH_LIBEVENT
    if (w->evbase)
        event_base_loopbreak(w->evbase);
#endif
#ifdef RCP_BENCH_LIBUV
    if (w->uvloop)
        uv_stop((uv_loop_t *)w->uvloop);
#endif
    (void)w;
}

static void on_resolve_cb(rcp_future *f, rcp_reply *reply);
#ifdef RCP_BENCH_LIBEVENT
static void classic_async_cb(redisAsyncContext *c, void *reply, void *privdata);
#endif

/* Builds the next request on slot r and sends it: rcpipe (the shared
 * handle or the worker's own) or classic async (the key's master's
 * context). false if it was refused (accounted as an error, or in the
 * warm-up a failed start). */
static bool cb_send(worker *w, req *r)
{
    bench *b = w->b;
    const char *argv[3];
    size_t argvlen[3];
    int argc = build_request(w, &r->is_set, r->key, argv, argvlen);
    char err[200];
    uint64_t t;

    r->req_bytes = resp_request_bytes(argc, argvlen);
    r->t_start = now_ns();
    w->sent++;
    if (b->cfg->client == CLIENT_CLASSIC) {
#ifdef RCP_BENCH_LIBEVENT
        int node = b->map ? slotmap_node_of(b->map, rcp_keyslot(r->key, argvlen[1])) : 0;
        redisAsyncContext *ac = node >= 0 ? w->actx[node] : NULL;

        if (ac && redisAsyncCommandArgv(ac, classic_async_cb, r, argc, argv, argvlen) ==
                      REDIS_OK)
            return true;
        snprintf(err, sizeof(err), "%s: %s", argv[0],
                 node < 0 ? "slot not served by any node"
                          : ac ? "redisAsyncCommandArgv failed" : "no connection to its master");
#else
        snprintf(err, sizeof(err), "classic async: built without libevent");
#endif
    } else {
        rcp_cluster *cl = w->own_cluster ? w->own_cluster : b->cluster;
        rcp_conn *cn = w->own_conn ? w->own_conn : b->conn;
        int rc;

        r->f.resolve = on_resolve_cb;
        r->f.data = r;
        r->f.timeout_ms = 0;
        r->streamed = b->cfg->stream && !r->is_set;
        if (r->streamed) {
            sink_init(&r->sink, &r->sunk);
            rc = cl ? rcp_cluster_send_argv_sink(cl, &r->f, argc, argv, argvlen, &r->sink)
                    : rcp_conn_send_argv_sink(cn, &r->f, argc, argv, argvlen, &r->sink);
        } else if (b->cfg->stream) { /* a SET, its value from the source */
            source_init(&r->src, &r->pulled, argvlen[argc - 1]);
            rc = cl ? rcp_cluster_send_argv_source(cl, &r->f, argc - 1, argv, argvlen, &r->src)
                    : rcp_conn_send_argv_source(cn, &r->f, argc - 1, argv, argvlen, &r->src);
        } else {
            rc = cl ? rcp_cluster_send_argv(cl, &r->f, argc, argv, argvlen)
                    : rcp_conn_send_argv(cn, &r->f, argc, argv, argvlen);
        }
        if (rc == RCP_OK)
            return true;
        snprintf(err, sizeof(err), "%s: send refused: %s", argv[0], rcp_strerror(rc));
    }
    if (w->warmup) {
        if (!w->first_error[0])
            snprintf(w->first_error, sizeof(w->first_error), "warm-up: %s", err);
        w->connect_failed = true;
        return false;
    }
    note_error(w, "%s", err);
    t = now_ns();
    account(w, r->is_set, OUT_ERR, t - r->t_start, t, r->req_bytes, 0);
    return false;
}

/* One completion: account it (not in the warm-up), then send the next
 * request on the same slot, or let the slot go; the last slot to go ends
 * the worker's wait (its own loop, or its semaphore). */
static void cb_complete(worker *w, req *r, int outcome, size_t reply_bytes, const char *err)
{
    if (w->cb_lock)
        pthread_mutex_lock(&w->cb_mu);
    if (w->warmup) {
        if (outcome == OUT_ERR && !w->first_error[0]) {
            snprintf(w->first_error, sizeof(w->first_error), "warm-up: %s", err);
            w->connect_failed = true;
        }
    } else {
        account(w, r->is_set, outcome, r->t_done > r->t_start ? r->t_done - r->t_start : 0,
                r->t_done, r->req_bytes + reply_bytes, r->value_len);
        if (outcome == OUT_ERR)
            note_error(w, "%s", err);
    }
    if (!(cb_more(w) && !w->connect_failed && cb_send(w, r)))
        w->inflight--;
    if (w->inflight == 0 && w->window_done) {
        if (w->evbase || w->uvloop)
            own_loop_break(w);
        else
            sem_post(&w->sem);
    }
    if (w->cb_lock)
        pthread_mutex_unlock(&w->cb_mu);
}

static void on_resolve_cb(rcp_future *f, rcp_reply *reply)
{
    req *r = f->data;

    r->t_done = now_ns();
    r->outcome = judge_async(r, reply);
    cb_complete(r->w, r, r->outcome, r->reply_bytes, r->err);
}

#ifdef RCP_BENCH_LIBEVENT
/* hiredis frees the reply after this returns. A MOVED or ASK is counted
 * as an error: the baseline assumes a stable cluster. */
static void classic_async_cb(redisAsyncContext *c, void *reply, void *privdata)
{
    req *r = privdata;
    redisReply *rep = reply;

    r->t_done = now_ns();
    if (!rep) {
        snprintf(r->err, sizeof(r->err), "%s: connection error: %s", r->is_set ? "SET" : "GET",
                 c->errstr[0] ? c->errstr : "context freed");
        r->outcome = OUT_ERR;
        r->reply_bytes = 0;
        r->value_len = 0;
    } else {
        r->outcome = judge_reply(r->is_set, rep->type, rep->str, rep->len, NULL, r->err,
                                 sizeof(r->err), &r->reply_bytes, &r->value_len);
    }
    cb_complete(r->w, r, r->outcome, r->reply_bytes, r->err);
}
#endif

/* Sends the first window: one request per slot (each slot then refills
 * itself from its completions). */
static void cb_first_window(worker *w)
{
    unsigned depth = w->b->cfg->async_depth, i;

    w->window_done = false;
    w->sent = 0;
    for (i = 0; i < depth; i++) {
        bool more;

        if (w->cb_lock)
            pthread_mutex_lock(&w->cb_mu);
        more = cb_more(w) && !w->connect_failed;
        if (more) {
            w->inflight++;
            if (!cb_send(w, &w->reqs[i]))
                w->inflight--;
        }
        if (i + 1 == depth || !more)
            w->window_done = true;
        if (w->cb_lock)
            pthread_mutex_unlock(&w->cb_mu);
        if (!more)
            break;
    }
}

/* Runs the worker's own loop until every slot has gone. */
static void own_loop_run(worker *w)
{
    if (w->inflight == 0)
        return;
#ifdef RCP_BENCH_LIBEVENT
    if (w->evbase)
        event_base_dispatch(w->evbase);
#endif
#ifdef RCP_BENCH_LIBUV
    if (w->uvloop)
        uv_run((uv_loop_t *)w->uvloop, UV_RUN_DEFAULT);
#endif
}

/* --refill callback on rcpipe's I/O threads: the worker sends the first
 * window, then sleeps until the callbacks have let every slot go. */
static void run_callback_threads(worker *w)
{
    bool wait;

    cb_first_window(w);
    pthread_mutex_lock(&w->cb_mu);
    wait = w->inflight > 0;
    pthread_mutex_unlock(&w->cb_mu);
    if (wait) {
        w->sleeps++;
        while (sem_wait(&w->sem) != 0 && errno == EINTR)
            ;
    }
}

#ifdef RCP_BENCH_LIBEVENT
static void classic_async_disconnected(const redisAsyncContext *c, int status)
{
    (void)status;
    /* hiredis frees the context once this returns */
    *(redisAsyncContext **)c->data = NULL;
}
#endif

/* The worker's own loop and handles (classic async contexts, or an
 * rcpipe handle on the loop), then the warm-up on them. false with
 * first_error set if anything failed. */
static bool own_setup(worker *w)
{
    bench *b = w->b;
    const config *cfg = b->cfg;
    char err[512];

    err[0] = '\0';
#ifdef RCP_BENCH_LIBEVENT
    if (cfg->client == CLIENT_CLASSIC || cfg->event_loop == LOOP_LIBEVENT) {
        w->evbase = event_base_new();
        if (!w->evbase) {
            snprintf(w->first_error, sizeof(w->first_error), "event_base_new failed");
            return false;
        }
    }
    if (cfg->client == CLIENT_CLASSIC) {
        unsigned n = b->map ? atomic_load(&b->map->nnodes) : 1, i;

        w->actx = calloc(SLOTMAP_MAX_NODES, sizeof(*w->actx));
        if (!w->actx) {
            snprintf(w->first_error, sizeof(w->first_error), "out of memory");
            return false;
        }
        for (i = 0; i < n; i++) {
            const char *host = b->map ? b->map->nodes[i].host : cfg->host;
            int port = b->map ? b->map->nodes[i].port : cfg->port;
            redisAsyncContext *ac;

            if (b->map && !atomic_load(&b->map->nodes[i].master))
                continue;
            ac = redisAsyncConnect(host, port);
            if (!ac || ac->err) {
                snprintf(w->first_error, sizeof(w->first_error), "redisAsyncConnect %s:%d: %s",
                         host, port, ac ? ac->errstr : "out of memory");
                if (ac)
                    redisAsyncFree(ac);
                return false;
            }
            ac->data = &w->actx[i];
            w->actx[i] = ac;
            if (redisLibeventAttach(ac, w->evbase) != REDIS_OK ||
                redisAsyncSetDisconnectCallback(ac, classic_async_disconnected) != REDIS_OK) {
                snprintf(w->first_error, sizeof(w->first_error), "redisLibeventAttach failed");
                return false;
            }
            if (cfg->password) {
                const char *av[3] = {"AUTH", cfg->user ? cfg->user : cfg->password,
                                     cfg->password};

                /* queued until connected; a refusal shows in the warm-up */
                redisAsyncCommandArgv(ac, NULL, NULL, cfg->user ? 3 : 2, av, NULL);
            }
        }
    } else if (cfg->event_loop == LOOP_LIBEVENT) {
        w->rloop = rcp_libevent_loop(w->evbase);
    }
#endif
#ifdef RCP_BENCH_LIBUV
    if (cfg->event_loop == LOOP_LIBUV) {
        uv_loop_t *uv = malloc(sizeof(*uv));

        if (!uv || uv_loop_init(uv) != 0) {
            free(uv);
            snprintf(w->first_error, sizeof(w->first_error), "uv_loop_init failed");
            return false;
        }
        w->uvloop = uv;
        w->rloop = rcp_libuv_loop(uv);
    }
#endif
    if (cfg->client == CLIENT_RCPIPE) {
        rcp_conn_options o = b->opts;
        int rc;

        if (!w->rloop) {
            snprintf(w->first_error, sizeof(w->first_error), "rcp_loop for --event-loop failed");
            return false;
        }
        o.loop = w->rloop;
        if (b->map) {
            rcp_cluster_options co = b->copts;

            co.node = &o;
            rc = rcp_cluster_open(&co, &w->own_cluster, err, sizeof(err));
            if (rc != RCP_OK) {
                snprintf(w->first_error, sizeof(w->first_error),
                         "--event-loop in cluster mode: rcp_cluster_open on the loop: %s%s%s",
                         rcp_strerror(rc), err[0] ? ": " : "", err);
                return false;
            }
        } else {
            rc = rcp_conn_open(&o, &w->own_conn, err, sizeof(err));
            if (rc != RCP_OK) {
                snprintf(w->first_error, sizeof(w->first_error), "rcp_conn_open on the loop: "
                         "%s (%s)", err, rcp_strerror(rc));
                return false;
            }
        }
    }
    /* Warm-up: connections are made (and, in a cluster, every master
     * reached) before the timed phase. */
    w->warmup = true;
    cb_first_window(w);
    own_loop_run(w);
    w->warmup = false;
    if (w->connect_failed)
        return false;
    if (cfg->client == CLIENT_RCPIPE)
        w->own_st_ok = handle_stats(w->own_conn, w->own_cluster, &w->own_st0, &w->own_cl0,
                                    &w->own_nodes);
    return true;
}

/* After the run, on the worker's thread: the counters, then the handles
 * and the loop, in the order the adapters ask for. */
static void own_teardown(worker *w)
{
    unsigned i;

    if (w->own_st_ok)
        w->own_st_ok = handle_stats(w->own_conn, w->own_cluster, &w->own_st1, &w->own_cl1,
                                    &w->own_nodes);
    rcp_conn_close(w->own_conn);
    rcp_cluster_close(w->own_cluster);
    w->own_conn = NULL;
    w->own_cluster = NULL;
    if (w->actx) {
        for (i = 0; i < SLOTMAP_MAX_NODES; i++)
            if (w->actx[i])
                redisAsyncFree(w->actx[i]); /* its disconnect callback clears the entry */
        free(w->actx);
        w->actx = NULL;
    }
    rcp_loop_free(w->rloop);
    w->rloop = NULL;
#ifdef RCP_BENCH_LIBUV
    if (w->uvloop) {
        uv_run((uv_loop_t *)w->uvloop, UV_RUN_DEFAULT); /* lets the adapter's handles close */
        uv_loop_close((uv_loop_t *)w->uvloop);
        free(w->uvloop);
        w->uvloop = NULL;
    }
#endif
#ifdef RCP_BENCH_LIBEVENT
    if (w->evbase) {
        event_base_free(w->evbase);
        w->evbase = NULL;
    }
#endif
}

/* ------------------------------------------ explicit pipeline (classic) */

/* Appends every request of the group to its connection (its master's in
 * cluster mode), then reads the replies in order. A redirected request is
 * finished alone with request_classic_cluster. */
static void run_pipeline_classic(worker *w)
{
    bench *b = w->b;
    const config *cfg = b->cfg;
    size_t klen = strlen(cfg->key_prefix) + 21;
    uint64_t k = 0;

    while (!w->broken && !atomic_load_explicit(&b->stop, memory_order_relaxed) &&
           (!cfg->requests || k < cfg->requests)) {
        uint64_t t_group = now_ns();
        unsigned i, n = cfg->pipeline;

        if (cfg->requests && cfg->requests - k < n)
            n = (unsigned)(cfg->requests - k);
        for (i = 0; i < n; i++) {
            req *r = &w->reqs[i];
            const char *argv[3];
            size_t argvlen[3];
            int argc;
            bconn *rc = w->rc;

            r->key = w->keys + i * klen;
            argc = build_request(w, &r->is_set, r->key, argv, argvlen);
            r->keylen = argvlen[1];
            r->req_bytes = resp_request_bytes(argc, argvlen);
            r->node = 0;
            if (b->map) {
                r->node = slotmap_node_of(b->map, rcp_keyslot(r->key, r->keylen));
                rc = r->node < 0 || w->broken ? NULL : classic_node_conn(w, r->node);
                if (r->node < 0)
                    note_error(w, "%s: slot not served by any node", argv[0]);
            }
            if (rc && bconn_append_argv(rc, argc, argv, argvlen) != REDIS_OK) {
                note_error(w, "out of memory");
                rc = NULL;
            }
            r->outcome = rc ? OUT_OK : OUT_ERR; /* OUT_ERR: never appended */
        }
        for (i = 0; i < n; i++) {
            req *r = &w->reqs[i];
            bconn *rc = b->map ? (r->node >= 0 ? w->conns[r->node] : NULL) : w->rc;
            void *vr = NULL;
            redisReply *rep;
            size_t rbytes = 0, vlen = 0;
            int out = OUT_ERR;
            uint64_t t;

            if (r->outcome != OUT_ERR && !w->broken) {
                if (bconn_get_reply(rc, &vr) != REDIS_OK) {
                    note_error(w, "%s: connection error: %s", r->is_set ? "SET" : "GET",
                               bconn_errstr(rc));
                    w->broken = true;
                } else {
                    bool ask;
                    unsigned rslot;
                    char host[256], err[256];
                    int port;

                    rep = vr;
                    if (b->map && rep->type == REDIS_REPLY_ERROR &&
                        slotmap_parse_redirect(b->map, rep->str, rep->len, &ask, &rslot, host,
                                               sizeof(host), &port)) {
                        freeReplyObject(rep);
                        if (ask)
                            w->ask++;
                        else
                            w->moved++;
                        if (!ask && slotmap_moved(b->map, rslot, host, port, err,
                                                  sizeof(err)) < 0) {
                            note_error(w, "after MOVED: %s", err);
                        } else {
                            r->node = -2; /* redone below, once the group is read */
                            continue;
                        }
                    } else {
                        out = classic_judge(w, r->is_set, rep, &rbytes, &vlen);
                    }
                }
            }
            t = now_ns();
            account(w, r->is_set, out, t - t_group, t, r->req_bytes + rbytes, vlen);
        }
        for (i = 0; i < n && !w->broken; i++) {
            req *r = &w->reqs[i];
            const char *argv[3] = {r->is_set ? "SET" : "GET", r->key, b->value};
            size_t argvlen[3] = {3, r->keylen, cfg->data_size};
            size_t rbytes = 0, vlen = 0;
            int out;
            uint64_t t;

            if (r->node != -2)
                continue;
            out = request_classic_cluster(w, r->is_set, r->is_set ? 3 : 2, argv, argvlen,
                                          &rbytes, &vlen);
            t = now_ns();
            account(w, r->is_set, out, t - t_group, t, r->req_bytes + rbytes, vlen);
        }
        k += n;
    }
}

static void run_requests(worker *w)
{
    const config *cfg = w->b->cfg;

    if (cfg->async_depth && (cfg->client == CLIENT_CLASSIC || cfg->event_loop)) {
        cb_first_window(w); /* then the completions refill, on the worker's own loop */
        own_loop_run(w);
    } else if (cfg->async_depth && cfg->refill_callback) {
        run_callback_threads(w);
    } else if (cfg->pipeline > 1 && cfg->client == CLIENT_CLASSIC)
        run_pipeline_classic(w);
    else if (cfg->pipeline > 1 || cfg->async_depth)
        run_async(w);
    else
        run_sync(w);
    series_flush(w);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    bench *b = w->b;

    bool own = b->cfg->async_depth && (b->cfg->client == CLIENT_CLASSIC || b->cfg->event_loop);

    if (own) {
        /* below, once the request slots exist */
    } else if (b->cfg->client == CLIENT_CLASSIC && b->map) {
        /* One connection per master of the first map, opened now so that
         * no connect (with --tls, no handshake: 64 threads x 3 masters are
         * 192 of them) falls in the timed phase; a node that a MOVED names
         * later is connected on first use. */
        unsigned n = atomic_load(&b->map->nnodes), i;

        w->conns = calloc(SLOTMAP_MAX_NODES, sizeof(*w->conns));
        if (!w->conns) {
            snprintf(w->first_error, sizeof(w->first_error), "out of memory");
            w->connect_failed = true;
        }
        for (i = 0; i < n && !w->connect_failed; i++)
            if (atomic_load(&b->map->nodes[i].master) && !classic_node_conn(w, (int)i))
                w->connect_failed = true;
    } else if (b->cfg->client == CLIENT_CLASSIC) {
        w->rc = side_connect(b->cfg, w->first_error, sizeof(w->first_error));
        if (!w->rc)
            w->connect_failed = true;
    }
    if (b->cfg->async_depth || b->cfg->pipeline > 1) {
        unsigned depth = b->cfg->async_depth ? b->cfg->async_depth : b->cfg->pipeline, i;

        w->reqs = calloc(depth, sizeof(*w->reqs));
        w->free_list = calloc(depth, sizeof(*w->free_list));
        w->keys = malloc(depth * (w->plen + 21));
        if (!w->reqs || !w->free_list || !w->keys) {
            snprintf(w->first_error, sizeof(w->first_error), "out of memory");
            w->connect_failed = true;
        } else {
            for (i = 0; i < depth; i++) {
                w->reqs[i].w = w;
                w->reqs[i].key = w->keys + i * (w->plen + 21);
                w->free_list[depth - 1 - i] = i;
            }
            w->nfree = depth;
        }
    }
    if (own && !w->connect_failed && !own_setup(w))
        w->connect_failed = true;
    pthread_barrier_wait(&b->ready); /* every connection is up */
    pthread_barrier_wait(&b->go);    /* the "before" snapshot is taken */
    if (!w->connect_failed && !atomic_load(&b->stop))
        run_requests(w);
    w->end_ns = now_ns();
    if (own)
        own_teardown(w);

    pthread_mutex_lock(&b->mu);
    b->finished++;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* ------------------------------------------------------------- writer */

/* --writer-rate: one thread SETs keys of the readers' key space on a fixed
 * schedule (SET k, from 0, due at start + (k+1)/rate, so that T seconds
 * make T x rate of them; a late one goes at once), through
 * a cluster handle of its own without cache, so that what the readers'
 * cache learns of those writes comes from the servers' invalidations, as
 * it would from another process. Keys are drawn with the GETs' pattern
 * (hot keys get written as often as they are read). It stops when the
 * workers have finished; its requests are in no table, only in
 * writer_ops. */
typedef struct writer {
    bench *b;
    rcp_cluster *cl;
    pthread_t tid;
    worker kw;              /* key choice only: next_key()'s rng and state */
    atomic_bool stop;
    uint64_t ops, errors;
    char first_error[256];
} writer;

static void *writer_main(void *arg)
{
    writer *wr = arg;
    bench *b = wr->b;
    const config *cfg = b->cfg;
    size_t plen = strlen(cfg->key_prefix);
    char *key = malloc(plen + 21);
    const char *argv[3];
    size_t argvlen[3];
    uint64_t k;

    if (!key) {
        snprintf(wr->first_error, sizeof(wr->first_error), "out of memory");
        wr->errors++;
        return NULL;
    }
    memcpy(key, cfg->key_prefix, plen);
    argv[0] = "SET";
    argvlen[0] = 3;
    argv[1] = key;
    argv[2] = b->value;
    argvlen[2] = cfg->data_size;
    for (k = 0;; k++) {
        uint64_t due = b->start_ns + (uint64_t)((double)(k + 1) * 1e9 / (double)cfg->writer_rate);
        rcp_reply *r;
        char err[256];
        size_t bytes, vlen;

        /* sleep in slices, to notice the end of the run */
        for (;;) {
            uint64_t now = now_ns();
            struct timespec ts;

            if (atomic_load_explicit(&wr->stop, memory_order_relaxed))
                goto out;
            if (now >= due)
                break;
            ts = ns_to_timespec(due - now > SLEEP_SLICE_NS ? now + SLEEP_SLICE_NS : due);
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
        }
        argvlen[1] = plen + u64_to_dec(next_key(&wr->kw, false), key + plen);
        r = rcp_cluster_command_argv(wr->cl, 3, argv, argvlen);
        if (judge_rcpipe(true, r, err, sizeof(err), &bytes, &vlen) == OUT_ERR) {
            if (!wr->errors++)
                snprintf(wr->first_error, sizeof(wr->first_error), "%s", err);
        } else {
            wr->ops++;
        }
        rcp_reply_free(r);
    }
out:
    free(key);
    return NULL;
}

/* The writer's handle: the run's node options (auth, TLS) but no cache,
 * whatever --client is. Dies when it cannot connect. */
static void writer_open(const config *cfg, writer *wr)
{
    rcp_conn_options o;
    rcp_cluster_options co;
    char seeds[300], err[512] = "";
    int rc;

    rcp_conn_options_init(&o);
    o.username = cfg->user;
    o.password = cfg->password;
    if (cfg->tls) {
        o.tls = 1;
        o.tls_ca_file = cfg->tls_s.ca_file;
        o.tls_cert_file = cfg->tls_s.cert_file;
        o.tls_key_file = cfg->tls_s.key_file;
        o.tls_server_name = cfg->tls_s.sni;
        o.tls_insecure_skip_verify = cfg->tls_s.skip_verify;
    }
    snprintf(seeds, sizeof(seeds), strchr(cfg->host, ':') ? "[%s]:%d" : "%s:%d", cfg->host,
             cfg->port);
    rcp_cluster_options_init(&co);
    co.seeds = seeds;
    co.node = &o;
    rc = rcp_cluster_open(&co, &wr->cl, err, sizeof(err));
    if (rc != RCP_OK || !wr->cl)
        die_run("--writer-rate: rcp_cluster_open %s: %s%s%s", seeds, rcp_strerror(rc),
                err[0] ? ": " : "", err);
}

/* ---------------------------------------------------------------- report */

typedef struct usage_snap {
    double cpu_s;
    uint64_t ctxsw;
} usage_snap;

static usage_snap usage_now(void)
{
    struct rusage ru;
    usage_snap u;

    getrusage(RUSAGE_SELF, &ru);
    u.cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
              (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    u.ctxsw = (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
    return u;
}

typedef struct results {
    uint64_t ops, set_ops, get_ops, errors;
    double elapsed_s;
    hist *all, *sets, *gets;
    bool server_ok;
    double server_cpu_us_per_op;
    double server_proc_cpu_us_per_op; /* from /proc/<pid>/stat; NAN if not read */
    uint64_t server_commands;
    double client_cpu_us_per_op;
    double ctx_switches_per_op;
    bool lib_ok; /* rcpipe stats available */
    rcp_conn_stats lib;      /* deltas over the timed phase */
    double futex_wakes_per_op, loop_wakes_per_op, commands_per_write, fast_path_fraction;
    unsigned io_threads, batch_delay_us;
    int fast_path;
    int cork;
    /* cluster mode */
    bool cluster;
    unsigned masters, replicas;  /* from CLUSTER SLOTS at start */
    size_t lib_nodes;            /* rcpipe: node connections at the end */
    double master_cpu_us;        /* sum of the masters' CPU deltas */
    bool replicas_ok;
    double replica_cpu_us;       /* sum of the replicas' CPU deltas */
    uint64_t replica_commands;
    bool cl_ok;                  /* rcpipe: cluster counters available */
    rcp_cluster_stats cl;        /* rcpipe: deltas over the timed phase (cache_bytes and
                                  * cache_entries: at the end) */
    uint64_t writer_ops, writer_errors; /* --writer-rate: SETs done, failed */
    int cache_ttl_ms;            /* rcpipe, cluster: the ttl the handle got */
    uint64_t moved, ask, refreshes; /* classic: the bench's own; rcpipe: from cl */
    uint64_t hits, misses, set_bytes, get_bytes;
    uint64_t allocs;             /* --count-allocs: library allocations in the run */
    uint64_t sleeps;             /* async/pipeline: waits for a completion */
    uint64_t value_bytes;        /* SET values sent + GET values received (not the big thread's) */
    long peak_rss_kb;            /* VmHWM at the end of the run; -1 if unreadable */
    /* --big-thread: thread 0, kept out of everything above but errors */
    const hist *big_h;
    uint64_t big_ops, big_sets, big_gets, big_hits, big_misses, big_value_bytes;
    const hist *series;          /* per second */
    size_t series_len;           /* seconds to report */
    size_t series_n;             /* of them, in series[] */
    bool series_truncated;
} results;

/* The process's peak resident memory (VmHWM of /proc/self/status), KiB;
 * -1 where it cannot be read. It covers the process's whole life: a
 * --preload of large values, done in this process, shows in it. */
static long peak_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            v = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static const char *mode_name(const config *cfg)
{
    return cfg->async_depth ? "async" : cfg->pipeline > 1 ? "pipeline" : "sync";
}

/* Who sends the next async request: the worker thread when half the
 * window is back, or the completion's callback. */
static const char *refill_name(const config *cfg)
{
    if (cfg->event_loop || cfg->client == CLIENT_CLASSIC || cfg->refill_callback)
        return "callback";
    return "worker";
}

static double ratio_or_nan(double num, double den)
{
    return den > 0 ? num / den : NAN;
}

/* One "---" or a number of ALL STATS, width w. */
static void cell(int w, bool have, double v, int prec)
{
    if (have && isfinite(v))
        printf(" %*.*f", w, prec, v);
    else
        printf(" %*s", w, "---");
}

static void print_row(const char *name, const hist *h, uint64_t ops, bool gets, uint64_t hits,
                      uint64_t misses, uint64_t bytes, const results *r, bool totals,
                      bool lib)
{
    double el = r->elapsed_s > 0 ? r->elapsed_s : NAN;

    printf("%-8s", name);
    cell(12, true, (double)ops / el, 2);
    cell(12, gets, (double)hits / el, 2);
    cell(12, gets, (double)misses / el, 2);
    cell(15, h->count > 0, hist_mean(h) / 1e6, 5);
    cell(15, h->count > 0, (double)hist_percentile(h, 50.0) / 1e6, 5);
    cell(15, h->count > 0, (double)hist_percentile(h, 99.0) / 1e6, 5);
    cell(15, h->count > 0, (double)hist_percentile(h, 99.9) / 1e6, 5);
    cell(12, true, (double)bytes / 1024.0 / el, 2);
    cell(14, totals && r->server_ok, r->server_cpu_us_per_op, 3);
    cell(14, totals, r->client_cpu_us_per_op, 3);
    cell(11, totals && lib, r->commands_per_write, 2);
    printf("\n");
}

/* hits / (hits + misses) over the run; 0 when the cache answered nothing */
static double cache_hit_ratio(const results *r)
{
    uint64_t n = r->cl.cache_hits + r->cl.cache_misses;

    return n ? (double)r->cl.cache_hits / (double)n : 0.0;
}

static void print_results(const config *cfg, const results *r)
{
    static const char rule[] =
        "=============================================================================="
        "===========================================================================";
    static const char dash[] =
        "------------------------------------------------------------------------------"
        "---------------------------------------------------------------------------";
    bool lib = r->lib_ok;
    const char *classic_kind = cfg->tls ? "a blocking OpenSSL (TLS)" : "a hiredis";

    printf("\nALL STATS\n");
    printf("mode %s", mode_name(cfg));
    if (cfg->async_depth)
        printf(" (depth %u)", cfg->async_depth);
    if (cfg->pipeline > 1)
        printf(" (pipeline %u)", cfg->pipeline);
    printf(", client %s, %u threads, key pattern %c:%c", cfg->client == CLIENT_RCPIPE ?
           "rcpipe" : "classic", cfg->threads, cfg->key_pattern[0], cfg->key_pattern[1]);
    if (cfg->rate)
        printf(", rate limit %" PRIu64 " ops/sec per thread", cfg->rate);
    printf("\n%s\n", rule);
    printf("%-8s %12s %12s %12s %15s %15s %15s %15s %12s %14s %14s %11s\n", "Type", "Ops/sec",
           "Hits/sec", "Misses/sec", "Avg. Latency", "p50 Latency", "p99 Latency",
           "p99.9 Latency", "KB/sec", "Srv CPU us/op", "Cli CPU us/op", "Cmds/write");
    printf("%-8s %12s %12s %12s %15s %15s %15s %15s %12s %14s %14s %11s\n", "", "", "", "",
           "(msec)", "(msec)", "(msec)", "(msec)", "", "", "", "");
    printf("%s\n", dash);
    print_row("Sets", r->sets, r->set_ops, false, 0, 0, r->set_bytes, r, false, lib);
    print_row("Gets", r->gets, r->get_ops, true, r->hits, r->misses, r->get_bytes, r, false,
              lib);
    print_row("Totals", r->all, r->ops, true, r->hits, r->misses, r->set_bytes + r->get_bytes,
              r, true, lib);
    printf("%s\n", dash);
    if (cfg->event_loop)
        printf("client               rcpipe, %u threads each running its own %s loop with "
               "its own %s on it, refilled from the callbacks\n", cfg->threads,
               cfg->event_loop == LOOP_LIBEVENT ? "libevent" : "libuv",
               r->cluster ? "cluster handle" : "rcp_conn");
    else if (cfg->client == CLIENT_CLASSIC && cfg->async_depth)
        printf("client               classic async, %u threads each running its own libevent "
               "loop with a redisAsyncContext per master, refilled from the callbacks\n",
               cfg->threads);
    else if (cfg->client == CLIENT_RCPIPE && r->cluster)
        printf("client               rcpipe, %u threads on one cluster handle, %zu node "
               "connections (io-threads %u, batch-delay-us %u, fast-path %s, cork %s, read-policy "
               "%s)\n",
               cfg->threads, r->lib_nodes, r->io_threads, r->batch_delay_us,
               r->fast_path ? "on" : "off", r->cork ? "on" : "off",
               read_policy_name(cfg->read_policy));
    else if (cfg->client == CLIENT_RCPIPE)
        printf("client               rcpipe, %u threads on one connection "
               "(io-threads %u, batch-delay-us %u, fast-path %s, cork %s)\n",
               cfg->threads, r->io_threads, r->batch_delay_us, r->fast_path ? "on" : "off",
               r->cork ? "on" : "off");
    else if (r->cluster)
        printf("client               classic, %u threads, %s connection each per "
               "master (%u masters)\n", cfg->threads, classic_kind, r->masters);
    else
        printf("client               classic, %u threads, %s connection each\n",
               cfg->threads, classic_kind);
    if (cfg->tls)
        printf("tls                  every connection%s%s%s%s\n",
               cfg->tls_s.skip_verify ? ", server NOT verified (--tls-skip-verify)" : "",
               cfg->tls_s.cert_file ? ", client certificate" : "",
               cfg->tls_s.sni ? ", SNI " : "", cfg->tls_s.sni ? cfg->tls_s.sni : "");
    if (r->cluster)
        printf("cluster              %u masters, %u replicas\n", r->masters, r->replicas);
    printf("requests             %" PRIu64 " in %.3f s, errors %" PRIu64 "\n", r->ops,
           r->elapsed_s, r->errors);
    printf("mode                 %s", mode_name(cfg));
    if (cfg->async_depth)
        printf(", %u requests in flight per thread, refilled by %s", cfg->async_depth,
               refill_name(cfg));
    if (cfg->pipeline > 1)
        printf(", groups of %u requests per thread", cfg->pipeline);
    if (cfg->series_max)
        printf(", runs of %u..%u requests back to back per due time", cfg->series_min,
               cfg->series_max);
    printf("\n");
    if (cfg->rate)
        printf("rate limit           offered %.0f ops/sec (%" PRIu64 " per thread), "
               "achieved %.0f ops/sec; latency from the intended send time\n",
               (double)cfg->rate * cfg->threads, cfg->rate,
               ratio_or_nan((double)r->ops, r->elapsed_s));
    printf("gets                 %" PRIu64 " hits, %" PRIu64 " misses\n", r->hits, r->misses);
    if (r->server_ok)
        printf("server CPU           %.3f us/op (%" PRIu64 " commands%s); from "
               "/proc/PID/stat %.3f us/op\n",
               r->server_cpu_us_per_op, r->server_commands,
               r->cluster ? ", summed over the masters" : "", r->server_proc_cpu_us_per_op);
    else
        printf("server CPU           n/a (INFO failed)\n");
    if (r->cluster && r->server_ok && r->replicas_ok)
        printf("replica CPU          %.0f us in all, %.3f us per request (%" PRIu64
               " commands on the replicas)\n",
               r->replica_cpu_us, ratio_or_nan(r->replica_cpu_us, (double)r->ops),
               r->replica_commands);
    if (r->cluster)
        printf("redirects            moved %" PRIu64 ", ask %" PRIu64 ", slot map reloads %" PRIu64
               "\n", r->moved, r->ask, r->refreshes);
    if (cfg->client == CLIENT_RCPIPE && r->cluster && cfg->cache_bytes && r->cl_ok)
        printf("client cache         %" PRIu64 " hits, %" PRIu64 " misses (hit ratio %.3f), "
               "%" PRIu64 " invalidations, %" PRIu64 " evictions; holds %" PRIu64 " bytes in %"
               PRIu64 " entries (cap %zu, ttl %d ms)\n",
               r->cl.cache_hits, r->cl.cache_misses, cache_hit_ratio(r), r->cl.cache_invalidations,
               r->cl.cache_evictions, r->cl.cache_bytes, r->cl.cache_entries, cfg->cache_bytes,
               r->cache_ttl_ms);
    else if (cfg->client == CLIENT_RCPIPE && r->cluster)
        printf("client cache         off\n");
    if (cfg->writer_rate)
        printf("writer               %" PRIu64 " SETs (%" PRIu64 " errors), %.0f/s of %" PRIu64
               "/s offered, own handle without cache; not in the table above\n",
               r->writer_ops, r->writer_errors,
               ratio_or_nan((double)r->writer_ops, r->elapsed_s), cfg->writer_rate);
    printf("client CPU           %.3f us/op\n", r->client_cpu_us_per_op);
    printf("value bytes          %.3f MB/s (%" PRIu64 " bytes: SET values sent + GET values "
           "received)%s\n", ratio_or_nan((double)r->value_bytes, r->elapsed_s) / 1e6,
           r->value_bytes,
           cfg->stream ? "; GETs streamed to a counting sink, SETs from a generating source"
                       : "");
    if (r->peak_rss_kb >= 0)
        printf("peak RSS             %ld KiB (VmHWM of the whole process)\n", r->peak_rss_kb);
    else
        printf("peak RSS             n/a (no /proc/self/status)\n");
    if (cfg->big_size) {
        const hist *h = r->big_h;

        printf("big thread           thread 0, values of %zu bytes: %" PRIu64 " requests (%"
               PRIu64 " SETs, %" PRIu64 " GETs: %" PRIu64 " hits, %" PRIu64 " misses), "
               "%.3f MB/s", cfg->big_size, r->big_ops, r->big_sets, r->big_gets, r->big_hits,
               r->big_misses, ratio_or_nan((double)r->big_value_bytes, r->elapsed_s) / 1e6);
        if (cfg->big_rate > 0)
            printf(" (held to %.3f MB/s)", cfg->big_rate / 1e6);
        if (h->count)
            printf(", latency avg %.3f p50 %.3f p99 %.3f max %.3f msec", hist_mean(h) / 1e6,
                   (double)hist_percentile(h, 50.0) / 1e6,
                   (double)hist_percentile(h, 99.0) / 1e6, (double)h->max_ns / 1e6);
        printf("; not in the table above\n");
    }
    printf("ctx switches         %.3f /op\n", r->ctx_switches_per_op);
    if (r->lib_ok) {
        printf("futex wakes          %.3f /op\n", r->futex_wakes_per_op);
        printf("loop wakes           %.3f /op\n", r->loop_wakes_per_op);
        printf("sender's own writes  %.3f /op\n",
               ratio_or_nan((double)r->lib.caller_writes, (double)r->ops));
        printf("callers' reads       %.3f /op (replies a sync caller on the socket read; "
               "%.3f leads/op)\n",
               ratio_or_nan((double)r->lib.caller_replies, (double)r->ops),
               ratio_or_nan((double)r->lib.leads, (double)r->ops));
        printf("commands/write       %.2f (%" PRIu64 " batches, %" PRIu64 " send calls)\n",
               r->commands_per_write, r->lib.batches, r->lib.write_calls);
        printf("fast path            %.1f%% of requests\n", 100.0 * r->fast_path_fraction);
        if (r->lib.spare_requests)
            printf("spare connections    %.1f%% of requests (sync callers behind another)\n",
                   100.0 * ratio_or_nan((double)r->lib.spare_requests, (double)r->ops));
        if (r->cork)
            printf("corked sends         %.3f /op (waited for the first reply byte of the "
                   "write in flight)\n", ratio_or_nan((double)r->lib.corked, (double)r->ops));
    }
    if (cfg->client == CLIENT_RCPIPE && (cfg->async_depth || cfg->pipeline > 1))
        printf("worker sleeps        %.3f /op (waits for a free slot or the group's replies; "
               "one wake each)\n", ratio_or_nan((double)r->sleeps, (double)r->ops));
    if (cfg->count_allocs)
        printf("library allocations per request  %.3f (%" PRIu64 " malloc/calloc/realloc "
               "calls; hiredis's reader is not hooked)\n",
               ratio_or_nan((double)r->allocs, (double)r->ops), r->allocs);
}

static void json_num(FILE *f, const char *key, double v, bool last)
{
    if (isfinite(v))
        fprintf(f, "  \"%s\": %.6g%s\n", key, v, last ? "" : ",");
    else
        fprintf(f, "  \"%s\": null%s\n", key, last ? "" : ",");
}

static void json_u64(FILE *f, const char *key, uint64_t v)
{
    fprintf(f, "  \"%s\": %" PRIu64 ",\n", key, v);
}

/* One ALL STATS row as an object. gets: hits/misses apply (else null). */
static void json_latency(FILE *f, const char *key, const hist *h, uint64_t ops, double elapsed,
                         bool gets, uint64_t hits, uint64_t misses, uint64_t bytes)
{
    double el = elapsed > 0 ? elapsed : NAN;

    fprintf(f, "  \"%s\": {\"ops\": %" PRIu64 ", \"ops_per_sec\": %.6g", key, ops,
            elapsed > 0 ? (double)ops / elapsed : 0.0);
    if (gets && elapsed > 0)
        fprintf(f, ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
                ", \"hits_per_sec\": %.6g, \"misses_per_sec\": %.6g", hits, misses,
                (double)hits / el, (double)misses / el);
    else
        fprintf(f, ", \"hits_per_sec\": null, \"misses_per_sec\": null");
    if (elapsed > 0)
        fprintf(f, ", \"kb_per_sec\": %.6g, \"bytes\": %" PRIu64, (double)bytes / 1024.0 / el,
                bytes);
    else
        fprintf(f, ", \"kb_per_sec\": null, \"bytes\": %" PRIu64, bytes);
    if (h->count)
        fprintf(f, ", \"avg_us\": %.6g, \"p50_us\": %.6g, \"p99_us\": %.6g, \"p999_us\": %.6g",
                hist_mean(h) / 1e3, (double)hist_percentile(h, 50.0) / 1e3,
                (double)hist_percentile(h, 99.0) / 1e3, (double)hist_percentile(h, 99.9) / 1e3);
    else
        fprintf(f, ", \"avg_us\": null, \"p50_us\": null, \"p99_us\": null, \"p999_us\": null");
    fprintf(f, "},\n");
}

static bool write_json(const config *cfg, const results *r)
{
    FILE *f = fopen(cfg->json_out, "w");
    const hist *h = r->all;
    bool any = h->count > 0;
    bool ok;

    if (!f) {
        fprintf(stderr, PROG ": cannot write %s: %s\n", cfg->json_out, strerror(errno));
        return false;
    }
    fprintf(f, "{\n");
    fprintf(f, "  \"client\": \"%s\",\n", cfg->client == CLIENT_RCPIPE ? "rcpipe" : "classic");
    fprintf(f, "  \"threads\": %u,\n", cfg->threads);
    json_num(f, "ops_per_sec", r->elapsed_s > 0 ? (double)r->ops / r->elapsed_s : NAN, false);
    json_num(f, "avg_us", any ? hist_mean(h) / 1e3 : NAN, false);
    json_num(f, "p50_us", any ? (double)hist_percentile(h, 50.0) / 1e3 : NAN, false);
    json_num(f, "p99_us", any ? (double)hist_percentile(h, 99.0) / 1e3 : NAN, false);
    json_num(f, "p999_us", any ? (double)hist_percentile(h, 99.9) / 1e3 : NAN, false);
    json_num(f, "max_us", any ? (double)h->max_ns / 1e3 : NAN, false);
    json_num(f, "server_cpu_us_per_op", r->server_ok ? r->server_cpu_us_per_op : NAN, false);
    json_num(f, "server_proc_cpu_us_per_op", r->server_ok ? r->server_proc_cpu_us_per_op : NAN,
             false);
    json_u64(f, "server_commands", r->server_ok ? r->server_commands : 0);
    json_num(f, "client_cpu_us_per_op", r->client_cpu_us_per_op, false);
    json_num(f, "ctx_switches_per_op", r->ctx_switches_per_op, false);
    json_num(f, "futex_wakes_per_op", r->lib_ok ? r->futex_wakes_per_op : NAN, false);
    json_num(f, "loop_wakes_per_op", r->lib_ok ? r->loop_wakes_per_op : NAN, false);
    json_num(f, "caller_writes_per_op",
             r->lib_ok ? ratio_or_nan((double)r->lib.caller_writes, (double)r->ops) : NAN, false);
    json_num(f, "caller_replies_per_op",
             r->lib_ok ? ratio_or_nan((double)r->lib.caller_replies, (double)r->ops) : NAN, false);
    json_num(f, "leads_per_op",
             r->lib_ok ? ratio_or_nan((double)r->lib.leads, (double)r->ops) : NAN, false);
    json_num(f, "corked_per_op",
             r->lib_ok ? ratio_or_nan((double)r->lib.corked, (double)r->ops) : NAN, false);
    json_num(f, "spare_requests_per_op",
             r->lib_ok ? ratio_or_nan((double)r->lib.spare_requests, (double)r->ops) : NAN, false);
    json_num(f, "commands_per_write", r->lib_ok ? r->commands_per_write : NAN, false);
    json_num(f, "fast_path_fraction", r->lib_ok ? r->fast_path_fraction : NAN, false);
    json_num(f, "write_calls_per_op",
             r->lib_ok ? ratio_or_nan((double)r->lib.write_calls, (double)r->ops) : NAN, false);
    json_num(f, "read_calls_per_op",
             r->lib_ok ? ratio_or_nan((double)r->lib.read_calls, (double)r->ops) : NAN, false);
    fprintf(f, "  \"data_size\": %zu,\n", cfg->data_size);
    fprintf(f, "  \"ratio\": \"%u:%u\",\n", cfg->ratio_set, cfg->ratio_get);
    json_num(f, "test_time_s", r->elapsed_s, false);
    if (cfg->requests)
        fprintf(f, "  \"requested_test_time_s\": null,\n");
    else
        json_num(f, "requested_test_time_s", cfg->test_time_s, false);
    json_u64(f, "requests_per_thread", cfg->requests);
    json_u64(f, "key_minimum", cfg->key_min);
    json_u64(f, "key_maximum", cfg->key_max);
    if (cfg->client == CLIENT_RCPIPE) {
        fprintf(f, "  \"io_threads\": %u,\n", r->io_threads);
        fprintf(f, "  \"batch_delay_us\": %u,\n", r->batch_delay_us);
        fprintf(f, "  \"fast_path\": %s,\n", r->fast_path ? "true" : "false");
        fprintf(f, "  \"cork\": %s,\n", r->cork ? "true" : "false");
    }
    json_latency(f, "sets", r->sets, r->set_ops, r->elapsed_s, false, 0, 0, r->set_bytes);
    json_latency(f, "gets", r->gets, r->get_ops, r->elapsed_s, true, r->hits, r->misses,
                 r->get_bytes);
    json_latency(f, "totals", r->all, r->ops, r->elapsed_s, true, r->hits, r->misses,
                 r->set_bytes + r->get_bytes);
    fprintf(f, "  \"mode\": \"%s\",\n", mode_name(cfg));
    fprintf(f, "  \"async_depth\": %u,\n", cfg->async_depth);
    fprintf(f, "  \"refill\": %s%s%s,\n", cfg->async_depth ? "\"" : "",
            cfg->async_depth ? refill_name(cfg) : "null", cfg->async_depth ? "\"" : "");
    fprintf(f, "  \"event_loop\": %s,\n", cfg->event_loop == LOOP_LIBEVENT ? "\"libevent\""
                                           : cfg->event_loop == LOOP_LIBUV ? "\"libuv\""
                                                                           : "null");
    if (cfg->series_max) {
        json_u64(f, "series_min", cfg->series_min);
        json_u64(f, "series_max", cfg->series_max);
    } else {
        fprintf(f, "  \"series_min\": null,\n  \"series_max\": null,\n");
    }
    fprintf(f, "  \"pipeline\": %u,\n", cfg->pipeline);
    json_num(f, "worker_sleeps_per_op",
             cfg->client == CLIENT_RCPIPE && (cfg->async_depth || cfg->pipeline > 1)
                 ? ratio_or_nan((double)r->sleeps, (double)r->ops)
                 : NAN,
             false);
    if (cfg->rate) {
        json_u64(f, "rate_limit_per_thread", cfg->rate);
        json_num(f, "offered_ops_per_sec", (double)cfg->rate * cfg->threads, false);
    } else {
        fprintf(f, "  \"rate_limit_per_thread\": null,\n");
        fprintf(f, "  \"offered_ops_per_sec\": null,\n");
    }
    fprintf(f, "  \"key_pattern\": \"%c:%c\",\n", cfg->key_pattern[0], cfg->key_pattern[1]);
    json_num(f, "key_median", cfg->key_median, false);
    json_num(f, "key_stddev", cfg->key_stddev, false);
    fprintf(f, "  \"distinct_client_seed\": %s,\n", cfg->distinct_seed ? "true" : "false");
    json_num(f, "allocs_per_op",
             cfg->count_allocs ? ratio_or_nan((double)r->allocs, (double)r->ops) : NAN, false);
    if (cfg->count_allocs)
        json_u64(f, "allocs", r->allocs);
    else
        fprintf(f, "  \"allocs\": null,\n");
    fprintf(f, "  \"series_truncated\": %s,\n", r->series_truncated ? "true" : "false");
    fprintf(f, "  \"series\": [");
    {
        size_t k;

        for (k = 0; k < r->series_len; k++) {
            const hist *sh = k < r->series_n ? &r->series[k] : NULL;
            uint64_t n = sh ? sh->count : 0;
            double dur = r->elapsed_s - (double)k;

            if (dur > 1.0)
                dur = 1.0;
            if (dur < 1e-3)
                dur = 1e-3;
            fprintf(f, "%s\n    {\"second\": %zu, \"ops\": %" PRIu64 ", \"ops_per_sec\": %.6g",
                    k ? "," : "", k + 1, n, (double)n / dur);
            if (n)
                fprintf(f, ", \"p50_us\": %.6g, \"p99_us\": %.6g}",
                        (double)hist_percentile(sh, 50.0) / 1e3,
                        (double)hist_percentile(sh, 99.0) / 1e3);
            else
                fprintf(f, ", \"p50_us\": null, \"p99_us\": null}");
        }
    }
    fprintf(f, "%s],\n", r->series_len ? "\n  " : "");
    json_u64(f, "errors", r->errors);
    fprintf(f, "  \"cluster\": %s,\n", r->cluster ? "true" : "false");
    fprintf(f, "  \"tls\": %s,\n", cfg->tls ? "true" : "false");
    fprintf(f, "  \"stream\": %s,\n", cfg->stream ? "true" : "false");
    if (cfg->bulk_pool >= 0)
        fprintf(f, "  \"bulk_pool\": %d,\n", cfg->bulk_pool);
    if (cfg->bulk_threshold)
        fprintf(f, "  \"bulk_threshold\": %zu,\n", cfg->bulk_threshold);
    json_u64(f, "value_bytes", r->value_bytes);
    json_num(f, "bytes_per_sec", ratio_or_nan((double)r->value_bytes, r->elapsed_s), false);
    if (r->peak_rss_kb >= 0)
        fprintf(f, "  \"peak_rss_kb\": %ld,\n", r->peak_rss_kb);
    else
        fprintf(f, "  \"peak_rss_kb\": null,\n");
    if (cfg->big_size) {
        const hist *bh = r->big_h;

        fprintf(f, "  \"big_thread\": {\"size\": %zu, \"ops\": %" PRIu64 ", \"sets\": %" PRIu64
                ", \"gets\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
                ", \"value_bytes\": %" PRIu64, cfg->big_size, r->big_ops, r->big_sets,
                r->big_gets, r->big_hits, r->big_misses, r->big_value_bytes);
        if (r->elapsed_s > 0)
            fprintf(f, ", \"bytes_per_sec\": %.6g", (double)r->big_value_bytes / r->elapsed_s);
        else
            fprintf(f, ", \"bytes_per_sec\": null");
        if (cfg->big_rate > 0)
            fprintf(f, ", \"rate_cap_bytes_per_sec\": %.6g", cfg->big_rate);
        else
            fprintf(f, ", \"rate_cap_bytes_per_sec\": null");
        if (bh->count)
            fprintf(f, ", \"avg_us\": %.6g, \"p50_us\": %.6g, \"p99_us\": %.6g, "
                    "\"max_us\": %.6g}", hist_mean(bh) / 1e3,
                    (double)hist_percentile(bh, 50.0) / 1e3,
                    (double)hist_percentile(bh, 99.0) / 1e3, (double)bh->max_ns / 1e3);
        else
            fprintf(f, ", \"avg_us\": null, \"p50_us\": null, \"p99_us\": null, "
                    "\"max_us\": null}");
        fprintf(f, ",\n");
    } else {
        fprintf(f, "  \"big_thread\": null,\n");
    }
    /* The client cache: numbers for rcpipe in cluster mode (0 when off),
     * null where there is no cache to ask (classic, one node). */
    if (cfg->cache_bytes)
        fprintf(f, "  \"client_cache_bytes\": %zu,\n  \"client_cache_ttl_ms\": %d,\n",
                cfg->cache_bytes, r->cache_ttl_ms);
    else
        fprintf(f, "  \"client_cache_bytes\": 0,\n  \"client_cache_ttl_ms\": null,\n");
    if (cfg->client == CLIENT_RCPIPE && r->cluster && r->cl_ok) {
        json_u64(f, "cache_hits", r->cl.cache_hits);
        json_u64(f, "cache_misses", r->cl.cache_misses);
        json_u64(f, "cache_invalidations", r->cl.cache_invalidations);
        json_u64(f, "cache_evictions", r->cl.cache_evictions);
        json_u64(f, "cache_bytes", r->cl.cache_bytes);
        json_u64(f, "cache_entries", r->cl.cache_entries);
        json_num(f, "cache_hit_ratio", cache_hit_ratio(r), false);
    } else {
        fprintf(f, "  \"cache_hits\": null,\n  \"cache_misses\": null,\n"
                "  \"cache_invalidations\": null,\n  \"cache_evictions\": null,\n"
                "  \"cache_bytes\": null,\n  \"cache_entries\": null,\n"
                "  \"cache_hit_ratio\": null,\n");
    }
    json_u64(f, "writer_rate", cfg->writer_rate);
    json_u64(f, "writer_ops", r->writer_ops);
    json_u64(f, "writer_errors", r->writer_errors);
    json_num(f, "writer_ops_per_sec",
             cfg->writer_rate ? ratio_or_nan((double)r->writer_ops, r->elapsed_s) : NAN, false);
    if (r->cluster) {
        bool rep = r->server_ok && r->replicas_ok;

        json_u64(f, "cluster_masters", r->masters);
        json_u64(f, "cluster_replicas", r->replicas);
        json_num(f, "master_cpu_us", r->server_ok ? r->master_cpu_us : NAN, false);
        json_num(f, "replica_cpu_us", rep ? r->replica_cpu_us : NAN, false);
        json_num(f, "replica_cpu_us_per_op",
                 rep ? ratio_or_nan(r->replica_cpu_us, (double)r->ops) : NAN, false);
        json_num(f, "replica_cpu_us_per_command",
                 rep ? ratio_or_nan(r->replica_cpu_us, (double)r->replica_commands) : NAN, false);
        if (rep)
            json_u64(f, "replica_commands", r->replica_commands);
        else
            fprintf(f, "  \"replica_commands\": null,\n");
        json_u64(f, "cluster_moved", r->moved);
        json_u64(f, "cluster_ask", r->ask);
        /* classic: the bench's CLUSTER SLOTS re-reads; rcpipe: the library's
         * refreshes, periodic and forced */
        json_u64(f, "cluster_refreshes", r->refreshes);
        if (cfg->client == CLIENT_RCPIPE) {
            fprintf(f, "  \"read_policy\": \"%s\",\n", read_policy_name(cfg->read_policy));
            fprintf(f, "  \"cluster_nodes_connected\": %zu,\n", r->lib_nodes);
            if (r->cl_ok) {
                json_u64(f, "cluster_refreshes_periodic", r->cl.refreshes_periodic);
                json_u64(f, "cluster_refreshes_forced", r->cl.refreshes_forced);
                json_u64(f, "cluster_refresh_failures", r->cl.refresh_failures);
                json_u64(f, "cluster_retries",
                         r->cl.retries_tryagain + r->cl.retries_clusterdown +
                             r->cl.retries_loading + r->cl.retries_masterdown +
                             r->cl.retries_not_sent + r->cl.retries_io +
                             r->cl.retries_readonly);
                json_u64(f, "cluster_map_versions", r->cl.map_version);
                json_u64(f, "cluster_bulk_requests", r->cl.bulk_requests);
            }
        }
    }
    fprintf(f, "  \"ops\": %" PRIu64 "\n", r->ops);
    fprintf(f, "}\n");
    ok = !ferror(f);
    if (fclose(f) != 0)
        ok = false;
    if (!ok)
        fprintf(stderr, PROG ": error writing %s\n", cfg->json_out);
    return ok;
}

/* ------------------------------------------------------- library counters */

/* The library's counters: the connection's, or in cluster mode the sum over
 * every node connection the handle has (nodes are kept once known, so sums
 * taken before and after subtract) plus the cluster's own counters. */
typedef struct lib_snap {
    rcp_conn_stats conn;
    rcp_cluster_stats cl;
    size_t nodes;
} lib_snap;

static bool lib_snap_read(const bench *b, lib_snap *out)
{
    return handle_stats(b->conn, b->cluster, &out->conn, &out->cl, &out->nodes);
}

/* --event-loop: the sum of the workers' own handles, as each read them
 * on its thread before (after = false) or after its run. */
static bool lib_snap_own(const bench *b, bool after, lib_snap *out)
{
    unsigned i;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < b->cfg->threads; i++) {
        const worker *w = &b->workers[i];

        if (!w->own_st_ok)
            return false;
        rcp_conn_stats_add(&out->conn, after ? &w->own_st1 : &w->own_st0);
        cl_stats_add(&out->cl, after ? &w->own_cl1 : &w->own_cl0);
        out->nodes += w->own_nodes;
    }
    return true;
}

/* ------------------------------------------------------------------ main */

/* --count-allocs: the library's malloc/calloc/realloc calls while the timed
 * phase runs (relaxed atomics: a count, not an ordering). */
static atomic_bool alloc_counting;
static atomic_uint_fast64_t alloc_calls;

static void count_alloc(void)
{
    if (atomic_load_explicit(&alloc_counting, memory_order_relaxed))
        atomic_fetch_add_explicit(&alloc_calls, 1, memory_order_relaxed);
}

static void *count_malloc(size_t n)
{
    count_alloc();
    return malloc(n);
}

static void *count_calloc(size_t n, size_t size)
{
    count_alloc();
    return calloc(n, size);
}

static void *count_realloc(void *p, size_t n)
{
    count_alloc();
    return realloc(p, n);
}

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* Requests completed so far; their summed latency (ns) in *lat if not NULL. */
static uint64_t total_done(const bench *b, uint64_t *lat)
{
    uint64_t s = 0, l = 0;
    unsigned i;

    for (i = 0; i < b->cfg->threads; i++) {
        l += atomic_load_explicit(&b->workers[i].lat_sum_ns, memory_order_relaxed);
        s += atomic_load_explicit(&b->workers[i].done, memory_order_relaxed);
    }
    if (lat)
        *lat = l;
    return s;
}

/* memtier's progress line: ops so far, ops/sec in the last interval and on
 * average, mean latency in the last interval and on average. */
static void progress_line(const bench *b, uint64_t start, uint64_t now, uint64_t done,
                          uint64_t lat, uint64_t last_done, uint64_t last_lat, uint64_t last_t,
                          bool tty)
{
    const config *cfg = b->cfg;
    double el = (double)(now - start) / 1e9;
    double dt = (double)(now - last_t) / 1e9;
    double pct = cfg->requests
                     ? 100.0 * (double)done / ((double)cfg->requests * cfg->threads)
                     : 100.0 * el / cfg->test_time_s;
    uint64_t dn = done - last_done;

    if (pct > 100.0)
        pct = 100.0;
    fprintf(stderr, "%s[RUN #1 %3.0f%%, %3.0f secs] %3u threads: %11" PRIu64
            " ops, %9.0f (avg: %9.0f) ops/sec, %7.3f (avg: %7.3f) msec latency%s",
            tty ? "\r" : "", pct, el, cfg->threads, done,
            dt > 0 ? (double)dn / dt : 0.0, el > 0 ? (double)done / el : 0.0,
            dn ? (double)(lat - last_lat) / (double)dn / 1e6 : 0.0,
            done ? (double)lat / (double)done / 1e6 : 0.0, tty ? "   " : "\n");
    fflush(stderr);
}

/* Waits for the workers, stops them at the deadline, prints progress.
 * Returns false if the run hung: no request at all completed for
 * STOP_GRACE_S, or some thread did not come back from its request within
 * STOP_GRACE_S after the stop. */
static bool supervise(bench *b, uint64_t start)
{
    const config *cfg = b->cfg;
    bool tty = isatty(STDERR_FILENO);
    uint64_t deadline = cfg->requests ? UINT64_MAX
                                      : start + (uint64_t)(cfg->test_time_s * 1e9);
    uint64_t next_tick = start + 1000000000u, last_t = start, last_done = 0, last_lat = 0;
    uint64_t stopped_at = 0, seen_done = 0, seen_at = start;
    bool printed = false, hung = false;

    pthread_mutex_lock(&b->mu);
    while (b->finished < cfg->threads) {
        uint64_t wake = next_tick, now;
        struct timespec ts;

        if (!atomic_load(&b->stop) && deadline < wake)
            wake = deadline;
        ts = ns_to_timespec(wake);
        pthread_cond_timedwait(&b->cv, &b->mu, &ts);
        now = now_ns();
        if (!atomic_load(&b->stop) && (now >= deadline || interrupted)) {
            if (interrupted)
                fprintf(stderr, "%s" PROG ": interrupted, stopping\n", printed && tty ? "\n" : "");
            atomic_store(&b->stop, true);
        }
        if (atomic_load(&b->stop)) {
            if (!stopped_at)
                stopped_at = now;
            else if (now - stopped_at >= STOP_GRACE_S * 1000000000ull) {
                hang_reason = "did not return after the end of the run";
                hung = true;
                break;
            }
        }
        {
            uint64_t d = total_done(b, NULL);

            if (d != seen_done) {
                seen_done = d;
                seen_at = now;
            } else if (now - seen_at >= STOP_GRACE_S * 1000000000ull &&
                       b->finished < cfg->threads) {
                hang_reason = "completed no request at all";
                hung = true;
                break;
            }
        }
        if (now >= next_tick) {
            if (cfg->progress && b->finished < cfg->threads) {
                uint64_t lat, done = total_done(b, &lat);

                pthread_mutex_unlock(&b->mu);
                progress_line(b, start, now, done, lat, last_done, last_lat, last_t, tty);
                pthread_mutex_lock(&b->mu);
                printed = true;
                last_done = done;
                last_lat = lat;
                last_t = now;
            }
            while (next_tick <= now)
                next_tick += 1000000000u;
        }
    }
    pthread_mutex_unlock(&b->mu);
    if (printed && tty)
        fputc('\n', stderr);
    return !hung;
}

/* Some threads are stuck inside a request: say what we know and leave
 * without joining them or closing the connection (either would hang). */
static _Noreturn void report_hang(bench *b)
{
    const config *cfg = b->cfg;
    unsigned i, stuck = 0;

    pthread_mutex_lock(&b->mu);
    stuck = cfg->threads - b->finished;
    pthread_mutex_unlock(&b->mu);
    fprintf(stderr, PROG ": %u of %u threads stuck inside a request (they %s for %d s); "
            "giving up (%s hang?)\n", stuck, cfg->threads, hang_reason, STOP_GRACE_S,
            cfg->client == CLIENT_RCPIPE ? "library" : "server");
    fprintf(stderr, PROG ": %" PRIu64 " requests completed in all\n", total_done(b, NULL));
    if (b->conn || b->cluster) {
        lib_snap ls;
        const rcp_conn_stats *st = &ls.conn;

        alarm(5); /* in case reading the counters hangs too */
        if (b->cluster && lib_snap_read(b, &ls))
            fprintf(stderr, PROG ": rcpipe cluster counters since open: requests %" PRIu64
                    ", moved %" PRIu64 ", ask %" PRIu64 ", retries tryagain %" PRIu64
                    " clusterdown %" PRIu64 " loading %" PRIu64 " masterdown %" PRIu64
                    " not_sent %" PRIu64 " io %" PRIu64 " readonly %" PRIu64
                    ", refreshes periodic %" PRIu64 " forced %" PRIu64 " failed %" PRIu64
                    ", map_version %" PRIu64 ", nodes %zu; summed over the node connections:\n",
                    ls.cl.requests, ls.cl.moved, ls.cl.ask, ls.cl.retries_tryagain,
                    ls.cl.retries_clusterdown, ls.cl.retries_loading, ls.cl.retries_masterdown,
                    ls.cl.retries_not_sent, ls.cl.retries_io, ls.cl.retries_readonly,
                    ls.cl.refreshes_periodic, ls.cl.refreshes_forced, ls.cl.refresh_failures,
                    ls.cl.map_version, ls.nodes);
        if ((b->cluster && ls.nodes) || (b->conn && lib_snap_read(b, &ls)))
            fprintf(stderr, PROG ": rcpipe counters since open: requests %" PRIu64
                    ", replies %" PRIu64 ", batches %" PRIu64 ", commands_written %" PRIu64
                    ", write_calls %" PRIu64 ", read_calls %" PRIu64 ", timeouts %" PRIu64
                    ", disconnects %" PRIu64 ", fast_path %" PRIu64 ", futex_wakes %" PRIu64
                    ", loop_wakes %" PRIu64 ", caller_writes %" PRIu64 "\n",
                    st->requests, st->replies, st->batches, st->commands_written,
                    st->write_calls, st->read_calls, st->timeouts, st->disconnects,
                    st->fast_path, st->futex_wakes, st->loop_wakes, st->caller_writes);
    }
    for (i = 0; i < cfg->threads; i++)
        if (b->workers[i].first_error[0]) {
            fprintf(stderr, PROG ": thread %u, first error: %s\n", i, b->workers[i].first_error);
            break;
        }
    fflush(stderr);
    _exit(EXIT_RUN_FAILED);
}

int main(int argc, char **argv)
{
    config cfg;
    bench b;
    results res;
    hist all, sets, gets, big;
    server_info si0, si1;
    cluster_info ci0, ci1;
    slotmap *map = NULL;
    usage_snap u0, u1;
    lib_snap st0, st1;
    writer wr;
    bool writer_started = false;
    pthread_condattr_t ca;
    pthread_attr_t ta;
    char err[512];
    uint64_t start, end;
    unsigned i, started = 0, connect_failures = 0, printed_errors = 0;
    bool json_ok = true, stats_ok = true;
    struct sigaction sa;

    parse_args(&cfg, argc, argv);
    if (cfg.count_allocs) { /* before any other rcpipe call */
        static const rcp_allocator counting = {count_malloc, count_calloc, count_realloc, free};

        if (rcp_set_allocator(&counting) != RCP_OK)
            die_run("rcp_set_allocator failed");
    }

    signal(SIGPIPE, SIG_IGN); /* hiredis writes with plain write(), OpenSSL with send() */
    if (cfg.tls && !bconn_tls_init(&cfg.tls_s, err, sizeof(err)))
        die_usage("%s", err);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND; /* a second signal kills at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    memset(&b, 0, sizeof(b));
    memset(&res, 0, sizeof(res));
    memset(&st0, 0, sizeof(st0));
    memset(&st1, 0, sizeof(st1));
    memset(&wr, 0, sizeof(wr));
    b.cfg = &cfg;
    atomic_init(&b.stop, false);
    /* Mapped, not malloc'ed: malloc may write a fresh block (glibc's
     * MALLOC_PERTURB_, which meson test sets), and the pages must stay
     * untouched until something sends from them. */
    b.value = mmap(NULL, cfg.data_size + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (b.value == MAP_FAILED)
        die_run("out of memory (mmap of %zu bytes: %s)", cfg.data_size + 1, strerror(errno));
    /* Written only when something sends it: an untouched large buffer
     * costs no resident memory, so a GET-only run's peak_rss_kb is the
     * client's own, and so is a --stream SET run's (its values come from
     * source_gen, never from here). */
    if ((cfg.ratio_set && !cfg.stream) || cfg.preload || cfg.writer_rate)
        fill_pattern(b.value, cfg.data_size);
    b.value[cfg.data_size] = '\0';
    if (cfg.stream) {
        for (i = 0; i < sizeof(source_tab); i++)
            source_tab[i] = VALUE_PATTERN[i % PATTERN_LEN];
    }

    /* Fail early and clearly if the server is not there. */
    if (!server_info_read(&cfg, &si0, err, sizeof(err)))
        die_run("%s%s", err, cfg.tls ? "" : " (if the server speaks only TLS: --tls)");
    cfg.cluster = cfg.cluster_forced || si0.cluster_enabled;
    if (!cfg.cluster && cfg.read_policy > RCP_READ_MASTER_ONLY)
        die_run("--read-policy: %s:%d is not a cluster node (cluster_enabled:0)", cfg.host,
                cfg.port);
    if (cfg.read_policy < 0)
        cfg.read_policy = RCP_READ_MASTER_ONLY;
    if (!cfg.cluster && cfg.cache_bytes)
        die_usage("--client-cache-bytes: %s:%d is not a cluster node (cluster_enabled:0); "
                  "the cache is an rcp_cluster option", cfg.host, cfg.port);
    if (!cfg.cluster && cfg.writer_rate)
        die_usage("--writer-rate: %s:%d is not a cluster node (cluster_enabled:0); the "
                  "writer uses an rcp_cluster handle of its own", cfg.host, cfg.port);
    if (cfg.cluster) {
        map = malloc(sizeof(*map));
        if (!map)
            die_run("out of memory");
        if (!slotmap_init(map, cfg.host, cfg.port, cfg.user, cfg.password, err, sizeof(err)))
            die_run("cluster mode: %s", err);
        b.map = map;
        res.cluster = true;
        count_roles(map, &res.masters, &res.replicas);
        if (res.masters == 0)
            die_run("cluster mode: CLUSTER SLOTS on %s:%d names no master", cfg.host, cfg.port);
        fprintf(stderr, PROG ": cluster mode: %u masters, %u replicas (seed %s:%d)\n",
                res.masters, res.replicas, cfg.host, cfg.port);
    }
    if (cfg.preload && cfg.cluster)
        preload_cluster(&cfg, map, cfg.key_prefix, cfg.key_min, cfg.key_max, b.value,
                        cfg.data_size);
    else if (cfg.preload)
        preload(&cfg, cfg.key_prefix, cfg.key_min, cfg.key_max, b.value, cfg.data_size);
    if (cfg.big_size) {
        /* The big thread's keys exist before the run, so that its GETs
         * move values rather than miss. */
        size_t n = strlen(cfg.key_prefix) + 5;

        b.big_prefix = malloc(n);
        b.big_value = malloc(cfg.big_size);
        if (!b.big_prefix || !b.big_value)
            die_run("out of memory");
        snprintf(b.big_prefix, n, "%sbig-", cfg.key_prefix);
        fill_pattern(b.big_value, cfg.big_size);
        if (cfg.cluster)
            preload_cluster(&cfg, map, b.big_prefix, 0, BIG_KEYS - 1, b.big_value,
                            cfg.big_size);
        else
            preload(&cfg, b.big_prefix, 0, BIG_KEYS - 1, b.big_value, cfg.big_size);
    }

    if (cfg.client == CLIENT_RCPIPE) {
        rcp_conn_options o; /* kept in b.opts for --event-loop's per-thread handles */

        rcp_conn_options_init(&o);
        o.host = cfg.host;
        o.port = cfg.port;
        o.username = cfg.user;
        o.password = cfg.password;
        if (cfg.io_threads_set)
            o.io_threads = cfg.io_threads;
        if (cfg.batch_delay_set)
            o.batch_delay_us = cfg.batch_delay_us;
        if (cfg.no_fast_path)
            o.fast_path = 0;
        if (cfg.cork)
            o.cork = 1;
        if (cfg.spare_conns >= 0)
            o.spare_conns = cfg.spare_conns;
        if (cfg.tls) {
            o.tls = 1;
            o.tls_ca_file = cfg.tls_s.ca_file;
            o.tls_cert_file = cfg.tls_s.cert_file;
            o.tls_key_file = cfg.tls_s.key_file;
            o.tls_server_name = cfg.tls_s.sni;
            o.tls_insecure_skip_verify = cfg.tls_s.skip_verify;
        }
        res.io_threads = o.io_threads;
        res.batch_delay_us = o.batch_delay_us;
        res.fast_path = o.fast_path;
        res.cork = o.cork;
        err[0] = '\0';
        b.opts = o;
        snprintf(b.seeds, sizeof(b.seeds), strchr(cfg.host, ':') ? "[%s]:%d" : "%s:%d",
                 cfg.host, cfg.port);
        rcp_cluster_options_init(&b.copts);
        b.copts.seeds = b.seeds;
        b.copts.read_policy = cfg.read_policy;
        b.copts.client_cache_bytes = cfg.cache_bytes;
        if (cfg.cache_ttl_ms)
            b.copts.client_cache_ttl_ms = cfg.cache_ttl_ms;
        res.cache_ttl_ms = b.copts.client_cache_ttl_ms;
        if (cfg.bulk_pool >= 0)
            b.copts.bulk_pool = cfg.bulk_pool;
        if (cfg.bulk_threshold)
            b.copts.bulk_threshold = cfg.bulk_threshold;
        if (cfg.event_loop) {
            /* each worker opens its own handle on its own loop */
        } else if (cfg.cluster) {
            rcp_cluster_options co = b.copts;
            int rc;

            co.node = &o; /* host/port ignored there */
            rc = rcp_cluster_open(&co, &b.cluster, err, sizeof(err));
            if (rc != RCP_OK) {
                if (err[0])
                    die_run("rcp_cluster_open: %s (%s)", err, rcp_strerror(rc));
                die_run("rcp_cluster_open %s: %s", b.seeds, rcp_strerror(rc));
            }
            if (!b.cluster)
                die_run("rcp_cluster_open returned RCP_OK without a handle");
        } else {
            int rc = rcp_conn_open(&o, &b.conn, err, sizeof(err));

            if (rc != RCP_OK) {
                if (err[0])
                    die_run("rcp_conn_open: %s (%s)", err, rcp_strerror(rc));
                die_run("rcp_conn_open %s:%d: %s", cfg.host, cfg.port, rcp_strerror(rc));
            }
            if (!b.conn)
                die_run("rcp_conn_open returned RCP_OK without a handle");
        }
    }

    if (cfg.writer_rate) {
        wr.b = &b;
        wr.kw.b = &b;
        wr.kw.rng = rng_seed(0x77726974ull ^ cfg.run_seed); /* not any worker's keys */
        atomic_init(&wr.stop, false);
        writer_open(&cfg, &wr);
    }

    pthread_mutex_init(&b.series_mu, NULL);
    b.workers = calloc(cfg.threads, sizeof(*b.workers));
    if (!b.workers)
        die_run("out of memory");
    if (pthread_barrier_init(&b.ready, NULL, cfg.threads + 1) != 0 ||
        pthread_barrier_init(&b.go, NULL, cfg.threads + 1) != 0)
        die_run("pthread_barrier_init failed");
    pthread_mutex_init(&b.mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b.cv, &ca);
    pthread_condattr_destroy(&ca);

    /* Workers need little stack; keep 4096 of them cheap. */
    pthread_attr_init(&ta);
    pthread_attr_setstacksize(&ta, 512 * 1024);
    for (i = 0; i < cfg.threads; i++) {
        worker *w = &b.workers[i];
        int rc;

        w->b = &b;
        w->index = i;
        w->big = cfg.big_size && i == 0;
        w->prefix = w->big ? b.big_prefix : cfg.key_prefix;
        w->plen = strlen(w->prefix);
        w->value = w->big ? b.big_value : b.value;
        w->vsize = w->big ? cfg.big_size : cfg.data_size;
        atomic_init(&w->done, 0);
        atomic_init(&w->lat_sum_ns, 0);
        atomic_init(&w->done_head, NULL);
        atomic_init(&w->pushed, 0);
        atomic_init(&w->wake_at, 0);
        hist_init(&w->set_h);
        hist_init(&w->get_h);
        hist_init(&w->cur_h);
        w->rng = rng_seed(i ^ cfg.run_seed);
        {
            uint64_t range = cfg.key_max - cfg.key_min + 1;

            w->seq_off = range >= cfg.threads ? range / cfg.threads * i : i % range;
        }
        if (sem_init(&w->sem, 0, 0) != 0)
            die_run("sem_init failed: %s", strerror(errno));
        w->sem_ok = true;
        if (pthread_mutex_init(&w->cb_mu, NULL) != 0)
            die_run("pthread_mutex_init failed");
        w->cb_mu_ok = true;
        /* --refill callback: the callbacks run on rcpipe's I/O thread(s)
         * while the worker sends its first window */
        w->cb_lock = cfg.refill_callback && !cfg.event_loop;
        rc = pthread_create(&w->tid, &ta, worker_main, w);
        if (rc != 0)
            /* The barriers count on every thread: no clean way back. */
            die_run("cannot start thread %u of %u: %s", i + 1, cfg.threads, strerror(rc));
        started++;
    }
    pthread_attr_destroy(&ta);

    pthread_barrier_wait(&b.ready);
    for (i = 0; i < cfg.threads; i++)
        if (b.workers[i].connect_failed)
            connect_failures++;
    if (connect_failures)
        atomic_store(&b.stop, true);

    /* "Before" snapshot: the workers are all parked on the go barrier. */
    if (!connect_failures &&
        !(map ? cluster_info_read(&cfg, map, &ci0, err, sizeof(err))
              : server_info_read(&cfg, &si0, err, sizeof(err)))) {
        fprintf(stderr, PROG ": %s\n", err);
        atomic_store(&b.stop, true);
        connect_failures = 1;
    }
    if ((b.conn || b.cluster) && !lib_snap_read(&b, &st0))
        stats_ok = false;
    if (cfg.event_loop && !connect_failures && !lib_snap_own(&b, false, &st0))
        stats_ok = false;
    u0 = usage_now();
    start = now_ns();
    b.start_ns = start;
    atomic_store(&alloc_counting, cfg.count_allocs);
    if (wr.cl && !connect_failures) {
        int rc = pthread_create(&wr.tid, NULL, writer_main, &wr);

        if (rc != 0) /* a run without its writer would measure something else */
            die_run("cannot start the writer thread: %s", strerror(rc));
        writer_started = true;
    }
    pthread_barrier_wait(&b.go);

    if (!supervise(&b, start))
        report_hang(&b);
    end = start;
    for (i = 0; i < started; i++) {
        pthread_join(b.workers[i].tid, NULL);
        if (b.workers[i].end_ns > end)
            end = b.workers[i].end_ns;
    }
    if (writer_started) { /* the workers are done: so is the writer */
        atomic_store(&wr.stop, true);
        pthread_join(wr.tid, NULL);
        res.writer_ops = wr.ops;
        res.writer_errors = wr.errors;
        if (wr.errors)
            fprintf(stderr, PROG ": writer: %" PRIu64 " errors, first: %s\n", wr.errors,
                    wr.first_error);
    }
    atomic_store(&alloc_counting, false);
    res.allocs = atomic_load(&alloc_calls);
    res.peak_rss_kb = peak_rss_kb();

    if (connect_failures) {
        for (i = 0; i < cfg.threads; i++)
            if (b.workers[i].connect_failed) {
                fprintf(stderr, PROG ": %s client, thread %u: %s\n",
                        cfg.client == CLIENT_CLASSIC ? "classic" : "rcpipe", i,
                        b.workers[i].first_error);
                break;
            }
        for (i = 0; i < cfg.threads; i++)
            if (b.workers[i].rc)
                bconn_free(b.workers[i].rc);
        rcp_conn_close(b.conn);
        rcp_cluster_close(b.cluster);
        rcp_cluster_close(wr.cl);
        die_run("%u of %u threads could not start their run", connect_failures, cfg.threads);
    }

    /* "After" snapshot. */
    u1 = usage_now();
    if ((b.conn || b.cluster) && !lib_snap_read(&b, &st1))
        stats_ok = false;
    if (cfg.event_loop && !lib_snap_own(&b, true, &st1))
        stats_ok = false;
    if (map) {
        res.server_ok = cluster_info_read(&cfg, map, &ci1, err, sizeof(err));
        if (res.server_ok) {
            si0 = ci0.masters;
            si1 = ci1.masters;
            res.replicas_ok = ci0.replicas_ok && ci1.replicas_ok;
            res.replica_cpu_us = ((ci1.replicas.cpu_user + ci1.replicas.cpu_sys) -
                                  (ci0.replicas.cpu_user + ci0.replicas.cpu_sys)) * 1e6;
            res.replica_commands = ci1.replicas.commands - ci0.replicas.commands;
        }
    } else {
        res.server_ok = server_info_read(&cfg, &si1, err, sizeof(err));
    }
    if (!res.server_ok)
        fprintf(stderr, PROG ": after the run: %s\n", err);

    hist_init(&all);
    hist_init(&sets);
    hist_init(&gets);
    hist_init(&big);
    res.big_h = &big;
    for (i = 0; i < cfg.threads; i++) {
        worker *w = &b.workers[i];

        if (w->first_error[0] && printed_errors < 5) {
            fprintf(stderr, PROG ": thread %u: %" PRIu64 " errors, first: %s\n", i, w->errors,
                    w->first_error);
            printed_errors++;
        }
        res.errors += w->errors;
        if (w->big) { /* on its own: the table is the small requests' */
            hist_merge(&big, &w->set_h);
            hist_merge(&big, &w->get_h);
            res.big_sets = w->set_ops;
            res.big_gets = w->get_ops;
            res.big_ops = w->set_ops + w->get_ops;
            res.big_hits = w->hits;
            res.big_misses = w->misses;
            res.big_value_bytes = w->value_bytes;
            continue;
        }
        hist_merge(&sets, &w->set_h);
        hist_merge(&gets, &w->get_h);
        res.set_ops += w->set_ops;
        res.get_ops += w->get_ops;
        res.hits += w->hits;
        res.sleeps += w->sleeps;
        res.misses += w->misses;
        res.set_bytes += w->set_bytes;
        res.get_bytes += w->get_bytes;
        res.value_bytes += w->value_bytes;
    }
    hist_merge(&all, &sets);
    hist_merge(&all, &gets);
    res.all = &all;
    res.sets = &sets;
    res.gets = &gets;
    res.ops = res.set_ops + res.get_ops;
    res.elapsed_s = (double)(end - start) / 1e9;
    res.series = b.series;
    res.series_n = b.series_n;
    res.series_truncated = b.series_truncated;
    res.series_len = res.elapsed_s > 1e-3 ? (size_t)ceil(res.elapsed_s - 1e-3) : 0;
    if (res.series_len > MAX_SERIES)
        res.series_len = MAX_SERIES;
    /* Requests finished in the last fraction of a millisecond count in the
     * last whole second rather than in a second of their own. */
    for (i = (unsigned)res.series_len; res.series_len && i < b.series_n; i++)
        hist_merge(&b.series[res.series_len - 1], &b.series[i]);
    if (res.server_ok) {
        res.server_commands = si1.commands - si0.commands;
        res.master_cpu_us = ((si1.cpu_user + si1.cpu_sys) - (si0.cpu_user + si0.cpu_sys)) * 1e6;
        res.server_cpu_us_per_op = ratio_or_nan(res.master_cpu_us, (double)res.server_commands);
        res.server_proc_cpu_us_per_op =
            si0.proc_ok && si1.proc_ok
                ? ratio_or_nan((si1.proc_cpu - si0.proc_cpu) * 1e6, (double)res.server_commands)
                : NAN;
    }
    res.client_cpu_us_per_op = ratio_or_nan((u1.cpu_s - u0.cpu_s) * 1e6, (double)res.ops);
    res.ctx_switches_per_op = ratio_or_nan((double)(u1.ctxsw - u0.ctxsw), (double)res.ops);
    for (i = 0; i < cfg.threads; i++) {
        res.moved += b.workers[i].moved;
        res.ask += b.workers[i].ask;
    }
    if (map && cfg.client == CLIENT_CLASSIC)
        res.refreshes = atomic_load(&map->reloads);
    if ((b.conn || b.cluster || cfg.event_loop) && !stats_ok)
        fprintf(stderr, PROG ": reading the library's stats failed: library counters not "
                "reported\n");
    if ((b.conn || b.cluster || cfg.event_loop) && stats_ok) {
        const rcp_conn_stats *s0 = &st0.conn, *s1 = &st1.conn;
        uint64_t lib_requests;

        res.lib_ok = true;
        res.lib.requests = s1->requests - s0->requests;
        res.lib.replies = s1->replies - s0->replies;
        res.lib.batches = s1->batches - s0->batches;
        res.lib.commands_written = s1->commands_written - s0->commands_written;
        res.lib.write_calls = s1->write_calls - s0->write_calls;
        res.lib.read_calls = s1->read_calls - s0->read_calls;
        res.lib.fast_path = s1->fast_path - s0->fast_path;
        res.lib.futex_wakes = s1->futex_wakes - s0->futex_wakes;
        res.lib.loop_wakes = s1->loop_wakes - s0->loop_wakes;
        res.lib.caller_writes = s1->caller_writes - s0->caller_writes;
        res.lib.leads = s1->leads - s0->leads;
        res.lib.caller_replies = s1->caller_replies - s0->caller_replies;
        res.lib.corked = s1->corked - s0->corked;
        res.lib.spare_requests = s1->spare_requests - s0->spare_requests;
        lib_requests = res.lib.requests;
        if (b.cluster || (cfg.event_loop && cfg.cluster)) {
            const rcp_cluster_stats *c0 = &st0.cl, *c1 = &st1.cl;

            res.cl_ok = true;
            res.lib_nodes = st1.nodes;
            res.cl.requests = c1->requests - c0->requests;
            res.cl.moved = c1->moved - c0->moved;
            res.cl.ask = c1->ask - c0->ask;
            res.cl.retries_tryagain = c1->retries_tryagain - c0->retries_tryagain;
            res.cl.retries_clusterdown = c1->retries_clusterdown - c0->retries_clusterdown;
            res.cl.retries_loading = c1->retries_loading - c0->retries_loading;
            res.cl.retries_masterdown = c1->retries_masterdown - c0->retries_masterdown;
            res.cl.retries_not_sent = c1->retries_not_sent - c0->retries_not_sent;
            res.cl.retries_io = c1->retries_io - c0->retries_io;
            res.cl.retries_readonly = c1->retries_readonly - c0->retries_readonly;
            res.cl.refreshes_periodic = c1->refreshes_periodic - c0->refreshes_periodic;
            res.cl.refreshes_forced = c1->refreshes_forced - c0->refreshes_forced;
            res.cl.refresh_failures = c1->refresh_failures - c0->refresh_failures;
            res.cl.map_version = c1->map_version - c0->map_version;
            res.cl.bulk_requests = c1->bulk_requests - c0->bulk_requests;
            res.cl.nodes = c1->nodes;
            res.cl.cache_hits = c1->cache_hits - c0->cache_hits;
            res.cl.cache_misses = c1->cache_misses - c0->cache_misses;
            res.cl.cache_invalidations = c1->cache_invalidations - c0->cache_invalidations;
            res.cl.cache_evictions = c1->cache_evictions - c0->cache_evictions;
            res.cl.cache_bytes = c1->cache_bytes; /* gauges: what is held at the end */
            res.cl.cache_entries = c1->cache_entries;
            res.moved = res.cl.moved;
            res.ask = res.cl.ask;
            res.refreshes = res.cl.refreshes_periodic + res.cl.refreshes_forced;
            /* The node connections also carry the library's own traffic
             * (refreshes); the calls are what the cluster counted. */
            lib_requests = res.cl.requests;
        }
        res.futex_wakes_per_op = ratio_or_nan((double)res.lib.futex_wakes, (double)res.ops);
        res.loop_wakes_per_op = ratio_or_nan((double)res.lib.loop_wakes, (double)res.ops);
        res.commands_per_write =
            ratio_or_nan((double)res.lib.commands_written, (double)res.lib.batches);
        res.fast_path_fraction =
            ratio_or_nan((double)res.lib.fast_path, (double)res.lib.requests);
        if (lib_requests != res.ops + res.big_ops)
            fprintf(stderr, PROG ": note: the library counted %" PRIu64
                    " requests for %" PRIu64 " calls\n", lib_requests, res.ops + res.big_ops);
    }

    print_results(&cfg, &res);
    fflush(stdout);
    if (cfg.json_out)
        json_ok = write_json(&cfg, &res);

    for (i = 0; i < cfg.threads; i++) {
        worker *w = &b.workers[i];

        if (w->rc)
            bconn_free(w->rc);
        if (w->conns) {
            unsigned k;

            for (k = 0; k < SLOTMAP_MAX_NODES; k++)
                if (w->conns[k])
                    bconn_free(w->conns[k]);
            free(w->conns);
        }
    }
    rcp_conn_close(b.conn);
    rcp_cluster_close(b.cluster);
    rcp_cluster_close(wr.cl);
    /* Only now: a callback may still be returning until the handle is closed. */
    for (i = 0; i < cfg.threads; i++) {
        worker *w = &b.workers[i];

        if (w->sem_ok)
            sem_destroy(&w->sem);
        if (w->cb_mu_ok)
            pthread_mutex_destroy(&w->cb_mu);
        free(w->reqs);
        free(w->free_list);
        free(w->keys);
    }
    free(b.series);
    pthread_mutex_destroy(&b.series_mu);
    if (map) {
        slotmap_destroy(map);
        free(map);
    }
    pthread_barrier_destroy(&b.ready);
    pthread_barrier_destroy(&b.go);
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.mu);
    free(b.workers);
    munmap(b.value, cfg.data_size + 1);
    free(b.big_value);
    free(b.big_prefix);
    free(cfg.host);
    bconn_tls_cleanup();

    if (res.errors) {
        fprintf(stderr, PROG ": %" PRIu64 " of %" PRIu64 " requests failed\n", res.errors,
                res.ops);
        return EXIT_RUN_FAILED;
    }
    if (res.writer_errors) {
        fprintf(stderr, PROG ": %" PRIu64 " of the writer's %" PRIu64 " SETs failed\n",
                res.writer_errors, res.writer_ops + res.writer_errors);
        return EXIT_RUN_FAILED;
    }
    if (interrupted || !json_ok || !res.server_ok)
        return EXIT_RUN_FAILED;
    return 0;
}
