/* test_mtp_generation.c — MTP speculative decoding (serving.md §e) gives the tokens of a run
 * without it:
 *   - greedy, >= N tokens through dsv4_generation_run: the model's own drafts; drafts forced
 *     wrong exactly where they land on positions = -1 or 0 mod 4 or mod 128 or on the first
 *     or last row of a window page (and right everywhere else, so both outcomes of a verify
 *     run many times); drafts right with probability 1/2;
 *   - seeded sampling (temperature, top-k, top-p, penalties) with drafts right half the time;
 *   - batched: a hand-written scheduler puts an MTP sequence's verify spans, a sequence
 *     without MTP and another one's prefill chunks in the same forward calls (and the MTP
 *     rows of both MTP sequences in one MTP call); each gets what it gets alone;
 *   - the counters: forced-right drafts are all accepted, forced-wrong ones never.
 * The baseline runs on an engine without MTP caches.
 *
 *   test_mtp_generation MODEL_DIR TOKENIZER N [reference]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "dsv4_text.h"
#include "test.h"

enum { WIN_BLOCK = 16 };

static dsv4_model *M;
static dsv4_tokenizer *T;
static int V, D, HC, N, REFERENCE;
static int32_t prompt[40];
/* EOS banned (logit bias -inf), so that every run is N tokens long */
static int32_t eos_id[1];
static const float eos_ban[1] = {-INFINITY};
static const int P = 37;  /* prompt length: decoding starts off every boundary */
/* the engine's span limit; sequence 2's 40-token prompt is two full chunks of it, so its
 * first MTP call after the prompt would be the row that waited plus a whole chunk */
enum { C_MAX = 20 };

static dsv4_engine *engine(int mtp, int max_seqs) {
    dsv4_engine_opts eo = {.max_context = P + N + 16, .max_seqs = max_seqs, .mtp = mtp,
                           .win_block = WIN_BLOCK, .c_max = C_MAX, .reference = REFERENCE};
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    if (dsv4_engine_create(M, &eo, &e, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    return e;
}

/* Draft hook: the true token of the position (from a run without MTP) or a wrong one. */
typedef struct forcing {
    const int32_t *truth;  /* tokens generated from position P on */
    int n_truth;
    int mode;              /* 0: wrong on boundaries, right elsewhere; 1: right with p = 1/2 */
    uint64_t rng;
    int64_t forced_wrong, forced_right;
} forcing;

static int boundary(int64_t pos) {
    return pos % 4 == 3 || pos % 4 == 0 || pos % 128 == 127 || pos % 128 == 0 ||
           pos % WIN_BLOCK == 0 || pos % WIN_BLOCK == WIN_BLOCK - 1;
}

static int32_t force(void *user, int64_t pos, int32_t draft) {
    (void)draft;
    forcing *f = user;
    const int64_t i = pos - P;
    if (i < 0 || i >= f->n_truth) return -1;
    int right;
    if (f->mode == 0) right = !boundary(pos);
    else {
        f->rng ^= f->rng << 13; f->rng ^= f->rng >> 7; f->rng ^= f->rng << 17;
        right = (f->rng >> 20) & 1;
    }
    f->forced_right += right;
    f->forced_wrong += !right;
    return right ? f->truth[i] : (f->truth[i] + 1) % V;
}

/* dsv4_generation_run on a fresh sequence; returns the tokens (caller frees). */
static int32_t *generate(int mtp, const dsv4_generation_opts *o0, forcing *hook, int *n,
                         dsv4_spec_stats *st) {
    dsv4_engine *e = engine(mtp, 1);
    dsv4_err err = {0};
    int seq;
    CHECK(dsv4_seq_create(e, &seq, &err) == 0);
    dsv4_generation_opts o = *o0;
    o.spec = NULL;
    if (mtp) {
        CHECK_MSG(dsv4_spec_create(e, seq, &o.spec, &err) == 0, "%s", err.msg);
        if (hook) dsv4_spec_set_draft_hook(o.spec, force, hook);
    }
    dsv4_generation_result r;
    int rc = dsv4_generation_run(e, T, seq, prompt, P, &o, NULL, &r, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    *n = rc ? 0 : (int)r.gen_tokens;
    if (st) *st = r.spec;
    dsv4_spec_free(o.spec);
    dsv4_engine_free(e);
    return rc ? NULL : r.ids;
}

static int same(const int32_t *a, int na, const int32_t *b, int nb, const char *what) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    CHECK_MSG(na == nb && i == na, "%s: %d vs %d tokens, first difference at %d", what, na, nb, i);
    return na == nb && i == na;
}

/* base_out: where the baseline's tokens go (the caller frees them), or NULL */
static void test_blocking(const dsv4_sample_params *sp, const char *what, int32_t **base_out, int *nb_out) {
    dsv4_generation_opts o = {.sample = *sp, .max_tokens = N, .bias_ids = eos_id, .bias = eos_ban, .n_bias = 1};
    int nb, nm, nf, nh;
    dsv4_spec_stats st;
    int32_t *base = generate(0, &o, NULL, &nb, NULL);
    CHECK_MSG(nb == N, "%s: baseline stopped after %d tokens; the test wants %d", what, nb, N);
    /* the model's own drafts (random weights: mostly rejected) */
    int32_t *own = generate(1, &o, NULL, &nm, &st);
    same(base, nb, own, nm, what);
    printf("%s, own drafts: %lld steps, %lld/%lld accepted\n", what, (long long)st.steps,
           (long long)st.accepted, (long long)st.drafts);
    /* wrong exactly on the boundaries, right elsewhere */
    forcing f = {base, nb, 0, 1, 0, 0};
    int32_t *forced = generate(1, &o, &f, &nf, &st);
    same(base, nb, forced, nf, what);
    CHECK_MSG(st.drafts == f.forced_right + f.forced_wrong && st.accepted == f.forced_right,
              "%s: %lld drafts, %lld accepted; forced %lld right, %lld wrong", what,
              (long long)st.drafts, (long long)st.accepted, (long long)f.forced_right,
              (long long)f.forced_wrong);
    /* about a quarter of the drafts land right (N = 520 in Release, 200 under the
     * sanitizers: 50 right, 99 wrong there), so the floor scales with N */
    CHECK_MSG(f.forced_right > N / 8 && f.forced_wrong > N / 8, "%s: forced %lld right, %lld wrong for %d tokens",
              what, (long long)f.forced_right, (long long)f.forced_wrong, N);
    printf("%s, forced on boundaries: %lld steps for %d tokens, %lld right, %lld wrong\n", what,
           (long long)st.steps, nf, (long long)f.forced_right, (long long)f.forced_wrong);
    /* right half the time */
    forcing h = {base, nb, 1, 0x9e3779b97f4a7c15ull, 0, 0};
    int32_t *half = generate(1, &o, &h, &nh, &st);
    same(base, nb, half, nh, what);
    CHECK(st.accepted == h.forced_right && h.forced_right > 20 && h.forced_wrong > 20);
    if (base_out) *base_out = base, *nb_out = nb;
    else free(base);
    free(own); free(forced); free(half);
}

/* ---- a small batched scheduler over the public API ------------------------------------ */

typedef struct bseq {
    int seq;
    int use_mtp;
    const int32_t *prompt;
    int n_prompt, prefilled, chunk, start_step;
    dsv4_gen *g;
    dsv4_spec *spec;
    forcing *hook;       /* draft hook of its spec, or NULL: the model's drafts */
    int32_t next;        /* pending token while decoding */
    int done;
    int rows;            /* hidden rows of its span in this step */
} bseq;

/* Runs the sequences together until all have N tokens; outputs via dsv4_gen_tokens. */
static void run_batched(dsv4_engine *e, bseq *s, int ns, const dsv4_sample_params *sp) {
    dsv4_err err = {0};
    const int most_rows = 64 * 3;
    float *hidden = malloc((size_t)most_rows * D * sizeof(float));
    float *streams = malloc((size_t)most_rows * HC * D * sizeof(float));
    float *logits = malloc((size_t)most_rows * V * sizeof(float));
    dsv4_span spans[3];
    dsv4_mtp_span ms[3];
    int ms_seq[3], ms_draft[3];
    for (int i = 0; i < ns; i++) {
        dsv4_gen_params gp = {.sample = *sp, .max_tokens = N, .bias_ids = eos_id, .bias = eos_ban, .n_bias = 1};
        CHECK(dsv4_seq_create(e, &s[i].seq, &err) == 0);
        CHECK(dsv4_gen_create(M, T, &gp, &s[i].g, &err) == 0);
        if (s[i].use_mtp) CHECK(dsv4_spec_create(e, s[i].seq, &s[i].spec, &err) == 0);
        else CHECK(dsv4_seq_mtp_off(e, s[i].seq, &err) == 0);
        if (s[i].spec && s[i].hook) dsv4_spec_set_draft_hook(s[i].spec, force, s[i].hook);
    }
    for (int step = 0, live = ns; live > 0 && step < 4 * N; step++) {
        int n = 0;
        for (int i = 0; i < ns; i++) {
            bseq *q = &s[i];
            q->rows = 0;
            if (q->done || step < q->start_step) continue;
            if (q->prefilled < q->n_prompt) {
                int c = q->n_prompt - q->prefilled < q->chunk ? q->n_prompt - q->prefilled : q->chunk;
                int last = q->prefilled + c == q->n_prompt;
                spans[n] = (dsv4_span){.seq = q->seq, .start = q->prefilled, .n_tokens = c,
                                       .tokens = q->prompt + q->prefilled, .n_hidden = last,
                                       .n_streams = q->spec ? c : 0};
                q->rows = last;
            } else if (q->spec) {
                CHECK(dsv4_spec_verify_span(q->spec, &spans[n], &err) == 0);
                q->rows = spans[n].n_tokens;
            } else {
                spans[n] = (dsv4_span){.seq = q->seq, .start = dsv4_seq_length(e, q->seq),
                                       .n_tokens = 1, .tokens = &q->next, .n_hidden = 1};
                q->rows = 1;
            }
            n++;
        }
        if (!n) continue;
        CHECK_MSG(dsv4_forward(e, spans, n, hidden, streams, &err) == 0, "%s", err.msg);
        int rows = 0;
        for (int j = 0; j < n; j++) rows += spans[j].n_hidden;
        CHECK(dsv4_lm_head(e, hidden, rows, logits, &err) == 0);
        /* consume: span order = sequence order */
        int hrow = 0, srow = 0, j = 0, nm = 0;
        for (int i = 0; i < ns; i++) {
            bseq *q = &s[i];
            if (q->done || step < q->start_step) continue;
            const dsv4_span *sp_i = &spans[j++];
            const float *lg = logits + (size_t)hrow * V, *st = streams + (size_t)srow * HC * D;
            hrow += sp_i->n_hidden;
            srow += sp_i->n_streams;
            dsv4_gen_token t;
            int have = 0;
            if (q->prefilled < q->n_prompt) {
                if (q->spec) CHECK(dsv4_spec_fed(q->spec, sp_i->tokens, sp_i->n_tokens, st, &err) == 0);
                q->prefilled += sp_i->n_tokens;
                if (q->prefilled == q->n_prompt) { CHECK(dsv4_gen_next(q->g, lg, &t, &err) == 0); have = 1; }
            } else {
                CHECK(dsv4_gen_next(q->g, lg, &t, &err) == 0);
                have = 1;
                if (q->spec) {
                    int k;
                    CHECK_MSG(dsv4_spec_verify_done(q->spec, t.token, t.feed, st, &k, &err) == 0, "%s", err.msg);
                    if (k == 2 && !t.finish) CHECK(dsv4_gen_next(q->g, lg + V, &t, &err) == 0);
                    else if (k == 2) have = 0;
                }
            }
            if (have && (t.finish || !t.feed)) have = 0;
            if (dsv4_gen_finished(q->g)) { q->done = 1; live--; }
            if (have && !q->done) {
                q->next = t.token;
                if (q->spec) dsv4_spec_set_next(q->spec, t.token);
            }
            if (q->spec && !q->done) {
                dsv4_spec_mtp_span(q->spec, &ms[nm], &ms_draft[nm]);
                if (ms[nm].n) ms_seq[nm++] = i;
            }
        }
        if (!nm) continue;
        /* one MTP call for every MTP sequence, then the head on the draft rows */
        float *mh = hidden; /* reuse: (sum rows, D) */
        CHECK_MSG(dsv4_mtp_forward(e, ms, nm, mh, &err) == 0, "%s", err.msg);
        int off = 0;
        for (int a = 0; a < nm; a++) {
            int32_t d = -1;
            if (ms_draft[a]) {
                CHECK(dsv4_lm_head(e, mh + (size_t)(off + ms[a].n - 1) * D, 1, logits, &err) == 0);
                d = dsv4_argmax(logits, V);
            }
            off += ms[a].n;
            dsv4_spec_mtp_done(s[ms_seq[a]].spec, d);
        }
    }
    free(hidden); free(streams); free(logits);
}

/* base0: test_blocking's baseline for these sampling parameters (prompt 0 alone, the same run),
 * taken over instead of run again */
static void test_batched(const dsv4_sample_params *sp, const char *what, int32_t *base0, int nb0) {
    /* alone: three prompts through the blocking loop without MTP */
    static int32_t p2[40], p3[40];
    for (int i = 0; i < 40; i++) {
        p2[i] = (prompt[i] * 7 + 3) % V;
        p3[i] = (prompt[i] * 13 + 5) % V;
    }
    const int32_t *prompts[3] = {prompt, p2, p3};
    const int np[3] = {P, 29, 40};
    int32_t *alone[3];
    int na[3];
    dsv4_generation_opts o = {.sample = *sp, .max_tokens = N, .bias_ids = eos_id, .bias = eos_ban, .n_bias = 1};
    alone[0] = base0, na[0] = nb0;
    for (int i = 1; i < 3; i++) {
        dsv4_engine *e = engine(0, 1);
        dsv4_err err = {0};
        int seq;
        dsv4_generation_result r;
        CHECK(dsv4_seq_create(e, &seq, &err) == 0);
        CHECK(dsv4_generation_run(e, T, seq, prompts[i], np[i], &o, NULL, &r, &err) == 0);
        alone[i] = r.ids;
        na[i] = (int)r.gen_tokens;
        dsv4_engine_free(e);
    }
    /* together: 0 with MTP and half its drafts right, in prefill chunks of 7 rows; 1 without
     * MTP; 2 with MTP joining at step 5, its prompt two chunks of C_MAX rows (its first token
     * is drawn in the step of the last chunk, before that chunk's MTP rows ran) */
    dsv4_engine *e = engine(1, 3);
    bseq s[3] = {{.use_mtp = 1, .prompt = prompt, .n_prompt = P, .chunk = 7},
                 {.use_mtp = 0, .prompt = p2, .n_prompt = 29, .chunk = C_MAX},
                 {.use_mtp = 1, .prompt = p3, .n_prompt = 2 * C_MAX, .chunk = C_MAX, .start_step = 5}};
    forcing h = {alone[0], na[0], 1, 0x1234567ull, 0, 0};
    s[0].hook = &h;
    run_batched(e, s, 3, sp);
    CHECK(h.forced_right > 20 && h.forced_wrong > 20);
    for (int i = 0; i < 3; i++) {
        int n;
        const int32_t *ids = dsv4_gen_tokens(s[i].g, &n);
        char name[96];
        snprintf(name, sizeof name, "%s, batched sequence %d", what, i);
        same(alone[i], na[i], ids, n, name);
        if (s[i].spec) {
            dsv4_spec_stats st = dsv4_spec_get_stats(s[i].spec);
            printf("%s: %lld steps, %lld/%lld drafts accepted\n", name, (long long)st.steps,
                   (long long)st.accepted, (long long)st.drafts);
        }
        dsv4_spec_free(s[i].spec);
        dsv4_gen_free(s[i].g);
        free(alone[i]);
    }
    dsv4_engine_free(e);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_mtp_generation MODEL_DIR TOKENIZER N [reference]\n");
        return 2;
    }
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &M, &err) || dsv4_tokenizer_load(argv[2], &T, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    N = atoi(argv[3]);
    REFERENCE = argc > 4 && !strcmp(argv[4], "reference");
    dsv4_model_info info = dsv4_model_get_info(M);
    V = info.vocab_size;
    D = info.hidden_size;
    HC = info.hc_mult;
    eos_id[0] = info.eos_token_id;
    for (int i = 0; i < 40; i++) prompt[i] = (int32_t)(2 + (i * 2654435761u >> 7) % (unsigned)(V - 2));
    dsv4_sample_params greedy = {0};
    dsv4_sample_params seeded = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f,
                                 .repetition_penalty = 1.1f, .seed = 1234};
    int32_t *greedy_base = NULL;
    int greedy_n = 0;
    test_blocking(&greedy, "greedy", &greedy_base, &greedy_n);
    test_blocking(&seeded, "seeded", NULL, NULL);
    test_batched(&greedy, "greedy", greedy_base, greedy_n);
    dsv4_tokenizer_free(T);
    dsv4_model_close(M);
    return test_report();
}
