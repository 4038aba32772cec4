/* fidelity_prep.c — fidelity mode P3 (spec/model.md §6) at engine create, and the parser of
 * its setting. What each item rounds is the mode's business (model/numerics_fid.c). */
#include "engine/fidelity_prep.h"

#include <ctype.h>
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

int dsv4_engine_prepare_fidelity(dsv4_engine *e, dsv4_err *err) {
    const unsigned fid = e->opts.fidelity;
    if (fid == 0) return DSV4_OK;
    const dsv4_config *c = e->cfg;
    if (fid & ~(unsigned)DSV4_FID_OFFICIAL)
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: unknown fidelity items 0x%x (DSV4_FID_F1..F5)", fid);
    if (e->opts.w8a8)
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: fidelity (P3) and w8a8 (P2) are different paths; "
                         "set one of them");
    const int n_blocks = c->num_hidden_layers + c->num_nextn_predict_layers;
    int rc = dsv4_numerics_fidelity_create(fid, c, e->blocks, n_blocks, e->opts.max_rows, &e->num_owned, err);
    if (!rc) e->num = e->num_owned;
    return rc;
}
