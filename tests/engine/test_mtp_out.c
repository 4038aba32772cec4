/* test_mtp_out.c — dsv4_mtp_forward_out: MTP rows whose hidden state nobody reads stop after
 * the attention sub-block (dsv4_engine_block_keep), and that changes nothing else:
 *   - the rows that are computed (the last of a span, or all) are bitwise those of a run
 *     that computed every row, alone and batched with another sequence;
 *   - the MTP cache they leave is the same: a later row over it gives the same bits;
 *   - the skipped rows never reach the MoE (the choice hook hears of the kept rows only),
 *     nor the attention heads: the engine's attention counts (dsv4_attn_stats) show every
 *     row projected for the cache but only the kept rows' queries projected and attended;
 *   - bad out values and a NULL hidden with rows wanted are errors, NULL with none is not.
 *
 *   test_mtp_out MODEL_DIR   (a model with an MTP block)
 */
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "engine/engine.h"
#include "test.h"

enum { P = 40 };  /* prompt rows; MTP rows [0, P - 1) are ready after it */

static dsv4_model *M;
static int D, HC, L;
static int32_t tok[P + 2];
static float *streams;   /* (P, hc, D) the prompt's last-block streams */

/* MTP-block expert reports, by sequence */
static int moe_rows[4];
static void on_choice(void *user, int seq, int64_t pos, int layer, int kind, const int *ids, int n) {
    (void)user, (void)pos, (void)ids, (void)n;
    if (kind == DSV4_CHOICE_EXPERTS && layer == L && seq >= 0 && seq < 4) moe_rows[seq]++;
}

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

/* An engine with n sequences, each with the prompt run (streams of every row). */
static dsv4_engine *setup(int n, int *seqs) {
    dsv4_engine_opts eo = {.max_context = 128, .max_seqs = n, .c_max = 64, .mtp = 1};
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    if (dsv4_engine_create(M, &eo, &e, &err)) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        CHECK(dsv4_seq_create(e, &seqs[i], &err) == 0);
        dsv4_span sp = {.seq = seqs[i], .start = 0, .n_tokens = P, .tokens = tok, .n_streams = P};
        CHECK_MSG(dsv4_forward(e, &sp, 1, NULL, streams, &err) == 0, "%s", err.msg);
    }
    dsv4_engine_set_choice_trace(e, on_choice, NULL);
    return e;
}

/* MTP row P - 1 (x_P = tok[P]) on each sequence, every row wanted: (n, D). */
static void next_row(dsv4_engine *e, int n, const int *seqs, float *out) {
    dsv4_err err = {0};
    dsv4_mtp_span ms[4];
    for (int i = 0; i < n; i++)
        ms[i] = (dsv4_mtp_span){seqs[i], P - 1, 1, tok + P, streams + (size_t)(P - 1) * HC * D};
    CHECK_MSG(dsv4_mtp_forward(e, ms, n, out, &err) == 0, "%s", err.msg);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_mtp_out MODEL_DIR\n");
        return 2;
    }
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &M, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const dsv4_model_info info = dsv4_model_get_info(M);
    D = info.hidden_size;
    HC = info.hc_mult;
    L = info.n_layers;
    for (int i = 0; i < P + 2; i++) tok[i] = (int32_t)(3 + (i * 2654435761u >> 9) % (unsigned)(info.vocab_size - 3));
    streams = malloc((size_t)P * HC * D * sizeof(float));
    float *all = malloc((size_t)P * D * sizeof(float));      /* (P - 1, D) every row, reference */
    float *part = malloc((size_t)4 * D * sizeof(float));     /* the rows wanted */
    float *after_a = malloc((size_t)4 * D * sizeof(float)), *after_b = malloc((size_t)4 * D * sizeof(float));
    const size_t row = (size_t)HC * D;

    /* reference: one sequence, every row */
    int ref[1];
    dsv4_engine *e = setup(1, ref);
    dsv4_mtp_span ms = {ref[0], 0, P - 1, tok + 1, streams};
    memset(moe_rows, 0, sizeof moe_rows);
    CHECK(dsv4_mtp_forward(e, &ms, 1, all, &err) == 0);
    CHECK(moe_rows[ref[0]] == P - 1);
    next_row(e, 1, ref, after_a);
    dsv4_engine_free(e);

    /* the same rows in two calls, the first wanting none, the second its last row only;
     * and a second sequence in the second call wanting all of its rows */
    int s[2];
    e = setup(2, s);
    const int cut = 17;
    const int none = DSV4_MTP_OUT_NONE;
    ms = (dsv4_mtp_span){s[0], 0, cut, tok + 1, streams};
    memset(moe_rows, 0, sizeof moe_rows);
    dsv4_attn_stats st = {0};
    e->attn_stats = &st;
    CHECK(dsv4_mtp_forward_out(e, &ms, 1, &none, NULL, &err) == 0);
    CHECK_MSG(moe_rows[s[0]] == 0, "%d MoE rows for a span wanting none", moe_rows[s[0]]);
    CHECK_MSG(st.rows == cut && st.q_rows == 0 && st.attended == 0,
              "a span wanting none: %lld rows, %lld queries, %lld attended; want %d, 0, 0", (long long)st.rows,
              (long long)st.q_rows, (long long)st.attended, cut);
    CHECK(dsv4_seq_mtp_length(e, s[0]) == cut);
    dsv4_mtp_span two[2] = {{s[0], cut, P - 1 - cut, tok + cut + 1, streams + (size_t)cut * row},
                            {s[1], 0, 3, tok + 1, streams}};
    const int out2[2] = {DSV4_MTP_OUT_LAST, DSV4_MTP_OUT_ALL};
    st = (dsv4_attn_stats){0};
    CHECK(dsv4_mtp_forward_out(e, two, 2, out2, part, &err) == 0);
    CHECK_MSG(moe_rows[s[0]] == 1 && moe_rows[s[1]] == 3, "MoE rows %d and %d, want 1 and 3", moe_rows[s[0]],
              moe_rows[s[1]]);
    printf("MTP call of %d + 3 rows wanting 1 + 3: %lld rows projected, %lld queries, %lld attended\n",
           P - 1 - cut, (long long)st.rows, (long long)st.q_rows, (long long)st.attended);
    CHECK_MSG(st.rows == P - 1 - cut + 3 && st.q_rows == 4 && st.attended == 4,
              "want %d rows, 4 queries, 4 attended", P - 1 - cut + 3);
    e->attn_stats = NULL;
    CHECK_MSG(same(part, all + (size_t)(P - 2) * D, D), "the last row differs from the full run");
    CHECK_MSG(same(part + D, all, (size_t)3 * D), "the other sequence's rows differ");
    /* the cache the skipped rows left: the next row is the same */
    ms = (dsv4_mtp_span){s[1], 3, P - 4, tok + 4, streams + (size_t)3 * row};
    const int last = DSV4_MTP_OUT_LAST;
    CHECK(dsv4_mtp_forward_out(e, &ms, 1, &last, part, &err) == 0);
    CHECK(same(part, all + (size_t)(P - 2) * D, D));
    next_row(e, 2, s, after_b);
    CHECK_MSG(same(after_b, after_a, D) && same(after_b + D, after_a, D),
              "the row after the skipped ones differs: their cache writes changed");

    /* arguments */
    int bad = 3;
    dsv4_seq_free(e, s[1], &err);
    CHECK(dsv4_seq_create(e, &s[1], &err) == 0);
    dsv4_span sp = {.seq = s[1], .start = 0, .n_tokens = 4, .tokens = tok, .n_streams = 4};
    CHECK(dsv4_forward(e, &sp, 1, NULL, streams, &err) == 0);
    ms = (dsv4_mtp_span){s[1], 0, 2, tok + 1, streams};
    CHECK(dsv4_mtp_forward_out(e, &ms, 1, &bad, part, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "DSV4_MTP_OUT_");
    CHECK(dsv4_mtp_forward_out(e, &ms, 1, &last, NULL, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "NULL hidden");
    CHECK(dsv4_seq_mtp_length(e, s[1]) == 0);  /* nothing ran */
    dsv4_engine_free(e);

    free(streams); free(all); free(part); free(after_a); free(after_b);
    dsv4_model_close(M);
    return test_report();
}
