/* test_generation.c — one generation on a sequence (src/serve/gen.c) with the real
 * tokenizer, checked against the engine driven by hand:
 *   - greedy generation = repeated argmax of the LM head (ids the tokenizer lacks masked);
 *   - a fixed seed reproduces the same tokens, another seed does not;
 *   - a stop string cuts the streamed text exactly before it;
 *   - a two-turn chat that reuses the cache (only the new turn prefilled) generates exactly
 *     what a fresh sequence does on the whole conversation.
 *   test_generation MODEL_DIR (with tokenizer.json)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "serve/gen.h"
#include "test.h"
#include "tok/chat.h"

static dsv4_model *M;
static dsv4_tokenizer *T;
static int V, D;

typedef struct text_buf {
    char data[1 << 16];
    size_t n;
} text_buf;

static int collect(void *user, const char *text, size_t len) {
    text_buf *b = user;
    if (b->n + len < sizeof b->data) { memcpy(b->data + b->n, text, len); b->n += len; }
    b->data[b->n] = 0;
    return 0;
}

static dsv4_engine *new_engine(void) {
    dsv4_engine_opts eo = {.max_context = 1024, .max_seqs = 2};
    dsv4_engine *e;
    dsv4_err err = {0};
    if (dsv4_engine_create(M, &eo, &e, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    return e;
}

static void tokenize(const char *text, dsv4_tok_ids *ids) {
    dsv4_err err = {0};
    memset(ids, 0, sizeof *ids);
    CHECK(dsv4_tokenize(T, text, strlen(text), ids, &err) == 0);
}

/* Generation through dsv4_generation_run on a fresh sequence. */
static dsv4_generation_result gen(dsv4_engine *e, int seq, const dsv4_tok_ids *prompt,
                                  const dsv4_generation_opts *o, text_buf *out) {
    dsv4_generation_result r;
    dsv4_err err = {0};
    dsv4_generation_callbacks cb = {.user = out, .text = collect};
    if (out) out->n = 0;
    int rc = dsv4_generation_run(e, T, seq, prompt->ids, (int)prompt->n, o, out ? &cb : NULL, &r, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return r;
}

static void test_greedy(const dsv4_tok_ids *prompt) {
    dsv4_engine *e = new_engine();
    dsv4_err err = {0};
    int s;
    CHECK(dsv4_seq_create(e, &s, &err) == 0);
    dsv4_generation_opts o = {.max_tokens = 24};
    text_buf out;
    dsv4_generation_result r = gen(e, s, prompt, &o, &out);
    CHECK(r.gen_tokens == 24 && r.finish == DSV4_FINISH_LENGTH);

    /* by hand: prefill, then argmax over ids that have a token, feeding each one */
    dsv4_engine *e2 = new_engine();
    int s2;
    CHECK(dsv4_seq_create(e2, &s2, &err) == 0);
    float *h = malloc((size_t)D * sizeof(float)), *logits = malloc((size_t)V * sizeof(float));
    dsv4_span sp = {.seq = s2, .start = 0, .n_tokens = (int)prompt->n, .tokens = prompt->ids, .n_hidden = 1};
    CHECK(dsv4_forward(e2, &sp, 1, h, NULL, &err) == 0);
    int same = 1;
    for (int i = 0; i < r.gen_tokens; i++) {
        CHECK(dsv4_lm_head(e2, h, 1, logits, &err) == 0);
        int best = -1;
        for (int v = 0; v < V; v++)
            if (dsv4_tok_id_to_token(T, v) && (best < 0 || logits[v] > logits[best])) best = v;
        same &= best == r.ids[i];
        int32_t t = best;
        dsv4_span one = {.seq = s2, .start = dsv4_seq_length(e2, s2), .n_tokens = 1, .tokens = &t, .n_hidden = 1};
        CHECK(dsv4_forward(e2, &one, 1, h, NULL, &err) == 0);
    }
    CHECK_MSG(same, "greedy generation differs from the argmax chain");
    /* the streamed text is the detokenized ids */
    char *text;
    size_t len;
    CHECK(dsv4_detokenize(T, r.ids, (size_t)r.gen_tokens, 0, &text, &len, &err) == 0);
    CHECK(len == out.n && !memcmp(text, out.data, len));

    /* a stop string taken from the middle of that text cuts the stream right before it */
    if (len > 12) {
        size_t at = len / 2;
        while (at < len && ((unsigned char)text[at] & 0xC0) == 0x80) at++;
        char stop[8] = {0};
        size_t sl = 0;
        while (sl < 3 && at + sl < len) stop[sl] = text[at + sl], sl++;
        while (at + sl < len && ((unsigned char)text[at + sl] & 0xC0) == 0x80 && sl < 7) stop[sl] = text[at + sl], sl++;
        const char *stops[1] = {stop};
        size_t first = (size_t)(strstr(text, stop) - text);
        int s3;
        CHECK(dsv4_seq_create(e, &s3, &err) == 0 || (dsv4_seq_free(e, s, &err) == 0 && dsv4_seq_create(e, &s3, &err) == 0));
        dsv4_generation_opts os = {.max_tokens = 24, .stop_strings = stops, .n_stop = 1};
        dsv4_generation_result r3 = gen(e, s3, prompt, &os, &out);
        CHECK(r3.finish == DSV4_FINISH_STOP_STRING);
        CHECK_MSG(out.n == first && !memcmp(out.data, text, first), "stop cut at %zu, want %zu", out.n, first);
        free(r3.ids);
    }
    free(text);
    free(h); free(logits); free(r.ids);
    dsv4_engine_free(e);
    dsv4_engine_free(e2);
}

static void test_seed(const dsv4_tok_ids *prompt) {
    dsv4_generation_result r[3];
    uint64_t seeds[3] = {7, 7, 8};
    for (int i = 0; i < 3; i++) {
        dsv4_engine *e = new_engine();
        dsv4_err err = {0};
        int s;
        CHECK(dsv4_seq_create(e, &s, &err) == 0);
        dsv4_generation_opts o = {.max_tokens = 16, .sample = {.temperature = 1.0f, .top_p = 0.95f, .seed = seeds[i]}};
        r[i] = gen(e, s, prompt, &o, NULL);
        dsv4_engine_free(e);
    }
    CHECK(r[0].gen_tokens == r[1].gen_tokens && !memcmp(r[0].ids, r[1].ids, (size_t)r[0].gen_tokens * 4));
    CHECK(r[0].gen_tokens != r[2].gen_tokens || memcmp(r[0].ids, r[2].ids, (size_t)r[0].gen_tokens * 4));
    for (int i = 0; i < 3; i++) free(r[i].ids);
}

/* Turn 2 of a chat on a reused sequence == the same turn on a fresh sequence. */
static void test_chat_reuse(void) {
    dsv4_err err = {0};
    dsv4_chat_opts co = {0};
    dsv4_chat *c;
    CHECK(dsv4_chat_create(&co, &c, &err) == 0);
    CHECK(dsv4_chat_add(c, "user", "Name three colours.", &err) == 0);
    dsv4_engine *e = new_engine();
    int s;
    CHECK(dsv4_seq_create(e, &s, &err) == 0);
    dsv4_generation_opts o = {.max_tokens = 12};
    char *text;
    size_t len;
    int reset;
    dsv4_tok_ids ids;
    CHECK(dsv4_chat_next(c, &text, &len, &reset, &err) == 0 && !reset);
    tokenize(text, &ids);
    free(text);
    dsv4_generation_result r1 = gen(e, s, &ids, &o, NULL);
    dsv4_tok_ids_free(&ids);
    size_t fed = (size_t)r1.gen_tokens - (r1.last_fed ? 0 : 1);
    CHECK(dsv4_detokenize(T, r1.ids, fed, 0, &text, &len, &err) == 0);
    dsv4_chat_add_generated(c, text, len, NULL, &err);
    free(text);
    free(r1.ids);
    CHECK(dsv4_chat_add(c, "user", "And three more?", &err) == 0);
    CHECK(dsv4_chat_next(c, &text, &len, &reset, &err) == 0 && !reset);
    tokenize(text, &ids);
    free(text);
    int64_t before = dsv4_seq_length(e, s);
    dsv4_generation_result r2 = gen(e, s, &ids, &o, NULL);
    CHECK(r2.prompt_tokens == (int64_t)ids.n && before > (int64_t)ids.n); /* only the new turn */
    dsv4_tok_ids_free(&ids);

    /* fresh: the whole conversation (without the second answer) in one prefill */
    CHECK(dsv4_chat_render(c, &text, &len, &err) == 0);
    tokenize(text, &ids);
    free(text);
    dsv4_engine *e2 = new_engine();
    int s2;
    CHECK(dsv4_seq_create(e2, &s2, &err) == 0);
    dsv4_generation_result r3 = gen(e2, s2, &ids, &o, NULL);
    CHECK((int64_t)ids.n == before + r2.prompt_tokens);
    CHECK_MSG(r2.gen_tokens == r3.gen_tokens && !memcmp(r2.ids, r3.ids, (size_t)r2.gen_tokens * 4),
              "second turn with cache reuse differs from a fresh prefill");
    dsv4_tok_ids_free(&ids);
    free(r2.ids); free(r3.ids);
    dsv4_engine_free(e);
    dsv4_engine_free(e2);
    dsv4_chat_free(c);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_generation MODEL_DIR\n"); return 2; }
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
    dsv4_tok_ids prompt;
    tokenize("<｜begin▁of▁sentence｜>The quick brown fox", &prompt);
    test_greedy(&prompt);
    test_seed(&prompt);
    test_chat_reuse();
    dsv4_tok_ids_free(&prompt);
    dsv4_tokenizer_free(T);
    dsv4_model_close(M);
    return test_report();
}
