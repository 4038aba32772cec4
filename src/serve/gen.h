/* gen.h — generation: the per-sequence step state (dsv4_gen) and the blocking loop over one
 * sequence; the API is public (include/dsv4_text.h). */
#ifndef DSV4_SERVE_GEN_H
#define DSV4_SERVE_GEN_H

#include "dsv4_text.h"

#endif
