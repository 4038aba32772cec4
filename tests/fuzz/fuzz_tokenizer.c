/* fuzz_tokenizer.c — libFuzzer target: arbitrary bytes through the tokenizer.
 * Valid UTF-8 must encode and decode back to the same bytes; any bytes as ids must stream
 * without crashing. The tokenizer.json comes from $DSV4_TOKENIZER (scripts/fuzz.sh sets it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer.h"

static dsv4_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *path = getenv("DSV4_TOKENIZER");
    dsv4_err err = {0};
    if (!path || dsv4_tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "fuzz_tokenizer: set DSV4_TOKENIZER to a tokenizer.json (%s)\n", err.msg);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    dsv4_err err = {0};
    dsv4_tok_ids ids = {0};
    if (dsv4_tokenize(tok, (const char *)data, n, &ids, &err) == 0) {
        char *text;
        size_t len;
        if (dsv4_detokenize(tok, ids.ids, ids.n, 0, &text, &len, &err)) abort();
        if (len != n || memcmp(text, data, n)) abort(); /* round trip */
        free(text);
    }
    dsv4_tok_ids_free(&ids);
    dsv4_tok_stream *s;
    if (dsv4_tok_stream_new(tok, 0, &s, &err)) return 0;
    for (size_t i = 0; i + 2 <= n; i += 2) {
        const char *p;
        size_t m;
        dsv4_tok_stream_push(s, (int32_t)((data[i] << 8 | data[i + 1]) * 2), &p, &m, &err);
    }
    const char *p;
    size_t m;
    dsv4_tok_stream_flush(s, &p, &m);
    dsv4_tok_stream_free(s);
    return 0;
}
