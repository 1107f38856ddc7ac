/* lib/options.h: the one check of connection options (options.c), used
 * by rcp_conn_open and by rcp_cluster_open for its node options. */
#ifndef RCP_OPTIONS_H
#define RCP_OPTIONS_H

#include <stddef.h>

#include "rcpipe/conn.h"

/* RCP_OK, or RCP_ERR_INVALID with why naming the option, the value given
 * and the allowed range. with_address: host and port are checked too (a
 * cluster's node options take theirs from the slot map). */
int rcp__conn_options_check(const rcp_conn_options *o, int with_address, char *why, size_t len);

#endif
