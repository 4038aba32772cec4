/* fuzz_json_schema.c — libFuzzer target: structured output's schema compiler and matcher,
 * which take untrusted request bodies.
 *
 * Input: a JSON Schema, optionally a NUL byte and a text (without the NUL the schema text
 * is also the text).
 *
 * What must hold:
 *  - dsv4_json_schema_compile: an error has a message and its code; a result compiles;
 *  - the text through the automaton byte by byte, and dsv4_json_schema_accepts, never crash,
 *    and agree (accepted = every byte taken and the end state complete);
 *  - at each of the text's first prefixes that the automaton takes, the vocabulary mask (the
 *    trie walk with the in-string bitsets) equals the brute-force mask over a small
 *    byte-level vocabulary (the 256 bytes, JSON-ish pieces, and an added token), and a
 *    state that is alive can be completed: the mask allows some id with a byte other than
 *    whitespace, or the value is complete (json.h's promise: never an empty mask). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sample/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const PIECES[] = {
    "{\"", "\":", "\",", "\"}", " \"", "true", "false", "null", "12", "-1", ".5", "e+", "\\u00", "\\n",
    "\xc3\xa9", "\xc3", "\xa9", "\xe2\x82", "ab", "\"a\"", "],", "[{", "}]", "  ", "\n ", "x\"y", "\"\\\"",
    "\":\"", "0", "1,", "[]", "{}", "\t", "\x01", "\"name\"", " {", "}\n", "\xf0\x9f\x98\x80", "\xed\xa0\x80",
};

static dsv4_tokenizer *tok;
static json_vocab *jv;
static json_walk walk;

/* GPT-2's bytes_to_unicode: the tokenizer.json spelling of a byte */
static int byte_char(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    int n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
    return 256 + n;
}

static void put_spelling(cJSON *vocab, const char *bytes, size_t n, int id) {
    char s[256];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const int c = byte_char((uint8_t)bytes[i]);
        if (c < 0x80) s[k++] = (char)c;
        else { s[k++] = (char)(0xC0 | c >> 6); s[k++] = (char)(0x80 | (c & 63)); }
    }
    s[k] = 0;
    if (!cJSON_GetObjectItemCaseSensitive(vocab, s)) cJSON_AddNumberToObject(vocab, s, id);
}

static void setup(void) {
    cJSON *t = cJSON_Parse("{\"added_tokens\":[{\"id\":400,\"content\":\"<|x|>\",\"special\":true,"
                           "\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false}],"
                           "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":"
                           "[{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                           "\"use_regex\":false}]},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":"
                           "\"BPE\",\"merges\":[]}}");
    cJSON *vocab = cJSON_AddObjectToObject(cJSON_GetObjectItemCaseSensitive(t, "model"), "vocab");
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        put_spelling(vocab, &c, 1, b);
    }
    for (size_t i = 0; i < sizeof PIECES / sizeof *PIECES; i++) put_spelling(vocab, PIECES[i], strlen(PIECES[i]), 256 + (int)i);
    char *text = cJSON_PrintUnformatted(t);
    dsv4_err err = {0};
    if (!text || dsv4_tokenizer_load_json(text, strlen(text), &tok, &err)) {
        fprintf(stderr, "fuzz_json_schema: tokenizer: %s\n", err.msg);
        abort();
    }
    free(text);
    cJSON_Delete(t);
    if (!(jv = json_vocab_build(tok)) || json_walk_init(&walk, jv, JSON_MAX_STACKS)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) setup();
    const uint8_t *nul = memchr(data, 0, size);
    const size_t slen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : (const char *)data;
    const size_t tlen = nul ? size - slen - 1 : size;
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    int rc = dsv4_json_schema_compile((const char *)data, slen, &s, &err);
    if (rc) {
        if (!err.msg[0] || err.code != rc || s) __builtin_trap();
        return 0;
    }
    json_walk_reset(&walk); /* a new schema */
    static json_state st[2];
    static uint64_t bits[64], brute[64];
    json_state_init(s, &st[0]);
    int cur = 0, alive = 1;
    for (size_t i = 0; i < tlen && alive; i++) {
        if (i < 24) {
            /* alive means completable (json.h): some id with a byte other than whitespace
             * is allowed, or the value is complete */
            json_mask(s, jv, &walk, &st[cur], bits);
            int on = json_state_accepting(s, &st[cur]);
            for (int v = 0; v < jv->V && !on; v++)
                if (bits[v >> 6] >> (v & 63) & 1) {
                    size_t len;
                    const char *b = dsv4_tok_id_bytes(tok, v, &len);
                    for (size_t q = 0; q < len && !on; q++) on = !memchr(" \t\n\r", b[q], 4);
                }
            if (!on) __builtin_trap();
        }
        if (i < 6) {
            json_mask_brute(s, tok, &st[cur], brute, jv->words);
            if (memcmp(bits, brute, (size_t)jv->words * sizeof *bits)) __builtin_trap();
        }
        alive = json_state_step(s, &st[cur], (uint8_t)text[i], &st[cur ^ 1]);
        cur ^= 1;
    }
    const int whole = alive && json_state_accepting(s, &st[cur]);
    if (dsv4_json_schema_accepts(s, text, tlen) != whole) __builtin_trap();
    dsv4_json_schema_free(s);
    return 0;
}
