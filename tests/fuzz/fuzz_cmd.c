/* tests/fuzz/fuzz_cmd.c: a command's keys and screening from arbitrary
 * argv. The bytes after the first are the arguments, separated by '\n'
 * (each may hold any other byte, NUL included); the first byte picks the
 * variant: counted arguments or C strings (argvlen NULL), and how small the
 * caller's key buffer is.
 *
 * Checked: the command table lookup and its flags, rcp__cmd_keys with a
 * small and a large index buffer (same count, same first indices, every
 * index inside argv and none twice), the key slots, the connection's
 * screening (rcp__command_check), and the request formatting: argv written
 * as RESP by rcp__format_write splits back to the same arguments. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "format.h"
#include "fuzz.h"
#include "logic.h"
#include "rcpipe/common.h"

#define MAX_ARGS 512

static void check_keys(const rcp__cmd *cmd, int argc, const char **argv, const size_t *argvlen,
                       unsigned small)
{
    int few[8], many[64], *all, n, n2, i, j;

    n = rcp__cmd_keys(cmd, argc, argv, argvlen, few, (int)small);
    n2 = rcp__cmd_keys(cmd, argc, argv, argvlen, many, 64);
    FUZZ_CHECK(n == n2);
    FUZZ_CHECK(rcp__cmd_keys(cmd, argc, argv, argvlen, NULL, 0) == n);
    if (!cmd)
        FUZZ_CHECK(n == -1);
    if (n <= 0)
        return;
    FUZZ_CHECK(n <= argc - 1);
    for (i = 0; i < n && i < (int)small; i++)
        FUZZ_CHECK(few[i] == many[i]);
    all = many;
    if (n > 64) {
        /* As the router does when a command has more keys than its
         * buffer: ask again with room for all of them. */
        all = malloc((size_t)n * sizeof *all);
        FUZZ_CHECK(all != NULL);
        FUZZ_CHECK(rcp__cmd_keys(cmd, argc, argv, argvlen, all, n) == n);
        for (i = 0; i < 64; i++)
            FUZZ_CHECK(all[i] == many[i]);
    }
    for (i = 0; i < n; i++) {
        size_t len = argvlen ? argvlen[all[i]] : strlen(argv[all[i]]);
        FUZZ_CHECK(all[i] >= 1 && all[i] < argc);
        FUZZ_CHECK(rcp__keyslot(argv[all[i]], len) < RCP__SLOTS);
        /* No argument is reported twice (bounded: quadratic). */
        for (j = i + 1; j < n && j < i + 64; j++)
            FUZZ_CHECK(all[j] != all[i]);
    }
    if (all != many)
        free(all);
}

static void check_format(int argc, const char **argv, const size_t *argvlen)
{
    size_t len = rcp__format_len(argc, argv, argvlen);
    const char **back = malloc((size_t)argc * sizeof *back);
    size_t *backlen = malloc((size_t)argc * sizeof *backlen);
    char *buf = malloc(len), *end;
    int i;

    FUZZ_CHECK(buf && back && backlen);
    end = rcp__format_write(buf, argc, argv, argvlen);
    FUZZ_CHECK((size_t)(end - buf) == len);
    FUZZ_CHECK(rcp__format_split(buf, len, back, backlen, argc) == argc);
    for (i = 0; i < argc; i++) {
        size_t l = argvlen ? argvlen[i] : strlen(argv[i]);
        FUZZ_CHECK(backlen[i] == l && memcmp(back[i], argv[i], l) == 0);
    }
    /* A prefix is not a whole request. */
    if (len > 1)
        FUZZ_CHECK(rcp__format_split(buf, len - 1, back, backlen, argc) == -1);
    free(buf);
    free(back);
    free(backlen);
}

int rcp_fuzz_cmd(const uint8_t *data, size_t size)
{
    const char *argv[MAX_ARGS];
    size_t argvlen[MAX_ARGS];
    char *copy;
    const char *why = NULL;
    const uint8_t *p, *end;
    const rcp__cmd *cmd;
    int argc = 0, cstrings, rv;
    unsigned small;

    if (size < 2)
        return 0;
    small = 1u + (data[0] >> 1) % 8;
    /* A copy with a NUL after each argument, so the C-string variant can
     * use the same pointers. */
    copy = malloc(size);
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    p = (const uint8_t *)copy;
    end = p + size - 1;
    while (argc < MAX_ARGS) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        argv[argc] = (const char *)p;
        argvlen[argc] = l;
        copy[(const char *)p - copy + l] = '\0';
        argc++;
        if (!nl)
            break;
        p = nl + 1;
    }
    cstrings = data[0] & 1;
    if (cstrings) {
        int i;
        for (i = 0; i < argc; i++)
            if (strlen(argv[i]) != argvlen[i])
                cstrings = 0; /* a NUL inside: only the counted variant applies */
    }

    cmd = rcp__cmd_lookup(argc, argv, cstrings ? NULL : argvlen);
    if (cmd) {
        const char *name = rcp__cmd_name(cmd);
        FUZZ_CHECK(name != NULL && strlen(name) < 64);
        FUZZ_CHECK((rcp__cmd_flags(cmd) & ~RCP__CMD_ALL_FLAGS) == 0);
    } else {
        FUZZ_CHECK(rcp__cmd_flags(cmd) == 0 && rcp__cmd_name(cmd) == NULL);
    }
    check_keys(cmd, argc, argv, cstrings ? NULL : argvlen, small);

    rv = rcp__command_check(argc, argv, cstrings ? NULL : argvlen, &why);
    FUZZ_CHECK(rv == RCP_OK || rv == RCP_ERR_BLOCKING_COMMAND || rv == RCP_ERR_UNSUPPORTED);
    FUZZ_CHECK(rv == RCP_OK || (why != NULL && why[0] != '\0'));
    /* Every command the table flags as blocking is refused by the
     * screening, except XREAD/XREADGROUP, which block only with BLOCK (and
     * are flagged so); every connection-state command is refused. */
    if (cmd && (rcp__cmd_flags(cmd) & RCP__CMD_BLOCKING) &&
        !(rcp__cmd_flags(cmd) & RCP__CMD_BLOCK_OPTION))
        FUZZ_CHECK(rv == RCP_ERR_BLOCKING_COMMAND);
    if (cmd && (rcp__cmd_flags(cmd) & RCP__CMD_BLOCK_OPTION))
        FUZZ_CHECK(!strcmp(rcp__cmd_name(cmd), "xread") || !strcmp(rcp__cmd_name(cmd), "xreadgroup"));
    if (cmd && (rcp__cmd_flags(cmd) & RCP__CMD_CONNSTATE))
        FUZZ_CHECK(rv == RCP_ERR_UNSUPPORTED);

    check_format(argc, argv, cstrings ? NULL : argvlen);
    free(copy);
    return 0;
}
