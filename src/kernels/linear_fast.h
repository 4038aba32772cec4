/* linear_fast.h — internal: the tiled, threaded kernels behind dsv4_linear.
 *
 * Arithmetic contract (what makes results reproducible). For every output y[s, o]:
 *   - each weight is dequantized exactly as dsv4_mat_row does it (same float value);
 *     FP8 e4m3 NaN codes 0x7F/0xFF are NaN at every level (an output whose weight row
 *     holds one is NaN; which NaN, its sign and payload, is unspecified);
 *   - products are summed in L lanes, lane l taking columns i = L*c + l in ascending chunk
 *     c, the last chunk zero-padded; then the lanes are added in a fixed tree. L = 8 at
 *     the portable and AVX2 levels, tree ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7));
 *     L = 16 at the AVX-512 level, first l + (l + 8) for l < 8, then the same 8-lane tree.
 * The AVX2 and AVX-512 levels accumulate with fused multiply-add, the portable level with
 * a rounded multiply then add, so the three levels differ in the last bits; within a
 * level the value depends on nothing else: not the thread count, not the tiling, not
 * n_rows, not which other rows share the call (batch invariance), not GEMV vs GEMM.
 *
 * GEMM tiling: a task owns LIN_NB consecutive outputs and a block of up to LIN_MB activation
 * rows. For each LIN_KB-column tile it dequantizes its LIN_NB x LIN_KB weight tile once into
 * per-thread F32 scratch, then runs a register-blocked micro-kernel over (micro_outs tile
 * rows) x (all rows of the block), the tile rows outermost so that they stay in L1 while the
 * block's x rows stream from L2; the lane accumulators live in per-thread scratch between
 * column tiles, so tiling never changes the summation order.
 */
#ifndef DSV4_KERNELS_LINEAR_FAST_H
#define DSV4_KERNELS_LINEAR_FAST_H

#include <stdint.h>

#include "kernels/linear.h"

/* outputs per GEMM task: a multiple of 16 (the AVX-512 lane reduction takes 16 outputs) and
 * of every level's micro_outs (4, 6) */
#define LIN_NB 48
#define LIN_KB 512 /* columns per dequantized tile: a multiple of 128 (FP8 scale blocks) */
/* activation rows per GEMM task and accumulator block (a multiple of 4 and 3). On Zen 5 at
 * 2 threads, 48 against 96 (accumulators 147 KB instead of 295 KB, the x block 96 KB
 * instead of 192 at K = 512: a task's L2 set halved) took 0.83-0.90x the time of 512-row
 * FP8 products (wq_b, wkv, wo_b, w2), in-process; at one thread 1.05-1.08x (twice the tile
 * dequantizations), but the prefill runs two */
#define LIN_MB 48
/* column tiles a GEMM task keeps dequantized in its scratch (its panel): a product of
 * cols <= LIN_PANEL_TILES * LIN_KB dequantizes each tile once a task, in its first row
 * block, and the task's later blocks reuse it; wider products once per block */
#ifndef LIN_PANEL_TILES
#define LIN_PANEL_TILES 4
#endif
/* rows a GEMM task takes when its panel holds every column tile: its blocks of LIN_MB rows
 * share the panel, dequantized once (a multiple of LIN_MB) */
#define LIN_MB_PANEL (4 * LIN_MB)
/* most outputs per GEMV and small-M task (a multiple of 4). A task's weights start cold:
 * on Zen 5 a batch-16 step's expert phase (bench_linear --threads 2 --moe --rows 16, FP4
 * w1/w3 of 512 x 1024, w2 of 1024 x 512) took 3.7-4.0 ms a layer at 64 (tasks of 16-32 KB),
 * 2.9-3.4 at 128, 2.7-3.1 at 256, 2.5-2.9 at 512, six alternated rounds; the single decode
 * matrices at 1 and 16 rows were the same or faster at 256 (wq_b 8192 x 256 at one row
 * 0.7x the time), a few slower at 512 (too few tasks) */
#define LIN_GEMV_NB 256
/* ... except a one-activation-row GEMV task (batch-1 decode), which may take up to this many
 * bytes of weights when LIN_GEMV_NB rows are fewer: its 4 far runs (linear_avx512*.c gemv1_*)
 * then read as long streams as the planner's 2 tasks a thread allow. Zen 5, bench_linear
 * --threads 2 --decode --rows 1, in process: wq_b 8192 x 256 (2048 rows a task, not 256) FP8
 * 0.86-0.88x the time, BF16 0.87x; the tasks of 512 KB that LIN_GEMV_NB rows give already
 * at 2 KB rows (the LM head, flash.w2) gained nothing past it, and flash.w2 FP8 lost 1.11x at
 * 1 MB (BENCHMARKS.md, session 19 runs) */
#define LIN_GEMV1_TASK_BYTES (512 * 1024)
#define LIN_GEMV_MAX_ROWS 16 /* no level takes the GEMV path for more rows (tests cover the edge) */
#define LIN_SMALLM_MAX_ROWS 64 /* no level takes the small-M path for more rows */
/* Past 32 rows the small-M path is taken only while x, read once per panel of weight rows,
 * stays in L2: (n_rows, cols) within this many floats (256 KB). The prefill's routed
 * experts (FP4 512x1024 and 1024x512, 33-96 rows) ran 0.76-1.53x the tile GEMM there, 1.0-1.44x
 * on most (one thread; bench_linear --experts, BENCHMARKS.md "Session 7: prefill GEMM"). */
#define LIN_SMALLM_BIG_X_FLOATS (64 * 1024)
#define LIN_SMALLM_NB 8 /* most weight rows a small-M kernel decodes together (its panel) */

/* Per-thread scratch of the GEMM path, in floats. */
#define LIN_SCRATCH_WTILE ((int64_t)LIN_NB * LIN_KB)         /* (LIN_NB, LIN_KB) weights */
#define LIN_LANES_MAX 16 /* accumulator lanes of the widest level */
/* (LIN_SCRATCH_ACC_ROWS, LIN_NB, lanes): room for LIN_MB rows, kept at 96 when LIN_MB went
 * to 48 because the small-M panel shares the scratch (LIN_SMALLM_NB x cols must fit
 * LIN_SCRATCH_FLOATS: the widest rows that take small-M) */
#define LIN_SCRATCH_ACC_ROWS 96
_Static_assert(LIN_SCRATCH_ACC_ROWS >= LIN_MB, "the accumulator block must fit the scratch");
#define LIN_SCRATCH_ACC ((int64_t)LIN_SCRATCH_ACC_ROWS * LIN_NB * LIN_LANES_MAX)
/* what the small-M kernels' panel path may use of a thread's scratch (its panel and lanes);
 * level avx512vbmi's FP8 bit decode (linear_avx512_vbmi_smallm.c) prescales x into all of it
 * (LIN_SCRATCH_GEMM_FLOATS), between its uses of the panel path */
#define LIN_SCRATCH_FLOATS (LIN_SCRATCH_WTILE + LIN_SCRATCH_ACC)
/* a thread's scratch: the GEMM's lanes then its panel of LIN_PANEL_TILES tiles */
#define LIN_SCRATCH_GEMM_FLOATS (LIN_SCRATCH_ACC + LIN_PANEL_TILES * LIN_SCRATCH_WTILE)
_Static_assert(LIN_SCRATCH_GEMM_FLOATS >= LIN_SCRATCH_FLOATS, "small-M's scratch within the thread's");

/* Read-only tables built once per kernel context (dsv4_lin_tables_init). */
typedef struct dsv4_lin_tables {
    /* FP4 decode table per ue8m0 scale byte b: bits(e2m1 magnitude k * 2^(b-127)) ^ (k << 28),
     * k = 0..7 (the AVX2 decoder's layout, see linear_avx2.c) */
    uint32_t fp4[256][8];
    /* FP4 decode table per ue8m0 scale byte b: e2m1 code k * 2^(b-127) for all 16 codes
     * (signed; the AVX-512 decoder's vpermps table) */
    _Alignas(64) float fp4x16[256][16];
    float e4m3[256]; /* dsv4_e4m3_to_f32 of every byte (the portable level's FP8 decode) */
    /* BF16 bits of e4m3 magnitude code m = 0..127 (exact: 4 significant bits, normal
     * exponents), high bytes then low bytes; code 127 is a NaN (the AVX-512 VBMI decoder's
     * vpermi2b tables, linear_avx512.h) */
    _Alignas(64) uint8_t e4m3_bf16_hi[128];
    _Alignas(64) uint8_t e4m3_bf16_lo[128];
    /* FP4B (the shuffle layout, fp4_shuf.h) decode tables per ue8m0 scale byte b: the low
     * bytes of the 16 codes' BF16 values, then the high bytes (dsv4_fp4s_tables; the AVX2
     * vpshufb decoder, linear_avx2.h) */
    _Alignas(32) uint8_t fp4s[256][32];
    /* F32 subnormal FMA operands run at full speed: AMD cores (Intel cores take a microcode
     * assist per such FMA), so the one-row FP8 GEMV may decode e4m3 by bit shifts
     * (linear_avx512_vbmi.c); the bits are the same either way */
    int subnormal_fma_fast;
} dsv4_lin_tables;

void dsv4_lin_tables_init(dsv4_lin_tables *t);

/* The smallest and largest ue8m0 scale byte of an FP8 matrix's block grid (rows/128 x
 * cols/128 bytes): what the levels' fp8_prescale tests need of the weights. */
void dsv4_lin_ue8m0_range(const dsv4_mat *w, int *bmin, int *bmax);

/* What one dsv4_linear call passes its kernels besides the operands. */
typedef struct dsv4_lin_call {
    const dsv4_lin_tables *tab;
    /* FP8 GEMV with ue8m0 scales: x[i] times the level's factor (AVX2: 2^120 * scale;
     * avx512vbmi, one activation row: scale) is exact for every x and scale of the call (a
     * power of two, no result outside the normal range), so the kernel may scale x once per
     * block instead of every weight and still produce the same bits. */
    int fp8_prescale;
    /* GEMM: floats from one activation row of x to the next, and of y (the product's cols
     * and rows when dense; larger for column slices of wider arrays) */
    int64_t ldx, ldy;
    /* not 0 (small-M plans): a number of this op's plan, new at every plan (dsv4_kctx_lin_job), and the
     * scratch a kernel gets is dsv4_kctx_lin_scratch's, with the thread's dsv4_lin_xs_key
     * below it; 0 (a kernel called on its own scratch): no key */
    uint64_t job;
} dsv4_lin_call;

/* What a thread's lin scratch holds from the small-M FP8 bit decode (smallm_fp8_bits in
 * linear_avx512_vbmi_smallm.c): x scaled for scale band `band` of plan `job`, or nothing
 * (job 0). It lies in the LIN_SCRATCH_KEY_FLOATS just below the thread's lin scratch, which
 * no kernel writes; a task of another plan clears it (lin_task) before it can use the
 * scratch, so a task that goes on in the band of the thread's previous task of the same
 * plan finds x scaled and skips the pass over x (16 x 2048 floats at batch 16's wo_b,
 * ~1.3-2.5 us: tasks of 64 rows split each 128-row band in two; BENCHMARKS.md, session 24
 * gap16). */
typedef struct dsv4_lin_xs_key {
    uint64_t job;
    int64_t band;
} dsv4_lin_xs_key;
#define LIN_SCRATCH_KEY_FLOATS 16 /* 64 bytes: the scratch after it stays on a 64-byte line */
_Static_assert(sizeof(dsv4_lin_xs_key) <= LIN_SCRATCH_KEY_FLOATS * sizeof(float), "the key fits below the scratch");

/* One level's kernels. gemv: y[s, o] for o in [o0, o1) and the n_rows <= gemv_rows
 * activation rows, weights decoded in registers; NULL means the level runs everything
 * through gemm. gemm: outputs [o0, min(o0 + LIN_NB, rows)) for all n_rows rows (the driver
 * passes blocks of up to LIN_MB rows); scratch: LIN_SCRATCH_GEMM_FLOATS floats, 64-byte aligned. */
typedef struct dsv4_lin_kernels {
    int gemv_rows;     /* activation rows one gemv call takes (its registers) */
    int gemv_max_rows; /* calls of up to this many rows (<= LIN_GEMV_MAX_ROWS) take the GEMV
                        * path, in passes of gemv_rows; more rows take the GEMM */
    int gemv_max_rows_fp8; /* the same for FP8 weights (their in-register decode costs more) */
    void (*gemv)(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y, int64_t o0,
                 int64_t o1);
    void (*gemm)(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y, int64_t o0,
                 float *scratch);
    /* decides dsv4_lin_call.fp8_prescale for an FP8 GEMV (NULL: never) */
    int (*fp8_prescale)(const dsv4_mat *w, const float *x, int n_rows);
    /* small-M: calls of smallm_min_rows[w->fmt] .. LIN_SMALLM_MAX_ROWS rows (0: never) decode
     * each weight once per call, LIN_SMALLM_NB weight rows at a time into a panel of scratch
     * (LIN_SMALLM_NB x cols rounded up to 16, plus 16 floats to align it: the driver checks
     * that it fits LIN_SCRATCH_FLOATS), and run every activation row against the panel;
     * outputs [o0, o1), o0 a multiple of 4. Same bits as the gemv. NULL: never. */
    int smallm_min_rows[DSV4_WF_FP4B + 1];
    void (*smallm)(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y, int64_t o0,
                   int64_t o1, float *scratch);
    /* the gemv reads DSV4_WF_FP4L (0: the driver plans every FP4L product of the level as a
     * GEMM, whose bits are the GEMV's: linear_fast.h's contract) */
    int gemv_fp4l;
    /* FP8 with ue8m0 scales where F32 subnormal FMA operands cost nothing
     * (dsv4_lin_tables.subnormal_fma_fast: AMD cores): calls of 2 .. smallm_min_rows[FP8] - 1
     * rows take the small-M path (its bit decode in registers) unless the rows have at least
     * fp8_few_gemv_cols columns and the call at most fp8_few_gemv_rows rows (the GEMV's own
     * few-row bit decode, linear_avx512_vbmi.c gemvn_fp8v); 0: the thresholds above alone */
    int fp8_few_smallm;
    int fp8_few_gemv_cols, fp8_few_gemv_rows;
    /* BF16 calls of exactly 8 rows on matrices of at least this many weight rows (the LM head)
     * take the GEMV (its far runs in two groups of 4, linear_avx512.c gemvn_dense) where
     * smallm_min_rows[BF16] would send them to small-M; 0: the thresholds above alone */
    int bf16_gemv8_min_rows;
    /* the gemv reads DSV4_WF_FP4B with ue8m0 scales (0, and for F32 scales: every FP4B product
     * of the level planned as a GEMM, as gemv_fp4l; only level avx2 reads it, the one the
     * engine gives the layout) */
    int gemv_fp4b;
} dsv4_lin_kernels;

const dsv4_lin_kernels *dsv4_lin_kernels_scalar(void);
const dsv4_lin_kernels *dsv4_lin_kernels_avx2(void);   /* NULL when not compiled in */
const dsv4_lin_kernels *dsv4_lin_kernels_avx512(void); /* NULL when not compiled in */
const dsv4_lin_kernels *dsv4_lin_kernels_avx512vbmi(void); /* NULL when not compiled in */

/* The arithmetic of one level's GEMM tiles, for the shared driver (linear_tile.c).
 * dequant_row: row o, columns [k0, k0 + kb) exactly dequantized into dst, zero-padded to
 * a multiple of lanes. micro[rt - 1]: rt (<= micro_rows <= 4) activation rows x micro_outs
 * tile rows: x is row 0 at column k0 (row stride ldx), wt the first of the tile rows
 * (stride LIN_KB), acc the (rt, LIN_NB, lanes) window of the accumulators; adds columns
 * [0, kb) into the lanes in ascending chunks (linear_fast.h's contract), the last chunk's x
 * zero-padded, starting from zero lanes instead of acc when init is set (the first column
 * tile: the same sums, no clearing pass). reduce_row: y[j] = the lanes of acc + j * lanes
 * in the level's fixed tree, j < nb <= 16 (one activation row's outputs: one indirect call
 * per row and 16 outputs, the tree inlined). */
typedef void (*dsv4_lin_micro_fn)(const float *x, int64_t ldx, const float *wt, int kb, float *acc, int init);
/* micro[micro_rows - 1] on a row's last column tile, the lanes reduced in registers instead
 * of stored for reduce_row: the same sums and tree, so the same bits. y: the window's first
 * output of row 0 (row stride ldy); nv (1 .. micro_outs): the outputs stored a row. */
typedef void (*dsv4_lin_micro_last_fn)(const float *x, int64_t ldx, const float *wt, int kb, const float *acc,
                                       int init, float *y, int64_t ldy, int nv);
typedef struct dsv4_lin_tile_level {
    int lanes;      /* 8 or 16 (<= LIN_LANES_MAX) */
    int micro_rows; /* activation rows of the largest micro-kernel */
    int micro_outs; /* tile rows (outputs) of every micro-kernel: 4 or 6 */
    void (*dequant_row)(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb, float *dst);
    dsv4_lin_micro_fn micro[4];
    void (*reduce_row)(const float *acc, int nb, float *y);
    dsv4_lin_micro_last_fn micro_last; /* NULL: every row through reduce_row */
    /* dequant_row reads DSV4_WF_FP4L (0: the driver dequantizes FP4L rows with
     * dsv4_lin_dequant_fp4l instead: the same values, so the same bits) */
    int dequant_fp4l;
    /* dequant_row reads DSV4_WF_FP4B (0: dsv4_lin_dequant_fp4b instead, the same values) */
    int dequant_fp4b;
} dsv4_lin_tile_level;

/* Outputs [o0, min(o0 + LIN_NB, rows)) for all n_rows rows (at most LIN_MB when called by
 * dsv4_linear), x and y rows c->ldx and c->ldy floats apart: a level's gemm. */
void dsv4_lin_gemm_tiled(const dsv4_lin_tile_level *lv, const dsv4_lin_call *c, const dsv4_mat *w, const float *x,
                         int n_rows, float *y, int64_t o0, float *scratch);

/* The zero-padded chunk of 8 dequantized weights of row o starting at column i (a
 * multiple of 8): exact values, zeros past the last column. Shared by every level (the
 * wide decoders' fallback for scales they cannot prescale and blocks with FP8 NaN codes)
 * so the dequantized values agree by construction. */
void dsv4_lin_dequant8(const dsv4_mat *w, int64_t o, int64_t i, float out[8]);

/* dequant_row of any level for a DSV4_WF_FP4L matrix (portable C, a 128-column line at a
 * time): row o, columns [k0, k0 + kb) into dst, k0 and kb multiples of 128. The tile driver
 * uses it at the levels whose dequant_row does not read the layout. */
void dsv4_lin_dequant_fp4l(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb,
                           float *dst);

/* The same for a DSV4_WF_FP4B matrix (the shuffle layout, fp4_shuf.h): k0 and kb multiples of
 * 64. */
void dsv4_lin_dequant_fp4b(const dsv4_lin_tables *tab, const dsv4_mat *w, int64_t o, int64_t k0, int kb,
                           float *dst);

/* The kernel context's per-thread tile scratch and tables for dsv4_linear (kctx.c). */
struct dsv4_kctx;
/* The path (dsv4_lin_path, kctx.h) dsv4_linear plans for n_rows dense rows of w on k, at its
 * level and forced path: for the tests of the levels' row thresholds. */
int dsv4_linear_path_of(struct dsv4_kctx *k, const dsv4_mat *w, int n_rows);
/* Outputs a task takes of a GEMV (gemv 1) or small-M product of w at n_rows rows: all of
 * them at target_macs 0 (one task), else about target_macs multiply-adds in 4..LIN_GEMV_NB
 * outputs (a multiple of 4; a one-row GEMV up to LIN_GEMV1_TASK_BYTES of weights where that
 * is more), except that an FP4 GEMV of at most whole_elems weights is one task (the
 * planner's rule, exposed for its tests) */
int64_t dsv4_lin_gemv_per(const dsv4_mat *w, int n_rows, int gemv, int64_t target_macs, int64_t whole_elems);
/* The tasks dsv4_linear_batch plans for ops[0..n_ops) (at most 64 products, dense rows) on k;
 * trivial products are done as it would (for the planner's tests) */
struct dsv4_lin_op;
int dsv4_lin_job_tasks(struct dsv4_kctx *k, const struct dsv4_lin_op *ops, int n_ops);
float *dsv4_kctx_lin_scratch(struct dsv4_kctx *k, int tid);
/* a new number for a plan's dsv4_lin_call.job (never 0; any thread) */
uint64_t dsv4_kctx_lin_job(struct dsv4_kctx *k);
const dsv4_lin_tables *dsv4_kctx_lin_tables(const struct dsv4_kctx *k);

#endif
