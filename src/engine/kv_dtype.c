/* kv_dtype.c — the KV storage option (dsv4.h DSV4_KV_*): its names and the planner's
 * storage codes it stands for (cache.h, kernels/kv_rows.h). */
#include <string.h>

#include "engine/engine.h"
#include "kernels/kv_rows.h"
#include "util/err.h"

int dsv4_kv_dtype_parse(const char *s, int *dtype, dsv4_err *err) {
    static const struct { const char *name; int v; } names[] = {
        {"f32", DSV4_KV_F32}, {"bf16", DSV4_KV_BF16}, {"fp8", DSV4_KV_FP8}};
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        if (!strcmp(s, names[i].name)) {
            *dtype = names[i].v;
            return DSV4_OK;
        }
    return dsv4_fail(err, DSV4_ERR_ARG, "kv dtype '%s': must be f32, bf16 or fp8", s ? s : "(null)");
}

int dsv4_kv_dtype_resolve(int dtype) { return dtype == DSV4_KV_DEFAULT ? DSV4_KV_BF16 : dtype; }

const char *dsv4_kv_dtype_name(int dtype) {
    switch (dsv4_kv_dtype_resolve(dtype)) {
    case DSV4_KV_F32: return "f32";
    case DSV4_KV_BF16: return "bf16";
    case DSV4_KV_FP8: return "fp8";
    default: return "?";
    }
}

int dsv4_kv_dtype_codes(int dtype, int *row, int *idx, dsv4_err *err) {
    switch (dsv4_kv_dtype_resolve(dtype)) {
    case DSV4_KV_F32: *row = *idx = DSV4_ROW_F32; return DSV4_OK;
    case DSV4_KV_BF16: *row = *idx = DSV4_ROW_BF16; return DSV4_OK;
    case DSV4_KV_FP8: *row = DSV4_ROW_FP8; *idx = DSV4_ROW_BF16; return DSV4_OK;
    default:
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: kv_dtype = %d; must be DSV4_KV_F32, _BF16 or _FP8",
                         dtype);
    }
}
