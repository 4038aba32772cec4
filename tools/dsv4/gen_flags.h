/* gen_flags.h — the model, engine and sampling options shared by `dsv4 generate` and
 * `dsv4 chat`, as one option table of the common parser (cli_opts.h). */
#ifndef DSV4_TOOLS_GEN_FLAGS_H
#define DSV4_TOOLS_GEN_FLAGS_H

#include "cli_opts.h"
#include "dsv4_text.h"

#define GEN_MAX_STOPS 16
#define GEN_MAX_OPTS 32

typedef struct gen_flags {
    const char *model_dir;
    const char *tokenizer;       /* NULL: MODEL/tokenizer.json */
    dsv4_generation_opts gen;
    int max_tokens;              /* -1: until a stop or a full context; 0: generate nothing */
    const char *stops[GEN_MAX_STOPS];
    int threads;                 /* 0: the cores this process may use */
    int64_t max_context;
    int think;                   /* 1 --think, 0 --nothink */
    int w8a8;                    /* --w8a8: 1, --w8a8-all: 2 (dsv4_engine_opts.w8a8) */
    unsigned fidelity;           /* --fidelity: DSV4_FID_* items (dsv4_engine_opts.fidelity) */
    cli_opt opts[GEN_MAX_OPTS];  /* the table, pointing into this struct */
} gen_flags;

/* Sets the defaults (max_tokens differs between generate and chat) and builds f->opts. */
void gen_flags_init(gen_flags *f, int max_tokens);
/* After parsing: checks what the table cannot (--model given) and fills f->gen. Returns 0,
 * or 2 after printing the problem. */
int gen_flags_finish(gen_flags *f, const cli_cmd *c);

/* Opens model, tokenizer and an engine for one sequence; prints errors. */
int gen_open(const gen_flags *f, const char *cmd, dsv4_model **model, dsv4_tokenizer **tok,
             dsv4_engine **eng, int *seq);

/* Progress line on a terminal (stderr) during long prefills. */
void gen_progress(void *user, int64_t done, int64_t total);
/* Writes text to stdout and flushes: streaming. */
int gen_print(void *user, const char *text, size_t len);

#endif
