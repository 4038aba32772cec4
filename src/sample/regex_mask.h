/* regex_mask.h — guided decoding: the output must fully match a regular expression, or be
 * exactly one of a list of strings (vLLM's structured_outputs regex / choice, SGLang's
 * regex), and the per-step token mask over a vocabulary (json_vocab).
 *
 * A regex is compiled by json_regex_compile (json.h: its ECMA-262 subset, a DFA over code
 * points) as ^(?:P)$, so the DFA accepts exactly the texts P matches whole: no JSON
 * escaping, no search inside a longer text. The text's bytes are read as UTF-8: an ASCII
 * byte steps the DFA, a multi-byte character steps it once complete; bytes that are not
 * well-formed UTF-8 (Unicode's table 3-7: no overlong form, no surrogate, nothing past
 * U+10FFFF) end it. A choice list is a trie of its strings' bytes (duplicates merged, the
 * empty string allowed), so a list of any size and any bytes compiles.
 *
 * State (rx_state): the DFA state (or trie node) and the UTF-8 character begun. It is alive
 * while some continuation of its bytes is accepted ("alive => completable"): a DFA state
 * from which no accepting state can be reached counts as dead, as does a character begun
 * whose every completion leads to one. The mask allows a token iff its bytes leave the
 * state alive; the stop tokens go iff the state accepts (the caller's part).
 */
#ifndef DSV4_SAMPLE_REGEX_MASK_H
#define DSV4_SAMPLE_REGEX_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4_text.h"
#include "sample/json.h"

typedef struct rx_guide rx_guide;

/* Compiles pattern (len bytes, UTF-8) for a full match; -1 with why (the compiler's
 * refusal, or "matches no string"). */
int rx_guide_regex(const char *pattern, size_t len, rx_guide **out, char *why, size_t why_len);
/* Compiles the choice list (n >= 1 strings, NUL-terminated); -1 with why (empty list, out
 * of memory). */
int rx_guide_choice(const char *const *choices, int n, rx_guide **out, char *why, size_t why_len);
void rx_guide_free(rx_guide *g);

/* q: DFA state or trie node; u: 0 between characters, else the character begun (bytes
 * read in bits 24-25, bytes left in bits 26-27, its code point's bits so far below). */
typedef struct rx_state { int32_t q; uint32_t u; } rx_state;

void rx_state_init(const rx_guide *g, rx_state *st);
/* st advanced by byte c; 1 when it may still be alive, 0 when dead (st then undefined).
 * A 1 inside a character is exact only once the character completes: rx_state_alive says
 * whether a state can still be completed. */
int rx_state_step(const rx_guide *g, rx_state *st, uint8_t c);
/* 1 when some continuation of st is accepted */
int rx_state_alive(const rx_guide *g, const rx_state *st);
/* 1 when the text so far is accepted (a stop may come now) */
int rx_state_accepting(const rx_guide *g, const rx_state *st);
/* st over n bytes: 1 alive after them (rx_state_alive), 0 dead */
int rx_state_feed(const rx_guide *g, rx_state *st, const uint8_t *b, size_t n);

/* The masks of one guide over one vocabulary (rx_masks, regex_mask.c): the states met so
 * far (RX_CACHE slots a walk, up to RX_CHUNKS walks' worth, the oldest replaced: a DFA has
 * finitely many states, so after warm-up a step costs a copy), shared by every walk made
 * from one (the n choices of a request, whose
 * draws run on the engine's threads at once): a lock around the slots, a state walked by one
 * walk at a time (another that needs it waits for it), the guide and the masks freed with
 * their last walk. A regex's DFA states are keyed by their class under equivalence up to
 * max_len + 1 code points (two states whose continuations of that length live alike have the
 * same mask, as no token is longer): the states of a count such as .{0,200} that leave room
 * for any token share one mask. */
#define RX_CACHE 32
#define RX_CHUNKS 8
typedef struct rx_masks rx_masks;

/* A walk's own scratch: its state at each trie depth, and what its masks cost it. */
typedef struct rx_walk {
    int32_t *sq;            /* (max_len + 1) the state's q at each depth (apart from its u: */
    uint32_t *su;           /* (max_len + 1) one 8-byte struct written in halves stalled the walk) */
    rx_masks *m;            /* the guide's masks, shared */
    long hits, misses;      /* this walk's: copies, walks of the trie (for the benchmark) */
} rx_walk;

/* For g's masks over v: allocates everything the walk needs (nothing later) and computes the
 * states' classes (bounded work: past it, none). 0, -1 out of memory. */
int rx_walk_init(rx_walk *w, const json_vocab *v, const rx_guide *g);
/* The same, the masks taking g (freed with their last walk; on failure too) */
int rx_walk_init_own(rx_walk *w, const json_vocab *v, rx_guide *g);
/* Another walk over other's masks (its guide, classes and cache: each state walked once for
 * both); other may be freed first. 0, -1 out of memory. */
int rx_walk_share(rx_walk *w, const json_vocab *v, const rx_walk *other);
void rx_walk_free(rx_walk *w);
const rx_guide *rx_walk_guide(const rx_walk *w);
/* the classes the DFA's states fall into (-1: none, each state its own) */
int rx_walk_classes(const rx_walk *w);
/* empties the masks' cache (the benchmark's cold walk); no walk may run at once */
void rx_walk_forget(rx_walk *w);

/* bits [v->words]: bit i set iff id i's bytes leave st alive under g (the walk's guide: trie
 * ids only, no added token, no stop). Returns the trie nodes stepped (0 on a cache hit).
 * Walks sharing masks may call it on several threads at once (each walk on one). */
long rx_mask(const rx_guide *g, const json_vocab *v, rx_walk *w, const rx_state *st, uint64_t *bits);
/* The same by brute force: every id's bytes fed from st (tests). */
void rx_mask_brute(const rx_guide *g, const dsv4_tokenizer *tok, const rx_state *st, uint64_t *bits, int words);

#endif
