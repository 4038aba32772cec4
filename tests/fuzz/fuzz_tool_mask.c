/* fuzz_tool_mask.c — libFuzzer target, differential: the strict tools' token mask against its
 * reference. (With fuzz_replay.c it is also the ctest test_fuzz_tool_mask, over the seeds: the
 * same comparison without clang.)
 *
 * tm_mask (tool_match.c) takes fast paths inside a value (the value's JSON mask, json_mask
 * with its own fast paths, for the neutral ids; the space rule's bitmask; the ids with "  ",
 * with a '<' or 0x7f stepped one by one; a plain string's bitset with the closing tag's ids
 * stepped), in a free tool's parameter name (the neutral ids at once), in a JSON document
 * beside the tools (tm_set_doc), and splits the vocabulary where a closing tag or "<｜DSML｜"
 * is pending. The reference is tm_mask_walk: the whole trie stepped with the whole state. At
 * every step of a token sequence the two must agree bit for bit.
 *
 * Input: a flags byte (bit 0: TM_AUTO, else TM_REQUIRED; bit 1: one call (single); bit 2,
 * with TM_AUTO: a JSON document is read too, its schema after the tools), the tools (an
 * array of OpenAI chat tools, JSON), a NUL, [the document's schema, a NUL], then a text that
 * steers the tokens, at most MAX_STEPS: the next token is the longest allowed one the rest of
 * the text begins with (a block written out is followed as a tokenizer would cut it: every
 * byte is an id); when none is, the text's next byte chooses among the allowed ids: its low
 * bit the kind (0: any, 1: the longest ones, 3 bytes or more, when there are some), the
 * other seven its place among them. The vocabulary (byte_vocab.h) is byte-level: the 256
 * bytes, the DSML markup whole and cut, JSON pieces, pieces with "  ", a '<' or 0x7f, and
 * 300 pieces generated once from such parts; an added token; ids without bytes.
 *
 * What must hold at each step: the fast mask equals the reference (else it aborts, printing
 * the tools, the bytes so far, the id, its bytes and which side allowed it); an alive state
 * that is not complete allows some id (tool_match.h: every state it keeps can be completed;
 * every byte is an id here); a chosen token's bytes keep the state alive. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_vocab.h"
#include "sample/tool_match.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* at most MAX_STEPS tokens, and a step only while the reference's byte steps so far times
 * the tools' stacks stay under WORK (an input takes milliseconds under ASan) */
enum { MAX_STEPS = 96, N_GEN = 300 };
#define WORK 4000000L

#define DS "｜DSML｜"
static const char *const PIECES[] = {
    /* the markup, whole and in the parts a BPE vocabulary has */
    "\n\n", "\n", "<" DS, DS, "<｜", "｜", "DSML", "tool_calls", "tool_calls>", "<" DS "tool_calls>",
    "</" DS "tool_calls>", "<" DS "invoke", " name=\"", "<" DS "invoke name=\"", "invoke", "</" DS "invoke>",
    "</" DS "invoke>\n", "\">\n", "\">", "<" DS "parameter", "<" DS "parameter name=\"", "parameter",
    " string=\"", "true\">", "false\">", "\" string=\"true\">", "\" string=\"false\">", "</" DS "parameter>",
    "</" DS "parameter>\n", "</", "</" DS "param", "</｜", "eter>", "ter>\n", ">\n<" DS, "x</" DS "parameter>",
    "\"</" DS "parameter>", "1</" DS "parameter>\n<" DS, "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"",
    /* JSON */
    "{\"", "\":", "\",", "\"}", " \"", ": \"", "\", \"", "{}", "[]", "[\"", "\"]", "}}", "true", "false", "null",
    "0", "12", "-1", "1.5", "e+", "\\n", "\\\"", "\\\\", "\\u00e9", "\\u003c", "\xc3\xa9", "\xe4\xb8\xad",
    "\xf0\x9f\x98\x80", "\xc3", "\xa9",
    /* whitespace, '<' and DEL inside values */
    "  ", "   ", " a", " 1", " {", " [", " <", "a  b", "  \"", ",  ", "\n  ", "a<b", "<=", "<a", "x <", "\x7f",
    "a\x7f", " \t", "\t",
    /* names */
    "f", "g", "get", "_weather", "get_weather", "city", "note", "code", "tag", "item", "either", "ok", "msg", "alpha",
    " beta", "one  two", "p  q",
};

/* what the generated pieces are made of */
static const char *const PARTS[] = {
    "a", "b", "z", "q", "1", "9", " ", "  ", "\n", "\t", "\"", "\\", "\\\"", "\\n", "<", ">", "/", "=", "{", "}", "[",
    "]", ":", ",", "-", ".", "｜", "DSML", DS, "<" DS, "</" DS, "parameter", "invoke", "\xc3\xa9", "\xe4\xb8\xad",
    "\x7f", "_", "e",
};

static dsv4_tokenizer *tok;
static json_vocab *jv;
static int *tok_len;            /* (V) bytes of each id, 0: none or added */
static const uint8_t **tok_bytes; /* (V) */
static long all_len;            /* their sum: the reference's byte steps a mask, at most */
static int32_t *cand;           /* (V) the allowed ids of a step */

/* splitmix64 */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void setup(void) {
    enum { N_HAND = sizeof PIECES / sizeof *PIECES, N_PARTS = sizeof PARTS / sizeof *PARTS };
    static char gen[N_GEN][80];
    static const char *all[N_HAND + N_GEN];
    uint64_t s = 46;
    for (int i = 0; i < N_HAND; i++) all[i] = PIECES[i];
    for (int i = 0; i < N_GEN; i++) {
        const int parts = 2 + (int)(mix(&s) % 6);
        size_t n = 0;
        for (int k = 0; k < parts; k++) {
            const char *p = PARTS[mix(&s) % N_PARTS];
            const size_t m = strlen(p);
            if (n + m >= sizeof gen[i]) break;
            memcpy(gen[i] + n, p, m), n += m;
        }
        gen[i][n] = 0;
        all[N_HAND + i] = gen[i];
    }
    tok = byte_vocab_tokenizer(all, N_HAND + N_GEN, 256 + N_HAND + N_GEN + 5);
    if (!(jv = json_vocab_build(tok)) || !(tok_len = calloc((size_t)jv->V, sizeof *tok_len)) ||
        !(tok_bytes = calloc((size_t)jv->V, sizeof *tok_bytes)) || !(cand = malloc((size_t)jv->V * sizeof *cand)))
        abort();
    for (int v = 0; v < jv->V; v++) {
        size_t len = 0;
        tok_bytes[v] = (const uint8_t *)dsv4_tok_id_bytes(tok, v, &len);
        if (tok_bytes[v] && !dsv4_tok_is_added(tok, v)) tok_len[v] = (int)len;
        all_len += tok_len[v];
    }
}

/* the allowed ids (with bytes) into cand; their count */
static int allowed(const uint64_t *bits) {
    int n = 0;
    for (int k = 0; k < jv->words; k++)
        for (uint64_t m = bits[k]; m; m &= m - 1) {
            const int v = k * 64 + __builtin_ctzll(m);
            if (v < jv->V && tok_len[v]) cand[n++] = v;
        }
    return n;
}

/* the next id among cand[0..n): the longest one steer's rest begins with, else one its next
 * byte chooses; -1 when there is none */
static int32_t next_id(int n, const uint8_t *steer, size_t n_steer, size_t *at) {
    int32_t best = -1;
    for (int i = 0; i < n; i++) {
        const int v = cand[i];
        if ((size_t)tok_len[v] <= n_steer - *at && (best < 0 || tok_len[v] > tok_len[best]) &&
            !memcmp(tok_bytes[v], steer + *at, (size_t)tok_len[v]))
            best = v;
    }
    if (best >= 0) {
        *at += (size_t)tok_len[best];
        return best;
    }
    if (!n || *at == n_steer) return -1;
    const uint8_t c = steer[(*at)++];
    int m = 0;
    if (c & 1)
        for (int i = 0; i < n; i++)
            if (tok_len[cand[i]] >= 3) cand[m++] = cand[i];
    if (!m) m = n; /* (cand is untouched when no long id was kept) */
    return cand[(size_t)(c >> 1) * (size_t)m / 128];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) setup();
    if (size < 1) return 0;
    const int flags = data[0];
    const int mode = flags & 1 ? TM_AUTO : TM_REQUIRED, with_doc = mode == TM_AUTO && (flags & 4);
    const uint8_t *tools = data + 1, *end = data + size;
    const uint8_t *nul = memchr(tools, 0, (size_t)(end - tools));
    if (!nul) return 0;
    const uint8_t *schema = nul + 1, *steer = schema;
    if (with_doc) {
        const uint8_t *nul2 = memchr(schema, 0, (size_t)(end - schema));
        if (!nul2) return 0;
        steer = nul2 + 1;
    }
    const size_t n_steer = (size_t)(end - steer);
    tm_tools *t = NULL;
    dsv4_err err = {0};
    if (tm_compile((const char *)tools, (size_t)(nul - tools), mode, (flags & 2) != 0, &t, &err)) return 0;
    if (with_doc && tm_set_doc(t, (const char *)schema, (size_t)(steer - 1 - schema), &err)) {
        tm_free(t);
        return 0;
    }
    const int stacks = tm_max_stacks(t);
    tm_walk w;
    tm_state *st = malloc(2 * sizeof *st);
    const size_t words = (size_t)jv->words;
    uint64_t *fast = malloc(words * sizeof *fast), *ref = malloc(words * sizeof *ref);
    uint8_t *text = malloc((size_t)MAX_STEPS * (size_t)jv->max_len + 1);
    if (!st || !fast || !ref || !text || tm_walk_init(&w, jv, tok, stacks)) abort();
    tm_state_init(t, &st[0]);
    int cur = 0;
    size_t tlen = 0, at = 0;
    long work = 0;
    for (int step = 0;; step++, work += all_len * stacks) {
        tm_mask(t, jv, &w, &st[cur], fast, tok);
        tm_mask_walk(t, jv, &w, &st[cur], ref);
        if (memcmp(fast, ref, words * sizeof *fast)) {
            int n = 0, first = -1;
            for (int v = 0; v < jv->V; v++)
                if ((fast[v >> 6] ^ ref[v >> 6]) >> (v & 63) & 1) n++, first = first < 0 ? v : first;
            fprintf(stderr, "fuzz_tool_mask: step %d: tm_mask differs from tm_mask_walk in %d ids (flags %d)\n",
                    step, n, flags);
            byte_vocab_show("tools", tools, (size_t)(nul - tools));
            byte_vocab_show("state after", text, tlen);
            fprintf(stderr, "id %d, fast %s; ", first, fast[first >> 6] >> (first & 63) & 1 ? "allows" : "refuses");
            byte_vocab_show("its bytes", tok_bytes[first], (size_t)tok_len[first]);
            abort();
        }
        const int n = allowed(ref);
        if (!n && !tm_state_accepting(t, &st[cur])) {
            fprintf(stderr, "fuzz_tool_mask: step %d: alive, not complete, and no id allowed\n", step);
            byte_vocab_show("tools", tools, (size_t)(nul - tools));
            byte_vocab_show("state after", text, tlen);
            abort();
        }
        if (step == MAX_STEPS || work > WORK) break;
        const int32_t id = next_id(n, steer, n_steer, &at);
        if (id < 0) break;
        if (!tm_state_feed(t, st, &cur, tok_bytes[id], (size_t)tok_len[id])) __builtin_trap(); /* allowed */
        memcpy(text + tlen, tok_bytes[id], (size_t)tok_len[id]), tlen += (size_t)tok_len[id];
    }
    tm_walk_free(&w);
    free(st), free(fast), free(ref), free(text);
    tm_free(t);
    return 0;
}
