/* regex_mask.c — the regex / choice constraint (regex_mask.h): a DFA over code points read
 * from UTF-8 bytes, or a byte trie of the choices, and its token mask over the vocabulary
 * trie (json_vocab): a walk that steps the state once per trie node and skips a subtree at
 * the first byte that kills it, its result kept per state. */
#include "sample/regex_mask.h"
#include "sample/utf8_range.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RX_DFA = 0, RX_TRIE };

/* a trie node: its edges [e0, e0 + ne) of rx_guide.eb / et, sorted by byte */
typedef struct rx_node { int32_t e0, ne; uint8_t accept; } rx_node;

struct rx_guide {
    int kind;
    json_dfa dfa;           /* RX_DFA */
    uint8_t *live;          /* (dfa.n_states) an accepting state can be reached */
    uint64_t *lead;         /* [dfa.n_states][4] the lead bytes (>= 0xC2) that begin a
                             * character some completion of which goes to a live state */
    int16_t *asc;           /* [dfa.n_states][128] the live state after an ASCII byte, -1 */
    rx_node *node;          /* RX_TRIE: (n_node), 0 the root */
    int n_node;
    uint8_t *eb;            /* (n_edge) an edge's byte */
    int32_t *et;            /* (n_edge) its node */
};

void rx_guide_free(rx_guide *g) {
    if (!g) return;
    json_dfa_free(&g->dfa);
    free(g->live);
    free(g->lead);
    free(g->asc);
    free(g->node);
    free(g->eb);
    free(g->et);
    free(g);
}

/* ---- the DFA ---- */

static int dfa_step(const rx_guide *g, int q, uint32_t cp) {
    const json_dfa *d = &g->dfa;
    const int t = d->next[(size_t)q * (size_t)d->n_classes + (size_t)json_dfa_class(d, cp)];
    return t >= 0 && g->live[t] ? t : -1;
}

/* some code point of [lo, hi] takes q to a live state */
static int dfa_range_live(const rx_guide *g, int q, uint32_t lo, uint32_t hi) {
    const json_dfa *d = &g->dfa;
    const int16_t *nx = d->next + (size_t)q * (size_t)d->n_classes;
    for (int k = json_dfa_class(d, lo); k < d->n_classes && d->lo[k] <= hi; k++)
        if (nx[k] >= 0 && g->live[nx[k]]) return 1;
    return 0;
}

/* live: the states from which an accepting one can be reached (over classes a text can
 * hold: one of surrogates only is never read) */
static int dfa_live(rx_guide *g) {
    const json_dfa *d = &g->dfa;
    const int Q = d->n_states, C = d->n_classes;
    g->live = calloc((size_t)Q, 1);
    g->lead = calloc((size_t)Q * 4, sizeof *g->lead);
    /* the edges reversed (t <- q, once per pair), then a search back from the accepting */
    int *first = calloc((size_t)Q + 1, sizeof *first), *pred = malloc((size_t)Q * (size_t)C * sizeof *pred);
    int *mark = malloc((size_t)Q * sizeof *mark), *stack = malloc((size_t)Q * sizeof *stack);
    if (!g->live || !g->lead || !first || !pred || !mark || !stack) {
        free(first), free(pred), free(mark), free(stack);
        return -1;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int q = 0; q < Q; q++) mark[q] = -1;
        for (int q = 0; q < Q; q++) {
            const int16_t *nx = d->next + (size_t)q * (size_t)C;
            for (int k = 0; k < C; k++) {
                const uint32_t lo = d->lo[k], hi = k + 1 < C ? d->lo[k + 1] - 1 : 0x10FFFF;
                const int t = nx[k];
                if (t < 0 || mark[t] == q || (lo >= 0xD800 && hi <= 0xDFFF)) continue;
                mark[t] = q;
                if (pass == 0) first[t + 1]++;
                else pred[first[t]++] = q;
            }
        }
        if (pass == 0)
            for (int q = 0; q < Q; q++) first[q + 1] += first[q];
        else /* first[t] moved to the end of t's run: shift back */
            for (int q = Q; q > 0; q--) first[q] = first[q - 1];
        if (pass == 1) first[0] = 0;
    }
    int top = 0;
    for (int q = 0; q < Q; q++)
        if (d->accept[q]) g->live[q] = 1, stack[top++] = q;
    while (top) {
        const int t = stack[--top];
        for (int e = first[t]; e < first[t + 1]; e++)
            if (!g->live[pred[e]]) g->live[pred[e]] = 1, stack[top++] = pred[e];
    }
    free(first), free(pred), free(mark), free(stack);
    if (!(g->asc = malloc((size_t)Q * 128 * sizeof *g->asc))) return -1;
    for (int q = 0; q < Q; q++)
        for (int c = 0; c < 128; c++) {
            const int t = d->next[(size_t)q * (size_t)C + d->ascii[c]];
            g->asc[(size_t)q * 128 + (size_t)c] = (int16_t)(t >= 0 && g->live[t] ? t : -1);
        }
    for (int q = 0; q < Q; q++)
        for (int c = 0xC2; g->live[q] && c <= 0xF4; c++) {
            const int n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            uint32_t lo, hi;
            utf8_range(U_MAKE(1, n - 1, (uint32_t)c & (0x7Fu >> n)), &lo, &hi);
            if (dfa_range_live(g, q, lo, hi)) g->lead[(size_t)q * 4 + (size_t)(c >> 6)] |= 1ull << (c & 63);
        }
    return 0;
}

/* The parentheses outside classes and escapes never close more than they opened (so the
 * wrapper's group cannot be closed early by the pattern: "a)|(b" would make ^(?:a)|(b)$). */
static int balanced(const char *p, size_t len) {
    int depth = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '\\' && i + 1 == len) return -1; /* the wrapper's ')' would be escaped */
        if (p[i] == '\\') { i++; continue; }
        if (p[i] == '[') {
            /* ECMA: a ']' right after '[' or "[^" closes it (an empty class) */
            for (i++; i < len && p[i] != ']'; i++)
                if (p[i] == '\\') i++;
            continue;
        }
        if (p[i] == '(') depth++;
        if (p[i] == ')' && --depth < 0) return 0;
    }
    return 1;
}

int rx_guide_regex(const char *pattern, size_t len, rx_guide **out, char *why, size_t why_len) {
    *out = NULL;
    const int bal = balanced(pattern, len);
    if (bal <= 0) {
        snprintf(why, why_len, bal < 0 ? "ends with a backslash" : "has an unbalanced ')'");
        return -1;
    }
    if (len > (1u << 20)) {
        snprintf(why, why_len, "is longer than 1 MB");
        return -1;
    }
    rx_guide *g = calloc(1, sizeof *g);
    char *w = malloc(len + 8);
    if (!g || !w) {
        free(g), free(w);
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    /* a full match: the compiler's search of ^(?:P)$ */
    memcpy(w, "^(?:", 4);
    memcpy(w + 4, pattern, len);
    memcpy(w + 4 + len, ")$", 2);
    g->kind = RX_DFA;
    int rc = json_regex_compile(w, len + 6, &g->dfa, NULL, why, why_len);
    free(w);
    char *anchor = rc ? strstr(why, ", or anchor it") : NULL; /* the compiler's advice for a search */
    if (anchor) memmove(anchor, anchor + 14, strlen(anchor + 14) + 1);
    if (!rc && dfa_live(g)) rc = -1, snprintf(why, why_len, "out of memory");
    if (!rc && !g->live[0]) rc = -1, snprintf(why, why_len, "matches no string");
    if (rc) {
        rx_guide_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

/* ---- the choice trie ---- */

typedef struct bnode { int32_t child, sib; uint8_t byte, accept; } bnode;

static int by_byte(const void *a, const void *b) {
    const bnode *x = *(bnode *const *)a, *y = *(bnode *const *)b;
    return (x->byte > y->byte) - (x->byte < y->byte);
}

int rx_guide_choice(const char *const *choices, int n, rx_guide **out, char *why, size_t why_len) {
    *out = NULL;
    if (n < 1) {
        snprintf(why, why_len, "is an empty list");
        return -1;
    }
    size_t total = 1;
    for (int i = 0; i < n; i++) total += strlen(choices[i]);
    if (total > (1u << 26)) {
        snprintf(why, why_len, "holds more than 64 MB");
        return -1;
    }
    rx_guide *g = calloc(1, sizeof *g);
    bnode *b = malloc(total * sizeof *b);
    bnode **kids = malloc(total * sizeof *kids);
    if (g) g->node = malloc(total * sizeof *g->node), g->eb = malloc(total), g->et = malloc(total * sizeof *g->et);
    if (!g || !b || !kids || !g->node || !g->eb || !g->et) {
        free(b), free(kids), rx_guide_free(g);
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    /* a linked trie first: children in a sibling list */
    int nb = 1;
    b[0] = (bnode){-1, -1, 0, 0};
    for (int i = 0; i < n; i++) {
        int at = 0;
        for (const uint8_t *p = (const uint8_t *)choices[i]; *p; p++) {
            int c = b[at].child;
            while (c >= 0 && b[c].byte != *p) c = b[c].sib;
            if (c < 0) {
                c = nb++;
                b[c] = (bnode){-1, b[at].child, *p, 0};
                b[at].child = c;
            }
            at = c;
        }
        b[at].accept = 1;
    }
    /* then each node's edges sorted by byte, for a binary search */
    int ne = 0;
    g->kind = RX_TRIE;
    g->n_node = nb;
    for (int x = 0; x < nb; x++) {
        int k = 0;
        for (int c = b[x].child; c >= 0; c = b[c].sib) kids[k++] = &b[c];
        qsort(kids, (size_t)k, sizeof *kids, by_byte);
        g->node[x] = (rx_node){ne, k, b[x].accept};
        for (int i = 0; i < k; i++) g->eb[ne] = kids[i]->byte, g->et[ne++] = (int32_t)(kids[i] - b);
    }
    free(b), free(kids);
    *out = g;
    return 0;
}

static int trie_step(const rx_guide *g, int x, uint8_t c) {
    const rx_node *nd = &g->node[x];
    int lo = nd->e0, hi = nd->e0 + nd->ne;
    while (lo < hi) {
        const int m = (lo + hi) / 2;
        if (g->eb[m] < c) lo = m + 1;
        else hi = m;
    }
    return lo < nd->e0 + nd->ne && g->eb[lo] == c ? g->et[lo] : -1;
}

/* ---- the state ---- */

void rx_state_init(const rx_guide *g, rx_state *st) {
    (void)g;
    st->q = 0, st->u = 0;
}

/* rx_state_step on (*q, *u), inlined into the walk (where they stay in registers) */
static inline int step(const rx_guide *g, int32_t *q, uint32_t *u, uint8_t c) {
    if (g->kind == RX_TRIE) return (*q = trie_step(g, *q, c)) >= 0;
    if (!*u) {
        if (c < 0x80) return (*q = g->asc[(size_t)*q * 128 + c]) >= 0;
        if (!(g->lead[(size_t)*q * 4 + (size_t)(c >> 6)] >> (c & 63) & 1)) return 0; /* 80-C1, F5-FF too */
        const int n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        *u = U_MAKE(1, n - 1, (uint32_t)c & (0x7Fu >> n));
        return 1;
    }
    if ((c & 0xC0) != 0x80) return 0;
    const int read = U_READ(*u), left = U_LEFT(*u);
    const uint32_t cp = U_CP(*u);
    if (read == 1) { /* the second byte's limits (Unicode's table 3-7) */
        const int n = read + left;
        if (n == 3 && ((cp == 0 && c < 0xA0) || (cp == 0xD && c > 0x9F))) return 0;
        if (n == 4 && ((cp == 0 && c < 0x90) || (cp == 4 && c > 0x8F))) return 0;
    }
    const uint32_t v = cp << 6 | (c & 0x3Fu);
    if (left > 1) {
        *u = U_MAKE(read + 1, left - 1, v);
        return 1;
    }
    *u = 0;
    return (*q = dfa_step(g, *q, v)) >= 0;
}

int rx_state_step(const rx_guide *g, rx_state *st, uint8_t c) { return step(g, &st->q, &st->u, c); }

int rx_state_alive(const rx_guide *g, const rx_state *st) {
    if (st->q < 0) return 0;
    if (g->kind == RX_TRIE || !st->u) return 1; /* a trie node, a live DFA state */
    uint32_t lo, hi;
    utf8_range(st->u, &lo, &hi);
    return dfa_range_live(g, st->q, lo, hi);
}

int rx_state_accepting(const rx_guide *g, const rx_state *st) {
    if (st->q < 0 || st->u) return 0;
    return g->kind == RX_TRIE ? g->node[st->q].accept : g->dfa.accept[st->q];
}

int rx_state_feed(const rx_guide *g, rx_state *st, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!rx_state_step(g, st, b[i])) return 0;
    return rx_state_alive(g, st);
}

/* ---- the mask ---- */

static uint64_t hash_row(const int32_t *x, int n) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)x[i]) * 0x100000001b3ull;
    return h ^ h >> 29;
}

/* The masks of one guide (regex_mask.h): the slots hold a state's mask once filled (ready);
 * a slot being walked is kept from replacement, and a walk that needs its state waits. */
struct rx_masks {
    pthread_mutex_t mu;
    pthread_cond_t filled;   /* a slot became ready */
    int refs;                /* the walks using it */
    const rx_guide *g;
    rx_guide *own;           /* g when the masks own it */
    int words;
    int32_t *cls;            /* (dfa.n_states) a DFA state's class; NULL: the state itself */
    int n_cls;
    uint64_t *chunk[RX_CHUNKS]; /* (n_chunk) [RX_CACHE][words] each: RX_CACHE slots a walk */
    int n_chunk;
    rx_state key[RX_CACHE * RX_CHUNKS];
    uint8_t ready[RX_CACHE * RX_CHUNKS];
    int used, next;
};

/* Moore's refinement, levels deep: m->cls[q] the class of q under "the same states live after
 * every string of at most `levels` code points" (its level-0 class: all one; a step's target
 * that is not live: -1). Stops early once a level splits nothing (the partition is then
 * final). Over the work bound, or out of memory: no classes (each state its own). */
static int dfa_classes(rx_masks *m, const rx_guide *g, int levels) {
    const json_dfa *d = &g->dfa;
    const int Q = d->n_states, C = d->n_classes, R = C + 1;
    if ((int64_t)Q * R * levels > (1 << 25)) return 0;
    int hcap = 16;
    while (hcap < 2 * Q) hcap *= 2;
    int32_t *sig = malloc((size_t)Q * (size_t)R * sizeof *sig), *nc = malloc((size_t)Q * sizeof *nc);
    int32_t *ht = malloc((size_t)hcap * sizeof *ht);
    m->cls = calloc((size_t)Q, sizeof *m->cls);
    if (!sig || !nc || !ht || !m->cls) {
        free(sig), free(nc), free(ht), free(m->cls);
        m->cls = NULL;
        return -1;
    }
    int n = 1;
    for (int lv = 0; lv < levels; lv++) {
        for (int q = 0; q < Q; q++) {
            int32_t *s = sig + (size_t)q * (size_t)R;
            s[0] = m->cls[q];
            for (int k = 0; k < C; k++) {
                const int t = d->next[(size_t)q * (size_t)C + (size_t)k];
                s[k + 1] = t >= 0 && g->live[t] ? m->cls[t] : -1;
            }
        }
        for (int i = 0; i < hcap; i++) ht[i] = -1;
        int nm = 0;
        for (int q = 0; q < Q; q++) {
            const int32_t *s = sig + (size_t)q * (size_t)R;
            size_t h = (size_t)hash_row(s, R) & (size_t)(hcap - 1);
            while (ht[h] >= 0 && memcmp(sig + (size_t)ht[h] * (size_t)R, s, (size_t)R * sizeof *s))
                h = (h + 1) & (size_t)(hcap - 1);
            if (ht[h] < 0) ht[h] = q, nc[q] = nm++;
            else nc[q] = nc[ht[h]];
        }
        memcpy(m->cls, nc, (size_t)Q * sizeof *nc);
        if (nm == n) break;
        n = nm;
    }
    m->n_cls = n;
    free(sig), free(nc), free(ht);
    return 0;
}

static void masks_release(rx_masks *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    const int last = --m->refs == 0;
    pthread_mutex_unlock(&m->mu);
    if (!last) return;
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->filled);
    free(m->cls);
    for (int i = 0; i < m->n_chunk; i++) free(m->chunk[i]);
    rx_guide_free(m->own);
    free(m);
}

/* own: g itself (taken, on failure too), or NULL */
static rx_masks *masks_new(const json_vocab *v, const rx_guide *g, rx_guide *own) {
    rx_masks *m = calloc(1, sizeof *m);
    if (!m) {
        rx_guide_free(own);
        return NULL;
    }
    m->g = g, m->own = own;
    m->words = v->words;
    m->refs = 1;
    const int mu = !pthread_mutex_init(&m->mu, NULL);
    const int cv = mu && !pthread_cond_init(&m->filled, NULL);
    if (!cv) {
        if (mu) pthread_mutex_destroy(&m->mu);
        rx_guide_free(own);
        free(m);
        return NULL;
    }
    m->chunk[0] = malloc((size_t)RX_CACHE * (size_t)v->words * sizeof *m->chunk[0]);
    m->n_chunk = m->chunk[0] != NULL;
    if (!m->n_chunk || (g->kind == RX_DFA && dfa_classes(m, g, v->max_len + 1))) {
        masks_release(m);
        return NULL;
    }
    return m;
}

static int walk_scratch(rx_walk *w, const json_vocab *v) {
    w->sq = malloc(((size_t)v->max_len + 1) * sizeof *w->sq);
    w->su = malloc(((size_t)v->max_len + 1) * sizeof *w->su);
    if (w->sq && w->su) return 0;
    rx_walk_free(w);
    return -1;
}

int rx_walk_init(rx_walk *w, const json_vocab *v, const rx_guide *g) {
    memset(w, 0, sizeof *w);
    if (!(w->m = masks_new(v, g, NULL))) return -1;
    return walk_scratch(w, v);
}

int rx_walk_init_own(rx_walk *w, const json_vocab *v, rx_guide *g) {
    memset(w, 0, sizeof *w);
    if (!(w->m = masks_new(v, g, g))) return -1;
    return walk_scratch(w, v);
}

int rx_walk_share(rx_walk *w, const json_vocab *v, const rx_walk *other) {
    memset(w, 0, sizeof *w);
    rx_masks *m = other->m;
    /* the walk brings its RX_CACHE slots (up to RX_CHUNKS walks' worth): n walks in n states
     * keep as many masks as n walks of their own did; slots never move (a walk fills its
     * slot outside the lock) */
    uint64_t *more = malloc((size_t)RX_CACHE * (size_t)v->words * sizeof *more); /* freed if the masks have enough */
    pthread_mutex_lock(&m->mu);
    m->refs++;
    if (more && m->n_chunk < RX_CHUNKS) m->chunk[m->n_chunk++] = more, more = NULL;
    pthread_mutex_unlock(&m->mu);
    free(more);
    w->m = m;
    return walk_scratch(w, v);
}

void rx_walk_free(rx_walk *w) {
    free(w->sq);
    free(w->su);
    masks_release(w->m);
    w->sq = NULL;
    w->su = NULL;
    w->m = NULL;
}

const rx_guide *rx_walk_guide(const rx_walk *w) { return w->m->g; }

int rx_walk_classes(const rx_walk *w) { return w->m->cls ? w->m->n_cls : -1; }

void rx_walk_forget(rx_walk *w) {
    pthread_mutex_lock(&w->m->mu);
    w->m->used = w->m->next = 0;
    pthread_mutex_unlock(&w->m->mu);
}

/* The slot of key (q, u) in m (-1: none); m's lock held */
static int masks_find(const rx_masks *m, int32_t q, uint32_t u) {
    for (int i = 0; i < m->used; i++)
        if (m->key[i].q == q && m->key[i].u == u) return i;
    return -1;
}

/* A slot for a new key (m's lock held): a free one, else the oldest ready one (a slot being
 * walked is not replaced); -1 when every slot is being walked */
static int masks_take(rx_masks *m) {
    const int cap = m->n_chunk * RX_CACHE;
    if (m->used < cap) return m->used++;
    for (int k = 0; k < cap; k++) {
        const int s = (m->next + k) % cap;
        if (m->ready[s]) {
            m->next = (s + 1) % cap;
            return s;
        }
    }
    return -1;
}

/* slot s's mask */
static uint64_t *masks_slot(const rx_masks *m, int s) {
    return m->chunk[s / RX_CACHE] + (size_t)(s % RX_CACHE) * (size_t)m->words;
}

long rx_mask(const rx_guide *g, const json_vocab *v, rx_walk *w, const rx_state *st, uint64_t *bits) {
    rx_masks *m = w->m;
    const size_t bytes = (size_t)v->words * sizeof *bits;
    const int32_t kq = m->cls ? m->cls[st->q] : st->q; /* the key: the state's class */
    pthread_mutex_lock(&m->mu);
    int slot;
    for (;;) {
        slot = masks_find(m, kq, st->u);
        if (slot >= 0 && m->ready[slot]) {
            memcpy(bits, masks_slot(m, slot), bytes);
            pthread_mutex_unlock(&m->mu);
            w->hits++;
            return 0;
        }
        if (slot < 0 && (slot = masks_take(m)) >= 0) break;
        pthread_cond_wait(&m->filled, &m->mu); /* another walk is on it (or on every slot) */
    }
    m->key[slot] = (rx_state){kq, st->u};
    m->ready[slot] = 0;
    pthread_mutex_unlock(&m->mu);
    w->misses++;
    /* the slot is this walk's until it is ready: nothing else reads or replaces it */
    uint64_t *c = masks_slot(m, slot);
    memset(c, 0, bytes);
    const json_trie *t = v->all;
    long steps = 0;
    w->sq[0] = st->q, w->su[0] = st->u;
    for (int i = 0; i < v->n_all;) {
        const int d = t[i].depth;
        int32_t q = w->sq[d - 1];
        uint32_t u = w->su[d - 1];
        steps++;
        if (step(g, &q, &u, t[i].byte)) {
            w->sq[d] = q, w->su[d] = u;
            if (t[i].tok >= 0 && (!u || rx_state_alive(g, &(rx_state){q, u}))) json_vocab_set_tok(v, c, &t[i]);
            i++;
        } else {
            i = (int)t[i].skip;
        }
    }
    memcpy(bits, c, bytes);
    pthread_mutex_lock(&m->mu);
    m->ready[slot] = 1;
    pthread_cond_broadcast(&m->filled);
    pthread_mutex_unlock(&m->mu);
    return steps;
}

void rx_mask_brute(const rx_guide *g, const dsv4_tokenizer *tok, const rx_state *st, uint64_t *bits, int words) {
    memset(bits, 0, (size_t)words * sizeof *bits);
    const int V = dsv4_tok_vocab_size(tok);
    for (int id = 0; id < V && id < words * 64; id++) {
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(tok, id, &len);
        if (!b || !len || dsv4_tok_is_added(tok, id)) continue;
        rx_state s = *st;
        if (rx_state_feed(g, &s, (const uint8_t *)b, len)) bits[id >> 6] |= 1ull << (id & 63);
    }
}
