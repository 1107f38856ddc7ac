/* test_auth.c: the connection handshake: AUTH with an ACL user, AUTH with a
 * password only (requirepass), CLIENT SETNAME, refusal reported as
 * RCP_ERR_AUTH with a message, and re-authentication on every reconnect
 * (a request is never sent on a connection that has not authenticated). */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "rcpipe.h"

static rcpt_server srv;
static rcp_conn *conn;
static rcp_conn *admin;

static atomic_int ev_auth_failed;     /* CONNECT_FAILED with RCP_ERR_AUTH */
static atomic_int ev_auth_any;        /* any event with RCP_ERR_AUTH */
static atomic_int ev_connected;

static void on_event(const rcp_event *ev, void *data)
{
    (void)data;
    if (ev->type == RCP_EVENT_CONNECT_FAILED && ev->err == RCP_ERR_AUTH)
        atomic_fetch_add(&ev_auth_failed, 1);
    if (ev->err == RCP_ERR_AUTH)
        atomic_fetch_add(&ev_auth_any, 1);
    if (ev->type == RCP_EVENT_CONNECTED)
        atomic_fetch_add(&ev_connected, 1);
}

static void setup_acl(void)
{
    static const char *const args[] = {"--user", "default", "off",
                                       "--user", "alice", "on", ">secret", "~*", "&*", "+@all",
                                       "--user", "admin", "on", ">adminpw", "~*", "&*", "+@all",
                                       NULL};

    atomic_store(&ev_auth_failed, 0);
    atomic_store(&ev_auth_any, 0);
    atomic_store(&ev_connected, 0);
    rcpt_server_start_ok(&srv, args);
}

static void setup_requirepass(void)
{
    static const char *const args[] = {"--requirepass", "pw-only", NULL};

    rcpt_server_start_ok(&srv, args);
}

static void teardown(void)
{
    rcp_conn_close(conn);
    conn = NULL;
    rcp_conn_close(admin);
    admin = NULL;
    rcpt_server_stop(&srv);
}

static int open_as(rcp_conn **out, const char *user, const char *pass, const char *name,
                   char *err, size_t errlen)
{
    rcp_conn_options o;

    rcpt_options(&o, &srv);
    o.username = user;
    o.password = pass;
    o.client_name = name;
    o.connect_timeout_ms = 2000;
    o.request_timeout_ms = 3000;
    o.reconnect_min_ms = 10;
    o.reconnect_max_ms = 200;
    o.event_cb = on_event;
    return rcp_conn_open(&o, out, err, errlen);
}

/* Sends a space-separated command line as separate arguments and expects
 * a bulk string reply. */
static void expect_string(rcp_conn *c, const char *cmd, const char *want)
{
    char d[256];
    char buf[128];
    const char *argv[8];
    int argc = 0;
    char *save = NULL;
    char *tok;
    rcp_reply *r;

    snprintf(buf, sizeof buf, "%s", cmd);
    for (tok = strtok_r(buf, " ", &save); tok != NULL && argc < 8; tok = strtok_r(NULL, " ", &save))
        argv[argc++] = tok;
    r = rcp_conn_command_argv(c, argc, argv, NULL);
    ck_assert_msg(rcpt_is_cstring(r, want), "%s: want \"%s\", got %s", cmd, want,
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
}

START_TEST(test_acl_user_ok)
{
    char err[512] = "";
    int rc = open_as(&conn, "alice", "secret", "rcpit-alice", err, sizeof err);

    ck_assert_msg(rc == RCP_OK, "open as alice: %s (%s)", rcp_strerror(rc), err);
    expect_string(conn, "ACL WHOAMI", "alice");
    expect_string(conn, "CLIENT GETNAME", "rcpit-alice");
    {
        char d[256];
        rcp_reply *r = rcp_conn_command(conn, "SET %s %s", "who", "alice");
        ck_assert_msg(rcpt_is_status(r, "OK"), "SET as alice: %s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
    }
}
END_TEST

START_TEST(test_acl_wrong_password)
{
    char err[512] = "";
    rcp_conn *c = (rcp_conn *)&err; /* must come back NULL */
    int64_t t0 = rcptest_now_ms();
    int rc = open_as(&c, "alice", "not-the-secret", NULL, err, sizeof err);

    ck_assert_msg(rc == RCP_ERR_AUTH, "wrong password: %d (%s), want RCP_ERR_AUTH", rc,
                  rcp_strerror(rc));
    ck_assert_ptr_null(c);
    ck_assert_msg(err[0] != '\0', "errbuf empty after an AUTH failure");
    ck_assert_msg(rcptest_now_ms() - t0 < 2000 + 2000, "open took %lld ms",
                  (long long)(rcptest_now_ms() - t0));
    fprintf(stderr, "wrong password message: %s\n", err);

    c = (rcp_conn *)&err;
    err[0] = '\0';
    rc = open_as(&c, "mallory", "secret", NULL, err, sizeof err);
    ck_assert_msg(rc == RCP_ERR_AUTH, "unknown user: %d (%s)", rc, rcp_strerror(rc));
    ck_assert_ptr_null(c);
    ck_assert(err[0] != '\0');

    /* a disabled user */
    c = (rcp_conn *)&err;
    rc = open_as(&c, "default", "anything", NULL, NULL, 0);
    ck_assert_msg(rc == RCP_ERR_AUTH, "disabled default user: %d (%s)", rc, rcp_strerror(rc));
    ck_assert_ptr_null(c);
}
END_TEST

/* A handle whose AUTH and name must be repeated on every new connection. */
static void wait_whoami_alice(const char *phase)
{
    int64_t deadline = rcptest_now_ms() + 10000;
    char d[256];

    for (;;) {
        const char *argv[2] = {"ACL", "WHOAMI"};
        rcp_reply *r = rcp_conn_command_argv(conn, 2, argv, NULL);
        int ok = rcpt_is_cstring(r, "alice");

        /* a server error (NOAUTH) means a request went out before AUTH */
        ck_assert_msg(ok || (r->type == RCP_REPLY_ERROR && r->err != RCP_ERR_SERVER &&
                             r->err != RCP_OK),
                      "%s: ACL WHOAMI: %s", phase, rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        if (ok)
            return;
        ck_assert_msg(rcptest_now_ms() < deadline, "%s: not authenticated again within 10 s",
                      phase);
        rcptest_sleep_ms(10);
    }
}

START_TEST(test_acl_reauth_after_restart)
{
    char err[2048] = "";
    rcp_conn_stats st;
    int cycle;
    int rc = open_as(&conn, "alice", "secret", "rcpit-re", err, sizeof err);

    ck_assert_msg(rc == RCP_OK, "open: %s (%s)", rcp_strerror(rc), err);
    wait_whoami_alice("before restart");
    for (cycle = 0; cycle < 2; cycle++) {
        ck_assert_int_eq(rcpt_server_kill(&srv), 0);
        ck_assert_msg(rcpt_server_restart(&srv, err, sizeof err) == 0, "%s", err);
        wait_whoami_alice("after restart");
        expect_string(conn, "CLIENT GETNAME", "rcpit-re");
    }
    ck_assert_int_eq(rcp_conn_get_stats(conn, &st), RCP_OK);
    ck_assert_uint_ge(st.reconnects, 2);
}
END_TEST

/* The password changes under a connected handle: reconnects fail with
 * RCP_ERR_AUTH (reported by event), requests fail with a client error, and
 * once the password is back the handle recovers by itself. */
START_TEST(test_acl_password_changed)
{
    char err[512] = "";
    char d[256];
    rcp_reply *r;
    int64_t deadline;
    int rc;

    rc = open_as(&conn, "alice", "secret", NULL, err, sizeof err);
    ck_assert_msg(rc == RCP_OK, "open alice: %s", err);
    rc = open_as(&admin, "admin", "adminpw", NULL, err, sizeof err);
    ck_assert_msg(rc == RCP_OK, "open admin: %s", err);
    wait_whoami_alice("start");

    r = rcp_conn_command(admin, "ACL SETUSER alice resetpass >changed");
    ck_assert_msg(rcpt_is_status(r, "OK"), "ACL SETUSER: %s", rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    r = rcp_conn_command(admin, "CLIENT KILL USER alice");
    ck_assert_msg(r->type == RCP_REPLY_INTEGER && r->integer >= 1, "CLIENT KILL: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);

    deadline = rcptest_now_ms() + 10000;
    while (atomic_load(&ev_auth_any) < 1 && rcptest_now_ms() < deadline) {
        const char *argv[2] = {"ACL", "WHOAMI"};
        r = rcp_conn_command_argv(conn, 2, argv, NULL);
        ck_assert_msg(r->type == RCP_REPLY_ERROR && r->err != RCP_ERR_SERVER && r->err != RCP_OK,
                      "request while alice cannot authenticate: %s",
                      rcptest_describe(r, d, sizeof d));
        rcp_reply_free(r);
        rcptest_sleep_ms(10);
    }
    ck_assert_msg(atomic_load(&ev_auth_any) >= 1, "no event reported the AUTH refusal");

    r = rcp_conn_command(admin, "ACL SETUSER alice resetpass >secret");
    ck_assert_msg(rcpt_is_status(r, "OK"), "ACL SETUSER back: %s",
                  rcptest_describe(r, d, sizeof d));
    rcp_reply_free(r);
    wait_whoami_alice("password restored");
    /* a refused reconnect is "a (re)connect attempt failed", not the loss
     * of a ready connection */
    ck_assert_msg(atomic_load(&ev_auth_failed) >= 1,
                  "refused reconnect handshakes were reported (%d events with RCP_ERR_AUTH) but "
                  "none as RCP_EVENT_CONNECT_FAILED",
                  atomic_load(&ev_auth_any));
}
END_TEST

START_TEST(test_requirepass_ok)
{
    char err[512] = "";
    int rc = open_as(&conn, NULL, "pw-only", "rcpit-pw", err, sizeof err);

    ck_assert_msg(rc == RCP_OK, "open with password only: %s (%s)", rcp_strerror(rc), err);
    expect_string(conn, "ACL WHOAMI", "default");
    expect_string(conn, "CLIENT GETNAME", "rcpit-pw");
    expect_string(conn, "ECHO fine", "fine");
}
END_TEST

START_TEST(test_requirepass_wrong)
{
    char err[512] = "";
    rcp_conn *c = (rcp_conn *)&err;
    int rc = open_as(&c, NULL, "nope", NULL, err, sizeof err);

    ck_assert_msg(rc == RCP_ERR_AUTH, "wrong password: %d (%s)", rc, rcp_strerror(rc));
    ck_assert_ptr_null(c);
    ck_assert(err[0] != '\0');
}
END_TEST

/* No AUTH configured: the client name alone. */
START_TEST(test_client_name_only)
{
    char err[512] = "";
    int rc = open_as(&conn, NULL, NULL, "just-a-name", err, sizeof err);

    ck_assert_msg(rc == RCP_OK, "open: %s (%s)", rcp_strerror(rc), err);
    expect_string(conn, "CLIENT GETNAME", "just-a-name");
}
END_TEST

static void setup_plain(void)
{
    rcpt_server_start_ok(&srv, NULL);
}

/* A name the server refuses (spaces are not allowed) fails the open. */
START_TEST(test_client_name_refused)
{
    char err[512] = "";
    rcp_conn *c = (rcp_conn *)&err;
    int rc = open_as(&c, NULL, NULL, "has a space", err, sizeof err);

    ck_assert_msg(rc == RCP_ERR_AUTH, "refused CLIENT SETNAME: %d (%s)", rc, rcp_strerror(rc));
    ck_assert_ptr_null(c);
    ck_assert(err[0] != '\0');
}
END_TEST

static Suite *auth_suite(void)
{
    Suite *s = suite_create("integration-auth");
    TCase *acl = rcptest_tcase(s, "acl-user", rcptest_scale(60));
    TCase *pw = rcptest_tcase(s, "requirepass", rcptest_scale(60));
    TCase *plain = rcptest_tcase(s, "no-auth", rcptest_scale(60));

    tcase_add_checked_fixture(acl, setup_acl, teardown);
    RCPTEST_ADD(acl, test_acl_user_ok, test_acl_wrong_password, test_acl_reauth_after_restart,
                test_acl_password_changed);

    tcase_add_checked_fixture(pw, setup_requirepass, teardown);
    RCPTEST_ADD(pw, test_requirepass_ok, test_requirepass_wrong);

    tcase_add_checked_fixture(plain, setup_plain, teardown);
    RCPTEST_ADD(plain, test_client_name_only, test_client_name_refused);
    return s;
}

int main(void)
{
    return rcpt_main(auth_suite);
}
