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
 *    whitespace (else the whitespace is followed: completable), or the value is complete
 *    (json.h's promise: never an empty mask). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_vocab.h"
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

static void setup(void) {
    tok = byte_vocab_tokenizer(PIECES, (int)(sizeof PIECES / sizeof *PIECES), 400);
    if (!(jv = json_vocab_build(tok)) || json_walk_init(&walk, jv, JSON_MAX_STACKS)) abort();
    if (jv->words > 64) abort(); /* the masks below are 64 words (4,096 ids) */
}

/* the first id bits allows, *ws 1 when every allowed id is whitespace only (-1: none) */
static int first_on(const uint64_t *bits, int *ws) {
    int first = -1;
    *ws = 1;
    for (int v = 0; v < jv->V && *ws; v++)
        if (bits[v >> 6] >> (v & 63) & 1) {
            size_t len;
            const char *b = dsv4_tok_id_bytes(tok, v, &len);
            if (first < 0) first = v;
            for (size_t q = 0; q < len && *ws; q++) *ws = memchr(" \t\n\r", b[q], 4) != NULL;
        }
    return first;
}

/* alive means completable (json.h): st (whose mask is bits) allows some id with a byte other
 * than whitespace, or the value is complete; where only whitespace is allowed (a literal's or
 * a key's " ", which is progress) the first such id is followed, at most 256 times:
 * structural whitespace runs are bounded (JSON_MAX_WS), so a dead end shows */
static int completable(const dsv4_json_schema *s, const json_state *st, const uint64_t *bits) {
    static json_state at[2];
    static uint64_t more[64];
    int ws, cur = 0;
    for (int k = 0; k < 256; k++) {
        if (json_state_accepting(s, k ? &at[cur] : st)) return 1;
        const int v = first_on(k ? more : bits, &ws);
        if (v < 0) return 0;
        if (!ws) return 1;
        if (!k) json_state_copy(&at[0], st);
        size_t len;
        const char *b = dsv4_tok_id_bytes(tok, v, &len);
        if (!json_state_feed(s, at, &cur, (const uint8_t *)b, len)) return 0;
        json_mask(s, jv, &walk, &at[cur], more);
    }
    return 0;
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
            json_mask(s, jv, &walk, &st[cur], bits);
            if (!completable(s, &st[cur], bits)) __builtin_trap();
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
