/* prefix.h — the engine's snapshots and prefix cache (prefix.c; public API in dsv4.h). */
#ifndef DSV4_ENGINE_PREFIX_H
#define DSV4_ENGINE_PREFIX_H

#include "dsv4.h"

typedef struct dsv4_prefix_cache dsv4_prefix_cache;

/* Sets up e->prefix and registers its evictor with the pools. */
int dsv4_prefix_create(dsv4_engine *e, dsv4_err *err);
/* Frees every snapshot (cached or the caller's) and e->prefix; before the pools go. */
void dsv4_prefix_destroy(dsv4_engine *e);

#endif
