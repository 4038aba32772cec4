/* rope.h — the two RoPE tables (main: rope_theta; compress: compress_rope_theta + YaRN) and
 * interleaved partial rotation of the trailing rd channels (spec/model.md §4). */
#ifndef DSV4_ATTN_ROPE_H
#define DSV4_ATTN_ROPE_H

#include <stdint.h>

#include "dsv4.h"
#include "model/config.h"

/* Inverse frequencies f[rd/2] in FP32, bit-exact with the official tables. */
void dsv4_rope_freqs(const dsv4_config *cfg, int compress, float *f);

typedef struct dsv4_rope {
    int rd;
    int64_t n_pos;       /* positions covered by the table */
    float *freqs;        /* (rd/2) */
    float *cos, *sin;    /* (n_pos, rd/2): of the FP32 angle (float)t * f[i] */
} dsv4_rope;

int dsv4_rope_init(dsv4_rope *r, const dsv4_config *cfg, int compress, int64_t n_pos,
                   dsv4_err *err);
void dsv4_rope_free(dsv4_rope *r);

/* Rotates the last rd channels of v[0..n) at position pos (forward or inverse).
 * Positions beyond the table are computed on the fly with the same rule. */
void dsv4_rope_apply(const dsv4_rope *r, float *v, int n, int64_t pos, int inverse);

#endif
