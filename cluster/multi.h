/* cluster/multi.h: multi-key commands split by slot and merged (multi.c). */
#ifndef RCP_CLUSTER_MULTI_H
#define RCP_CLUSTER_MULTI_H

#include <stddef.h>

#include "rcpipe/cluster.h"

/* Non-zero if the command is one the library splits by slot (MGET, MSET,
 * DEL, UNLINK, EXISTS, TOUCH with well-formed arguments). */
int rcp__multi_kind(int argc, const char **argv, const size_t *argvlen);

/* Sends one sub-command per slot and resolves f once with the merged
 * reply. RCP_OK, or an error and f is never called (nothing was sent). */
int rcp__multi_send(rcp_cluster *cl, rcp_future *f, int policy, int argc, const char **argv,
                    const size_t *argvlen);

/* The same, waited for (timeout_ms as a future's): always a reply the
 * caller frees. */
rcp_reply *rcp__multi_command(rcp_cluster *cl, int policy, int timeout_ms, int argc,
                              const char **argv, const size_t *argvlen);

#endif
