/* gen_flags.h — the model, engine and sampling options shared by `dsv4 generate` and
 * `dsv4 chat`, as one option table of the common parser (cli_opts.h). */
#ifndef DSV4_TOOLS_GEN_FLAGS_H
#define DSV4_TOOLS_GEN_FLAGS_H

#include <signal.h>

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
    int kv_dtype;                /* --kv-dtype (dsv4_engine_opts.kv_dtype) */
    int pin_threads;             /* --pin-threads (dsv4_engine_opts.pin_threads) */
    int numa;                    /* --numa (dsv4_engine_opts.numa) */
    int fp4_layout;              /* --weights-memory (dsv4_engine_opts.fp4_layout) */
    int64_t max_context;
    int think;                   /* 1 --think, 0 --nothink */
    int w8a8;                    /* --w8a8: 1, --w8a8-all: 2 (dsv4_engine_opts.w8a8) */
    unsigned fidelity;           /* --fidelity: DSV4_FID_* items (dsv4_engine_opts.fidelity) */
    int warmup;                  /* read the weights in before the first turn */
    int mlock;                   /* pin them in memory */
    int mtp;                     /* --mtp on|off: 1 / -1; 0 = on when the checkpoint has an
                                  * MTP block */
    cli_opt opts[GEN_MAX_OPTS];  /* the table, pointing into this struct */
} gen_flags;

/* Sets the defaults (reply length and warm-up differ between generate and chat) and builds
 * f->opts. */
void gen_flags_init(gen_flags *f, int max_tokens, int warmup);
/* After parsing: checks what the table cannot (--model given) and fills f->gen. Returns 0,
 * or 2 after printing the problem. */
int gen_flags_finish(gen_flags *f, const cli_cmd *c);

/* Opens model, tokenizer and an engine for one sequence; prints errors. */
int gen_open(const gen_flags *f, const char *cmd, dsv4_model **model, dsv4_tokenizer **tok,
             dsv4_engine **eng, int *seq);

/* With an engine that keeps MTP caches: the speculative-decoding state of seq, set as
 * f->gen.spec (freeing the previous one; call again after re-creating seq). */
int gen_spec_open(gen_flags *f, const char *cmd, dsv4_engine *eng, int seq);
/* One line of MTP figures for the stats (empty without MTP). */
void gen_spec_stats(const dsv4_generation_result *res, char *buf, size_t n);

/* Streams a reply to stdout. In thinking mode the reasoning (up to "</think>") is set
 * apart from the answer: dim on a terminal, between "[reasoning]" and "[answer]" lines
 * otherwise. The text callback returns non-zero once *stop is set (Ctrl-C). */
typedef struct gen_printer {
    int thinking;                 /* inside the reasoning */
    int tty;                      /* stdout is a terminal */
    const volatile sig_atomic_t *stop;
    char hold[16];                /* bytes that may begin "</think>" */
    size_t n_hold;
} gen_printer;

void gen_printer_start(gen_printer *p, int thinking, const volatile sig_atomic_t *stop);
int gen_printer_text(void *user, const char *text, size_t len);
/* Ends the reply: held bytes out, terminal colour reset. */
void gen_printer_end(gen_printer *p);

/* Progress line on a terminal (stderr) during long prefills. */
void gen_progress(void *user, int64_t done, int64_t total);

#endif
