/* lib/options.c: what values the connection options may take, and the
 * handle's kept copy of its TLS options. A value out of range is refused
 * when the handle is opened, with the option's name, the value and the
 * range, instead of failing later as an empty "connect failed". The
 * ranges are documented in docs/api.md. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "connection.h"
#include "options.h"
#include "tls.h"

#define MAX_INFLIGHT (1u << 24)

/* A size for the range check (no size option comes near LLONG_MAX). */
static long long as_ll(size_t v)
{
    return v > (size_t)LLONG_MAX ? LLONG_MAX : (long long)v;
}

/* The TLS options: consistent, or refused by name. In a build without
 * TLS any of them set is RCP_ERR_UNSUPPORTED. */
static int tls_check(const rcp_conn_options *o, char *why, size_t len)
{
    const struct {
        const char *name;
        const char *value;
    } strs[] = {
        {"tls_ca_file", o->tls_ca_file},       {"tls_ca_dir", o->tls_ca_dir},
        {"tls_cert_file", o->tls_cert_file},   {"tls_key_file", o->tls_key_file},
        {"tls_server_name", o->tls_server_name}, {"tls_ciphers", o->tls_ciphers},
        {"tls_ciphersuites", o->tls_ciphersuites},
    };
    const char *set = NULL;
    size_t i;
    for (i = 0; i < sizeof strs / sizeof strs[0] && !set; i++)
        if (strs[i].value)
            set = strs[i].name;
    if (!set && o->tls_insecure_skip_verify)
        set = "tls_insecure_skip_verify";
    if (!set && o->tls_min_version)
        set = "tls_min_version";
#ifndef RCP_WITH_TLS
    if (o->tls || set) {
        snprintf(why, len, "%s is set, but this build of rcpipe has no TLS (built with "
                 "-Dtls=disabled or without OpenSSL)", o->tls ? "tls" : set);
        return RCP_ERR_UNSUPPORTED;
    }
    return RCP_OK;
#else
    if (o->tls != 0 && o->tls != 1) {
        snprintf(why, len, "tls %d is not 0 or 1", o->tls);
        return RCP_ERR_INVALID;
    }
    if (!o->tls) {
        if (set) {
            snprintf(why, len, "%s is set but tls is 0 (set tls = 1, or the connection would "
                     "be plain text)", set);
            return RCP_ERR_INVALID;
        }
        return RCP_OK;
    }
    for (i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        if (strs[i].value && !*strs[i].value) {
            snprintf(why, len, "%s is empty (NULL for the default)", strs[i].name);
            return RCP_ERR_INVALID;
        }
    }
    if (!o->tls_cert_file != !o->tls_key_file) {
        snprintf(why, len, "%s is set without %s (a client certificate needs both)",
                 o->tls_cert_file ? "tls_cert_file" : "tls_key_file",
                 o->tls_cert_file ? "tls_key_file" : "tls_cert_file");
        return RCP_ERR_INVALID;
    }
    if (o->tls_insecure_skip_verify != 0 && o->tls_insecure_skip_verify != 1) {
        snprintf(why, len, "tls_insecure_skip_verify %d is not 0 or 1", o->tls_insecure_skip_verify);
        return RCP_ERR_INVALID;
    }
    if (o->tls_min_version != 0 && o->tls_min_version != 12 && o->tls_min_version != 13) {
        snprintf(why, len, "tls_min_version %d is not 0 (default: TLS 1.2), 12 or 13",
                 o->tls_min_version);
        return RCP_ERR_INVALID;
    }
    return RCP_OK;
#endif
}

int rcp__conn_options_check(const rcp_conn_options *o, int with_address, char *why, size_t len)
{
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, len, __VA_ARGS__);                                                           \
        return RCP_ERR_INVALID;                                                                    \
    } while (0)
    if (!o)
        BAD("options are NULL");
    if (with_address && (!o->host || !*o->host))
        BAD("host is NULL or empty");
    if (with_address && (o->port < 1 || o->port > 65535))
        BAD("port %d is out of range (1..65535)", o->port);
    {
        const rcp__opt_range r[] = {
            {"connect_timeout_ms", o->connect_timeout_ms, 1, RCP__NO_MAX},
            {"max_inflight", o->max_inflight, 1, MAX_INFLIGHT},
            {"max_batch_commands", o->max_batch_commands, 1, RCP__NO_MAX},
            {"max_batch_bytes", as_ll(o->max_batch_bytes), 1, RCP__NO_MAX},
            {"max_pending_bytes", as_ll(o->max_pending_bytes), 1, RCP__NO_MAX},
            {"max_request_bytes", as_ll(o->max_request_bytes), 1, RCP__NO_MAX},
            {"max_reply_bytes", as_ll(o->max_reply_bytes), 1, RCP__NO_MAX},
        };
        if (rcp__opt_ranges_check(r, sizeof r / sizeof r[0], why, len) != RCP_OK)
            return RCP_ERR_INVALID;
    }
    if (o->queue_policy != RCP_QUEUE_BLOCK && o->queue_policy != RCP_QUEUE_FAIL)
        BAD("queue_policy %d is not RCP_QUEUE_BLOCK (0) or RCP_QUEUE_FAIL (1)", o->queue_policy);
    if (o->reconnect_min_ms < 0)
        BAD("reconnect_min_ms %d is out of range (at least 0)", o->reconnect_min_ms);
    if (o->reconnect_max_ms < o->reconnect_min_ms)
        BAD("reconnect_max_ms %d is less than reconnect_min_ms %d", o->reconnect_max_ms,
            o->reconnect_min_ms);
    if (o->cork != 0 && o->cork != 1)
        BAD("cork %d is out of range (0 or 1)", o->cork);
    if (o->spare_conns < 0 || o->spare_conns > RCP__SPARE_MAX)
        BAD("spare_conns %d is out of range (0..%d)", o->spare_conns, RCP__SPARE_MAX);
    if (o->io_threads > 64)
        BAD("io_threads %u is out of range (0 or 1..64)", o->io_threads);
    return tls_check(o, why, len);
#undef BAD
}

int rcp__opt_ranges_check(const rcp__opt_range *r, size_t n, char *why, size_t len)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if (r[i].value >= r[i].lo &&
            (r[i].hi == RCP__NO_MAX || (unsigned long long)r[i].value <= r[i].hi))
            continue;
        if (r[i].hi == RCP__NO_MAX)
            snprintf(why, len, "%s %lld is out of range (at least %lld)", r[i].name, r[i].value,
                     r[i].lo);
        else
            snprintf(why, len, "%s %lld is out of range (%lld..%llu)", r[i].name, r[i].value,
                     r[i].lo, r[i].hi);
        return RCP_ERR_INVALID;
    }
    return RCP_OK;
}

/* A handle's copy of the TLS options, shared by its connections
 * (connection.h). */
int rcp__conn_options_keep(rcp_conn_options *o, rcp__tls_cfg **kept, char *why, size_t len)
{
    int rv;
    *kept = NULL;
    if (!o->tls)
        return RCP_OK;
    rv = rcp__tls_cfg_get(o, kept, why, len);
    if (rv == RCP_OK)
        rcp__tls_cfg_apply(*kept, o);
    return rv;
}

void rcp__conn_options_drop(rcp__tls_cfg *kept)
{
    rcp__tls_cfg_put(kept);
}
