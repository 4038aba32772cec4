/* grammar.h — grammar-guided decoding: the output must be a sentence of a context-free
 * grammar in the GBNF dialect (llama.cpp's grammars, xgrammar's EBNF as vLLM and SGLang take
 * it), and the per-step token mask over a vocabulary (json_vocab).
 *
 * The dialect: rules `name ::= alternatives` (names of letters, digits, '-' and '_'; the
 * start rule is `root`); an alternative is a sequence of string literals "..." (escapes
 * \n \r \t \\ \" \' \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH), character classes [a-z0-9_] and
 * [^...] (the same escapes), `.` (any character), rule names and groups ( ... ), each
 * optionally followed by `*`, `+`, `?`, {m}, {m,}, {m,n} or {,n}. `#` comments to the end of
 * the line. A rule goes on across lines until the next `name ::=` (llama.cpp's layouts and
 * xgrammar's both read so). Refused, with the line and column: an empty grammar, no root, a
 * rule defined twice, an undefined rule, left recursion (direct or through other rules or
 * nullable prefixes: a rule that can reach itself before consuming a character), unbalanced
 * brackets or quotes, a bad escape, a reversed range, a repetition bound past
 * GR_MAX_REPEAT, more than GR_MAX_RULES rules or GR_MAX_ELEMS elements once repetitions are
 * expanded, a grammar no text matches, and Lark's syntax (`start:` rules, %import).
 * Alternatives that can never complete (they refer to a rule with no finite sentence) are
 * dropped at compile, so every live parse can be completed.
 *
 * Matching (a pushdown automaton over code points): the state is a set of parse stacks, each
 * a path of grammar positions (the character element to match next on top, the places to
 * return to below it), shared and deduplicated through a hash-consed node pool. The text's
 * bytes are read as UTF-8 exactly as regex_mask.h reads them (a character steps the stacks
 * once complete; a character begun is alive while some completion of it is allowed; bytes
 * that are not well-formed UTF-8 end it). The state accepts when some stack is complete.
 * Bounds: GR_MAX_STACKS stacks at once, GR_MAX_DEPTH deep, GR_POOL nodes, GR_MAX_WORK
 * expansions per character, GR_MASK_BUDGET for a mask's walk. An ambiguous grammar can need
 * more: a step that would pass a bound fails as "over" (gr_run_why says which); no stack is
 * ever dropped from a state. The mask leaves out the tokens whose bytes pass a bound (every
 * token it allows is valid) and fails when its walk passes the budget or nothing is left.
 */
#ifndef DSV4_SAMPLE_GRAMMAR_H
#define DSV4_SAMPLE_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4_text.h"
#include "sample/json.h"

#define GR_MAX_TEXT (1 << 20)  /* bytes of grammar text */
#define GR_MAX_RULES 8192      /* rules, the ones groups and repetitions make included */
#define GR_MAX_ELEMS 65536     /* elements once repetitions are expanded */
#define GR_MAX_REPEAT 1000     /* m and n of {m,n} */
#define GR_MAX_NEST 64         /* parentheses inside parentheses */
#define GR_MAX_STACKS 512      /* parse stacks at once */
#define GR_MAX_DEPTH 512       /* a stack's depth (nesting of rules) */
#define GR_POOL (1 << 17)      /* stack nodes of one generation (live and the walk's) */
#define GR_MAX_WORK (1 << 16)  /* expansions for one character */
#define GR_MASK_BUDGET (1 << 22) /* expansions and stack tests for one token mask (~50 ms) */
#define GR_CACHE 32            /* masks kept per generation (a run's own cache) */
#define GR_KEY 2048            /* words of a cached state's key (larger states are not cached) */

typedef struct gr_grammar gr_grammar;

/* Compiles text (len bytes); -1 with why, to be read after "the grammar " ("at line 3, column
 * 7: undefined rule 'expr'", "has no rule named 'root' ...", "is empty (no rule)"). */
int gr_compile(const char *text, size_t len, gr_grammar **out, char *why, size_t why_len);
void gr_free(gr_grammar *g);

/* One generation's matcher: its state, the node pool, the walk's scratch and the mask cache,
 * all allocated by gr_run_new (nothing later). */
typedef struct gr_run gr_run;

/* For masks over vocabularies of at most max_len bytes a token and words 64-bit words a mask;
 * in the start state. 0, -1 out of memory. */
int gr_run_new(const gr_grammar *g, int max_len, int words, gr_run **out);
void gr_run_free(gr_run *r);
/* Masks by state, for one vocabulary (words 64-bit words a mask, cap masks kept): a run's
 * own, or shared by the runs of one grammar (thread-safe: the runs may mask on different
 * threads at once). Reference counted: gr_cache_new gives one, each run takes one. */
typedef struct gr_cache gr_cache;
gr_cache *gr_cache_new(int words, int cap);
gr_cache *gr_cache_ref(gr_cache *c);
void gr_cache_free(gr_cache *c);
/* gr_run_new with the masks in cache (its vocabulary's: words as the cache's), NULL its own */
int gr_run_new_shared(const gr_grammar *g, int max_len, int words, gr_cache *cache, gr_run **out);
/* back to the start state */
void gr_run_reset(gr_run *r);
/* The state over n more bytes: 1 alive (some continuation is accepted), 0 dead (the state is
 * then undefined: reset it), -1 over a bound (gr_run_why). */
int gr_run_feed(gr_run *r, const uint8_t *b, size_t n);
/* Frees the pool nodes the state no longer uses (after a token joined the text: the pool
 * would otherwise fill over a long generation). */
void gr_run_compact(gr_run *r);
/* 1 when the text so far is a sentence (a stop may come now) */
int gr_run_accepting(const gr_run *r);
/* the bound the last -1 passed */
const char *gr_run_why(const gr_run *r);

/* bits [v->words]: bit i set iff id i's bytes leave the state alive (trie ids only: no added
 * token, no stop), except the ids whose bytes pass a stack bound (GR_MAX_STACKS, GR_MAX_DEPTH,
 * GR_POOL, GR_MAX_WORK): those are left out (the mask only loses options: every id set is
 * valid). Returns the trie nodes stepped (0 on a cache hit), -1 when the walk passes
 * GR_MASK_BUDGET or the bounds left no id at all (gr_run_why; bits undefined). The state is
 * unchanged. */
long gr_mask(gr_run *r, const json_vocab *v, uint64_t *bits);
/* The same by brute force: every id's bytes fed from the state, those past a bound left out
 * (tests); -1 out of memory. */
int gr_mask_brute(gr_run *r, const dsv4_tokenizer *tok, uint64_t *bits, int words);
/* the mask cache's hits and misses, and the pool's nodes in use (benchmarks, tests) */
void gr_run_stats(const gr_run *r, long *hits, long *misses, long *nodes);
/* empties the mask cache (benchmarks: a cold mask) */
void gr_run_clear_cache(gr_run *r);

#endif
