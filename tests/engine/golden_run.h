/* golden_run.h — one engine over a golden run's tokens, as the accuracy tests need it:
 * prefill P rows, then one row per step, every hidden row kept; the LM head on all of them;
 * the MTP block (when the model has one) on positions 0 .. N-2; the choices the engine
 * reports. Shared by test_w8a8_accuracy (P2) and test_fidelity_accuracy (P3). */
#ifndef DSV4_TESTS_GOLDEN_RUN_H
#define DSV4_TESTS_GOLDEN_RUN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choice_metrics.h"
#include "dsv4.h"
#include "model/model.h"

typedef struct {
    float *hidden; /* (N, D) */
    float *logits; /* (N, V) */
    float *mtp;    /* (N-1, V), untouched without an MTP block */
    choices ch;    /* what the engine's choice hook reported */
} golden_out;

static inline void golden_out_free(golden_out *o) {
    free(o->hidden); free(o->logits); free(o->mtp);
    choices_free(&o->ch);
}

/* opts: the path under test (w8a8, fidelity, threads); sizes and mtp are set here. trace
 * (may be NULL) is installed as the engine's stream hook. Returns 0, or -1 with a message
 * naming `what`. */
static inline int golden_run(const dsv4_model *m, dsv4_engine_opts opts, const int32_t *tokens, int N, int P,
                             dsv4_trace_fn trace, void *trace_user, const char *what, golden_out *o) {
    const dsv4_config *c = &m->cfg;
    const int D = c->hidden_size, V = c->vocab_size, hc = c->hc_mult, L = c->num_hidden_layers;
    const int K = c->num_experts_per_tok;
    dsv4_err err = {0};
    opts.max_context = N + 8;
    opts.max_seqs = 1;
    opts.c_max = N;
    opts.mtp = c->num_nextn_predict_layers > 0;
    if (!opts.kv_dtype) opts.kv_dtype = DSV4_KV_F32; /* paths are judged on the reference cache */
    memset(o, 0, sizeof *o);
    dsv4_engine *e;
    if (dsv4_engine_create(m, &opts, &e, &err)) { fprintf(stderr, "%s: engine: %s\n", what, err.msg); return -1; }
    o->hidden = malloc(sizeof(float) * (size_t)N * D);
    o->logits = malloc(sizeof(float) * (size_t)N * V);
    o->mtp = malloc(sizeof(float) * (size_t)N * V);
    float *streams = malloc(sizeof(float) * (size_t)N * hc * D); /* (N, hc, D) */
    float *mh = malloc(sizeof(float) * (size_t)N * D);           /* (N-1, D) MTP hidden */
    int rc = !o->hidden || !o->logits || !o->mtp || !streams || !mh || choices_init(&o->ch, N, L, K, c->index_topk);
    if (rc) snprintf(err.msg, sizeof err.msg, "out of memory");
    if (trace) dsv4_engine_set_trace(e, trace, trace_user);
    dsv4_engine_set_choice_trace(e, choices_hook, &o->ch);
    int seq = 0;
    if (!rc) rc = dsv4_seq_create(e, &seq, &err);
    for (int s0 = 0; s0 < N && !rc;) {
        const int n = s0 == 0 ? P : 1;
        dsv4_span sp = {seq, s0, n, tokens + s0, n, NULL, n, NULL, 0};
        rc = dsv4_forward(e, &sp, 1, o->hidden + (size_t)s0 * D, streams + (size_t)s0 * hc * D, &err);
        s0 += n;
    }
    if (!rc) rc = dsv4_lm_head(e, o->hidden, N, o->logits, &err);
    /* MTP rows 0 .. N-2: streams of position t with token t+1 */
    if (!rc && opts.mtp) {
        dsv4_mtp_span ms = {seq, 0, N - 1, tokens + 1, streams};
        rc = dsv4_mtp_forward(e, &ms, 1, mh, &err);
        if (!rc) rc = dsv4_lm_head(e, mh, N - 1, o->mtp, &err);
    }
    if (rc) fprintf(stderr, "%s: %s\n", what, err.msg);
    free(mh); free(streams);
    dsv4_engine_free(e);
    return rc ? -1 : 0;
}

#endif
