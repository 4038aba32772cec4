/* linear_avx512_vbmi_smallm.c — level avx512vbmi's small-M kernels: 2..64 activation rows
 * (by format, avx512vbmi_kernels in linear_avx512_vbmi.c), each weight decoded once per call
 * or per block of rows: FP8 and FP4 through panels, FP4 at up to 24 rows and FP8 on AMD cores
 * in registers inside the FMA loop, BF16 and F32 in registers. Entry point
 * dsv4_lin_avx512vbmi_smallm (linear_avx512.h). */
#include "kernels/linear_avx512.h"

#include <assert.h>

#include "util/hot.h"

#ifdef DSV4_LIN_AVX512

/* ---- small-M (level avx512vbmi): 8..64 activation rows, each weight decoded once -------------
 * The GEMV decodes a weight in registers for at most 8 activation rows, so 16 rows took two
 * passes that decode every weight twice, and its 2 x 8 block of accumulators next to the
 * FP8 tables leaves GCC short of registers. Here a task's weight rows go in panels of
 * LIN_SMALLM_NB = 8 (4 for a task's last 1-4 rows): the panel is decoded once, by the GEMV's
 * own decoders (FP4: dec_fp4n, the GEMV's values in natural column order; the same exact
 * values, padding lanes included), into per-thread F32 scratch
 * (8, ld) that stays in L1/L2, and every activation row runs against it in blocks of 3
 * rows (the last 4 as 2 + 2: sm_block_rows), 8 x 3 accumulators in registers (4 x 4 for a 4-row panel) over all the columns:
 * chunks of 16 in ascending order, the last one's x zero-padded, then hsum16's tree. Those are linear_fast.h's lanes and order, so every
 * output is the GEMV's (and the GEMM's) bits, whichever rows share the call. */

#define SM_MR_MAX 4 /* activation rows of the largest register block */

/* multishift control of dec_fp4n: byte 4l (the low byte of dword l) takes bits 4l .. 4l + 7 */
#define SHN(l) 4 * (l), 0, 0, 0
static const _Alignas(64) uint8_t fp4n_ctl[64] = {SHN(0),  SHN(1),  SHN(2),  SHN(3),  SHN(4),  SHN(5),
                                                  SHN(6),  SHN(7),  SHN(8),  SHN(9),  SHN(10), SHN(11),
                                                  SHN(12), SHN(13), SHN(14), SHN(15)};
#undef SHN

/* FP4, 16 weights (8 bytes at p) in natural column order: vpmultishiftqb puts nibble l in
 * the low 4 bits of dword l (the next nibble above it, which vpermps ignores), vpermps
 * looks it up in the block's F32 table (fp4_block_table): e2m1 * scale, dec_fp4's values,
 * 2 uops where the BF16 word table it replaced took 3 (vpermw zmm is 2 uops on the Xeon
 * measured): about 2 % less time at 8-16 rows (bench_linear --experts, one thread). */
AINLINE VBMI __m512 dec_fp4n(const uint8_t *p, __m512i ctl, __m512 table) {
    int64_t u;
    memcpy(&u, p, 8);
    return _mm512_permutexvar_ps(_mm512_multishift_epi64_epi8(ctl, _mm512_set1_epi64(u)), table);
}

/* FP4 in the lanes layout (kernels/fp4_lanes.h): word i of a row's 64-byte line l holds in its
 * nibble k the code of column 128l + 16k + i, so the line's words shifted right by 4k, looked
 * up by vpermps in the scale block's table (e2m1 * scale, as dec_fp4n's), give columns 128l +
 * 16k .. + 15 in natural order. The shift is vpsrlvd by fp4l_cnt[k] (4k in every lane): with an
 * immediate GCC folds the line's load into vpsrld (a 64-byte memory operand), and that form
 * ran the fused block at ~1.25x the time of the natural layout's (Zen 5, in process). */
#define C16(v) {v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v}
static const _Alignas(64) int32_t fp4l_cnt[8][16] = {C16(0),  C16(4),  C16(8),  C16(12),
                                                     C16(16), C16(20), C16(24), C16(28)};
#undef C16

/* columns 16k .. 16k + 15 of the line v (k < 8), table the scale block's */
AINLINE __m512 dec_fp4l(__m512i v, int k, __m512 table) {
    return _mm512_permutexvar_ps(_mm512_srlv_epi32(v, _mm512_load_si512((const void *)fp4l_cnt[k])), table);
}

/* a line of 128 lanes-layout columns at p (64 bytes, any alignment) */
AINLINE __m512i fp4l_line(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }

/* row o's columns [0, cols) decoded into dst (cols rounded up to 16, 64-byte aligned) */
static VBMI void sm_decode_row(const dsv4_lin_call *c, const fp8_tab *t, const dsv4_mat *w, int64_t o, float *dst) {
    const int64_t n = w->cols;
    if (w->fmt == DSV4_WF_FP8) {
        const int64_t nsb = (n + 127) / 128, band = o / 128;
        const uint8_t *p = (const uint8_t *)w->w + o * n;
        for (int64_t b = 0; b < nsb; b++) {
            const int64_t i0 = b * 128, i1 = i0 + 128 < n ? i0 + 128 : n;
            const __m512 scale = _mm512_set1_ps(scale_at(w, band * nsb + b));
            for (int64_t i = i0; i < i1; i += 64) {
                const int m = i1 - i >= 64 ? 64 : (int)(i1 - i);
                __m512 v[4];
                dec_fp8x64(t, p + i, m, scale, v);
                for (int q = 0; q < 4 && 16 * q < m; q++) _mm512_store_ps(dst + i + 16 * q, v[q]);
            }
        }
    } else if (w->fmt == DSV4_WF_FP4) { /* cols % 32 == 0 (checked by the driver) */
        const __m512i ctl = _mm512_load_si512((const void *)fp4n_ctl);
        const int64_t nsb = n / 32;
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        /* the scale kind, scale row and table in locals: the stores to dst may alias w and c,
         * and reading them through w and c made GCC reload them every block (0.72x the decode
         * time without the reloads, Zen 5, in-process) */
        const int f32 = w->scale_is_f32;
        const uint8_t *sc8 = f32 ? NULL : (const uint8_t *)w->scale + o * nsb; /* (nsb) ue8m0 */
        const float *sc32 = f32 ? (const float *)w->scale + o * nsb : NULL;    /* (nsb) F32 */
        const float(*tab)[16] = c->tab->fp4x16;
        for (int64_t b = 0; b < nsb; b++) {
            const __m512 tb = f32 ? fp4_table_f32(sc32[b]) : _mm512_load_ps(tab[sc8[b]]);
            _mm512_store_ps(dst + 32 * b, dec_fp4n(p + b * 16, ctl, tb));
            _mm512_store_ps(dst + 32 * b + 16, dec_fp4n(p + b * 16 + 8, ctl, tb));
        }
    } else if (w->fmt == DSV4_WF_FP4L) { /* cols % 128 == 0 (the layout's) */
        const int64_t nsb = n / 32;
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        const int f32 = w->scale_is_f32; /* in locals, as the FP4 case's */
        const uint8_t *sc8 = f32 ? NULL : (const uint8_t *)w->scale + o * nsb; /* (nsb) ue8m0 */
        const float *sc32 = f32 ? (const float *)w->scale + o * nsb : NULL;    /* (nsb) F32 */
        const float(*tab)[16] = c->tab->fp4x16;
        for (int64_t l = 0; l < n / 128; l++)
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) { /* scale block 4l + q: chunks k = 2q, 2q + 1 */
                const int64_t b = 4 * l + q;
                const __m512 tb = f32 ? fp4_table_f32(sc32[b]) : _mm512_load_ps(tab[sc8[b]]);
                const __m512i v = fp4l_line(p + 64 * l);
                _mm512_store_ps(dst + 32 * b, dec_fp4l(v, 2 * q, tb));
                _mm512_store_ps(dst + 32 * b + 16, dec_fp4l(v, 2 * q + 1, tb));
            }
    } else { /* F32, F16, BF16 */
        const char *row = (const char *)w->w + o * n * (w->fmt == DSV4_WF_F32 ? 4 : 2);
        for (int64_t i = 0; i < n; i += 16) {
            const int m = n - i >= 16 ? 16 : (int)(n - i);
            const __m512 v = w->fmt == DSV4_WF_F32   ? dec_dense(DSV4_WF_F32, row, i, m)
                             : w->fmt == DSV4_WF_F16 ? dec_dense(DSV4_WF_F16, row, i, m)
                                                     : dec_dense(DSV4_WF_BF16, row, i, m);
            _mm512_store_ps(dst + i, v);
        }
    }
}

/* y[0 .. nb) = the sums of a[0 .. nb), each in hsum16's tree, four outputs at once */
AINLINE void sm_store4(const __m512 a[4], int nb, float *y) {
    /* lanes l + (l + 8), two outputs a vector */
    const __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], 0x44), _mm512_shuffle_f32x4(a[0], a[1], 0xEE));
    const __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], 0x44), _mm512_shuffle_f32x4(a[2], a[3], 0xEE));
    /* block j: output j's lanes l + (l + 4), l < 4 */
    const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
    const __m512 z = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E)); /* (l0 + l2), (l1 + l3) */
    const __m512 r = _mm512_add_ps(z, _mm512_permute_ps(z, 0xB1)); /* lane 4j: output j */
    const __m512 v = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), r);
    _mm_mask_storeu_ps(y, (__mmask8)((1u << nb) - 1u), _mm512_castps512_ps128(v));
}

/* MR activation rows (x, stride n) against NW (4 or 8) panel rows (stride ld), columns
 * [k0, k1) of n (whole chunks but the last, whose x is zero-padded): y (MR, rows) at the
 * block's first output, nb of them stored. acc (MR, NW, 16): the lanes carried between
 * column tiles, read unless k0 == 0, written unless k1 == n (then the sums are stored); a
 * call over all the columns keeps them in registers only. Per 16 columns NW panel loads
 * (L1) and MR x loads (L1 or L2) feed NW * MR FMAs: x is reloaded once per NW weight rows,
 * so the 8-row panel halves the x stream of the 4-row one. */
AINLINE void sm_rows(int NW, int MR, const float *x, int64_t n, int64_t k0, int64_t k1, const float *panel,
                     int64_t ld, float *acc, float *y, int64_t rows, int nb, const char *pf, int64_t pf_step) {
    __m512 a[SM_MR_MAX][LIN_SMALLM_NB];
    for (int s = 0; s < MR; s++)
        for (int j = 0; j < NW; j++)
            a[s][j] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc + 16 * (s * NW + j));
    const int64_t nf = k1 & ~(int64_t)15;
    for (int64_t i = k0; i < nf; i += 16) {
        /* the next panel's weights, a few lines a chunk: issued all at once they fill the
         * line fill buffers and stall the loads behind them */
        if (pf)
            for (int64_t b = 0; b < pf_step; b += 64) _mm_prefetch(pf + (i - k0) / 16 * pf_step + b, _MM_HINT_T0);
        __m512 xv[SM_MR_MAX];
        for (int s = 0; s < MR; s++) xv[s] = _mm512_loadu_ps(x + s * n + i);
        for (int j = 0; j < NW; j++) {
            __m512 wv = _mm512_load_ps(panel + j * ld + i);
            /* one load per weight vector, used MR times: without this GCC folds it into
             * every FMA, MR loads instead of one, and the loop runs out of load ports */
            __asm__("" : "+v"(wv));
            for (int s = 0; s < MR; s++) a[s][j] = _mm512_fmadd_ps(xv[s], wv, a[s][j]);
        }
    }
    if (nf < k1) {
        const __mmask16 k = mask16((int)(k1 - nf));
        __m512 xv[SM_MR_MAX];
        for (int s = 0; s < MR; s++) xv[s] = _mm512_maskz_loadu_ps(k, x + s * n + nf);
        for (int j = 0; j < NW; j++) {
            const __m512 wv = _mm512_load_ps(panel + j * ld + nf);
            for (int s = 0; s < MR; s++) a[s][j] = _mm512_fmadd_ps(xv[s], wv, a[s][j]);
        }
    }
    if (k1 < n) {
        for (int s = 0; s < MR; s++)
            for (int j = 0; j < NW; j++) _mm512_store_ps(acc + 16 * (s * NW + j), a[s][j]);
        return;
    }
    for (int s = 0; s < MR; s++) {
        sm_store4(a[s], nb < 4 ? nb : 4, y + s * rows);
        if (NW == 8 && nb > 4) sm_store4(a[s] + 4, nb - 4, y + s * rows + 4);
    }
}

/* Rows of the next register block when left rows remain, blocks of MR: the last 4 of 3-row
 * blocks go as 2 + 2, not 3 + 1. A 1-row block runs 8 FMAs on 9 loads, each accumulator a
 * dependent chain, where 2 rows run 16 on 10 (10, 13 and 16 rows: 1.01-1.03x the speed,
 * in-process, hot and cold; BENCHMARKS.md, "Session 15, psm"). The same block count, so the
 * prefetch spread below is unchanged; which rows share a block never changes a bit. */
AINLINE int sm_block_rows(int MR, int left) {
    if (MR == 3 && left == 4) return 2;
    return left < MR ? left : MR;
}

/* An FP4 panel (ue8m0 scales, 8 full rows) decoded by its first row block: the panel path's
 * decode is a pass of its own that the FMAs do not overlap (13-21 % of a call at 9-16
 * rows: BENCHMARKS.md, "Session 15, psm"); here the first block decodes each chunk of the 8
 * rows in registers (dec_fp4n's two shuffles, the table a memory operand), stores it into
 * the panel for the later blocks and runs its MR x 8 FMAs on it (24 accumulators, MR x, the
 * control and the weight: 29 of the 32 registers at MR 3). The same values, chunks and tree
 * as the panel path. A 512-token prefill (its experts at 13-64 rows) 1.012-1.024x as fast
 * (6 alternated pairs; BENCHMARKS.md, "Session 17, pfx"). wp: the panel's first weight row
 * (rows n / 2 bytes apart), sc its scale bytes (n / 32 apart). */
typedef struct {
    const uint8_t *wp, *sc;
    const float (*tab)[16];
} smd_src;

/* smd_rows' chunk of columns i .. i + 15: the 8 rows decoded (L: lanes layout, k = (i / 16) %
 * 8; else dec_fp4n), stored into the panel, MR x 8 FMAs */
AINLINE VBMI void smd_step(int MR, int L, int k, int64_t n, const smd_src *d, const float *x, float *panel,
                           int64_t ld, int64_t i, __m512i ctl, __m512 a[SM_MR_MAX][LIN_SMALLM_NB], const char *pf,
                           int64_t pf_step) {
    const int64_t nsb = n / 32, rb = n / 2;
    if (pf)
        for (int64_t b = 0; b < pf_step; b += 64) _mm_prefetch(pf + i / 16 * pf_step + b, _MM_HINT_T0);
    __m512 xv[SM_MR_MAX];
    for (int s = 0; s < MR; s++) xv[s] = _mm512_loadu_ps(x + s * n + i);
    for (int j = 0; j < LIN_SMALLM_NB; j++) {
        const __m512 tb = _mm512_load_ps(d->tab[d->sc[j * nsb + i / 32]]);
        __m512 wv = L ? dec_fp4l(fp4l_line(d->wp + j * rb + (i / 2 - 8 * k)), k, tb)
                      : dec_fp4n(d->wp + j * rb + i / 2, ctl, tb);
        __asm__("" : "+v"(wv)); /* decoded once, stored, used MR times */
        _mm512_store_ps(panel + j * ld + i, wv);
        for (int s = 0; s < MR; s++) a[s][j] = _mm512_fmadd_ps(xv[s], wv, a[s][j]);
    }
}

/* sm_rows over all the columns of an untiled 8-row panel that it decodes first; N: n as a
 * constant (smf_block's reason: constant row offsets); L: the rows in the lanes layout */
AINLINE VBMI void smd_rows(int MR, int L, int64_t N, const smd_src *d, const float *x, float *panel, int64_t ld,
                           float *y, int64_t rows, const char *pf, int64_t pf_step) {
    const int64_t n = N;
    const __m512i ctl = _mm512_load_si512((const void *)fp4n_ctl);
    __m512 a[SM_MR_MAX][LIN_SMALLM_NB];
    for (int s = 0; s < MR; s++)
        for (int j = 0; j < LIN_SMALLM_NB; j++) a[s][j] = _mm512_setzero_ps();
    if (L) {
        /* k = (i / 16) % 8 at run time: with the line's 8 chunks unrolled (k a constant) GCC kept
         * the 24 accumulators on the stack, a load and a store each a chunk (25-64 rows:
         * 1.03-1.23x the natural panel's time, 0.96-1.10x as a loop; BENCHMARKS.md, session 30
         * lanes) */
        for (int64_t i = 0; i < n; i += 16)
            smd_step(MR, 1, (int)(i / 16) & 7, n, d, x, panel, ld, i, ctl, a, pf, pf_step);
    } else {
        for (int64_t i = 0; i < n; i += 16) smd_step(MR, 0, 0, n, d, x, panel, ld, i, ctl, a, pf, pf_step);
    }
    for (int s = 0; s < MR; s++) {
        sm_store4(a[s], 4, y + s * rows);
        sm_store4(a[s] + 4, 4, y + s * rows + 4);
    }
}

/* all n_rows activation rows against one panel of NW weight rows (nb of them real), in
 * column tiles of kt (all n: one tile), the tiles outermost so that a tile of the panel
 * stays in L1 for every row block (acc: the lanes between tiles); while prefetching
 * [pf, pf_end): the next panel's weights, spread over the chunks of the first row blocks.
 * d (untiled 8-row panels only, N as smd_rows): the first block decodes the panel. */
AINLINE VBMI void sm_panel(int NW, int tiled, int L, int64_t N, const smd_src *d, const float *x, int n_rows, int64_t n,
                           int64_t kt, float *panel, int64_t ld, float *acc, float *y, int64_t rows, int nb,
                           const char *pf, const char *pf_end) {
    if (!tiled) kt = n; /* a constant in the untiled copy: its loop as before the tiles */
    const int MR = NW == 8 ? 3 : 4; /* NW * MR accumulators: 24 or 16 of the 32 registers */
    const int64_t chunks = (kt + 15) / 16, nt = (n + kt - 1) / kt, blocks = nt * ((n_rows + MR - 1) / MR);
    /* bytes a chunk prefetches, whole lines, so that every block but the last helps */
    const int64_t per_block = ((pf_end - pf) + blocks - 1) / blocks;
    const int64_t step = ((per_block + chunks - 1) / chunks + 63) & ~(int64_t)63;
    for (int64_t t0 = 0; t0 < n; t0 += kt) {
        const int64_t k0 = tiled ? t0 : 0, k1 = !tiled || n - t0 < kt ? n : t0 + kt; /* !tiled: 0, n */
        for (int s0 = 0, mr; s0 < n_rows; s0 += mr) {
            mr = sm_block_rows(MR, n_rows - s0);
            const char *p = pf < pf_end ? pf : NULL;
            const float *xs = x + (int64_t)s0 * n;
            float *ys = y + (int64_t)s0 * rows, *as = acc + (int64_t)s0 * NW * 16;
            if (d && s0 == 0) {
                switch (mr) {
                case 1: smd_rows(1, L, N, d, xs, panel, ld, ys, rows, p, step); break;
                case 2: smd_rows(2, L, N, d, xs, panel, ld, ys, rows, p, step); break;
                default: smd_rows(3, L, N, d, xs, panel, ld, ys, rows, p, step); break;
                }
                pf += chunks * step;
                continue;
            }
            switch (mr) {
            case 1: sm_rows(NW, 1, xs, n, k0, k1, panel, ld, as, ys, rows, nb, p, step); break;
            case 2: sm_rows(NW, 2, xs, n, k0, k1, panel, ld, as, ys, rows, nb, p, step); break;
            case 3: sm_rows(NW, 3, xs, n, k0, k1, panel, ld, as, ys, rows, nb, p, step); break;
            default: sm_rows(NW, 4, xs, n, k0, k1, panel, ld, as, ys, rows, nb, p, step); break;
            }
            pf += chunks * step;
        }
    }
}

/* ---- small-M, FP4 at up to SMF_ROWS activation rows: the decode fused into the FMA loop ----
 * The panel path decodes a weight once per call but pays the decode apart from the FMAs (a
 * store and a reload a chunk; the two parts add up: BENCHMARKS.md, "Session 15, psm"). Here
 * each 16-weight chunk of SMF_NO weight rows is decoded in registers right before the
 * SMF_NO x MR FMAs that use it, so the decode's shuffles issue beside the FMAs. Rows go in
 * balanced blocks of at most SMF_MR (4 x 6 accumulators, 4 weights, the shift counts: 29 of
 * the 32 registers); each block decodes the chunk again (SMF_ROWS: where that stops paying).
 * The decode is dec_fp4's (vpbroadcastq, vpsrlvd, vpermps: the lanes in fp4_perm order), not
 * dec_fp4n's natural-order vpmultishiftqb: on Zen 5 vpmultishiftqb issues on the FMA pipes
 * (24 FMAs with 4 of them ran ~14.3 cycles against 12.3, with 4 vpsrlvd 12.25), and the block
 * with it ran 0.68-0.73 of the FMA peak where the same block with vpsrlvd runs 0.85-0.92
 * (one thread, an L2-resident expert, 6-12 rows; bench_linear --experts, 2 threads, 5-12
 * rows: 1.17-1.22x as fast, BENCHMARKS.md, "Session 20, pfp4"). So x
 * goes into the scratch in fp4_perm order once a call (as the GEMV's xpre), lane l of every
 * accumulator sums column 16c + fp4_perm[l] over the chunks c in ascending order, and one
 * vpermps by fp4_unperm puts each accumulator back in natural lane order before sm_store4's
 * tree: the same products, sums and tree as the panel path, so its bits. */

#define SMF_NO 4    /* weight rows a group */
#define SMF_MR 6    /* activation rows of the largest register block */
/* The most activation rows that take it: four blocks. With the vpsrlvd decode the blocks'
 * decodes cost less than the panel path's first block, whose 8 stores a chunk take the FMA
 * pipes too (24 FMAs with 4 zmm stores: ~16.3 cycles against 12.3), and the tiled panels of
 * the checkpoint's widths have no decoding block at all: against the panel path,
 * bench_linear --experts (512 / 1024 columns) 13-16 rows 1.14-1.20x, 17-24 rows 1.05-1.23x,
 * 28-32 rows 1.04-1.12x (not taken: the gain thins, and 32 rows of x in fp4_perm order at
 * 4096 columns outgrow the scratch); --decode --shape flash.w13 / flash.w2 (2048 / 4096
 * columns) 13-24 rows 1.2-1.56x (BENCHMARKS.md, "Session 20, pfp4"). */
#define SMF_ROWS 24
#define SMF_PD 2    /* groups ahead that the first block prefetches, a line a 32 columns */

/* MR activation rows from x (stride n, fp4_perm order) against the SMF_NO weight rows from wp
 * (n / 2 bytes apart, their ue8m0 scales from sc, n / 32 apart): y (MR, rows), SMF_NO
 * outputs a row. N: n as a constant (0: not), so the rows' addresses are constant offsets
 * (with n in a register GCC spent general registers on row pointers: 0.91-0.93x at 12 rows).
 * sh: dec_fp4's shift counts. pf: the group SMF_PD ahead, a line per 32 columns (without it
 * 0.77x at 12 rows, streamed), or NULL */
AINLINE VBMI void smf_block(int MR, int64_t N, const float *x, int64_t n, const uint8_t *wp, const uint8_t *sc,
                            const float (*tab)[16], __m512i sh, float *y, int64_t rows, const char *pf) {
    if (N) n = N;
    const int64_t nsb = n / 32, rb = n / 2;
    __m512 a[SMF_MR][SMF_NO];
    for (int s = 0; s < MR; s++)
        for (int j = 0; j < SMF_NO; j++) a[s][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        if (pf) _mm_prefetch(pf + 64 * b, _MM_HINT_T0); /* SMF_NO x 16 bytes a block: one line */
        for (int h = 0; h < 2; h++) {
            __m512 wv[SMF_NO];
            for (int j = 0; j < SMF_NO; j++) {
                int64_t u;
                memcpy(&u, wp + j * rb + 16 * b + 8 * h, 8);
                wv[j] = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(u), sh),
                                              _mm512_load_ps(tab[sc[j * nsb + b]]));
                __asm__("" : "+v"(wv[j])); /* decoded once, used MR times (as sm_rows' panel loads) */
            }
            for (int s = 0; s < MR; s++) {
                const __m512 xv = _mm512_load_ps(x + s * n + 32 * b + 16 * h);
                for (int j = 0; j < SMF_NO; j++) a[s][j] = _mm512_fmadd_ps(xv, wv[j], a[s][j]);
            }
        }
    }
    const __m512i unperm = _mm512_loadu_si512((const void *)fp4_unperm);
    for (int s = 0; s < MR; s++) {
        for (int j = 0; j < SMF_NO; j++) a[s][j] = _mm512_permutexvar_ps(unperm, a[s][j]); /* natural lanes */
        sm_store4(a[s], SMF_NO, y + s * rows);
    }
}

/* outputs [o0, o0 + 4 * groups) of all n_rows (<= SMF_ROWS) activation rows, x in fp4_perm order */
AINLINE VBMI void smf_groups(int64_t N, const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                             int64_t o0, int64_t groups) {
    const int64_t n = N ? N : w->cols, rows = w->rows, nsb = n / 32, gb = SMF_NO * (n / 2);
    const __m512i sh = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28); /* dec_fp4's */
    const float(*tab)[16] = c->tab->fp4x16;
    const uint8_t *wb = (const uint8_t *)w->w + o0 * (n / 2), *sb = (const uint8_t *)w->scale + o0 * nsb;
    const int nblk = (n_rows + SMF_MR - 1) / SMF_MR;
    for (int64_t g = 0; g < groups; g++) {
        const uint8_t *wp = wb + g * gb, *sc = sb + g * SMF_NO * nsb;
        const char *pf = g + SMF_PD < groups ? (const char *)(wp + SMF_PD * gb) : NULL;
        for (int k = 0, s0 = 0; k < nblk; k++) {
            const int mr = (n_rows - s0 + (nblk - k) - 1) / (nblk - k); /* balanced: 12 = 6 + 6, 9 = 5 + 4 */
            const float *xs = x + (int64_t)s0 * n;
            float *ys = y + (int64_t)s0 * rows + o0 + g * SMF_NO;
            const char *p = k == 0 ? pf : NULL;
            switch (mr) {
            case 1: smf_block(1, N, xs, n, wp, sc, tab, sh, ys, rows, p); break;
            case 2: smf_block(2, N, xs, n, wp, sc, tab, sh, ys, rows, p); break;
            case 3: smf_block(3, N, xs, n, wp, sc, tab, sh, ys, rows, p); break;
            case 4: smf_block(4, N, xs, n, wp, sc, tab, sh, ys, rows, p); break;
            case 5: smf_block(5, N, xs, n, wp, sc, tab, sh, ys, rows, p); break;
            default: smf_block(6, N, xs, n, wp, sc, tab, sh, ys, rows, p); break;
            }
            s0 += mr;
        }
    }
}

/* the outputs [o0, o0 + 4 * floor((o1 - o0) / 4)) when the fused path takes the call (FP4,
 * ue8m0 scales, at most SMF_ROWS rows, x in fp4_perm order fits the scratch: xp, 64-byte
 * aligned); returns the first output it left */
DSV4_HOT_AT(smallm_fp4_fused, 0xc40)
static VBMI int64_t smallm_fp4_fused(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                                     int64_t o0, int64_t o1, float *xp) {
    const int64_t n = w->cols, groups = (o1 - o0) / SMF_NO;
    if (w->fmt != DSV4_WF_FP4 || w->scale_is_f32 || n_rows > SMF_ROWS || groups == 0 ||
        n_rows * n > LIN_SCRATCH_FLOATS)
        return o0;
    const __m512i perm = _mm512_loadu_si512((const void *)fp4_perm);
    for (int64_t i = 0; i < n_rows * n; i += 16) /* cols % 32 == 0 (checked by the driver) */
        _mm512_store_ps(xp + i, _mm512_permutexvar_ps(perm, _mm512_loadu_ps(x + i)));
    switch (n) { /* the expert widths as constants */
    case 512: smf_groups(512, c, w, xp, n_rows, y, o0, groups); break;
    case 1024: smf_groups(1024, c, w, xp, n_rows, y, o0, groups); break;
    case 2048: smf_groups(2048, c, w, xp, n_rows, y, o0, groups); break;
    case 4096: smf_groups(4096, c, w, xp, n_rows, y, o0, groups); break;
    default: smf_groups(0, c, w, xp, n_rows, y, o0, groups); break;
    }
    return o0 + groups * SMF_NO;
}

/* ---- small-M FP4 in the lanes layout (kernels/fp4_lanes.h): the fused blocks -----------------
 * smf_block's blocks (SMF_NO weight rows x up to SMFL_MR activation rows) on lanes-layout rows:
 * x is read in place in natural order (no fp4_perm copy) and the accumulators need no
 * unpermute: lane l sums column 16c + l over the chunks c in ascending order, as the natural
 * layout's paths after their unpermute, so the same products, sums and tree: the same bits
 * (which rows share a block, and in which order the blocks run, change no sum). A chunk decodes
 * by a vpsrlvd and a vpermps a row (dec_fp4's broadcast, vpsrlvd, vpermps: one op less); a
 * row's line is loaded once per 128 columns and kept in a register.
 *
 * How it is run decides its speed more than the decode: with every block size inlined into one
 * function as smf_groups does (and 6-row blocks, whose 24 accumulators leave no room for the
 * lines), GCC's registers went differently for each size and the block ran 1.01-1.35x the
 * natural block's time (Zen 5, one thread, an L2-resident expert; BENCHMARKS.md, session 30
 * lanes). So here each block size (and width) is a function of its own (smfl_pass_*, below),
 * which runs its rows over every group of a stretch of the task (the blocks outermost: the
 * block's x rows stay in L1 across the groups, and the stretch's weights, at most
 * SMFL_PASS_BYTES, in L2 across the blocks), blocks of at most 5 rows. The MR 1-4 blocks then
 * run at 0.93-1.01x the natural block's time, and a prefill's routed experts (the bench model's
 * groups, 2 threads, in process) at 0.98-0.99x where they took 1.065x. */

#define SMFL_MR 5                  /* activation rows of the largest lanes block */
#define SMFL_PASS_BYTES (256 << 10) /* weight bytes of a stretch that every block runs over */
/* The most activation rows the lanes blocks take at the expert widths (512, 1024 columns); wider
 * rows stop at SMF_ROWS as the natural ones. Past 24 rows the natural layout goes to the panels
 * (its x in fp4_perm order outgrows the scratch at 4096 columns); the lanes blocks read x in
 * place and keep a block's x in L1, and against the panels (both layouts' panels: the same F32
 * panel after the first block) took 0.95-0.99x the natural panel path's time at 25-64 rows (one
 * thread, hot), 0.87-1.01x at 25-48 (2 threads, streamed experts; 64 rows of 512 columns
 * 1.06x). BENCHMARKS.md, session 30 lanes. */
#define SMFL_ROWS 48

/* smf_block on lanes-layout rows: MR activation rows from x (stride n, natural order) against
 * the SMF_NO weight rows from wp (n / 2 bytes apart, ue8m0 scales from sc, n / 32 apart); N and
 * pf as there (a line a 32 columns of the group SMF_PD ahead) */
AINLINE VBMI void smfl_block(int MR, int64_t N, const float *x, int64_t n, const uint8_t *wp, const uint8_t *sc,
                             const float (*tab)[16], float *y, int64_t rows, const char *pf) {
    if (N) n = N;
    const int64_t nsb = n / 32, rb = n / 2;
    __m512 a[SMFL_MR][SMF_NO];
    for (int s = 0; s < MR; s++)
        for (int j = 0; j < SMF_NO; j++) a[s][j] = _mm512_setzero_ps();
    for (int64_t l = 0; l < n / 128; l++) {
        __m512i lv[SMF_NO];
        for (int j = 0; j < SMF_NO; j++) lv[j] = fp4l_line(wp + j * rb + 64 * l);
        for (int q = 0; q < 4; q++) { /* scale block b: chunks k = 2q, 2q + 1 of the line */
            const int64_t b = 4 * l + q;
            if (pf) _mm_prefetch(pf + 64 * b, _MM_HINT_T0); /* SMF_NO x 16 bytes a block: one line */
            for (int h = 0; h < 2; h++) {
                /* 5 rows (20 accumulators, 4 lines): the tables from memory at each chunk, else
                 * GCC keeps them across h and spills (1.08-1.11x the time); fewer rows keep them */
                const uint8_t *sk = sc;
                if (MR == SMFL_MR) __asm__ volatile("" : "+r"(sk));
                __m512 wv[SMF_NO];
                for (int j = 0; j < SMF_NO; j++) {
                    wv[j] = dec_fp4l(lv[j], 2 * q + h, _mm512_load_ps(tab[sk[j * nsb + b]]));
                    __asm__("" : "+v"(wv[j])); /* decoded once, used MR times */
                }
                for (int s = 0; s < MR; s++) {
                    __m512 xv = _mm512_loadu_ps(x + s * n + 32 * b + 16 * h);
                    /* one load per x vector: GCC folded it into all 4 FMAs (w2 at 24 rows: 1.4-1.6x
                     * the time, out of load ports) */
                    __asm__("" : "+v"(xv));
                    for (int j = 0; j < SMF_NO; j++) a[s][j] = _mm512_fmadd_ps(xv, wv[j], a[s][j]);
                }
            }
        }
    }
    for (int s = 0; s < MR; s++) sm_store4(a[s], SMF_NO, y + s * rows);
}

/* One block of rows over `groups` groups: x the block's first row (stride n), wb / sb the first
 * group's weights and scales, y the block's first output row at the first group's output; pf:
 * prefetch each group SMF_PD ahead (the stretch's first block: the others find the weights in
 * L2) */
typedef struct {
    const float *x;
    const uint8_t *wb, *sb;
    const float (*tab)[16];
    float *y;
    int64_t n, rows, groups;
    int pf;
} smfl_pass_args;

/* the pass of MR rows at width NN (0: a->n), a function of its own (its registers allocated
 * alone), in smallm_fp4l_fused's section so that it moves with that function only (util/hot.h) */
#define SMFL_PASS(MR, NN)                                                                                   \
    __attribute__((section(".text.sorted.dsv4.smallm_fp4l_fused.1"))) static VBMI __attribute__((noinline)) \
    void smfl_pass_##MR##_##NN(const smfl_pass_args *a) {                                                   \
        const int64_t n = NN ? NN : a->n, gb = SMF_NO * (n / 2), sg = SMF_NO * (n / 32);                    \
        for (int64_t g = 0; g < a->groups; g++) {                                                           \
            const uint8_t *wp = a->wb + g * gb;                                                             \
            const char *pf = a->pf && g + SMF_PD < a->groups ? (const char *)(wp + SMF_PD * gb) : NULL;     \
            smfl_block(MR, NN, a->x, n, wp, a->sb + g * sg, a->tab, a->y + g * SMF_NO, a->rows, pf);        \
        }                                                                                                   \
    }
#define SMFL_PASSES(NN) SMFL_PASS(1, NN) SMFL_PASS(2, NN) SMFL_PASS(3, NN) SMFL_PASS(4, NN) SMFL_PASS(5, NN)
SMFL_PASSES(512)
SMFL_PASSES(1024)
SMFL_PASSES(2048)
SMFL_PASSES(4096)
SMFL_PASSES(0)
#undef SMFL_PASSES
#undef SMFL_PASS

typedef void (*smfl_pass_fn)(const smfl_pass_args *);
#define SMFL_ROW(NN) {smfl_pass_1_##NN, smfl_pass_2_##NN, smfl_pass_3_##NN, smfl_pass_4_##NN, smfl_pass_5_##NN}
/* [width: 512, 1024, 2048, 4096, other][MR - 1] */
static const smfl_pass_fn smfl_passes[5][SMFL_MR] = {SMFL_ROW(512), SMFL_ROW(1024), SMFL_ROW(2048), SMFL_ROW(4096),
                                                     SMFL_ROW(0)};
#undef SMFL_ROW

/* smallm_fp4_fused for lanes-layout FP4 (ue8m0 scales, at most SMFL_ROWS rows at up to 1024
 * columns, SMF_ROWS past that): x is read in place, so no scratch bound; the task's groups in
 * stretches of at most SMFL_PASS_BYTES, each run by balanced blocks of at most SMFL_MR rows
 * (13 = 5 + 4 + 4); returns the first output it left */
DSV4_HOT_AT(smallm_fp4l_fused, 0xc40)
static VBMI __attribute__((noinline)) int64_t smallm_fp4l_fused(const dsv4_lin_call *c, const dsv4_mat *w,
                                                                const float *x, int n_rows, float *y, int64_t o0,
                                                                int64_t o1) {
    const int64_t n = w->cols, groups = (o1 - o0) / SMF_NO;
    if (w->fmt != DSV4_WF_FP4L || w->scale_is_f32 || n_rows > (n <= 1024 ? SMFL_ROWS : SMF_ROWS) || groups == 0)
        return o0;
    const int wi = n == 512 ? 0 : n == 1024 ? 1 : n == 2048 ? 2 : n == 4096 ? 3 : 4; /* smfl_passes' row */
    const int64_t gb = SMF_NO * (n / 2), per = SMFL_PASS_BYTES / gb > 0 ? SMFL_PASS_BYTES / gb : 1;
    const int nblk = (n_rows + SMFL_MR - 1) / SMFL_MR;
    for (int64_t g0 = 0; g0 < groups; g0 += per) {
        const int64_t o = o0 + g0 * SMF_NO;
        smfl_pass_args a = {NULL, (const uint8_t *)w->w + o * (n / 2), (const uint8_t *)w->scale + o * (n / 32),
                            c->tab->fp4x16, NULL, n, w->rows, groups - g0 < per ? groups - g0 : per, 1};
        for (int k = 0, s0 = 0; k < nblk; k++) {
            const int mr = (n_rows - s0 + (nblk - k) - 1) / (nblk - k); /* balanced: 12 = 4 + 4 + 4 */
            a.x = x + (int64_t)s0 * n;
            a.y = y + (int64_t)s0 * w->rows + o;
            a.pf = k == 0;
            smfl_passes[wi][mr - 1](&a);
            s0 += mr;
        }
    }
    return o0 + groups * SMF_NO;
}

/* Column tiles: at 8 panel rows a row of 1024 columns makes a 32 KB panel, which stays in
 * L1 (48 KB on Zen 5) beside a block's x rows; past that every row block reread the panel
 * from L2 (FP8 1024 x 2048 at 16 rows, one thread, hot: 115 GFLOP/s, against 150-170 at 1024
 * columns). Longer rows go in tiles of SM_KT columns: 0.75-0.89x the time there (in-process,
 * bits equal; tiles of 256 and 512 did no better, tiling 1024-column rows in 512s took
 * 1.06-1.14x). */
#define SM_KT 1024 /* columns a tile (a multiple of 16), and the longest row of one tile */

/* ---- small-M, FP8 on AMD cores: the bit decode in registers, x prescaled per scale band -------
 * The panel path decodes a weight once per call, but by the tables (vpermi2b, vpternlogd and a
 * multiply by the scale: on Zen 5 the FMA pipes' work) and in a pass of its own that the FMAs
 * do not overlap: ~20 % of a 16-row call (BENCHMARKS.md, "Session 15, psm"; session 20). Here,
 * as the one-row GEMV's bit decode (above), the weights are e4m3 * 2^-120 by a sign-extend, a
 * shift and an and (off the FMA pipes), decoded in registers right before the FMAs that use
 * them, and x is prescaled once per scale band of a task: xs = x * 2^(b - 7) per 128-column
 * block (zero or a normal float, else the band takes the table path), so FMA(xs, e4m3 *
 * 2^-120) rounds the exact product x * (e4m3 * scale) as the table path's FMA(x, e4m3 * scale)
 * does. Register blocks of SMB_R weight rows x up to SMB_NX activation rows (24 accumulators,
 * one x load and SMB_R decodes per SMB_R * SMB_NX FMAs), each activation row pass decoding the
 * weights again; chunks of 16 in ascending order, sm_sum4's (hsum16's) tree: the bits of every
 * other path. A band whose weights hold an NaN code (which the shifts make finite) takes the
 * table path, which carries the NaN. Only where F32 subnormal FMA operands cost nothing (AMD:
 * dsv4_lin_tables.subnormal_fma_fast). In process, 2 threads, the batch-16 step's FP8 products
 * at 16 rows with its task sizes, against the panel path: cold 0.84-0.97x the time, hot
 * 0.84-0.93x (wo_b's 2048 columns gain most: their panel outgrew L1). */

/* xs (n_rows, cols) in the thread's scratch (all of it: the panel path's use ends before) */
#define SMB_XS_FLOATS (LIN_SCRATCH_GEMM_FLOATS - 16)

/* xs (n_rows, n) = x * 2^(b - 7) for the column blocks of scale band `band` (n % 16 == 0); 0
 * when x is not finite or some nonzero x gives a product that is not a normal float (then xs
 * is not used). The range is checked on x's extremes per block: x * 2^e is exact for every x
 * between them when it is for both. prev_band >= 0: xs holds this x scaled (and checked) for
 * that band, so a column block whose scale is the same there is left as it is (its values
 * and its check depend only on x and the scale): a task's next band rewrites only the blocks
 * whose scale changed (the bench model's FP8 scales repeat in ~half the blocks from one band
 * to the next; BENCHMARKS.md session 27 dn27). */
static VBMI int smb_fill(const dsv4_mat *w, const float *x, int n_rows, int64_t band, int64_t prev_band, float *xs) {
    const int64_t n = w->cols, nsb = (n + 127) / 128;
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1);
    const uint8_t *sc = (const uint8_t *)w->scale + band * nsb;
    const uint8_t *pc = prev_band >= 0 ? (const uint8_t *)w->scale + prev_band * nsb : NULL;
    for (int64_t b = 0; b < nsb; b++) {
        if (pc && pc[b] == sc[b]) continue;
        const int e = (int)sc[b] - 7; /* 2^120 * 2^(b - 127) */
        if (e > 127) return 0;
        const __m512 f = _mm512_set1_ps(ldexpf(1.0f, e));
        const int64_t i1 = (b + 1) * 128 < n ? (b + 1) * 128 : n;
        /* |x| as integers: the largest, and the smallest nonzero (0 - 1 wraps to the top) */
        __m512i vmax = _mm512_setzero_si512(), vmin = _mm512_set1_epi32(-1);
        for (int s = 0; s < n_rows; s++) {
            const float *xr = x + (int64_t)s * n;
            float *xo = xs + (int64_t)s * n;
            for (int64_t i = b * 128; i < i1; i += 16) {
                const __m512 xv = _mm512_loadu_ps(xr + i);
                const __m512i a = _mm512_and_si512(_mm512_castps_si512(xv), absm);
                vmax = _mm512_max_epu32(vmax, a);
                vmin = _mm512_min_epu32(vmin, _mm512_sub_epi32(a, one));
                _mm512_store_ps(xo + i, _mm512_mul_ps(xv, f));
            }
        }
        const uint32_t amax = (uint32_t)_mm512_reduce_max_epu32(vmax), amin1 = (uint32_t)_mm512_reduce_min_epu32(vmin);
        if (amax >= 0x7f800000u) return 0; /* inf or NaN */
        if (amax == 0) continue;           /* all zeros */
        const double xmin = dsv4_bits_to_f32(amin1 + 1), xmax = dsv4_bits_to_f32(amax);
        if (!(ldexp(xmin, e) >= 0x1p-126 && ldexp(xmax, e) < 0x1p127)) return 0;
    }
    return 1;
}

/* 1 when no byte of [p, p + len) is an FP8 NaN code (the pass also brings the band's weights
 * in for the row passes) */
static VBMI int smb_no_nan(const uint8_t *p, int64_t len) {
    __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 128 <= len; i += 128) {
        const __m512i v0 = _mm512_loadu_si512((const void *)(p + i)), v1 = _mm512_loadu_si512((const void *)(p + i + 64));
        a0 = _mm512_max_epu8(a0, _mm512_add_epi8(v0, v0));
        a1 = _mm512_max_epu8(a1, _mm512_add_epi8(v1, v1));
    }
    return !fp8_nan_seen(fp8_nan_scan(_mm512_max_epu8(a0, a1), p + i, (int)(len - i)));
}

/* Rows wider than SMB_SCAN_MAX_COLS (past those whose next band smb_band_nx prefetches, below)
 * take no scan: the first pass checks the codes as it decodes them (a band with an NaN code is redone by the panel path, which writes
 * every output again) and prefetches its own stream SMB_PF_AHEAD bytes ahead, so the weights
 * arrive beside its FMAs. Without the prefetch the scan's fetch moves into the pass (sessions
 * 21-27); with it, in step (batch 16, odd steps against even), the scan's ~0.75 ms of thread
 * time a step went for ~0.25-0.3 ms more in the bands (8192 bytes ahead: +0.3; BENCHMARKS.md,
 * session 28 fp828). */
#define SMB_SCAN_MAX_COLS 256
#define SMB_PF_AHEAD 4096

/* R weight rows from wp (n bytes apart, one band) against NX rows of xs (n apart): y (NX,
 * rows) at the block's first output. nan (a band's first pass past SMB_SCAN_MAX_COLS columns): the
 * weights' codes max'd into it as fp8_nan_scan's, and the stream SMB_PF_AHEAD bytes ahead */
AINLINE VBMI void smb_rows(int R, int NX, const uint8_t *wp, int64_t n, const float *xs, float *y, int64_t rows,
                           __m128i *nan) {
    const __m512i keep = _mm512_set1_epi32((int)0x87F00000); /* the sign, exponent bits 23..26, mantissa */
    __m512 a[SMB_R][SMB_NX];
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NX; s++) a[r][s] = _mm512_setzero_ps();
    __m128i nv = _mm_setzero_si128();
    for (int64_t i = 0; i < n; i += 16) {
        if (nan) GEMV_PF_TOUCH(wp + SMB_PF_AHEAD + R * i); /* the block's R * n bytes as one stream */
        __m512 wv[SMB_R];
        for (int r = 0; r < R; r++) {
            const __m128i b = _mm_loadu_si128((const __m128i *)(wp + r * n + i));
            if (nan) nv = _mm_max_epu8(nv, _mm_add_epi8(b, b));
            wv[r] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(b), 20), keep));
            __asm__("" : "+v"(wv[r])); /* decoded once, used NX times */
        }
        for (int s = 0; s < NX; s++) {
            __m512 xv = _mm512_load_ps(xs + s * n + i);
            /* one load per x vector: folded into every FMA it ran out of load ports */
            if (R > 1) __asm__("" : "+v"(xv));
            for (int r = 0; r < R; r++) a[r][s] = _mm512_fmadd_ps(xv, wv[r], a[r][s]);
        }
    }
    if (nan) *nan = _mm_max_epu8(*nan, nv);
    smb_store_sums(R, NX, a, y, rows);
}

/* What the first pass over a band prefetches where a band's weights are at most SMB_PF_BYTES
 * (wq_b's 256 columns: 32 KB): the 128 rows that follow the band's rows [o0, o1) (not past the
 * matrix), a slice before each register block (pf_slice). The band's NaN scan (smb_no_nan)
 * streams its weights in at the band's start while the FMAs wait; at these widths a band is
 * too short for the stream to ramp up, and the prefetched rows are the next band's (of this
 * task, or of the same thread's next task: threads.c hands each thread a contiguous range),
 * whose scan then reads them from cache. wq_b 8192 x 256 at 16 rows, cold, 2 threads, tasks of
 * 256 rows: 0.89-0.91x the time. Wider rows keep the scan alone: the next 32 KB there took
 * 0.97-1.02x (harness) and lost in step at wo_b's 2048 columns; the next whole band
 * 1.02-1.05x, two 1.14x at 2048. BENCHMARKS.md, session 21 fp816. */
#define SMB_PF_BYTES 32768

AINLINE VBMI void smb_band_nx(int NX, int pf, const dsv4_mat *w, const float *xs, float *y, int64_t o0, int64_t o1,
                              __m128i *nan) {
    const int64_t n = w->cols, rows = w->rows;
    const uint8_t *wb = (const uint8_t *)w->w;
    const int64_t pe = 128 * n > SMB_PF_BYTES ? o1 : o1 + 128 < rows ? o1 + 128 : rows;
    const int64_t nblk = (o1 - o0) / SMB_R > 0 ? (o1 - o0) / SMB_R : 1;
    int64_t o = o0;
    for (; o + SMB_R <= o1; o += SMB_R) {
        if (pf && pe > o1) pf_slice((const char *)(wb + o1 * n), (const char *)(wb + pe * n), (o - o0) / SMB_R, nblk);
        smb_rows(SMB_R, NX, wb + o * n, n, xs, y + o, rows, nan);
    }
    if (o1 - o == 2) smb_rows(2, NX, wb + o * n, n, xs, y + o, rows, nan);
    else if (o1 - o == 1) smb_rows(1, NX, wb + o * n, n, xs, y + o, rows, nan);
}

/* outputs [o0, o1) of one scale band, all n_rows rows of xs, in passes of up to SMB_NX rows
 * (as even as they go: 13 = 7 + 6); chk: the first pass checks the codes (0 back when it
 * saw an NaN code: the outputs are then not the products) */
DSV4_HOT_AT(smb_band, 0x170)
static VBMI int smb_band(const dsv4_mat *w, const float *xs, int n_rows, float *y, int64_t o0, int64_t o1, int chk) {
    const int64_t n = w->cols, rows = w->rows;
    const int passes = (n_rows + SMB_NX - 1) / SMB_NX;
    __m128i nan = _mm_setzero_si128();
    for (int k = 0, s0 = 0; k < passes; k++) {
        const int nx = (n_rows - s0 + (passes - k) - 1) / (passes - k);
        const float *xr = xs + (int64_t)s0 * n;
        float *yr = y + (int64_t)s0 * rows;
        __m128i *nv = chk && k == 0 ? &nan : NULL;
        switch (nx) {
        case 1: smb_band_nx(1, k == 0, w, xr, yr, o0, o1, nv); break;
        case 2: smb_band_nx(2, k == 0, w, xr, yr, o0, o1, nv); break;
        case 3: smb_band_nx(3, k == 0, w, xr, yr, o0, o1, nv); break;
        case 4: smb_band_nx(4, k == 0, w, xr, yr, o0, o1, nv); break;
        case 5: smb_band_nx(5, k == 0, w, xr, yr, o0, o1, nv); break;
        case 6: smb_band_nx(6, k == 0, w, xr, yr, o0, o1, nv); break;
        case 7: smb_band_nx(7, k == 0, w, xr, yr, o0, o1, nv); break;
        default: smb_band_nx(SMB_NX, k == 0, w, xr, yr, o0, o1, nv); break;
        }
        if (nv && _mm_cmpeq_epi8_mask(nan, _mm_set1_epi8((char)0xFE))) return 0; /* fp8_nan_seen's test */
        s0 += nx;
    }
    return 1;
}

/* the panel path (below) for the outputs [o0, o1), o0 a multiple of 4 */
static VBMI void smallm_panels(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                               int64_t o0, int64_t o1, float *scratch);

/* FP8 with ue8m0 scales on AMD cores, rows of whole 16-column chunks, xs within the scratch:
 * each scale band of [o0, o1) by the bit decode, or (an NaN code, an x the prescale cannot take)
 * the panel path; 0 when the call is not the bit decode's */
static VBMI int smallm_fp8_bits(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                                int64_t o0, int64_t o1, float *scratch) {
    const int64_t n = w->cols;
    if (w->fmt != DSV4_WF_FP8 || w->scale_is_f32 || !c->tab->subnormal_fma_fast || n % 16 != 0 ||
        (int64_t)n_rows * n > SMB_XS_FLOATS)
        return 0;
    float *xs = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); /* (n_rows, n) */
    /* xs from this thread's previous task of the plan, when it ended in this task's first
     * band (linear_fast.h dsv4_lin_xs_key) */
    dsv4_lin_xs_key *key = c->job ? (dsv4_lin_xs_key *)(scratch - LIN_SCRATCH_KEY_FLOATS) : NULL;
    for (int64_t s0 = o0; s0 < o1;) {
        const int64_t band = s0 / 128, s1 = (band + 1) * 128 < o1 ? (band + 1) * 128 : o1;
        const int64_t prev = key && key->job == c->job ? key->band : -1; /* the band xs holds */
        const int chk = n > SMB_SCAN_MAX_COLS; /* the first pass checks the codes, no scan */
        if ((chk || smb_no_nan((const uint8_t *)w->w + s0 * n, (s1 - s0) * n)) &&
            (prev == band || smb_fill(w, x, n_rows, band, prev, xs)) && smb_band(w, xs, n_rows, y, s0, s1, chk)) {
            if (key) *key = (dsv4_lin_xs_key){c->job, band};
        } else {
            if (key) key->job = 0; /* the panels take the scratch */
            smallm_panels(c, w, x, n_rows, y, s0, s1, scratch); /* s0: o0 or a band's first row */
        }
        s0 = s1;
    }
    return 1;
}

/* noinline: it keeps its own section and offset (util/hot.h) */
DSV4_HOT_AT(smallm_avx512vbmi, 0x940)
static VBMI __attribute__((noinline)) void smallm_avx512vbmi(const dsv4_lin_call *c, const dsv4_mat *w, const float *x,
                                                             int n_rows, float *y, int64_t o0, int64_t o1,
                                                             float *scratch) {
    if (!smallm_fp8_bits(c, w, x, n_rows, y, o0, o1, scratch)) smallm_panels(c, w, x, n_rows, y, o0, o1, scratch);
}

/* the level's small-M (linear_avx512.h): BF16 and F32 in registers (linear_avx512_vbmi_dense.c), the rest above */
DSV4_HOT_AT(dsv4_lin_avx512vbmi_smallm, 0x0)
VBMI void dsv4_lin_avx512vbmi_smallm(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                             int64_t o0, int64_t o1, float *scratch) {
    if (w->fmt == DSV4_WF_BF16 || w->fmt == DSV4_WF_F32) dsv4_lin_avx512vbmi_dense(c, w, x, n_rows, y, o0, o1, scratch);
    else smallm_avx512vbmi(c, w, x, n_rows, y, o0, o1, scratch);
}

DSV4_HOT_AT(smallm_panels, 0xf40)
static VBMI void smallm_panels(const dsv4_lin_call *c, const dsv4_mat *w, const float *x, int n_rows, float *y,
                               int64_t o0, int64_t o1, float *scratch) {
    const int64_t n = w->cols, rows = w->rows, ld = (n + 15) & ~(int64_t)15;
    float *panel = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); /* (LIN_SMALLM_NB, ld) */
    float *acc = panel + LIN_SMALLM_NB * ld;                                /* (n_rows, 8, 16) */
    const int fits = LIN_SMALLM_NB * ld + 16 + (int64_t)n_rows * LIN_SMALLM_NB * 16 <= LIN_SCRATCH_FLOATS;
    const int64_t kt = n > SM_KT && fits ? SM_KT : n;
    const fp8_tab t = fp8_tab_load(c->tab);
    /* The prefetch stride: weight bytes a row with the scales counted (FP4 1024 columns:
     * 544, where the rows lie 512 apart), so the window drifts ahead of the next panel, up
     * to ~3 panels over a 256-row task. Kept on purpose: on a prefill's routed experts
     * (BENCHMARKS.md, "Session 12, pf") the exact stride, its window one to three panels
     * ahead, ran 3-12 % slower, and no prefetch 4-8 % slower. */
    const int64_t rb = dsv4_mat_bytes(w) / (rows > 0 ? rows : 1);
    const char *wbase = (const char *)w->w;
    /* FP4 with ue8m0 scales, the expert widths: the first block decodes each full panel */
    /* natural or lanes only: this level's table gives FP4B (the avx2 shuffle layout) no small-M
     * rows, so it never comes here; decoding its bytes as natural would be silently wrong */
    assert(w->fmt != DSV4_WF_FP4B);
    const int smd = dsv4_wf_is_fp4(w->fmt) && !w->scale_is_f32 && (n == 512 || n == 1024);
    const int lanes = w->fmt == DSV4_WF_FP4L;
    /* the fused path's x in fp4_perm order takes the panel's place (the panel path below runs
     * after it, on the task's last (o1 - o0) % 4 outputs) */
    const int64_t of = lanes ? smallm_fp4l_fused(c, w, x, n_rows, y, o0, o1)
                             : smallm_fp4_fused(c, w, x, n_rows, y, o0, o1, panel);
    for (int64_t o = of; o < o1;) {
        /* 8 weight rows a panel, 4 for a task's last few (a short task pads less) */
        const int NW = o1 - o > 4 ? 8 : 4;
        const int nb = o1 - o < NW ? (int)(o1 - o) : NW;
        /* the next panel's weights while this one computes (not past the task's rows) */
        const int64_t pe = o + nb + LIN_SMALLM_NB < o1 ? o + nb + LIN_SMALLM_NB : o1;
        const char *pf = wbase + (o + nb) * rb, *pf_end = wbase + pe * rb;
        if (smd && nb == 8) { /* the first row block decodes the panel */
            const smd_src d = {(const uint8_t *)w->w + o * (n / 2), (const uint8_t *)w->scale + o * (n / 32),
                               c->tab->fp4x16};
            if (lanes && n == 512) sm_panel(8, 0, 1, 512, &d, x, n_rows, n, n, panel, ld, acc, y + o, rows, nb, pf, pf_end);
            else if (lanes) sm_panel(8, 0, 1, 1024, &d, x, n_rows, n, n, panel, ld, acc, y + o, rows, nb, pf, pf_end);
            else if (n == 512) sm_panel(8, 0, 0, 512, &d, x, n_rows, n, n, panel, ld, acc, y + o, rows, nb, pf, pf_end);
            else sm_panel(8, 0, 0, 1024, &d, x, n_rows, n, n, panel, ld, acc, y + o, rows, nb, pf, pf_end);
            o += nb;
            continue;
        }
        for (int j = 0; j < nb; j++) sm_decode_row(c, &t, w, o + j, panel + j * ld);
        for (int j = nb; j < NW; j++) memset(panel + j * ld, 0, sizeof(float) * (size_t)ld);
        if (kt < n && NW == 8) sm_panel(8, 1, 0, 0, NULL, x, n_rows, n, kt, panel, ld, acc, y + o, rows, nb, pf, pf_end);
        else if (kt < n) sm_panel(4, 1, 0, 0, NULL, x, n_rows, n, kt, panel, ld, acc, y + o, rows, nb, pf, pf_end);
        else if (NW == 8) sm_panel(8, 0, 0, 0, NULL, x, n_rows, n, n, panel, ld, acc, y + o, rows, nb, pf, pf_end);
        else sm_panel(4, 0, 0, 0, NULL, x, n_rows, n, n, panel, ld, acc, y + o, rows, nb, pf, pf_end);
        o += nb;
    }
}

#endif
