/* test_sha1.c: the SHA-1 used to name scripts (EVALSHA), against the
 * FIPS 180 examples, the padding boundaries, and a million 'a's. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "sha1.h"

static void check_hex(const char *data, size_t len, const char *want)
{
    char hex[41];
    rcp__sha1_hex(data, len, hex);
    ck_assert_str_eq(hex, want);
}

START_TEST(known_vectors)
{
    static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    char *million = malloc(1000000);

    check_hex("", 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    check_hex("abc", 3, "a9993e364706816aba3e25717850c26c9cd0d89d");
    /* 56 bytes: the length no longer fits in the first padded block. */
    check_hex(two_blocks, sizeof two_blocks - 1, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    ck_assert_ptr_nonnull(million);
    memset(million, 'a', 1000000);
    check_hex(million, 1000000, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
    free(million);
    /* Redis names scripts this way: SCRIPT LOAD "return 1". */
    check_hex("return 1", 8, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
}
END_TEST

START_TEST(every_length_near_a_block)
{
    /* Lengths around the 56- and 64-byte padding boundaries, against
     * Python's hashlib.sha1(b'x' * n) (computed once, pasted here). */
    static const struct {
        size_t n;
        const char *hex;
    } v[] = {
        {55, "cef734ba81a024479e09eb5a75b6ddae62e6abf1"},
        {56, "901305367c259952f4e7af8323f480d59f81335b"},
        {63, "0ddc4e0cccd9a12850deb5abb0853a4425559fec"},
        {64, "bb2fa3ee7afb9f54c6dfb5d021f14b1ffe40c163"},
        {65, "78c741ddc482e4cdf8c474a0876347a0905b6233"},
        {119, "4300320394f7ee239bcdce7d3b8bcee173a0cd5c"},
        {120, "ceb2821639c4b6dcb10bce0e522ca2e608ce056d"},
        {127, "e463484d274607e1897d4099497cbf2aedcf8206"},
        {128, "150fa3fbdc899bd0b8f95a9fb6027f564d953762"},
    };
    char buf[128];
    size_t i;
    memset(buf, 'x', sizeof buf);
    for (i = 0; i < sizeof v / sizeof v[0]; i++)
        check_hex(buf, v[i].n, v[i].hex);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sha1");
    TCase *tc = rcptest_tcase(s, "sha1", 0);

    RCPTEST_ADD(tc, known_vectors, every_length_near_a_block);
    return rcptest_run(s) == 0 ? 0 : 1;
}
