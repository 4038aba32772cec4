/* gen_flags.h — the sampling and model flags shared by `dsv4 generate` and `dsv4 chat`. */
#ifndef DSV4_TOOLS_GEN_FLAGS_H
#define DSV4_TOOLS_GEN_FLAGS_H

#include "dsv4_text.h"

#define GEN_MAX_STOPS 16

typedef struct gen_flags {
    const char *model_dir;
    const char *tokenizer;       /* default: MODEL/tokenizer.json */
    dsv4_generation_opts gen;
    const char *stops[GEN_MAX_STOPS];
    int threads;
    long long max_context;       /* 0 = 4096 */
    int think;                   /* -1 unset, 0 --nothink, 1 --think */
    int w8a8;                    /* --w8a8: 1, --w8a8-all: 2 (dsv4_engine_opts.w8a8) */
    unsigned fidelity;           /* --fidelity: DSV4_FID_* items (dsv4_engine_opts.fidelity) */
    int mtp;                     /* --mtp on|off: 1 / -1; 0 = on when the checkpoint has an
                                  * MTP block */
} gen_flags;

/* Consumes argv[*i] (and its value) if it is a shared flag: returns 1 if taken, 0 if not
 * one of ours, -1 on a bad value (message printed). */
int gen_flags_take(gen_flags *f, int argc, char **argv, int *i, const char *cmd);
const char *gen_flags_help(void);

/* Opens model, tokenizer and an engine for one sequence; prints errors. */
int gen_open(const gen_flags *f, const char *cmd, dsv4_model **model, dsv4_tokenizer **tok,
             dsv4_engine **eng, int *seq);

/* With an engine that keeps MTP caches: the speculative-decoding state of seq, set as
 * f->gen.spec (freeing the previous one; call again after re-creating seq). */
int gen_spec_open(gen_flags *f, const char *cmd, dsv4_engine *eng, int seq);
/* One line of MTP figures for the stats (empty without MTP). */
void gen_spec_stats(const dsv4_generation_result *res, char *buf, size_t n);

/* Progress line on a terminal (stderr) during long prefills. */
void gen_progress(void *user, int64_t done, int64_t total);
/* Writes text to stdout and flushes: streaming. */
int gen_print(void *user, const char *text, size_t len);

#endif
