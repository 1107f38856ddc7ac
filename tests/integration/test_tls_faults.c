/* test_tls_faults.c: every TLS failure ends in a client error that names
 * its cause, within the connect deadline, never a hang: a CA that did not
 * sign the server's certificate, an expired certificate, a name mismatch,
 * a server that requires a client certificate we do not have, a server
 * killed or stopped mid-handshake, a plain-text server on the port we
 * speak TLS to (and TLS spoken to by a plain client), a server that dies
 * without close_notify, a version floor the server cannot meet; and the
 * option checks (each refusal names the option). tls_insecure_skip_verify
 * connects to anything, as it says. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

static rcpt_server srv;
static rcp_conn *conn;

static void teardown(void)
{
    rcpt_teardown(&srv, &conn);
}

/* Open must fail with code and a message holding every needle. */
static void expect_open_fails(const rcp_conn_options *o, int code, const char *n1, const char *n2)
{
    char err[1024] = "";
    int rc = rcp_conn_open(o, &conn, err, sizeof err);
    ck_assert_msg(rc == code, "open gave %s (%s), want %s", rcp_err_name(rc), err,
                  rcp_err_name(code));
    ck_assert_ptr_null(conn);
    ck_assert_msg(strstr(err, n1) != NULL, "'%s' not in: %s", n1, err);
    ck_assert_msg(n2 == NULL || strstr(err, n2) != NULL, "'%s' not in: %s", n2, err);
    fprintf(stderr, "refused as expected: %s\n", err); /* the causes, for the log */
}

static char addr_of(rcpt_server *s, char *buf, size_t len)
{
    snprintf(buf, len, "127.0.0.1:%d", s->port);
    return 0;
}

START_TEST(tls_wrong_ca)
{
    rcp_conn_options o;
    char addr[64];
    rcpt_tls_server_start_ok(&srv, "server", NULL);
    rcpt_tls_options(&o, &srv);
    o.tls_ca_file = rcptest_tls_file("other-ca.crt");
    addr_of(&srv, addr, sizeof addr);
    expect_open_fails(&o, RCP_ERR_CONNECT, "certificate did not verify", addr);
    /* ... unless verification is switched off, loudly. */
    o.tls_insecure_skip_verify = 1;
    conn = rcpt_conn_open_ok(&o);
}
END_TEST

START_TEST(tls_expired_certificate)
{
    rcp_conn_options o;
    rcpt_tls_server_start_ok(&srv, "expired", NULL);
    rcpt_tls_options(&o, &srv);
    expect_open_fails(&o, RCP_ERR_CONNECT, "certificate has expired", NULL);
}
END_TEST

START_TEST(tls_name_mismatch)
{
    rcp_conn_options o;
    rcpt_tls_server_start_ok(&srv, "wrongname", NULL);
    rcpt_tls_options(&o, &srv);
    /* The host is an address: checked against the certificate's IPs. */
    expect_open_fails(&o, RCP_ERR_CONNECT, "IP address mismatch", "verifying '127.0.0.1'");
    o.tls_server_name = "localhost";
    expect_open_fails(&o, RCP_ERR_CONNECT, "hostname mismatch", "verifying 'localhost'");
    /* The name the certificate is for: accepted. */
    o.tls_server_name = "other.example";
    conn = rcpt_conn_open_ok(&o);
}
END_TEST

/* TLS 1.3: the refusal is an alert after our side of the handshake (the
 * handshake's PING meets it); TLS 1.2: the handshake itself fails. */
START_TEST(tls_client_certificate_required)
{
    static const char *const extra[] = {"--tls-auth-clients", "yes", NULL};
    rcp_conn_options o;
    rcpt_tls_server_start_ok(&srv, "server", extra);
    rcpt_tls_options(&o, &srv);
    expect_open_fails(&o, RCP_ERR_CONNECT, "asked for a client certificate", NULL);
}
END_TEST

START_TEST(tls12_client_certificate_required)
{
    static const char *const extra[] = {"--tls-auth-clients", "yes", "--tls-protocols", "TLSv1.2",
                                        NULL};
    rcp_conn_options o;
    rcpt_tls_server_start_ok(&srv, "server", extra);
    rcpt_tls_options(&o, &srv);
    expect_open_fails(&o, RCP_ERR_CONNECT, "TLS handshake failed",
                      "asked for a client certificate");
}
END_TEST

START_TEST(tls_version_floor)
{
    static const char *const extra[] = {"--tls-protocols", "TLSv1.2", NULL};
    rcp_conn_options o;
    rcpt_tls_server_start_ok(&srv, "server", extra);
    rcpt_tls_options(&o, &srv);
    o.tls_min_version = 13;
    expect_open_fails(&o, RCP_ERR_CONNECT, "TLS handshake failed", NULL);
    o.tls_min_version = 12;
    conn = rcpt_conn_open_ok(&o);
}
END_TEST

/* A stopped server accepts the TCP connection (the kernel does) but never
 * answers the ClientHello: the connect deadline ends it. */
START_TEST(tls_stopped_mid_handshake)
{
    rcp_conn_options o;
    int64_t t0, ms;
    rcpt_tls_server_start_ok(&srv, "server", NULL);
    rcpt_tls_options(&o, &srv);
    o.connect_timeout_ms = 400;
    ck_assert_int_eq(rcpt_server_pause(&srv), 0);
    t0 = rcptest_now_ms();
    expect_open_fails(&o, RCP_ERR_CONNECT, "TLS handshake timed out", NULL);
    ms = rcptest_now_ms() - t0;
    ck_assert_msg(ms >= 350 && ms < rcptest_scale(1400), "open took %lld ms", (long long)ms);
}
END_TEST

typedef struct opener {
    rcp_conn_options o;
    int rc;
    char err[1024];
    int64_t ms;
} opener;

static void *open_main(void *p)
{
    opener *a = p;
    rcp_conn *c = NULL;
    int64_t t0 = rcptest_now_ms();
    a->rc = rcp_conn_open(&a->o, &c, a->err, sizeof a->err);
    a->ms = rcptest_now_ms() - t0;
    rcp_conn_close(c);
    return NULL;
}

/* Whether a TCP connection to 127.0.0.1:port is established (its client
 * side, in /proc/net/tcp: remote 0100007F:PORT, state 01). A stopped
 * server's kernel still accepts connections into its backlog. */
static int connected_to(int port)
{
    char line[512], want[32];
    int found = 0;
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        return 0;
    snprintf(want, sizeof want, "0100007F:%04X 01 ", port);
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, want) != NULL;
    fclose(f);
    return found;
}

/* Killed while our ClientHello waits: the failure comes at once (well
 * before the deadline), naming the close. */
START_TEST(tls_killed_mid_handshake)
{
    static opener a;
    pthread_t th;
    rcpt_tls_server_start_ok(&srv, "server", NULL);
    rcpt_tls_options(&a.o, &srv);
    a.o.connect_timeout_ms = 10000;
    ck_assert_int_eq(rcpt_server_pause(&srv), 0);
    pthread_create(&th, NULL, open_main, &a);
    /* Until the TCP connect is done (a slow sanitizer build may take more
     * than a moment to start the thread), then a moment for the hello. */
    for (int i = 0; i < 500 && !connected_to(srv.port); i++)
        rcptest_sleep_ms(10);
    rcptest_sleep_ms(100);
    ck_assert_int_eq(rcpt_server_kill(&srv), 0);
    pthread_join(th, NULL);
    ck_assert_msg(a.rc == RCP_ERR_CONNECT, "open gave %s: %s", rcp_err_name(a.rc), a.err);
    ck_assert_msg(strstr(a.err, "TLS handshake failed") != NULL, "cause: %s", a.err);
    ck_assert_msg(a.ms < 5000, "open took %lld ms", (long long)a.ms);
}
END_TEST

/* A plain-text server on the port we speak TLS to. */
START_TEST(tls_plain_server)
{
    rcp_conn_options o;
    rcpt_server_start_ok(&srv, NULL);
    rcpt_options(&o, &srv);
    o.tls = 1;
    o.tls_ca_file = rcptest_tls_file("ca.crt");
    o.connect_timeout_ms = 1000;
    expect_open_fails(&o, RCP_ERR_CONNECT, "TLS", "plain-text server");
}
END_TEST

/* A plain client on a TLS port: its first request fails with a client
 * error, never a hang. */
START_TEST(tls_plain_client)
{
    rcp_conn_options o;
    rcp_reply *r;
    char d[512];
    rcpt_tls_server_start_ok(&srv, "server", NULL);
    rcpt_options(&o, &srv);
    o.request_timeout_ms = 2000;
    o.client_name = "plain"; /* a handshake command: the connect itself meets it */
    expect_open_fails(&o, RCP_ERR_CONNECT, "", NULL);
    o.client_name = NULL;
    if (rcp_conn_open(&o, &conn, d, sizeof d) == RCP_OK) {
        r = rcp_conn_command(conn, "PING");
        ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err != RCP_ERR_SERVER &&
                          r->err != RCP_ERR_TIMEOUT,
                      "PING to a TLS port in plain text: %s", rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
}
END_TEST

/* A server killed -9 sends no close_notify: the loss is named so. */
static pthread_mutex_t lost_mu = PTHREAD_MUTEX_INITIALIZER;
static char lost_msg[512]; /* under lost_mu: written on the I/O thread */

static void on_event(const rcp_event *ev, void *data)
{
    (void)data;
    pthread_mutex_lock(&lost_mu);
    if (ev->type == RCP_EVENT_DISCONNECTED && !lost_msg[0])
        snprintf(lost_msg, sizeof lost_msg, "%s", ev->message);
    pthread_mutex_unlock(&lost_mu);
}

static int lost_copy(char *buf, size_t len)
{
    pthread_mutex_lock(&lost_mu);
    snprintf(buf, len, "%s", lost_msg);
    pthread_mutex_unlock(&lost_mu);
    return buf[0] != '\0';
}

START_TEST(tls_no_close_notify)
{
    rcp_conn_options o;
    rcp_reply *r;
    int64_t until;
    char msg[512];
    rcpt_tls_server_start_ok(&srv, "server", NULL);
    rcpt_tls_options(&o, &srv);
    o.event_cb = on_event;
    o.reconnect_min_ms = 1000;
    conn = rcpt_conn_open_ok(&o);
    r = rcp_conn_command(conn, "PING");
    rcp_reply_free(r);
    ck_assert_msg(!lost_copy(msg, sizeof msg), "disconnected before the kill: %s", msg);
    ck_assert_int_eq(rcpt_server_kill(&srv), 0);
    until = rcptest_now_ms() + rcptest_scale(5000);
    while (!lost_copy(msg, sizeof msg) && rcptest_now_ms() < until) {
        r = rcp_conn_command(conn, "PING");
        rcp_reply_free(r);
        rcptest_sleep_ms(20);
    }
    ck_assert_msg(strstr(msg, "close_notify") != NULL || strstr(msg, "reset") != NULL,
                  "disconnect cause: '%s'", msg);
}
END_TEST

/* The option checks: each refusal names the option, before any connect. */
START_TEST(tls_option_checks)
{
    rcp_conn_options o;
    rcp_conn_options_init(&o);
    o.port = 1; /* never reached */
    o.tls_ca_file = rcptest_tls_file("ca.crt");
    expect_open_fails(&o, RCP_ERR_INVALID, "tls_ca_file is set but tls is 0", NULL);
    o.tls = 1;
    o.tls_key_file = rcptest_tls_file("client.key");
    expect_open_fails(&o, RCP_ERR_INVALID, "tls_key_file is set without tls_cert_file", NULL);
    o.tls_key_file = NULL;
    o.tls_min_version = 11;
    expect_open_fails(&o, RCP_ERR_INVALID, "tls_min_version 11", NULL);
    o.tls_min_version = 0;
    o.tls_insecure_skip_verify = 2;
    expect_open_fails(&o, RCP_ERR_INVALID, "tls_insecure_skip_verify 2", NULL);
    o.tls_insecure_skip_verify = 0;
    o.tls_server_name = "";
    expect_open_fails(&o, RCP_ERR_INVALID, "tls_server_name is empty", NULL);
    o.tls_server_name = NULL;
    o.tls_ca_file = "/nonexistent/ca.crt";
    expect_open_fails(&o, RCP_ERR_INVALID, "cannot load the CA file '/nonexistent/ca.crt'", NULL);
    o.tls_ca_file = rcptest_tls_file("ca.crt");
    o.tls_cert_file = rcptest_tls_file("client.crt");
    o.tls_key_file = rcptest_tls_file("server.key");
    expect_open_fails(&o, RCP_ERR_INVALID, "cannot load the client key", "mismatch");
    o.tls_cert_file = o.tls_key_file = NULL;
    o.tls_ciphersuites = "NOT_A_SUITE";
    expect_open_fails(&o, RCP_ERR_INVALID, "tls_ciphersuites 'NOT_A_SUITE' refused", NULL);
    o.tls_ciphersuites = NULL;
    o.tls_ciphers = "NOT-A-CIPHER";
    expect_open_fails(&o, RCP_ERR_INVALID, "tls_ciphers 'NOT-A-CIPHER' refused", NULL);
}
END_TEST

/* A cluster handle refuses bad node TLS options at open too. */
START_TEST(tls_cluster_option_checks)
{
    rcp_cluster_options co;
    rcp_conn_options node;
    rcp_cluster *cl = NULL;
    char err[1024] = "";
    int rc;
    rcp_cluster_options_init(&co);
    rcp_conn_options_init(&node);
    co.seeds = "127.0.0.1:1";
    co.node = &node;
    node.tls = 1;
    node.tls_ca_file = "/nonexistent/ca.crt";
    rc = rcp_cluster_open(&co, &cl, err, sizeof err);
    ck_assert_msg(rc == RCP_ERR_INVALID && strstr(err, "cannot load the CA file"), "%s: %s",
                  rcp_err_name(rc), err);
    node.tls_ca_file = NULL;
    node.tls_cert_file = rcptest_tls_file("client.crt");
    rc = rcp_cluster_open(&co, &cl, err, sizeof err);
    ck_assert_msg(rc == RCP_ERR_INVALID && strstr(err, "tls_cert_file is set without"), "%s: %s",
                  rcp_err_name(rc), err);
    ck_assert_ptr_null(cl);
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_checked_fixture(tc, NULL, teardown);
    RCPTEST_ADD(tc, tls_wrong_ca, tls_expired_certificate, tls_name_mismatch,
                tls_client_certificate_required, tls12_client_certificate_required,
                tls_version_floor, tls_stopped_mid_handshake,
                tls_killed_mid_handshake, tls_plain_server, tls_plain_client, tls_no_close_notify,
                tls_option_checks, tls_cluster_option_checks);
}

int main(void)
{
    char err[1024];
    if (!rcptest_tls_certs(err, sizeof err)) {
        fprintf(stderr, "TLS certificates: %s\n", err);
        return 1;
    }
    return rcpt_main_case("tls-faults", "tls-faults", 120, add_tests);
}
