/* lib/options.h: the one check of connection options (options.c), used
 * by rcp_conn_open and by rcp_cluster_open for its node options. */
#ifndef RCP_OPTIONS_H
#define RCP_OPTIONS_H

#include <stddef.h>

#include "rcpipe/conn.h"

/* RCP_OK, or RCP_ERR_INVALID with why naming the option, the value given
 * and the allowed range (RCP_ERR_UNSUPPORTED: a TLS option in a build
 * without TLS). with_address: host and port are checked too (a
 * cluster's node options take theirs from the slot map). */
int rcp__conn_options_check(const rcp_conn_options *o, int with_address, char *why, size_t len);

/* A whole-number option checked against its range: 0, or -1 with why
 * saying "NAME VALUE is out of range (LO..HI)" ("at least LO" when hi is
 * RCP__NO_MAX). For every option check of the library. */
#define RCP__NO_MAX ((unsigned long long)-1)
typedef struct rcp__opt_range {
    const char *name;
    long long value;
    long long lo;
    unsigned long long hi;
} rcp__opt_range;
int rcp__opt_ranges_check(const rcp__opt_range *r, size_t n, char *why, size_t len);

#endif
