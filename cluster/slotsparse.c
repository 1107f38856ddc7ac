/* cluster/slotsparse.c: turns a CLUSTER SLOTS reply into a validated table
 * of slot ranges and their nodes (master first, then replicas), ready for
 * the slot map builder.
 *
 * The reply is untrusted input: a buggy or hostile node must not be able to
 * crash the client or install a nonsense map. So every element's type and
 * range is checked, overlapping ranges are refused, and any failure returns
 * one message that says which range and node were wrong; the caller then
 * keeps its old map. The walk has a fixed depth (table, range, node,
 * metadata), so no nesting in the reply can make it recurse.
 *
 * Formats accepted: a node is [endpoint, port] (before 4.0), plus the node
 * id (4.0+), plus a flat key/value metadata array (7.0+, e.g. ["hostname",
 * "h1"] or ["ip", "10.0.0.1"] when hostnames are the preferred endpoint).
 * Extra trailing elements are ignored. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "logic.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int is_str(const rcp_reply *r)
{
    return r && (r->type == RCP_REPLY_STRING || r->type == RCP_REPLY_STATUS) && r->str;
}

static int is_int(const rcp_reply *r)
{
    return r && r->type == RCP_REPLY_INTEGER;
}

static int is_arr(const rcp_reply *r)
{
    return r && r->type == RCP_REPLY_ARRAY && (r->elements == 0 || r->element);
}

/* An endpoint usable as a host name: non-empty, not the "?" a node reports
 * when it does not know its own address, no NUL inside. */
static int usable_host(const char *s, size_t len)
{
    return len > 0 && !(len == 1 && s[0] == '?') && !memchr(s, '\0', len);
}

static int copy_host(char *dst, size_t cap, const char *s, size_t len)
{
    if (len >= cap)
        return -1;
    memcpy(dst, s, len);
    dst[len] = '\0';
    return 0;
}

/* Fills one node from [endpoint, port, id?, metadata?]. */
static int parse_node(const rcp_reply *n, const char *asked_host, rcp__slots_node *out,
                      size_t ri, size_t ni, char *err, size_t errlen)
{
    const rcp_reply *ep, *port;
    const char *host = NULL;
    size_t hostlen = 0, i;

    if (!is_arr(n) || n->elements < 2)
        return fail(err, errlen, "range %zu node %zu: not an [endpoint, port, ...] array", ri, ni);
    ep = n->element[0];
    port = n->element[1];
    if (!is_str(ep) && !(ep && ep->type == RCP_REPLY_NIL))
        return fail(err, errlen, "range %zu node %zu: endpoint is not a string", ri, ni);
    if (!is_int(port) || port->integer < 1 || port->integer > 65535)
        return fail(err, errlen, "range %zu node %zu: port is not an integer in 1..65535", ri,
                    ni);
    out->port = (int)port->integer;
    if (is_str(ep) && usable_host(ep->str, ep->len)) {
        host = ep->str;
        hostlen = ep->len;
    }

    out->id[0] = '\0';
    if (n->elements > 2) {
        const rcp_reply *id = n->element[2];
        if (!is_str(id))
            return fail(err, errlen, "range %zu node %zu: node id is not a string", ri, ni);
        if (id->len >= sizeof out->id || memchr(id->str, '\0', id->len))
            return fail(err, errlen, "range %zu node %zu: node id too long or not text", ri, ni);
        memcpy(out->id, id->str, id->len);
        out->id[id->len] = '\0';
    }

    if (n->elements > 3) {
        const rcp_reply *meta = n->element[3];
        if (!is_arr(meta) || meta->elements % 2)
            return fail(err, errlen, "range %zu node %zu: metadata is not a key/value array", ri,
                        ni);
        for (i = 0; i < meta->elements; i += 2) {
            const rcp_reply *k = meta->element[i], *v = meta->element[i + 1];
            if (!is_str(k))
                return fail(err, errlen, "range %zu node %zu: metadata key is not a string", ri,
                            ni);
            /* Only the hostname matters, and only when there is no IP. Other
             * keys (and their values, of whatever type) are for later
             * servers to define. */
            if (!host && k->len == 8 && memcmp(k->str, "hostname", 8) == 0) {
                if (!is_str(v))
                    return fail(err, errlen, "range %zu node %zu: hostname is not a string",
                                ri, ni);
                if (usable_host(v->str, v->len)) {
                    host = v->str;
                    hostlen = v->len;
                }
            }
        }
    }

    if (!host && asked_host && usable_host(asked_host, strlen(asked_host))) {
        host = asked_host;
        hostlen = strlen(asked_host);
    }
    if (!host)
        return fail(err, errlen, "range %zu node %zu: no usable endpoint", ri, ni);
    if (copy_host(out->host, sizeof out->host, host, hostlen) < 0)
        return fail(err, errlen, "range %zu node %zu: endpoint longer than %zu bytes", ri, ni,
                    sizeof out->host - 1);
    return 0;
}

static int parse_range(const rcp_reply *r, const char *asked_host, rcp__slots_range *out,
                       size_t ri, char *err, size_t errlen)
{
    size_t i;

    if (!is_arr(r) || r->elements < 3)
        return fail(err, errlen, "range %zu: not a [start, end, master, ...] array", ri);
    if (!is_int(r->element[0]) || !is_int(r->element[1]))
        return fail(err, errlen, "range %zu: start or end slot is not an integer", ri);
    if (r->element[0]->integer < 0 || r->element[1]->integer > RCP__SLOTS - 1 ||
        r->element[0]->integer > r->element[1]->integer)
        return fail(err, errlen, "range %zu: slots %lld-%lld not within 0..%d in order", ri,
                    r->element[0]->integer, r->element[1]->integer, RCP__SLOTS - 1);
    out->start = (unsigned)r->element[0]->integer;
    out->end = (unsigned)r->element[1]->integer;
    out->nnodes = r->elements - 2;
    out->nodes = rcp__calloc(out->nnodes, sizeof *out->nodes);
    if (!out->nodes) {
        out->nnodes = 0;
        return fail(err, errlen, "out of memory");
    }
    for (i = 0; i < out->nnodes; i++)
        if (parse_node(r->element[2 + i], asked_host, &out->nodes[i], ri, i, err, errlen) < 0)
            return -1;
    return 0;
}

int rcp__slots_parse(const rcp_reply *r, const char *asked_host, rcp__slots_table **out,
                     char *err, size_t errlen)
{
    rcp__slots_table *t;
    unsigned char seen[RCP__SLOTS / 8];
    size_t i;
    unsigned s;

    if (!out)
        return fail(err, errlen, "no output pointer");
    *out = NULL;
    if (!r)
        return fail(err, errlen, "no reply");
    if (r->type == RCP_REPLY_ERROR)
        return fail(err, errlen, "server error: %.200s", r->str ? r->str : "");
    if (!is_arr(r))
        return fail(err, errlen, "CLUSTER SLOTS reply is not an array (type %d)", r->type);
    if (r->elements == 0)
        return fail(err, errlen, "empty slot table");
    if (r->elements > RCP__SLOTS)
        return fail(err, errlen, "more ranges (%zu) than slots", r->elements);

    t = rcp__calloc(1, sizeof *t);
    if (!t)
        return fail(err, errlen, "out of memory");
    t->ranges = rcp__calloc(r->elements, sizeof *t->ranges);
    if (!t->ranges) {
        rcp__free(t);
        return fail(err, errlen, "out of memory");
    }
    memset(seen, 0, sizeof seen);
    for (i = 0; i < r->elements; i++) {
        rcp__slots_range *rg = &t->ranges[i];
        t->nranges = i + 1; /* so that free releases what this range allocated */
        if (parse_range(r->element[i], asked_host, rg, i, err, errlen) < 0)
            goto bad;
        for (s = rg->start; s <= rg->end; s++) {
            if (seen[s / 8] & (1u << (s % 8))) {
                fail(err, errlen, "range %zu (slots %u-%u) overlaps another range at slot %u", i,
                     rg->start, rg->end, s);
                goto bad;
            }
            seen[s / 8] |= (unsigned char)(1u << (s % 8));
        }
        t->covered += rg->end - rg->start + 1;
    }
    *out = t;
    return 0;

bad:
    rcp__slots_free(t);
    return -1;
}

void rcp__slots_free(rcp__slots_table *t)
{
    size_t i;
    if (!t)
        return;
    for (i = 0; i < t->nranges; i++)
        rcp__free(t->ranges[i].nodes);
    rcp__free(t->ranges);
    rcp__free(t);
}
