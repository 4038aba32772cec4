/* fidelity_prep.h — setting up fidelity mode P3 (spec/model.md §6) on an engine. */
#ifndef DSV4_ENGINE_FIDELITY_PREP_H
#define DSV4_ENGINE_FIDELITY_PREP_H

#include "engine/engine.h"

/* Validates opts.fidelity (known items; not with w8a8; F3 needs a power-of-two indexer head
 * dim for its Hadamard rotation), turns the items on in the kernel context and marks the
 * roles of the engine's block copies (kernels/linear.h DSV4_MAT_FID_*): the routed expert
 * arrays become the engine's own copies (the model's are shared). No-op for 0. */
int dsv4_engine_prepare_fidelity(dsv4_engine *e, dsv4_err *err);

#endif
