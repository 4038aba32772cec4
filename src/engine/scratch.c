/* scratch.c — the engine's scratch plan: the most bytes any call takes from its arena at
 * the engine's limits (opts.max_rows rows in at most max_seqs spans, positions below
 * max_context), so that the arena made at create is the only allocation of the forward.
 *
 * A call holds its own buffers (forward or MTP), one block's, and one sub-block's
 * (attention of the layer's compress ratio, or MoE) at a time. Every module measures its
 * own part by running the function that carves it on a measuring arena (util/arena.h).
 */
#include "dist/ep.h"
#include "engine/engine.h"
#include "engine/forward_cp.h"
#include "engine/lmhead.h"
#include "moe/moe.h"

static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }

size_t dsv4_scratch_plan_bytes(const dsv4_config *c, const dsv4_engine_opts *o, int threads) {
    /* spans: one per sequence, or the two segments of a CP prefill */
    const int R = o->max_rows, S_all = o->max_seqs > 2 ? o->max_seqs : 2, S = S_all < R ? S_all : R;
    const int64_t max_pos = o->max_context + 1;
    const int n_blocks = c->num_hidden_layers + c->num_nextn_predict_layers;
    size_t sub = maxz(dsv4_moe_scratch_bytes(c, R), dsv4_ep_scratch_bytes(c, R)); /* local or EP MoE */
    int row_fmt, key_fmt; /* KV storage: other formats than F32 are unpacked per thread */
    dsv4_err ignored;
    if (dsv4_kv_dtype_codes(o->kv_dtype, &row_fmt, &key_fmt, &ignored)) row_fmt = key_fmt = 0;
    for (int l = 0; l < n_blocks; l++) {
        const int r = dsv4_cfg_ratio(c, l);
        int seen = 0;
        for (int j = 0; j < l && !seen; j++) seen = dsv4_cfg_ratio(c, j) == r;
        if (!seen) sub = maxz(sub, dsv4_attn_scratch_bytes(c, r, R, S, max_pos, threads, row_fmt, key_fmt));
    }
    const int P = o->parallel && o->dist ? dsv4_dist_size(o->dist) : 1;
    size_t held; /* what a forward holds while its CP prefills run (under DP) */
    size_t call = maxz(dsv4_forward_scratch_bytes(c, R, S, &held), o->mtp ? dsv4_mtp_scratch_bytes(c, R, S) : 0);
    size_t after = 0; /* a CP prefill's output gather, after its blocks */
    if ((o->parallel & DSV4_PAR_CP) && P > 1) {
        size_t outputs;
        const size_t cp = held + dsv4_forward_cp_scratch_bytes(c, P, R, o->max_context, &outputs);
        call = maxz(call, cp);
        after = cp + outputs;
    }
    /* a head call runs alone: it needs the arena, not more of it */
    return maxz(maxz(call + dsv4_block_scratch_bytes(c, R) + sub, after),
                dsv4_lmhead_scratch_bytes(c->vocab_size, c->hidden_size, P));
}

size_t dsv4_engine_scratch_bytes(const dsv4_engine *e) {
    return dsv4_scratch_plan_bytes(e->cfg, &e->opts, dsv4_kctx_threads(e->k));
}
