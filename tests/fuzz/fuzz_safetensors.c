/* fuzz_safetensors.c — libFuzzer target: any byte string through dsv4_st_open_buffer.
 *
 * Besides "no crash, no leak, no out-of-bounds read" (ASan/UBSan), an accepted file must
 * keep the reader's promises: every tensor findable by name, its bytes inside the input,
 * its byte count equal to shape x dtype size. A rejected one must say why. */
#include <stdint.h>
#include <string.h>

#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dsv4_st_set *s = NULL;
    dsv4_err err;
    memset(&err, 0, sizeof err);
    if (dsv4_st_open_buffer(data, size, &s, &err) != 0) {
        if (s != NULL || err.msg[0] == 0 || memchr(err.msg, 0, sizeof err.msg) == NULL) __builtin_trap();
        return 0;
    }
    volatile uint8_t sink = 0;
    for (int i = 0; i < dsv4_st_count(s); i++) {
        const dsv4_st_tensor *t = dsv4_st_at(s, i);
        if (dsv4_st_find(s, t->name) != t) __builtin_trap();
        if (i > 0 && strcmp(dsv4_st_at(s, i - 1)->name, t->name) >= 0) __builtin_trap();
        uint64_t n = (uint64_t)dsv4_st_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
        if (n != t->nbytes || t->data < data || t->nbytes > size || t->data + t->nbytes > data + size)
            __builtin_trap();
        if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1]; /* ASan checks both ends */
    }
    (void)sink;
    dsv4_st_close(s);
    return 0;
}
