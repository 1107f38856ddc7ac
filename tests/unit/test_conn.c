/* Unit tests of the connection's bookkeeping (written vs never written,
 * timeouts and late replies, replies that match no request), against a
 * tiny scripted server in this file on 127.0.0.1. The real-server
 * behaviour is covered by tests/integration. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rcpipe.h"

/* ---- a scripted server ------------------------------------------------ */

typedef struct fake {
    int lfd, port;
    int cfd;
    char buf[65536];
    size_t len;
} fake;

static void fake_listen(fake *f)
{
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int one = 1;
    memset(f, 0, sizeof *f);
    f->cfd = -1;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(f->lfd, 8), 0);
    getsockname(f->lfd, (struct sockaddr *)&a, &al);
    f->port = ntohs(a.sin_port);
}

static void fake_accept(fake *f)
{
    f->cfd = accept(f->lfd, NULL, NULL);
    f->len = 0;
}

/* Count complete RESP commands at the front of buf; drop them. */
static int take_commands(fake *f)
{
    int n = 0;
    size_t p = 0;
    for (;;) {
        size_t q = p;
        long argc, i;
        char *e;
        if (q >= f->len || f->buf[q] != '*')
            break;
        argc = strtol(f->buf + q + 1, &e, 10);
        if (!memchr(f->buf + q, '\n', f->len - q))
            break;
        q = (size_t)(strchr(f->buf + q, '\n') - f->buf) + 1;
        for (i = 0; i < argc; i++) {
            long l;
            char *nl;
            if (q >= f->len || !(nl = memchr(f->buf + q, '\n', f->len - q)))
                goto out;
            l = strtol(f->buf + q + 1, &e, 10);
            q = (size_t)(nl - f->buf) + 1 + (size_t)l + 2;
            if (q > f->len)
                goto out;
        }
        p = q;
        n++;
    }
out:
    memmove(f->buf, f->buf + p, f->len - p);
    f->len -= p;
    return n;
}

/* Read until n commands have arrived; returns n, or -1 on EOF. */
static int fake_read(fake *f, int n)
{
    int got = take_commands(f);
    while (got < n) {
        ssize_t r = recv(f->cfd, f->buf + f->len, sizeof f->buf - f->len, 0);
        if (r <= 0)
            return -1;
        f->len += (size_t)r;
        got += take_commands(f);
    }
    return got;
}

/* Seconds since t0 (CLOCK_MONOTONIC): retry loops are bounded in time
 * too, so a scripted server thrown off track (an allocation-failure
 * rerun) fails the test quickly instead of looking hung. */
static long since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)(t.tv_sec - t0->tv_sec);
}

static void fake_send(fake *f, const char *s)
{
    ck_assert_int_eq((int)send(f->cfd, s, strlen(s), MSG_NOSIGNAL), (int)strlen(s));
}

static void fake_close_client(fake *f)
{
    if (f->cfd >= 0)
        close(f->cfd);
    f->cfd = -1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- futures ------------------------------------------------------- */

typedef struct rec {
    rcp_future f;
    atomic_int calls;
    int type, err;
    char str[256];
} rec;

static void rec_resolve(rcp_future *f, rcp_reply *r)
{
    rec *x = (rec *)f;
    x->type = r->type;
    x->err = r->err;
    snprintf(x->str, sizeof x->str, "%.*s", (int)(r->len < 250 ? r->len : 250), r->str ? r->str : "");
    atomic_fetch_add(&x->calls, 1);
}

static void rec_init(rec *x)
{
    memset(x, 0, sizeof *x);
    x->f.resolve = rec_resolve;
}

static void wait_calls(rec *x)
{
    int i;
    for (i = 0; i < 500 && !atomic_load(&x->calls); i++)
        sleep_ms(10);
    ck_assert_int_eq(atomic_load(&x->calls), 1);
}

static rcp_conn *open_to(fake *f, rcp_conn_options *o)
{
    rcp_conn *c = NULL;
    char err[256];
    o->host = "127.0.0.1";
    o->port = f->port;
    ck_assert_int_eq(rcp_conn_open(o, &c, err, sizeof err), RCP_OK);
    return c;
}

/* ---- server scripts ------------------------------------------------ */

static fake srv;
static atomic_int step;

static void wait_step(int s)
{
    int i;
    for (i = 0; i < 1000 && atomic_load(&step) < s; i++)
        sleep_ms(5);
    ck_assert_int_ge(atomic_load(&step), s);
}

static void *script_written_vs_unsent(void *arg)
{
    int k;
    (void)arg;
    fake_accept(&srv);
    fake_read(&srv, 2);       /* A and B arrive together */
    atomic_store(&step, 1);
    wait_step(2);             /* C and D are now queued, not written */
    fake_close_client(&srv);
    fake_accept(&srv);        /* the client reconnects */
    for (k = 1; fake_read(&srv, 1) == 1; k++) {
        char r[32];
        snprintf(r, sizeof r, "+R%d\r\n", k);
        fake_send(&srv, r);
    }
    return NULL;
}

START_TEST(written_get_io_unwritten_get_not_sent)
{
    rcp_conn_options o;
    rcp_conn *c;
    pthread_t t;
    rec a, b, cc, d;
    const char *ping[] = {"PING"};
    rcp_reply *r;
    rcp_conn_stats st;

    fake_listen(&srv);
    atomic_store(&step, 0);
    pthread_create(&t, NULL, script_written_vs_unsent, NULL);
    rcp_conn_options_init(&o);
    o.batch_delay_us = 300000; /* batches wait 300 ms before being written */
    c = open_to(&srv, &o);
    rec_init(&a);
    rec_init(&b);
    rec_init(&cc);
    rec_init(&d);
    ck_assert_int_eq(rcp_conn_send_argv(c, &a.f, 1, ping, NULL), RCP_OK);
    ck_assert_int_eq(rcp_conn_send_argv(c, &b.f, 1, ping, NULL), RCP_OK);
    wait_step(1);
    ck_assert_int_eq(rcp_conn_send_argv(c, &cc.f, 1, ping, NULL), RCP_OK);
    ck_assert_int_eq(rcp_conn_send_argv(c, &d.f, 1, ping, NULL), RCP_OK);
    atomic_store(&step, 2);
    wait_calls(&a);
    wait_calls(&b);
    wait_calls(&cc);
    wait_calls(&d);
    ck_assert_int_eq(a.err, RCP_ERR_IO);
    ck_assert_int_eq(b.err, RCP_ERR_IO);
    ck_assert_int_eq(cc.err, RCP_ERR_NOT_SENT);
    ck_assert_int_eq(d.err, RCP_ERR_NOT_SENT);
    ck_assert_int_eq(a.type, RCP_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(a.str, "written"));

    /* After the reconnect, requests work again. */
    {
        int i;
        struct timespec t0;
        r = NULL;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (i = 0; i < 200 && since(&t0) < 5; i++) {
            r = rcp_conn_command_argv(c, 1, ping, NULL);
            if (r->type == RCP_REPLY_STATUS)
                break;
            rcp_reply_free(r);
            r = NULL;
            sleep_ms(10);
        }
        ck_assert_ptr_nonnull(r);
        ck_assert_str_eq(r->str, "R1");
        rcp_reply_free(r);
    }
    rcp_conn_get_stats(c, &st);
    ck_assert_uint_eq(st.reconnects, 1);
    ck_assert_uint_eq(st.disconnects, 1);
    rcp_conn_close(c);
    pthread_join(t, NULL);
    close(srv.lfd);
    fake_close_client(&srv);
}
END_TEST

static void *script_late_reply(void *arg)
{
    (void)arg;
    fake_accept(&srv);
    fake_read(&srv, 1);  /* A */
    sleep_ms(300);       /* past A's 100 ms deadline */
    fake_send(&srv, "+LATE\r\n");
    fake_read(&srv, 1);  /* B */
    fake_send(&srv, "+B\r\n");
    fake_read(&srv, 1);  /* C: answered with garbage */
    fake_send(&srv, "!bad\r\n");
    fake_read(&srv, 1); /* EOF expected */
    return NULL;
}

START_TEST(timeout_discards_late_reply_then_protocol_error)
{
    rcp_conn_options o;
    rcp_conn *c;
    pthread_t t;
    rec a, cc;
    const char *ping[] = {"PING"};
    rcp_reply *r;
    rcp_conn_stats st;

    fake_listen(&srv);
    pthread_create(&t, NULL, script_late_reply, NULL);
    rcp_conn_options_init(&o);
    c = open_to(&srv, &o);
    rec_init(&a);
    a.f.timeout_ms = 100;
    ck_assert_int_eq(rcp_conn_send_argv(c, &a.f, 1, ping, NULL), RCP_OK);
    wait_calls(&a);
    ck_assert_int_eq(a.err, RCP_ERR_TIMEOUT);
    /* The late "+LATE" must be dropped, not handed to B. */
    r = rcp_conn_command_argv(c, 1, ping, NULL);
    ck_assert_int_eq(r->type, RCP_REPLY_STATUS);
    ck_assert_str_eq(r->str, "B");
    rcp_reply_free(r);
    rcp_conn_get_stats(c, &st);
    ck_assert_uint_eq(st.late_replies, 1);
    ck_assert_uint_eq(st.timeouts, 1);
    ck_assert_uint_eq(st.disconnects, 0);

    rec_init(&cc);
    ck_assert_int_eq(rcp_conn_send_argv(c, &cc.f, 1, ping, NULL), RCP_OK);
    wait_calls(&cc);
    ck_assert_int_eq(cc.err, RCP_ERR_PROTOCOL);
    rcp_conn_get_stats(c, &st);
    ck_assert_uint_eq(st.disconnects, 1);
    rcp_conn_close(c);
    pthread_join(t, NULL);
    close(srv.lfd);
    fake_close_client(&srv);
}
END_TEST

static void *script_unsolicited(void *arg)
{
    int k = 0;
    (void)arg;
    fake_accept(&srv);
    /* Two ordinary round trips (a lone caller: the fast path). */
    while (k < 2 && fake_read(&srv, 1) == 1) {
        k++;
        fake_send(&srv, k == 1 ? "+R1\r\n" : "+R2\r\n");
    }
    fake_send(&srv, "+EXTRA\r\n"); /* answers nothing */
    atomic_store(&step, 1);
    if (fake_read(&srv, 1) == 1)
        fake_send(&srv, "+EXTRA2\r\n");
    fake_read(&srv, 1000); /* until the client drops us */
    fake_close_client(&srv);
    fake_accept(&srv);
    for (k = 1; fake_read(&srv, 1) == 1; k++)
        fake_send(&srv, "+FRESH\r\n");
    return NULL;
}

START_TEST(reply_without_request_is_never_handed_to_a_caller)
{
    rcp_conn_options o;
    rcp_conn *c;
    pthread_t t;
    const char *ping[] = {"PING"};
    rcp_reply *r;
    int i, fresh = 0;

    fake_listen(&srv);
    atomic_store(&step, 0);
    pthread_create(&t, NULL, script_unsolicited, NULL);
    rcp_conn_options_init(&o);
    c = open_to(&srv, &o);
    r = rcp_conn_command_argv(c, 1, ping, NULL);
    ck_assert_str_eq(r->str, "R1");
    rcp_reply_free(r);
    r = rcp_conn_command_argv(c, 1, ping, NULL);
    ck_assert_str_eq(r->str, "R2");
    rcp_reply_free(r);
    wait_step(1);
    sleep_ms(50);
    for (i = 0; i < 200 && !fresh; i++) {
        r = rcp_conn_command_argv(c, 1, ping, NULL);
        if (r->type == RCP_REPLY_STATUS) {
            ck_assert_str_eq(r->str, "FRESH"); /* never EXTRA or EXTRA2 */
            fresh = 1;
        } else {
            ck_assert_int_eq(r->type, RCP_REPLY_ERROR);
            ck_assert(r->err == RCP_ERR_PROTOCOL || r->err == RCP_ERR_NOT_SENT ||
                      r->err == RCP_ERR_IO);
            sleep_ms(10);
        }
        rcp_reply_free(r);
    }
    ck_assert(fresh);
    rcp_conn_close(c);
    pthread_join(t, NULL);
    close(srv.lfd);
    fake_close_client(&srv);
}
END_TEST

static void *script_double_reply(void *arg)
{
    (void)arg;
    fake_accept(&srv);
    if (fake_read(&srv, 1) == 1)
        fake_send(&srv, "+R1\r\n+EXTRA\r\n"); /* two answers to one question */
    fake_read(&srv, 1000);                     /* until the client drops us */
    fake_close_client(&srv);
    fake_accept(&srv);
    while (fake_read(&srv, 1) == 1)
        fake_send(&srv, "+FRESH\r\n");
    return NULL;
}

START_TEST(more_replies_than_requests_closes_the_connection)
{
    rcp_conn_options o;
    rcp_conn *c;
    pthread_t t;
    const char *ping[] = {"PING"};
    rcp_reply *r;
    rcp_conn_stats st;
    int i, fresh = 0;
    struct timespec t0;

    fake_listen(&srv);
    pthread_create(&t, NULL, script_double_reply, NULL);
    rcp_conn_options_init(&o);
    c = open_to(&srv, &o);
    r = rcp_conn_command_argv(c, 1, ping, NULL);
    ck_assert_str_eq(r->str, "R1");
    rcp_reply_free(r);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < 300 && !fresh && since(&t0) < 5; i++) {
        r = rcp_conn_command_argv(c, 1, ping, NULL);
        if (r->type == RCP_REPLY_STATUS) {
            ck_assert_str_eq(r->str, "FRESH"); /* never EXTRA */
            fresh = 1;
        } else {
            sleep_ms(10);
        }
        rcp_reply_free(r);
    }
    ck_assert(fresh);
    rcp_conn_get_stats(c, &st);
    ck_assert_uint_eq(st.disconnects, 1);
    rcp_conn_close(c);
    pthread_join(t, NULL);
    close(srv.lfd);
    fake_close_client(&srv);
}
END_TEST

START_TEST(caller_errors_never_call_back)
{
    rcp_conn_options o;
    rec a;
    rcp_reply *r;
    rcp_conn *c = NULL;
    char err[128];
    const char *argv[] = {"GET", NULL};
    rec_init(&a);
    ck_assert_int_eq(rcp_conn_send_argv(NULL, &a.f, 1, argv, NULL), RCP_ERR_INVALID);
    r = rcp_conn_command(NULL, "PING");
    ck_assert_int_eq(r->err, RCP_ERR_INVALID);
    rcp_reply_free(r);
    rcp_conn_options_init(&o);
    o.port = 0;
    ck_assert_int_eq(rcp_conn_open(&o, &c, err, sizeof err), RCP_ERR_INVALID);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rcp_conn_open(NULL, &c, err, sizeof err), RCP_ERR_INVALID);
    /* Nothing listens on port 1 of 127.0.0.1: refused, and said so. */
    o.port = 1;
    ck_assert_int_eq(rcp_conn_open(&o, &c, err, sizeof err), RCP_ERR_CONNECT);
    ck_assert_ptr_nonnull(strstr(err, "127.0.0.1:1"));
    ck_assert_int_eq(atomic_load(&a.calls), 0);
}
END_TEST

/* Summing counters: every field is added, NULL is ignored. */
START_TEST(stats_add_sums_every_field)
{
    rcp_conn_stats a, b;
    uint64_t *pa = (uint64_t *)&a;
    size_t i, n = sizeof a / sizeof(uint64_t);

    for (i = 0; i < n; i++) {
        ((uint64_t *)&a)[i] = i + 1;
        ((uint64_t *)&b)[i] = 100 * (i + 1);
    }
    rcp_conn_stats_add(&a, &b);
    for (i = 0; i < n; i++)
        ck_assert_uint_eq(pa[i], 101 * (i + 1));
    rcp_conn_stats_add(NULL, &b);
    rcp_conn_stats_add(&a, NULL);
    ck_assert_uint_eq(a.requests, 101);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("conn");
    TCase *tc = tcase_create("core");
    SRunner *sr;
    int failed;
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, written_get_io_unwritten_get_not_sent);
    tcase_add_test(tc, timeout_discards_late_reply_then_protocol_error);
    tcase_add_test(tc, reply_without_request_is_never_handed_to_a_caller);
    tcase_add_test(tc, more_replies_than_requests_closes_the_connection);
    tcase_add_test(tc, caller_errors_never_call_back);
    tcase_add_test(tc, stats_add_sums_every_field);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
