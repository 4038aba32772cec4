/* argmax.h — internal: the greedy index of a row of logits: dsv4_argmax (sample.c), the
 * head's argmax rows (engine/lmhead.c) and dsv4 bench, which cannot include dsv4_text.h
 * beside engine/lmhead.h (its pair type shares the name dsv4_argmax). */
#ifndef DSV4_UTIL_ARGMAX_H
#define DSV4_UTIL_ARGMAX_H

#include <stdint.h>

/* dsv4_argmax (dsv4_text.h): the index of the largest non-NaN x[i], ties to the lowest
 * index; -1 when n <= 0 or every value is NaN. */
int32_t dsv4_argmax_index(const float *x, int n);

#endif
