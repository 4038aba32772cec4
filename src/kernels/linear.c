/* linear.c — reference dequantization and y = x . W^T for every weight format. */
#include "kernels/linear.h"

#include <string.h>

#include "kernels/codec.h"
#include "kernels/fp4_lanes.h"
#include "kernels/fp4_shuf.h"
#include "util/hot.h"

static float scale_at(const dsv4_mat *w, int64_t idx) {
    if (w->scale_is_f32) return ((const float *)w->scale)[idx];
    return dsv4_e8m0_to_f32(((const uint8_t *)w->scale)[idx]);
}

DSV4_HOT_AT(dsv4_mat_row, 0xd70)
void dsv4_mat_row(const dsv4_mat *w, int64_t o, float *out) {
    const int64_t n = w->cols;
    switch (w->fmt) {
    case DSV4_WF_F32: {
        const float *p = (const float *)w->w + o * n;
        for (int64_t i = 0; i < n; i++) out[i] = p[i];
        break;
    }
    case DSV4_WF_F16: {
        const uint16_t *p = (const uint16_t *)w->w + o * n;
        for (int64_t i = 0; i < n; i++) out[i] = dsv4_f16_to_f32(p[i]);
        break;
    }
    case DSV4_WF_BF16: {
        const uint16_t *p = (const uint16_t *)w->w + o * n;
        for (int64_t i = 0; i < n; i++) out[i] = dsv4_bf16_to_f32(p[i]);
        break;
    }
    case DSV4_WF_FP8: {
        const uint8_t *p = (const uint8_t *)w->w + o * n;
        const int64_t scols = (n + 127) / 128, srow = o / 128;
        for (int64_t i = 0; i < n; i++)
            out[i] = dsv4_e4m3_to_f32(p[i]) * scale_at(w, srow * scols + i / 128);
        break;
    }
    case DSV4_WF_FP4: {
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        const int64_t scols = n / 32;
        for (int64_t i = 0; i < n; i++) {
            uint8_t byte = p[i / 2];
            uint8_t nib = (i & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 15);
            out[i] = dsv4_e2m1_to_f32(nib) * scale_at(w, o * scols + i / 32);
        }
        break;
    }
    case DSV4_WF_FP4L: {
        /* rows of whole 128-column lines; no other width has the layout (such a matrix is
         * malformed: zeros, as an absent one, here and in dsv4_linear) */
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        const int64_t scols = n / 32;
        for (int64_t i = 0; i < n; i++)
            out[i] = n % DSV4_FP4L_COLS ? 0.0f : dsv4_e2m1_to_f32(dsv4_fp4l_code(p, i)) * scale_at(w, o * scols + i / 32);
        break;
    }
    case DSV4_WF_FP4B: { /* rows of whole 64-column chunks (fp4_shuf.h); other widths as FP4L's */
        const uint8_t *p = (const uint8_t *)w->w + o * (n / 2);
        const int64_t scols = n / 32;
        for (int64_t i = 0; i < n; i++)
            out[i] = n % DSV4_FP4S_COLS ? 0.0f : dsv4_e2m1_to_f32(dsv4_fp4s_code(p, i)) * scale_at(w, o * scols + i / 32);
        break;
    }
    case DSV4_WF_I8: {
        const int8_t *p = (const int8_t *)w->w + o * n;
        const float s = ((const float *)w->scale)[o];
        for (int64_t i = 0; i < n; i++) out[i] = (float)p[i] * s;
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) out[i] = 0.0f;
    }
}

void dsv4_linear_ref(const dsv4_mat *w, const float *x, int n_rows, float *y, float *scratch) {
    const int64_t in = w->cols, out = w->rows;
    for (int64_t o = 0; o < out; o++) {
        dsv4_mat_row(w, o, scratch);
        for (int s = 0; s < n_rows; s++) {
            const float *xs = x + (int64_t)s * in;
            float acc = 0.0f;
            for (int64_t i = 0; i < in; i++) acc += xs[i] * scratch[i];
            y[(int64_t)s * out + o] = acc;
        }
    }
}

int64_t dsv4_mat_scale_bytes(const dsv4_mat *w) {
    const int64_t r = w->rows, c = w->cols, sc = w->scale_is_f32 ? 4 : 1;
    switch (w->fmt) {
    case DSV4_WF_FP8: return ((r + 127) / 128) * ((c + 127) / 128) * sc;
    case DSV4_WF_FP4:
    case DSV4_WF_FP4L:
    case DSV4_WF_FP4B: return r * (c / 32) * sc;
    case DSV4_WF_I8: return r * 4;
    default: return 0;
    }
}

int dsv4_fp8_no_nan(const uint8_t *p, int64_t n) {
    /* a byte's low 7 bits plus one reach bit 7 only for 0x7F / 0xFF, and never carry into the
     * next byte; 512 bytes a block between the looks (the loop vectorizes) */
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7full, one = 0x0101010101010101ull, top = 0x8080808080808080ull;
    int64_t i = 0;
    for (; i + 512 <= n; i += 512) {
        uint64_t hit = 0;
        for (int k = 0; k < 64; k++) {
            uint64_t v;
            memcpy(&v, p + i + 8 * k, 8);
            hit |= ((v & low7) + one) & top;
        }
        if (hit) return 0;
    }
    for (; i < n; i++)
        if ((p[i] & 0x7f) == 0x7f) return 0;
    return 1;
}

int64_t dsv4_mat_weight_bytes(const dsv4_mat *w) { return dsv4_mat_bytes(w) - dsv4_mat_scale_bytes(w); }

int64_t dsv4_mat_bytes(const dsv4_mat *w) {
    const int64_t r = w->rows, c = w->cols;
    switch (w->fmt) {
    case DSV4_WF_F32: return r * c * 4;
    case DSV4_WF_F16:
    case DSV4_WF_BF16: return r * c * 2;
    case DSV4_WF_FP8:
    case DSV4_WF_I8: return r * c + dsv4_mat_scale_bytes(w);
    case DSV4_WF_FP4:
    case DSV4_WF_FP4L:
    case DSV4_WF_FP4B: return r * c / 2 + dsv4_mat_scale_bytes(w);
    default: return 0;
    }
}

int dsv4_mat_rows(const dsv4_mat *w, int64_t r0, int64_t n, dsv4_mat *view) {
    *view = *w;
    view->rows = n;
    const int64_t c = w->cols;
    switch (w->fmt) {
    case DSV4_WF_F32: view->w = (const float *)w->w + r0 * c; return 0;
    case DSV4_WF_F16:
    case DSV4_WF_BF16: view->w = (const uint16_t *)w->w + r0 * c; return 0;
    case DSV4_WF_FP8: {
        /* the view's row 0 must start a 128-row scale band, or the view lie inside one
         * (its rows then all use the band's scales, which the view starts at) */
        if (r0 % 128 && r0 % 128 + n > 128) return -1;
        const int64_t scols = (c + 127) / 128;
        view->w = (const uint8_t *)w->w + r0 * c;
        view->scale = (const uint8_t *)w->scale + (r0 / 128) * scols * (w->scale_is_f32 ? 4 : 1);
        return 0;
    }
    case DSV4_WF_FP4:
    case DSV4_WF_FP4L:
    case DSV4_WF_FP4B: { /* rows are whole lines (chunks) in every layout */
        const int64_t scols = c / 32;
        view->w = (const uint8_t *)w->w + r0 * (c / 2);
        view->scale = (const uint8_t *)w->scale + r0 * scols * (w->scale_is_f32 ? 4 : 1);
        return 0;
    }
    case DSV4_WF_I8:
        view->w = (const int8_t *)w->w + r0 * c;
        view->scale = (const float *)w->scale + r0;
        return 0;
    default: return -1;
    }
}
