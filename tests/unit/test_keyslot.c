/* Unit tests: CRC16 key slots and {hash tag} rules, against known vectors.
 * The cross-check against a real server's CLUSTER KEYSLOT lives in
 * test_keyslot_server.c. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "logic.h"
#include "rcpipe.h"

#define SLOT(s) rcp__keyslot((s), sizeof(s) - 1)

START_TEST(known_vectors)
{
    /* 0x31C3 is the published XMODEM check value of "123456789". */
    ck_assert_uint_eq(SLOT("123456789"), 0x31C3 & 0x3FFF);
    ck_assert_uint_eq(SLOT("foo"), 12182);
    ck_assert_uint_eq(SLOT("bar"), 5061);
    ck_assert_uint_eq(SLOT("user1000"), 3443);
    ck_assert_uint_eq(SLOT(""), 0);
    ck_assert_uint_eq(SLOT("a\0b"), 8383); /* binary-safe: the NUL is hashed */
    ck_assert_uint_ne(SLOT("a\0b"), SLOT("a"));
}
END_TEST

START_TEST(hash_tags)
{
    ck_assert_uint_eq(SLOT("{user1000}.following"), SLOT("{user1000}.followers"));
    ck_assert_uint_eq(SLOT("{user1000}.following"), SLOT("user1000"));
    /* An empty tag: the whole key is hashed. */
    ck_assert_uint_eq(SLOT("foo{}{bar}"), 8363);
    ck_assert_uint_ne(SLOT("foo{}{bar}"), SLOT("bar"));
    /* The tag runs from the first '{' to the first '}' after it. */
    ck_assert_uint_eq(SLOT("foo{{bar}}zap"), SLOT("{bar"));
    ck_assert_uint_eq(SLOT("foo{{bar}}zap"), 4015);
    ck_assert_uint_eq(SLOT("foo{bar}{zap}"), SLOT("bar"));
    ck_assert_uint_eq(SLOT("{a}x"), SLOT("a")); /* a one-byte tag counts */
    ck_assert_uint_eq(SLOT("{a}y"), SLOT("{a}x"));
    /* No closing brace, or only a '}' before the '{': the whole key. */
    ck_assert_uint_eq(SLOT("foo{bar"), rcp__keyslot("foo{bar", 7));
    ck_assert_uint_ne(SLOT("foo{bar"), SLOT("bar"));
    ck_assert_uint_ne(SLOT("}bar{"), SLOT(""));
    ck_assert_uint_eq(SLOT("x}{bar}"), SLOT("bar"));
    /* A tag may hold NUL bytes, and the key may hold NUL before the tag. */
    ck_assert_uint_eq(SLOT("\0{a\0b}"), SLOT("a\0b"));
    /* The length bounds the search: a tag past len is not seen. */
    ck_assert_uint_eq(rcp__keyslot("foo{bar}", 4), SLOT("foo{"));
}
END_TEST

START_TEST(public_api)
{
    ck_assert_uint_eq(rcp_keyslot("foo", 3), 12182);
    ck_assert_uint_eq(rcp_keyslot(NULL, 0), 0);
    ck_assert_uint_eq(rcp_keyslot(NULL, 5), 0); /* never reads through NULL */
    ck_assert_uint_eq(rcp_keyslot("", 0), 0);
}
END_TEST

/* The slot by the definition of the CRC, bit by bit. */
static unsigned bitwise_slot(const unsigned char *p, size_t len)
{
    unsigned crc = 0;
    while (len--) {
        crc ^= (unsigned)*p++ << 8;
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc & (RCP__SLOTS - 1);
}

START_TEST(always_in_range)
{
    unsigned char buf[64];
    unsigned seed = 12345;
    for (int i = 0; i < 20000; i++) {
        size_t len = (size_t)(i % 64);
        for (size_t j = 0; j < len; j++) {
            seed = seed * 1103515245u + 12345u;
            buf[j] = (unsigned char)(seed >> 16);
        }
        ck_assert_uint_lt(rcp__keyslot((const char *)buf, len), RCP__SLOTS);
        /* Without a tag, the table-driven CRC (four bytes per step, then
         * a byte at a time) against the definition, at every tail length. */
        if (!memchr(buf, '{', len))
            ck_assert_uint_eq(rcp__keyslot((const char *)buf, len), bitwise_slot(buf, len));
    }
}
END_TEST

/* The hash-tag rule by its definition, a byte at a time. */
static unsigned reference_slot(const unsigned char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '{')
            continue;
        for (size_t j = i + 1; j < len; j++)
            if (p[j] == '}')
                return j > i + 1 ? bitwise_slot(p + i + 1, j - i - 1) : bitwise_slot(p, len);
        break;
    }
    return bitwise_slot(p, len);
}

START_TEST(brace_positions)
{
    /* Every length up to 24 (the word test covers 8-16), every place of
     * one '{' and one '}', over bytes that are one bit from a brace (a
     * word test that confused them would show here). */
    unsigned char buf[24];
    for (size_t len = 1; len <= sizeof buf; len++) {
        for (size_t o = 0; o <= len; o++) {
            for (size_t c = 0; c <= len; c++) {
                for (size_t j = 0; j < len; j++)
                    buf[j] = (unsigned char)((j & 1) ? ('{' ^ 0x01) : ('}' ^ 0x80));
                if (o < len)
                    buf[o] = '{';
                if (c < len && c != o)
                    buf[c] = '}';
                ck_assert_uint_eq(rcp__keyslot((const char *)buf, len), reference_slot(buf, len));
            }
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("keyslot");
    TCase *tc = rcptest_tcase(s, "core", 0);

    RCPTEST_ADD(tc, known_vectors, hash_tags, public_api, always_in_range, brace_positions);
    return rcptest_run(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
