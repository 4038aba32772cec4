/* kv_dtype.c — the KV storage option (dsv4.h DSV4_KV_*): its names and the planner's
 * storage codes it stands for (cache.h, kernels/kv_rows.h).
 *
 * FP4 indexer keys are a flag on the row storage rather than an option of their own: the
 * one setting already names how each kind of cached row is stored ("fp8" = FP8-split rows
 * and BF16 keys), every path that carries it (the CLI, the server, the ranks' agreement,
 * KV files, the bench's cache bytes) carries the keys' format with it, and the official
 * release's cache is "fp8+fp4". */
#include <string.h>

#include "engine/engine.h"
#include "kernels/kv_rows.h"
#include "util/err.h"

static const struct { const char *name; int v; } names[] = {
    {"f32", DSV4_KV_F32}, {"bf16", DSV4_KV_BF16}, {"fp8", DSV4_KV_FP8},
    {"f32+fp4", DSV4_KV_F32 | DSV4_KV_IDX_FP4}, {"bf16+fp4", DSV4_KV_BF16 | DSV4_KV_IDX_FP4},
    {"fp8+fp4", DSV4_KV_FP8 | DSV4_KV_IDX_FP4}};

int dsv4_kv_dtype_parse(const char *s, int *dtype, dsv4_err *err) {
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        if (!strcmp(s, names[i].name)) {
            *dtype = names[i].v;
            return DSV4_OK;
        }
    return dsv4_fail(err, DSV4_ERR_ARG,
                     "kv dtype '%s': must be f32, bf16 or fp8, optionally +fp4 (FP4 indexer keys, "
                     "fidelity F3 only)", s ? s : "(null)");
}

int dsv4_kv_dtype_resolve(int dtype) { return dtype == DSV4_KV_DEFAULT ? DSV4_KV_BF16 : dtype; }

const char *dsv4_kv_dtype_name(int dtype) {
    const int d = dsv4_kv_dtype_resolve(dtype);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].v == d) return names[i].name;
    return "?";
}

int dsv4_kv_dtype_codes(int dtype, int *row, int *idx, dsv4_err *err) {
    const int d = dsv4_kv_dtype_resolve(dtype), fp4 = d & DSV4_KV_IDX_FP4;
    switch (d & ~DSV4_KV_IDX_FP4) {
    case DSV4_KV_F32: *row = *idx = DSV4_ROW_F32; break;
    case DSV4_KV_BF16: *row = *idx = DSV4_ROW_BF16; break;
    case DSV4_KV_FP8: *row = DSV4_ROW_FP8; *idx = DSV4_ROW_BF16; break;
    default:
        return dsv4_fail(err, DSV4_ERR_ARG,
                         "engine: kv_dtype = %d; must be DSV4_KV_F32, _BF16 or _FP8, optionally | "
                         "DSV4_KV_IDX_FP4", dtype);
    }
    if (fp4) *idx = DSV4_ROW_FP4;
    return DSV4_OK;
}
