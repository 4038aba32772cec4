/* cli_util.h — small helpers shared by the subcommands: argument parsing, id lists,
 * directories and raw array files. */
#ifndef DSV4_TOOLS_CLI_UTIL_H
#define DSV4_TOOLS_CLI_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* Parses a decimal integer in [lo, hi] from s; returns 0 on success. */
int cli_parse_int(const char *s, long long lo, long long hi, long long *out);

/* Parses ids separated by commas and/or whitespace into a malloc'd array. Returns the
 * count, or -1 with a message in errbuf. */
int cli_parse_ids(const char *s, int32_t **out, char *errbuf, size_t errlen);

/* mkdir -p; returns 0 on success. */
int cli_mkdirs(const char *path);

/* Writes n floats little-endian to dir/name; returns 0 on success. */
int cli_write_f32(const char *dir, const char *name, const float *data, size_t n);

/* Reads a whole file / stream into a malloc'd NUL-terminated buffer (NULL on failure). */
char *cli_read_file(const char *path, size_t *len);
char *cli_read_stream(FILE *f, size_t *len);

/* Loads a tokenizer.json given as the file or a directory holding one; prints
 * "dsv4 CMD: message" and returns NULL on failure. */
struct dsv4_tokenizer *cli_load_tokenizer(const char *cmd, const char *path);

/* The options of `dsv4 tokenize / detokenize`: --tokenizer FILE (or --tokenizer=FILE), and
 * one switch `flag` that sets flag_bit in *flags; -h/--help prints usage. Returns -1 to go
 * on with *path set, else the exit status (0 after help, 2 on a bad or missing option). */
int cli_tokenizer_args(const char *cmd, int argc, char **argv, const char *flag, int flag_bit,
                       void (*usage)(FILE *), const char **path, int *flags);

#endif
