/* fuzz_kvfile.c — libFuzzer target: any byte string through the KV snapshot parser
 * (cache/kvfile.c, spec/serving.md §g) for a fixed small geometry: layers with ratios
 * 4, 128 and an MTP layer of ratio 4; hd 8, dI 4, win 4, hc 2, D 8, vocab 16, A 128.
 *
 * The first input byte picks how much of the framing the harness re-seals before parsing,
 * so that mutations reach past the checksums: bit 0 the header CRC, bit 1 the tokens' and
 * every section's CRC (walking the sections as the image claims them, within bounds).
 * An accepted image must be self-consistent (aligned n, every payload inside the input);
 * a rejected one must say why. tests/fuzz/make_kvfile_seed.py writes the seed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvfile.h"
#include "util/crc32c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void geom(dsv4_kv_geom *g) {
    memset(g, 0, sizeof *g);
    g->n_layers = 3;
    g->n_main = 2;
    g->hd = 8;
    g->dI = 4;
    g->rd = 4;
    g->win = 4;
    g->align = 128;
    g->hc = 2;
    g->dim = 8;
    g->vocab = 16;
    g->ratios[0] = 4;
    g->ratios[1] = 128;
    g->ratios[2] = 4;
    memset(g->config_hash, 0x11, 32);
    memset(g->weights, 0x22, 32);
    g->max_context = 1024;
}

static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void reseal(uint8_t *b, size_t len, size_t hb, int mode) {
    if ((mode & 1) && len >= hb) {
        const uint32_t c = dsv4_crc32c(0, b, hb - 4);
        memcpy(b + hb - 4, &c, 4);
    }
    if (!(mode & 2) || len < hb) return;
    const uint64_t n = rd64(b + 16);
    if (n > 4096 || hb + 4 * n + 4 > len) return;
    size_t off = hb;
    uint32_t c = dsv4_crc32c(0, b + off, 4 * n);
    memcpy(b + off + 4 * n, &c, 4);
    off += 4 * n + 4;
    while (off + 24 <= len) {
        const uint64_t pay = rd64(b + off + 8) * (uint64_t)rd32(b + off + 16);
        if (pay > len - off - 24) return;
        c = dsv4_crc32c(0, b + off, 20 + pay);
        memcpy(b + off + 20 + pay, &c, 4);
        off += 24 + pay;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    dsv4_kv_geom *g = malloc(sizeof *g);
    dsv4_kv_view *v = malloc(sizeof *v);
    uint8_t *b = malloc(size);  /* the image, exactly size - 1 bytes visible to the parser */
    geom(g);
    memcpy(b, data + 1, size - 1);
    const size_t len = size - 1;
    reseal(b, len, dsv4_kv_header_size(g), data[0]);
    dsv4_err err;
    memset(&err, 0, sizeof err);
    if (dsv4_kv_parse(b, len, g, v, &err) != 0) {
        if (err.msg[0] == 0 || memchr(err.msg, 0, sizeof err.msg) == NULL) __builtin_trap();
    } else {
        if (v->h.n < 1 || v->h.n % g->align || v->h.n > g->max_context) __builtin_trap();
        for (int i = 0; i < v->n_sections; i++) {
            const dsv4_kv_section *s = &v->sec[i];
            if (s->data < b || s->data + (size_t)s->rows * s->row_bytes > b + len) __builtin_trap();
        }
    }
    free(b); free(v); free(g);
    return 0;
}
