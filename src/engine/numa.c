/* numa.c — the NUMA placement option (dsv4.h DSV4_NUMA_*): its names, what it resolves to
 * on this machine, and the interleaving it asks for (util/numa.h). */
#include <string.h>

#include "engine/engine.h"
#include "util/err.h"
#include "util/numa.h"

int dsv4_numa_parse(const char *s, int *mode, dsv4_err *err) {
    static const struct { const char *name; int v; } names[] = {
        {"auto", DSV4_NUMA_AUTO}, {"none", DSV4_NUMA_NONE}, {"interleave", DSV4_NUMA_INTERLEAVE}};
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        if (!strcmp(s, names[i].name)) {
            *mode = names[i].v;
            return DSV4_OK;
        }
    return dsv4_fail(err, DSV4_ERR_ARG, "numa '%s': must be auto, none or interleave", s ? s : "(null)");
}

const char *dsv4_numa_name(int mode) {
    switch (mode) {
    case DSV4_NUMA_AUTO: return "auto";
    case DSV4_NUMA_NONE: return "none";
    case DSV4_NUMA_INTERLEAVE: return "interleave";
    default: return "?";
    }
}

int dsv4_engine_numa_nodes(const dsv4_engine *e) { return e->numa_nodes; }

int dsv4_engine_numa_begin(dsv4_engine *e, void *saved, int *restore, dsv4_err *err) {
    *restore = 0;
    int *mode = &e->opts.numa;
    if (*mode != DSV4_NUMA_AUTO && *mode != DSV4_NUMA_NONE && *mode != DSV4_NUMA_INTERLEAVE)
        return dsv4_fail(err, DSV4_ERR_ARG, "engine: numa = %d; must be DSV4_NUMA_AUTO, _NONE or _INTERLEAVE", *mode);
    e->numa_nodes = dsv4_numa_nodes();
    /* one node: nothing to spread over, whatever was asked */
    if (e->numa_nodes < 2 || *mode == DSV4_NUMA_NONE) {
        *mode = DSV4_NUMA_NONE;
        return DSV4_OK;
    }
    *mode = DSV4_NUMA_INTERLEAVE;
    int rc = dsv4_model_numa_interleave(e->model, err);
    if (!rc && !(rc = dsv4_numa_interleave_thread(saved, err))) *restore = 1;
    return rc;
}

void dsv4_engine_numa_end(const void *saved, int restore) {
    if (restore) dsv4_numa_restore_thread(saved);
}
