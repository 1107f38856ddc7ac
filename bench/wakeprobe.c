/* bench/wakeprobe.c: the machine's wake-bound ceiling for sync callers.
 *
 * T caller threads each hand one request at a time to a single responder
 * thread and sleep on a futex until it is answered; the responder takes
 * everything queued at once, "answers" each request (no sockets, no
 * server: the answer is a number) and wakes its caller. This is what any
 * design in which many sync threads share one connection must at least
 * pay per request: one futex wake and one futex wait (the responder's own
 * sleep is amortised over a batch). No sync client can beat it on this
 * machine, so rcp-bench's sync numbers on one node are read against it
 * (docs/perf.md), measured in the same series.
 *
 *   wakeprobe [-t THREADS] [--test-time SECS] [--json-out-file FILE]
 *
 * Prints ops/s and wakes per request; exit 0, or 2 on bad options. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 4096

enum { W_PENDING = 0, W_SLEEPING = 1, W_DONE = 2 };

struct caller {
    pthread_t th;
    atomic_uint state;
    uint64_t request, answer;
    uint64_t ops;
    struct caller *next; /* in the responder's queue */
} __attribute__((aligned(64)));

static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static struct caller *qhead, **qtail = &qhead;
static atomic_uint qword;   /* the responder sleeps on it: 0 idle-asleep, 1 work or awake */
static atomic_int stop;
static atomic_ulong wakes;

static void fwait(atomic_uint *w, unsigned v)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void fwake(atomic_uint *w)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    atomic_fetch_add_explicit(&wakes, 1, memory_order_relaxed);
}

static void *caller_main(void *arg)
{
    struct caller *c = arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        int was_empty;
        c->request++;
        atomic_store(&c->state, W_PENDING);
        pthread_mutex_lock(&qmu);
        was_empty = qhead == NULL;
        c->next = NULL;
        *qtail = c;
        qtail = &c->next;
        pthread_mutex_unlock(&qmu);
        if (was_empty && atomic_exchange(&qword, 1) == 0)
            fwake(&qword);
        for (;;) {
            unsigned v = atomic_load(&c->state), expect = W_PENDING;
            if (v == W_DONE)
                break;
            if (v == W_PENDING && !atomic_compare_exchange_strong(&c->state, &expect, W_SLEEPING))
                continue;
            fwait(&c->state, W_SLEEPING);
        }
        if (c->answer != c->request + 1) {
            fprintf(stderr, "wakeprobe: wrong answer\n");
            abort();
        }
        c->ops++;
    }
    return NULL;
}

static void *responder_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct caller *batch;
        pthread_mutex_lock(&qmu);
        batch = qhead;
        qhead = NULL;
        qtail = &qhead;
        if (!batch)
            atomic_store(&qword, 0);
        pthread_mutex_unlock(&qmu);
        if (!batch) {
            if (atomic_load(&stop) == 2)
                return NULL;
            fwait(&qword, 0);
            continue;
        }
        while (batch) {
            struct caller *c = batch;
            batch = c->next; /* read before the caller may go on */
            c->answer = c->request + 1;
            if (atomic_exchange(&c->state, W_DONE) == W_SLEEPING)
                fwake(&c->state);
        }
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    int threads = 64, i;
    double secs = 5, t0, t1;
    const char *json = NULL;
    struct caller *cs;
    pthread_t resp;
    uint64_t ops = 0;

    for (i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--test-time") && i + 1 < argc)
            secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--json-out-file") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: wakeprobe [-t THREADS] [--test-time SECS] [--json-out-file FILE]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > MAX_THREADS || !(secs > 0 && secs <= 3600)) {
        fprintf(stderr, "wakeprobe: -t must be 1..%d, --test-time in (0, 3600]\n", MAX_THREADS);
        return 2;
    }
    cs = aligned_alloc(64, sizeof *cs * (size_t)threads);
    if (!cs)
        return 1;
    memset(cs, 0, sizeof *cs * (size_t)threads);
    pthread_create(&resp, NULL, responder_main, NULL);
    t0 = now_s();
    for (i = 0; i < threads; i++)
        pthread_create(&cs[i].th, NULL, caller_main, &cs[i]);
    usleep((useconds_t)(secs * 1e6));
    atomic_store(&stop, 1);
    for (i = 0; i < threads; i++) {
        pthread_join(cs[i].th, NULL);
        ops += cs[i].ops;
    }
    t1 = now_s();
    atomic_store(&stop, 2);
    if (atomic_exchange(&qword, 1) == 0)
        fwake(&qword);
    pthread_join(resp, NULL);
    printf("wakeprobe: %d threads, %.0f ops/s, %.3f wakes/op (%llu requests in %.3f s)\n",
           threads, (double)ops / (t1 - t0), (double)atomic_load(&wakes) / (double)(ops ? ops : 1),
           (unsigned long long)ops, t1 - t0);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "wakeprobe: %s: %s\n", json, strerror(errno));
            return 1;
        }
        fprintf(f, "{\"client\": \"wakeprobe\", \"threads\": %d, \"ops_per_sec\": %.1f, \"ops\": %llu}\n",
                threads, (double)ops / (t1 - t0), (unsigned long long)ops);
        fclose(f);
    }
    free(cs);
    return 0;
}
