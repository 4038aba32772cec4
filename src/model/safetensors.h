/* safetensors.h — mmap-based reader of safetensors files: one model.safetensors or a
 * sharded set listed by model.safetensors.index.json.
 *
 * Format: 8-byte little-endian header length N, a JSON header {name: {dtype, shape,
 * data_offsets: [begin, end)}} (optional "__metadata__"), then the data area at 8 + N.
 * Every range is validated against the file size, byte sizes against shape x dtype, and
 * ranges may not overlap. Nothing in a file can make the reader go out of bounds or
 * allocate memory out of proportion to the file size.
 */
#ifndef DSV4_MODEL_SAFETENSORS_H
#define DSV4_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4.h"

#define DSV4_ST_MAX_DIMS 8

typedef enum {
    DSV4_ST_BOOL, DSV4_ST_U8, DSV4_ST_I8, DSV4_ST_I16, DSV4_ST_U16, DSV4_ST_F16, DSV4_ST_BF16,
    DSV4_ST_I32, DSV4_ST_U32, DSV4_ST_F32, DSV4_ST_F64, DSV4_ST_I64, DSV4_ST_U64,
    DSV4_ST_F8_E4M3, DSV4_ST_F8_E5M2, DSV4_ST_F8_E8M0,
    DSV4_ST_N_DTYPES
} dsv4_st_dtype;

const char *dsv4_st_dtype_name(dsv4_st_dtype t);   /* "BF16" ... */
int dsv4_st_dtype_size(dsv4_st_dtype t);           /* bytes per element */
/* "BF16" -> DSV4_ST_BF16; -1 for a name that is not a dtype. */
int dsv4_st_dtype_from_name(const char *name, dsv4_st_dtype *out);

typedef struct dsv4_st_tensor {
    const char *name;                  /* owned by the set */
    dsv4_st_dtype dtype;
    int ndim;
    int64_t shape[DSV4_ST_MAX_DIMS];
    const uint8_t *data;               /* inside the mmap'd file; no alignment promised */
    uint64_t nbytes;
    int file;                          /* shard index */
} dsv4_st_tensor;

typedef struct dsv4_st_set dsv4_st_set;

/* Opens dir/model.safetensors.index.json (+ shards) if present, else dir/model.safetensors. */
int dsv4_st_open_dir(const char *dir, dsv4_st_set **out, dsv4_err *err);
/* Opens one file. */
int dsv4_st_open_file(const char *path, dsv4_st_set **out, dsv4_err *err);
/* Parses a whole file image held in memory (the buffer must outlive the set); used by the
 * fuzz target and the malformed-file tests. */
int dsv4_st_open_buffer(const uint8_t *buf, size_t len, dsv4_st_set **out, dsv4_err *err);
void dsv4_st_close(dsv4_st_set *s);

int dsv4_st_count(const dsv4_st_set *s);
const dsv4_st_tensor *dsv4_st_at(const dsv4_st_set *s, int i);
const dsv4_st_tensor *dsv4_st_find(const dsv4_st_set *s, const char *name); /* NULL if absent */
int dsv4_st_n_files(const dsv4_st_set *s);
uint64_t dsv4_st_file_size(const dsv4_st_set *s, int file);
const char *dsv4_st_file_path(const dsv4_st_set *s, int file);
/* The whole image of a file: bytes [0, 8 + header length) are its header, the rest its
 * tensor data (dsv4_st_file_data_offset). NULL / 0 for a bad index. */
const uint8_t *dsv4_st_file_image(const dsv4_st_set *s, int file);
uint64_t dsv4_st_file_data_offset(const dsv4_st_set *s, int file);

#endif
