/* fidelity_prep.h — setting up fidelity mode P3 (spec/model.md §6) on an engine. */
#ifndef DSV4_ENGINE_FIDELITY_PREP_H
#define DSV4_ENGINE_FIDELITY_PREP_H

#include "engine/engine.h"

/* Validates opts.fidelity (known items; not with w8a8; F3 needs a power-of-two indexer head
 * dim for its Hadamard rotation) and makes e->num the fidelity mode over the engine's
 * blocks (model/numerics.h; it owns its role table and input buffer). No-op for 0. */
int dsv4_engine_prepare_fidelity(dsv4_engine *e, dsv4_err *err);

#endif
