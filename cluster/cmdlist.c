/* cluster/cmdlist.c: formatted commands queued on a transaction or a
 * batch until it is sent. */
#include "cmdlist.h"

#include "alloc.h"
#include "format.h"
#include "rcpipe/common.h"

int rcp__cmdlist_add(rcp__cmdlist *l, size_t max_bytes, int argc, const char **argv,
                     const size_t *argvlen)
{
    size_t len;
    char *buf;
    int rv;
    if (!l)
        return RCP_ERR_INVALID;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **nb = rcp__realloc(l->buf, cap * sizeof(*nb));
        size_t *nl;
        if (!nb)
            return RCP_ERR_OOM;
        l->buf = nb;
        nl = rcp__realloc(l->len, cap * sizeof(*nl));
        if (!nl)
            return RCP_ERR_OOM;
        l->len = nl;
        l->cap = cap;
    }
    rv = rcp__format_new(argc, argv, argvlen, max_bytes, &buf, &len);
    if (rv != RCP_OK)
        return rv;
    l->buf[l->n] = buf;
    l->len[l->n++] = len;
    return RCP_OK;
}

int rcp__cmd_formatted(const char *fmt, va_list ap,
                       int (*take)(void *data, int argc, const char **argv, const size_t *argvlen),
                       void *data)
{
    rcp__fmt_cmd cmd;
    const char *why;
    int rv;
    if (!fmt)
        return RCP_ERR_INVALID;
    rv = rcp__format_command(&cmd, fmt, ap, &why);
    if (rv != RCP_OK)
        return rv;
    rv = take(data, cmd.argc, cmd.argv, cmd.argvlen);
    rcp__free(cmd.buf);
    return rv;
}

void rcp__cmdlist_clear(rcp__cmdlist *l)
{
    size_t i;
    for (i = 0; i < l->n; i++)
        rcp__free(l->buf[i]);
    l->n = 0;
}

void rcp__cmdlist_free(rcp__cmdlist *l)
{
    rcp__cmdlist_clear(l);
    rcp__free(l->buf);
    rcp__free(l->len);
    l->buf = NULL;
    l->len = NULL;
    l->cap = 0;
}
