/* tests/fuzz/fuzz_redirect.c: redirect parsing. The bytes are an error
 * reply's text (not NUL-terminated: the parser gets a counted string, in a
 * buffer of exactly that size). What it reports is checked against the
 * text, and a MOVED/ASK it accepts must parse back to the same redirect
 * once printed in the server's own format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "logic.h"

static int starts(const uint8_t *d, size_t n, const char *w)
{
    size_t l = strlen(w);
    return n >= l && memcmp(d, w, l) == 0 && (n == l || d[l] == ' ');
}

int rcp_fuzz_redirect(const uint8_t *data, size_t size)
{
    rcp__redirect rd, again;
    char text[300];
    size_t hl;
    int len;

    rcp__parse_redirect((const char *)data, size, &rd);
    switch (rd.kind) {
    case RCP__RD_MOVED:
    case RCP__RD_ASK:
        FUZZ_CHECK(starts(data, size, rd.kind == RCP__RD_MOVED ? "MOVED" : "ASK"));
        FUZZ_CHECK(rd.slot < RCP__SLOTS);
        FUZZ_CHECK(rd.port >= 1 && rd.port <= 65535);
        hl = strnlen(rd.host, sizeof rd.host);
        FUZZ_CHECK(hl < sizeof rd.host);
        FUZZ_CHECK(memchr(rd.host, ' ', hl) == NULL);
        /* Printed back: brackets again around a host that would otherwise
         * lose its own outer brackets. */
        if (hl >= 2 && rd.host[0] == '[' && rd.host[hl - 1] == ']')
            len = snprintf(text, sizeof text, "%s %u [%s]:%d",
                           rd.kind == RCP__RD_MOVED ? "MOVED" : "ASK", rd.slot, rd.host, rd.port);
        else
            len = snprintf(text, sizeof text, "%s %u %s:%d",
                           rd.kind == RCP__RD_MOVED ? "MOVED" : "ASK", rd.slot, rd.host, rd.port);
        FUZZ_CHECK(len > 0 && (size_t)len < sizeof text);
        rcp__parse_redirect(text, (size_t)len, &again);
        FUZZ_CHECK(again.kind == rd.kind && again.slot == rd.slot && again.port == rd.port);
        FUZZ_CHECK(strcmp(again.host, rd.host) == 0);
        break;
    case RCP__RD_BAD:
        FUZZ_CHECK(starts(data, size, "MOVED") || starts(data, size, "ASK"));
        FUZZ_CHECK(rd.host[0] == '\0' && rd.port == 0 && rd.slot == 0);
        break;
    case RCP__RD_TRYAGAIN:
        FUZZ_CHECK(starts(data, size, "TRYAGAIN"));
        break;
    case RCP__RD_CLUSTERDOWN:
        FUZZ_CHECK(starts(data, size, "CLUSTERDOWN"));
        break;
    case RCP__RD_LOADING:
        FUZZ_CHECK(starts(data, size, "LOADING"));
        break;
    case RCP__RD_MASTERDOWN:
        FUZZ_CHECK(starts(data, size, "MASTERDOWN"));
        break;
    case RCP__RD_READONLY:
        FUZZ_CHECK(starts(data, size, "READONLY"));
        break;
    case RCP__RD_NONE:
        FUZZ_CHECK(!starts(data, size, "MOVED") && !starts(data, size, "ASK") &&
                   !starts(data, size, "TRYAGAIN") && !starts(data, size, "CLUSTERDOWN") &&
                   !starts(data, size, "LOADING") && !starts(data, size, "MASTERDOWN") &&
                   !starts(data, size, "READONLY"));
        break;
    default:
        FUZZ_CHECK(!"redirect kind out of range");
    }

    /* The same text as a reply from the wire: "-" + text + CRLF, when it
     * is one line, read by the library's reader first. */
    if (size < 512 && !memchr(data, '\r', size) && !memchr(data, '\n', size)) {
        uint8_t *line = malloc(size + 3);
        rcp_reply *r;
        FUZZ_CHECK(line != NULL);
        line[0] = '-';
        memcpy(line + 1, data, size);
        memcpy(line + 1 + size, "\r\n", 2);
        rcp_fuzz_alloc_init();
        r = rcp_fuzz_parse_one(line, size + 3);
        if (r) {
            FUZZ_CHECK(r->type == RCP_REPLY_ERROR && r->len == size);
            rcp__parse_redirect(r->str, r->len, &again);
            FUZZ_CHECK(memcmp(&again, &rd, sizeof rd) == 0);
            rcp_reply_free(r);
        }
        free(line);
    }
    return 0;
}
