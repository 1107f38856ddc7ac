/* cluster/redirect.c: reads a server error reply and says what the cluster
 * client should do about it: follow a MOVED or ASK redirect, retry later
 * (TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN), treat the node as a demoted
 * master (READONLY), or hand the error to the caller.
 *
 * The text comes from the network, so it is parsed strictly and bounded:
 * a MOVED or ASK we cannot fully read is reported as RCP__RD_BAD rather
 * than guessed at, since following a wrong endpoint is worse than failing. */
#include <stddef.h>
#include <string.h>

#include "logic.h"

/* 1 if str starts with word followed by a space or the end. */
static int starts_word(const char *str, size_t len, const char *word)
{
    size_t n = strlen(word);
    return len >= n && memcmp(str, word, n) == 0 && (len == n || str[n] == ' ');
}

/* A decimal number of 1..maxdigits digits in [lo, hi]; -1 otherwise. */
static long parse_num(const char *s, size_t n, size_t maxdigits, long lo, long hi)
{
    long v = 0;
    size_t i;
    if (n == 0 || n > maxdigits)
        return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v >= lo && v <= hi ? v : -1;
}

/* "<slot> <host>:<port>" after MOVED/ASK. The port follows the last ':',
 * so an unbracketed IPv6 address ("::1:6380") works as well as a bracketed
 * one ("[::1]:6380"). An empty host (":6380") is valid: the server means
 * "the address you reached me at". */
static int parse_target(const char *p, size_t len, rcp__redirect *out)
{
    const char *sp, *colon, *host, *end;
    size_t hostlen;
    long slot, port;

    sp = memchr(p, ' ', len);
    if (!sp)
        return -1;
    slot = parse_num(p, (size_t)(sp - p), 5, 0, RCP__SLOTS - 1);
    if (slot < 0)
        return -1;
    host = sp + 1;
    /* The endpoint ends at the end or at a space: anything after it is
     * ignored, so a future server adding words does not break us. */
    end = memchr(host, ' ', len - (size_t)(host - p));
    if (!end)
        end = p + len;
    colon = NULL;
    for (const char *q = host; q < end; q++)
        if (*q == ':')
            colon = q;
    if (!colon)
        return -1;
    port = parse_num(colon + 1, (size_t)(end - colon - 1), 5, 1, 65535);
    if (port < 0)
        return -1;
    hostlen = (size_t)(colon - host);
    if (hostlen >= 2 && host[0] == '[' && host[hostlen - 1] == ']') {
        host++;
        hostlen -= 2;
    }
    if (hostlen >= sizeof out->host || memchr(host, '\0', hostlen))
        return -1;
    memcpy(out->host, host, hostlen);
    out->host[hostlen] = '\0';
    out->slot = (unsigned)slot;
    out->port = (int)port;
    return 0;
}

void rcp__parse_redirect(const char *str, size_t len, rcp__redirect *out)
{
    static const struct {
        const char *word;
        int kind;
    } retry[] = {
        {"TRYAGAIN", RCP__RD_TRYAGAIN},     {"CLUSTERDOWN", RCP__RD_CLUSTERDOWN},
        {"LOADING", RCP__RD_LOADING},       {"MASTERDOWN", RCP__RD_MASTERDOWN},
        {"READONLY", RCP__RD_READONLY},
    };
    size_t i;

    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!str)
        return;
    if (starts_word(str, len, "MOVED") || starts_word(str, len, "ASK")) {
        size_t skip = str[0] == 'M' ? 6 : 4;
        int kind = str[0] == 'M' ? RCP__RD_MOVED : RCP__RD_ASK;
        if (len <= skip || parse_target(str + skip, len - skip, out) < 0) {
            memset(out, 0, sizeof *out);
            out->kind = RCP__RD_BAD;
            return;
        }
        out->kind = kind;
        return;
    }
    for (i = 0; i < sizeof retry / sizeof retry[0]; i++) {
        if (starts_word(str, len, retry[i].word)) {
            out->kind = retry[i].kind;
            return;
        }
    }
}
