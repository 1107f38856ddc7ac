/* cluster/logic.h: the cluster layer's pure functions (no I/O, no
 * threads): key hashing, redirect parsing and CLUSTER SLOTS parsing (the
 * command table is lib/'s: cmdtable.h). Everything here is unit-tested on its own. */
#ifndef RCP_CLUSTER_LOGIC_H
#define RCP_CLUSTER_LOGIC_H

#include <stddef.h>
#include <stdint.h>

#include "cmdtable.h"
#include "rcpipe/reply.h"

#define RCP__SLOTS 16384

/* crc16.c: CRC16-CCITT (XMODEM) of the key, or of the first non-empty
 * {hash tag}, mod 16384, exactly as the cluster spec. */
unsigned rcp__keyslot(const char *key, size_t len);

/* redirect.c: what a server error reply asks of the cluster client. */
typedef enum rcp__redirect_kind {
    RCP__RD_NONE = 0,   /* any other error: hand it to the caller */
    RCP__RD_MOVED,      /* "MOVED <slot> <host>:<port>" */
    RCP__RD_ASK,        /* "ASK <slot> <host>:<port>" */
    RCP__RD_TRYAGAIN,   /* "TRYAGAIN ..." */
    RCP__RD_CLUSTERDOWN,/* "CLUSTERDOWN ..." */
    RCP__RD_LOADING,    /* "LOADING ..." */
    RCP__RD_MASTERDOWN, /* "MASTERDOWN ..." */
    RCP__RD_READONLY,   /* "READONLY You can't write against a read only replica." */
    RCP__RD_BAD         /* MOVED/ASK whose payload is truncated or garbage */
} rcp__redirect_kind;

typedef struct rcp__redirect {
    int kind;           /* rcp__redirect_kind */
    unsigned slot;      /* MOVED/ASK */
    char host[256];     /* MOVED/ASK; "[::1]" style brackets removed; may be empty when the
                           server sends ":port" (meaning: the host we asked) */
    int port;
} rcp__redirect;

/* Classifies an error reply's text (without the leading '-'). */
void rcp__parse_redirect(const char *str, size_t len, rcp__redirect *out);

/* slotsparse.c: a validated CLUSTER SLOTS answer. */
typedef struct rcp__slots_node {
    char host[256];     /* preferred endpoint: IP (or hostname when the IP field is
                           empty/"?"), never empty in a parsed table */
    int port;
    char id[48];        /* node id, may be empty */
} rcp__slots_node;

typedef struct rcp__slots_range {
    unsigned start, end;     /* inclusive, start <= end <= 16383 */
    size_t nnodes;           /* >= 1: nodes[0] is the master, then replicas */
    rcp__slots_node *nodes;
} rcp__slots_range;

typedef struct rcp__slots_table {
    size_t nranges;
    rcp__slots_range *ranges;
    size_t covered;          /* number of slots covered (holes allowed) */
} rcp__slots_table;

/* Parses and validates a CLUSTER SLOTS reply. `asked_host` replaces an
 * empty/unknown endpoint ("" or "?") of a node. Returns 0 and *out, or -1
 * with a message in err (garbage, overlapping ranges, slot out of range,
 * bad port, empty table). Allocates with the library allocator. */
int rcp__slots_parse(const rcp_reply *r, const char *asked_host, rcp__slots_table **out,
                     char *err, size_t errlen);
void rcp__slots_free(rcp__slots_table *t);

#endif
