/* tests/common/tls.c: the TLS test certificates, made once per process
 * by tests/scripts/tls-certs.sh (the openssl command) in a temporary
 * directory removed at exit, or taken from RCPTEST_TLS_CERTS_DIR when the
 * servers were started with them before the test (the chaos soak). No
 * private key is committed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static char certs_dir[1024];
static pid_t certs_owner;

static void certs_cleanup(void)
{
    if (certs_dir[0] && getpid() == certs_owner)
        rcptest_remove_tree(certs_dir);
}

const char *rcptest_tls_certs(char *err, size_t errlen)
{
    char cmd[2200];
    int st;
    const char *given = getenv("RCPTEST_TLS_CERTS_DIR");
    if (certs_dir[0])
        return certs_dir;
    if (given && given[0]) {
        /* Made already, by whoever started the servers (run-chaos.sh). */
        snprintf(certs_dir, sizeof certs_dir, "%s", given);
        return certs_dir;
    }
    if (rcptest_mkdtemp("rcp-tls", certs_dir, sizeof certs_dir, err, errlen) != 0) {
        certs_dir[0] = '\0';
        return NULL;
    }
    certs_owner = getpid();
    atexit(certs_cleanup);
    snprintf(cmd, sizeof cmd, "'%s' '%s' >'%s/make.log' 2>&1", RCPTEST_TLS_CERTS_SCRIPT,
             certs_dir, certs_dir);
    st = system(cmd);
    if (st != 0) {
        rcptest_fmt_err(err, errlen, "%s failed (status %d; see %s/make.log)",
                        RCPTEST_TLS_CERTS_SCRIPT, st, certs_dir);
        return NULL;
    }
    return certs_dir;
}

const char *rcptest_tls_file(const char *name)
{
    static char paths[16][1100];
    static int next;
    char *p = paths[next++ % 16];
    snprintf(p, sizeof paths[0], "%s/%s", certs_dir, name);
    return p;
}
