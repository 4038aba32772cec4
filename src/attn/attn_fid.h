/* attn_fid.h — the attention-side roundings of fidelity mode P3 (spec/model.md §6), each a
 * no-op when its item is off in the kernel context (dsv4_kctx_fidelity): the call sites in
 * attention.c and compressor.c are one line each. */
#ifndef DSV4_ATTN_ATTN_FID_H
#define DSV4_ATTN_ATTN_FID_H

#include "attn/attention.h"

/* End of the projection phase, per row (before any row is shared with the cache or another
 * rank): F2 the window row (nope FP8 per 64, rope BF16), F4 q and kv after RoPE to BF16,
 * F3 each indexer head of qI rotated by H/sqrt(dI) and FP4-rounded per 32. */
void dsv4_fid_attn_rows(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, dsv4_attn_work *w);

/* F4: the pooled compressor value (d) rounded to BF16 before its norm. */
void dsv4_fid_pooled(const dsv4_attn_ctx *ctx, float *p, int d);
/* F4: an RMSNorm output (q head norm, kv_norm, compressor norm) rounded to BF16 before RoPE. */
void dsv4_fid_norm_out(const dsv4_attn_ctx *ctx, float *x, int n);

/* A finished compressed entry (after norm and RoPE): main (indexer = 0) under F2 gets the KV
 * row rule; an indexer key (indexer = 1) under F3 the rotation and FP4 rule. */
void dsv4_fid_entry(const dsv4_attn_ctx *ctx, int indexer, float *entry, int d);

#endif
