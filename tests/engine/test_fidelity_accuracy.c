/* test_fidelity_accuracy.c — P3 fidelity mode against P0 on a golden model
 * (spec/model.md §6, serving.md §f: reported, not gated).
 *
 *   test_fidelity_accuracy CASE_DIR [RUN_NAME]     e.g. ../shared/golden/tiny_s0 run_p292_d8
 *
 * The golden run's tokens (prefill, then single-token decodes, then the MTP rows) go through
 * P0 and P3 with all items on ("official") and with each item alone. Per run: hidden, logits
 * and MTP logits against P0 (max-abs, max-rel, rel-L2, cosine; top-1 and mean KL on
 * logits), the fraction of (score-routed layer, token) pairs with the same routed expert
 * set, and the mean Jaccard overlap of the CSA selections (both from the engine's choice
 * hook). Asserted: every value finite; an item on changes the hidden states (the hook is
 * live); P0's choices are the oracle's; the setting's parser and the engine's validation
 * (unknown items, w8a8 together with fidelity). The figures themselves are printed, not
 * gated: P3 is a different graph.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy_metrics.h"
#include "choice_metrics.h"
#include "golden_run.h"
#include "dsv4.h"
#include "dump.h"
#include "model/model.h"
#include "test.h"

typedef golden_out run_out;

static int run_engine(const dsv4_model *m, const int32_t *tokens, int N, int P, unsigned fid, run_out *o) {
    dsv4_engine_opts eo = {0};
    eo.fidelity = fid;
    char what[32];
    snprintf(what, sizeof what, "fidelity 0x%x", fid);
    return golden_run(m, eo, tokens, N, P, NULL, NULL, what, o);
}

static void test_parse(const dsv4_model *m) {
    dsv4_err err = {0};
    unsigned v = 99;
    CHECK(dsv4_fidelity_parse("official", &v, &err) == 0 && v == DSV4_FID_OFFICIAL);
    CHECK(dsv4_fidelity_parse("none", &v, &err) == 0 && v == 0);
    CHECK(dsv4_fidelity_parse("F1,F3", &v, &err) == 0 && v == (DSV4_FID_F1 | DSV4_FID_F3));
    CHECK(dsv4_fidelity_parse("f5", &v, &err) == 0 && v == DSV4_FID_F5);
    CHECK(dsv4_fidelity_parse("F6", &v, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "unknown item 'F6'");
    CHECK(dsv4_fidelity_parse("F1,", &v, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_fidelity_parse("", &v, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_fidelity_parse("F1,,F2", &v, &err) == DSV4_ERR_ARG);
    dsv4_engine_opts bad = {0};
    dsv4_engine *be = NULL;
    bad.fidelity = 0x40;
    CHECK(dsv4_engine_create(m, &bad, &be, &err) == DSV4_ERR_ARG && be == NULL);
    CHECK_ERR(err, DSV4_ERR_ARG, "unknown fidelity items 0x40");
    bad.fidelity = DSV4_FID_F1;
    bad.w8a8 = 1;
    CHECK(dsv4_engine_create(m, &bad, &be, &err) == DSV4_ERR_ARG && be == NULL);
    CHECK_ERR(err, DSV4_ERR_ARG, "w8a8");
}

int main(int argc, char **argv) {
    char def[1024], run[1100], buf[1200];
    const char *dir = argc > 1 ? argv[1] : test_shared("golden/tiny_s0", def, sizeof def);
    snprintf(run, sizeof run, "%s/%s", dir, argc > 2 ? argv[2] : "run_p292_d8");
    dump_dir ref;
    if (dump_load(run, &ref)) return 1;
    snprintf(buf, sizeof buf, "%s/model", dir);
    dsv4_model *m;
    dsv4_err err = {0};
    if (dsv4_model_open(buf, &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    const dsv4_config *c = &m->cfg;
    const int N = ref.n_tokens, P = ref.prefill_len, D = c->hidden_size, V = c->vocab_size;
    const int L = c->num_hidden_layers, K = c->num_experts_per_tok, mtp = c->num_nextn_predict_layers > 0;
    printf("%s: %d tokens (prefill %d, then %d decode steps)\n", run, N, P, N - P);
    test_parse(m);

    static const struct { unsigned fid; const char *name; } cases[] = {
        {0, "P0"}, {DSV4_FID_OFFICIAL, "official (F1-F5)"}, {DSV4_FID_F1, "F1 act-quant"},
        {DSV4_FID_F2, "F2 KV FP8"}, {DSV4_FID_F3, "F3 indexer FP4"}, {DSV4_FID_F4, "F4 BF16 acts"},
        {DSV4_FID_F5, "F5 MoE"},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    run_out o[NC];
    for (int i = 0; i < NC; i++)
        if (run_engine(m, ref.tokens, N, P, cases[i].fid, &o[i])) { CHECK(0); return test_report(); }

    /* P0's choices are the oracle's (so the hook reports what the engine used) */
    snprintf(buf, sizeof buf, "%s/routing_experts.bin", run);
    FILE *f = fopen(buf, "rb");
    int32_t *gr = malloc(sizeof(int32_t) * (size_t)L * N * K);
    if (f && fread(gr, sizeof(int32_t), (size_t)L * N * K, f) == (size_t)L * N * K) {
        long diff = 0;
        for (size_t i = 0; i < (size_t)L * N * K; i++) diff += gr[i] != o[0].ch.route[i];
        CHECK_MSG(diff == 0, "P0 routing differs from the oracle's in %ld slots", diff);
    } else {
        CHECK_MSG(0, "cannot read %s", buf);
    }
    if (f) fclose(f);
    free(gr);

    for (int i = 1; i < NC; i++) {
        printf("P3 %s vs P0:\n", cases[i].name);
        metrics mh = compare(o[i].hidden, o[0].hidden, N, D, 0);
        metrics ml = compare(o[i].logits, o[0].logits, N, V, 1);
        print_metrics("hidden", &mh, 0);
        print_metrics("logits", &ml, 1);
        CHECK_MSG(mh.finite && ml.finite, "%s: non-finite values", cases[i].name);
        if (mtp) {
            metrics mm = compare(o[i].mtp, o[0].mtp, N - 1, V, 1);
            print_metrics("mtp logits", &mm, 1);
            CHECK_MSG(mm.finite, "%s: non-finite MTP logits", cases[i].name);
        }
        print_choice_metrics(c->num_hash_layers, L, N, K, o[i].ch.route, o[0].ch.route, &o[i].ch, &o[0].ch);
        /* the item is live: it changes the result */
        CHECK_MSG(mh.max_abs > 0, "%s: hidden identical to P0 (hook not taken?)", cases[i].name);
    }
    for (int i = 0; i < NC; i++) golden_out_free(&o[i]);
    dsv4_model_close(m);
    dump_free(&ref);
    return test_report();
}
