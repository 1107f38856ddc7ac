/* lib/format.c: RESP request formatting.
 *
 * Requests are formatted straight into the connection's pending batch (the
 * length is computed first), so a request costs one copy. Screening (the
 * command table's facts, cmdtable.c) keeps commands that would stall or
 * corrupt a connection shared by many callers (blocking pops, MULTI,
 * SUBSCRIBE, SELECT...) off the pipeline. */
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "cmdtable.h"
#include "format.h"
#include "rcpipe/common.h"

static size_t digits(size_t v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static size_t arglen(const char **argv, const size_t *argvlen, int i)
{
    return argvlen ? argvlen[i] : strlen(argv[i]);
}

size_t rcp__format_len(int argc, const char **argv, const size_t *argvlen)
{
    size_t total = 1 + digits((size_t)argc) + 2;
    int i;
    for (i = 0; i < argc; i++) {
        size_t l = arglen(argv, argvlen, i);
        total += 1 + digits(l) + 2 + l + 2;
    }
    return total;
}

static char *put_num(char *dst, char prefix, size_t v)
{
    char tmp[24];
    int n = 0;
    *dst++ = prefix;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *dst++ = tmp[--n];
    *dst++ = '\r';
    *dst++ = '\n';
    return dst;
}

char *rcp__format_write(char *dst, int argc, const char **argv, const size_t *argvlen)
{
    int i;
    dst = put_num(dst, '*', (size_t)argc);
    for (i = 0; i < argc; i++) {
        size_t l = arglen(argv, argvlen, i);
        dst = put_num(dst, '$', l);
        if (l)
            memcpy(dst, argv[i], l);
        dst += l;
        *dst++ = '\r';
        *dst++ = '\n';
    }
    return dst;
}

int rcp__format_vprintf(char **out, size_t *outlen, const char *fmt, va_list ap)
{
    char *cmd = NULL;
    char *copy;
    int len;
    va_list cp;
    va_copy(cp, ap);
    len = redisvFormatCommand(&cmd, fmt, cp);
    va_end(cp);
    /* hiredis 0.14: -1 when out of memory, -2 for a bad format string. */
    if (len == -1)
        return RCP_ERR_OOM;
    if (len < 0 || !cmd)
        return RCP_ERR_INVALID;
    /* hiredis allocated with malloc; hand back memory from our allocator. */
    copy = rcp__malloc((size_t)len);
    if (!copy) {
        free(cmd);
        return RCP_ERR_OOM;
    }
    memcpy(copy, cmd, (size_t)len);
    free(cmd);
    *out = copy;
    *outlen = (size_t)len;
    return RCP_OK;
}

static int read_num(const char **p, const char *end, char prefix, size_t *v)
{
    const char *s = *p;
    size_t n = 0;
    if (s >= end || *s != prefix)
        return -1;
    s++;
    if (s >= end || *s < '0' || *s > '9')
        return -1;
    while (s < end && *s >= '0' && *s <= '9')
        n = n * 10 + (size_t)(*s++ - '0');
    if (end - s < 2 || s[0] != '\r' || s[1] != '\n')
        return -1;
    *p = s + 2;
    *v = n;
    return 0;
}

int rcp__format_split(const char *buf, size_t len, const char **argv, size_t *argvlen, int max)
{
    const char *p = buf, *end = buf + len;
    size_t argc, i;
    if (read_num(&p, end, '*', &argc) < 0 || argc > 0x7fffffff)
        return -1;
    for (i = 0; i < argc; i++) {
        size_t l;
        if (read_num(&p, end, '$', &l) < 0 || (size_t)(end - p) < l + 2)
            return -1;
        if ((int)i < max) {
            argv[i] = p;
            argvlen[i] = l;
        }
        p += l + 2;
    }
    return (int)argc;
}

int rcp__format_command(rcp__fmt_cmd *out, const char *fmt, va_list ap, const char **why)
{
    int rv;
    *why = NULL;
    if (!fmt)
        return RCP_ERR_INVALID;
    rv = rcp__format_vprintf(&out->buf, &out->len, fmt, ap);
    if (rv != RCP_OK)
        return rv;
    out->argc = rcp__format_split(out->buf, out->len, out->argv, out->argvlen, RCP__FMT_MAX_ARGS);
    if (out->argc >= 1 && out->argc <= RCP__FMT_MAX_ARGS)
        return RCP_OK;
    if (out->argc > RCP__FMT_MAX_ARGS)
        *why = "the format variants take at most 256 arguments; use the argv variants";
    rcp__free(out->buf);
    out->buf = NULL;
    return RCP_ERR_INVALID;
}

int rcp__arg_is(const char *arg, size_t len, const char *word)
{
    size_t i;
    for (i = 0; i < len; i++) {
        char a = arg[i], w = word[i];
        if (!w)
            return 0;
        if (a >= 'a' && a <= 'z')
            a = (char)(a - 32);
        if (w >= 'a' && w <= 'z')
            w = (char)(w - 32);
        if (a != w)
            return 0;
    }
    return word[len] == '\0';
}

int rcp__command_check(int argc, const char **argv, const size_t *argvlen, const char **why)
{
    if (argc < 1)
        return RCP_ERR_INVALID;
    return rcp__cmd_screen(rcp__cmd_lookup(argc, argv, argvlen), argc, argv, argvlen, why);
}
