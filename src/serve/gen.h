/* gen.h — generation: the per-sequence step state (dsv4_gen) and the blocking loop over one
 * sequence; the API is public (include/dsv4_text.h). */
#ifndef DSV4_SERVE_GEN_H
#define DSV4_SERVE_GEN_H

#include "dsv4_text.h"

/* The walks of the vocabulary trie this generation's regex / choice masks took (cache misses
 * it filled; 0 without such a constraint): for tests and benchmarks of the shared masks
 * (dsv4_gen_params.share). */
long dsv4_gen_guide_walks(const dsv4_gen *g);

#endif
