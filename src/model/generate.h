/* generate.h — seeded random checkpoints under the official tensor names.
 *
 * Test models for the engine: config.json + model.safetensors with weight magnitudes like
 * the oracle's golden models (unit-variance activations throughout). Every tensor draws
 * from its own stream, seeded from (seed, tensor name), so any tensor can be regenerated
 * alone and the file does not depend on tensor order.
 *
 * Formats:
 *  BF16: every matrix and norm BF16; hc_*, ape, attn_sink, gate.bias F32; tid2eid I64.
 *  FP8 (the release layout): attention projections (wq_a, wq_b, wkv, wo_a, wo_b, indexer
 *    wq_b), shared experts and MTP e_proj/h_proj as F8_E4M3 with ue8m0 128x128 block
 *    scales; routed experts as packed FP4 (I8) with ue8m0 per-32 scales; the rest as in
 *    BF16. Each scale is the power of two that fits the block's largest value (for FP8
 *    blocks sometimes one power higher, so scales vary between blocks), so dequantized
 *    weights have the same magnitudes as in BF16.
 */
#ifndef DSV4_MODEL_GENERATE_H
#define DSV4_MODEL_GENERATE_H

#include <stdint.h>

#include "dsv4.h"
#include "model/config.h"

typedef enum { DSV4_GEN_BF16, DSV4_GEN_FP8 } dsv4_gen_dtype;

typedef struct dsv4_gen_opts {
    uint64_t seed;
    dsv4_gen_dtype dtype;
} dsv4_gen_opts;

/* The built-in demo config (`gen-model --preset demo`): vocab 129280 (the release
 * tokenizer), hidden 256, layers [0, 4, 128, 4] + an MTP block, window 128. */
void dsv4_gen_demo_config(dsv4_config *cfg);

/* Sets the quantization fields of cfg for dtype (FP8: quantization_config of the release
 * and expert_dtype "fp4"; BF16: none). */
void dsv4_gen_set_quant(dsv4_config *cfg, dsv4_gen_dtype dtype);

/* Writes dir/config.json and dir/model.safetensors (dir is created if missing). cfg's
 * quantization fields are set from opts->dtype in the written config. */
int dsv4_gen_model(const dsv4_config *cfg, const dsv4_gen_opts *opts, const char *dir,
                   dsv4_err *err);

/* The values the generator intends tensor `name` to have once loaded: matrices as their
 * exact dequantized values [out, in] (FP8/FP4 codes times scales, BF16 values), vectors as
 * F32; tid2eid as int32 ids. name is an inventory name (matrices: "<module>.weight").
 * Exactly one of *vals / *ids is set (malloc'd); *n = element count. */
int dsv4_gen_expected(const dsv4_config *cfg, const dsv4_gen_opts *opts, const char *name,
                      float **vals, int32_t **ids, int64_t *n, dsv4_err *err);

/* Size of the model.safetensors dsv4_gen_model would write. */
int dsv4_gen_file_size(const dsv4_config *cfg, const dsv4_gen_opts *opts, uint64_t *bytes,
                       dsv4_err *err);

#endif
