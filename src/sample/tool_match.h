/* tool_match.h — strict tool calls: the DSML tool_calls block (tok/dsml.c) of a request's
 * tools as a byte automaton, on top of the JSON automaton (json.h) for the values.
 *
 * The block is written the way the chat template's encoder writes it
 * (dsv4_dsml_encode_calls), which is what the model was trained on:
 *
 *   "\n\n" <tool_calls> "\n"
 *   <invoke name="NAME"> "\n"
 *     { <parameter name="KEY" string="true|false"> VALUE </parameter> "\n" }
 *   </invoke> "\n"
 *   [ <invoke ...> ... </invoke> "\n" ]          (not with `single`)
 *   </tool_calls>
 *
 * NAME is one of the tools. A strict tool (function.strict true) takes its declared
 * parameters only, each at most once, in any order, the required ones all before
 * </invoke>; a value is string="true" (raw text, the string's characters) when its schema
 * allows strings only, string="false" (JSON text) when it allows no string, either when
 * both; either way it is a value of the property's schema (the raw text runs through the
 * JSON automaton as the JSON string it stands for). A tool that is not strict takes any
 * parameter names (no '"', '<' or control byte) with any values (JSON for string="false").
 * No value holds "</｜DSML｜parameter>" (the parser would end it there); a JSON value has
 * no whitespace between its tokens but single spaces (as the encoder writes it).
 *
 * Two modes: REQUIRED (the text is the block, from its first byte), AUTO (free text until
 * it writes "<｜DSML｜tool_calls>", then the rest of the block). AUTO with a document
 * (tm_set_doc: JSON output beside tools) has no free text: the text is either the block,
 * as REQUIRED's, or a JSON document of the document's schema without "<｜DSML｜" in it
 * (the parser reads that as markup); both are read at once while the bytes allow both (the
 * opener's "\n\n" is also the document's leading whitespace). The end of the text (EOS)
 * is allowed once the block is closed (and in AUTO's free text, and once the document is
 * complete). As with json.h, an alive
 * state can always be completed: every alternative taken is checked to lead somewhere
 * (the JSON automaton guarantees it inside values). */
#ifndef DSV4_SAMPLE_TOOL_MATCH_H
#define DSV4_SAMPLE_TOOL_MATCH_H

#include <stdint.h>

#include "sample/json.h"

enum { TM_REQUIRED = 1, TM_AUTO = 2 };
/* phases: AUTO's free text, a set of alternatives, a free tool's parameter name, a value,
 * the block closed, the JSON document */
enum { TP_FREE, TP_ALT, TP_FNAME, TP_VALUE, TP_DONE, TP_DOC };
#define TM_MAX_TOOLS 1024
#define TM_MAX_PARAMS 64      /* a strict tool's properties (a bitmask) */

/* a set of alternative literals, sorted (the ones sharing a prefix are a range) */
typedef struct tm_alt {
    char *s;
    int len;
    int idx;     /* what the alternative means (a tool, a property, a branch) */
} tm_alt;

typedef struct tm_set {
    tm_alt *a;
    int n;
} tm_set;

typedef struct tm_tool {
    dsv4_json_schema *schema; /* strict: the parameters (root: an object of declared keys);
                               * NULL: free */
    tm_set pnames;            /* strict: KEY + '"' of each property (idx: its index) */
    int root;                 /* the parameters' object node */
    uint64_t required, can_str, str_only, all; /* bits by property index */
} tm_tool;

typedef struct tm_tools tm_tools;

/* The state: plain data, copied by the vocabulary walk (js only in a value). */
typedef struct tm_state {
    uint8_t phase;     /* TP_* */
    uint8_t is_str;    /* the value is string="true" */
    uint8_t ws;        /* VALUE: the last byte was whitespace between JSON tokens */
    uint8_t doc;       /* ALT: the document is read too (js: its state) */
    uint16_t k;        /* FREE, DOC: bytes of the opener matched; VALUE: bytes of
                        * "</｜DSML｜parameter>" pending (not fed to js) */
    int16_t set;       /* ALT: which set */
    int16_t prop;      /* the property being written, -1 in a free tool */
    int32_t off, lo, hi; /* ALT: bytes matched, the candidates [lo, hi) */
    int32_t tool;      /* the invoke's tool */
    int32_t n_inv;
    uint64_t used;     /* properties given in this invoke */
    json_state js;     /* VALUE: the value's bytes so far (as JSON); DOC, ALT with doc:
                        * the document's */
} tm_state;

/* Compiles the request's tools (JSON text: an array of OpenAI chat tools, {"type":
 * "function", "function": {"name", "parameters", "strict"}}). DSV4_ERR_UNSUPPORTED
 * naming the tool for a strict tool whose parameters the subset cannot enforce;
 * DSV4_ERR_FORMAT for a malformed list. */
int tm_compile(const char *tools, size_t len, int mode, int single, tm_tools **out, dsv4_err *err);
void tm_free(tm_tools *t);
/* AUTO tools only, once: the text is either the block or a JSON document of schema (JSON
 * text, dsv4_json_schema_compile's subset). DSV4_ERR_ARG for other tools; the schema's
 * compile errors. */
int tm_set_doc(tm_tools *t, const char *schema, size_t len, dsv4_err *err);
/* 1 when some tool is strict (the constraint is worth applying) */
int tm_any_strict(const tm_tools *t);
/* the most stacks a step of any of the tools' value automata holds (json_schema.max_stacks) */
int tm_max_stacks(const tm_tools *t);

void tm_state_init(const tm_tools *t, tm_state *st);
/* dst = src (dst != src), its live part: the header, and js where the phase holds one */
void tm_state_copy(tm_state *dst, const tm_state *src);
/* dst = src after byte c (dst != src); 1 alive, 0 dead */
int tm_state_step(const tm_tools *t, const tm_state *src, uint8_t c, tm_state *dst);
/* steps st[*cur] over n bytes, ping-pong with st[*cur ^ 1]; 0 once dead */
int tm_state_feed(const tm_tools *t, tm_state st[2], int *cur, const uint8_t *b, size_t n);
/* 1 when the text may end here (EOS) */
int tm_state_accepting(const tm_tools *t, const tm_state *st);
/* 1 in AUTO's free text (before the opener): every token goes but those holding a '>'
 * that completes the opener, which must go on with a valid block */
int tm_state_free(const tm_state *st);

typedef struct tm_walk {
    unsigned char *st; /* (n_st + 1) stride bytes apart: the walk's states by depth, then a
                        * flushed state (tm_states whose js holds cap stacks: json_state_size) */
    size_t stride;
    int n_st;
    int32_t *close;    /* (n_close) the ids whose bytes hold "</｜DSML｜parameter>" */
    int n_close;
    /* A value's JSON mask (json_mask, with its fast paths) serves the ids whose bytes a value
     * takes as JSON text unchanged and the whitespace rule leaves alone: the plain ids
     * (json_vocab.plain: no '"', '\\' or control byte) without a '<' (no closing tag begun)
     * or 0x7f, the `neutral` bits, but for a JSON value those with "  " (`dbl`, stepped one
     * by one) and, after a space between tokens, those that open with one (`space`); the
     * others are the spec trie (walked with the whole state) and `lt` (stepped). */
    json_walk jw;
    const dsv4_json_schema *jw_schema; /* the schema jw's cache holds masks of */
    uint64_t *neutral, *space; /* [words] */
    int32_t *lt, *dbl; /* (n_lt, n_dbl) the plain ids with a '<' or 0x7f; the other plain ids
                        * with "  " */
    int n_lt, n_dbl;
} tm_walk;
/* cap: the most stacks a state of the tools' schemas holds (tm_max_stacks; JSON_MAX_STACKS
 * serves any tools). Memory: the walk's states and its json_walk's, each (max_len + 1)
 * json_state_size(cap) (a few MB at JSON_MAX_STACKS, ~0.2 MB each at one stack), a request
 * with tools owning one. */
int tm_walk_init(tm_walk *w, const json_vocab *v, const dsv4_tokenizer *tok, int cap);
void tm_walk_free(tm_walk *w);
/* bits [words]: bit v set iff id v's bytes can follow st (trie ids only: no added token,
 * no EOS). Inside a value, the value's JSON mask for the neutral ids (json_mask: the
 * in-string bitset, the constrained strings' cache and shared walk) and the rest stepped;
 * in a free tool's parameter name the neutral ids and the rest stepped; elsewhere (the
 * markup) the whole trie, pruned at once. Returns the trie nodes stepped. */
long tm_mask(const tm_tools *t, const json_vocab *v, tm_walk *w, const tm_state *st, uint64_t *bits,
             const dsv4_tokenizer *tok);
/* The same by the whole trie stepped with the whole state, no fast path: the reference
 * tm_mask is checked against (tests, bench_tools --check). */
long tm_mask_walk(const tm_tools *t, const json_vocab *v, tm_walk *w, const tm_state *st, uint64_t *bits);

#endif
