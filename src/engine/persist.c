/* persist.c — saving snapshots to KV files and loading them back (spec/serving.md §g; the
 * format is cache/kvfile.h).
 *
 * Saving is crash-safe: the file is written beside its destination as NAME.tmp.PID,
 * flushed to the disk (fsync), renamed over NAME (atomic within a directory) and the
 * directory is synced; a process killed at any point leaves NAME either as it was or
 * complete. Loading reads and validates the whole file (magic, version, fingerprints,
 * widths, dtypes, modes, alignment, size, every CRC) before it builds anything, and builds
 * a snapshot outside the pools: only dsv4_snapshot_restore takes pages.
 */
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/kvfile.h"
#include "engine/engine.h"
#include "engine/prefix.h"
#include "kernels/kctx.h"
#include "kernels/kv_rows.h"
#include "util/crc32c.h"
#include "util/err.h"

/* Rows go to and from the file as the host's floats and ints. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "KV files are little-endian; this host is not"
#endif

/* What this engine expects of a file. */
static int engine_geom(dsv4_engine *e, dsv4_kv_geom *g, dsv4_err *err) {
    const dsv4_cache_plan *p = dsv4_cache_get_plan(e->cache);
    const dsv4_config *c = e->cfg;
    memset(g, 0, sizeof *g);
    g->n_layers = p->n_layers;
    g->n_main = p->n_main_layers;
    g->hd = p->hd;
    g->dI = p->dI;
    g->rd = c->qk_rope_head_dim;
    g->win = p->win;
    g->align = dsv4_engine_alignment(e);
    g->hc = c->hc_mult;
    g->dim = c->hidden_size;
    g->vocab = c->vocab_size;
    for (int l = 0; l < p->n_layers; l++) g->ratios[l] = c->compress_ratios[l];
    g->math_flags = (e->opts.fidelity & 0xffu) << 8 | ((unsigned)e->opts.w8a8 & 3u) << 16;
    /* rows go to the file as the pools store them */
    const int rf = p->opts.row_bytes_per_value, kf = p->opts.idx_bytes_per_value;
    g->dtype_flags = DSV4_KV_DTYPE_FLAGS(rf == DSV4_ROW_BF16 ? DSV4_KV_FMT_BF16 : rf == DSV4_ROW_FP8 ? DSV4_KV_FMT_FP8
                                                                                           : DSV4_KV_FMT_F32,
                                         kf == DSV4_ROW_BF16 ? DSV4_KV_FMT_BF16 : kf == DSV4_ROW_FP4 ? DSV4_KV_FMT_FP4
                                                                                       : DSV4_KV_FMT_F32);
    g->row_bytes = (uint32_t)p->win_row_bytes;
    g->key_bytes = (uint32_t)p->idx_row_bytes;
    g->max_context = e->opts.max_context;
    int rc = dsv4_model_config_hash(e->model, g->config_hash, err);
    if (rc) return rc;
    if (!e->prefix->have_weights) {  /* samples the checkpoint: once per engine */
        if ((rc = dsv4_model_fingerprint(e->model, 0, e->prefix->weights, err))) return rc;
        e->prefix->have_weights = 1;
    }
    memcpy(g->weights, e->prefix->weights, 32);
    return DSV4_OK;
}

/* The rows of section sec as stored in the snapshot; NULL if it does not hold them. */
static void *section_row(dsv4_engine *e, const dsv4_snapshot *s, const dsv4_kv_section *sec,
                                int64_t i) {
    const dsv4_cache_plan *p = dsv4_cache_get_plan(e->cache);
    const int l = (int)sec->layer;
    const int64_t len = l < p->n_main_layers ? s->n : s->m;
    switch (sec->tag) {
    case DSV4_KV_WIN: return dsv4_cache_snap_win_row(e->cache, s->cs, l, len - sec->rows + i);
    case DSV4_KV_CMP: return dsv4_cache_snap_cmp_row(e->cache, s->cs, l, i);
    case DSV4_KV_IDX: return dsv4_cache_snap_idx_row(e->cache, s->cs, l, i);
    case DSV4_KV_RING: return dsv4_cache_snap_ring_row(e->cache, s->cs, l, 0, len - sec->rows + i);
    case DSV4_KV_IRING: return dsv4_cache_snap_ring_row(e->cache, s->cs, l, 1, len - sec->rows + i);
    default: return NULL;
    }
}

/* fwrite that keeps a running CRC and remembers a failure. */
typedef struct {
    FILE *f;
    uint32_t crc;
    int failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    w->crc = dsv4_crc32c(w->crc, p, n);
    if (!w->failed && fwrite(p, 1, n, w->f) != n) w->failed = 1;
}
static void put_crc(writer *w) {
    const uint32_t c = w->crc;
    const uint8_t b[4] = {(uint8_t)c, (uint8_t)(c >> 8), (uint8_t)(c >> 16), (uint8_t)(c >> 24)};
    if (!w->failed && fwrite(b, 1, 4, w->f) != 4) w->failed = 1;
    w->crc = 0;
}

/* Writes the whole file to f; DSV4_ERR_IO on a short write. */
static int write_snapshot(dsv4_engine *e, const dsv4_snapshot *s, const dsv4_kv_geom *g,
                          const dsv4_kv_header *h, FILE *f, dsv4_err *err) {
    writer w = {f, 0, 0};
    const size_t hb = dsv4_kv_header_size(g);
    uint8_t *head = malloc(hb);
    dsv4_kv_section *sec = malloc(DSV4_KV_MAX_SECTIONS * sizeof *sec);
    if (!head || !sec) {
        free(head); free(sec);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "KV save: out of memory");
    }
    dsv4_kv_header_encode(g, h, head);
    if (fwrite(head, 1, hb, f) != hb) w.failed = 1;
    put(&w, s->tokens, (size_t)s->n * sizeof *s->tokens);
    put_crc(&w);
    const int ns = dsv4_kv_sections(g, h, sec);
    int rc = DSV4_OK;
    for (int i = 0; i < ns && !rc && !w.failed; i++) {
        uint8_t sh[20];
        dsv4_kv_section_head(&sec[i], sh);
        put(&w, sh, 20);
        if (sec[i].tag == DSV4_KV_LAST) {
            put(&w, s->hidden, (size_t)g->dim * sizeof(float));
            put(&w, s->streams, (size_t)g->hc * g->dim * sizeof(float));
        }
        for (int64_t r = 0; sec[i].tag != DSV4_KV_LAST && r < sec[i].rows && !rc; r++) {
            const void *row = section_row(e, s, &sec[i], r);
            if (!row)
                rc = dsv4_fail(err, DSV4_ERR_STATE, "KV save: the snapshot holds no row %lld of "
                               "section tag %u layer %u", (long long)r, sec[i].tag, sec[i].layer);
            else put(&w, row, sec[i].row_bytes);
        }
        put_crc(&w);
    }
    free(head); free(sec);
    if (!rc && w.failed) rc = dsv4_fail(err, DSV4_ERR_IO, "KV save: write failed");
    return rc;
}

/* fsync of the directory holding path, so that the rename itself is durable. */
static int sync_dir(const char *path) {
    char *copy = strdup(path);
    if (!copy) return -1;
    const int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0) return -1;
    const int rc = fsync(fd);
    close(fd);
    return rc;
}

int dsv4_snapshot_save(dsv4_engine *e, const dsv4_snapshot *s, const char *path, dsv4_err *err) {
    if (!s || !path) return dsv4_fail(err, DSV4_ERR_ARG, "KV save: NULL argument");
    dsv4_kv_geom *g = malloc(sizeof *g);
    if (!g) return dsv4_fail(err, DSV4_ERR_NOMEM, "KV save: out of memory");
    int rc = engine_geom(e, g, err);
    if (rc) { free(g); return rc; }
    dsv4_kv_header h = {s->n, e->opts.mtp ? s->m : 0, DSV4_KV_F_LAST | g->math_flags | g->dtype_flags,
                        (uint32_t)dsv4_kctx_simd(e->k)};
    if (e->opts.mtp) h.flags |= DSV4_KV_F_MTP;
    const size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) { free(g); return dsv4_fail(err, DSV4_ERR_NOMEM, "KV save: out of memory"); }
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        rc = dsv4_fail(err, DSV4_ERR_IO, "KV save: cannot create %s: %m", tmp);
        if (fd >= 0) close(fd);
        free(tmp); free(g);
        return rc;
    }
    rc = write_snapshot(e, s, g, &h, f, err);
    if (!rc && (fflush(f) || fsync(fileno(f))))
        rc = dsv4_fail(err, DSV4_ERR_IO, "KV save: cannot flush %s: %m", tmp);
    if (fclose(f) && !rc) rc = dsv4_fail(err, DSV4_ERR_IO, "KV save: cannot close %s: %m", tmp);
    if (!rc && rename(tmp, path))
        rc = dsv4_fail(err, DSV4_ERR_IO, "KV save: cannot rename %s to %s: %m", tmp, path);
    if (rc) unlink(tmp);
    else if (sync_dir(path)) rc = dsv4_fail(err, DSV4_ERR_IO, "KV save: cannot sync the directory of %s: %m", path);
    free(tmp); free(g);
    return rc;
}

/* Reads path whole after checking its header and size against g. */
static int read_image(const char *path, const dsv4_kv_geom *g, uint8_t **buf, size_t *len,
                      dsv4_err *err) {
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return dsv4_fail(err, DSV4_ERR_IO, "cannot open: %m");
    struct stat st;
    int rc = DSV4_OK;
    const size_t hb = dsv4_kv_header_size(g);
    uint8_t *b = NULL;
    if (fstat(fileno(f), &st) || st.st_size < 0) {
        rc = dsv4_fail(err, DSV4_ERR_IO, "cannot stat: %m");
        goto done;
    }
    const size_t size = (size_t)st.st_size;
    const size_t first = size < hb ? size : hb;
    b = malloc(first ? first : 1);
    if (!b) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory"); goto done; }
    if (fread(b, 1, first, f) != first) { rc = dsv4_fail(err, DSV4_ERR_IO, "read error"); goto done; }
    dsv4_kv_header h;
    if ((rc = dsv4_kv_parse_header(b, first, g, &h, err))) goto done;
    const int64_t want = dsv4_kv_file_size(g, &h);
    if ((int64_t)size != want) {
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "KV snapshot %s: %zu bytes, n = %lld needs %lld",
                       (int64_t)size < want ? "truncated" : "has trailing bytes", size,
                       (long long)h.n, (long long)want);
        goto done;
    }
    uint8_t *all = realloc(b, size);
    if (!all) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory (%zu bytes)", size); goto done; }
    b = all;
    if (fread(b + first, 1, size - first, f) != size - first) {
        rc = dsv4_fail(err, DSV4_ERR_IO, "read error");
        goto done;
    }
    *buf = b;
    *len = size;
    b = NULL;
done:
    free(b);
    fclose(f);
    return rc;
}

/* Copies the validated file image into a new snapshot outside the pools. */
static int build_snapshot(dsv4_engine *e, const dsv4_kv_view *v, dsv4_snapshot **out, dsv4_err *err) {
    const dsv4_cache_plan *p = dsv4_cache_get_plan(e->cache);
    const int D = e->cfg->hidden_size, hc = e->cfg->hc_mult;
    const int64_t n = v->h.n, m = e->opts.mtp ? v->h.m : 0;  /* an MTP section is unused without MTP */
    dsv4_cache_snap *cs;
    int rc = dsv4_cache_snap_new(e->cache, n, m, &cs, err);
    if (rc) return rc;
    const uint8_t *last = NULL;  /* hidden (D), streams (hc, D) */
    dsv4_snapshot tmp = {.cs = cs, .n = n, .m = m};  /* for section_row */
    for (int i = 0; i < v->n_sections; i++) {
        const dsv4_kv_section *sec = &v->sec[i];
        if (sec->tag == DSV4_KV_LAST) { last = sec->data; continue; }
        if ((int)sec->layer >= p->n_main_layers && !e->opts.mtp) continue;
        for (int64_t r = 0; r < sec->rows; r++) {
            void *row = section_row(e, &tmp, sec, r);  /* cs is ours: every block private */
            if (!row) {
                dsv4_cache_snap_free(e->cache, cs);
                return dsv4_fail(err, DSV4_ERR_STATE, "KV load: no row %lld for section tag %u "
                                 "layer %u", (long long)r, sec->tag, sec->layer);
            }
            memcpy(row, sec->data + (size_t)r * sec->row_bytes, sec->row_bytes);
        }
    }
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    float *hs = malloc((size_t)(1 + hc) * D * sizeof(float));  /* hidden (D), streams (hc, D) */
    if (!tok || !hs) {
        free(tok); free(hs);
        dsv4_cache_snap_free(e->cache, cs);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "KV load: out of memory");
    }
    memcpy(tok, v->tokens, (size_t)n * sizeof *tok);
    memcpy(hs, last, (size_t)(1 + hc) * D * sizeof(float));
    rc = dsv4_snapshot_wrap(e, cs, tok, hs, hs + D, 0, out, err);
    free(tok); free(hs);
    return rc;
}

int dsv4_snapshot_load(dsv4_engine *e, const char *path, dsv4_snapshot **out, dsv4_err *err) {
    if (!path || !out) return dsv4_fail(err, DSV4_ERR_ARG, "KV load: NULL argument");
    *out = NULL;
    int rc = dsv4_engine_need_caches(e, "KV load", err);
    if (rc) return rc;
    dsv4_kv_geom *g = malloc(sizeof *g);
    dsv4_kv_view *v = malloc(sizeof *v);
    uint8_t *buf = NULL;
    size_t len = 0;
    rc = !g || !v ? dsv4_fail(err, DSV4_ERR_NOMEM, "KV load: out of memory") : engine_geom(e, g, err);
    if (!rc) rc = read_image(path, g, &buf, &len, err);
    if (!rc) rc = dsv4_kv_parse(buf, len, g, v, err);
    if (!rc && e->opts.mtp && !(v->h.flags & DSV4_KV_F_MTP))
        rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "KV snapshot has no MTP section and this engine "
                       "runs MTP (its MTP cache could not follow)");
    if (!rc) rc = build_snapshot(e, v, out, err);
    if (rc) dsv4_err_prefix(err, "%s", path);
    free(buf); free(v); free(g);
    return rc;
}
