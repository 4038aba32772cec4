/* file.h — reading a whole small file (config.json, an index, tokenizer.json, fixtures):
 * the one implementation in the tree, bounded so a huge or endless file cannot exhaust
 * memory. Weights are never read this way; they are mmap'd (model/safetensors.c). */
#ifndef DSV4_UTIL_FILE_H
#define DSV4_UTIL_FILE_H

#include <stddef.h>
#include <sys/stat.h>

#include "dsv4.h"

/* Reads path into a malloc'd buffer with a NUL after the *len bytes. limit 0 = no limit.
 * Errors: DSV4_ERR_IO "<path>: cannot open: <reason>" / "<path>: cannot read: <reason>",
 * DSV4_ERR_FORMAT "<path>: larger than <limit> bytes", DSV4_ERR_NOMEM. */
char *dsv4_read_file(const char *path, size_t limit, size_t *len, dsv4_err *err);
/* The same for files that must be regular (config.json, an index, tokenizer.json): a FIFO,
 * device or directory is refused with "<path>: is a FIFO, not a regular file" without
 * blocking (a FIFO would otherwise wait in open() for a writer forever). */
char *dsv4_read_regular_file(const char *path, size_t limit, size_t *len, dsv4_err *err);
/* Opens path read-only (close-on-exec) after checking without blocking that it is a
 * regular file; *st is its fstat. Returns the descriptor, or -code with err set. */
int dsv4_open_regular(const char *path, struct stat *st, dsv4_err *err);
/* "a FIFO", "a directory", ... for a file mode that is not a regular file. */
const char *dsv4_file_kind(mode_t mode);

#endif
