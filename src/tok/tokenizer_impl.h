/* tokenizer_impl.h — the inside of a dsv4_tokenizer, shared by the tokenizer_*.c files
 * (load, encode, decode). Not part of any API. */
#ifndef DSV4_TOK_TOKENIZER_IMPL_H
#define DSV4_TOK_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdint.h>

#include "tok/tokenizer.h"

/* Per-id flags. TOK_VOCAB: in model.vocab, so BPE merges may produce it (an added token
 * may repeat a vocabulary entry; the BPE model still knows it). */
enum { TOK_HAS = 1, TOK_ADDED = 2, TOK_SPECIAL = 4, TOK_VOCAB = 8 };

/* Open-addressing map from a byte string to an id; the key of slot s is the string of id
 * slots[s]-1, looked up in a pool (pool + off[id], off[id+1]-off[id]-trim bytes). */
typedef struct tok_strmap {
    uint32_t *slots;  // (mask+1): id+1, 0 = empty
    uint32_t mask;
} tok_strmap;

/* One BPE merge: the pair (left id, right id) packed into key, its rank and result. */
typedef struct tok_merge {
    uint64_t key;    // (uint64)left << 32 | right; UINT64_MAX = empty slot
    int32_t rank;    // line number in "merges": lower merges first
    int32_t id;      // id of the merged token
} tok_merge;

/* An added token as matched in raw text. */
typedef struct tok_added {
    int32_t id;
    uint8_t lstrip, rstrip, single_word, normalized;
} tok_added;

/* Byte trie over the added tokens' contents; node 0 is the root. */
typedef struct tok_trie_node {
    int32_t child;    // first child node, -1 = none
    int32_t sibling;  // next sibling node, -1 = none
    int32_t added;    // index into added[] of a token ending here, -1 = none
    uint8_t byte;     // byte on the edge from the parent
} tok_trie_node;

/* Split behaviours of the HF pre-tokenizer. */
enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };

/* One pre-tokenizer stage: a Split, or a ByteLevel (optional prefix space, then the
 * optional GPT-2 split, Isolated). The byte-to-unicode mapping of ByteLevel needs no stage
 * work: the BPE runs on raw bytes and the vocabulary was translated to bytes at load. */
typedef struct tok_stage {
    pcre2_code *re;        // NULL: no split at this stage
    int behavior;          // SPLIT_*
    int invert;            // the pieces are the non-matches
    int add_prefix_space;  // ByteLevel: prepend ' ' to a piece not starting with one
} tok_stage;

#define TOK_MAX_STAGES 16

/* Direct-mapped cache of BPE results for short pre-tokens: the same words recur. */
#define TOK_CACHE_KEY 30
#define TOK_CACHE_IDS 14
#define TOK_CACHE_SLOTS 16384
#define TOK_CACHE_RETRY 64     // uncached words between two tries of a busy cache's mutex
typedef struct tok_cache_entry {
    uint8_t klen;                 // 0 = empty
    uint8_t nids;
    char key[TOK_CACHE_KEY];      // the pre-token's bytes
    int32_t ids[TOK_CACHE_IDS];   // its BPE ids
} tok_cache_entry;

struct dsv4_tokenizer {
    int n_ids;           // one past the largest id
    uint8_t *flags;      // (n_ids) TOK_* bits
    float *text_mask;    // (n_ids) 0 where TOK_HAS, else -inf (dsv4_tok_text_mask)
    char *spell;         // tokenizer.json spellings, each NUL-terminated
    uint32_t *spell_off; // (n_ids + 1) offsets into spell
    char *bytes;         // what each id decodes to (ByteLevel decoder)
    uint32_t *bytes_off; // (n_ids + 1) offsets into bytes
    tok_strmap by_spell; // spelling -> id (added tokens win over the vocabulary)
    tok_strmap by_bytes; // vocab bytes -> id, only built for ignore_merges

    int32_t byte_id[256];     // id of each single-byte token, -1 if the vocab lacks it
    tok_merge *merges;        // (merge_mask + 1) hash table
    uint64_t merge_mask;
    int ignore_merges;        // a whole pre-token found in the vocab is taken as is

    tok_added *added;         // (n_added)
    int n_added;
    int has_added_class[2];   // any added token with normalized = 0 / 1
    tok_trie_node *trie;      // (n_trie)
    int n_trie;
    int32_t root[256];        // the root's child per first byte, -1 = none

    tok_stage stages[TOK_MAX_STAGES];
    int n_stages;

    pthread_mutex_t cache_mu;   // guards cache; taken with trylock, a busy cache is retried
    pthread_mutex_t lazy_mu;    // guards lazy (dsv4_tok_lazy)
    void *lazy;                 // built on first use by a layer above (the JSON vocab index)
    void (*lazy_drop)(void *);
    tok_cache_entry *cache;     // (TOK_CACHE_SLOTS)
};

/* FNV-1a: hashing of token strings and cache keys. */
static inline uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static inline uint64_t tok_merge_hash(uint64_t key) {
    key ^= key >> 31;
    key *= 0x9e3779b97f4a7c15ull;
    return key ^ (key >> 29);
}

/* Looks up the pair (a, b); returns the merge or NULL. */
static inline const tok_merge *tok_merge_find(const dsv4_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t s = tok_merge_hash(key) & t->merge_mask;; s = (s + 1) & t->merge_mask) {
        const tok_merge *m = &t->merges[s];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
    }
}

/* Id whose bytes (in the by_bytes pool) equal s[0..n), or -1. */
int32_t tok_strmap_get(const tok_strmap *m, const char *pool, const uint32_t *off, int trim,
                       const char *s, size_t n);

/* Length of the valid UTF-8 prefix of s[0..n) (n when all of it is valid). */
size_t tok_utf8_valid_prefix(const char *s, size_t n);

#endif
