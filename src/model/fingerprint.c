/* fingerprint.c — identities of a checkpoint (serving.md §g): the weights fingerprint and
 * the canonical config hash. KV files carry both; MPI ranks compare them at engine create.
 *
 * Weights fingerprint, SHA-256 over, in order:
 *   "dsv4-weights-v1" NUL, mode byte (0 sampled, 1 full),
 *   u64 length + bytes of config.json (as parsed),
 *   u64 shard count, then per shard (index order = sorted file names):
 *     u64 file size, u64 header bytes (8 + N), the header bytes,
 *     sampled: for every offset o = k * 1 GiB inside the data area, u64 o, u64 len and
 *              the first len = min(64 KiB, rest) bytes at o;
 *     full:    the whole data area.
 * All integers little-endian. Sampling reads 64 KiB per GiB (about 10 MiB for the 160 GB
 * release) so it is cheap at open; it catches other shapes, dtypes, layouts and any
 * difference in a sampled range, not a change elsewhere in the data. The full mode hashes
 * every byte (minutes for the release) and catches everything.
 */
#include <string.h>

#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "util/err.h"
#include "util/sha256.h"

#define FP_SAMPLE_STRIDE (1ull << 30) /* one sample per GiB of tensor data */
#define FP_SAMPLE_BYTES (64ull << 10)
#define FP_FULL_CHUNK (64ull << 20)   /* update granularity of the full hash */

static int hash_shard(dsv4_sha256 *h, const dsv4_st_set *st, int f, int full, dsv4_err *err) {
    const uint8_t *img = dsv4_st_file_image(st, f);
    uint64_t size = dsv4_st_file_size(st, f), hdr = dsv4_st_file_data_offset(st, f);
    if (!img || hdr > size)
        return dsv4_fail(err, DSV4_ERR_STATE, "fingerprint: shard %d has no mapped image", f);
    int rc = dsv4_sha256_u64(h, size, err);
    if (!rc) rc = dsv4_sha256_u64(h, hdr, err);
    if (!rc) rc = dsv4_sha256_update(h, img, (size_t)hdr, err);
    const uint8_t *data = img + hdr;
    uint64_t n = size - hdr;
    if (full) {
        for (uint64_t o = 0; o < n && !rc; o += FP_FULL_CHUNK)
            rc = dsv4_sha256_update(h, data + o, (size_t)(n - o < FP_FULL_CHUNK ? n - o : FP_FULL_CHUNK), err);
        return rc;
    }
    for (uint64_t o = 0; o < n && !rc; o += FP_SAMPLE_STRIDE) {
        uint64_t len = n - o < FP_SAMPLE_BYTES ? n - o : FP_SAMPLE_BYTES;
        rc = dsv4_sha256_u64(h, o, err);
        if (!rc) rc = dsv4_sha256_u64(h, len, err);
        if (!rc) rc = dsv4_sha256_update(h, data + o, (size_t)len, err);
    }
    return rc;
}

int dsv4_model_fingerprint(const dsv4_model *m, int full, uint8_t out[32], dsv4_err *err) {
    if (!m || !out) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_model_fingerprint: NULL argument");
    if (!m->config_json || !m->files)
        return dsv4_fail(err, DSV4_ERR_STATE, "dsv4_model_fingerprint: model has no config text or files");
    dsv4_sha256 *h = dsv4_sha256_new(err);
    if (!h) return DSV4_ERR_NOMEM;
    static const char tag[] = "dsv4-weights-v1"; /* with its NUL */
    uint8_t mode = full ? 1 : 0;
    int rc = dsv4_sha256_update(h, tag, sizeof tag, err);
    if (!rc) rc = dsv4_sha256_update(h, &mode, 1, err);
    if (!rc) rc = dsv4_sha256_u64(h, m->config_len, err);
    if (!rc) rc = dsv4_sha256_update(h, m->config_json, m->config_len, err);
    int n_files = dsv4_st_n_files(m->files);
    if (!rc) rc = dsv4_sha256_u64(h, (uint64_t)n_files, err);
    for (int f = 0; f < n_files && !rc; f++) rc = hash_shard(h, m->files, f, full, err);
    if (!rc) rc = dsv4_sha256_final(h, out, err);
    dsv4_sha256_free(h);
    return rc;
}

/* ---- canonical config hash -------------------------------------------------------------- */

static int put_i(dsv4_sha256 *h, int64_t v, dsv4_err *err) { return dsv4_sha256_u64(h, (uint64_t)v, err); }

static int put_d(dsv4_sha256 *h, double v, dsv4_err *err) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return dsv4_sha256_u64(h, bits, err);
}

int dsv4_config_hash(const dsv4_config *c, uint8_t out[32], dsv4_err *err) {
    if (!c || !out) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_config_hash: NULL argument");
    dsv4_sha256 *h = dsv4_sha256_new(err);
    if (!h) return DSV4_ERR_NOMEM;
    static const char tag[] = "dsv4-config-v1";
    int rc = dsv4_sha256_update(h, tag, sizeof tag, err);
    /* Every field that changes a computed value, in config.h order; one version tag above
     * covers the layout, so adding a field means a new tag. */
    const int64_t ints[] = {
        c->vocab_size, c->hidden_size, c->num_hidden_layers, c->num_attention_heads,
        c->num_key_value_heads, c->head_dim, c->qk_rope_head_dim, c->q_lora_rank, c->o_lora_rank,
        c->o_groups, c->sliding_window, c->rope_yarn, c->rope_original_max_pos, c->index_n_heads,
        c->index_head_dim, c->index_topk, c->n_routed_experts, c->n_shared_experts,
        c->num_experts_per_tok, c->num_hash_layers, (int64_t)c->scoring_func,
        c->moe_intermediate_size, c->hc_mult, c->hc_sinkhorn_iters, c->num_nextn_predict_layers,
    };
    const double dbls[] = {
        c->rope_theta, c->compress_rope_theta, c->rope_factor, c->rope_beta_fast, c->rope_beta_slow,
        c->routed_scaling_factor, c->swiglu_limit, c->hc_eps, c->rms_norm_eps,
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints && !rc; i++) rc = put_i(h, ints[i], err);
    for (size_t i = 0; i < sizeof dbls / sizeof *dbls && !rc; i++) rc = put_d(h, dbls[i], err);
    int n_layers = dsv4_cfg_n_total_layers(c);
    for (int l = 0; l < n_layers && !rc; l++) rc = put_i(h, c->compress_ratios[l], err);
    if (!rc) rc = dsv4_sha256_final(h, out, err);
    dsv4_sha256_free(h);
    return rc;
}

int dsv4_model_config_hash(const dsv4_model *m, uint8_t out[32], dsv4_err *err) {
    if (!m) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_model_config_hash: NULL model");
    return dsv4_config_hash(&m->cfg, out, err);
}
