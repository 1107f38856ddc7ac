/* Unit tests: classifying server error replies (MOVED/ASK targets, retry
 * kinds) including truncated and garbage redirects. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "logic.h"

static rcp__redirect parse_n(const char *s, size_t len)
{
    rcp__redirect rd;
    memset(&rd, 0x5a, sizeof rd); /* stale garbage must be overwritten */
    rcp__parse_redirect(s, len, &rd);
    return rd;
}

static rcp__redirect parse(const char *s)
{
    return parse_n(s, strlen(s));
}

START_TEST(moved_and_ask)
{
    rcp__redirect rd = parse("MOVED 3999 127.0.0.1:6381");
    ck_assert_int_eq(rd.kind, RCP__RD_MOVED);
    ck_assert_uint_eq(rd.slot, 3999);
    ck_assert_str_eq(rd.host, "127.0.0.1");
    ck_assert_int_eq(rd.port, 6381);

    rd = parse("ASK 3999 127.0.0.1:6381");
    ck_assert_int_eq(rd.kind, RCP__RD_ASK);
    ck_assert_uint_eq(rd.slot, 3999);
    ck_assert_str_eq(rd.host, "127.0.0.1");
    ck_assert_int_eq(rd.port, 6381);

    rd = parse("MOVED 0 h:1");
    ck_assert_int_eq(rd.kind, RCP__RD_MOVED);
    ck_assert_uint_eq(rd.slot, 0);
    ck_assert_int_eq(rd.port, 1);

    rd = parse("MOVED 16383 h:65535");
    ck_assert_int_eq(rd.kind, RCP__RD_MOVED);
    ck_assert_uint_eq(rd.slot, 16383);
    ck_assert_int_eq(rd.port, 65535);

    /* Not NUL-terminated at len: only len bytes are read. */
    rd = parse_n("MOVED 12 h:6379999", 15);
    ck_assert_int_eq(rd.kind, RCP__RD_MOVED);
    ck_assert_int_eq(rd.port, 6379);
}
END_TEST

START_TEST(ipv6_hostname_empty)
{
    rcp__redirect rd = parse("MOVED 1 ::1:6380");
    ck_assert_int_eq(rd.kind, RCP__RD_MOVED);
    ck_assert_str_eq(rd.host, "::1");
    ck_assert_int_eq(rd.port, 6380);

    rd = parse("MOVED 1 [::1]:6380");
    ck_assert_int_eq(rd.kind, RCP__RD_MOVED);
    ck_assert_str_eq(rd.host, "::1");
    ck_assert_int_eq(rd.port, 6380);

    rd = parse("ASK 77 2001:db8::2:7000");
    ck_assert_int_eq(rd.kind, RCP__RD_ASK);
    ck_assert_str_eq(rd.host, "2001:db8::2");
    ck_assert_int_eq(rd.port, 7000);

    rd = parse("MOVED 1 redis-7.example:6379");
    ck_assert_int_eq(rd.kind, RCP__RD_MOVED);
    ck_assert_str_eq(rd.host, "redis-7.example");
    ck_assert_int_eq(rd.port, 6379);

    rd = parse("MOVED 1 :6380");
    ck_assert_int_eq(rd.kind, RCP__RD_MOVED);
    ck_assert_str_eq(rd.host, "");
    ck_assert_int_eq(rd.port, 6380);

    /* A host of exactly 255 bytes fits. */
    {
        char buf[300];
        memcpy(buf, "MOVED 5 ", 8);
        memset(buf + 8, 'h', 255);
        memcpy(buf + 8 + 255, ":1", 3);
        rd = parse(buf);
        ck_assert_int_eq(rd.kind, RCP__RD_MOVED);
        ck_assert_uint_eq(strlen(rd.host), 255);
    }
}
END_TEST

START_TEST(malformed)
{
    static const char *const bad[] = {
        "MOVED",
        "MOVED ",
        "MOVED 1",
        "MOVED 1 ",
        "MOVED 99999 x:1",
        "MOVED 16384 x:1",
        "MOVED 123456 x:1",
        "MOVED 1 host",
        "MOVED 1 host:",
        "MOVED 1 host:0",
        "MOVED 1 host:65536",
        "MOVED 1 host:99999",
        "MOVED 1 host:123456",
        "MOVED 1 host:-1",
        "MOVED 1 host:80a",
        "MOVED abc h:1",
        "MOVED -1 h:1",
        "MOVED  1 h:1",
        "MOVED 1  h:1",
        "ASK",
        "ASK 1",
        "ASK x h:1",
    };
    size_t i;
    char big[400];

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rcp__redirect rd = parse(bad[i]);
        ck_assert_msg(rd.kind == RCP__RD_BAD, "'%s' gave kind %d", bad[i], rd.kind);
        ck_assert_str_eq(rd.host, "");
    }

    memcpy(big, "MOVED 5 ", 8);
    memset(big + 8, 'h', 256);
    memcpy(big + 8 + 256, ":1", 3);
    ck_assert_int_eq(parse(big).kind, RCP__RD_BAD);

    /* A NUL inside the host is refused, not truncated. */
    ck_assert_int_eq(parse_n("MOVED 5 a\0b:1", 13).kind, RCP__RD_BAD);
    /* Truncated by len. */
    ck_assert_int_eq(parse_n("MOVED 3999 127.0.0.1:6381", 10).kind, RCP__RD_BAD);
}
END_TEST

START_TEST(retry_kinds)
{
    ck_assert_int_eq(parse("TRYAGAIN Multiple keys request during rehashing of slot").kind,
                     RCP__RD_TRYAGAIN);
    ck_assert_int_eq(parse("CLUSTERDOWN The cluster is down").kind, RCP__RD_CLUSTERDOWN);
    ck_assert_int_eq(parse("CLUSTERDOWN").kind, RCP__RD_CLUSTERDOWN);
    ck_assert_int_eq(parse("LOADING Redis is loading the dataset in memory").kind,
                     RCP__RD_LOADING);
    ck_assert_int_eq(parse("MASTERDOWN Link with MASTER is down").kind, RCP__RD_MASTERDOWN);
    ck_assert_int_eq(parse("READONLY You can't write against a read only replica.").kind,
                     RCP__RD_READONLY);
    ck_assert_int_eq(parse("TRYAGAIN").kind, RCP__RD_TRYAGAIN);
}
END_TEST

START_TEST(others)
{
    rcp__redirect rd;
    ck_assert_int_eq(parse("ERR unknown command").kind, RCP__RD_NONE);
    ck_assert_int_eq(parse("WRONGTYPE Operation against a key").kind, RCP__RD_NONE);
    ck_assert_int_eq(parse("CROSSSLOT Keys in request don't hash to the same slot").kind,
                     RCP__RD_NONE);
    ck_assert_int_eq(parse("").kind, RCP__RD_NONE);
    ck_assert_int_eq(parse("MOVEDX 1 h:1").kind, RCP__RD_NONE);
    ck_assert_int_eq(parse("ASKING").kind, RCP__RD_NONE);
    /* The server's words are upper case. */
    ck_assert_int_eq(parse("moved 1 h:1").kind, RCP__RD_NONE);
    ck_assert_int_eq(parse("LOADINGX").kind, RCP__RD_NONE);
    ck_assert_int_eq(parse("READONLYX").kind, RCP__RD_NONE);
    ck_assert_int_eq(parse("ERR MOVED 1 h:1").kind, RCP__RD_NONE);
    ck_assert_int_eq(parse_n("TRYAGAIN", 3).kind, RCP__RD_NONE);

    rd = parse_n(NULL, 0);
    ck_assert_int_eq(rd.kind, RCP__RD_NONE);
    rcp__parse_redirect("MOVED 1 h:1", 11, NULL); /* must not crash */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("redirect");
    TCase *tc = rcptest_tcase(s, "core", 0);

    RCPTEST_ADD(tc, moved_and_ask, ipv6_hostname_empty, malformed, retry_kinds, others);
    return rcptest_run(s) ? 1 : 0;
}
