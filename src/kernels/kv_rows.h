/* kv_rows.h — the storage formats of cached KV rows (spec/serving.md §a.1): rounding a row
 * to its format where it is produced, and packing / unpacking it to / from pool bytes.
 *
 * Formats are named by the planner's codes (cache.h: bytes per value):
 *   DSV4_ROW_F32   4   n floats
 *   DSV4_ROW_BF16  2   n BF16 values (round to nearest even, NaN kept a NaN)
 *   DSV4_ROW_FP8   1   FP8-split: the n - rd "nope" channels as e4m3 bytes, then one ue8m0
 *                      scale byte per 64 of them (zero-padded to a multiple of 8 bytes), then
 *                      the rd rope channels as BF16 (448 + 8 + 128 = 584 bytes for Flash)
 *   DSV4_ROW_FP4   3   FP4 (indexer keys only, rd = 0; 3 is a code, not a byte count):
 *                      ceil(n / 2) bytes of e2m1 nibbles (value 2i in the low nibble of
 *                      byte i, 2i + 1 in the high one), then one ue8m0 scale byte per block
 *                      of 32 values (the last block may be shorter): 64 + 4 = 68 bytes for
 *                      Flash's dI = 128, against 256 in BF16
 * The FP8 rule is fidelity item F2's (kernels/fidelity.h: amax floored at 1e-4, scale
 * 2^ceil(log2(amax / 448)), e4m3 round-half-even), so F2 rows are stored losslessly; the
 * FP4 rule is F3's (amax floored at 6 * 2^-126, scale 2^ceil(log2(amax / 6)), e2m1
 * round-half-even), so keys F3 has rounded (after its Hadamard rotation) are stored
 * losslessly, -0 included. The engine stores FP4 keys only under F3 (engine/kv_dtype.c):
 * without it the rounding would change the model.
 *
 * Contract: unpack(pack(x)) == round(x) bit for bit, round is idempotent (in value: F2 may
 * turn a -0 into +0), and unpack then pack gives back the same bytes. The engine
 * rounds every row where it is produced and packs only rounded rows, so a row read back from
 * the pools equals the row the producing call kept in its scratch, and the pool bytes of a
 * row are the same whichever path (single process, CP, a restored file) stored it.
 */
#ifndef DSV4_KERNELS_KV_ROWS_H
#define DSV4_KERNELS_KV_ROWS_H

#include <stdint.h>

enum { DSV4_ROW_FP8 = 1, DSV4_ROW_BF16 = 2, DSV4_ROW_FP4 = 3, DSV4_ROW_F32 = 4 };

/* A format code with 0 read as F32 (structs that default to F32 when zeroed). */
static inline int dsv4_row_fmt(int fmt) { return fmt ? fmt : DSV4_ROW_F32; }

/* Widest row the unpacking paths hold on the stack (floats). */
#define DSV4_ROW_MAX 4096

/* Bytes of one row of n values (rd of them rope channels) in format fmt; 0 when the format
 * is unknown, FP8 gets (n - rd) % 64 != 0 or FP4 gets rd != 0. */
int64_t dsv4_row_bytes(int fmt, int n, int rd);

/* x[0, n) <- the value its storage in fmt holds, in place. */
void dsv4_row_round(int fmt, float *x, int n, int rd);

/* dst (dsv4_row_bytes) <- x[0, n) in fmt; x should already be rounded (see the contract). */
void dsv4_row_pack(int fmt, void *dst, const float *x, int n, int rd);

/* x[0, n) <- the row at src in fmt. */
void dsv4_row_unpack(int fmt, float *x, const void *src, int n, int rd);

#endif
