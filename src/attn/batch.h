/* batch.h — the rows of one forward call: spans of consecutive positions, packed row by
 * row (span 0's rows, then span 1's, ...). Every layer operator works on the packed rows;
 * only attention and the compressors look at span boundaries. */
#ifndef DSV4_ATTN_BATCH_H
#define DSV4_ATTN_BATCH_H

#include <stdint.h>

typedef struct dsv4_batch_span {
    int seq;        /* cache slot of the sequence */
    int64_t start;  /* s: absolute position of the first row */
    int n;          /* C: rows */
    int row0;       /* index of the first row in the packed batch */
} dsv4_batch_span;

typedef struct dsv4_batch {
    int n_rows;                    /* R = sum of span lengths */
    int n_spans;
    const dsv4_batch_span *spans;  /* (n_spans) */
    const int64_t *pos;            /* (R) absolute position of each row */
    const int32_t *tokens;         /* (R) token id of each row (MoE hash routing) */
} dsv4_batch;

#endif
