/* sample.h — choosing the next token from one row of logits [V].
 *
 * A dsv4_sampler holds its parameters, its own PRNG state (xoshiro256**, seeded through
 * splitmix64: same seed and same inputs give the same tokens) and scratch for one row; no
 * global state, one sampler per sequence (a sampler is not shared between threads).
 *
 * Order of processing, for each row:
 *   1. penalties over the history (token ids, oldest first; only the last penalty_last_n
 *      when that is > 0). For each distinct token t with count c in it:
 *        repetition (CTRL/HF style): x_t = x_t > 0 ? x_t / r : x_t * r
 *        frequency and presence (OpenAI style): x_t -= c * f + p
 *   2. temperature: z = x / T. T <= 0 means greedy: the argmax of x, ties to the lowest id.
 *   3. truncation, on probabilities q = softmax(z), ordering by (q desc, id asc):
 *        min-p: keep q_t >= min_p * max(q); top-k: keep the first k; top-p: of what is
 *        left, keep the shortest prefix whose renormalized mass reaches top_p.
 *   4. one draw from what is kept, renormalized.
 * Log-probabilities (the chosen token's, and the n best) are log-softmax of the processed
 * logits z of step 2 (T taken as 1 for greedy), over the whole vocabulary, before
 * truncation: finite for every token, and comparable between sampled and greedy runs.
 * NaN logits count as -inf; a row without any finite logit is an error.
 */
#ifndef DSV4_SAMPLE_SAMPLE_H
#define DSV4_SAMPLE_SAMPLE_H

#include <stdint.h>

#include "dsv4.h"

#define DSV4_MAX_LOGPROBS 20

/* All zero = greedy, no penalties, no logprobs. */
typedef struct dsv4_sample_params {
    float temperature;        /* <= 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* 0 or 1: off; else (0, 1) */
    float min_p;              /* 0: off; else (0, 1] */
    float repetition_penalty; /* 0 or 1: off; else > 0 (> 1 discourages repeats) */
    float frequency_penalty;  /* 0: off; any finite value (negative encourages) */
    float presence_penalty;   /* 0: off; any finite value */
    int penalty_last_n;       /* history window for penalties; 0 = all of it */
    uint64_t seed;
    int n_logprobs;           /* 0..DSV4_MAX_LOGPROBS best tokens to report */
} dsv4_sample_params;

typedef struct dsv4_sample_out {
    int32_t token;
    float logprob;                               /* of token */
    int n_top;                                   /* = n_logprobs (or V if smaller) */
    int32_t top_ids[DSV4_MAX_LOGPROBS];          /* best first, ties to the lowest id */
    float top_logprobs[DSV4_MAX_LOGPROBS];
} dsv4_sample_out;

typedef struct dsv4_sampler dsv4_sampler;

/* vocab: V, the row length. Parameters are checked: DSV4_ERR_ARG names the bad one. */
int dsv4_sampler_create(const dsv4_sample_params *p, int vocab, dsv4_sampler **out,
                        dsv4_err *err);
void dsv4_sampler_free(dsv4_sampler *s);
/* Restarts the random sequence from a seed. */
void dsv4_sampler_seed(dsv4_sampler *s, uint64_t seed);

/* Picks a token from logits [V] (not modified). history: [n_history] earlier token ids
 * for the penalties (may be NULL when n_history is 0). DSV4_ERR_ARG: a history id outside
 * [0, V), or no finite logit. */
int dsv4_sample(dsv4_sampler *s, const float *logits, const int32_t *history, int n_history,
                dsv4_sample_out *out, dsv4_err *err);

/* argmax of x[0..n), ties to the lowest index; NaN never wins. -1 if n <= 0 or all NaN. */
int32_t dsv4_argmax(const float *x, int n);

#endif
