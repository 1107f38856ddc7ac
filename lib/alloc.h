/* lib/alloc.h: the library's allocator, routed through rcp_set_allocator's
 * hooks. Every object the library owns is allocated here. */
#ifndef RCP_ALLOC_H
#define RCP_ALLOC_H

#include <stddef.h>

void *rcp__malloc(size_t n);
void *rcp__calloc(size_t n, size_t size);
void *rcp__realloc(void *p, size_t n);
void rcp__free(void *p);
char *rcp__strdup(const char *s);

#endif
