/* stop.h — stop conditions; their API is public (include/dsv4_text.h). */
#ifndef DSV4_SAMPLE_STOP_H
#define DSV4_SAMPLE_STOP_H

#include "dsv4_text.h"

#endif
