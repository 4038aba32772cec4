/* engine.h — internals of dsv4_engine: the model's blocks as the engine runs them, the
 * kernel context, the cache pools, the RoPE tables and per-sequence counters. */
#ifndef DSV4_ENGINE_ENGINE_H
#define DSV4_ENGINE_ENGINE_H

#include "attn/attention.h"
#include "attn/batch.h"
#include "attn/rope.h"
#include "cache/cache.h"
#include "kernels/kctx.h"
#include "model/model.h"
#include "model/numerics.h"
#include "moe/moe.h"
#include "util/arena.h"

typedef struct dsv4_seq_state {
    int live;
    int64_t n;   /* committed main positions */
    int64_t m;   /* MTP positions consumed */
    int pending; /* rows of a speculative span awaiting dsv4_seq_commit, 0 = none */
    int mtp_off; /* its MTP rows will not run (dsv4_seq_mtp_off) */
    int broken;  /* a call failed after writing into its cache (only out of memory can do
                  * that): the state is no longer trustworthy and the sequence must be freed */
} dsv4_seq_state;

struct dsv4_engine {
    const dsv4_model *model;
    const dsv4_config *cfg;
    dsv4_engine_opts opts;           /* defaults filled in */
    dsv4_kctx *k;
    const dsv4_numerics *num;        /* the numeric path chosen at create (model/numerics.h):
                                      * exact, W8A8 (opts.w8a8) or fidelity (opts.fidelity) */
    dsv4_numerics *num_owned;        /* the fidelity mode's, freed with the engine */
    dsv4_cache *cache;
    dsv4_rope rope_main;             /* rope_theta, no YaRN */
    dsv4_rope rope_cmp;              /* compress_rope_theta, YaRN */
    dsv4_block_w *blocks;            /* (n_layers + n_mtp) shallow copies of the model's */
    int moe_checked;                 /* 1: every block's routed experts passed
                                      * dsv4_moe_check_experts at create (the blocks do not
                                      * change after it), so the MoE calls check only the
                                      * shared matrices (dsv4_moe_forward_checked); 0: every
                                      * call checks them all, and reports a bad one */
    void **owned;                    /* memory the engine made at create (dequantized matrices,
                                      * INT8 weights): dsv4_engine_own */
    int n_owned;
    dsv4_seq_state *seqs;            /* (max_seqs) indexed by cache slot */
    dsv4_arena scratch;              /* every buffer of a forward, MTP or head call, sized at
                                      * create for opts.max_rows rows (engine/scratch.c) */
    dsv4_trace_fn trace;
    void *trace_user;
    float *trace_gather;             /* CP home rank while a trace hook is set: (max_rows, hc, D),
                                      * every rank's rows gathered for the hook; made when the
                                      * hook is set, so no call allocates and engines without a
                                      * hook do not carry it in their arena */
    dsv4_choice_fn choice;           /* optional report of routing and CSA selections */
    void *choice_user;
    /* scale-out (spec/serving.md §c, §d): SPMD, every rank makes the same calls */
    struct dsv4_sha256 *call_hash;   /* a group's digest of every call's spans (agree.c), made
                                      * at create and reset per call */
    struct dsv4_dist *group;         /* the process group when opts.parallel spans more than
                                      * one rank, else NULL (single process) */
    int rank;                        /* rank in group, 0 without one */
    int idle;                        /* 1 on a non-home rank of a group: it holds no rows of
                                      * non-CP spans and no caches for them, and only walks
                                      * the layers to take part in the MoE collectives */
    int dp;                          /* 1 in a group with DSV4_PAR_DP: every rank is the home
                                      * rank of its own sequences (no rank idle); the ranks
                                      * agree per call on its kind and status and, under
                                      * DSV4_PAR_CP, on each rank's CP span (not its others) */
    int32_t *dp_share;               /* under DP: (size, DSV4_DP_SHARE_N) the last call's
                                      * agreement, every rank's kind and CP span (agree.c);
                                      * made at create */
    int dp_head;                     /* 1 with DSV4_PAR_DP_HEAD: the DP group's head calls are
                                      * collective, sharded over the vocabulary (lmhead_dp.c) */
    struct dsv4_ep *ep;              /* expert-parallel exchange (DSV4_PAR_EP), else NULL */
    struct dsv4_prefix_cache *prefix; /* snapshots and the prefix cache (prefix.c) */
    int numa_nodes;                  /* memory nodes seen at create (opts.numa is the decision) */
    int64_t fp4_lanes, fp4_natural;  /* FP4 matrices of the blocks in each layout (fp4_layout.c) */
    int64_t cp_prefills;             /* CP prefills this rank was the home of, completed
                                      * (dsv4_engine_cp_prefills) */
    struct dsv4_cp_stats *cp_stats;  /* optional, caller-owned: CP prefill timings add up
                                      * here (engine/forward_cp.h; benchmarks), else NULL */
    dsv4_attn_stats *attn_stats;     /* optional, caller-owned: what the single-process
                                      * attention sub-blocks computed (tests), else NULL */
    int64_t idx_paths[DSV4_IDX_PATHS]; /* rows each indexer path scored (dsv4_engine_indexer_stats) */
    double route_tab[2 * DSV4_MOE_TAB_N]; /* the router's bounds on a fixed grid
                                           * (dsv4_moe_bound_table), shared by every block; last,
                                           * so that its 32 KB leave the other fields' offsets short */
};

/* Scratch bytes of the calls' own buffers for R rows in n_spans spans (forward.c, mtp.c;
 * *held: the part a forward holds while its CP prefills run, under DP) and of one block's
 * (forward.c); the sub-blocks' come on top (engine/scratch.c). */
size_t dsv4_forward_scratch_bytes(const dsv4_config *c, int R, int n_spans, size_t *held);
size_t dsv4_mtp_scratch_bytes(const dsv4_config *c, int R, int n_spans);
size_t dsv4_block_scratch_bytes(const dsv4_config *c, int R); /* block.c */
/* The most bytes any call takes from e->scratch at e->opts' limits. */
size_t dsv4_engine_scratch_bytes(const dsv4_engine *e);
/* The same before there is an engine (the memory fit): options resolved
 * (dsv4_engine_opts_resolve), threads as the kernel context will have them. */
size_t dsv4_scratch_plan_bytes(const dsv4_config *c, const dsv4_engine_opts *o, int threads);

/* How a block's attention sub-block runs: y (R, D) from x (R, D) for the batch's rows,
 * with the cache writes it owes (a failure must already have been reported to the group
 * where one waits); with a query subset q_rows (n_q ascending rows, NULL = all) every row
 * still writes the cache but only those attend, y (n_q, D). And the trace of the streams
 * h (R, hc, D) after sub-block sub (called only with e->trace set). */
typedef struct dsv4_block_step {
    int (*attention)(void *u, const dsv4_block_w *b, const dsv4_batch *batch, const int *q_rows,
                     int n_q, const float *x, float *y, dsv4_err *err);
    int (*trace)(void *u, const dsv4_block_w *b, const dsv4_batch *batch, int sub,
                 const float *h, dsv4_err *err);
    void *u;
} dsv4_block_step;

/* The single-process step: dsv4_attention against e's cache (CSA choices to the choice
 * hook), streams to the trace hook row by row. */
dsv4_block_step dsv4_engine_local_step(dsv4_engine *e);

/* One block (hc_pre → attention → hc_post → hc_pre → MoE → hc_post, engine/block.c) over
 * the batch; h (R, hc, D) is updated in place. Used for main layers, the MTP block and
 * the CP prefill, which differ only in the attention step. */
int dsv4_engine_block(dsv4_engine *e, const dsv4_block_w *b, const dsv4_batch *batch,
                      const dsv4_block_step *step, float *h, dsv4_err *err);

/* The same with only some rows going on past the attention sub-block's cache writes:
 * keep[0 .. n_keep) (ascending row indices; NULL = all rows). Every cache write of a row
 * happens in the attention sub-block, before its heads attend, so the other rows are
 * complete there: only the kept rows attend (the step's query subset), h is compacted to
 * them (row i of the result is row keep[i]) and the MoE sub-block runs on them alone.
 * A kept row's streams are bitwise those of the full block (every step is per row). For
 * the MTP block, whose other rows only fill its caches. */
int dsv4_engine_block_keep(dsv4_engine *e, const dsv4_block_w *b, const dsv4_batch *batch,
                           const dsv4_block_step *step, float *h, const int *keep, int n_keep,
                           dsv4_err *err);

/* The MoE sub-block of a batch, y (R, D) from x (R, D): local, or expert-parallel over the
 * process group, in which case every rank calls it for every MoE sub-block, also with zero
 * rows. */
int dsv4_engine_moe(dsv4_engine *e, const dsv4_block_w *b, const dsv4_batch *batch,
                    const float *x, float *y, dsv4_err *err);

/* Snapshots, restores, forks and KV loads need this rank to hold its sequences' caches
 * whole: one process, the home rank of an expert-parallel group, or any rank of a DP group
 * (not a follower, which holds no caches of non-CP spans, nor under context parallelism,
 * which spreads a long prompt's cache over the ranks). DSV4_OK, else DSV4_ERR_UNSUPPORTED
 * naming what (the call) and why. */
int dsv4_engine_need_caches(const dsv4_engine *e, const char *what, dsv4_err *err);

/* The MoE sub-blocks of blocks [l0, l1) with zero rows: a rank without rows of a call
 * still takes part in every expert-parallel exchange (no-op without EP). On a failure the
 * group agreed on, *changed says whether the failing rank had changed state (its
 * sequences are then broken, and this rank must mark them so too). */
int dsv4_engine_idle_layers(dsv4_engine *e, int l0, int l1, int *changed, dsv4_err *err);

/* A rank that failed before reaching the next MoE sub-block of a call reports the failure
 * there (clean: no state changed), so the other ranks return an error at the same point
 * instead of waiting for it; no-op without EP. Returns code. */
int dsv4_engine_fail_collective(dsv4_engine *e, int code, int clean);

/* Row j of a span's requested rows (rows NULL: the last n_wanted of its n_tokens). */
static inline int dsv4_wanted_row(const int *rows, int n_wanted, int n_tokens, int j) {
    return rows ? rows[j] : n_tokens - n_wanted + j;
}

/* Rank agreement (engine/agree.c), collective over e->group: at create, the config hash,
 * the weights fingerprint (sampled, or full with opts.verify_weights) and the options
 * that change results (kernel level included); per call, the spans (sequences, starts,
 * tokens, requested rows). rc is this rank's own status; the result is the same on every
 * rank (dist/dist.h dsv4_dist_agree). */
int dsv4_engine_agree_create(dsv4_engine *e, int rc, dsv4_err *err);
int dsv4_engine_agree_spans(dsv4_engine *e, int rc, const dsv4_span *spans, int n_spans, dsv4_err *err);
int dsv4_engine_agree_mtp(dsv4_engine *e, int rc, const dsv4_mtp_span *spans, int n_spans, dsv4_err *err);
/* Under DSV4_PAR_DP: every rank makes a call of the same kind (DSV4_DP_CALL_*: the MoE
 * exchanges it walks) and none refused it; each rank's spans are its own. One gather of
 * DSV4_DP_SHARE_N values a rank into e->dp_share: the kind and, under DSV4_PAR_CP, the
 * rank's CP span (cp: the span dsv4_cp_pick chose, validated, or NULL), which every rank
 * reads back with dsv4_engine_dp_cp; a kind that differs or a CP span no CP prefill of
 * this engine can run is the same error on every rank. */
enum { DSV4_DP_CALL_FORWARD = 1, DSV4_DP_CALL_MTP = 2 };
enum { DSV4_DP_SHARE_N = 7 }; /* kind, seq, start (low, high 32 bits), n_tokens, n_hidden, n_streams */
int dsv4_engine_agree_dp(dsv4_engine *e, int rc, int kind, const dsv4_span *cp, dsv4_err *err);
/* Rank r's CP span of the last agreed DP call (n_tokens 0: none); 0 when its values are
 * not a span this engine can run. */
typedef struct dsv4_dp_cp {
    int seq, n_tokens, n_hidden, n_streams;
    int64_t start;
} dsv4_dp_cp;
int dsv4_engine_dp_cp(const dsv4_engine *e, int r, dsv4_dp_cp *out);

/* Gives back the pages a refused call reserved for seqs[0 .. n) (those at or beyond each
 * sequence's length, dsv4_cache_truncate): the pools as before the call. */
void dsv4_engine_unreserve(dsv4_engine *e, const int *seqs, int n);
/* Frees window pages no later call of seq can read. */
void dsv4_engine_trim(dsv4_engine *e, int seq);
/* Takes p (malloc'd at create) into e->owned, freed with the engine; -1 when the list
 * cannot grow (p is then still the caller's). */
int dsv4_engine_own(dsv4_engine *e, void *p);

/* The defaults of dsv4_engine_opts filled in (max_context, max_seqs, c_max), and the cache
 * options the engine plans its pools with: engine create and the memory fit
 * (dsv4_mem_fit_*) size the same pools. */
void dsv4_engine_opts_resolve(dsv4_engine_opts *o);
/* kv_dtype.c: DSV4_KV_DEFAULT resolved; the planner's storage codes of a DSV4_KV_* value
 * (WIN/CMP rows, IDX keys: kernels/kv_rows.h), DSV4_ERR_ARG for an unknown one. */
int dsv4_kv_dtype_resolve(int dtype);
int dsv4_kv_dtype_codes(int dtype, int *row, int *idx, dsv4_err *err);
void dsv4_engine_cache_opts(const dsv4_engine_opts *o, dsv4_cache_opts *co);
/* numa.c: opts.numa resolved against the machine (AUTO, or any mode on one node, becomes
 * what is done) into e->opts.numa and e->numa_nodes; with INTERLEAVE the model's weights
 * are interleaved and the calling thread's memory policy is set so that the pool's workers,
 * started next, inherit it (*saved: the previous one, for dsv4_engine_numa_end, which
 * restores it; *restore says whether there is one). */
int dsv4_engine_numa_begin(dsv4_engine *e, void *saved, int *restore, dsv4_err *err);
void dsv4_engine_numa_end(const void *saved, int restore);
/* fp4_layout.c: opts.fp4_layout resolved (AUTO becomes what is done); with LANES every FP4
 * matrix of e->blocks whose width is a multiple of 128 (routed experts: this rank's) is
 * repacked into engine-owned memory (interleaved when opts.numa is) and bound as
 * DSV4_WF_FP4L. Runs after the W8A8 copies and before the fidelity mode, which knows the
 * weights by their storage. */
int dsv4_engine_prepare_fp4(dsv4_engine *e, dsv4_err *err);
/* What dsv4_engine_opts.fp4_layout = AUTO becomes: DSV4_FP4_COPY when copy_bytes (the layer
 * weights a COPY engine would own) plus other_bytes (its cache and scratch) plus the fit check's
 * headroom fit in `available` bytes (dsv4_machine_available_bytes) and the process has
 * nothing locked in memory (`locked`), else DSV4_FP4_NATURAL. Pure, for the tests. */
int dsv4_fp4_auto_layout(int64_t copy_bytes, int64_t other_bytes, uint64_t available, uint64_t ram,
                         uint64_t locked);
/* The layout AUTO's copy takes at kernel level simd (dsv4_simd): DSV4_FP4_LANES from
 * avx512vbmi up and at avx2 (where its kernels were measured at least as fast as the natural
 * ones), DSV4_FP4_COPY at avx512 and portable. Pure, for the tests. */
int dsv4_fp4_copy_layout(int simd);
/* The block's expert matrix arrays w1, w3, w2 (E each) copied to mem, (3, E) dsv4_mat, and the
 * block pointed at the copies: an engine that rebinds experts (W8A8, the FP4 layouts) must not
 * write into the model, which engines share. Returns the bytes used, rounded up to 64. */
int64_t dsv4_engine_own_expert_arrays(dsv4_block_w *b, void *mem, int E);

#endif
