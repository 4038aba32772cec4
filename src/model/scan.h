/* scan.h — the full data check of a loaded model (`dsv4 info --check`): every matrix
 * decoded row by row through the codec (FP8 NaN bytes 0x7F/0xFF decode to NaN, spec
 * model.md §2.3) and every value tested for NaN/Inf. Reads the whole checkpoint, so it
 * runs only on request; loading alone checks scales, vectors and tid2eid. */
#ifndef DSV4_MODEL_SCAN_H
#define DSV4_MODEL_SCAN_H

#include <stdint.h>

#include "model/model.h"

typedef struct dsv4_scan_report {
    int64_t values;        /* decoded values checked */
    int64_t bad_values;    /* NaN or Inf among them */
    int bad_tensors;       /* matrices with at least one */
    char first[512];       /* "<name>: <n> non-finite, first <v> at [r, c]; ..." (a few) */
} dsv4_scan_report;

/* Scans every matrix of m (loaded without DSV4_LOAD_HEADERS_ONLY). Returns 0 (the report
 * says what was found) or an error (out of memory). */
int dsv4_model_scan(const dsv4_model *m, dsv4_scan_report *r, dsv4_err *err);

#endif
