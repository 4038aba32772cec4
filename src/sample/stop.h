/* stop.h — stop conditions; their API is public (include/dsv4_text.h). */
#ifndef DSV4_SAMPLE_STOP_H
#define DSV4_SAMPLE_STOP_H

#include "dsv4_text.h"

/* Library-internal options of a dsv4_stop (dsv4_gen's min_tokens and
 * include_stop_str_in_output): a stop string ends generation only when it ends in the text
 * of a token after the min-th (vLLM's rule): one that lies wholly in the text of the first
 * min tokens is shown, one that begins there and ends after is matched, and the text handed
 * out stops where it begins (what may begin a stop string is held back before the min-th
 * token too). With include, the text handed out at a stop string ends with the stop string
 * instead of before it. */
void dsv4_stop_options(dsv4_stop *s, int min, int include);

#endif
