/* fuzz_tokenizer_json.c — libFuzzer target: the tokenizer.json loader, then the loaded
 * tokenizer on a text. Input: tokenizer.json bytes, optionally a NUL byte and the text to
 * encode (make_tokenizer_seeds.py writes seeds in this form).
 *
 * A rejected file must say why. An accepted one must keep its promises on the text:
 *  - encode with and without added tokens gives ids that all have a token;
 *  - the streaming decoder gives exactly what dsv4_detokenize gives, piece by piece;
 *  - decode(encode(text)) == text whenever nothing in the tokenizer may change the text:
 *    every byte of it has a byte token, no pre-tokenizer stage removes text or adds a
 *    prefix space, and (for the plain-text encode) no added token is matched, which
 *    DSV4_TOK_NO_ADDED guarantees.
 * The internals (tokenizer_impl.h) are read only to decide that last condition. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* 1 if decode(encode(text, NO_ADDED)) must give text back. */
static int must_round_trip(const dsv4_tokenizer *t, const uint8_t *text, size_t n) {
    for (int s = 0; s < t->n_stages; s++)
        if (t->stages[s].add_prefix_space || (t->stages[s].re && t->stages[s].behavior == SPLIT_REMOVED))
            return 0;
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[text[i]] < 0) return 0;
    return 1;
}

/* Detokenize and the streaming decoder agree on ids[n]; returns the decoded text. */
static char *decode_both(const dsv4_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    dsv4_err err = {0};
    char *text;
    if (dsv4_detokenize(t, ids, n, 0, &text, len, &err)) __builtin_trap();
    dsv4_tok_stream *s;
    if (dsv4_tok_stream_new(t, 0, &s, &err)) __builtin_trap();
    size_t at = 0;
    const char *p;
    size_t m;
    for (size_t i = 0; i < n; i++) {
        if (dsv4_tok_stream_push(s, ids[i], &p, &m, &err)) __builtin_trap();
        if (at + m > *len || memcmp(text + at, p, m)) __builtin_trap();
        at += m;
    }
    dsv4_tok_stream_flush(s, &p, &m);
    if (at + m != *len || memcmp(text + at, p, m)) __builtin_trap();
    dsv4_tok_stream_free(s);
    return text;
}

static void check_encode(const dsv4_tokenizer *t, const uint8_t *text, size_t n, int flags) {
    dsv4_err err = {0};
    dsv4_tok_ids ids = {0};
    if (dsv4_tokenize_ex(t, (const char *)text, n, flags, &ids, &err)) {
        if (err.code == DSV4_OK || !err.msg[0]) __builtin_trap();
        dsv4_tok_ids_free(&ids);
        return;
    }
    for (size_t i = 0; i < ids.n; i++)
        if (!dsv4_tok_id_to_token(t, ids.ids[i])) __builtin_trap();
    size_t len;
    char *back = decode_both(t, ids.ids, ids.n, &len);
    if ((flags & DSV4_TOK_NO_ADDED) && must_round_trip(t, text, n) && (len != n || memcmp(back, text, n)))
        __builtin_trap();
    free(back);
    dsv4_tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t json_len = nul ? (size_t)(nul - data) : size;
    const uint8_t *text = nul ? nul + 1 : (const uint8_t *)"Hello, world! 12345 <think>\n";
    const size_t text_len = nul ? size - json_len - 1 : strlen((const char *)text);

    dsv4_err err = {0};
    dsv4_tokenizer *t = NULL;
    if (dsv4_tokenizer_load_json((const char *)data, json_len, &t, &err)) {
        if (t || err.code == DSV4_OK || !err.msg[0] || !memchr(err.msg, 0, sizeof err.msg)) __builtin_trap();
        return 0;
    }
    if (dsv4_tok_vocab_size(t) != t->n_ids || t->n_ids <= 0) __builtin_trap();
    check_encode(t, text, text_len, 0);
    check_encode(t, text, text_len, DSV4_TOK_NO_ADDED);
    /* the text's bytes as ids (in range or not): decoders agree, bad ids are errors */
    int32_t ids[64];
    size_t n = 0;
    for (size_t i = 0; i + 2 <= text_len && n < 64; i += 2) {
        int32_t id = (int32_t)(text[i] << 8 | text[i + 1]) % (t->n_ids + 1);
        if (dsv4_tok_id_to_token(t, id)) ids[n++] = id;
    }
    size_t len;
    free(decode_both(t, ids, n, &len));
    dsv4_tokenizer_free(t);
    return 0;
}
