/* dump.h — reading dump directories (manifest.json + raw little-endian f32 arrays, the
 * layout of ../shared/golden and of `dsv4 run --dump`) and comparing them. */
#ifndef DSV4_TESTS_DUMP_H
#define DSV4_TESTS_DUMP_H

#include <stddef.h>
#include <stdint.h>

typedef struct dump_array {
    char name[64];
    int ndim;
    long long shape[8];
    size_t n;       /* elements */
    float *data;    /* f32 values, or the raw int32 values of an i32 array */
    int is_i32;
} dump_array;

typedef struct dump_dir {
    int32_t *tokens;
    int n_tokens;
    int prefill_len;
    int n_arrays;
    dump_array *arrays;
    struct cJSON *csa;  /* manifest "csa_selected_entries", NULL if absent */
} dump_dir;

int dump_load(const char *dir, dump_dir *out);     /* 0 on success, message on stderr */
void dump_free(dump_dir *d);
const dump_array *dump_find(const dump_dir *d, const char *name);

typedef struct dump_cmp {
    double max_abs, max_ref, max_rel; /* max_rel = max|diff| / max|ref| */
    long long rows, top1_same;        /* argmax agreement over the last dimension */
} dump_cmp;

/* Compares a against reference ref (same shape required; returns -1 otherwise). */
int dump_compare(const dump_array *a, const dump_array *ref, dump_cmp *out);

#endif
