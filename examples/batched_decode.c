/* batched_decode.c — greedy decode of several sequences at once, with dsv4.h alone.
 *
 *   batched_decode MODEL_DIR [N_SEQ] [STEPS]
 *
 * Sequence k gets its own short prompt (token ids made from k: this example has no
 * tokenizer). All prompts go through one dsv4_forward call, then every step is one call
 * holding a one-row span per sequence, and one dsv4_lm_head_argmax over all rows. Each
 * sequence is then decoded again on its own; the program exits 1 unless the tokens agree,
 * since batching must not change any sequence's result. */
#include <stdio.h>
#include <stdlib.h>

#include "dsv4.h"

enum { PROMPT = 5, MAX_SEQ = 8, MAX_STEPS = 64 };

/* Greedy-decodes sequences [k0, k0 + n) together: out[s][t] is the t-th new token of
 * sequence k0 + s. */
static int decode(dsv4_engine *e, const dsv4_model_info *mi, int k0, int n, int steps,
                  int32_t out[][MAX_STEPS], dsv4_err *err) {
    int seq[MAX_SEQ], n_live = 0, rc = 0;
    int32_t prompt[MAX_SEQ][PROMPT], next[MAX_SEQ];
    dsv4_span span[MAX_SEQ];
    float *hidden = malloc(sizeof(float) * n * mi->hidden_size); /* (n, D) */
    if (!hidden) return DSV4_ERR_NOMEM;
    for (int s = 0; s < n && !rc; s++) {
        if ((rc = dsv4_seq_create(e, &seq[s], err))) break;
        n_live++;
        for (int j = 0; j < PROMPT; j++) /* BOS, then ids that depend on the sequence */
            prompt[s][j] = j == 0 ? mi->bos_token_id : (7 * (k0 + s) + 13 * j + 1) % mi->vocab_size;
        span[s] = (dsv4_span){.seq = seq[s], .start = 0, .n_tokens = PROMPT, .tokens = prompt[s],
                              .n_hidden = 1};
    }
    for (int t = 0; t <= steps && !rc; t++) {
        rc = dsv4_forward(e, span, n, hidden, NULL, err);   /* hidden (n, D): last rows */
        if (!rc) rc = dsv4_lm_head_argmax(e, hidden, n, next, NULL, err);
        for (int s = 0; s < n && !rc && t < steps; s++) {
            out[s][t] = next[s];
            span[s] = (dsv4_span){.seq = seq[s], .start = PROMPT + t, .n_tokens = 1,
                                  .tokens = &out[s][t], .n_hidden = 1};
        }
    }
    for (int s = 0; s < n_live; s++) dsv4_seq_free(e, seq[s], NULL);
    free(hidden);
    return rc;
}

int main(int argc, char **argv) {
    const int n = argc > 2 ? atoi(argv[2]) : 4, steps = argc > 3 ? atoi(argv[3]) : 8;
    if (argc < 2 || n < 1 || n > MAX_SEQ || steps < 1 || steps > MAX_STEPS) {
        fprintf(stderr, "usage: %s MODEL_DIR [N_SEQ <= %d] [STEPS <= %d]\n", argv[0], MAX_SEQ,
                MAX_STEPS);
        return 2;
    }
    static int32_t together[MAX_SEQ][MAX_STEPS], alone[1][MAX_STEPS];
    dsv4_err err = {0};
    dsv4_model *m = NULL;
    dsv4_engine *e = NULL;
    const dsv4_engine_opts opts = {.max_context = 256, .max_seqs = MAX_SEQ};
    int rc = dsv4_model_open(argv[1], &m, &err), differ = 0;
    const dsv4_model_info mi = rc ? (dsv4_model_info){0} : dsv4_model_get_info(m);
    if (!rc) rc = dsv4_engine_create(m, &opts, &e, &err);
    if (!rc) rc = decode(e, &mi, 0, n, steps, together, &err);
    for (int s = 0; s < n && !rc; s++) {
        rc = decode(e, &mi, s, 1, steps, alone, &err);
        printf("seq %d:", s);
        for (int t = 0; t < steps && !rc; t++) {
            printf(" %d", together[s][t]);
            differ += together[s][t] != alone[0][t];
        }
        printf("\n");
    }
    if (rc) fprintf(stderr, "batched_decode: %s\n", err.msg);
    else if (differ) fprintf(stderr, "batched_decode: %d tokens differ from solo decoding\n", differ);
    else printf("dsv4 %s: %d sequences batched = each alone\n", dsv4_version(), n);
    dsv4_engine_free(e);
    dsv4_model_close(m);
    return rc || differ;
}
