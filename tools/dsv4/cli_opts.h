/* cli_opts.h — the one option parser of every dsv4 subcommand.
 *
 * A command describes its options in a table of cli_opt rows; cli_parse reads argv with
 * getopt_long (so `--model DIR`, `--model=DIR`, unambiguous prefixes and short options all
 * work), checks and stores each value, and answers --help with a page generated from the
 * same table, defaults read from the destinations before parsing. Numbers are parsed
 * strictly: a whole-string decimal integer in range, or a finite float in range.
 *
 * Adding an option to a command is one row:
 *     CLI_INT_OPT("chunk", 0, &chunk, 1, 1 << 20, "N", "prefill chunk size")
 * and a default that is not the destination's value is stated after it:
 *     CLI_I64_OPT("prefill", 0, &prefill, 1, 1LL << 40, "P", "...", .def = "every token")
 */
#ifndef DSV4_TOOLS_CLI_OPTS_H
#define DSV4_TOOLS_CLI_OPTS_H

#include <stdint.h>
#include <stdio.h>

typedef enum cli_kind {
    CLI_END = 0, /* ends a table */
    CLI_FLAG,    /* no value: *(int *)dst = ival */
    CLI_STR,     /* *(const char **)dst = value */
    CLI_FILE,    /* as CLI_STR; "-" means standard input (help says so) */
    CLI_INT,     /* *(int *)dst, a decimal integer in [lo, hi] */
    CLI_I64,     /* *(int64_t *)dst, idem */
    CLI_U64,     /* *(uint64_t *)dst, a non-negative decimal integer */
    CLI_FLOAT,   /* *(float *)dst, a finite number in [lo, hi] */
    CLI_LIST,    /* repeatable: ((const char **)dst)[(*count)++] = value, at most hi values */
    CLI_FN,      /* fn(value, dst, msg, msg_len) stores it; non-zero = bad value (msg says why) */
} cli_kind;

typedef struct cli_opt {
    cli_kind kind;
    const char *name;  /* long name without "--" */
    int short_name;    /* 'n' for -n, or 0 */
    void *dst;
    const char *meta;  /* value placeholder in help ("N", "DIR"); NULL for flags */
    const char *help;  /* what it does, in the user's words; '\n' continues the text */
    double lo, hi;     /* CLI_INT/I64/FLOAT range; CLI_LIST capacity in hi */
    int ival;          /* CLI_FLAG: the value stored */
    const char *def;   /* default shown in help; NULL = read from *dst, "" = none shown */
    int *count;        /* CLI_LIST: values stored so far */
    int (*fn)(const char *value, void *dst, char *msg, size_t msg_len);
    int hidden;        /* parsed but left out of --help and --list-options (test hooks) */
} cli_opt;

#define CLI_FLAG_OPT(nm, sh, d, v, h, ...) {.kind = CLI_FLAG, .name = nm, .short_name = sh, .dst = d, .ival = v, .help = h, __VA_ARGS__}
#define CLI_STR_OPT(nm, sh, d, m, h, ...) {.kind = CLI_STR, .name = nm, .short_name = sh, .dst = d, .meta = m, .help = h, __VA_ARGS__}
#define CLI_FILE_OPT(nm, sh, d, m, h, ...) {.kind = CLI_FILE, .name = nm, .short_name = sh, .dst = d, .meta = m, .help = h, __VA_ARGS__}
#define CLI_INT_OPT(nm, sh, d, l, u, m, h, ...) {.kind = CLI_INT, .name = nm, .short_name = sh, .dst = d, .lo = l, .hi = u, .meta = m, .help = h, __VA_ARGS__}
#define CLI_I64_OPT(nm, sh, d, l, u, m, h, ...) {.kind = CLI_I64, .name = nm, .short_name = sh, .dst = d, .lo = l, .hi = u, .meta = m, .help = h, __VA_ARGS__}
#define CLI_U64_OPT(nm, sh, d, m, h, ...) {.kind = CLI_U64, .name = nm, .short_name = sh, .dst = d, .meta = m, .help = h, __VA_ARGS__}
#define CLI_FLOAT_OPT(nm, sh, d, l, u, m, h, ...) {.kind = CLI_FLOAT, .name = nm, .short_name = sh, .dst = d, .lo = l, .hi = u, .meta = m, .help = h, __VA_ARGS__}
#define CLI_LIST_OPT(nm, sh, d, cnt, cap, m, h, ...) {.kind = CLI_LIST, .name = nm, .short_name = sh, .dst = d, .count = cnt, .hi = cap, .meta = m, .help = h, __VA_ARGS__}
/* a CLI_FN row states its default itself (df, "" for none): the parser cannot read it */
#define CLI_FN_OPT(nm, sh, d, f, m, df, h) {.kind = CLI_FN, .name = nm, .short_name = sh, .dst = d, .fn = f, .meta = m, .def = df, .help = h}
#define CLI_OPT_END {.kind = CLI_END}

#define CLI_MAX_GROUPS 4

/* A command: its name, one-line synopsis, an optional paragraph, and up to CLI_MAX_GROUPS
 * option tables (a command's own and shared ones such as gen_flags), each ended by
 * CLI_OPT_END. */
typedef struct cli_cmd {
    const char *name;      /* "generate" */
    const char *synopsis;  /* "--model DIR (--prompt TEXT | --prompt-file FILE) [options]" */
    const char *about;     /* may be NULL */
    const cli_opt *groups[CLI_MAX_GROUPS];
} cli_cmd;

/* Parses argv[1..argc) (argv[0] is the command name). Returns -1 when the command should
 * go on; otherwise the exit status: 0 after --help (printed to stdout), 2 on bad usage
 * (message, a "did you mean" hint for a misspelled option, and a short usage on stderr).
 * Positional arguments are refused. `--list-options` prints the table, one option a line
 * as "--name<TAB>default" (for tests that check the help against it). */
int cli_parse(const cli_cmd *c, int argc, char **argv);

/* The full help page of a command. */
void cli_help(const cli_cmd *c, FILE *f);
/* "usage: dsv4 NAME SYNOPSIS" and a pointer to --help: what errors print. */
void cli_short_usage(const cli_cmd *c, FILE *f);

/* Strict numbers, shared by every command: the whole string, decimal, in [lo, hi]; floats
 * finite. Return 0 on success, -1 otherwise (nothing stored). */
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_u64(const char *s, uint64_t *out);
int cli_parse_f64(const char *s, double lo, double hi, double *out);

/* Edit distance of two short strings (for "did you mean"); large for long ones. */
int cli_edit_distance(const char *a, const char *b);

#endif
