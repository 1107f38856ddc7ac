/* Unit tests: RESP request formatting and command screening. */
#include <check.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "common.h"
#include "format.h"
#include "rcpipe.h"

static unsigned long long seed = 88172645463325252ull;
static unsigned rnd(void)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return (unsigned)seed;
}

START_TEST(matches_hiredis_on_random_binary_argv)
{
    int iter;
    for (iter = 0; iter < 2000; iter++) {
        int argc = 1 + (int)(rnd() % 8), i;
        const char *argv[8];
        size_t lens[8];
        char *bufs[8];
        char *ours, *theirs = NULL;
        size_t n;
        int tn;
        for (i = 0; i < argc; i++) {
            size_t j, l = rnd() % (iter % 50 == 0 ? 5000 : 40);
            bufs[i] = malloc(l + 1);
            for (j = 0; j < l; j++)
                bufs[i][j] = (char)(rnd() & 0xff); /* NUL, \r, \n included */
            argv[i] = bufs[i];
            lens[i] = l;
        }
        n = rcp__format_len(argc, argv, lens);
        ours = malloc(n);
        ck_assert_ptr_eq(rcp__format_write(ours, argc, argv, lens), ours + n);
        tn = redisFormatCommandArgv(&theirs, argc, argv, lens);
        ck_assert_int_eq((int)n, tn);
        ck_assert_int_eq(memcmp(ours, theirs, n), 0);
        {
            const char *sa[8];
            size_t sl[8];
            ck_assert_int_eq(rcp__format_split(ours, n, sa, sl, 8), argc);
            for (i = 0; i < argc; i++) {
                ck_assert_uint_eq(sl[i], lens[i]);
                ck_assert_int_eq(memcmp(sa[i], argv[i], lens[i]), 0);
            }
        }
        {
            /* The one-pass form: the same bytes when it writes, and it
             * writes whenever the room is ample. */
            size_t caps[5] = {0, n > 0 ? n - 1 : 0, n, n + 60, n + 25 * (size_t)argc + 23};
            char *tmp = malloc(caps[4]);
            for (i = 0; i < 5; i++) {
                size_t w = rcp__format_try(tmp, caps[i], argc, argv, lens);
                if (w) {
                    ck_assert_uint_eq(w, n);
                    ck_assert_int_eq(memcmp(tmp, theirs, n), 0);
                }
                ck_assert(i < 4 || w == n);
                ck_assert(i > 1 || w == 0);
            }
            free(tmp);
        }
        redisFreeCommand(theirs);
        free(ours);
        for (i = 0; i < argc; i++)
            free(bufs[i]);
    }
}
END_TEST

START_TEST(cstring_argv_without_lengths)
{
    const char *argv[] = {"SET", "key", ""};
    size_t n = rcp__format_len(3, argv, NULL);
    char buf[64];
    const char *want = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$0\r\n\r\n";
    ck_assert_uint_eq(n, strlen(want));
    rcp__format_write(buf, 3, argv, NULL);
    ck_assert_int_eq(memcmp(buf, want, n), 0);
}
END_TEST

static int vp(char **out, size_t *len, const char *fmt, ...)
{
    va_list ap;
    int rv;
    va_start(ap, fmt);
    rv = rcp__format_vprintf(out, len, fmt, ap, NULL);
    va_end(ap);
    return rv;
}

static int vp2(char **out, size_t *len, const char **why, const char *fmt, ...)
{
    va_list ap;
    int rv;
    va_start(ap, fmt);
    rv = rcp__format_vprintf(out, len, fmt, ap, why);
    va_end(ap);
    return rv;
}

START_TEST(printf_style)
{
    char *out;
    size_t len;
    const char bin[] = {'a', 0, '\r', '\n'};
    const char *want = "*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$4\r\na\0\r\n\r\n";
    ck_assert_int_eq(vp(&out, &len, "SET k%d %b", 1, bin, sizeof bin), RCP_OK);
    ck_assert_uint_eq(len, 31);
    ck_assert_int_eq(memcmp(out, want, len), 0);
    rcp__free(out);
}
END_TEST

/* Our printf-style formatter against hiredis's on the same formats and
 * arguments: the same bytes. */
#define SAME(...)                                                                                  \
    do {                                                                                           \
        char *ours = NULL, *theirs = NULL;                                                         \
        size_t ol = 0;                                                                             \
        int tl = redisFormatCommand(&theirs, __VA_ARGS__);                                         \
        ck_assert_int_eq(vp(&ours, &ol, __VA_ARGS__), RCP_OK);                                     \
        ck_assert_int_gt(tl, 0);                                                                   \
        ck_assert_uint_eq(ol, (size_t)tl);                                                         \
        ck_assert_int_eq(memcmp(ours, theirs, ol), 0);                                             \
        rcp__free(ours);                                                                           \
        free(theirs);                                                                              \
    } while (0)

START_TEST(printf_matches_hiredis)
{
    const char bin[] = {'x', 0, ' ', '%'};
    SAME("GET foo");
    SAME("  SET   a   b  ");
    SAME("SET %s %s", "key", "value with spaces");
    SAME("SET %s %s", "", "");
    SAME("SET k%s%s v", "", "");
    SAME("SET %b %b", bin, sizeof bin, "", (size_t)0);
    SAME("INCRBY k %d", -42);
    SAME("INCRBY k %lld", -9000000000000LL);
    SAME("SETRANGE k %u %s", 7u, "x");
    SAME("X %ld %lu %hd %hhu %i %o %x %X", -5L, 5UL, (short)-3, (unsigned char)200, 9, 8, 255, 255);
    SAME("X %05d %-4d| %+d %.3f %e %g", 42, 7, 3, 3.14159, 1e10, 0.5);
    SAME("X 100%% %s%%", "done");
    SAME("X a%sb%dc", "mid", 12);
    SAME("X %s", "trailing%");
}
END_TEST

START_TEST(printf_bad_arguments_refused)
{
    char *out = (char *)1;
    size_t len = 0;
    const char *why = NULL;
    va_list none;
#define REFUSED(want, ...)                                                                         \
    do {                                                                                           \
        why = NULL;                                                                                \
        ck_assert_int_eq(vp2(&out, &len, &why, __VA_ARGS__), RCP_ERR_INVALID);                     \
        ck_assert_ptr_nonnull(why);                                                                \
        ck_assert_msg(strstr(why, want) != NULL, "\"%s\" not in \"%s\"", want, why);          \
    } while (0)
    (void)none;
    REFUSED("argument 1: NULL string", "GET %s", (const char *)NULL);
    REFUSED("argument 2: NULL pointer with length 5", "SET k %b", (const void *)NULL, (size_t)5);
    REFUSED("argument 2: NULL string", "SET %s %s", "k", (const char *)NULL);
    REFUSED("unsupported conversion", "GET %p", (void *)&len);
    REFUSED("empty command", "   ");
    REFUSED("empty command", "");
#undef REFUSED
    /* A NULL %b of length 0 is an empty argument. */
    ck_assert_int_eq(vp(&out, &len, "SET k %b", (const void *)NULL, (size_t)0), RCP_OK);
    ck_assert_uint_eq(len, strlen("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"));
    rcp__free(out);
}
END_TEST

START_TEST(split_rejects_garbage)
{
    const char *a[4];
    size_t l[4];
    ck_assert_int_eq(rcp__format_split("+OK\r\n", 5, a, l, 4), -1);
    ck_assert_int_eq(rcp__format_split("*2\r\n$3\r\nGET\r\n", 13, a, l, 4), -1);
    ck_assert_int_eq(rcp__format_split("*1\r\n$9\r\nGET\r\n", 13, a, l, 4), -1);
    ck_assert_int_eq(rcp__format_split("*", 1, a, l, 4), -1);
}
END_TEST

static int check1(const char *line)
{
    /* Split a space-separated command line and screen it. */
    char buf[256];
    const char *argv[16];
    int argc = 0;
    const char *why = NULL;
    char *save, *tok;
    int rv;
    snprintf(buf, sizeof buf, "%s", line);
    for (tok = strtok_r(buf, " ", &save); tok && argc < 16; tok = strtok_r(NULL, " ", &save))
        argv[argc++] = tok;
    rv = rcp__command_check(argc, argv, NULL, &why);
    if (rv != RCP_OK)
        ck_assert_ptr_nonnull(why);
    return rv;
}

START_TEST(screening)
{
    ck_assert_int_eq(check1("GET k"), RCP_OK);
    ck_assert_int_eq(check1("get k"), RCP_OK);
    ck_assert_int_eq(check1("BLPOP l 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("blpop l 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("BRPOP l 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("BRPOPLPUSH a b 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("BLMOVE a b LEFT RIGHT 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("BLMPOP 0 1 a LEFT"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("BZPOPMIN z 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("BZPOPMAX z 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("BZMPOP 0 1 z MIN"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("WAIT 1 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("XREAD BLOCK 0 STREAMS s $"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("XREAD COUNT 2 block 10 STREAMS s 0"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("XREADGROUP GROUP g c BLOCK 5 STREAMS s >"), RCP_ERR_BLOCKING_COMMAND);
    ck_assert_int_eq(check1("XREAD COUNT 2 STREAMS s 0"), RCP_OK);
    /* BLOCK after STREAMS is a stream name, not the option. */
    ck_assert_int_eq(check1("XREAD STREAMS BLOCK 0"), RCP_OK);
    ck_assert_int_eq(check1("MULTI"), RCP_ERR_UNSUPPORTED);
    ck_assert_int_eq(check1("exec"), RCP_ERR_UNSUPPORTED);
    ck_assert_int_eq(check1("SUBSCRIBE ch"), RCP_ERR_UNSUPPORTED);
    ck_assert_int_eq(check1("SSUBSCRIBE ch"), RCP_ERR_UNSUPPORTED);
    ck_assert_int_eq(check1("SELECT 1"), RCP_ERR_UNSUPPORTED);
    ck_assert_int_eq(check1("CLIENT REPLY OFF"), RCP_ERR_UNSUPPORTED);
    ck_assert_int_eq(check1("CLIENT GETNAME"), RCP_OK);
    ck_assert_int_eq(check1("BLPOPX k"), RCP_OK);
    ck_assert_int_eq(check1("BLPO k"), RCP_OK);
}
END_TEST

START_TEST(arg_is)
{
    ck_assert(rcp__arg_is("get", 3, "GET"));
    ck_assert(!rcp__arg_is("get", 3, "GETX"));
    ck_assert(!rcp__arg_is("getx", 4, "GET"));
    ck_assert(!rcp__arg_is("g\0t", 3, "GET"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("format");
    TCase *tc = rcptest_tcase(s, "core", 0);

    RCPTEST_ADD(tc, matches_hiredis_on_random_binary_argv, cstring_argv_without_lengths,
                printf_style, printf_matches_hiredis, printf_bad_arguments_refused,
                split_rejects_garbage, screening, arg_is);
    return rcptest_run(s) ? 1 : 0;
}
