/* kvfile.c — layout, encoding and validation of KV snapshot files (kvfile.h). */
#include "cache/kvfile.h"

#include <string.h>

#include "cache/geom.h"
#include "util/crc32c.h"
#include "util/err.h"

static const uint8_t MAGIC[8] = {'D', 'S', 'V', '4', 'K', 'V', 'C', 0};
#define FIXED_HEADER 144  /* bytes before the per-layer ratios */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

size_t dsv4_kv_header_size(const dsv4_kv_geom *g) { return FIXED_HEADER + 4 * (size_t)g->n_layers + 4; }

/* The u32 fields after the fingerprints, in file order. */
static void geom_fields(const dsv4_kv_geom *g, uint32_t f[10]) {
    const int v[10] = {g->n_layers, g->n_main, g->hd, g->dI, g->rd, g->win, g->align, g->hc, g->dim, g->vocab};
    for (int i = 0; i < 10; i++) f[i] = (uint32_t)v[i];
}
static const char *const FIELD_NAMES[10] = {"layers", "main layers", "hd", "dI", "rd", "win",
                                            "alignment", "hc", "D", "vocab"};

void dsv4_kv_header_encode(const dsv4_kv_geom *g, const dsv4_kv_header *h, uint8_t *out) {
    const size_t hb = dsv4_kv_header_size(g);
    memcpy(out, MAGIC, 8);
    put32(out + 8, DSV4_KV_VERSION);
    put32(out + 12, (uint32_t)hb);
    put64(out + 16, (uint64_t)h->n);
    put64(out + 24, (uint64_t)h->m);
    put32(out + 32, h->flags);
    put32(out + 36, h->kernel_level);
    memcpy(out + 40, g->config_hash, 32);
    memcpy(out + 72, g->weights, 32);
    uint32_t f[10];
    geom_fields(g, f);
    for (int i = 0; i < 10; i++) put32(out + 104 + 4 * i, f[i]);
    for (int l = 0; l < g->n_layers; l++) put32(out + FIXED_HEADER + 4 * l, (uint32_t)g->ratios[l]);
    put32(out + hb - 4, dsv4_crc32c(0, out, hb - 4));
}

/* The sections of layer l (up to 5) for header h; returns their count. */
static int layer_sections(const dsv4_kv_geom *g, const dsv4_kv_header *h, int l, dsv4_kv_section *out) {
    if (l >= g->n_main && !(h->flags & DSV4_KV_F_MTP)) return 0;
    const int64_t len = l < g->n_main ? h->n : h->m;
    const int r = g->ratios[l];
    int k = 0;
    const uint32_t rb = g->row_bytes ? g->row_bytes : (uint32_t)g->hd * 4;
    const uint32_t kb = g->key_bytes ? g->key_bytes : (uint32_t)g->dI * 4;
    out[k++] = (dsv4_kv_section){DSV4_KV_WIN, (uint32_t)l, dsv4_win_rows_read(g->win, len), rb, NULL};
    if (!r) return k;
    const int coff = dsv4_cfg_coff(r);
    const int64_t ring = dsv4_ring_rows_read(r, coff, len);
    out[k++] = (dsv4_kv_section){DSV4_KV_CMP, (uint32_t)l, len / r, rb, NULL};
    if (r == 4) out[k++] = (dsv4_kv_section){DSV4_KV_IDX, (uint32_t)l, len / 4, kb, NULL};
    out[k++] = (dsv4_kv_section){DSV4_KV_RING, (uint32_t)l, ring, (uint32_t)(2 * coff * g->hd * 4), NULL};
    if (r == 4) out[k++] = (dsv4_kv_section){DSV4_KV_IRING, (uint32_t)l, ring, (uint32_t)(4 * g->dI * 4), NULL};
    return k;
}

static dsv4_kv_section last_section(const dsv4_kv_geom *g) {
    return (dsv4_kv_section){DSV4_KV_LAST, 0, 1, (uint32_t)((1 + g->hc) * g->dim * 4), NULL};
}

int dsv4_kv_sections(const dsv4_kv_geom *g, const dsv4_kv_header *h, dsv4_kv_section *out) {
    int k = 0;
    for (int l = 0; l < g->n_layers; l++) k += layer_sections(g, h, l, out + k);
    out[k++] = last_section(g);
    return k;
}

int64_t dsv4_kv_file_size(const dsv4_kv_geom *g, const dsv4_kv_header *h) {
    int64_t size = (int64_t)dsv4_kv_header_size(g) + 4 * h->n + 4;  /* header, tokens + CRC */
    dsv4_kv_section sec[5];
    for (int l = 0; l < g->n_layers; l++) {
        const int k = layer_sections(g, h, l, sec);
        for (int i = 0; i < k; i++) size += 24 + sec[i].rows * sec[i].row_bytes;
    }
    const dsv4_kv_section last = last_section(g);
    return size + 24 + last.rows * last.row_bytes;
}

void dsv4_kv_section_head(const dsv4_kv_section *s, uint8_t out[20]) {
    put32(out, s->tag);
    put32(out + 4, s->layer);
    put64(out + 8, (uint64_t)s->rows);
    put32(out + 16, s->row_bytes);
}

static const char *fmt_name(uint32_t code) {
    switch (code) {
    case DSV4_KV_FMT_F32: return "F32";
    case DSV4_KV_FMT_BF16: return "BF16";
    case DSV4_KV_FMT_FP8: return "FP8-split";
    case DSV4_KV_FMT_FP4: return "FP4";
    default: return "unknown-format";
    }
}

int dsv4_kv_parse_header(const uint8_t *buf, size_t len, const dsv4_kv_geom *g,
                         dsv4_kv_header *h, dsv4_err *err) {
    const size_t hb = dsv4_kv_header_size(g);
    if (len < 16 || memcmp(buf, MAGIC, 8))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "not a dsv4 KV snapshot (bad magic or shorter than "
                         "16 bytes)");
    if (get32(buf + 8) != DSV4_KV_VERSION)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot version %u; this build reads version %d",
                         get32(buf + 8), DSV4_KV_VERSION);
    if (get32(buf + 12) != hb)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot header is %u bytes; this model's is %zu "
                         "(another layer count)", get32(buf + 12), hb);
    if (len < hb)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot truncated: %zu bytes, the header alone "
                         "is %zu", len, hb);
    if (get32(buf + hb - 4) != dsv4_crc32c(0, buf, hb - 4))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot header CRC mismatch (corrupted)");
    if (memcmp(buf + 40, g->config_hash, 32))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot config fingerprint differs: made with "
                         "another model configuration");
    if (memcmp(buf + 72, g->weights, 32))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot weights fingerprint differs: made with "
                         "other weights");
    uint32_t f[10];
    geom_fields(g, f);
    for (int i = 0; i < 10; i++)
        if (get32(buf + 104 + 4 * i) != f[i])
            return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot width mismatch: %s is %u in the "
                             "file, %u in this engine", FIELD_NAMES[i], get32(buf + 104 + 4 * i), f[i]);
    for (int l = 0; l < g->n_layers; l++)
        if (get32(buf + FIXED_HEADER + 4 * l) != (uint32_t)g->ratios[l])
            return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot width mismatch: layer %d has ratio "
                             "%u in the file, %d in this model", l, get32(buf + FIXED_HEADER + 4 * l),
                             g->ratios[l]);
    dsv4_kv_header x;
    x.n = (int64_t)(get64(buf + 16) & INT64_MAX);
    x.m = (int64_t)(get64(buf + 24) & INT64_MAX);
    x.flags = get32(buf + 32);
    x.kernel_level = get32(buf + 36);
    if (get64(buf + 16) > INT64_MAX || get64(buf + 24) > INT64_MAX)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot lengths out of range");
    if ((x.flags & DSV4_KV_DTYPE_MASK) != g->dtype_flags)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot stores %s rows and %s indexer keys; this "
                         "engine stores %s and %s (the KV dtype must match, e.g. --kv-dtype)",
                         fmt_name(x.flags >> 24 & 15), fmt_name(x.flags >> 28),
                         fmt_name(g->dtype_flags >> 24 & 15), fmt_name(g->dtype_flags >> 28));
    if ((x.flags & DSV4_KV_MATH_MASK) != g->math_flags)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot made with fidelity items 0x%x, W8A8 %u; "
                         "this engine runs 0x%x, %u", (x.flags >> 8) & 0xff, (x.flags >> 16) & 3,
                         (g->math_flags >> 8) & 0xff, (g->math_flags >> 16) & 3);
    if (!(x.flags & DSV4_KV_F_LAST) || (x.flags & ~(DSV4_KV_F_MTP | DSV4_KV_F_LAST |
                                                    DSV4_KV_MATH_MASK | DSV4_KV_DTYPE_MASK)))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot flags 0x%08x: unknown bits or no LAST "
                         "section", x.flags);
    if (x.n < 1 || x.n % g->align || x.n > g->max_context)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot length n = %lld is not a positive "
                         "multiple of the alignment %d within max_context %lld", (long long)x.n,
                         g->align, (long long)g->max_context);
    if ((x.flags & DSV4_KV_F_MTP) ? x.m != x.n - 1 : x.m != 0)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot MTP length m = %lld does not match n = "
                         "%lld (MTP section %s)", (long long)x.m, (long long)x.n,
                         (x.flags & DSV4_KV_F_MTP) ? "present" : "absent");
    *h = x;
    return DSV4_OK;
}

int dsv4_kv_parse(const uint8_t *buf, size_t len, const dsv4_kv_geom *g, dsv4_kv_view *v,
                  dsv4_err *err) {
    int rc = dsv4_kv_parse_header(buf, len, g, &v->h, err);
    if (rc) return rc;
    const int64_t want = dsv4_kv_file_size(g, &v->h);
    if ((int64_t)len != want)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot %s: %zu bytes, n = %lld needs %lld",
                         (int64_t)len < want ? "truncated" : "has trailing bytes", len,
                         (long long)v->h.n, (long long)want);
    size_t off = dsv4_kv_header_size(g);
    const size_t tb = 4 * (size_t)v->h.n;
    v->tokens = buf + off;
    if (get32(buf + off + tb) != dsv4_crc32c(0, buf + off, tb))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot tokens CRC mismatch (corrupted)");
    for (int64_t t = 0; t < v->h.n; t++) {
        const uint32_t id = get32(v->tokens + 4 * t);
        if (id >= (uint32_t)g->vocab)
            return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot token %lld = %u is outside the "
                             "vocabulary (%d)", (long long)t, id, g->vocab);
    }
    off += tb + 4;
    v->n_sections = dsv4_kv_sections(g, &v->h, v->sec);
    for (int i = 0; i < v->n_sections; i++) {
        dsv4_kv_section *s = &v->sec[i];
        const size_t pay = (size_t)s->rows * s->row_bytes;  /* sizes add up: checked above */
        uint8_t head[20];
        dsv4_kv_section_head(s, head);
        if (memcmp(buf + off, head, 20))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot section %d: tag %u layer %u rows "
                             "%llu row bytes %u; expected tag %u layer %u rows %lld row bytes %u", i,
                             get32(buf + off), get32(buf + off + 4),
                             (unsigned long long)get64(buf + off + 8), get32(buf + off + 16), s->tag,
                             s->layer, (long long)s->rows, s->row_bytes);
        if (get32(buf + off + 20 + pay) != dsv4_crc32c(0, buf + off, 20 + pay))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot section %d (tag %u, layer %u) CRC "
                             "mismatch (corrupted)", i, s->tag, s->layer);
        s->data = buf + off + 20;
        off += 24 + pay;
    }
    return DSV4_OK;
}
