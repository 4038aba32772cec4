/* file_write.h — output files written so that a failure never leaves a partial file that
 * looks complete: every write, the fsync and the close are checked, and the atomic form
 * makes the file appear under its name only once whole (temporary name in the same
 * directory, then rename). Errors carry the reason (strerror). The one implementation for
 * the library (gen-model's files) and the CLI (dumps, chat /save, copied tokenizers). */
#ifndef DSV4_UTIL_FILE_WRITE_H
#define DSV4_UTIL_FILE_WRITE_H

#include <stddef.h>

#include "dsv4.h"

/* Writes n bytes to path (created or truncated), fsync'd and closed, all checked. For
 * files inside a directory that is itself swapped in whole. DSV4_ERR_IO
 * "<path>: cannot <step>: <reason>". */
int dsv4_write_file(const char *path, const void *data, size_t n, dsv4_err *err);

/* The same through "<path>.tmp-XXXXXX" renamed over path at the end (and the directory
 * fsync'd): an earlier file stays whole until the new one is, and a failure removes the
 * temporary file. */
int dsv4_write_file_atomic(const char *path, const void *data, size_t n, dsv4_err *err);

/* fsync of the directory holding path, so a rename into it is durable. 0 or -1 (errno). */
int dsv4_sync_parent_dir(const char *path);

#endif
