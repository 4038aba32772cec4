/* byte_vocab.h — a small byte-level BPE tokenizer made in memory for the structured-output
 * fuzz targets (fuzz_json_schema, fuzz_json_mask): ids 0-255 the single bytes, then the
 * given pieces in order (a piece whose bytes an earlier id has is left out, its id then has
 * no bytes), then one added token "<|x|>" at id `added` (the ids between have no bytes).
 * Static functions: each target includes it once. */
#ifndef DSV4_TESTS_FUZZ_BYTE_VOCAB_H
#define DSV4_TESTS_FUZZ_BYTE_VOCAB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dsv4_text.h"

/* GPT-2's bytes_to_unicode: the tokenizer.json spelling of a byte */
static int byte_vocab_char(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    int n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
    return 256 + n;
}

static void byte_vocab_put(cJSON *vocab, const char *bytes, size_t n, int id) {
    char s[512];
    size_t k = 0;
    for (size_t i = 0; i < n && i < 200; i++) {
        const int c = byte_vocab_char((uint8_t)bytes[i]);
        if (c < 0x80) s[k++] = (char)c;
        else { s[k++] = (char)(0xC0 | c >> 6); s[k++] = (char)(0x80 | (c & 63)); }
    }
    s[k] = 0;
    if (!cJSON_GetObjectItemCaseSensitive(vocab, s)) cJSON_AddNumberToObject(vocab, s, id);
}

/* the tokenizer of the bytes and pieces[0..n) (NUL-terminated), the added token at id added
 * (> 255 + n); aborts when it cannot be made */
static dsv4_tokenizer *byte_vocab_tokenizer(const char *const *pieces, int n, int added) {
    char head[512];
    snprintf(head, sizeof head,
             "{\"added_tokens\":[{\"id\":%d,\"content\":\"<|x|>\",\"special\":true,\"single_word\":false,"
             "\"lstrip\":false,\"rstrip\":false,\"normalized\":false}],\"normalizer\":null,\"pre_tokenizer\":"
             "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
             "\"trim_offsets\":true,\"use_regex\":false}]},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":"
             "{\"type\":\"BPE\",\"merges\":[]}}",
             added);
    cJSON *t = cJSON_Parse(head);
    cJSON *vocab = t ? cJSON_AddObjectToObject(cJSON_GetObjectItemCaseSensitive(t, "model"), "vocab") : NULL;
    if (!vocab) abort();
    for (int b = 0; b < 256; b++) {
        const char c = (char)b;
        byte_vocab_put(vocab, &c, 1, b);
    }
    for (int i = 0; i < n; i++) byte_vocab_put(vocab, pieces[i], strlen(pieces[i]), 256 + i);
    char *text = cJSON_PrintUnformatted(t);
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    if (!text || dsv4_tokenizer_load_json(text, strlen(text), &tok, &err)) {
        fprintf(stderr, "byte_vocab: tokenizer: %s\n", err.msg);
        abort();
    }
    free(text);
    cJSON_Delete(t);
    return tok;
}

/* "label (n bytes): "..."" on stderr, the bytes outside printable ASCII (and '"', '\\') as \xHH:
 * what a differential target prints of the input that broke it */
static inline void byte_vocab_show(const char *label, const uint8_t *b, size_t n) {
    fprintf(stderr, "%s (%zu bytes): \"", label, n);
    for (size_t i = 0; i < n; i++)
        if (b[i] >= 0x20 && b[i] < 0x7F && b[i] != '"' && b[i] != '\\') fputc(b[i], stderr);
        else fprintf(stderr, "\\x%02x", b[i]);
    fprintf(stderr, "\"\n");
}

#endif
