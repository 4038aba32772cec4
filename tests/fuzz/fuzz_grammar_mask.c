/* fuzz_grammar_mask.c — libFuzzer target, differential: grammar-guided decoding's token mask
 * (gr_mask: the trie walk with its pool popped per depth, the sibling and loop step memos, the
 * mask cache keyed by the stack set) against its definition (gr_mask_brute: every id's bytes
 * fed from the state). With fuzz_replay.c it is also the ctest test_fuzz_grammar_mask, over the
 * seeds in corpus/grammar_mask.
 *
 * Input: a grammar (GBNF), a NUL byte, then steering bytes (none: the start state only): each
 * picks the next token among the ids the reference allows (byte * allowed / 256), at most
 * MAX_STEPS. The vocabulary (byte_vocab.h) is byte-level: the 256 bytes and pieces of brackets,
 * numbers, words, JSON-ish punctuation and UTF-8 whole and cut. A grammar the compiler refuses
 * is skipped; a step past a bound (over) ends the input.
 *
 * What must hold at each step: the mask equals the reference (else it aborts, printing the
 * grammar, the bytes so far and the first id that differs); a live state that is not
 * complete allows some id (alive => completable); the chosen token's bytes keep it alive. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_vocab.h"
#include "sample/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_STEPS = 24 };

static const char *const PIECES[] = {
    "(", ")", "((", "))", "()", "[", "]", "[]", "[1", "1]", "{", "}", "{\"", "\":", "\",", ", ", ",", "12", "3.",
    ".25", "+(", ")*", "-1", "true", "false", "null", "\"a", "a\"", "\\n", "\\\"", "abc", "ab", "xyz", "  ", "\n",
    "<a>", "</", "caf", "\xc3\xa9", "\xc3", "\xa9", "caf\xc3\xa9", "\xe4\xb8\xad", "\xe4\xb8", "\xad", "\xf0\x9f",
    "\x98\x80", "\xf0\x9f\x98\x80", "\xed\xa0\x80", "SELECT", " FROM", " WHERE", "=", "0", "00", "999",
};

static dsv4_tokenizer *tok;
static json_vocab *jv;

static void setup(void) {
    const int n = (int)(sizeof PIECES / sizeof *PIECES);
    tok = byte_vocab_tokenizer(PIECES, n, 256 + n + 3);
    if (!(jv = json_vocab_build(tok))) abort();
}

static int on(const uint64_t *bits, int v) { return bits[v >> 6] >> (v & 63) & 1; }

/* what went wrong, the grammar, the bytes so far and the first ids the masks differ on */
static void differ(const char *what, const uint8_t *g, size_t glen, const uint8_t *text, size_t tlen, int step,
                   const uint64_t *fast, const uint64_t *ref) {
    fprintf(stderr, "fuzz_grammar_mask: step %d: %s\n", step, what);
    byte_vocab_show("grammar", g, glen);
    byte_vocab_show("state after", text, tlen);
    for (int v = 0, shown = 0; v < jv->V && shown < 3; v++) {
        if (on(fast, v) == on(ref, v)) continue;
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(tok, v, &len);
        fprintf(stderr, "id %d: gr_mask %s it; ", v, on(fast, v) ? "allows" : "refuses");
        byte_vocab_show("its bytes", (const uint8_t *)b, b ? len : 0);
        shown++;
    }
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) setup();
    size_t glen = 0; /* the grammar: up to the first NUL; the steering bytes after it */
    while (glen < size && data[glen]) glen++;
    const uint8_t *steer = data + glen + (glen < size);
    const size_t n_steer = size - (size_t)(steer - data);
    gr_grammar *g = NULL;
    char why[256];
    if (gr_compile((const char *)data, glen, &g, why, sizeof why)) return 0;
    gr_run *r = NULL;
    const size_t words = (size_t)jv->words;
    uint64_t *fast = malloc(words * sizeof *fast), *ref = malloc(words * sizeof *ref);
    uint8_t *text = malloc((size_t)MAX_STEPS * (size_t)jv->max_len + 1);
    if (!fast || !ref || !text || gr_run_new(g, jv->max_len, jv->words, &r)) abort();
    size_t tlen = 0;
    for (int step = 0;; step++) {
        const long f = gr_mask(r, jv, fast);
        const int b = gr_mask_brute(r, tok, ref, jv->words);
        if (f < 0 || b < 0) break; /* over a bound */
        if (memcmp(fast, ref, words * sizeof *fast))
            differ("gr_mask differs from the reference", data, glen, text, tlen, step, fast, ref);
        int n = 0;
        for (int v = 0; v < jv->V; v++) n += on(ref, v);
        if (!n && !gr_run_accepting(r)) differ("alive, not complete, and no id allowed", data, glen, text, tlen, step, fast, ref);
        if (!n || step == MAX_STEPS || (size_t)step >= n_steer) break;
        int k = (int)((long)steer[step] * n / 256), id = 0;
        for (; id < jv->V; id++)
            if (on(ref, id) && k-- == 0) break;
        size_t len = 0;
        const uint8_t *tb = (const uint8_t *)dsv4_tok_id_bytes(tok, id, &len);
        if (gr_run_feed(r, tb, len) != 1) __builtin_trap(); /* the reference allowed it */
        gr_run_compact(r);
        memcpy(text + tlen, tb, len), tlen += len;
    }
    gr_run_free(r);
    gr_free(g);
    free(fast), free(ref), free(text);
    return 0;
}
