/* st_write.h — a streaming safetensors writer (the model generator and the tests use it).
 *
 * Every tensor is declared first (name, dtype, shape; optionally a pointer to its data),
 * because the JSON header with all data offsets precedes the data. dsv4_stw_open then
 * writes the header and streams the data area in declaration order: tensors declared with
 * a data pointer are copied automatically when their turn comes, the others are fed in
 * order with dsv4_stw_write, in pieces of any size. The data area has no holes, so the
 * caller orders tensors to keep each one aligned to its element size (for example widest
 * element type first); the header is padded with spaces to a multiple of 8 bytes.
 */
#ifndef DSV4_MODEL_ST_WRITE_H
#define DSV4_MODEL_ST_WRITE_H

#include <stdint.h>

#include "dsv4.h"
#include "model/safetensors.h"

typedef struct dsv4_stw dsv4_stw;

dsv4_stw *dsv4_stw_new(void); /* NULL when out of memory */
void dsv4_stw_free(dsv4_stw *w); /* closes (and keeps) a partly written file */

/* Declares the next tensor. data (NULL = streamed later) must hold prod(shape) x itemsize
 * bytes and stay valid until the tensor has been written. Fails after dsv4_stw_open. */
int dsv4_stw_add(dsv4_stw *w, const char *name, dsv4_st_dtype dtype, int ndim,
                 const int64_t *shape, const void *data, dsv4_err *err);

/* Adds a "__metadata__" string entry (key and value are copied). */
int dsv4_stw_meta(dsv4_stw *w, const char *key, const char *value, dsv4_err *err);

/* Creates path and writes the header (and any leading tensors given by pointer). */
int dsv4_stw_open(dsv4_stw *w, const char *path, dsv4_err *err);

/* Appends n bytes to the streamed data; more than the current tensor needs continues with
 * the next streamed tensor. Writing past the end of the data area is an error. */
int dsv4_stw_write(dsv4_stw *w, const void *data, uint64_t n, dsv4_err *err);

/* Name of the tensor that the next dsv4_stw_write feeds, NULL when all data is written. */
const char *dsv4_stw_current(const dsv4_stw *w);

/* Checks that every byte was written, flushes and closes the file. */
int dsv4_stw_close(dsv4_stw *w, dsv4_err *err);

/* Size of the complete file (header included) for the tensors declared so far; 0 when out
 * of memory. */
uint64_t dsv4_stw_file_size(const dsv4_stw *w);

#endif
