/* Unit test against a real server: rcp_keyslot must agree with CLUSTER
 * KEYSLOT of a cluster-enabled redis-server for thousands of random binary
 * keys (NUL bytes, braces, CR/LF). The server is started by the project's
 * tests/scripts/redis-node.sh (RCP_SOURCE_ROOT tells where it is) in a
 * fixture that runs in the parent process, so it is stopped even when the
 * test fails. No redis-server is a failure, not a skip: the check exists to
 * prove the hashing against the reference. */
#include <check.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "rcpipe.h"

#define NKEYS 3000

static int port, pid;
static char dir[512], script[1024], setup_error[1200];

/* Appends s to dst in single quotes, safe for sh. */
static void shell_quote(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(dst);
    if (n + 1 < cap)
        dst[n++] = '\'';
    for (; *s && n + 5 < cap; s++) {
        if (*s == '\'') {
            memcpy(dst + n, "'\\''", 4);
            n += 4;
        } else {
            dst[n++] = *s;
        }
    }
    if (n + 1 < cap)
        dst[n++] = '\'';
    dst[n] = '\0';
}

static void start_server(void)
{
    const char *root = getenv("RCP_SOURCE_ROOT");
    char cmd[2048] = "";
    FILE *p;

    port = pid = 0;
    if (!root || !*root) {
        snprintf(setup_error, sizeof setup_error, "RCP_SOURCE_ROOT is not set");
        return;
    }
    snprintf(script, sizeof script, "%s/tests/scripts/redis-node.sh", root);
    shell_quote(cmd, sizeof cmd, script);
    strncat(cmd, " start --cluster-enabled yes --cluster-config-file nodes.conf",
            sizeof cmd - strlen(cmd) - 1);
    p = popen(cmd, "r");
    if (!p || fscanf(p, "%d %d %511s", &port, &pid, dir) != 3 || port <= 0 || pid <= 0) {
        snprintf(setup_error, sizeof setup_error,
                 "could not start a cluster-enabled redis-server with %s", script);
        port = pid = 0;
    }
    if (p)
        pclose(p);
}

static void stop_server(void)
{
    char cmd[2048] = "", arg[64];

    if (pid <= 0)
        return;
    shell_quote(cmd, sizeof cmd, script);
    snprintf(arg, sizeof arg, " stop %d ", pid);
    strncat(cmd, arg, sizeof cmd - strlen(cmd) - 1);
    shell_quote(cmd, sizeof cmd, dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_keyslot_server: stopping pid %d failed\n", pid);
    pid = 0;
}

START_TEST(matches_cluster_keyslot)
{
    static char keys[NKEYS][48];
    static size_t lens[NKEYS];
    static const char special[] = {'{', '}', '\0', '\r', '\n', 'a', '{', '}'};
    unsigned seed = 20240601;
    redisContext *c;
    int i, mismatches = 0;

    ck_assert_msg(port > 0, "%s", setup_error);
    c = redisConnect("127.0.0.1", port);
    ck_assert_msg(c && !c->err, "connect to port %d: %s", port, c ? c->errstr : "no memory");

    for (i = 0; i < NKEYS; i++) {
        size_t j;
        seed = seed * 1103515245u + 12345u;
        lens[i] = (seed >> 16) % sizeof keys[i];
        for (j = 0; j < lens[i]; j++) {
            seed = seed * 1103515245u + 12345u;
            if ((seed >> 16) % 3 == 0)
                keys[i][j] = special[(seed >> 20) % sizeof special];
            else
                keys[i][j] = (char)(seed >> 17);
        }
        ck_assert_int_eq(redisAppendCommand(c, "CLUSTER KEYSLOT %b", keys[i], lens[i]),
                         REDIS_OK);
    }
    for (i = 0; i < NKEYS; i++) {
        redisReply *r = NULL;
        unsigned mine = rcp_keyslot(keys[i], lens[i]);
        ck_assert_int_eq(redisGetReply(c, (void **)&r), REDIS_OK);
        ck_assert_msg(r && r->type == REDIS_REPLY_INTEGER, "key %d: %s", i,
                      r && r->str ? r->str : "not an integer");
        if ((long long)mine != r->integer) {
            if (mismatches++ < 5)
                fprintf(stderr, "key %d (len %zu): rcp_keyslot %u, server %lld\n", i, lens[i],
                        mine, r->integer);
        }
        freeReplyObject(r);
    }
    redisFree(c);
    ck_assert_int_eq(mismatches, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("keyslot_server");
    TCase *tc = rcptest_tcase(s, "core", 60);
    int failed;

    /* Unchecked fixtures run in the parent: the server is stopped even if
     * the test's child process dies. */
    tcase_add_unchecked_fixture(tc, start_server, stop_server);
    RCPTEST_ADD(tc, matches_cluster_keyslot);
    failed = rcptest_run(s);
    stop_server(); /* a no-op unless the fixture's teardown did not run */
    return failed ? 1 : 0;
}
