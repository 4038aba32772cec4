/* fuzz_json_mask.c — libFuzzer target, differential: structured output's token mask against
 * its definition. (With fuzz_replay.c it is also the ctest test_fuzz_json_mask, over the
 * seeds: the same comparison without clang.)
 *
 * json_mask (json_vocab.c) takes fast paths: the trie walk that skips a refused subtree; the
 * in-string bitsets and the small trie of the ids with a '"', '\\' or control byte; inside
 * constrained strings, masks cached by (string, DFA state, UTF-8 state) with the ids longer
 * than the room stepped one by one, a string without a DFA served from the bitsets, several
 * strings sharing one pass of the trie (json_cstr_walk_any) that drops a string at a byte
 * outside its state's byte set (json_strc.acc); the readings outside strings walked alone.
 * The definition is json_mask_brute: each id's bytes fed one at a time to the automaton. At
 * every step of a token sequence the two must agree bit for bit.
 *
 * Input: a JSON Schema, a NUL byte, then a text (without a NUL: the start state only) that
 * steers the tokens, at most MAX_STEPS: the next token is the longest one the reference
 * allows that the rest of the text begins with (a document valid under the schema is
 * followed as a tokenizer would cut it: every single byte is an id); when none is, the
 * text's next byte is a choice among the allowed ones: its low two bits the kind (0: short,
 * at most 2 bytes, to leave strings and reach structure; 2: long, 4 bytes or more, when
 * there is one; 1, 3: any), the other six its place among them. The vocabulary (byte_vocab.h) is byte-level: the 256
 * bytes, JSON pieces, 400 pieces generated once (2-40 bytes of letters, digits,
 * punctuation, quotes, escapes, 2-4 byte UTF-8 characters, some cut inside a character), an
 * added token and ids without bytes. The walk and the states are allocated at the schema's
 * max_stacks, as dsv4_gen allocates them (ASan sees a stack touched past them).
 *
 * What must hold at each step: the fast mask equals the reference (else it aborts, printing
 * the schema, the bytes so far, the id, its bytes and which side allowed it); a state that
 * is alive allows some id or is complete (json.h; fuzz_json_schema checks the stronger "some
 * id with a byte other than whitespace" at structure, which a literal's " " breaks); a
 * chosen token's bytes keep the state alive. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_vocab.h"
#include "sample/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* at most MAX_STEPS tokens, and a step only while the reference's byte steps so far times the
 * schema's stacks stay under WORK (so that a 30-reading union stops after ~20 steps and an
 * input takes ~10 ms under ASan and the fuzzer's coverage) */
enum { MAX_STEPS = 40, N_GEN = 400 };
#define WORK 3000000L

static const char *const PIECES[] = {
    "{\"", "\":", "\",", "\"}", " \"", ": \"", "\", \"", "\":\"", "\":{", "\":[", "}}", "}]", "]}", "[\"", "\"]",
    "[{", "{}", "[]", "true", "false", "null", ",\n", "\n  ", "    ", "  ", "\t", "0", "12", "-1", "1.5", "-0.25",
    "e+", "E-", "1e", "00", "123", "4567", "\\n", "\\\"", "\\\\", "\\u00", "\\u00e9", "\\ud83d", "\\/", "\\t",
    "\"\\\"", "x\"y", "\"a\"", "\"name\"", "\"k\"", "\"note\"", "\"v\":", "\"kind\":", "variant_", "\xc3\xa9",
    "\xc3", "\xa9", "\xe2\x82", "\xe2\x82\xac", "\xe4\xb8\xad\xe6\x96\x87", "\xf0\x9f\x98\x80", "\xf0\x9f",
    "\xed\x9f\xbf", "\xed\xa0\x80", "\xef\xbf\xbd", "\xc2\xa0", "@example.com", "john", "Smith", "2024-05-01",
    "T10:30:00Z", "123e4567-e89b", "AB-", "http://", "admin", "user", "red", "green", "gr\xc3\xbcn",
};

/* what the generated pieces are made of */
static const char *const UNITS[] = {
    " ", ",", ".", "-", "_", "@", ":", "/", "'", ";", "{", "}", "[", "]", "\"", "\\n", "\\\"", "\\u00e9", "\\\\",
    "\\", "\t", "\xc3\xa9", "\xc3\x9f", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xed\x9f\xbf", "\xef\xbf\xbd", "#",
};

static dsv4_tokenizer *tok;
static json_vocab *jv;
static int *tok_len; /* (V) bytes of each id, 0: none or added */
static long all_len; /* their sum: the reference's byte steps a mask */
static const char **tok_bytes; /* (V) */

static uint64_t gen_rand(uint64_t *r) {
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    return *r;
}

/* one generated piece into buf (cap 64): units of one flavour up to a length, sometimes cut
 * inside its last character */
static void gen_piece(uint64_t *r, char *buf) {
    static const char *const LOWER = "abcdefghijklmnopqrstuvwxyz", *ALNUM = "abcxyzABCXYZ0123456789",
                             *NUM = "0123456789.-+eE";
    const uint64_t x = gen_rand(r);
    const int len = x % 100 < 70 ? 2 + (int)(x >> 8) % 7 : x % 100 < 92 ? 9 + (int)(x >> 8) % 12 : 21 + (int)(x >> 8) % 20;
    const int flavour = (int)(x >> 16) % 5;
    size_t n = 0;
    while ((int)n < len) {
        const uint64_t y = gen_rand(r);
        const char *u;
        char one[2] = {0, 0};
        if (flavour == 0 || (flavour == 3 && y % 4)) one[0] = (y >> 8) % 6 ? LOWER[(y >> 16) % 26] : ' ', u = one;
        else if (flavour == 1) one[0] = ALNUM[(y >> 8) % 22], u = one;
        else if (flavour == 2) one[0] = NUM[(y >> 8) % 15], u = one;
        else u = UNITS[(y >> 8) % (sizeof UNITS / sizeof *UNITS)];
        const size_t k = strlen(u);
        if (n + k > 48) break;
        memcpy(buf + n, u, k), n += k;
    }
    if (n > 1 && gen_rand(r) % 8 == 0) n--; /* cut: maybe inside a UTF-8 character or an escape */
    buf[n] = 0;
}

static void setup(void) {
    enum { N_HAND = sizeof PIECES / sizeof *PIECES };
    static char gen[N_GEN][64];
    static const char *all[N_HAND + N_GEN];
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < N_HAND; i++) all[i] = PIECES[i];
    for (int i = 0; i < N_GEN; i++) gen_piece(&r, gen[i]), all[N_HAND + i] = gen[i];
    tok = byte_vocab_tokenizer(all, N_HAND + N_GEN, 256 + N_HAND + N_GEN + 7);
    if (!(jv = json_vocab_build(tok)) || !(tok_len = calloc((size_t)jv->V, sizeof *tok_len)) ||
        !(tok_bytes = calloc((size_t)jv->V, sizeof *tok_bytes)))
        abort();
    for (int v = 0; v < jv->V; v++) {
        size_t len = 0;
        tok_bytes[v] = dsv4_tok_id_bytes(tok, v, &len);
        if (tok_bytes[v] && !dsv4_tok_is_added(tok, v)) tok_len[v] = (int)len;
        all_len += tok_len[v];
    }
}

static int on(const uint64_t *bits, int v) { return bits[v >> 6] >> (v & 63) & 1; }

/* the id that choice c picks among those bits allows; -1 when none */
static int32_t pick(const uint64_t *bits, uint8_t c) {
    int kind = c & 3, n = 0;
    for (int pass = 0; pass < 2 && !n; pass++, kind = 1)
        for (int v = 0; v < jv->V; v++)
            n += on(bits, v) && (kind == 0 ? tok_len[v] <= 2 : kind == 2 ? tok_len[v] >= 4 : 1);
    if (!n) return -1;
    int k = (c >> 2) * n / 64;
    for (int v = 0; v < jv->V; v++)
        if (on(bits, v) && (kind == 0 ? tok_len[v] <= 2 : kind == 2 ? tok_len[v] >= 4 : 1) && k-- == 0) return v;
    return -1;
}

/* the longest id bits allows whose bytes begin t (n bytes); -1 when none */
static int32_t follow(const uint64_t *bits, const uint8_t *t, size_t n) {
    int32_t best = -1;
    for (int v = 0; v < jv->V; v++)
        if (on(bits, v) && tok_len[v] && (size_t)tok_len[v] <= n && (best < 0 || tok_len[v] > tok_len[best]) &&
            !memcmp(tok_bytes[v], t, (size_t)tok_len[v]))
            best = v;
    return best;
}

/* the masks differ: the schema, the state (the bytes that led to it) and the first id */
static void differ(const uint8_t *schema, size_t slen, const uint8_t *text, size_t tlen, int step,
                   const uint64_t *fast, const uint64_t *ref) {
    int n = 0, first = -1;
    for (int v = 0; v < jv->V; v++)
        if (on(fast, v) != on(ref, v)) n += 1, first = first < 0 ? v : first;
    fprintf(stderr, "fuzz_json_mask: step %d: json_mask differs from the reference in %d ids\n", step, n);
    byte_vocab_show("schema", schema, slen);
    byte_vocab_show("state after", text, tlen);
    size_t len = 0;
    const char *b = dsv4_tok_id_bytes(tok, first, &len);
    fprintf(stderr, "id %d, fast %s, reference %s; ", first, on(fast, first) ? "allows" : "refuses",
            on(ref, first) ? "allows" : "refuses");
    byte_vocab_show("its bytes", (const uint8_t *)b, b ? len : 0);
    abort();
}

/* some id is allowed */
static int any_on(const uint64_t *bits) {
    for (int k = 0; k < jv->words; k++)
        if (bits[k]) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) setup();
    const uint8_t *nul = memchr(data, 0, size);
    const size_t slen = nul ? (size_t)(nul - data) : size;
    const uint8_t *steer = nul ? nul + 1 : data + size;
    const size_t n_steer = nul ? size - slen - 1 : 0;
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    if (dsv4_json_schema_compile((const char *)data, slen, &s, &err)) return 0;
    json_walk w;
    const size_t words = (size_t)jv->words;
    json_state *a = malloc(json_state_size(s->max_stacks)), *b = malloc(json_state_size(s->max_stacks));
    uint64_t *fast = malloc(words * sizeof *fast), *ref = malloc(words * sizeof *ref);
    uint8_t *text = malloc((size_t)MAX_STEPS * (size_t)jv->max_len + 1);
    if (!a || !b || !fast || !ref || !text || json_walk_init(&w, jv, s->max_stacks)) abort();
    json_state_init(s, a);
    size_t tlen = 0, at = 0;
    long work = 0;
    for (int step = 0;; step++, work += all_len * s->max_stacks) {
        json_mask(s, jv, &w, a, fast);
        json_mask_brute(s, tok, a, ref, jv->words);
        if (memcmp(fast, ref, words * sizeof *fast)) differ(data, slen, text, tlen, step, fast, ref);
        if (!any_on(ref) && !json_state_accepting(s, a)) {
            fprintf(stderr, "fuzz_json_mask: step %d: alive, not complete, and no id allowed\n", step);
            byte_vocab_show("schema", data, slen);
            byte_vocab_show("state after", text, tlen);
            abort();
        }
        if (at == n_steer || step == MAX_STEPS || work > WORK) break;
        int32_t id = follow(ref, steer + at, n_steer - at);
        if (id >= 0) at += (size_t)tok_len[id];
        else if ((id = pick(ref, steer[at++])) < 0) break;
        size_t len = 0;
        const uint8_t *tb = (const uint8_t *)dsv4_tok_id_bytes(tok, id, &len);
        for (size_t i = 0; i < len; i++) {
            if (!json_state_step(s, a, tb[i], b)) __builtin_trap(); /* the reference allowed it */
            json_state *x = a;
            a = b, b = x;
        }
        memcpy(text + tlen, tb, len), tlen += len;
    }
    json_walk_free(&w);
    free(a), free(b), free(fast), free(ref), free(text);
    dsv4_json_schema_free(s);
    return 0;
}
