/* w8a8_prep.h — building the engine's INT8 weight copies for the P2 W8A8 path. */
#ifndef DSV4_ENGINE_W8A8_PREP_H
#define DSV4_ENGINE_W8A8_PREP_H

#include "engine/engine.h"

/* With opts.w8a8 set, replaces the matrices of every block of e (main and MTP) that P2
 * covers by INT8 copies the engine owns (spec/serving.md §f):
 *   w8a8 = 1: wq_b, wo_b, indexer wq_b, shared and routed w1/w3/w2 (with expert
 *             parallelism only this rank's experts), MTP e_proj/h_proj;
 *   w8a8 = 2: also wq_a, wkv and wo_a (activations quantized per token, per group for
 *             wo_a, since each group is its own product).
 * Everything else (embed, head, router gate, compressor wkv/wgate, weights_proj, vectors)
 * stays as stored, and e->num becomes the W8A8 mode (model/numerics.h) that runs the INT8
 * products on INT8 activations. No-op for w8a8 = 0. Errors: an unknown level, a matrix too wide for
 * the int32 sum, a non-finite weight, out of memory (each naming the tensor). */
int dsv4_engine_prepare_w8a8(dsv4_engine *e, dsv4_err *err);

#endif
