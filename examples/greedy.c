/* greedy.c — the smallest generation loop: tokenize, forward, LM head, sample, detokenize.
 *
 *   greedy MODEL_DIR TOKENIZER_JSON PROMPT [N]
 *
 * Prefills BOS + the prompt, then generates greedily until EOS or N tokens (default 16),
 * streaming the text. dsv4_gen does the sampling and the streamed detokenization. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "dsv4_text.h"

int main(int argc, char **argv) {
    if (argc < 4) return fprintf(stderr, "usage: %s MODEL TOKENIZER_JSON PROMPT [N]\n", argv[0]), 2;
    dsv4_err err = {0};
    dsv4_model *m = NULL;
    dsv4_engine *e = NULL;
    dsv4_tokenizer *tok = NULL;
    dsv4_gen *gen = NULL;
    dsv4_tok_ids ids = {.ids = malloc(sizeof(int32_t)), .cap = 1}; /* BOS, then the prompt */
    float *hidden = NULL, *logits = NULL; /* [D], [V] */
    const dsv4_gen_params greedy = {.max_tokens = argc > 4 ? atoi(argv[4]) : 16}; /* temperature 0 */
    int seq = -1, rc = dsv4_model_open(argv[1], &m, &err);
    const dsv4_model_info mi = rc ? (dsv4_model_info){0} : dsv4_model_get_info(m);
    if (!rc) rc = dsv4_engine_create(m, &(dsv4_engine_opts){.max_seqs = 1}, &e, &err);
    if (!rc) rc = dsv4_tokenizer_load(argv[2], &tok, &err);
    if (!rc) rc = dsv4_gen_create(m, tok, &greedy, &gen, &err);
    if (!rc && (!ids.ids || !(hidden = malloc(sizeof(float) * mi.hidden_size)) ||
                !(logits = malloc(sizeof(float) * mi.vocab_size))))
        rc = DSV4_ERR_NOMEM;
    if (!rc) ids.ids[ids.n++] = mi.bos_token_id;
    if (!rc) rc = dsv4_tokenize(tok, argv[3], strlen(argv[3]), &ids, &err); /* appends */
    if (!rc) rc = dsv4_seq_create(e, &seq, &err);
    /* the first span is the whole prompt, every later one the token sampled before it */
    dsv4_span span = {.seq = seq, .start = 0, .n_tokens = (int)ids.n, .tokens = ids.ids, .n_hidden = 1};
    const char *rest = NULL;
    size_t rest_len = 0;
    for (dsv4_gen_token next = {.finish = DSV4_FINISH_NONE}; !rc && !next.finish;) {
        if ((rc = dsv4_forward(e, &span, 1, hidden, NULL, &err))) break; /* the last row's hidden */
        if ((rc = dsv4_lm_head(e, hidden, 1, logits, &err))) break;
        if ((rc = dsv4_gen_next(gen, logits, &next, &err))) break;      /* sample + detokenize */
        if (next.text_len) fwrite(next.text, 1, next.text_len, stdout);
        span = (dsv4_span){.seq = seq, .start = span.start + span.n_tokens, .n_tokens = 1,
                           .tokens = &next.token, .n_hidden = 1};
    }
    if (gen) dsv4_gen_end(gen, &rest, &rest_len); /* text held back at the end */
    if (rest_len) fwrite(rest, 1, rest_len, stdout);
    printf("\n");
    if (rc) fprintf(stderr, "greedy: %s\n", err.msg);
    free(hidden), free(logits);
    dsv4_tok_ids_free(&ids);
    dsv4_gen_free(gen);
    dsv4_tokenizer_free(tok);
    dsv4_engine_free(e);
    dsv4_model_close(m);
    return rc != 0;
}
