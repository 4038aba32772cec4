/* fidelity_prep.c — fidelity mode P3 at engine create, and the parser of its setting.
 *
 * F1 is decided by role, not by the stored format: the release's FP8/FP4 projections get
 * DSV4_MAT_FID_ACTQ even in a BF16 test checkpoint (the goldens), so that the simulation
 * is the official graph's on any copy of the weights; wo_a, which the official conversion
 * dequantizes to BF16, and indexer weights_proj get DSV4_MAT_FID_BF16OUT (F4 only). The
 * compressor projections, router gate, embedding and head stay FP32 (model.md §6 F4).
 * F5's BF16 weighted intermediate is the W2 input rounding (DSV4_MAT_FID_BF16IN on the
 * shared and routed w2), its BF16 sum one line after the combine in moe.c and in the
 * expert-parallel combine (dist/ep.c).
 */
#include "engine/fidelity_prep.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

int dsv4_fidelity_parse(const char *s, unsigned *items, dsv4_err *err) {
    *items = 0;
    if (!s || !*s) return dsv4_fail(err, DSV4_ERR_ARG, "fidelity: empty setting (official, none or F1,..,F5)");
    if (!strcmp(s, "official")) { *items = DSV4_FID_OFFICIAL; return DSV4_OK; }
    if (!strcmp(s, "none")) return DSV4_OK;
    unsigned v = 0;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, ',');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n != 2 || toupper((unsigned char)p[0]) != 'F' || p[1] < '1' || p[1] > '5')
            return dsv4_fail(err, DSV4_ERR_ARG, "fidelity: unknown item '%.*s' in '%s' (official, none or "
                             "a comma list of F1..F5)", (int)(n < 32 ? n : 32), p, s);
        v |= 1u << (p[1] - '1');
        p += n;
        if (*p == ',') {
            p++;
            if (!*p) return dsv4_fail(err, DSV4_ERR_ARG, "fidelity: trailing comma in '%s'", s);
        }
    }
    *items = v;
    return DSV4_OK;
}

static void mark(dsv4_mat *m, unsigned role) { m->fid_role = role; }

int dsv4_engine_prepare_fidelity(dsv4_engine *e, dsv4_err *err) {
    const unsigned fid = e->opts.fidelity;
    if (fid == 0) return DSV4_OK;
    const dsv4_config *c = e->cfg;
    if (fid & ~(unsigned)DSV4_FID_OFFICIAL)
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: unknown fidelity items 0x%x (DSV4_FID_F1..F5)", fid);
    if (e->opts.w8a8)
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: fidelity (P3) and w8a8 (P2) are different paths; "
                         "set one of them");
    const int dI = c->index_head_dim;
    if ((fid & DSV4_FID_F3) && (dI <= 0 || (dI & (dI - 1))))
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: fidelity F3 needs a power-of-two indexer head dim "
                         "for its Hadamard rotation (index_head_dim %d)", dI);
    int rc = dsv4_kctx_set_fidelity(e->k, fid, err);
    if (rc) return rc;
    const int E = c->n_routed_experts;
    const int n_blocks = c->num_hidden_layers + c->num_nextn_predict_layers;
    for (int l = 0; l < n_blocks; l++) {
        dsv4_block_w *b = &e->blocks[l];
        dsv4_mat *actq[] = {&b->wq_a, &b->wq_b, &b->wkv, &b->wo_b, &b->idx_wq_b, &b->sh_w1,
                            &b->sh_w2, &b->sh_w3, &b->e_proj, &b->h_proj};
        for (size_t i = 0; i < sizeof actq / sizeof actq[0]; i++) mark(actq[i], DSV4_MAT_FID_ACTQ);
        mark(&b->sh_w2, DSV4_MAT_FID_ACTQ | DSV4_MAT_FID_BF16IN);
        /* F4: their inputs are RMSNorm outputs (q_norm; MTP enorm, hnorm) the official graph
         * holds in BF16 */
        mark(&b->wq_b, DSV4_MAT_FID_ACTQ | DSV4_MAT_FID_BF16IN_F4);
        mark(&b->idx_wq_b, DSV4_MAT_FID_ACTQ | DSV4_MAT_FID_BF16IN_F4);
        mark(&b->e_proj, DSV4_MAT_FID_ACTQ | DSV4_MAT_FID_BF16IN_F4);
        mark(&b->h_proj, DSV4_MAT_FID_ACTQ | DSV4_MAT_FID_BF16IN_F4);
        mark(&b->wo_a, DSV4_MAT_FID_BF16OUT | DSV4_MAT_FID_BF16IN_F4); /* F4: attention output in BF16 */
        mark(&b->idx_weights_proj, DSV4_MAT_FID_BF16OUT);
        if (!(b->w1 && b->w2 && b->w3 && E > 0)) continue;
        dsv4_mat *arr = malloc(sizeof(dsv4_mat) * 3 * (size_t)E); /* (3, E): w1, w3, w2 */
        float **owned = arr ? realloc(e->owned, (size_t)(e->n_owned + 1) * sizeof(float *)) : NULL;
        if (!owned) {
            free(arr);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "fidelity: out of memory");
        }
        e->owned = owned;
        e->owned[e->n_owned++] = (float *)arr;
        memcpy(arr, b->w1, sizeof(dsv4_mat) * (size_t)E);
        memcpy(arr + E, b->w3, sizeof(dsv4_mat) * (size_t)E);
        memcpy(arr + 2 * E, b->w2, sizeof(dsv4_mat) * (size_t)E);
        b->w1 = arr;
        b->w3 = arr + E;
        b->w2 = arr + 2 * E;
        for (int x = 0; x < 3 * E; x++) mark(&arr[x], DSV4_MAT_FID_ACTQ | (x >= 2 * E ? DSV4_MAT_FID_BF16IN : 0));
    }
    return DSV4_OK;
}
