/* test_model_stwrite.c — the safetensors writer, read back with the reader. */
#include <stdint.h>

#include "model/safetensors.h"
#include "model/st_write.h"
#include "model_tmp.h"
#include "test.h"

static char dir[256];

static void roundtrip(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    dsv4_err err = {0};
    dsv4_stw *w = dsv4_stw_new();
    const float f[6] = {1, -2, 3.5f, 0, 1e-30f, 7};
    const uint16_t h[5] = {0x3f80, 0xbf80, 0x4000, 0, 0x7f80};
    const uint8_t u[7] = {9, 8, 7, 6, 5, 4, 3};
    const int64_t s23[2] = {2, 3}, s5 = 5, s7 = 7, s0 = 0;
    CHECK(dsv4_stw_add(w, "f32", DSV4_ST_F32, 2, s23, NULL, &err) == 0);  /* streamed */
    CHECK(dsv4_stw_add(w, "bf16", DSV4_ST_BF16, 1, &s5, h, &err) == 0);   /* by pointer */
    CHECK(dsv4_stw_add(w, "empty", DSV4_ST_F32, 1, &s0, NULL, &err) == 0);
    CHECK(dsv4_stw_add(w, "q\"uote\\d", DSV4_ST_U8, 1, &s7, NULL, &err) == 0);
    CHECK(dsv4_stw_add(w, "scalar", DSV4_ST_U8, 0, NULL, u, &err) == 0); /* shape [] = 1 element */
    CHECK(dsv4_stw_meta(w, "format", "pt", &err) == 0);
    const uint64_t planned = dsv4_stw_file_size(w);
    CHECK(dsv4_stw_open(w, path, &err) == 0);
    CHECK(!strcmp(dsv4_stw_current(w), "f32"));
    /* uneven pieces across the tensor boundary, pointer tensors in between */
    const uint8_t *fb = (const uint8_t *)f;
    CHECK(dsv4_stw_write(w, fb, 1, &err) == 0);
    CHECK(dsv4_stw_write(w, fb + 1, 5, &err) == 0);
    CHECK(dsv4_stw_write(w, fb + 6, 18, &err) == 0);
    CHECK(!strcmp(dsv4_stw_current(w), "q\"uote\\d"));
    CHECK(dsv4_stw_write(w, u, 7, &err) == 0);
    CHECK(dsv4_stw_current(w) == NULL);
    CHECK(dsv4_stw_write(w, u, 1, &err) == DSV4_ERR_ARG); /* past the end */
    CHECK(dsv4_stw_close(w, &err) == 0);
    dsv4_stw_free(w);

    size_t n = 0;
    char *raw = read_all(path, &n);
    CHECK(raw && n == planned);
    uint64_t hl = 0;
    for (int i = 0; raw && i < 8; i++) hl |= (uint64_t)(uint8_t)raw[i] << (8 * i);
    CHECK(hl % 8 == 0 && 8 + hl + 24 + 10 + 7 + 1 == n);
    free(raw);

    dsv4_st_set *st = NULL;
    CHECK_MSG(dsv4_st_open_file(path, &st, &err) == 0, "%s", err.msg);
    if (!st) return;
    CHECK(dsv4_st_count(st) == 5);
    const dsv4_st_tensor *t = dsv4_st_find(st, "f32");
    CHECK(t && t->dtype == DSV4_ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
          t->nbytes == 24 && !memcmp(t->data, f, 24));
    t = dsv4_st_find(st, "bf16");
    CHECK(t && t->dtype == DSV4_ST_BF16 && t->shape[0] == 5 && !memcmp(t->data, h, 10));
    t = dsv4_st_find(st, "q\"uote\\d");
    CHECK(t && t->dtype == DSV4_ST_U8 && t->nbytes == 7 && !memcmp(t->data, u, 7));
    t = dsv4_st_find(st, "empty");
    CHECK(t && t->nbytes == 0);
    t = dsv4_st_find(st, "scalar");
    CHECK(t && t->ndim == 0 && t->nbytes == 1 && t->data[0] == 9);
    dsv4_st_close(st);
}

static void misuse(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    dsv4_err err = {0};
    const int64_t s4 = 4;
    dsv4_stw *w = dsv4_stw_new();
    CHECK(dsv4_stw_add(w, "x", DSV4_ST_F32, 1, &s4, NULL, &err) == 0);
    CHECK(dsv4_stw_add(w, "", DSV4_ST_F32, 1, &s4, NULL, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_stw_add(w, "__metadata__", DSV4_ST_F32, 1, &s4, NULL, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_stw_add(w, "y", DSV4_ST_N_DTYPES, 1, &s4, NULL, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_stw_open(w, path, &err) == 0);
    CHECK(dsv4_stw_add(w, "z", DSV4_ST_F32, 1, &s4, NULL, &err) == DSV4_ERR_STATE);
    const float v[2] = {1, 2};
    CHECK(dsv4_stw_write(w, v, 8, &err) == 0);
    CHECK(dsv4_stw_close(w, &err) == DSV4_ERR_STATE);   /* 8 of 16 bytes */
    CHECK_MSG(strstr(err.msg, "'x' has 8 of 16 bytes") != NULL, "%s", err.msg);
    dsv4_stw_free(w);

    w = dsv4_stw_new();
    CHECK(dsv4_stw_add(w, "x", DSV4_ST_F32, 1, &s4, NULL, &err) == 0);
    CHECK(dsv4_stw_open(w, "/nonexistent-dir/x.safetensors", &err) == DSV4_ERR_IO);
    CHECK(strstr(err.msg, "/nonexistent-dir/x.safetensors") != NULL);
    CHECK(dsv4_stw_write(w, v, 4, &err) != 0);
    dsv4_stw_free(w);
}

int main(void) {
    CHECK(tmp_dir(dir, sizeof dir, "stw") != NULL);
    roundtrip();
    misuse();
    tmp_rm(dir);
    return test_report();
}
