/* inventory.h — the tensors a config implies, by official name (spec/model.md §2.2).
 *
 * One list serves the loader (which binds each entry into a struct dsv4_model), the model
 * generator (which writes each entry) and `dsv4 info` (which counts parameters). Entries
 * name logical tensors: a matrix entry stands for `<module>.weight` plus, in quantized
 * checkpoints, `<module>.scale`. The release format of each matrix (what the official
 * FP8 checkpoint stores) is recorded so the generator can mimic it; the loader decides
 * formats by dtype, not from this field.
 */
#ifndef DSV4_MODEL_INVENTORY_H
#define DSV4_MODEL_INVENTORY_H

#include <stdint.h>

#include "dsv4.h"
#include "kernels/linear.h"
#include "model/config.h"

typedef enum {
    DSV4_TK_MAT,      /* [out, in] projection: dense, FP8 + scale, or packed FP4 + scale */
    DSV4_TK_VEC,      /* small float tensor, converted to owned F32 at load */
    DSV4_TK_TID2EID,  /* [V, K] expert ids of a hash layer, converted to owned int32 */
} dsv4_tkind;

/* How the generator initializes a tensor (magnitudes like the oracle's seeded models). */
typedef enum {
    DSV4_INIT_EMBED,     /* N(0, 1) */
    DSV4_INIT_LINEAR,    /* N(0, 1/in) */
    DSV4_INIT_NORM,      /* 1 + 0.1 N(0, 1) */
    DSV4_INIT_SINK,      /* N(0, 1) */
    DSV4_INIT_APE,       /* 0.5 N(0, 1) */
    DSV4_INIT_HC_FN,     /* N(0, 1/in) */
    DSV4_INIT_HC_BASE,   /* 0.5 N(0, 1) */
    DSV4_INIT_HC_SCALE,  /* U(0.5, 1.5) */
    DSV4_INIT_GATE_BIAS, /* 0.1 N(0, 1) */
    DSV4_INIT_TID2EID,   /* K distinct experts per row */
} dsv4_tinit;

/* Storage format of a matrix in the released FP8 checkpoint. */
typedef enum { DSV4_REL_BF16, DSV4_REL_FP8, DSV4_REL_FP4 } dsv4_release_fmt;

/* Vector-like tensors that the official checkpoint stores F32 (the rest of them BF16). */
static inline int dsv4_init_is_f32(dsv4_tinit k) {
    return k == DSV4_INIT_SINK || k == DSV4_INIT_APE || k == DSV4_INIT_HC_FN ||
           k == DSV4_INIT_HC_BASE || k == DSV4_INIT_HC_SCALE || k == DSV4_INIT_GATE_BIAS;
}

typedef struct dsv4_tensor_spec {
    char name[96];       /* matrices: the module name + ".weight" */
    dsv4_tkind kind;
    dsv4_tinit init;
    dsv4_release_fmt rel;
    int ndim;            /* 1 or 2 */
    int64_t shape[2];    /* logical shape; matrices [out, in] */
    int layer;           /* layer id (main 0.., MTP n_layers..), -1 for global tensors */
    int expert;          /* routed expert index, -1 otherwise */
    /* binding destinations inside a model (NULL when built without one) */
    dsv4_mat *mat;
    const float **vec;
    const int32_t **ids;
} dsv4_tensor_spec;

struct dsv4_model;

/* Builds the list in a fixed order (global, then layer by layer, then MTP). With m != NULL,
 * allocates m->layers, m->mtp and the per-block expert arrays (owned by m) and points each
 * entry at its destination. *out is malloc'd. */
int dsv4_inventory_build(const dsv4_config *cfg, struct dsv4_model *m, dsv4_tensor_spec **out,
                         int *n_out, dsv4_err *err);

static inline int64_t dsv4_spec_numel(const dsv4_tensor_spec *s) {
    return s->ndim == 1 ? s->shape[0] : s->shape[0] * s->shape[1];
}

#endif
