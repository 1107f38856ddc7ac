/* tests/allocfail/failalloc.c: fails the Nth allocation the library makes.
 *
 * Linked into every unit test (and the sim tests), it does nothing unless
 * RCP_FAIL_ALLOC_AT is set in the environment. With RCP_FAIL_ALLOC_AT=N
 * (N >= 1), a constructor installs rcpipe's public allocator hooks
 * (rcp_set_allocator) with wrappers that count every malloc, calloc and
 * realloc and return NULL for the Nth one only (curl's torture mode: one
 * failure per run, so the recovery path after it is exercised too).
 *
 * The runner (run-allocfail.sh) must know whether the Nth allocation was
 * reached, or it cannot tell when to stop: each process writes "armed"
 * when it installs the hooks and "hit N" when it fails the allocation, one
 * write(2) each on an O_APPEND descriptor of RCP_FAIL_ALLOC_LOG (safe from
 * any thread, and from check's forked test children, which inherit the
 * count their parent had reached at fork time: each test case is counted
 * from the same start). A process that ends through exit() also writes
 * "count K", the allocations it made. The failure is also named on
 * stderr, so that a test's own output says where the injected failure was
 * (with RCP_FAIL_ALLOC_BT=1, with a backtrace of the failing call).
 *
 * What is not covered: hiredis 0.14's own allocations (reader, its buffer,
 * command formatting) go to the C library directly; a test that sets its
 * own allocator replaces these hooks until the end of its process (or
 * check child). */
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "rcpipe.h"

static long fail_at;
static atomic_long count;
static int log_fd = -1;
static int want_bt;

static void say(const char *what, long n)
{
    char line[96];
    int len = snprintf(line, sizeof line, "%s %ld pid %ld\n", what, n, (long)getpid());
    if (len <= 0)
        return;
    if (log_fd >= 0 && write(log_fd, line, (size_t)len) < 0) {
        /* Nothing to do: the runner then sees no report and says so. */
    }
    if (n > 0 && what[0] == 'h')
        fprintf(stderr, "failalloc: failing allocation #%ld (pid %ld)\n", n, (long)getpid());
}

/* 1 if this allocation is the one to fail. */
static int fail_this(void)
{
    long k = atomic_fetch_add(&count, 1) + 1;
    if (k != fail_at)
        return 0;
    say("hit", k);
    if (want_bt) {
        /* Where the failure was injected, for the run's log (symbolize
         * with addr2line -e EXE -f ADDR for static functions). */
        void *frames[24];
        backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
    }
    return 1;
}

static void *fa_malloc(size_t n) { return fail_this() ? NULL : malloc(n); }
static void *fa_calloc(size_t n, size_t size) { return fail_this() ? NULL : calloc(n, size); }
static void *fa_realloc(void *p, size_t n) { return fail_this() ? NULL : realloc(p, n); }
static void fa_free(void *p) { free(p); }

__attribute__((constructor)) static void failalloc_init(void)
{
    static const rcp_allocator hooks = {fa_malloc, fa_calloc, fa_realloc, fa_free};
    const char *at = getenv("RCP_FAIL_ALLOC_AT");
    const char *log = getenv("RCP_FAIL_ALLOC_LOG");
    char *end;

    if (!at || !*at)
        return;
    fail_at = strtol(at, &end, 10);
    if (*end || fail_at < 1) {
        fprintf(stderr, "failalloc: RCP_FAIL_ALLOC_AT must be a number >= 1, not '%s'\n", at);
        exit(2);
    }
    if (getenv("RCP_FAIL_ALLOC_BT")) {
        void *warm[2];
        want_bt = 1;
        backtrace(warm, 2); /* loads the unwinder now, not inside a hook */
    }
    if (log && *log)
        log_fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (rcp_set_allocator(&hooks) != RCP_OK) {
        fprintf(stderr, "failalloc: rcp_set_allocator refused the hooks\n");
        exit(2);
    }
    say("armed", 0);
}

__attribute__((destructor)) static void failalloc_fini(void)
{
    if (fail_at > 0)
        say("count", atomic_load(&count));
}
