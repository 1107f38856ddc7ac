/* test_tls_disabled.c: in a build without TLS (-Dtls=disabled, or no
 * OpenSSL), every TLS option is refused at open with RCP_ERR_UNSUPPORTED
 * and a message saying so, for a connection and for a cluster's node
 * options; nothing is connected. Registered only in such a build. */
#include <check.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

static void expect_unsupported(const rcp_conn_options *node, const char *name)
{
    rcp_cluster_options co;
    rcp_cluster *cl = NULL;
    rcp_conn *c = NULL;
    char err[512] = "";
    int rc = rcp_conn_open(node, &c, err, sizeof err);
    ck_assert_msg(rc == RCP_ERR_UNSUPPORTED && c == NULL, "%s: open gave %s: %s", name,
                  rcp_err_name(rc), err);
    ck_assert_msg(strstr(err, name) && strstr(err, "no TLS"), "message: %s", err);
    rcp_cluster_options_init(&co);
    co.seeds = "127.0.0.1:1";
    co.node = node;
    rc = rcp_cluster_open(&co, &cl, err, sizeof err);
    ck_assert_msg(rc == RCP_ERR_UNSUPPORTED && cl == NULL, "%s: cluster open gave %s: %s", name,
                  rcp_err_name(rc), err);
    ck_assert_msg(strstr(err, "no TLS"), "message: %s", err);
}

START_TEST(tls_options_unsupported)
{
    rcp_conn_options o;
    rcp_conn_options_init(&o);
    o.port = 1; /* never reached */
    o.tls = 1;
    expect_unsupported(&o, "tls");
    o.tls = 0;
    o.tls_ca_file = "/etc/ssl/certs/ca-certificates.crt";
    expect_unsupported(&o, "tls_ca_file");
    o.tls_ca_file = NULL;
    o.tls_insecure_skip_verify = 1;
    expect_unsupported(&o, "tls_insecure_skip_verify");
}
END_TEST

static void add_tests(TCase *tc)
{
    RCPTEST_ADD(tc, tls_options_unsupported);
}

int main(void)
{
    return rcpt_main_case("tls-disabled", "tls-disabled", 30, add_tests);
}
