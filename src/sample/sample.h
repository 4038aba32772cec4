/* sample.h — the sampler; its API is public (include/dsv4_text.h). */
#ifndef DSV4_SAMPLE_SAMPLE_H
#define DSV4_SAMPLE_SAMPLE_H

#include "dsv4_text.h"

#endif
