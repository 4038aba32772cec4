/* forward_cp.h — the context-parallel prefill of one long span over a CP process group
 * (spec/serving.md §c): the engine side of the partition and exchange ranges in dist/cp.h. */
#ifndef DSV4_ENGINE_FORWARD_CP_H
#define DSV4_ENGINE_FORWARD_CP_H

#include <stdint.h>

#include "dsv4.h"
#include "model/config.h"

/* Where a rank's time goes in CP prefills (engine field cp_stats, set by a benchmark):
 * totals over the calls, of the whole call and of the part inside MPI collectives
 * (waiting for slower ranks included). CPU times are the calling thread's, so with one
 * thread per rank cpu_s - comm_cpu_s is the rank's compute whatever else the machine
 * runs. */
typedef struct dsv4_cp_stats {
    int64_t calls;
    double wall_s, comm_wall_s;
    double cpu_s, comm_cpu_s;
    int64_t floats_in;   /* floats received through exchanges, broadcasts and gathers */
} dsv4_cp_stats;

/* 1 when dsv4_forward should hand this call to dsv4_forward_cp: a process group of more
 * than one rank with DSV4_PAR_CP, a single span, and at least 2 CP granules. */
int dsv4_cp_eligible(const dsv4_engine *e, const dsv4_span *spans, int n_spans);
/* 1 when positions [s0, s0 + n) touch 2 granules per rank of a CP group. */
int dsv4_cp_long_enough(const dsv4_engine *e, int64_t s0, int64_t n);

/* The scratch a CP prefill takes on P ranks for calls of at most R rows, positions below
 * max_context: returns the call's own buffers (held while the blocks run, whose scratch
 * comes on top), *outputs what the output gather takes on top of them after the blocks.
 * 0 without MPI. */
size_t dsv4_forward_cp_scratch_bytes(const dsv4_config *c, int P, int R, int64_t max_context,
                                     size_t *outputs);

/* The CP prefill of one validated span; every rank calls it with the same arguments.
 * Hidden and stream rows are returned on the home rank (rank 0) only. */
int dsv4_forward_cp(dsv4_engine *e, const dsv4_span *spans, int n_spans, float *hidden,
                    float *streams, dsv4_err *err);

/* The same with `home` (an MPI rank) as the home rank: the partition is rank 0's
 * relabelled by (rank - home) mod size, so the home owns the first and last segments,
 * keeps the cache and gets the outputs. Without DP every rank passes the same span. Under
 * DSV4_PAR_DP (forward.c) only the home has it, validated and its pages reserved; the
 * others pass its seq, start, n_tokens, n_hidden and n_streams as agreed (no arrays,
 * hidden and streams NULL) and get the tokens and rows from the home; they never touch
 * their own sequence of that id. Every rank of the group calls it. */
int dsv4_forward_cp_at(dsv4_engine *e, const dsv4_span *span, int home, float *hidden, float *streams,
                       dsv4_err *err);

/* Under DSV4_PAR_DP | DSV4_PAR_CP: the index of this rank's span that runs as a CP prefill
 * over the group (its longest non-speculative span of at least 2 granules per rank; the
 * first of equals), or -1. */
int dsv4_cp_pick(const dsv4_engine *e, const dsv4_span *spans, int n_spans);

#endif
