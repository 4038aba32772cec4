/* cp.h — context-parallel prefill (spec/serving.md §c): the zigzag partition of one prompt
 * over the ranks, the rows each segment contributes to the exchanges, and the CP forward.
 *
 * Partition. The prompt [s0, s0+n) is cut into granules of G positions aligned to absolute
 * multiples of G (the first and last may be partial). With q granules and q >= 2 CP,
 * segment i in [0, 2 CP) gets granules [i q / 2CP, (i+1) q / 2CP) and is owned by rank
 * i (i < CP) or 2CP-1-i: every rank holds one early and one late segment, which balances
 * attention cost that grows with position. Rank 0 owns the first and the last segment and
 * is the home rank, which keeps the sequence's cache. With q < 2 CP the home rank runs the
 * whole prompt (the ordinary forward).
 *
 * What a segment [a, b) gives the ranks after it (exchange A), for each layer:
 *   tail   window rows [max(a, b-win+1), b): every query of a later segment finds its
 *          window rows before that segment's start in these tails or in the home rank's
 *          cache (positions < s0), because tails of consecutive segments chain back;
 *   state  for every compressor of the layer, the projections of the §7 state of a
 *          sequence that ends at b, restricted to [a, b): carry positions
 *          [r*floor(b/r) - r, r*floor(b/r)) of a CSA compressor (first halves of a_t and
 *          b_t: 2d floats) and open-window positions [r*floor(b/r), b) (whole rows).
 *          With G a multiple of every ratio (the default) no window is open at a segment
 *          end and this is exactly serving.md's "4 seed rows per CSA compressor"; with any
 *          other G the open windows travel too, so the exchange stays exact for every G.
 * The last segment is the home rank's own and sends nothing.
 */
#ifndef DSV4_DIST_CP_H
#define DSV4_DIST_CP_H

#include <stdint.h>

#include "dsv4.h"
#include "model/config.h"

typedef struct dsv4_cp_seg {
    int64_t start, end;   /* positions [start, end) */
    int owner;            /* rank */
} dsv4_cp_seg;

typedef struct dsv4_cp_plan {
    int cp;               /* ranks */
    int64_t s0, n;        /* the prompt: positions [s0, s0 + n) */
    int64_t granule;      /* G */
    int64_t q;            /* granules the prompt touches */
    int split;            /* 1: 2 CP segments; 0: q < 2 CP, the home rank runs everything */
    int n_seg;            /* 2 CP when split, else 1 */
    dsv4_cp_seg *seg;     /* (n_seg) in position order */
} dsv4_cp_plan;

/* Owner of segment i of 2 cp. */
static inline int dsv4_cp_owner(int i, int cp) { return i < cp ? i : 2 * cp - 1 - i; }

/* The default granule: the smallest multiple of every nonzero compress ratio that is
 * >= win - 1 (and >= 1); 128 for Flash and the golden configs. */
int64_t dsv4_cp_default_granule(const dsv4_config *cfg);

/* Builds the plan; cp >= 1, n >= 1, s0 >= 0, granule >= 1. */
int dsv4_cp_plan_make(int cp, int64_t s0, int64_t n, int64_t granule, dsv4_cp_plan *p,
                      dsv4_err *err);
void dsv4_cp_plan_free(dsv4_cp_plan *p);
/* The same into the caller's seg (2 cp segments): nothing to free. */
int dsv4_cp_plan_into(dsv4_cp_seg *seg, int cp, int64_t s0, int64_t n, int64_t granule, dsv4_cp_plan *p,
                      dsv4_err *err);
/* Index of the segment holding position pos (s0 <= pos < s0 + n). */
int dsv4_cp_seg_of(const dsv4_cp_plan *p, int64_t pos);

/* Window tail of a segment: [*lo, end). */
int64_t dsv4_cp_tail_lo(const dsv4_cp_seg *s, int win);
/* Compressor state a segment hands on (ratio r, overlap coff): rows [*lo, end), of which
 * [*lo, *open_lo) are carry rows (first halves only) and [*open_lo, end) whole rows. */
void dsv4_cp_state_range(const dsv4_cp_seg *s, int r, int coff, int64_t *lo, int64_t *open_lo);
/* The same for a sequence ending at n (the home rank's broadcast of its state at s0):
 * positions [max(0, r*floor(n/r) - (coff-1) r), n). */
int64_t dsv4_cp_state_lo(int64_t n, int r, int coff);

/* Floats crossing ranks for one layer of compress ratio `ratio` (0 = SWA):
 *   a       exchange A, summed over all segments (what every rank receives);
 *   b       exchange B, new entries (hd) and indexer keys (dI) of the call;
 *   bcast   the home rank's state at s0 (window rows, rings, entries and keys < s0). */
typedef struct dsv4_cp_volume {
    int64_t a, b, bcast;
} dsv4_cp_volume;
dsv4_cp_volume dsv4_cp_layer_volume(const dsv4_cp_plan *p, const dsv4_config *cfg, int ratio);

#endif
