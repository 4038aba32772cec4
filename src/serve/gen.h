/* gen.h — one generation on a sequence: prefill the new prompt tokens (in chunks, with a
 * progress callback), then sample, stream text and stop. Shared by `dsv4 generate`, `dsv4
 * chat` and the server. The sequence keeps everything it ran, so a later call can append a
 * new turn and prefill only that. */
#ifndef DSV4_SERVE_GEN_H
#define DSV4_SERVE_GEN_H

#include <stdint.h>

#include "dsv4.h"
#include "sample/sample.h"
#include "sample/stop.h"
#include "tok/tokenizer.h"

typedef struct dsv4_generation_opts {
    dsv4_sample_params sample;
    int max_tokens;                  /* 0 = until a stop or the context is full */
    const char *const *stop_strings; /* (n_stop) */
    int n_stop;
    int chunk;                       /* prefill chunk rows; 0 = the engine's c_max */
} dsv4_generation_opts;

typedef struct dsv4_generation_callbacks {
    void *user;
    /* text ready to show (never a partial character, never part of a stop string);
     * return non-zero to cancel */
    int (*text)(void *user, const char *text, size_t len);
    /* after each prefill chunk */
    void (*progress)(void *user, int64_t done, int64_t total);
    /* per generated token, with its log-probabilities when asked for */
    void (*token)(void *user, const dsv4_sample_out *out);
} dsv4_generation_callbacks;

typedef struct dsv4_generation_result {
    int64_t prompt_tokens;    /* prefilled in this call */
    int64_t gen_tokens;       /* sampled */
    double prefill_seconds, decode_seconds;
    int finish;               /* DSV4_FINISH_* (NONE when cancelled or the context filled) */
    int32_t *ids;             /* (gen_tokens) sampled ids, malloc'ed; caller frees */
    int last_fed;             /* 1 if the last sampled id was also run through the model */
} dsv4_generation_result;

/* Runs prompt (n_prompt >= 1 new tokens) on seq and generates. The last sampled token is
 * fed to the model too unless it is a stop token, so the sequence holds every shown token.
 * Penalties look at the tokens generated in this call. */
int dsv4_generation_run(dsv4_engine *e, const dsv4_tokenizer *tok, int seq, const int32_t *prompt,
                 int n_prompt, const dsv4_generation_opts *opts, const dsv4_generation_callbacks *cb,
                 dsv4_generation_result *res, dsv4_err *err);

#endif
