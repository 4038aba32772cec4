/* cli_output.h — output files written so that a failure never leaves a partial result
 * that looks complete: every write, fsync and close is checked, a file appears under its
 * name only once whole (temporary name + rename; both through util/file_write.h, the one
 * implementation), and a dump directory is built under a
 * temporary name next to its destination and swapped in as a whole, replacing any earlier
 * dump (no stale files of an earlier run survive next to a new manifest). Failures carry
 * the reason (strerror) in why. */
#ifndef DSV4_TOOLS_CLI_OUTPUT_H
#define DSV4_TOOLS_CLI_OUTPUT_H

#include <stddef.h>

/* Writes n bytes to path (created or truncated), fsync'd and closed, all checked.
 * 0, or -1 with why = "<path>: <reason>". For files inside a directory being built. */
int cli_write_whole(const char *path, const void *data, size_t n, char *why, size_t why_n);

/* The same through a temporary name next to path, renamed over it at the end: the old
 * file stays until the new one is complete. Every file the CLI writes outside a dump
 * directory goes through this (chat /save, gen-model's tokenizer copy). */
int cli_write_atomic(const char *path, const void *data, size_t n, char *why, size_t why_n);

/* A fresh temporary directory next to dir (dir's parent is created): tmp receives
 * "<dir>.tmp-XXXXXX". 0 or -1 with why. */
int cli_dir_begin(const char *dir, char *tmp, size_t tmp_n, char *why, size_t why_n);
/* Makes tmp (complete, files fsync'd) the directory dir: exchanged atomically with an
 * existing dir, whose old contents are then removed, or renamed when there is none.
 * 0 or -1 with why (tmp is left for cli_dir_abandon). */
int cli_dir_commit(const char *tmp, const char *dir, char *why, size_t why_n);
/* Removes a temporary directory (and the files in it) after a failure. */
void cli_dir_abandon(const char *tmp);

#endif
