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
            t[path[depth - 1]].dup = 1;
            if (dup) {
                int32_t *at = &t[path[depth - 1]].tok;
                while (dup[*at] >= 0) at = &dup[*at];
                dup[*at] = r[i].id;
            }
            continue;
        }
        while (depth > common) t[path[--depth]].skip = (uint32_t)nt;
        for (; depth < r[i].len; depth++) {
            t[nt] = (json_trie){0, -1, (uint16_t)(depth + 1), r[i].b[depth], 0};
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

int json_walk_init(json_walk *w, const json_vocab *v, int cap) {
    memset(w, 0, sizeof *w);
    w->cap = cap < 1 ? 1 : cap > JSON_MAX_STACKS ? JSON_MAX_STACKS : cap;
    w->n_st = v->max_len + 1;
    w->stride = (json_state_size(w->cap) + 7) & ~(size_t)7;
    w->n_cache = w->cap < 4 ? 4 : w->cap;
    w->st = malloc((size_t)w->n_st * w->stride);
    w->fr = malloc((size_t)w->n_st * sizeof *w->fr);
    w->cache = malloc((size_t)w->n_cache * (size_t)v->words * sizeof *w->cache);
    w->one = malloc((size_t)v->words * sizeof *w->one);
    w->wf = malloc((size_t)w->cap * (size_t)w->n_st * sizeof *w->wf);
    w->path = malloc((size_t)w->n_st * sizeof *w->path);
    w->wit = malloc((size_t)w->n_st * sizeof *w->wit);
    w->wm = malloc((size_t)w->cap * ((size_t)w->n_st + 5) * sizeof *w->wm);
    w->pbase = malloc((size_t)w->n_st * sizeof *w->pbase);
    w->pu = malloc((size_t)w->n_st * sizeof *w->pu);
    json_walk_reset(w);
    if (w->st && w->fr && w->cache && w->one && w->wf && w->path && w->wit && w->wm && w->pbase && w->pu) return 0;
    json_walk_free(w);
    return -1;
}

void json_walk_reset(json_walk *w) {
    for (int i = 0; i < w->n_cache; i++) w->key[i].strc = -1;
    w->next = 0, w->n_prev = 0;
}

void json_walk_free(json_walk *w) {
    free(w->st);
    free(w->fr);
    free(w->cache);
    free(w->one);
    free(w->wf);
    free(w->path);
    free(w->wit);
    free(w->wm);
    free(w->pbase);
    free(w->pu);
    w->wm = w->pbase = NULL;
    w->pu = NULL;
    w->st = NULL;
    w->fr = NULL;
    w->cache = NULL;
    w->one = NULL;
    w->wf = NULL;
    w->path = w->wit = NULL;
}

static long walk(const dsv4_json_schema *s, const json_vocab *v, const json_trie *t, int n, json_walk *w,
                 uint64_t *bits) {
    long steps = 0;
    for (int i = 0; i < n;) {
        const int d = t[i].depth;
        steps++;
        if (json_state_step(s, json_walk_st(w, d - 1), t[i].byte, json_walk_st(w, d))) {
            if (t[i].tok >= 0) json_vocab_set_tok(v, bits, &t[i]);
            i++;
        } else {
            i = (int)t[i].skip;
        }
    }
    return steps;
}

/* How a constrained string's frame gets its plain ids' mask: k >= 0 from the cache (walked
 * once per key, where the count does not matter: json_strc.flat), the first k of v->plain
 * then stepped one by one (without max once the count is in the flat run: k 0; with max,
 * walked at count 0, the cache holds for the ids whose bytes, at most that many code points,
 * keep the count within 0..flat: the longer ones one by one, when at most 1/lim of the plain
 * ids); -1: the whole walk. */
static int cstr_k(const dsv4_json_schema *s, const json_vocab *v, const json_frame *top, int lim) {
    const json_strc *sc = &s->strcs[s->nodes[top->node].strc];
    if (sc->max < 0 ? top->b < (uint64_t)sc->flat : top->b > (uint64_t)sc->flat) return -1;
    if (sc->max < 0) return 0;
    const int room = sc->flat - (int)top->b; /* ids longer than this: one by one */
    int lo = 0, hi = v->n_plain;
    while (lo < hi) {
        const int m = (lo + hi) / 2;
        if (v->plain[m].len > room) lo = m + 1;
        else hi = m;
    }
    return lo <= v->n_plain / lim ? lo : -1;
}

/* the cache slot of a string frame's key, or n_cache */
static int cstr_slot(const dsv4_json_schema *s, const json_walk *w, const json_frame *top) {
    const int si = s->nodes[top->node].strc;
    int slot = 0;
    while (slot < w->n_cache && !(w->key[slot].strc == si && w->key[slot].q == top->q && w->key[slot].a == top->a))
        slot++;
    return slot;
}

/* The plain ids' part of the mask inside a constrained string (frame w->fr[0]), k from
 * cstr_k: from the cache (filled on a miss; a string without a DFA needs none) and k ids
 * one by one, or the whole walk. */
static long mask_cstr(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, int k, uint64_t *bits) {
    const json_frame top = w->fr[0];
    const int si = s->nodes[top.node].strc;
    const json_strc *sc = &s->strcs[si];
    const size_t bytes = (size_t)v->words * sizeof *bits;
    if (k < 0) {
        memset(bits, 0, bytes);
        return json_cstr_walk(s, v, w, bits);
    }
    long steps = 0;
    int slot = sc->dfa.n_states ? cstr_slot(s, w, &top) : -1;
    uint64_t *c;
    if (slot < 0) {
        /* no DFA: any character goes, so at count 0 an id goes iff its UTF-8 does (the
         * in-string bitset): no walk */
        c = v->safe + (size_t)(top.a & 7) * (size_t)v->words;
    } else if (slot == w->n_cache) {
        slot = w->next, w->next = (w->next + 1) % w->n_cache;
        c = w->cache + (size_t)slot * (size_t)v->words;
        memset(c, 0, bytes);
        if (sc->max >= 0) w->fr[0].b = 0;
        steps = json_cstr_walk(s, v, w, c);
        w->fr[0] = top;
        w->key[slot].strc = si, w->key[slot].q = top.q, w->key[slot].a = top.a;
    } else {
        c = w->cache + (size_t)slot * (size_t)v->words;
    }
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

/* the frame's cache key was one of the last mask's (a key met twice is likely met again:
 * worth a walk of its own into the cache) */
static int key_again(const dsv4_json_schema *s, const json_walk *w, const json_frame *t) {
    const int si = s->nodes[t->node].strc;
    for (int i = 0; i < w->n_prev; i++)
        if (w->prev[i].strc == si && w->prev[i].q == t->q && w->prev[i].a == t->a) return 1;
    return 0;
}

/* 1 when frame i of w->tops is the first of its string state */
static int first_of_state(const dsv4_json_schema *s, const json_walk *w, int i) {
    for (int j = 0; j < i; j++)
        if (same_top(s, &w->tops[i], &w->tops[j])) return 0;
    return 1;
}

/* o into bits: the first mask is bits itself, the others are ORed in */
static uint64_t *or_target(json_walk *w, uint64_t *bits, int first) { return first ? bits : w->one; }
static void or_in(const json_vocab *v, uint64_t *bits, const uint64_t *o) {
    if (o != bits)
        for (int k = 0; k < v->words; k++) bits[k] |= o[k];
}

/* The plain ids' part of the mask where every reading is inside a string (w->tops[0..n)):
 * the OR of each distinct frame's (readings in the same string state share one). With one
 * constrained string its mask comes from mask_cstr (the cache, or its walk); with several,
 * those whose keys are cached, or were the last mask's too (at most 1 new walk into the
 * cache a mask), come from the cache, and the rest share one walk (json_cstr_walk_any): a
 * mask costs at most about two walks of the trie however many strings are open. */
static long mask_strings(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, int n, uint64_t *bits) {
    long steps = 0;
    int first = 1, n_cstr = 0, m = 0, fills = 0, n_key = 0;
    for (int i = 0; i < n; i++) n_cstr += json_frame_is_cstr(&w->tops[i]) && first_of_state(s, w, i);
    for (int i = 0; i < n; i++) {
        const json_frame *t = &w->tops[i];
        if (!first_of_state(s, w, i)) continue;
        uint64_t *o = or_target(w, bits, first);
        if (json_frame_is_cstr(t)) {
            int k = cstr_k(s, v, t, n_cstr > 1 ? 64 : 8);
            if (n_cstr > 1 && k >= 0 && s->strcs[s->nodes[t->node].strc].dfa.n_states && cstr_slot(s, w, t) == w->n_cache) {
                if (fills < 1 && key_again(s, w, t)) fills++;
                else k = -1;
            }
            w->prev[n_key].strc = s->nodes[t->node].strc, w->prev[n_key].q = t->q, w->prev[n_key].a = t->a;
            n_key++;
            /* the shared walk decodes one UTF-8 for all its strings: those at the first's
             * UTF-8 state (all readings in strings read the same bytes: every one, in fact) */
            if (n_cstr > 1 && k < 0 && (m == 0 || (t->a & 7) == (w->wf[0].a & 7))) {
                w->wf[(size_t)m++ * (size_t)w->n_st] = *t; /* the shared walk's */
                continue;
            }
            w->fr[0] = *t;
            steps += mask_cstr(s, v, w, k, o);
        } else {
            memcpy(o, v->safe + (size_t)t->a * (size_t)v->words, (size_t)v->words * sizeof *o);
        }
        or_in(v, bits, o);
        first = 0;
    }
    w->n_prev = n_key;
    if (m) {
        uint64_t *o = or_target(w, bits, first);
        memset(o, 0, (size_t)v->words * sizeof *o);
        steps += json_cstr_walk_any(s, v, w, m, o);
        or_in(v, bits, o);
    }
    return steps;
}

long json_mask(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, const json_state *st,
               uint64_t *bits) {
    if (s->max_stacks > w->cap) { /* a walk made for smaller schemas: no id (never so in dsv4_gen) */
        memset(bits, 0, (size_t)v->words * sizeof *bits);
        return 0;
    }
    json_state *st0 = json_walk_st(w, 0);
    int u;
    if (json_state_in_string(st, &u)) {
        json_state_copy(st0, st);
        memcpy(bits, v->safe + (size_t)u * (size_t)v->words, (size_t)v->words * sizeof *bits);
        return walk(s, v, v->spec, v->n_spec, w, bits);
    }
    /* Readings inside strings: the plain ids from their string frames (mask_strings), the
     * ids with a '"', '\\' or control byte walked with the whole state (what follows a
     * closing quote), and the readings elsewhere (a literal, a key, a number beside the
     * strings) walked over the whole trie alone, where they cut it soon; whole, a string
     * reading keeps the walk going through almost every id. */
    const int n = json_state_strings(st, w->tops, st0);
    long steps = 0;
    if (n > 0) {
        steps += mask_strings(s, v, w, n, bits);
        if (st0->n > 0) steps += walk(s, v, v->all, v->n_all, w, bits);
        json_state_copy(st0, st);
        return steps + walk(s, v, v->spec, v->n_spec, w, bits);
    }
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
