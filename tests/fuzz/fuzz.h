/* tests/fuzz/fuzz.h: the fuzz targets, shared by the libFuzzer entry
 * (entry.c, built with -Dfuzz=true and clang) and the corpus replay
 * (replay.c, built in every build and run by the 'fuzz-replay' suite).
 *
 * A target takes arbitrary bytes, drives one parser of the library with
 * them and checks what it can about the result; a broken invariant aborts
 * through FUZZ_CHECK, so libFuzzer and the replay both see a crash. */
#ifndef RCP_FUZZ_H
#define RCP_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "rcpipe/reply.h"

int rcp_fuzz_reply(const uint8_t *data, size_t size);
int rcp_fuzz_slots(const uint8_t *data, size_t size);
int rcp_fuzz_redirect(const uint8_t *data, size_t size);
int rcp_fuzz_cmd(const uint8_t *data, size_t size);

/* Name -> target, for the replay; NULL if unknown. */
typedef int (*rcp_fuzz_fn)(const uint8_t *data, size_t size);
rcp_fuzz_fn rcp_fuzz_find(const char *name);

void rcp_fuzz_fail(const char *what, const char *file, int line);
#define FUZZ_CHECK(c) ((c) ? (void)0 : rcp_fuzz_fail(#c, __FILE__, __LINE__))

/* Installs the fuzz allocator once: the C library's, except that a single
 * request above FUZZ_ALLOC_CAP bytes returns NULL. A reply header can ask
 * for any size ("*2147483647\r\n" is 16 GiB of element pointers); the cap
 * makes such a request fail the way a real malloc would under a memory
 * limit, so the library's out-of-memory path is what gets exercised. */
#define FUZZ_ALLOC_CAP ((size_t)1 << 20)
void rcp_fuzz_alloc_init(void);
/* Allocations refused by the cap since the last call (and reset). */
unsigned long rcp_fuzz_alloc_refused(void);

/* A reply built from RESP bytes with the library's reader (the object
 * functions rcpipe uses on its connections); NULL if the bytes hold no
 * complete reply or are not valid RESP. */
rcp_reply *rcp_fuzz_parse_one(const uint8_t *data, size_t size);

/* Checks a reply tree's invariants (types, NUL-terminated strings, array
 * elements present, error codes); depth bounds the recursion. */
void rcp_fuzz_check_reply(const rcp_reply *r, int depth);

#endif
