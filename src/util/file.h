/* file.h — reading a whole small file (config.json, an index, tokenizer.json, fixtures):
 * the one implementation in the tree, bounded so a huge or endless file cannot exhaust
 * memory. Weights are never read this way; they are mmap'd (model/safetensors.c). */
#ifndef DSV4_UTIL_FILE_H
#define DSV4_UTIL_FILE_H

#include <stddef.h>

#include "dsv4.h"

/* Reads path into a malloc'd buffer with a NUL after the *len bytes. limit 0 = no limit.
 * Errors: DSV4_ERR_IO "<path>: cannot open: <reason>" / "<path>: read error",
 * DSV4_ERR_FORMAT "<path>: larger than <limit> bytes", DSV4_ERR_NOMEM. */
char *dsv4_read_file(const char *path, size_t limit, size_t *len, dsv4_err *err);

#endif
