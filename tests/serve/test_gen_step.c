/* test_gen_step.c — the per-sequence step state dsv4_gen (include/dsv4_text.h only), on a
 * model with the full vocabulary and the real tokenizer:
 *   - stepping by hand (forward, LM head, dsv4_gen_next per row) gives the tokens and text
 *     of the blocking dsv4_generation_run, for seeded sampling;
 *   - two sequences stepped in one batched forward give each one's solo tokens;
 *   - logit bias: a large bias forces a token, -inf bans the greedy choice, biases given
 *     twice for one id add up (and -inf stays a ban);
 *   - an extra stop token ends with STOP_TOKEN, feed 0, and further steps are STATE errors;
 *   - text held back as a possible stop-string prefix comes out at dsv4_gen_end;
 *   - bad parameters are DSV4_ERR_ARG.
 *   test_gen_step MODEL_DIR (with tokenizer.json)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4_text.h"
#include "test.h"

static dsv4_model *M;
static dsv4_tokenizer *T;
static int V, D;

static dsv4_engine *new_engine(void) {
    dsv4_engine_opts eo = {.max_context = 512, .max_seqs = 2};
    dsv4_engine *e;
    dsv4_err err = {0};
    if (dsv4_engine_create(M, &eo, &e, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    return e;
}

typedef struct text_buf {
    char data[1 << 15];
    size_t n;
} text_buf;

static void put(text_buf *b, const char *s, size_t n) {
    if (b->n + n < sizeof b->data) { memcpy(b->data + b->n, s, n); b->n += n; }
    b->data[b->n] = 0;
}

static int collect(void *user, const char *text, size_t len) {
    put(user, text, len);
    return 0;
}

enum { NGEN = 20 };

/* Steps k sequences in one forward per step; prompts[k] of n_prompt[k] ids. Writes each
 * one's tokens and text. */
static void step_batch(int k, const int32_t *const *prompts, const int *n_prompt,
                       const dsv4_gen_params *p, int32_t (*toks)[NGEN], text_buf *texts) {
    dsv4_engine *e = new_engine();
    dsv4_err err = {0};
    int seq[2];
    dsv4_gen *g[2];
    dsv4_span sp[2];
    float *hidden = malloc((size_t)2 * D * sizeof(float));   /* (k, D) */
    float *logits = malloc((size_t)2 * V * sizeof(float));   /* (k, V) */
    int32_t next[2];
    for (int i = 0; i < k; i++) {
        CHECK(dsv4_seq_create(e, &seq[i], &err) == 0);
        CHECK_MSG(dsv4_gen_create(M, T, p, &g[i], &err) == 0, "%s", err.msg);
        sp[i] = (dsv4_span){.seq = seq[i], .start = 0, .n_tokens = n_prompt[i], .tokens = prompts[i],
                            .n_hidden = 1};
        texts[i].n = 0;
    }
    for (int s = 0; s < NGEN; s++) {
        CHECK_MSG(dsv4_forward(e, sp, k, hidden, NULL, &err) == 0, "%s", err.msg);
        CHECK(dsv4_lm_head(e, hidden, k, logits, &err) == 0);
        for (int i = 0; i < k; i++) {
            dsv4_gen_token t;
            CHECK_MSG(dsv4_gen_next(g[i], logits + (size_t)i * V, &t, &err) == 0, "%s", err.msg);
            toks[i][s] = t.token;
            put(&texts[i], t.text, t.text_len);
            next[i] = t.token;
            sp[i] = (dsv4_span){.seq = seq[i], .start = dsv4_seq_length(e, seq[i]), .n_tokens = 1,
                                .tokens = &next[i], .n_hidden = 1};
        }
    }
    for (int i = 0; i < k; i++) {
        const char *rest;
        size_t n;
        dsv4_gen_end(g[i], &rest, &n);
        put(&texts[i], rest, n);
        dsv4_gen_free(g[i]);
    }
    free(hidden), free(logits);
    dsv4_engine_free(e);
}

static void test_equal_to_blocking_loop(const dsv4_tok_ids *p1, const dsv4_tok_ids *p2) {
    dsv4_gen_params gp = {.sample = {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .seed = 7}};
    int32_t toks[2][NGEN];
    text_buf texts[2];
    const int32_t *prompts[2] = {p1->ids, p2->ids};
    int n_prompt[2] = {(int)p1->n, (int)p2->n};
    step_batch(1, prompts, n_prompt, &gp, toks, texts);

    /* the blocking loop; max_tokens = NGEN so both stop after the same count */
    dsv4_engine *e = new_engine();
    dsv4_err err = {0};
    int seq;
    CHECK(dsv4_seq_create(e, &seq, &err) == 0);
    dsv4_generation_opts o = {.sample = gp.sample, .max_tokens = NGEN};
    text_buf out = {.n = 0};
    dsv4_generation_callbacks cb = {.user = &out, .text = collect};
    dsv4_generation_result r;
    CHECK_MSG(dsv4_generation_run(e, T, seq, p1->ids, (int)p1->n, &o, &cb, &r, &err) == 0, "%s", err.msg);
    CHECK(r.gen_tokens == NGEN && r.finish == DSV4_FINISH_LENGTH);
    CHECK(r.ids && memcmp(r.ids, toks[0], sizeof toks[0]) == 0);
    CHECK_MSG(out.n == texts[0].n && memcmp(out.data, texts[0].data, out.n) == 0, "'%s' vs '%s'",
              out.data, texts[0].data);
    free(r.ids);
    dsv4_engine_free(e);

    /* batched with another sequence: the first one's tokens are its solo tokens */
    int32_t btoks[2][NGEN], stoks[2][NGEN];
    text_buf btexts[2], stexts[2];
    step_batch(2, prompts, n_prompt, &gp, btoks, btexts);
    step_batch(1, prompts + 1, n_prompt + 1, &gp, stoks, stexts);
    CHECK(memcmp(btoks[0], toks[0], sizeof toks[0]) == 0);
    CHECK(memcmp(btoks[1], stoks[0], sizeof stoks[0]) == 0);
}

/* one prefill + one step with parameters p; returns the step's token */
static int32_t one_step(const dsv4_tok_ids *prompt, const dsv4_gen_params *p, dsv4_gen_token *t,
                        dsv4_gen **keep) {
    dsv4_engine *e = new_engine();
    dsv4_err err = {0};
    int seq;
    dsv4_gen *g;
    float *hidden = malloc((size_t)D * sizeof(float)), *logits = malloc((size_t)V * sizeof(float));
    CHECK(dsv4_seq_create(e, &seq, &err) == 0);
    CHECK_MSG(dsv4_gen_create(M, T, p, &g, &err) == 0, "%s", err.msg);
    dsv4_span sp = {.seq = seq, .start = 0, .n_tokens = (int)prompt->n, .tokens = prompt->ids, .n_hidden = 1};
    CHECK(dsv4_forward(e, &sp, 1, hidden, NULL, &err) == 0);
    CHECK(dsv4_lm_head(e, hidden, 1, logits, &err) == 0);
    CHECK_MSG(dsv4_gen_next(g, logits, t, &err) == 0, "%s", err.msg);
    /* a finished generation refuses more rows */
    if (t->finish) {
        dsv4_gen_token t2;
        memset(&err, 0, sizeof err);
        CHECK(dsv4_gen_next(g, logits, &t2, &err) == DSV4_ERR_STATE);
    }
    free(hidden), free(logits);
    dsv4_engine_free(e);
    /* the text lives in g: keep a copy past its free */
    static char last_text[256];
    size_t n = t->text_len < sizeof last_text ? t->text_len : sizeof last_text - 1;
    memcpy(last_text, t->text, n);
    t->text = last_text;
    if (keep) *keep = g;
    else dsv4_gen_free(g);
    return t->token;
}

static void test_bias_and_stops(const dsv4_tok_ids *prompt) {
    dsv4_gen_params greedy = {0};
    dsv4_gen_token t;
    int32_t top = one_step(prompt, &greedy, &t, NULL);
    CHECK(t.feed == 1 && t.finish == DSV4_FINISH_NONE);

    /* -inf bans the greedy choice */
    float ban = -INFINITY;
    dsv4_gen_params p = {.bias_ids = &top, .bias = &ban, .n_bias = 1};
    CHECK(one_step(prompt, &p, &t, NULL) != top);

    /* a large bias forces a token that has text: the id of " hello" */
    dsv4_tok_ids h = {0};
    dsv4_err err = {0};
    CHECK(dsv4_tokenize(T, " hello", 6, &h, &err) == 0 && h.n == 1);
    int32_t hello = h.ids[0];
    float big = 1e4f;
    p = (dsv4_gen_params){.bias_ids = &hello, .bias = &big, .n_bias = 1,
                          .sample = {.temperature = 1.0f, .seed = 3}};
    CHECK(one_step(prompt, &p, &t, NULL) == hello);
    CHECK(t.text_len == 6 && memcmp(t.text, " hello", 6) == 0);

    /* biases given twice for one id add up: +1e4 then -1e4 leave the greedy choice, and
     * -inf stays a ban whatever comes after it */
    if (hello != top) {
        const int32_t ids2[] = {hello, top, hello, top};
        const float b2[] = {1e4f, -INFINITY, -1e4f, 5.0f};
        dsv4_gen_params p2 = {.bias_ids = ids2, .bias = b2, .n_bias = 2};
        CHECK(one_step(prompt, &p2, &t, NULL) != top); /* hello +1e4, top banned */
        p2 = (dsv4_gen_params){.bias_ids = ids2, .bias = b2, .n_bias = 4};
        const int32_t got = one_step(prompt, &p2, &t, NULL);
        CHECK_MSG(got != top && got != hello, "duplicate biases: got %d (top %d, hello %d)", got, top, hello);
        const int32_t ids3[] = {hello, hello};
        const float b3[] = {1e4f, -1e4f};
        p2 = (dsv4_gen_params){.bias_ids = ids3, .bias = b3, .n_bias = 2};
        CHECK(one_step(prompt, &p2, &t, NULL) == top);
    }

    /* the same token as an extra stop token: STOP_TOKEN, not fed, no text */
    p.stop_tokens = &hello;
    p.n_stop_tokens = 1;
    one_step(prompt, &p, &t, NULL);
    CHECK(t.token == hello && t.finish == DSV4_FINISH_STOP_TOKEN && t.feed == 0 && t.text_len == 0);

    /* a stop string it could start is held back, then released by dsv4_gen_end */
    const char *stop = " hello there";
    p.stop_tokens = NULL, p.n_stop_tokens = 0;
    p.stop_strings = &stop, p.n_stop = 1;
    dsv4_gen *g;
    one_step(prompt, &p, &t, &g);
    CHECK(t.finish == DSV4_FINISH_NONE && t.feed == 1 && t.text_len == 0);
    const char *rest;
    size_t n;
    dsv4_gen_end(g, &rest, &n);
    CHECK(n == 6 && memcmp(rest, " hello", 6) == 0);
    dsv4_gen_end(g, &rest, &n);
    CHECK(n == 0);
    int nt;
    const int32_t *ts = dsv4_gen_tokens(g, &nt);
    CHECK(nt == 1 && ts[0] == hello);
    dsv4_gen_free(g);

    /* with max_tokens 1 the held text comes out with the LENGTH finish itself */
    p.max_tokens = 1;
    one_step(prompt, &p, &t, NULL);
    CHECK(t.finish == DSV4_FINISH_LENGTH && t.feed == 1 && t.text_len == 6);
    dsv4_tok_ids_free(&h);
}

static void test_bad_params(void) {
    dsv4_err err = {0};
    dsv4_gen *g = NULL;
    int32_t id = V;
    float b = 1.0f, nan_b = NAN;
    dsv4_gen_params p = {.bias_ids = &id, .bias = &b, .n_bias = 1};
    CHECK(dsv4_gen_create(M, T, &p, &g, &err) == DSV4_ERR_ARG && g == NULL);
    CHECK_ERR(err, DSV4_ERR_ARG, "outside the vocabulary");
    id = 5;
    p.bias = &nan_b;
    memset(&err, 0, sizeof err);
    CHECK(dsv4_gen_create(M, T, &p, &g, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "not finite");
    p = (dsv4_gen_params){.sample = {.top_p = 1.5f}};
    memset(&err, 0, sizeof err);
    CHECK(dsv4_gen_create(M, T, &p, &g, &err) == DSV4_ERR_ARG);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_gen_step MODEL_DIR\n"); return 2; }
    dsv4_err err = {0};
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    if (dsv4_model_open(argv[1], &M, &err) || dsv4_tokenizer_load(path, &T, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    dsv4_model_info info = dsv4_model_get_info(M);
    V = info.vocab_size;
    D = info.hidden_size;
    dsv4_tok_ids p1 = {0}, p2 = {0};
    const char *t1 = "<｜begin▁of▁sentence｜>The quick brown fox";
    const char *t2 = "<｜begin▁of▁sentence｜>Once upon a time, in a land far away,";
    if (dsv4_tokenize(T, t1, strlen(t1), &p1, &err) || dsv4_tokenize(T, t2, strlen(t2), &p2, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    test_equal_to_blocking_loop(&p1, &p2);
    test_bias_and_stops(&p1);
    test_bad_params();
    dsv4_tok_ids_free(&p1), dsv4_tok_ids_free(&p2);
    dsv4_tokenizer_free(T);
    dsv4_model_close(M);
    return test_report();
}
