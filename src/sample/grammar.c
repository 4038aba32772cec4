/* grammar.c — the compiled grammar's matcher (grammar.h; the compiler is grammar_compile.c):
 * a pushdown automaton over code points whose stacks live in a hash-consed node pool, and its
 * token mask: a walk of the vocabulary trie carrying the stack set. */
#include "sample/grammar_impl.h"
#include "sample/utf8_range.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A stack node: the element to match next at this level (a CHAR on a stack's top; below,
 * where to go on once the level above completes) and the node below (-1: none). */
typedef struct gnode { int32_t pos, parent, next; int32_t depth; } gnode;

#define HEADS (1 << 16)

/* masks by state key, for one vocabulary: a run's own, or shared by the runs of one grammar
 * (a request's choices) under mu; replaced oldest first */
struct gr_cache {
    pthread_mutex_t mu;
    int refs, cap, words;
    uint64_t *mask;         /* [cap][words] */
    uint32_t *key;          /* [cap][GR_KEY] */
    int *kn;                /* (cap) key lengths */
    uint8_t *near;          /* (cap) the walk came near a bound (gr_mask: not for a clamped state) */
    uint64_t *h;            /* (cap) key hashes */
    int used, next;
};

gr_cache *gr_cache_new(int words, int cap) {
    gr_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->refs = 1, c->cap = cap, c->words = words;
    c->mask = malloc((size_t)cap * (size_t)words * sizeof *c->mask);
    c->key = malloc((size_t)cap * GR_KEY * sizeof *c->key);
    c->kn = malloc((size_t)cap * sizeof *c->kn);
    c->h = malloc((size_t)cap * sizeof *c->h);
    c->near = malloc((size_t)cap);
    if (!c->mask || !c->key || !c->kn || !c->h || !c->near || pthread_mutex_init(&c->mu, NULL)) {
        free(c->mask), free(c->key), free(c->kn), free(c->h), free(c->near), free(c);
        return NULL;
    }
    return c;
}

gr_cache *gr_cache_ref(gr_cache *c) {
    pthread_mutex_lock(&c->mu);
    c->refs++;
    pthread_mutex_unlock(&c->mu);
    return c;
}

void gr_cache_free(gr_cache *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    const int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (!last) return;
    pthread_mutex_destroy(&c->mu);
    free(c->mask), free(c->key), free(c->kn), free(c->h), free(c->near), free(c);
}

/* the mask of key k (n words, hash h) into bits: 1 found (*near: its walk's flag), 0 not */
static int cache_get(gr_cache *c, const uint32_t *k, int n, uint64_t h, uint64_t *bits, int *near) {
    pthread_mutex_lock(&c->mu);
    int found = 0;
    for (int i = 0; i < c->used && !found; i++)
        if (c->h[i] == h && c->kn[i] == n && !memcmp(c->key + (size_t)i * GR_KEY, k, (size_t)n * sizeof *k)) {
            memcpy(bits, c->mask + (size_t)i * (size_t)c->words, (size_t)c->words * sizeof *bits);
            found = 1, *near = c->near[i];
        }
    pthread_mutex_unlock(&c->mu);
    return found;
}

static void cache_put(gr_cache *c, const uint32_t *k, int n, uint64_t h, const uint64_t *bits, int near) {
    pthread_mutex_lock(&c->mu);
    const int slot = c->used < c->cap ? c->used++ : c->next;
    if (slot == c->next) c->next = (c->next + 1) % c->cap;
    memcpy(c->mask + (size_t)slot * (size_t)c->words, bits, (size_t)c->words * sizeof *bits);
    memcpy(c->key + (size_t)slot * GR_KEY, k, (size_t)n * sizeof *k);
    c->kn[slot] = n, c->h[slot] = h, c->near[slot] = (uint8_t)near;
    pthread_mutex_unlock(&c->mu);
}

struct gr_run {
    const gr_grammar *g;
    gnode *node;            /* (GR_POOL) the pool: nodes [0, n_node), a parent before its child */
    int n_node;
    int32_t *heads;         /* (HEADS) hash chains (newest first, so the pool pops in order) */
    uint32_t *seen;         /* (GR_POOL) the stamp of the step that listed a node */
    uint32_t stamp;
    long spent, limit;      /* gr_mask's work so far and its budget (limit 0: none) */
    int broke;              /* the budget ran out (the mask fails; other bounds drop a token) */
    int32_t *remap;         /* (GR_POOL) gr_run_compact's new numbers */
    int32_t *work;          /* [GR_MAX_WORK][2] (pos, parent) left to expand */
    int max_len, words;
    /* the walk: per depth d <= max_len, the set (at row src[d]: tops, n, acc), the UTF-8
     * state and the pool's size; depth 0 is the state itself */
    int32_t *top;           /* [(max_len + 1)][GR_MAX_STACKS] */
    int32_t *wn, *wacc, *src, *mark;
    /* the step memo: a trie node's siblings step the same set (their parent's); a character
     * that the same tops take gives the same set, so row d is kept while the parent at d - 1
     * is the same visit (pv) and the tops taking it the same (sig: sets of <= 64 tops) */
    uint64_t *pv, *mpv;     /* (max_len + 1) visits at each depth; the visit row d was made in */
    uint64_t *msig;         /* (max_len + 1) the tops that took row d's character */
    /* the loop memo: a character whose tops give back the same set (inside a string: any
     * letter) is remembered per row (fsig, valid while the row is the version fver) */
    uint64_t *rver, *fver, *fsig;
    uint32_t *wu;
    int32_t *tmp;           /* (GR_MAX_STACKS) */
    int over;
    char why[200];
    gr_cache *cache;        /* the masks (own, or shared: one reference) */
    uint32_t *key;          /* (GR_KEY) */
    long hits, misses;
    /* the clamp of counted repetitions (canon): the state's stacks saved while the clamped
     * ones stand in row 0, and the (chain, level) pairs of its nodes */
    int32_t *save;          /* (GR_MAX_STACKS) */
    int32_t *lv;            /* [GR_KEY][3] chain, level, clamped level */
    int32_t *path;          /* (GR_MAX_DEPTH) */
};

static inline size_t hnode(int32_t pos, int32_t parent) {
    uint64_t h = ((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 48);
}

static int over(gr_run *r, const char *fmt, int n) {
    r->over = 1;
    snprintf(r->why, sizeof r->why, fmt, n);
    return -1;
}

/* the node (pos, parent), made when new: -1 over a bound */
static int32_t mk(gr_run *r, int32_t pos, int32_t parent) {
    const size_t h = hnode(pos, parent);
    for (int32_t k = r->heads[h]; k >= 0; k = r->node[k].next)
        if (r->node[k].pos == pos && r->node[k].parent == parent) return k;
    const int depth = parent < 0 ? 1 : r->node[parent].depth + 1;
    if (depth > GR_MAX_DEPTH)
        return over(r, "the grammar's parse nests deeper than %d rules (a bound of this server)", GR_MAX_DEPTH);
    if (r->n_node >= GR_POOL)
        return over(r, "the grammar's parse needs more than %d stack nodes (a bound of this server)", GR_POOL);
    const int32_t k = r->n_node++;
    r->node[k] = (gnode){pos, parent, r->heads[h], depth};
    r->heads[h] = k;
    return k;
}

/* pops the pool back to n nodes */
static void truncate_pool(gr_run *r, int n) {
    while (r->n_node > n) {
        const gnode *x = &r->node[--r->n_node];
        r->heads[hnode(x->pos, x->parent)] = x->next;
    }
}

static void new_stamp(gr_run *r) {
    if (++r->stamp == 0) {
        memset(r->seen, 0, GR_POOL * sizeof *r->seen);
        r->stamp = 1;
    }
}

/* Expands the work list r->work[0 .. nw) into the set out (tops: CHAR nodes, each once), *acc
 * set when a stack completes. Returns the set's size, -1 over a bound. */
static int expand(gr_run *r, int nw, int32_t *out, int nout, int *acc) {
    const gr_grammar *g = r->g;
    long done = 0;
    while (nw) {
        nw--;
        const int32_t pos = r->work[2 * nw], par = r->work[2 * nw + 1];
        if (++done > GR_MAX_WORK)
            return over(r, "the grammar needs more than %d expansions for one character (a bound of this server)", GR_MAX_WORK);
        if (r->limit && ++r->spent > r->limit) {
            r->broke = 1;
            return over(r, "the grammar's token mask needs more than %d expansions and steps (a bound of this server)",
                        GR_MASK_BUDGET);
        }
        /* every (position, stack below) once a step: a grammar whose rules reach one place by many
         * ways (x1 ::= x0 | x0, x2 ::= x1 | x1, ...) expands it once, not once per way */
        const int32_t id = mk(r, pos, par);
        if (id < 0) return -1;
        if (r->seen[id] == r->stamp) continue;
        r->seen[id] = r->stamp;
        const gelem e = g->e[pos];
        if (e.type == E_CHAR) {
            if (nout == GR_MAX_STACKS)
                return over(r, "the grammar is ambiguous past %d parse stacks at once (a bound of this server)", GR_MAX_STACKS);
            out[nout++] = id;
        } else if (e.type == E_END) {
            if (par < 0) {
                *acc = 1;
                continue;
            }
            r->work[2 * nw] = r->node[par].pos, r->work[2 * nw + 1] = r->node[par].parent;
            nw++;
        } else { /* E_REF: where to return (none at a rule's end: a tail call), then each alternative */
            const int32_t ret = g->e[pos + 1].type == E_END ? par : mk(r, pos + 1, par);
            if (ret < 0 && g->e[pos + 1].type != E_END) return -1;
            if (nw + g->nalt[e.a] > GR_MAX_WORK)
                return over(r, "the grammar needs more than %d expansions for one character (a bound of this server)", GR_MAX_WORK);
            for (int k = g->nalt[e.a] - 1; k >= 0; k--) {
                r->work[2 * nw] = g->alt[g->alt0[e.a] + k], r->work[2 * nw + 1] = ret;
                nw++;
            }
        }
    }
    return nout;
}

static inline int cls_has(const gr_grammar *g, int k, uint32_t cp) {
    const gclass *c = &g->cls[k];
    if (cp < 128) return (int)(c->ascii[cp >> 6] >> (cp & 63) & 1);
    const uint32_t *rg = g->rng + 2 * (size_t)c->r0;
    int lo = 0, hi = c->nr;
    while (lo < hi) { /* the first range whose hi >= cp */
        const int m = (lo + hi) / 2;
        if (rg[2 * m + 1] < cp) lo = m + 1;
        else hi = m;
    }
    return lo < c->nr && rg[2 * lo] <= cp;
}

/* some code point of [lo, hi] is in class k */
static int cls_meets(const gr_grammar *g, int k, uint32_t lo, uint32_t hi) {
    const gclass *c = &g->cls[k];
    const uint32_t *rg = g->rng + 2 * (size_t)c->r0;
    for (int m = 0; m < c->nr; m++)
        if (rg[2 * m] <= hi && rg[2 * m + 1] >= lo) return 1;
    return 0;
}

/* the set in[0 .. n) after code point cp, into out: its size, -1 over */
static int step_cp(gr_run *r, const int32_t *in, int n, uint32_t cp, int32_t *out, int *acc) {
    const gr_grammar *g = r->g;
    new_stamp(r);
    *acc = 0;
    int nout = 0;
    for (int i = 0; i < n; i++) {
        const gnode *t = &r->node[in[i]];
        if (!cls_has(g, g->e[t->pos].a, cp)) continue;
        r->work[0] = t->pos + 1, r->work[1] = t->parent;
        if ((nout = expand(r, 1, out, nout, acc)) < 0) return -1;
    }
    return nout;
}

/* some top of the set can take a code point of the character begun */
static int u_alive(const gr_run *r, const int32_t *in, int n, uint32_t u) {
    uint32_t lo, hi;
    utf8_range(u, &lo, &hi);
    for (int i = 0; i < n; i++)
        if (cls_meets(r->g, r->g->e[r->node[in[i]].pos].a, lo, hi)) return 1;
    return 0;
}

/* Byte c read into the UTF-8 state *u over the set (in, n): 0 dead, 1 alive inside a
 * character (the set unchanged), 3 a character complete (*cp: the set's step is next). */
static int read_byte(const gr_run *r, const int32_t *in, int n, uint32_t *u, uint8_t c, uint32_t *cp) {
    if (!*u) {
        if (c < 0x80) {
            *cp = c;
            return 3;
        } else {
            if (c < 0xC2 || c > 0xF4) return 0;
            const int len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            *u = U_MAKE(1, len - 1, (uint32_t)c & (0x7Fu >> len));
            return u_alive(r, in, n, *u);
        }
    } else {
        if ((c & 0xC0) != 0x80) return 0;
        const int read = U_READ(*u), left = U_LEFT(*u), len = read + left;
        const uint32_t v = U_CP(*u);
        if (read == 1 && ((len == 3 && ((v == 0 && c < 0xA0) || (v == 0xD && c > 0x9F))) ||
                          (len == 4 && ((v == 0 && c < 0x90) || (v == 4 && c > 0x8F)))))
            return 0;
        *cp = v << 6 | (c & 0x3Fu);
        if (left > 1) {
            *u = U_MAKE(read + 1, left - 1, *cp);
            return u_alive(r, in, n, *u);
        }
        *u = 0;
    }
    return 3;
}

/* The set (in, n) with UTF-8 state *u after byte c: 1 alive with the set unchanged (inside a
 * character), 2 alive with the new set in out (*nout, *acc), 0 dead, -1 over. */
static int step_byte(gr_run *r, const int32_t *in, int n, uint32_t *u, uint8_t c, int32_t *out, int *nout, int *acc) {
    uint32_t cp = 0;
    const int s = read_byte(r, in, n, u, c, &cp);
    if (s != 3) return s;
    const int k = step_cp(r, in, n, cp, out, acc);
    if (k < 0) return -1;
    *nout = k;
    return k || *acc ? 2 : 0;
}

int gr_run_new(const gr_grammar *g, int max_len, int words, gr_run **out) {
    return gr_run_new_shared(g, max_len, words, NULL, out);
}

int gr_run_new_shared(const gr_grammar *g, int max_len, int words, gr_cache *cache, gr_run **out) {
    *out = NULL;
    gr_run *r = calloc(1, sizeof *r);
    if (!r) return -1;
    r->cache = cache ? gr_cache_ref(cache) : gr_cache_new(words, GR_CACHE);
    r->g = g, r->max_len = max_len, r->words = words;
    const size_t D = (size_t)max_len + 1;
    r->node = malloc(GR_POOL * sizeof *r->node);
    r->heads = malloc(HEADS * sizeof *r->heads);
    r->seen = calloc(GR_POOL, sizeof *r->seen);
    r->remap = malloc(GR_POOL * sizeof *r->remap);
    r->work = malloc(2 * (size_t)GR_MAX_WORK * sizeof *r->work);
    r->top = malloc(D * GR_MAX_STACKS * sizeof *r->top);
    r->wn = malloc(D * sizeof *r->wn), r->wacc = malloc(D * sizeof *r->wacc);
    r->src = malloc(D * sizeof *r->src), r->mark = malloc(D * sizeof *r->mark);
    r->wu = malloc(D * sizeof *r->wu);
    r->pv = calloc(D, sizeof *r->pv), r->mpv = calloc(D, sizeof *r->mpv), r->msig = malloc(D * sizeof *r->msig);
    r->rver = calloc(D, sizeof *r->rver), r->fver = calloc(D, sizeof *r->fver), r->fsig = malloc(D * sizeof *r->fsig);
    r->tmp = malloc(GR_MAX_STACKS * sizeof *r->tmp);
    r->key = malloc(GR_KEY * sizeof *r->key);
    r->save = malloc(GR_MAX_STACKS * sizeof *r->save);
    r->lv = malloc(3 * (size_t)GR_KEY * sizeof *r->lv);
    r->path = malloc(GR_MAX_DEPTH * sizeof *r->path);
    if (!r->save || !r->lv || !r->path ||
        !r->node || !r->heads || !r->seen || !r->remap || !r->work || !r->top || !r->wn || !r->wacc || !r->src || !r->mark ||
        !r->wu || !r->pv || !r->mpv || !r->msig || !r->rver || !r->fver || !r->fsig || !r->tmp || !r->cache || !r->key) {
        gr_run_free(r);
        return -1;
    }
    for (int k = 0; k < HEADS; k++) r->heads[k] = -1;
    gr_run_reset(r);
    *out = r;
    return 0;
}

void gr_run_free(gr_run *r) {
    if (!r) return;
    free(r->node), free(r->heads), free(r->seen), free(r->remap), free(r->work), free(r->top);
    free(r->wn), free(r->wacc), free(r->src), free(r->mark), free(r->wu), free(r->tmp);
    free(r->pv), free(r->mpv), free(r->msig), free(r->rver), free(r->fver), free(r->fsig);
    gr_cache_free(r->cache);
    free(r->key), free(r->save), free(r->lv), free(r->path);
    free(r);
}

void gr_run_reset(gr_run *r) {
    const gr_grammar *g = r->g;
    truncate_pool(r, 0);
    r->over = 0;
    new_stamp(r);
    int nw = 0, acc = 0;
    for (int k = g->nalt[g->root] - 1; k >= 0; k--) {
        r->work[2 * nw] = g->alt[g->alt0[g->root] + k], r->work[2 * nw + 1] = -1;
        nw++;
    }
    /* the root's first characters: bounded as any step (a grammar past them fails at its
     * first mask or feed, over) */
    const int n = expand(r, nw, r->top, 0, &acc);
    r->wn[0] = n < 0 ? 0 : n, r->wacc[0] = acc, r->wu[0] = 0, r->src[0] = 0;
}

int gr_run_feed(gr_run *r, const uint8_t *b, size_t n) {
    if (r->over) return -1;
    for (size_t i = 0; i < n; i++) {
        int nout = 0, acc = 0;
        const int s = step_byte(r, r->top, r->wn[0], &r->wu[0], b[i], r->tmp, &nout, &acc);
        if (s <= 0) return s;
        if (s == 2) {
            memcpy(r->top, r->tmp, (size_t)nout * sizeof *r->tmp);
            r->wn[0] = nout, r->wacc[0] = acc;
        }
    }
    return 1;
}

int gr_run_accepting(const gr_run *r) { return !r->over && !r->wu[0] && r->wacc[0]; }

const char *gr_run_why(const gr_run *r) { return r->why; }

void gr_run_stats(const gr_run *r, long *hits, long *misses, long *nodes) {
    *hits = r->hits;
    *misses = r->misses;
    *nodes = r->n_node;
}

void gr_run_clear_cache(gr_run *r) {
    pthread_mutex_lock(&r->cache->mu);
    r->cache->used = 0, r->cache->next = 0;
    pthread_mutex_unlock(&r->cache->mu);
}

void gr_run_compact(gr_run *r) {
    /* the nodes the state's stacks reach, renumbered in order (a parent stays before its
     * child, so the pool still pops in order) */
    const int n = r->n_node;
    int32_t *remap = r->remap;
    for (int k = 0; k < n; k++) remap[k] = -1;
    for (int i = 0; i < r->wn[0]; i++)
        for (int32_t k = r->top[i]; k >= 0 && remap[k] == -1; k = r->node[k].parent) remap[k] = -2;
    for (int k = n - 1; k >= 0; k--) r->heads[hnode(r->node[k].pos, r->node[k].parent)] = r->node[k].next;
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (remap[k] != -2) continue;
        gnode x = r->node[k];
        x.parent = x.parent < 0 ? -1 : remap[x.parent];
        remap[k] = m;
        const size_t h = hnode(x.pos, x.parent);
        r->node[m] = (gnode){x.pos, x.parent, r->heads[h], x.depth};
        r->heads[h] = m++;
    }
    for (int i = 0; i < r->wn[0]; i++) r->top[i] = remap[r->top[i]];
    r->n_node = m;
}

/* ---- the mask ---- */

/* stacks a and b in a fixed order: by depth, then position by position from the top */
static int stack_cmp(const gr_run *r, int32_t a, int32_t b) {
    if (r->node[a].depth != r->node[b].depth) return r->node[a].depth < r->node[b].depth ? -1 : 1;
    for (; a >= 0 && a != b; a = r->node[a].parent, b = r->node[b].parent)
        if (r->node[a].pos != r->node[b].pos) return r->node[a].pos < r->node[b].pos ? -1 : 1;
    return 0;
}

/* The state's key (its stacks' positions in a canonical order, the UTF-8 state, accepting)
 * into r->key: its length, -1 when longer than GR_KEY (not cached). Sorts the state's set. */
static int make_key(gr_run *r) {
    int32_t *t = r->top;
    const int n = r->wn[0];
    long len = 3;
    for (int i = 0; i < n; i++) len += 1 + r->node[t[i]].depth;
    if (len > GR_KEY) return -1;
    for (int i = 1; i < n; i++) { /* insertion sort: the sets are small */
        const int32_t x = t[i];
        int j = i;
        for (; j > 0 && stack_cmp(r, t[j - 1], x) > 0; j--) t[j] = t[j - 1];
        t[j] = x;
    }
    int k = 0;
    r->key[k++] = r->wu[0], r->key[k++] = (uint32_t)r->wacc[0], r->key[k++] = (uint32_t)n;
    for (int i = 0; i < n; i++) {
        r->key[k++] = (uint32_t)r->node[t[i]].depth;
        for (int32_t x = t[i]; x >= 0; x = r->node[x].parent) r->key[k++] = (uint32_t)r->node[x].pos;
    }
    return k;
}

static uint64_t hash_key(const uint32_t *k, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) h = (h ^ k[i]) * 0x100000001b3ull;
    return h ^ h >> 31;
}

/* ---- the clamp of counted repetitions ----
 * A token reads at most T = max_len code points, and a copy of a chain's element reads at
 * least one (grammar_impl.h), so over a token a stack at level l of a chain only reaches
 * levels l - T .. l. Clamp: per chain, the distinct levels l1 < l2 < ... of the state's nodes
 * become c1 = min(l1, C), c(i+1) = c(i) + min(l(i+1) - l(i), C), C = T + 2. Exact: map each
 * level l(i) - t reached from S to c(i) - t. Two present levels whose reached ranges meet
 * differ by <= T < C, so every gap between them is kept: the map is one to one. A level
 * reached <= 1 comes from an l(i) <= T + 1 < C, so l(i) and every level below it are kept:
 * levels 1 (the last copy, whose elements differ) map to themselves, and every level >= 2 has
 * the same elements and returns. So each row of the walk from S maps one to one onto the walk
 * from the clamped state (the same tops' classes, accepting flags, set sizes and depths), and
 * the same tokens live. The mask is walked on the clamped state (row 0 replaced while it
 * runs), so it is a function of the key, whichever state met it first. Left: a stack that
 * enters a chain at its top during the token (unmoved by the map) can meet a moved one in one
 * walk and not the other (an ambiguous grammar); that changes set sizes only, near a bound. */

static int lv_cmp(const void *x, const void *y) {
    const int32_t *a = x, *b = y;
    return a[0] != b[0] ? (a[0] < b[0] ? -1 : 1) : (a[1] > b[1]) - (a[1] < b[1]);
}

/* the clamped level of (chain c, level l) in lv[0 .. n) (sorted, distinct) */
static int32_t clamped(const int32_t *lv, int n, int32_t c, int32_t l) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int m = (lo + hi) / 2;
        if (lv[3 * m] < c || (lv[3 * m] == c && lv[3 * m + 1] < l)) lo = m + 1;
        else hi = m;
    }
    return lv[3 * lo + 2];
}

/* Row 0 replaced by the clamped state's stacks (the state's saved in r->save): 1, or 0 when
 * nothing is clamped (no level past C) or the pool cannot take the clamped stacks. */
static int canon(gr_run *r) {
    const gr_grammar *g = r->g;
    if (!g->n_chain) return 0;
    const int C = r->max_len + 2, n = r->wn[0];
    int m = 0, high = 0;
    for (int i = 0; i < n; i++)
        for (int32_t x = r->top[i]; x >= 0; x = r->node[x].parent) {
            const int32_t p = r->node[x].pos;
            if (g->pchain[p] < 0) continue;
            if (m == GR_KEY) return 0; /* not cached either (make_key) */
            r->lv[3 * m] = g->pchain[p], r->lv[3 * m + 1] = g->plevel[p];
            high |= g->plevel[p] > C;
            m++;
        }
    if (!high) return 0;
    qsort(r->lv, (size_t)m, 3 * sizeof *r->lv, lv_cmp);
    int u = 0;
    for (int k = 0; k < m; k++) {
        int32_t *o = r->lv + 3 * u;
        if (u && o[-3] == r->lv[3 * k] && o[-2] == r->lv[3 * k + 1]) continue;
        o[0] = r->lv[3 * k], o[1] = r->lv[3 * k + 1];
        const int first = !u || o[-3] != o[0];
        o[2] = first ? (o[1] < C ? o[1] : C) : o[-1] + (o[1] - o[-2] < C ? o[1] - o[-2] : C);
        u++;
    }
    memcpy(r->save, r->top, (size_t)n * sizeof *r->save);
    for (int i = 0; i < n; i++) {
        int d = 0;
        for (int32_t x = r->top[i]; x >= 0; x = r->node[x].parent) r->path[d++] = x;
        int32_t parent = -1;
        while (d--) {
            int32_t pos = r->node[r->path[d]].pos;
            const int32_t c = g->pchain[pos];
            if (c >= 0) {
                const int32_t l = g->plevel[pos], to = clamped(r->lv, u, c, l);
                pos = g->cbase[g->cb0[c] + to - 1] + (pos - g->cbase[g->cb0[c] + l - 1]);
            }
            if ((parent = mk(r, pos, parent)) < 0) { /* the pool is full: not clamped */
                memcpy(r->top, r->save, (size_t)n * sizeof *r->top);
                r->over = 0;
                return 0;
            }
        }
        r->top[i] = parent;
    }
    return 1;
}

/* The mask of the state in row 0 (gr_mask). clamped: row 0 holds the clamped state, whose
 * walk is only taken far from the bounds: *near set (nothing kept, bits undefined) when the
 * walk (or the cached one) left a token out over a bound, held more than half
 * GR_MAX_STACKS stacks in a row, spent more than half the budget, or failed. */
static long mask_of(gr_run *r, const json_vocab *v, uint64_t *bits, int clamped, int *near) {
    const size_t bytes = (size_t)v->words * sizeof *bits, S = GR_MAX_STACKS;
    const int kn = make_key(r);
    const uint64_t h = kn >= 0 ? hash_key(r->key, kn) : 0;
    *near = 0;
    if (kn >= 0 && cache_get(r->cache, r->key, kn, h, bits, near) && !(clamped && *near)) {
        r->hits++;
        return 0;
    }
    if (clamped && *near) return -1;
    r->misses++;
    memset(bits, 0, bytes);
    const int mark0 = r->n_node;
    long pruned = 0;
    int kmax = r->wn[0];
    r->spent = 0, r->limit = GR_MASK_BUDGET, r->broke = 0;
    r->mark[0] = mark0, r->src[0] = 0;
    const json_trie *t = v->all;
    long steps = 0;
    for (int d = 0; d <= v->max_len; d++) r->pv[d]++, r->mpv[d] = 0, r->rver[d]++, r->fver[d] = 0; /* no memo */
    for (int i = 0; i < v->n_all;) {
        const int d = t[i].depth, s = r->src[d - 1], n = r->wn[s];
        const int32_t *in = r->top + (size_t)s * S;
        uint32_t u = r->wu[d - 1], cp = 0;
        steps++;
        r->pv[d]++;
        int st = read_byte(r, in, n, &u, t[i].byte, &cp);
        if ((r->spent += n) > r->limit) {
            truncate_pool(r, mark0);
            r->limit = 0;
            over(r, "the grammar's token mask needs more than %d expansions and steps (a bound of this server)",
                 GR_MASK_BUDGET);
            r->over = 0;
            return -1;
        }
        if (st == 3) {
            uint64_t sig = 0;
            for (int k = 0; k < n && k < 64; k++)
                sig |= (uint64_t)cls_has(r->g, r->g->e[r->node[in[k]].pos].a, cp) << k;
            const int small = n <= 64;
            if (small && r->fver[s] == r->rver[s] && r->fsig[s] == sig) { /* the set again */
                truncate_pool(r, r->mark[d - 1]);
                r->mark[d] = r->n_node, r->mpv[d] = 0;
                st = 1;
            } else if (small && r->mpv[d] == r->pv[d - 1] && r->msig[d] == sig) { /* row d as it was */
                truncate_pool(r, r->mark[d]);
                st = r->wn[d] || r->wacc[d] ? 2 : 0;
            } else {
                truncate_pool(r, r->mark[d - 1]);
                int acc = 0;
                const int k = step_cp(r, in, n, cp, r->top + (size_t)d * S, &acc);
                if (k < 0 && r->broke) {
                    truncate_pool(r, mark0);
                    r->over = 0, r->limit = 0; /* the state itself is fine: only this mask is refused */
                    return -1;
                }
                if (k < 0) { /* this character passes a bound: the tokens below are not allowed */
                    truncate_pool(r, r->mark[d - 1]);
                    r->over = 0, r->mpv[d] = 0, pruned++;
                    i = (int)t[i].skip;
                    continue;
                }
                r->wn[d] = k, r->wacc[d] = acc, r->mark[d] = r->n_node, r->rver[d]++;
                if (k > kmax) kmax = k;
                r->mpv[d] = small ? r->pv[d - 1] : 0, r->msig[d] = sig;
                int same = small && k == n && acc == r->wacc[s];
                for (int j = 0; same && j < n; j++) same = r->seen[in[j]] == r->stamp; /* step_cp's stamp */
                if (same) r->fsig[s] = sig, r->fver[s] = r->rver[s];
                st = same ? 1 : k || acc ? 2 : 0;
            }
        } else { /* inside a character: row d not made, its nodes popped */
            truncate_pool(r, r->mark[d - 1]);
            r->mark[d] = r->n_node, r->mpv[d] = 0;
        }
        if (!st) {
            i = (int)t[i].skip;
            continue;
        }
        r->src[d] = st == 1 ? s : d;
        r->wu[d] = u;
        if (t[i].tok >= 0) json_vocab_set_tok(v, bits, &t[i]);
        i++;
    }
    truncate_pool(r, mark0);
    r->limit = 0;
    *near = pruned > 0 || kmax > GR_MAX_STACKS / 2 || r->spent > GR_MASK_BUDGET / 2;
    int any = r->wacc[0] && !r->wu[0];
    for (int w = 0; w < v->words && !any; w++) any = bits[w] != 0;
    if (!any) return -1; /* alive, so only a bound can have emptied it: the last one passed is in why */
    if (clamped && *near) return -1;
    if (kn >= 0) cache_put(r->cache, r->key, kn, h, bits, *near);
    return steps;
}

long gr_mask(gr_run *r, const json_vocab *v, uint64_t *bits) {
    if (r->over) return -1;
    const int mark = r->n_node, n = r->wn[0];
    const int swapped = canon(r);
    int near = 0;
    long rc = mask_of(r, v, bits, swapped, &near);
    if (swapped) memcpy(r->top, r->save, (size_t)n * sizeof *r->top);
    truncate_pool(r, mark);
    if (swapped && (near || rc < 0)) { /* near a bound the clamped walk may merge stacks unlike the state's: its own walk */
        r->over = 0;
        rc = mask_of(r, v, bits, 0, &near);
    }
    return rc;
}

int gr_mask_brute(gr_run *r, const dsv4_tokenizer *tok, uint64_t *bits, int words) {
    memset(bits, 0, (size_t)words * sizeof *bits);
    const int n0 = r->wn[0], acc0 = r->wacc[0], mark0 = r->n_node;
    const uint32_t u0 = r->wu[0];
    int32_t *save = malloc(((size_t)n0 + 1) * sizeof *save);
    if (!save) return -1;
    memcpy(save, r->top, (size_t)n0 * sizeof *save);
    const int V = dsv4_tok_vocab_size(tok);
    int rc = 0;
    for (int id = 0; id < V && id < words * 64 && !rc; id++) {
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(tok, id, &len);
        if (!b || !len || dsv4_tok_is_added(tok, id)) continue;
        const int s = gr_run_feed(r, (const uint8_t *)b, len);
        if (s > 0) bits[id >> 6] |= 1ull << (id & 63);
        if (s < 0) r->over = 0; /* past a bound: not allowed, as gr_mask drops it */
        truncate_pool(r, mark0);
        memcpy(r->top, save, (size_t)n0 * sizeof *save);
        r->wn[0] = n0, r->wacc[0] = acc0, r->wu[0] = u0;
    }
    free(save);
    return rc;
}
