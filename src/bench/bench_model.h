/* bench_model.h — what a forward step costs in bytes and FLOPs, for roofline figures.
 *
 * Decode is bound by the weight bytes a step reads: every non-expert weight once per
 * step whatever the batch, plus the routed experts the step's rows selected (a union:
 * rows that share an expert read it once), plus one embedding row per row. Prefill is
 * bound by arithmetic: 2 FLOPs per active parameter per token plus attention, whose
 * cost grows with the position. Counts are of the engine's weights as it runs them (its
 * formats, including any copy it made at load), not of the checkpoint file.
 */
#ifndef DSV4_BENCH_BENCH_MODEL_H
#define DSV4_BENCH_BENCH_MODEL_H

#include <stdint.h>

#include "dsv4.h"
#include "model/config.h"

/* Weight bytes of the pieces of a step of the main model, and of the MTP block (block 0,
 * run by a speculative step after the verify, serving.md §e). */
typedef struct dsv4_step_weights {
    int n_layers;         /* L: main layers */
    int n_experts;        /* E */
    int top_k;            /* K */
    int64_t global;       /* head, final norm, hc_head: read once per step */
    int64_t embed_row;    /* one embedding row: read once per row */
    int64_t *layer_fixed; /* (L) attention, compressors, indexer, norms, hc, router and
                           * shared expert: read once per step; the compressor's ape counts
                           * one row (a step of one row reads one) */
    int64_t *ape_row;     /* (L) bytes of one ape row (main + indexer compressor), per
                           * further row of a step at another position mod r */
    int64_t *expert;      /* (L, E) routed expert e of layer l: w1 + w3 + w2 with scales */
    int64_t head;         /* the LM head matrix alone (part of global): what a second head
                           * call, the MTP draft's, reads again */
    int has_mtp;          /* the checkpoint has MTP block 0 */
    int64_t mtp_fixed;    /* its block (attention, norms, hc, router, shared expert), e_proj,
                           * h_proj, enorm, hnorm, norm and hc_head: read once per MTP call */
    int64_t *mtp_expert;  /* (E) its routed experts */
} dsv4_step_weights;

/* Sizes from an engine's blocks. On failure w is left empty (safe to free). */
int dsv4_step_weights_init(const dsv4_engine *e, dsv4_step_weights *w, dsv4_err *err);
void dsv4_step_weights_free(dsv4_step_weights *w);

/* Bytes of a step of n_rows rows whose routed experts are marked in used (L, E): nonzero
 * = selected by at least one row. ape rows are counted as min(n_rows, r) (rows of a step
 * at distinct positions mod r; exact for decode batches of equal-length sequences only
 * as an upper bound, and they are a small part). */
double dsv4_step_weights_bytes(const dsv4_step_weights *w, const dsv4_config *c, int n_rows,
                               const uint8_t *used);

/* Bytes of an MTP call of n_rows rows (one embedding row each) whose routed experts are
 * marked in used (E), without the head (the caller adds w->head for the draft logits). */
double dsv4_mtp_weights_bytes(const dsv4_step_weights *w, int n_rows, const uint8_t *used);

/* Expected distinct experts per layer when n_rows rows each pick K of E uniformly at
 * random and independently: E (1 - (1 - K/E)^n). */
double dsv4_expected_distinct_experts(int n_experts, int top_k, int n_rows);

/* Bytes of a step with that expected number of experts of each layer's average size. */
double dsv4_step_weights_expected(const dsv4_step_weights *w, const dsv4_config *c, int n_rows);

/* Useful FLOPs of the main model over positions [start, start + n) of one sequence:
 * 2 per active parameter per row (every weight a row uses, routed experts K of E; the
 * embedding lookup and the LM head excluded) plus attention: per row at position t and
 * layer of ratio r, 4 H hd per key over min(t+1, win) window rows and the compressed
 * entries it attends (HCA: (t+1)/r; CSA: min(topk, (t+1)/4)), and for CSA the indexer's
 * 2 nI dI per candidate entry ((t+1)/4 of them) where it scores them: only past topk
 * entries (fewer are all kept unscored). Compressor pooling, norms, RoPE,
 * softmax and hc mixing other than its matrices are not counted. */
double dsv4_forward_flops(const dsv4_config *c, int64_t start, int64_t n);

/* FLOPs of the LM head for n_rows rows: 2 V D each. */
double dsv4_head_flops(const dsv4_config *c, int n_rows);

/* The part of dsv4_forward_flops that does not depend on the position: 2 x active
 * parameters (no embedding, no head). */
double dsv4_linear_flops_per_token(const dsv4_config *c);

/* Cache bytes one decode row at position t (t previous positions cached) reads, with rows
 * stored as kv_dtype (DSV4_KV_*): window rows, the attended compressed entries, and for CSA
 * every indexer key it scores (all of them past topk entries, none before). An estimate from
 * the geometry (compressor state not counted). */
double dsv4_decode_cache_bytes(const dsv4_config *c, int64_t t, int kv_dtype);

/* The routed experts a row of layer `layer` selects, recomputed outside the forward from
 * the hc streams after that layer's attention sub-block (what the engine's trace hook
 * passes with kind 0) with the engine's own functions: hc_pre and RMSNorm of the FFN
 * sub-block, then the router (dsv4_moe_gate, the batched path the forward uses).
 * streams (n_rows, hc, D), tokens (n_rows); sel (n_rows, K). */
int dsv4_route_from_streams(dsv4_engine *e, int layer, const float *streams,
                            const int32_t *tokens, int n_rows, int *sel, dsv4_err *err);

#endif
