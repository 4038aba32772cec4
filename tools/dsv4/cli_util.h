/* cli_util.h — small helpers shared by the subcommands: argument parsing, id lists,
 * directories and raw array files. */
#ifndef DSV4_TOOLS_CLI_UTIL_H
#define DSV4_TOOLS_CLI_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>

#include "dsv4.h"

/* Seconds on the monotonic clock, for timing a run. */
double cli_now_s(void);
/* The 1-minute load average, -1 if unknown: benchmarks record it (the machine may be
 * shared). */
double cli_loadavg(void);

/* Parses a decimal integer in [lo, hi] from s, strictly (cli_parse_i64); returns 0 on
 * success. */
/* CLI_FN_OPT parser of --kv-dtype f32|bf16|fp8[+fp4] into an int (DSV4_KV_*). */
int cli_parse_kv_dtype(const char *v, void *dst, char *msg, size_t n);
/* CLI_FN_OPT parser of --fidelity official|none|F1,F3,... into an unsigned (DSV4_FID_*). */
int cli_parse_fidelity(const char *v, void *dst, char *msg, size_t n);
/* --numa auto|none|interleave (dsv4_numa_parse) */
int cli_parse_numa(const char *v, void *dst, char *msg, size_t n);
/* --weights-memory auto|mapped|copy|lanes|shuffle (dsv4_fp4_layout_parse), and its rows in every
 * command that creates an engine: the option, and --fp4-layout, its name until the copy came
 * to hold every layer weight, still parsed (hidden) so scripts written for it keep working */
int cli_parse_fp4_layout(const char *v, void *dst, char *msg, size_t n);
#define CLI_FP4_LAYOUT_OPT(d)                                                                                      \
    CLI_FN_OPT("weights-memory", 0, d, cli_parse_fp4_layout, "auto|mapped|copy|lanes|shuffle", "auto",           \
               "where the layers' weights live: copy copies them (FP4 experts, dense matrices, scales) at engine " \
               "create into this process's huge-page memory (faster; costs the copy's time and private memory "   \
               "the size of those weights, no longer shared through the page cache), mapped reads the "           \
               "checkpoint's pages in place, lanes is copy with the FP4 experts repacked for the AVX-512 "        \
               "VBMI and AVX2 decoders, shuffle repacks them for the AVX2 vpshufb decoder; auto = lanes at "      \
               "avx512vbmi, shuffle at avx2 (copy at avx512 and portable) when memory allows and nothing "        \
               "is locked, else mapped. Same results (--fp4-layout, with natural for mapped, is the old name)"),   \
    {.kind = CLI_FN, .name = "fp4-layout", .dst = d, .fn = cli_parse_fp4_layout, .meta = "auto|mapped|copy|lanes|shuffle", \
     .def = "auto", .help = "the old name of --weights-memory", .hidden = 1}

int cli_parse_int(const char *s, long long lo, long long hi, long long *out);

/* Parses ids separated by commas and/or whitespace into a malloc'd array. Returns the
 * count, or -1 with a message in errbuf. */
int cli_parse_ids(const char *s, int32_t **out, char *errbuf, size_t errlen);

/* mkdir -p; returns 0 on success. */
int cli_mkdirs(const char *path);

/* Limits on inputs read whole: a prompt (text) and token id lists. A million-token
 * context is a few MB of text; these leave room and still stop a runaway pipe. */
#define CLI_TEXT_LIMIT (64u << 20)
#define CLI_IDS_LIMIT (256u << 20)

/* Reads a whole file ("-" = standard input) of at most `limit` bytes into a malloc'd
 * NUL-terminated buffer. On failure returns NULL with the reason (strerror, or "larger
 * than N MB") in errbuf. */
char *cli_read_input(const char *path, size_t limit, size_t *len, char *errbuf, size_t errlen);

/* Loads a tokenizer.json given as the file or a directory holding one; prints
 * "dsv4 CMD: message" and returns NULL on failure. */
struct dsv4_tokenizer *cli_load_tokenizer(const char *cmd, const char *path);

/* Warns on stderr when more worker threads are asked for than this process has cores. */
void cli_warn_threads(const char *cmd, int threads);

/* Warns on stderr when the weights and the cache of these engine options do not fit in
 * this machine's memory (dsv4_mem_fit_model), with what would. */
void cli_warn_fit(const char *cmd, const dsv4_model *m, const dsv4_engine_opts *eo);

/* Progress of a long step on stderr (a dsv4_progress_fn): a line redrawn in place on a
 * terminal (percent, GB, GB/s, time left), else one line per 10 %. */
typedef struct cli_progress {
    const char *what;  /* "warming up the weights", ... */
    int tty, last_decile;
    struct timespec t0;
} cli_progress;
void cli_progress_start(cli_progress *p, const char *what);
void cli_progress_show(void *user, uint64_t done, uint64_t total);

/* Warm-up and pinning of the weights as the commands do them (--warmup, --mlock): progress
 * on stderr (a bar with GB, GB/s and ETA on a terminal, a line per 10% otherwise), by
 * rank 0 only; rank/n_ranks as for dsv4_model_warmup.
 * Returns 0, or -1 after printing the problem. */
int cli_prepare_weights(const char *cmd, const dsv4_model *m, int warmup, int mlock, int threads,
                        int rank, int n_ranks);

#endif
