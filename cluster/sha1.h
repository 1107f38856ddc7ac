/* cluster/sha1.h: SHA-1 of a script body, for EVALSHA (sha1.c). */
#ifndef RCP_SHA1_H
#define RCP_SHA1_H

#include <stddef.h>

/* hex gets 40 lowercase hex digits and a NUL. */
void rcp__sha1_hex(const void *data, size_t len, char hex[41]);

#endif
