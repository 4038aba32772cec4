/* json.h — structured output: a JSON Schema (the subset below) compiled to a byte-level
 * pushdown automaton, and the per-step token mask over a vocabulary (json_vocab).
 *
 * Compiled schema (json_schema.c): a graph of nodes. A node is one of
 *   TYPED: a set of JSON types, with the object part (properties in order, or free keys
 *          whose values follow `additional`) and the array part (prefixItems, items,
 *          minItems, maxItems); "any JSON value" is TYPED with every type;
 *          the string part (json_strc: minLength, maxLength, pattern, format);
 *          and the number part (bounds and multipleOf: a DFA, json_num_spec);
 *   LIT:   enum / const: the values' compact JSON texts, matched byte for byte;
 *   ANYOF: alternatives, followed in parallel (one stack each) until the bytes decide.
 * "oneOf" is compiled as "anyOf": a value that satisfies two or more of its branches is
 * accepted, though oneOf forbids that. The two agree when no value satisfies two branches:
 * distinct "const"/"enum" values of a required property (a discriminated union: Pydantic's
 * oneOf + discriminator), distinct types, disjoint bounds; they differ on overlapping
 * branches such as oneOf [integer, number] (1 accepted) or two objects that each allow the
 * other's value. "discriminator" is an annotation (the branches' own consts enforce it).
 * "allOf" is merged into one schema before it is compiled (json_schema.c): properties
 * joined in order (a property in several parts: the allOf of its schemas), required joined,
 * types intersected, minimum/minLength/minItems the largest and maximum/maxLength/maxItems
 * the smallest; any other keyword set by several parts must be equal (else refused); a
 * $ref part merges its target. Objects therefore merge as zod's .and() and Pydantic v1's
 * allOf mean, not as JSON Schema's allOf with additionalProperties false would (which
 * forbids the other part's properties).
 *
 * Automaton state (json_match.c): a set of at most JSON_MAX_STACKS stacks of frames, each
 * at most JSON_MAX_DEPTH deep. A byte advances every stack; a stack that cannot take it
 * dies; the state is dead when no stack is left. A schema whose anyOf branches could need
 * more stacks at once is refused at compile (json_readings names the anyOf), so no reading
 * is ever dropped. Whitespace between tokens is allowed in
 * runs of at most JSON_MAX_WS bytes (so a constrained model cannot loop on whitespace).
 * The state is plain data of bounded size: copying it is how the vocabulary walk tries a
 * token's bytes, and nothing is allocated per byte or per token.
 */
#ifndef DSV4_SAMPLE_JSON_H
#define DSV4_SAMPLE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4_text.h"

#define JSON_MAX_STACKS 32 /* stacks a step may hold: json_readings bounds them (json_reads.c) */
#define JSON_MAX_DEPTH 32
#define JSON_MAX_WS 32
#define JSON_MAX_PROPS 64 /* per object (a candidate bitmask) */
#define JSON_MAX_LITS 64  /* per enum */
#define JSON_MAX_NODES 4096
#define JSON_MAX_DFA 1024 /* states of a pattern's DFA */

/* Node kinds and type bits */
enum { JN_TYPED = 0, JN_LIT, JN_ANYOF };
enum { JT_OBJ = 1, JT_ARR = 2, JT_STR = 4, JT_NUM = 8, JT_INT = 16, JT_BOOL = 32, JT_NULL = 64 };

typedef struct json_prop {
    char *key;      /* the name as a JSON string, quotes included ("\"name\"") */
    int key_len;
    int node;       /* the value's schema */
    int required;
} json_prop;

typedef struct json_lit {
    char *text;     /* a value's compact JSON text (cJSON_PrintUnformatted) */
    int len;
} json_lit;

/* A DFA over Unicode code points (json_regex.c): a pattern, a format, or both. State 0
 * starts; -1 is the dead state (json_strc.ok says which live ones can still accept). */
typedef struct json_dfa {
    int n_states, n_classes;  /* n_states 0: no DFA (any characters) */
    uint32_t *lo;             /* (n_classes) class k is the code points [lo[k], lo[k + 1]) */
    uint16_t ascii[128];      /* the class of each ASCII code point */
    int16_t *next;            /* (n_states * n_classes) the next state, -1: none */
    uint8_t *accept;          /* (n_states) */
} json_dfa;

/* A constrained string (minLength, maxLength, pattern, format): its code points (after JSON
 * unescaping) counted and run through the DFA. ok says, for a DFA state q and a count n,
 * whether some continuation still closes the string within the bounds (an accepting state,
 * min <= count <= max): a string is alive only while it is, so "alive => completable"
 * holds with the lengths too. Counts saturate at cap when there is no maxLength. */
typedef struct json_strc {
    int min, max;             /* code points; max -1: none */
    int cap;                  /* max, or min when there is no max */
    json_dfa dfa;
    uint64_t *ok;             /* bits [dfa.n_states][cap + 1]; NULL without a DFA (then every
                               * count up to max can close) */
    /* [dfa.n_states][4] (in ok's allocation, freed with it; NULL without a DFA): the bytes
     * that can come next from DFA state q between characters: an ASCII character with a
     * transition, a UTF-8 lead byte with one for some code point it can begin (counts
     * aside: a superset, never '"', '\\' or a control byte). The vocabulary walks test it
     * before a step, so a string drops out at the byte that kills it for a bit test. */
    const uint64_t *acc;
    /* Where counts do not matter (json_mask caches the mask there): without max, counts
     * from flat on (ok's columns flat..cap are the same, and counts saturate); with max,
     * counts 0..flat (columns 0..flat the same). */
    int flat;
} json_strc;

/* One schema's compile budget, shared by all its patterns, formats and length tables (the
 * compile runs on the server's intake thread: one request must not hold it for seconds or
 * take a gigabyte): work in units of about one 64-bit word operation (closure and subset
 * steps, table fills) and bytes of the DFA and length tables kept. Past either, the compile
 * is refused. NULL to the functions below: a fresh budget for that call alone. */
typedef struct json_budget {
    int64_t work, bytes;
} json_budget;
#define JSON_BUDGET_WORK 200000000  /* ~0.1-0.3 s of this code on one core */
#define JSON_BUDGET_BYTES (64 << 20)

/* dsv4_json_schema_compile, where no value may hold the text `forbid` (a strict tool's
 * "</｜DSML｜parameter>", which would end the value early): a const / enum value or a
 * property name holding it is refused, and every pattern / format is cut to the strings
 * without it (one that then leaves no string is refused); forbid_why ends the messages.
 * (Plain strings need no cut: the tool automaton ends the value there or flushes.) */
int json_schema_compile_without(const char *text, size_t len, const char *forbid, const char *forbid_why,
                                dsv4_json_schema **out, dsv4_err *err);

/* The most stacks json_match.c can hold during a step of this schema's automaton (the
 * readings at once, bounded at compile time, plus those being expanded: json_reads.c);
 * dsv4_json_schema_compile refuses a schema past JSON_MAX_STACKS, naming *worst (the
 * innermost anyOf node past it; 0 when it is the root). -1 out of memory, -2 over the
 * budget's work. */
int json_readings(const dsv4_json_schema *s, json_budget *bud, int *worst);

/* Compiles a pattern (UTF-8, len bytes; unanchored, as JSON Schema says) to a DFA; -1 with
 * why (e.g. "uses a lookahead (?=") when it is outside the subset or over a bound. */
int json_regex_compile(const char *pattern, size_t len, json_dfa *out, json_budget *b, char *why, size_t why_len);
/* out: the strings both a and b accept */
int json_dfa_intersect(const json_dfa *a, const json_dfa *b, json_dfa *out, json_budget *bud, char *why,
                       size_t why_len);
/* out: the strings that do not hold w (UTF-8, at most 32 code points) */
int json_dfa_without(const char *w, size_t len, json_dfa *out, json_budget *b, char *why, size_t why_len);
/* out: a copy of d (charged to b's bytes) */
int json_dfa_copy(const json_dfa *d, json_dfa *out, json_budget *b, char *why, size_t why_len);
int json_dfa_class(const json_dfa *d, uint32_t cp);
void json_dfa_free(json_dfa *d);
/* sets sc->cap and builds sc->ok from min, max and dfa; -1 with why over the size bound */
int json_strc_lengths(json_strc *sc, json_budget *b, char *why, size_t why_len);

/* A bounded number (json_number.c): minimum, maximum, exclusiveMinimum, exclusiveMaximum
 * (each a bound and its comparison) and multipleOf, compiled to a DFA over the number's
 * bytes (ASCII classes: '-', '.', each digit, the rest) that accepts exactly the number
 * texts whose value satisfies them all. Exact: the value is compared as a decimal with each
 * bound's shortest decimal (the number as the schema wrote it, e.g. 0.1 is 1/10, not the
 * double below it), and multipleOf m holds when value / m is an integer, both decimals.
 * The form of a bounded number is restricted, every value in range staying expressible:
 * no exponent (1e3 is written 1000) and no negative zero ("-0", "-0.0"; 0 is "0"); digits
 * past the point are free otherwise ("1.50"), an integer has none. Every live state can
 * still be completed to an accepted number: the DFA keeps only states from which an
 * accepting one is reachable (no dead-end prefix such as "-" under minimum 0, or "1" under
 * exclusiveMaximum 1 with integers), and a range with no number in it is refused. Bounds
 * must be finite with at most 40 digits before and after the point and at most 15
 * significant digits (so the double cJSON read is the decimal written); multipleOf positive, at
 * most 6 digits written out; at most 32000 states. */
enum { JSON_NUM_GE, JSON_NUM_GT, JSON_NUM_LE, JSON_NUM_LT };
typedef struct json_num_spec {
    int integer;            /* 1: integers only (no point) */
    int n_bounds;           /* at most 4 */
    double bound[4];
    int op[4];              /* JSON_NUM_*: value op bound */
    const char *name[4];    /* the keywords, for messages */
    double multiple;        /* multipleOf; 0: none */
} json_num_spec;
int json_number_compile(const json_num_spec *sp, json_dfa *out, json_budget *b, char *why, size_t why_len);

typedef struct json_node {
    uint8_t kind;           /* JN_* */
    uint8_t types;          /* JT_* (TYPED) */
    int props, n_props;     /* [props, props + n_props) of json_schema.props, in order */
    int additional;         /* free-key objects: the values' node; -1: declared keys only */
    int prefix, n_prefix;   /* prefixItems: [prefix, prefix + n_prefix) of json_schema.kids */
    int items;              /* items past the prefix: node, or -1 (items: false) */
    int min_items, max_items; /* max -1: none */
    int strc;               /* strings: json_schema.strcs index, -1: any string */
    int numc;               /* numbers: json_schema.nums index (a bounded number), -1: any number */
    int lits, n_lits;       /* LIT: [lits, lits + n_lits) of json_schema.lits */
    int alts, n_alts;       /* ANYOF: [alts, alts + n_alts) of json_schema.kids */
    /* The fewest frames above a value's own that completing it needs (its cheapest way
     * out: the required properties, minItems items), as an object / array / at all. The
     * automaton starts an object, array, property or item only when that fits under
     * JSON_MAX_DEPTH, so a state that is alive can always be completed: the mask is never
     * empty before the value is complete (given single-byte tokens for ASCII, which every
     * byte-level vocabulary has), and EOS is allowed once it is. */
    int need, need_obj, need_arr;
} json_node;

struct dsv4_json_schema {
    json_node *nodes;       /* (n_nodes); node 0 is the root */
    int n_nodes, cap_nodes;
    json_prop *props;       /* (n_props) */
    int n_props, cap_props;
    int *kids;              /* (n_kids) prefixItems and anyOf lists */
    int n_kids, cap_kids;
    json_lit *lits;         /* (n_lits) */
    int n_lits, cap_lits;
    json_strc *strcs;       /* (n_strcs) */
    int n_strcs, cap_strcs;
    json_dfa *nums;         /* (n_nums) bounded numbers' DFAs (json_number_compile) */
    int n_nums, cap_nums;
    int bool_node, null_node; /* LIT nodes of true/false and null */
    int max_stacks;         /* the most stacks a step holds (json_readings, <= JSON_MAX_STACKS):
                             * the capacity its states need (json_state_size) */
};

/* Grows the array *p of *cap elements of size bytes to hold need (doubling, from 16);
 * -1 out of memory (*p and *cap unchanged). */
int json_grow(void **p, int *cap, int need, size_t size);

/* A hex digit's value, or -1 (json_regex.c; also the string escapes' \u digits). */
int json_hexval(int c);

/* ---- automaton ---- */

typedef struct json_frame {
    uint16_t node;
    uint8_t kind;           /* F_* (json_match.c) */
    uint8_t phase;
    uint8_t ws;             /* whitespace bytes in the current run */
    uint8_t pad[3];
    uint32_t a;             /* offset (KEY, LIT), item count (ARR), next property (OBJ),
                             * UTF-8 state (STR); CSTR: UTF-8 state in bits 0-2, the code
                             * point so far (UTF-8 or \\u digits) from bit 8 */
    uint32_t q;             /* DFA state (CSTR; NUM of a bounded number) */
    uint64_t b;             /* candidate bitmask (KEY, LIT), current property (OBJ), code
                             * points so far (CSTR) */
} json_frame;

typedef struct json_state {
    int n;                               /* live stacks; 0 = dead */
    int over;                            /* a step needed more than the schema's max_stacks (dead) */
    int depth[JSON_MAX_STACKS];
    json_frame f[JSON_MAX_STACKS][JSON_MAX_DEPTH]; /* last: see json_state_size */
} json_state;

/* The bytes of a state that holds at most cap stacks. A schema's steps never hold more than
 * its max_stacks (a step past them fails whole: over), and the functions below touch only the
 * stacks a state holds (f[0..n), never the whole struct), so a state used with one schema
 * only may be allocated at json_state_size(s->max_stacks) bytes (1.7 KB for a schema without
 * a union, 24.7 KB at JSON_MAX_STACKS): the vocabulary walks keep one per token byte. Such a
 * state is never copied or assigned whole (json_state_copy). */
static inline size_t json_state_size(int cap) {
    return offsetof(json_state, f) + (size_t)cap * sizeof(json_frame[JSON_MAX_DEPTH]);
}

/* The start state: the root value is next. */
void json_state_init(const dsv4_json_schema *s, json_state *st);
/* dst = src advanced by byte c (dst != src). Returns 1 if alive, 0 if dead. */
int json_state_step(const dsv4_json_schema *s, const json_state *src, uint8_t c, json_state *dst);
/* dst = src, copying only the live stacks' frames (dst != src). */
void json_state_copy(json_state *dst, const json_state *src);
/* 1 when the bytes so far are one complete value (EOS may come now). */
int json_state_accepting(const dsv4_json_schema *s, const json_state *st);
/* Steps st[*cur] over n bytes, ping-pong with st[*cur ^ 1] (*cur then names the state after
 * them); 0 once a byte kills it. */
int json_state_feed(const dsv4_json_schema *s, json_state st[2], int *cur, const uint8_t *b, size_t n);
/* 1 when every reading of the state is inside a plain string, between characters or
 * inside a UTF-8 character, the same for all (*utf8: json_match.c's UTF-8 state, 0..7):
 * then a token whose bytes have no '"', '\\' or control byte stays inside the strings
 * (every reading lives), valid iff its UTF-8 is. */
int json_state_in_string(const json_state *st, int *utf8);
/* 1 when the state is inside a constrained string (json_strc) between characters or inside
 * a UTF-8 character, not in an escape: then a token without '"', '\\' or control bytes
 * stays inside the string, and json_cstr_step on a copy of *top (the string's frame) steps
 * it exactly as json_state_step would. */
int json_state_in_cstr(const json_state *st, json_frame *top);
/* 1 when a whitespace byte may be some reading's text, not the space between two tokens:
 * a reading inside a string (plain or constrained), an object key, or a literal (enum,
 * const) whose next byte is whitespace (inside one of its strings: literals are compact). */
int json_state_in_quotes(const dsv4_json_schema *s, const json_state *st);
/* The readings of st inside a string, plain or constrained, between characters or inside a
 * UTF-8 character, not in an escape: their string frames in tops (returns how many), the
 * other readings' stacks in rest (a state of as many stacks as st). A token without '"',
 * '\\' or control bytes moves each string reading's frame alone and keeps the readings
 * whose frame takes it: it is valid for those iff it is for one of their frames (json_mask
 * ORs theirs), and for the others iff it is for rest (readings step apart). */
int json_state_strings(const json_state *st, json_frame *tops, json_state *rest);
/* 1 for a constrained string's frame (json_cstr_step), 0 for a plain string's (its UTF-8
 * state in a) */
int json_frame_is_cstr(const json_frame *t);
/* the string frame t after byte c (not '"', '\\' or a control byte): 1 alive, 0 dead */
int json_cstr_step(const dsv4_json_schema *s, json_frame *t, uint8_t c);
/* The UTF-8 state after byte c inside a string from state u, or -1 if c is not allowed
 * there (a '"', '\\' or control byte counts as not allowed). */
int json_utf8_next(int u, uint8_t c);

/* ---- the vocabulary index (json_vocab.c) ---- */

/* A trie node in preorder: its byte, its depth (1 = a first byte), the index just past its
 * subtree, and the id whose bytes end here (-1: none; more ids with the same bytes follow
 * through json_vocab.dup). */
typedef struct json_trie {
    uint32_t skip;
    int32_t tok;
    uint16_t depth;
    uint8_t byte;
    uint8_t dup;            /* 1: more ids with tok's bytes (json_vocab.dup) */
} json_trie;

typedef struct json_tok { const uint8_t *b; int32_t len, id; } json_tok;

typedef struct json_vocab {
    int V;                  /* ids: the tokenizer's vocabulary size */
    int words;              /* 64-bit words of a mask of V bits */
    int max_len;            /* longest token, bytes */
    json_trie *all;         /* (n_all) every id with text that is not an added token */
    int n_all;
    json_trie *spec;        /* (n_spec) those with a '"', '\\' or control byte */
    int n_spec;
    int32_t *dup;           /* (V) next id with the same bytes, -1 */
    uint64_t *safe;         /* [8][words]: ids that stay inside a string from UTF-8 state u */
    int32_t *gt;            /* (n_gt) ids whose bytes hold a '>' (added tokens too): the
                             * only ones that can end a "</think>" */
    int n_gt;
    json_tok *plain;        /* (n_plain) the ids of all but not spec, longest first */
    int n_plain;
} json_vocab;

/* Builds the index of a tokenizer's vocabulary (~0.1 s for 129K ids); NULL when out of
 * memory. */
json_vocab *json_vocab_build(const dsv4_tokenizer *tok);
void json_vocab_free(json_vocab *v);
/* sets id and every id with the same bytes (v->dup's chain) in bits: a trie node's token */
static inline void json_vocab_set_id(const json_vocab *v, uint64_t *bits, int32_t id) {
    for (; id >= 0; id = v->dup[id]) bits[id >> 6] |= 1ull << (id & 63);
}
/* the same for trie node t (t->tok >= 0): the chain is read only where there is one (v->dup
 * is 0.5 MB read at random: most of a walk's time went to its cache misses) */
static inline void json_vocab_set_tok(const json_vocab *v, uint64_t *bits, const json_trie *t) {
    bits[t->tok >> 6] |= 1ull << (t->tok & 63);
    if (t->dup) json_vocab_set_id(v, bits, v->dup[t->tok]);
}

/* Per-generation scratch for json_mask: the walk's states, one per trie depth (each of
 * json_state_size(cap) bytes), and the masks of the plain ids inside constrained strings,
 * kept by (string, DFA state, UTF-8 state): where counts do not matter (json_strc.flat) the
 * walk is done once per key. Several constrained strings that need a walk in one step
 * (readings of a union, each in its own string) share one walk of the trie
 * (json_cstr_walk_any), which keeps each string's frame along the current path. */
typedef struct json_walk {
    unsigned char *st;      /* (max_len + 1) states, stride bytes apart: json_walk_st */
    size_t stride;
    int cap;                /* stacks a state holds: serves schemas whose max_stacks fit */
    int n_st;
    json_frame *fr;         /* (max_len + 1) a constrained string's frame at each depth */
    uint64_t *cache;        /* [n_cache][words] */
    uint64_t *one;          /* [words]: one string frame's mask, ORed into the union's */
    json_frame tops[JSON_MAX_STACKS]; /* the readings' string frames (json_state_in_strings) */
    struct { int strc; uint32_t q, a; } key[JSON_MAX_STACKS]; /* strc -1: empty */
    int n_cache;            /* slots: cap, at least 4 (16 KB each at 129K ids) */
    int next;               /* the slot the next miss takes */
    struct { int strc; uint32_t q, a; } prev[JSON_MAX_STACKS]; /* the last mask's string keys */
    int n_prev;
    /* json_cstr_walk_any: per string j, its frames (wf) at depths 0..wtop of the way to
     * trie node wx (-1: the root), the node where it died (wdeadn, -1: none); the trie node
     * at each depth of the current path; the first string alive at each depth (wit) */
    json_frame *wf;         /* [cap][n_st] */
    int32_t *path, *wit;    /* (n_st) */
    /* the shared walk's path (json_match.c's path_through): per depth d, the UTF-8 state after its byte
     * (pu) and the depth of the character boundary a string's step at d starts from (pbase):
     * a string's frames are kept at the boundaries only (wf, fr) */
    int32_t *pbase;         /* (n_st) */
    int8_t *pu;             /* (n_st) */
    int pv;                 /* pu, pbase hold for the current path through depth pv */
    /* the walks' step memos (json_match.c's cstr_at): per string j < cap (json_cstr_walk:
     * j 0), per depth d <= n_st, what completing a code point at d from its frame at the
     * boundary before gave */
    int32_t *wm;            /* [cap][n_st + 5] */
    int wtop[JSON_MAX_STACKS];
    int32_t wx[JSON_MAX_STACKS], wdeadn[JSON_MAX_STACKS];
} json_walk;

/* the walk's state at depth d */
static inline json_state *json_walk_st(const json_walk *w, int d) {
    return (json_state *)(void *)(w->st + (size_t)d * w->stride);
}

/* A walk serves schemas whose max_stacks are at most cap (JSON_MAX_STACKS: any schema);
 * json_walk_reset before it serves another schema. */
int json_walk_init(json_walk *w, const json_vocab *v, int cap);
void json_walk_reset(json_walk *w);
void json_walk_free(json_walk *w);

/* The walks inside constrained strings (json_match.c): the ids of v's whole trie whose bytes
 * (none a '"', '\\' or control byte) a string frame takes, set in bits. json_cstr_walk: the
 * frame w->fr[0]; json_cstr_walk_any: the ids some frame of w->wf[j * w->n_st], j < m, takes
 * (the OR of their json_cstr_walks in one pass of the trie: a node is stepped with the first
 * frame alive there, the next ones brought along the path only when it dies). The path's
 * UTF-8 is decoded once for all frames (w->pu) and a frame brought along it is stepped once
 * per code point, not per byte (w->pbase); the m frames must share their UTF-8 state (a & 7).
 * A frame's step that completes a code point depends on its class alone (its DFA class), so
 * a trie node whose code point has the class of the last one completed there from the same
 * frame takes that step's outcome (w->wm). Return the frame steps. */
long json_cstr_walk(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, uint64_t *bits);
long json_cstr_walk_any(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, int m, uint64_t *bits);

/* bits [words]: bit v set iff id v's bytes can follow state st (the ids of the trie only:
 * no added token, no end of sequence). Returns the number of trie nodes stepped. */
long json_mask(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, const json_state *st,
               uint64_t *bits);
/* The same by brute force: every id's bytes run through the automaton (tests). */
void json_mask_brute(const dsv4_json_schema *s, const dsv4_tokenizer *tok, const json_state *st,
                     uint64_t *bits, int words);

#endif
