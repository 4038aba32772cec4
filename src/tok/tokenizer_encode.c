/* tokenizer_encode.c — text -> ids: added-token cut, pre-tokenizer splits, BPE merges.
 *
 * Everything works on byte offsets into the caller's text; no piece is copied except when
 * a ByteLevel stage has to prepend a space. The pre-tokenizer stages run depth-first: each
 * piece a stage produces goes straight through the following stages and the BPE, so the
 * memory in use is one interval list per stage, not a list of every pre-token. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer_impl.h"
#include "util/err.h"

/* One interval of a piece: a regex match or the gap between two. */
typedef struct piece_iv {
    size_t s, e;  // [s, e) in the piece
    int match;
} piece_iv;

/* A candidate merge of the BPE loop: symbol pos with its right neighbour right. */
typedef struct bpe_cand {
    int32_t rank, pos, right;
} bpe_cand;

typedef struct enc_ctx {
    const dsv4_tokenizer *t;
    dsv4_tok_ids *out;
    dsv4_err *err;
    pcre2_match_data *md;
    piece_iv *iv[TOK_MAX_STAGES];  // (iv_cap[k]) intervals of the piece stage k is splitting
    size_t iv_cap[TOK_MAX_STAGES];
    int32_t *sym, *prev, *next;    // (bpe_cap) BPE symbols: id (-1 once merged away), links
    bpe_cand *heap;                // (3 * bpe_cap) pending merges, min-heap on (rank, pos)
    size_t bpe_cap;
    tok_cache_entry *cache;        // t->cache while this call holds t->cache_mu (cache_mu), else
                                   // NULL: retried every TOK_CACHE_RETRY words while busy
    unsigned cache_miss;           // words run without the cache since the last retry
    const size_t *plain;           // (2 * n_plain) sorted [start, end) byte ranges where no
    int n_plain;                   // added token may match (untrusted message content)
    int disjoint;                  // each plain range ends before the next starts (the ends
                                   // ascend too: in_plain searches them)
} enc_ctx;

// The BPE cache's mutex (the tokenizer is shared and const to its users; its cache is not).
static pthread_mutex_t *cache_mu(const enc_ctx *c) { return (pthread_mutex_t *)&c->t->cache_mu; }

static int nomem(enc_ctx *c) { return dsv4_fail(c->err, DSV4_ERR_NOMEM, "out of memory while tokenizing"); }

static int push_id(enc_ctx *c, int32_t id) {
    dsv4_tok_ids *o = c->out;
    if (o->n == o->cap) {
        size_t ncap = o->cap ? 2 * o->cap : 64;
        int32_t *n = realloc(o->ids, ncap * sizeof *n);
        if (!n) return nomem(c);
        o->ids = n;
        o->cap = ncap;
    }
    o->ids[o->n++] = id;
    return 0;
}

void dsv4_tok_ids_free(dsv4_tok_ids *ids) {
    free(ids->ids);
    ids->ids = NULL;
    ids->n = ids->cap = 0;
}

/* ---- BPE ------------------------------------------------------------------------------- */

static inline int cand_less(bpe_cand a, bpe_cand b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(bpe_cand *h, size_t *n, bpe_cand x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static bpe_cand heap_pop(bpe_cand *h, size_t *n) {
    bpe_cand top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        bpe_cand best = x;
        if (l < *n && cand_less(h[l], best)) m = l, best = h[l];
        if (l + 1 < *n && cand_less(h[l + 1], best)) m = l + 1;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = x;
    return top;
}

static void add_cand(enc_ctx *c, size_t *nh, int32_t pos, int32_t right) {
    const tok_merge *m = tok_merge_find(c->t, c->sym[pos], c->sym[right]);
    if (m) heap_push(c->heap, nh, (bpe_cand){m->rank, pos, right});
}

/* Merges the bytes of one pre-token, lowest rank first and leftmost among equal ranks
 * (the order of tokenizers' Word::merge_all), and appends the resulting ids. */
static int bpe_word(enc_ctx *c, const char *p, size_t n) {
    const dsv4_tokenizer *t = c->t;
    if (n == 1) return t->byte_id[(uint8_t)p[0]] >= 0 ? push_id(c, t->byte_id[(uint8_t)p[0]]) : 0;
    if (t->ignore_merges) {
        int32_t id = tok_strmap_get(&t->by_bytes, t->bytes, t->bytes_off, 0, p, n);
        if (id >= 0) return push_id(c, id);
    }
    tok_cache_entry *ce = NULL;
    // A call that found the cache busy takes it once its holder is done (a small request on
    // the other intake lane) rather than run uncached to its end.
    if (!c->cache && n <= TOK_CACHE_KEY && ++c->cache_miss >= TOK_CACHE_RETRY) {
        c->cache_miss = 0;
        if (pthread_mutex_trylock(cache_mu(c)) == 0) c->cache = t->cache;
    }
    if (c->cache && n <= TOK_CACHE_KEY) {
        ce = &c->cache[tok_hash(p, n) & (TOK_CACHE_SLOTS - 1)];
        if (ce->klen == n && memcmp(ce->key, p, n) == 0) {
            for (int i = 0; i < ce->nids; i++)
                if (push_id(c, ce->ids[i])) return DSV4_ERR_NOMEM;
            return 0;
        }
    }
    if (n > c->bpe_cap) {
        size_t cap = n < 256 ? 256 : n;
        free(c->sym), free(c->prev), free(c->next), free(c->heap);
        c->sym = malloc(cap * sizeof *c->sym);
        c->prev = malloc(cap * sizeof *c->prev);
        c->next = malloc(cap * sizeof *c->next);
        c->heap = malloc(3 * cap * sizeof *c->heap);
        c->bpe_cap = c->sym && c->prev && c->next && c->heap ? cap : 0;
        if (!c->bpe_cap) return nomem(c);
    }
    // One symbol per byte; a byte the vocabulary lacks is dropped, as tokenizers does
    // for a BPE without unk_token.
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(uint8_t)p[i]];
        if (id < 0) continue;
        c->sym[m] = id;
        c->prev[m] = m - 1;
        c->next[m] = m + 1;
        m++;
    }
    if (m == 0) return 0;
    c->next[m - 1] = -1;
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < m; i++) add_cand(c, &nh, i, i + 1);
    // The heap holds at most m - 1 initial candidates plus two per merge (< m merges).
    while (nh) {
        bpe_cand x = heap_pop(c->heap, &nh);
        int32_t l = x.pos, r = x.right;
        if (c->sym[l] < 0 || c->next[l] != r) continue;  // l merged away or r no longer next
        const tok_merge *mg = tok_merge_find(t, c->sym[l], c->sym[r]);
        if (!mg || mg->rank != x.rank) continue;          // r has changed since
        c->sym[l] = mg->id;
        c->sym[r] = -1;
        c->next[l] = c->next[r];
        if (c->next[r] >= 0) c->prev[c->next[r]] = l;
        if (c->prev[l] >= 0) add_cand(c, &nh, c->prev[l], l);
        if (c->next[l] >= 0) add_cand(c, &nh, l, c->next[l]);
    }
    // Symbol 0 is never a right-hand side, so it heads the list.
    size_t first = c->out->n;
    for (int32_t i = 0; i >= 0; i = c->next[i])
        if (push_id(c, c->sym[i])) return DSV4_ERR_NOMEM;
    size_t k = c->out->n - first;
    if (ce && k <= TOK_CACHE_IDS) {
        ce->klen = (uint8_t)n;
        ce->nids = (uint8_t)k;
        memcpy(ce->key, p, n);
        memcpy(ce->ids, c->out->ids + first, k * sizeof *ce->ids);
    }
    return 0;
}

/* ---- pre-tokenizer ------------------------------------------------------------------------ */

static int push_iv(enc_ctx *c, int k, size_t *m, size_t s, size_t e, int match) {
    if (*m == c->iv_cap[k]) {
        size_t ncap = c->iv_cap[k] ? 2 * c->iv_cap[k] : 64;
        piece_iv *n = realloc(c->iv[k], ncap * sizeof *n);
        if (!n) return nomem(c);
        c->iv[k] = n;
        c->iv_cap[k] = ncap;
    }
    c->iv[k][(*m)++] = (piece_iv){s, e, match};
    return 0;
}

static size_t utf8_len(uint8_t b) { return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

/* Cuts a piece into matches and gaps that cover it (tokenizers' find_matches). An empty
 * match right where the previous match ended is skipped, as the regex crates do. */
static int find_matches(enc_ctx *c, int k, const pcre2_code *re, const char *p, size_t n,
                        size_t *m) {
    size_t off = 0, last = 0;
    int have_prev = 0;
    while (off <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)p, n, off, PCRE2_NO_UTF_CHECK, c->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return dsv4_fail(c->err, DSV4_ERR_UNSUPPORTED, "pre-tokenizer regex failed on a piece of %zu bytes: %s",
                             n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1] < ov[0] ? ov[0] : ov[1];
        if (ms == me) {
            if (!(have_prev && ms == last)) {
                if (ms > last && push_iv(c, k, m, last, ms, 0)) return DSV4_ERR_NOMEM;
                if (push_iv(c, k, m, ms, ms, 1)) return DSV4_ERR_NOMEM;
                last = ms;
            }
            if (ms >= n) break;
            off = ms + utf8_len((uint8_t)p[ms]);
            have_prev = 0;
            continue;
        }
        if (ms > last && push_iv(c, k, m, last, ms, 0)) return DSV4_ERR_NOMEM;
        if (push_iv(c, k, m, ms, me, 1)) return DSV4_ERR_NOMEM;
        last = off = me;
        have_prev = 1;
    }
    if (last < n && push_iv(c, k, m, last, n, 0)) return DSV4_ERR_NOMEM;
    return 0;
}

/* Rewrites the intervals in place into the pieces of a Split behaviour (the folds of
 * tokenizers' NormalizedString::split); returns the range [*lo, *hi) holding them. */
static void apply_behavior(piece_iv *iv, size_t m, int behavior, int invert, size_t *lo, size_t *hi) {
    if (invert)
        for (size_t i = 0; i < m; i++) iv[i].match = !iv[i].match;
    size_t w = 0;
    int prev = 0;
    switch (behavior) {
    case SPLIT_ISOLATED:
        *lo = 0, *hi = m;
        return;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < m; i++)
            if (!iv[i].match) iv[w++] = iv[i];
        break;
    case SPLIT_MERGED_PREV:  // a match ends the piece before it
        for (size_t i = 0; i < m; i++) {
            if (iv[i].match && !prev && w > 0) iv[w - 1].e = iv[i].e;
            else iv[w++] = iv[i];
            prev = iv[i].match;
        }
        break;
    case SPLIT_MERGED_NEXT: {  // a match starts the piece after it
        size_t r = m;
        for (size_t i = m; i-- > 0;) {
            int match = iv[i].match;
            if (match && !prev && r < m) iv[r].s = iv[i].s;
            else iv[--r] = iv[i];
            prev = match;
        }
        *lo = r, *hi = m;
        return;
    }
    case SPLIT_CONTIGUOUS:  // runs of matches (or of gaps) become one piece
        for (size_t i = 0; i < m; i++) {
            if (iv[i].match == prev && w > 0) iv[w - 1].e = iv[i].e;
            else iv[w++] = iv[i];
            prev = iv[i].match;
        }
        break;
    }
    *lo = 0, *hi = w;
}

/* Runs stage k (and, through recursion, the ones after it) on one piece. */
static int run_stage(enc_ctx *c, int k, const char *p, size_t n) {
    const dsv4_tokenizer *t = c->t;
    if (n == 0) return 0;
    if (k == t->n_stages) return bpe_word(c, p, n);
    const tok_stage *st = &t->stages[k];
    char *spaced = NULL;
    int rc = 0;
    if (st->add_prefix_space && p[0] != ' ') {
        if (!(spaced = malloc(n + 1))) return nomem(c);
        spaced[0] = ' ';
        memcpy(spaced + 1, p, n);
        p = spaced, n++;
    }
    if (!st->re) {
        rc = run_stage(c, k + 1, p, n);
    } else {
        size_t m = 0, lo, hi;
        if (!(rc = find_matches(c, k, st->re, p, n, &m))) {
            apply_behavior(c->iv[k], m, st->behavior, st->invert, &lo, &hi);
            for (size_t i = lo; i < hi && !rc; i++)
                rc = run_stage(c, k + 1, p + c->iv[k][i].s, c->iv[k][i].e - c->iv[k][i].s);
        }
    }
    free(spaced);
    return rc;
}

/* ---- added tokens ------------------------------------------------------------------------- */

/* Unicode White_Space (Rust's char::is_whitespace) at x[i]; returns its length or 0. */
static size_t space_at(const char *x, size_t i, size_t hi) {
    uint8_t b = (uint8_t)x[i];
    if (b == ' ' || (b >= 9 && b <= 13)) return 1;
    if (b < 0xC2) return 0;
    uint32_t cp;
    size_t w = utf8_len(b);
    if (i + w > hi) return 0;
    if (w == 2) cp = (uint32_t)(b & 0x1F) << 6 | ((uint8_t)x[i + 1] & 0x3F);
    else if (w == 3) cp = (uint32_t)(b & 0x0F) << 12 | (uint32_t)((uint8_t)x[i + 1] & 0x3F) << 6 | ((uint8_t)x[i + 2] & 0x3F);
    else return 0;
    int ws = cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
             cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
    return ws ? w : 0;
}

/* Start of the character that ends at i (i > lo). */
static size_t char_before(const char *x, size_t lo, size_t i) {
    do i--;
    while (i > lo && ((uint8_t)x[i] & 0xC0) == 0x80);
    return i;
}

/* single_word: the match may not touch a word character on either side. Word characters
 * are ASCII letters, digits and '_', and every non-ASCII character (an approximation of
 * Unicode alphanumerics that errs towards not matching). */
static int is_word_byte(uint8_t b) {
    return b >= 0x80 || b == '_' || (b >= '0' && b <= '9') || ((b | 0x20) >= 'a' && (b | 0x20) <= 'z');
}

/* 1 if the bytes [s, e) overlap a plain range of c. Disjoint ranges (a chat's message
 * contents, one range each) by binary search: a scan of every range for every added-token
 * match made a chat of n messages cost O(n^2) (40k messages: 2.5 s). */
static int in_plain(const enc_ctx *c, size_t s, size_t e) {
    if (!c->disjoint) {
        for (int k = 0; k < c->n_plain; k++)
            if (c->plain[2 * k] < e && s < c->plain[2 * k + 1]) return 1;
        return 0;
    }
    int lo = 0, hi = c->n_plain;  /* the first range ending after s */
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (c->plain[2 * mid + 1] > s) hi = mid;
        else lo = mid + 1;
    }
    return lo < c->n_plain && c->plain[2 * lo] < e;
}

/* First match of an added token with normalized == cls in x[pos, hi), the longest one at
 * the leftmost position, not overlapping a plain range. [*ms, *me) is what it consumes,
 * lstrip/rstrip whitespace included (never reaching back before lo, the end of the
 * previous cut). */
static int find_added(const enc_ctx *c, const char *x, size_t lo, size_t pos, size_t hi,
                      int cls, size_t *ms, size_t *me, int32_t *id) {
    const dsv4_tokenizer *t = c->t;
    for (size_t i = pos; i < hi; i++) {
        int32_t node = t->root[(uint8_t)x[i]];
        if (node < 0) continue;
        int best = -1;
        size_t best_end = 0, j = i + 1;
        for (;;) {
            const tok_trie_node *nd = &t->trie[node];
            if (nd->added >= 0) {
                const tok_added *a = &t->added[nd->added];
                int ok = a->normalized == cls;
                if (ok && a->single_word)
                    ok = (i == 0 || !is_word_byte((uint8_t)x[i - 1])) && (j == hi || !is_word_byte((uint8_t)x[j]));
                if (ok && c->n_plain) ok = !in_plain(c, i, j);
                if (ok) best = nd->added, best_end = j;
            }
            if (j >= hi) break;
            int32_t ch = nd->child;
            while (ch >= 0 && t->trie[ch].byte != (uint8_t)x[j]) ch = t->trie[ch].sibling;
            if (ch < 0) break;
            node = ch, j++;
        }
        if (best < 0) continue;
        const tok_added *a = &t->added[best];
        size_t s = i, e = best_end, w;
        if (a->lstrip)
            while (s > lo) {
                size_t b = char_before(x, lo, s);
                if (!space_at(x, b, s)) break;
                s = b;
            }
        if (a->rstrip)
            while (e < hi && (w = space_at(x, e, hi))) e += w;
        *ms = s, *me = e, *id = a->id;
        return 1;
    }
    return 0;
}

/* Text between added tokens: the normalizer is the identity (load refuses others). */
static int encode_plain(enc_ctx *c, const char *x, size_t n) { return run_stage(c, 0, x, n); }

/* Cuts the added tokens of class cls out of x[lo, hi) and hands the rest on: to the
 * normalized class (cls 0 -> 1), then to the pre-tokenizer. */
static int encode_added(enc_ctx *c, const char *x, size_t lo, size_t hi, int cls) {
    const dsv4_tokenizer *t = c->t;
    if (cls == 2) return encode_plain(c, x + lo, hi - lo);
    if (!t->has_added_class[cls]) return encode_added(c, x, lo, hi, cls + 1);
    size_t pos = lo, ms, me;
    int32_t id;
    int rc;
    while (find_added(c, x, pos, pos, hi, cls, &ms, &me, &id)) {
        if ((rc = encode_added(c, x, pos, ms, cls + 1))) return rc;
        if ((rc = push_id(c, id))) return rc;
        pos = me;
    }
    return encode_added(c, x, pos, hi, cls + 1);
}

static int tokenize_core(const dsv4_tokenizer *t, const char *text, size_t len, int flags,
                         const size_t *plain, int n_plain, dsv4_tok_ids *out, dsv4_err *err) {
    if (!text && len) return dsv4_fail(err, DSV4_ERR_ARG, "tokenize: text is NULL");
    // BPE symbol positions are int32.
    if (len > INT32_MAX) return dsv4_fail(err, DSV4_ERR_ARG, "tokenize: text of %zu bytes is over 2 GiB", len);
    size_t valid = tok_utf8_valid_prefix(text, len);
    if (valid != len)
        return dsv4_fail(err, DSV4_ERR_ARG, "tokenize: text is not valid UTF-8 at byte %zu (0x%02x)", valid,
                         (uint8_t)text[valid]);
    if (n_plain < 0 || (n_plain && !plain))
        return dsv4_fail(err, DSV4_ERR_ARG, "tokenize: bad plain ranges");
    for (int k = 0; k < n_plain; k++)
        if (plain[2 * k] > plain[2 * k + 1] || plain[2 * k + 1] > len)
            return dsv4_fail(err, DSV4_ERR_ARG, "tokenize: plain range %d [%zu, %zu) is not inside "
                             "the %zu bytes of text", k, plain[2 * k], plain[2 * k + 1], len);
    enc_ctx c = {.t = t, .out = out, .err = err, .plain = plain, .n_plain = n_plain, .disjoint = 1};
    for (int k = 0; k + 1 < n_plain; k++) c.disjoint &= plain[2 * k + 1] <= plain[2 * k + 2];
    size_t n0 = out->n;
    int rc = 0;
    c.md = pcre2_match_data_create(1, NULL);
    if (!c.md) return nomem(&c);
    // One call at a time owns the BPE cache; others run without it rather than wait, and
    // retry now and then (bpe_word).
    if (pthread_mutex_trylock(cache_mu(&c)) == 0) c.cache = t->cache;
    if (flags & DSV4_TOK_NO_ADDED) rc = encode_plain(&c, text, len);
    else rc = encode_added(&c, text, 0, len, 0);
    if (c.cache) pthread_mutex_unlock(cache_mu(&c));
    pcre2_match_data_free(c.md);
    for (int k = 0; k < TOK_MAX_STAGES; k++) free(c.iv[k]);
    free(c.sym), free(c.prev), free(c.next), free(c.heap);
    if (rc) out->n = n0;
    return rc;
}

int dsv4_tokenize_ex(const dsv4_tokenizer *t, const char *text, size_t len, int flags,
                     dsv4_tok_ids *out, dsv4_err *err) {
    return tokenize_core(t, text, len, flags, NULL, 0, out, err);
}

int dsv4_tokenize_marked(const dsv4_tokenizer *t, const char *text, size_t len,
                         const size_t *plain, int n_plain, dsv4_tok_ids *out, dsv4_err *err) {
    return tokenize_core(t, text, len, 0, plain, n_plain, out, err);
}

int dsv4_tokenize(const dsv4_tokenizer *t, const char *text, size_t len, dsv4_tok_ids *out,
                  dsv4_err *err) {
    return dsv4_tokenize_ex(t, text, len, 0, out, err);
}
