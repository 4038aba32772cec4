/* json_vocab.c — the token mask of a JSON automaton state over a whole vocabulary.
 *
 * The vocabulary's byte strings form a trie, stored in preorder (json_trie): the walk
 * steps the state once per trie node and skips a whole subtree at the first byte the state
 * refuses, so shared prefixes are stepped once and dead ones never. Inside a string (most
 * of a JSON value's tokens) almost every token is plain text that keeps the string open:
 * those are precomputed per UTF-8 state (json_vocab.safe), and only the tokens holding a
 * '"', '\\' or control byte (the `spec` trie, a few percent) are walked. */
#include "sample/json.h"

#include <stdlib.h>
#include <string.h>

typedef json_tok tok_ref;

static int by_len_desc(const void *x, const void *y) {
    const tok_ref *a = x, *b = y;
    return a->len != b->len ? (a->len > b->len ? -1 : 1) : (a->id > b->id) - (a->id < b->id);
}

static int by_bytes(const void *x, const void *y) {
    const tok_ref *a = x, *b = y;
    const int n = a->len < b->len ? a->len : b->len;
    const int c = memcmp(a->b, b->b, (size_t)n);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Preorder trie of the sorted refs; *n_out nodes. dup links ids with equal bytes (NULL: the
 * duplicates are linked elsewhere already). */
static json_trie *build_trie(const tok_ref *r, int n, int max_len, int32_t *dup, int *n_out) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)r[i].len;
    json_trie *t = malloc((total ? total : 1) * sizeof *t);
    int *path = malloc((size_t)(max_len + 1) * sizeof *path); /* node index at each depth */
    if (!t || !path) { free(t); free(path); return NULL; }
    int nt = 0, depth = 0; /* nodes on the current path */
    for (int i = 0; i < n; i++) {
        int common = 0;
        if (i) {
            const int m = r[i - 1].len < r[i].len ? r[i - 1].len : r[i].len;
            while (common < m && common < depth && r[i - 1].b[common] == r[i].b[common]) common++;
        }
        if (i && common == r[i].len && r[i].len == r[i - 1].len) {
            /* the same bytes as the previous id: chain it */
            if (dup) {
                int32_t *at = &t[path[depth - 1]].tok;
                while (dup[*at] >= 0) at = &dup[*at];
                dup[*at] = r[i].id;
            }
            continue;
        }
        while (depth > common) t[path[--depth]].skip = (uint32_t)nt;
        for (; depth < r[i].len; depth++) {
            t[nt] = (json_trie){0, -1, (uint16_t)(depth + 1), r[i].b[depth]};
            path[depth] = nt++;
        }
        t[path[depth - 1]].tok = r[i].id;
    }
    while (depth > 0) t[path[--depth]].skip = (uint32_t)nt;
    free(path);
    *n_out = nt;
    return t;
}

json_vocab *json_vocab_build(const dsv4_tokenizer *tok) {
    const int V = dsv4_tok_vocab_size(tok);
    json_vocab *v = calloc(1, sizeof *v);
    tok_ref *r = malloc((size_t)(V ? V : 1) * sizeof *r);
    tok_ref *sp = malloc((size_t)(V ? V : 1) * sizeof *sp);
    if (!v || !r || !sp) goto fail;
    v->V = V;
    v->words = (V + 63) / 64;
    v->dup = malloc((size_t)(V ? V : 1) * sizeof *v->dup);
    v->safe = calloc((size_t)8 * (size_t)v->words, sizeof *v->safe);
    v->gt = malloc((size_t)(V ? V : 1) * sizeof *v->gt);
    v->plain = malloc((size_t)(V ? V : 1) * sizeof *v->plain);
    if (!v->dup || !v->safe || !v->gt || !v->plain) goto fail;
    int n = 0, ns = 0;
    for (int id = 0; id < V; id++) {
        v->dup[id] = -1;
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(tok, id, &len);
        if (b && memchr(b, '>', len)) v->gt[v->n_gt++] = id;
        /* added tokens (control tokens and their kin) never appear inside a JSON value */
        if (!b || !len || len > 65535 || dsv4_tok_is_added(tok, id)) continue;
        r[n++] = (tok_ref){(const uint8_t *)b, (int)len, id};
        if ((int)len > v->max_len) v->max_len = (int)len;
        /* which UTF-8 states inside a string it keeps the string open from */
        int special = 0;
        for (size_t i = 0; i < len; i++) special |= json_utf8_next(0, (uint8_t)b[i]) < 0 && (uint8_t)b[i] < 0x80;
        if (special) { sp[ns++] = r[n - 1]; continue; }
        v->plain[v->n_plain++] = r[n - 1];
        for (int u0 = 0; u0 < 8; u0++) {
            int u = u0;
            for (size_t i = 0; u >= 0 && i < len; i++) u = json_utf8_next(u, (uint8_t)b[i]);
            if (u >= 0) v->safe[(size_t)u0 * (size_t)v->words + (size_t)(id >> 6)] |= 1ull << (id & 63);
        }
    }
    qsort(v->plain, (size_t)v->n_plain, sizeof *v->plain, by_len_desc);
    qsort(r, (size_t)n, sizeof *r, by_bytes);
    qsort(sp, (size_t)ns, sizeof *sp, by_bytes);
    if (!(v->all = build_trie(r, n, v->max_len, v->dup, &v->n_all))) goto fail;
    /* the spec ids are a subset of all: their duplicates are chained in v->dup already */
    if (!(v->spec = build_trie(sp, ns, v->max_len, NULL, &v->n_spec))) goto fail;
    free(r);
    free(sp);
    return v;
fail:
    free(r);
    free(sp);
    json_vocab_free(v);
    return NULL;
}

void json_vocab_free(json_vocab *v) {
    if (!v) return;
    free(v->all);
    free(v->spec);
    free(v->dup);
    free(v->safe);
    free(v->gt);
    free(v->plain);
    free(v);
}

int json_walk_init(json_walk *w, const json_vocab *v) {
    w->n_st = v->max_len + 1;
    w->st = malloc((size_t)w->n_st * sizeof *w->st);
    w->fr = malloc((size_t)w->n_st * sizeof *w->fr);
    w->cache = malloc((size_t)JSON_WALK_CACHE * (size_t)v->words * sizeof *w->cache);
    w->one = malloc((size_t)v->words * sizeof *w->one);
    json_walk_reset(w);
    if (w->st && w->fr && w->cache && w->one) return 0;
    json_walk_free(w);
    return -1;
}

void json_walk_reset(json_walk *w) {
    for (int i = 0; i < JSON_WALK_CACHE; i++) w->key[i].strc = -1;
    w->next = 0;
}

void json_walk_free(json_walk *w) {
    free(w->st);
    free(w->fr);
    free(w->cache);
    free(w->one);
    w->st = NULL;
    w->fr = NULL;
    w->cache = NULL;
    w->one = NULL;
}

static long walk(const dsv4_json_schema *s, const json_vocab *v, const json_trie *t, int n, json_walk *w,
                 uint64_t *bits) {
    long steps = 0;
    for (int i = 0; i < n;) {
        const int d = t[i].depth;
        steps++;
        if (json_state_step(s, &w->st[d - 1], t[i].byte, &w->st[d])) {
            if (t[i].tok >= 0) json_vocab_set_id(v, bits, t[i].tok);
            i++;
        } else {
            i = (int)t[i].skip;
        }
    }
    return steps;
}

/* Inside a constrained string: the whole trie with only the string's frame (json_cstr_step),
 * a subtree cut at its first '"', '\\' or control byte (the spec trie has those ids). */
static long walk_cstr(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, uint64_t *bits) {
    const json_trie *t = v->all;
    long steps = 0;
    for (int i = 0; i < v->n_all;) {
        const int d = t[i].depth;
        const uint8_t c = t[i].byte;
        steps++;
        w->fr[d] = w->fr[d - 1];
        if (c >= 0x20 && c != '"' && c != '\\' && json_cstr_step(s, &w->fr[d], c)) {
            if (t[i].tok >= 0) json_vocab_set_id(v, bits, t[i].tok);
            i++;
        } else {
            i = (int)t[i].skip;
        }
    }
    return steps;
}

/* The plain ids' part of the mask inside a constrained string (frame w->fr[0]). Where the
 * count does not matter (json_strc.flat) it comes from the walk's cache: without max once
 * the count is in the flat run; with max, walked at count 0, it holds for the ids whose
 * bytes (at most that many code points) keep the count within 0..flat, and the longer ids
 * are stepped one by one (when they are few). Elsewhere the whole walk. */
static long mask_cstr(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, uint64_t *bits) {
    const json_frame top = w->fr[0];
    const int si = s->nodes[top.node].strc;
    const json_strc *sc = &s->strcs[si];
    int k = 0; /* the first k of v->plain are stepped one by one */
    if (sc->max < 0 ? top.b < (uint64_t)sc->flat : top.b > (uint64_t)sc->flat) k = -1;
    else if (sc->max >= 0) {
        const int room = sc->flat - (int)top.b; /* ids longer than this: one by one */
        int lo = 0, hi = v->n_plain;
        while (lo < hi) {
            const int m = (lo + hi) / 2;
            if (v->plain[m].len > room) lo = m + 1;
            else hi = m;
        }
        k = lo <= v->n_plain / 8 ? lo : -1;
    }
    const size_t bytes = (size_t)v->words * sizeof *bits;
    if (k < 0) {
        memset(bits, 0, bytes);
        return walk_cstr(s, v, w, bits);
    }
    long steps = 0;
    int slot = 0;
    while (slot < JSON_WALK_CACHE && !(w->key[slot].strc == si && w->key[slot].q == top.q && w->key[slot].a == top.a))
        slot++;
    uint64_t *c;
    if (slot == JSON_WALK_CACHE) {
        slot = w->next, w->next = (w->next + 1) % JSON_WALK_CACHE;
        c = w->cache + (size_t)slot * (size_t)v->words;
        memset(c, 0, bytes);
        if (sc->max >= 0) w->fr[0].b = 0;
        steps = walk_cstr(s, v, w, c);
        w->fr[0] = top;
        w->key[slot].strc = si, w->key[slot].q = top.q, w->key[slot].a = top.a;
    }
    c = w->cache + (size_t)slot * (size_t)v->words;
    memcpy(bits, c, bytes);
    for (int i = 0; i < k; i++) {
        json_frame f = top;
        const json_tok *t = &v->plain[i];
        int ok = 1;
        for (int j = 0; j < t->len && ok; j++) ok = json_cstr_step(s, &f, t->b[j]);
        steps += t->len;
        if (ok) bits[t->id >> 6] |= 1ull << (t->id & 63);
        else bits[t->id >> 6] &= ~(1ull << (t->id & 63));
    }
    return steps;
}

/* the same string frame for the plain ids: a plain string's UTF-8 state, or a constrained
 * string's (strc, DFA state, code point, count) */
static int same_top(const dsv4_json_schema *s, const json_frame *x, const json_frame *y) {
    if (json_frame_is_cstr(x) != json_frame_is_cstr(y) || x->a != y->a) return 0;
    return !json_frame_is_cstr(x) ||
           (s->nodes[x->node].strc == s->nodes[y->node].strc && x->q == y->q && x->b == y->b);
}

/* The plain ids' part of the mask where every reading is inside a string (w->tops[0..n)):
 * the OR of each distinct frame's (readings in the same string state share one; a
 * constrained one's comes from mask_cstr and its cache). */
static long mask_strings(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, int n, uint64_t *bits) {
    long steps = 0;
    int first = 1;
    for (int i = 0; i < n; i++) {
        const json_frame *t = &w->tops[i];
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = same_top(s, t, &w->tops[j]);
        if (seen) continue;
        uint64_t *m = first ? bits : w->one;
        if (json_frame_is_cstr(t)) {
            w->fr[0] = *t;
            steps += mask_cstr(s, v, w, m);
        } else {
            memcpy(m, v->safe + (size_t)t->a * (size_t)v->words, (size_t)v->words * sizeof *m);
        }
        if (!first)
            for (int k = 0; k < v->words; k++) bits[k] |= m[k];
        first = 0;
    }
    return steps;
}

long json_mask(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, const json_state *st,
               uint64_t *bits) {
    json_state_copy(&w->st[0], st);
    int u;
    if (json_state_in_string(st, &u)) {
        memcpy(bits, v->safe + (size_t)u * (size_t)v->words, (size_t)v->words * sizeof *bits);
        return walk(s, v, v->spec, v->n_spec, w, bits);
    }
    const int n = json_state_in_strings(st, w->tops);
    if (n > 0)
        return mask_strings(s, v, w, n, bits) + walk(s, v, v->spec, v->n_spec, w, bits);
    memset(bits, 0, (size_t)v->words * sizeof *bits);
    return walk(s, v, v->all, v->n_all, w, bits);
}

void json_mask_brute(const dsv4_json_schema *s, const dsv4_tokenizer *tok, const json_state *st,
                     uint64_t *bits, int words) {
    json_state *a = malloc(2 * sizeof *a);
    memset(bits, 0, (size_t)words * sizeof *bits);
    if (!a) return;
    const int V = dsv4_tok_vocab_size(tok);
    for (int id = 0; id < V && id < words * 64; id++) {
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(tok, id, &len);
        if (!b || !len || dsv4_tok_is_added(tok, id)) continue;
        json_state_copy(&a[0], st);
        int cur = 0;
        if (json_state_feed(s, a, &cur, (const uint8_t *)b, len)) bits[id >> 6] |= 1ull << (id & 63);
    }
    free(a);
}
