/* info.h — what `dsv4 info` reports about a model: layer kinds, parameter counts, bytes by
 * dtype. Parameter counts come from the config alone (the tensor inventory); byte counts
 * from the safetensors headers of the opened files. Nothing here reads tensor data.
 */
#ifndef DSV4_MODEL_INFO_H
#define DSV4_MODEL_INFO_H

#include <stdint.h>

#include "dsv4.h"
#include "model/config.h"
#include "model/safetensors.h"

struct dsv4_model;

typedef enum { DSV4_LAYER_SWA, DSV4_LAYER_CSA, DSV4_LAYER_HCA } dsv4_layer_kind;

/* The official rule: ratio 0 SWA, 4 CSA, any other ratio HCA (spec/model.md §1). */
static inline dsv4_layer_kind dsv4_layer_kind_of(int ratio) {
    return ratio == 0 ? DSV4_LAYER_SWA : ratio == 4 ? DSV4_LAYER_CSA : DSV4_LAYER_HCA;
}
const char *dsv4_layer_kind_name(dsv4_layer_kind k); /* "SWA", "CSA", "HCA" */

/* Parameter counts: logical weight elements (a packed FP4 byte is two), scales excluded. */
typedef struct dsv4_param_counts {
    int64_t total;           /* main + mtp */
    int64_t main;            /* embed, head, final norm, hc_head and the main blocks */
    int64_t mtp;             /* MTP blocks (their own tensors; they share embed and head) */
    int64_t embed, head;
    int64_t routed_main;     /* routed experts of the main blocks, all E */
    int64_t routed_mtp;
    int64_t active_main;     /* per token: main minus the E-K routed experts not chosen */
    int64_t active_mtp;      /* same for the MTP blocks */
    int64_t layer[DSV4_MAX_LAYERS];        /* per layer (main, then MTP), all experts */
    int64_t layer_active[DSV4_MAX_LAYERS]; /* per layer, K routed experts */
} dsv4_param_counts;

int dsv4_count_params(const dsv4_config *cfg, dsv4_param_counts *pc, dsv4_err *err);

/* Bytes and tensor counts per dtype over every tensor of the files (extras included). */
typedef struct dsv4_dtype_bytes {
    uint64_t bytes[DSV4_ST_N_DTYPES];
    int64_t tensors[DSV4_ST_N_DTYPES];
    uint64_t total_bytes;      /* tensor data */
    uint64_t file_bytes;       /* file sizes, headers included */
    int64_t total_tensors;
    int n_files;
} dsv4_dtype_bytes;

void dsv4_count_bytes(const dsv4_st_set *st, dsv4_dtype_bytes *out);
/* Bytes of the routed experts among the files' tensors ("*.ffn.experts.*"). */
uint64_t dsv4_count_routed_bytes(const dsv4_st_set *st);

/* The packed FP4 matrices of a loaded model (headers suffice) and how many of them
 * --weights-memory lanes repacks: widths a multiple of 128 (kernels/fp4_lanes.h); the others
 * stay natural. first_natural: the name of the first of those ("" when none). */
struct dsv4_model;
typedef struct dsv4_fp4_census {
    int64_t fp4, lanes_ok;
    char first_natural[96];
} dsv4_fp4_census;
void dsv4_model_fp4_census(const struct dsv4_model *m, dsv4_fp4_census *out);

/* The same figures for the released checkpoint layout of a config, from the config alone
 * (spec/model.md §2.3): FP8 e4m3 matrices with 128x128 ue8m0 scales, routed experts as
 * packed FP4 with per-32 ue8m0 scales, other matrices BF16, vectors F32 or BF16, tid2eid
 * I64. file_bytes and n_files stay 0 (headers are not counted). *routed_bytes gets the
 * routed experts' share. */
int dsv4_count_release_bytes(const dsv4_config *cfg, dsv4_dtype_bytes *out,
                             uint64_t *routed_bytes, dsv4_err *err);

#endif
