/* lib/format.c: RESP request formatting.
 *
 * Requests are formatted straight into the connection's pending batch (the
 * length is computed first), so a request costs one copy. Screening (the
 * command table's facts, cmdtable.c) keeps commands that would stall or
 * corrupt a connection shared by many callers (blocking pops, MULTI,
 * SUBSCRIBE, SELECT...) off the pipeline. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "cmdtable.h"
#include "format.h"
#include "rcpipe/common.h"

/* Most numbers in a request are an argument count or a short argument's
 * length: one or two digits, decided without a division. */
static size_t digits(size_t v)
{
    size_t n = 3;
    if (v < 10)
        return 1;
    if (v < 100)
        return 2;
    while (v >= 1000) {
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
    *dst++ = prefix;
    if (v < 10) {
        *dst++ = (char)('0' + v);
    } else if (v < 100) {
        dst[0] = (char)('0' + v / 10);
        dst[1] = (char)('0' + v % 10);
        dst += 2;
    } else {
        size_t n = digits(v);
        char *p = dst + n;
        do {
            *--p = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        dst += n;
    }
    *dst++ = '\r';
    *dst++ = '\n';
    return dst;
}

/* The arguments' part of an encoding, after its "*N" header. */
static char *put_args(char *dst, int argc, const char **argv, const size_t *argvlen)
{
    int i;
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

char *rcp__format_write(char *dst, int argc, const char **argv, const size_t *argvlen)
{
    return put_args(put_num(dst, '*', (size_t)argc), argc, argv, argvlen);
}

size_t rcp__format_source_len(int argc, const char **argv, const size_t *argvlen, size_t vlen)
{
    /* argv's encoding with one argument more in the count, and the
     * value's "$<len>\r\n" header (its bytes and CRLF come from the
     * source). */
    return rcp__format_len(argc, argv, argvlen) - digits((size_t)argc) +
           digits((size_t)argc + 1) + 1 + digits(vlen) + 2;
}

char *rcp__format_source_write(char *dst, int argc, const char **argv, const size_t *argvlen,
                               size_t vlen)
{
    dst = put_args(put_num(dst, '*', (size_t)argc + 1), argc, argv, argvlen);
    return put_num(dst, '$', vlen);
}

/* The first and last w bytes of s[0..l) to d (w <= l <= 2w): with w a
 * constant, two loads and two stores. */
static inline void copy_ends(char *d, const char *s, size_t l, size_t w)
{
    uint64_t a = 0, b = 0;
    memcpy(&a, s, w);
    memcpy(&b, s + l - w, w);
    memcpy(d, &a, w);
    memcpy(d + l - w, &b, w);
}

/* memcpy for an argument: a short one (a command name, a key) is copied
 * with at most four loads and stores of its own bytes, instead of a call
 * into libc's memcpy (about 15 instructions each, two per GET). */
static inline void copy_arg(char *d, const char *s, size_t l)
{
    if (l > 16) {
        memcpy(d, s, l);
    } else if (l >= 8) {
        copy_ends(d, s, l, 8);
    } else if (l >= 4) {
        copy_ends(d, s, l, 4);
    } else if (l) {
        d[0] = s[0];
        d[l / 2] = s[l / 2];
        d[l - 1] = s[l - 1];
    }
}

size_t rcp__format_try(char *dst, size_t cap, int argc, const char **argv, const size_t *argvlen)
{
    /* A number takes at most 20 digits: a header at most 23 bytes, an
     * argument at most 25 more than its length. */
    char *p = dst, *end = dst + cap;
    int i;
    if (cap < 23)
        return 0;
    p = put_num(p, '*', (size_t)argc);
    for (i = 0; i < argc; i++) {
        size_t l = arglen(argv, argvlen, i);
        if ((size_t)(end - p) < 25 || (size_t)(end - p) - 25 < l)
            return 0;
        p = put_num(p, '$', l);
        copy_arg(p, argv[i], l);
        p += l;
        *p++ = '\r';
        *p++ = '\n';
    }
    return (size_t)(p - dst);
}

/* Arguments are numbered as in argv: 0 is the command's name. */

/* The printf-style formatter's growing buffers: the bytes of every
 * argument, back to back, and where each argument starts. Small commands
 * stay on the stack. */
typedef struct fmt_state {
    char *bytes;
    size_t len, cap;
    size_t *starts;
    int nargs, capargs;
    char stack_bytes[512];
    size_t stack_starts[32];
} fmt_state;

static int fmt_reserve(fmt_state *st, size_t more)
{
    size_t cap;
    char *nb;
    if (st->len + more <= st->cap)
        return 0;
    cap = st->cap * 2;
    while (cap < st->len + more)
        cap *= 2;
    nb = st->bytes == st->stack_bytes ? rcp__malloc(cap) : rcp__realloc(st->bytes, cap);
    if (!nb)
        return -1;
    if (st->bytes == st->stack_bytes)
        memcpy(nb, st->stack_bytes, st->len);
    st->bytes = nb;
    st->cap = cap;
    return 0;
}

static int fmt_append(fmt_state *st, const void *p, size_t n)
{
    if (fmt_reserve(st, n) < 0)
        return -1;
    if (n)
        memcpy(st->bytes + st->len, p, n);
    st->len += n;
    return 0;
}

/* Starts a new argument at the current end. */
static int fmt_open_arg(fmt_state *st)
{
    if (st->nargs == st->capargs) {
        int cap = st->capargs * 2;
        size_t *ns = st->starts == st->stack_starts
                         ? rcp__malloc((size_t)cap * sizeof(*ns))
                         : rcp__realloc(st->starts, (size_t)cap * sizeof(*ns));
        if (!ns)
            return -1;
        if (st->starts == st->stack_starts)
            memcpy(ns, st->stack_starts, sizeof st->stack_starts);
        st->starts = ns;
        st->capargs = cap;
    }
    st->starts[st->nargs++] = st->len;
    return 0;
}

/* One printf conversion other than %s and %b (an integer or a double with
 * its flags, width, precision and length modifier, as hiredis's formatter
 * takes them), appended. 0, -1 for OOM, -2 for a conversion we do not
 * know (the argument list cannot be walked past it). */
static int fmt_number(fmt_state *st, const char **pc, va_list *ap)
{
    const char *c = *pc, *start = c - 1; /* at '%' */
    char spec[32], tmp[512];
    int n = 0, lng = 0, shrt = 0;
    size_t sl;
    while (*c && strchr("#0-+ ", *c))
        c++;
    while (*c >= '0' && *c <= '9')
        c++;
    if (*c == '.') {
        c++;
        while (*c >= '0' && *c <= '9')
            c++;
    }
    if (c[0] == 'h' && c[1] == 'h') {
        shrt = 2;
        c += 2;
    } else if (c[0] == 'h') {
        shrt = 1;
        c++;
    } else if (c[0] == 'l' && c[1] == 'l') {
        lng = 2;
        c += 2;
    } else if (c[0] == 'l') {
        lng = 1;
        c++;
    }
    if (!*c || !strchr("diouxXeEfFgGaA", *c))
        return -2;
    sl = (size_t)(c - start) + 1;
    if (sl >= sizeof spec)
        return -2;
    memcpy(spec, start, sl);
    spec[sl] = '\0';
    if (strchr("eEfFgGaA", *c)) {
        if (lng || shrt)
            return -2;
        n = snprintf(tmp, sizeof tmp, spec, va_arg(*ap, double));
    } else if (strchr("di", *c)) {
        if (lng == 2)
            n = snprintf(tmp, sizeof tmp, spec, va_arg(*ap, long long));
        else if (lng == 1)
            n = snprintf(tmp, sizeof tmp, spec, va_arg(*ap, long));
        else
            n = snprintf(tmp, sizeof tmp, spec, va_arg(*ap, int)); /* hh, h: promoted */
    } else {
        if (lng == 2)
            n = snprintf(tmp, sizeof tmp, spec, va_arg(*ap, unsigned long long));
        else if (lng == 1)
            n = snprintf(tmp, sizeof tmp, spec, va_arg(*ap, unsigned long));
        else
            n = snprintf(tmp, sizeof tmp, spec, va_arg(*ap, unsigned));
    }
    if (n < 0 || (size_t)n >= sizeof tmp)
        return -2;
    *pc = c + 1;
    return fmt_append(st, tmp, (size_t)n);
}

int rcp__format_vprintf(char **out, size_t *outlen, const char *fmt, va_list ap,
                        const char **why)
{
    static _Thread_local char msg[160];
    fmt_state st;
    const char *c = fmt;
    int touched = 0, rv = RCP_OK, i;
    va_list cp;
    size_t total;
    char *dst;

    if (why)
        *why = NULL;
    if (!fmt)
        return RCP_ERR_INVALID;
    st.bytes = st.stack_bytes;
    st.cap = sizeof st.stack_bytes;
    st.len = 0;
    st.starts = st.stack_starts;
    st.capargs = (int)(sizeof st.stack_starts / sizeof st.stack_starts[0]);
    st.nargs = 0;
    va_copy(cp, ap);
    /* Arguments are separated by spaces; a conversion that produces
     * nothing (%s of "") still makes an (empty) argument. */
    while (*c && rv == RCP_OK) {
        if (*c == ' ') {
            touched = 0;
            c++;
            continue;
        }
        if (!touched) {
            if (fmt_open_arg(&st) < 0) {
                rv = RCP_ERR_OOM;
                break;
            }
            touched = 1;
        }
        if (*c != '%' || c[1] == '\0') {
            if (fmt_append(&st, c, 1) < 0)
                rv = RCP_ERR_OOM;
            c++;
            continue;
        }
        c++;
        if (*c == 's') {
            const char *str = va_arg(cp, const char *);
            if (!str) {
                snprintf(msg, sizeof msg, "argument %d: NULL string for %%s", st.nargs - 1);
                rv = RCP_ERR_INVALID;
                break;
            }
            if (fmt_append(&st, str, strlen(str)) < 0)
                rv = RCP_ERR_OOM;
            c++;
        } else if (*c == 'b') {
            const void *p = va_arg(cp, const void *);
            size_t n = va_arg(cp, size_t);
            if (!p && n) {
                snprintf(msg, sizeof msg, "argument %d: NULL pointer with length %zu for %%b",
                         st.nargs - 1, n);
                rv = RCP_ERR_INVALID;
                break;
            }
            if (fmt_append(&st, p, n) < 0)
                rv = RCP_ERR_OOM;
            c++;
        } else if (*c == '%') {
            if (fmt_append(&st, "%", 1) < 0)
                rv = RCP_ERR_OOM;
            c++;
        } else {
            int r = fmt_number(&st, &c, &cp);
            if (r == -1)
                rv = RCP_ERR_OOM;
            else if (r == -2) {
                snprintf(msg, sizeof msg, "argument %d: unsupported conversion in the format "
                                          "(%%s, %%b, %%%%, and integer or double conversions)",
                         st.nargs - 1);
                rv = RCP_ERR_INVALID;
            }
        }
    }
    va_end(cp);
    if (rv == RCP_OK && st.nargs == 0) {
        snprintf(msg, sizeof msg, "empty command");
        rv = RCP_ERR_INVALID;
    }
    if (rv == RCP_OK) {
        /* RESP: *N, then $len and the bytes of each argument. */
        total = 1 + digits((size_t)st.nargs) + 2;
        for (i = 0; i < st.nargs; i++) {
            size_t l = (i + 1 < st.nargs ? st.starts[i + 1] : st.len) - st.starts[i];
            total += 1 + digits(l) + 2 + l + 2;
        }
        dst = rcp__malloc(total);
        if (!dst) {
            rv = RCP_ERR_OOM;
        } else {
            char *w = put_num(dst, '*', (size_t)st.nargs);
            for (i = 0; i < st.nargs; i++) {
                size_t l = (i + 1 < st.nargs ? st.starts[i + 1] : st.len) - st.starts[i];
                w = put_num(w, '$', l);
                if (l)
                    memcpy(w, st.bytes + st.starts[i], l);
                w += l;
                *w++ = '\r';
                *w++ = '\n';
            }
            *out = dst;
            *outlen = total;
        }
    }
    if (rv == RCP_ERR_INVALID && why)
        *why = msg;
    if (st.bytes != st.stack_bytes)
        rcp__free(st.bytes);
    if (st.starts != st.stack_starts)
        rcp__free(st.starts);
    return rv;
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
    rv = rcp__format_vprintf(&out->buf, &out->len, fmt, ap, why);
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

int rcp__format_new(int argc, const char **argv, const size_t *argvlen, size_t max_bytes,
                    char **buf, size_t *len)
{
    const char *why;
    int i, rv;
    if (argc < 1 || !argv)
        return RCP_ERR_INVALID;
    for (i = 0; i < argc; i++)
        if (!argv[i])
            return RCP_ERR_INVALID;
    rv = rcp__command_check(argc, argv, argvlen, &why);
    if (rv != RCP_OK)
        return rv;
    *len = rcp__format_len(argc, argv, argvlen);
    if (*len > max_bytes)
        return RCP_ERR_TOO_LARGE;
    *buf = rcp__malloc(*len);
    if (!*buf)
        return RCP_ERR_OOM;
    rcp__format_write(*buf, argc, argv, argvlen);
    return RCP_OK;
}

int rcp__command_check(int argc, const char **argv, const size_t *argvlen, const char **why)
{
    if (argc < 1)
        return RCP_ERR_INVALID;
    return rcp__cmd_screen(rcp__cmd_lookup(argc, argv, argvlen), argc, argv, argvlen, why);
}
