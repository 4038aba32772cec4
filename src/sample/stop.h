/* stop.h — stop conditions; their API is public (include/dsv4_text.h). */
#ifndef DSV4_SAMPLE_STOP_H
#define DSV4_SAMPLE_STOP_H

#include "dsv4_text.h"

/* Library-internal options of a dsv4_stop (dsv4_gen's min_tokens and
 * include_stop_str_in_output): before min tokens are counted, stop strings do not end
 * generation (their text is shown; a stop string that completes at or after the min-th token
 * in the text fed from then on ends it); with include, the text handed out at a stop
 * string ends with the stop string instead of before it. */
void dsv4_stop_options(dsv4_stop *s, int min, int include);

#endif
