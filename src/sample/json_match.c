/* json_match.c — the byte automaton of a compiled schema (json.h): a set of stacks of
 * frames, each stack one reading of the bytes so far (anyOf alternatives that the bytes
 * have not told apart yet). A frame is one JSON construct being read; it takes a byte, or
 * hands it to its parent when it is complete (a number ends at the first byte that cannot
 * continue it). */
#include "sample/json.h"

#include <string.h>

enum { F_END, F_VALUE, F_OBJ, F_KEY, F_STR, F_NUM, F_LIT, F_ARR, F_CSTR };
/* what a frame did with the byte */
enum { R_DEAD, R_EAT, R_EAT_POP, R_PASS, R_REFEED };
/* F_OBJ phases */
enum { O_OPEN, O_KEY, O_COLON, O_VALUE, O_AFTER, O_COMMA };
/* F_ARR phases */
enum { A_OPEN, A_VALUE, A_AFTER };
/* F_NUM phases */
enum { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static json_frame frame(int kind, int node) { return (json_frame){.node = (uint16_t)node, .kind = (uint8_t)kind}; }

static int is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* one more whitespace byte in the frame's current run, within the bound */
static int ws(json_frame *t) {
    if (t->ws >= JSON_MAX_WS) return R_DEAD;
    t->ws++;
    return R_EAT;
}

static inline int utf8_next(int u, uint8_t c) {
    /* RFC 3629's well-formed sequences: states 1, 2: that many continuation bytes left;
     * 3 (after E0): A0-BF; 4 (after ED): 80-9F; 5 (after F0): 90-BF; 6 (after F1-F3):
     * 80-BF; 7 (after F4): 80-8F, each then 1 (3, 4) or 2 (5, 6, 7) more */
    static const uint8_t lo[8] = {0, 0x80, 0x80, 0xA0, 0x80, 0x90, 0x80, 0x80};
    static const uint8_t hi[8] = {0, 0xBF, 0xBF, 0xBF, 0x9F, 0xBF, 0xBF, 0x8F};
    static const int8_t next[8] = {0, 0, 1, 1, 1, 2, 2, 2};
    if (u) return c >= lo[u] && c <= hi[u] ? next[u] : -1;
    if (c < 0x20 || c == '"' || c == '\\') return -1;
    if (c < 0x80) return 0;
    if (c >= 0xC2 && c <= 0xDF) return 1;
    if (c == 0xE0) return 3;
    if (c == 0xED) return 4;
    if (c >= 0xE1 && c <= 0xEF) return 2;
    if (c == 0xF0) return 5;
    if (c >= 0xF1 && c <= 0xF3) return 6;
    if (c == 0xF4) return 7;
    return -1;
}

int json_utf8_next(int u, uint8_t c) { return utf8_next(u, c); }

static int push(json_frame *f, int *d, json_frame x) {
    if (*d >= JSON_MAX_DEPTH) return 0;
    f[(*d)++] = x;
    return 1;
}

/* ---- objects ---- */

static int required_left(const dsv4_json_schema *s, const json_node *n, uint32_t pos) {
    for (int i = (int)pos; i < n->n_props; i++)
        if (s->props[n->props + i].required) return 1;
    return 0;
}

/* a value of node v fits pushed above depth d: it can be completed under the bound */
static int fits(const dsv4_json_schema *s, int v, int d) { return d + 1 + s->nodes[v].need <= JSON_MAX_DEPTH; }

/* keys that may come at pos in an object at depth d: the next ones up to and including the
 * first required one, those whose values fit (a required one always does: need_obj).
 * Free-key objects: bit 0 when their values fit. */
static uint64_t key_candidates(const dsv4_json_schema *s, const json_node *n, uint32_t pos, int d) {
    if (n->n_props == 0) return n->additional >= 0 && fits(s, n->additional, d);
    uint64_t m = 0;
    for (int i = (int)pos; i < n->n_props; i++) {
        if (fits(s, s->props[n->props + i].node, d)) m |= 1ull << i;
        if (s->props[n->props + i].required) break;
    }
    return m;
}

static int start_key(const dsv4_json_schema *s, json_frame *f, int *d) {
    json_frame *t = &f[*d - 1];
    const json_node *n = &s->nodes[t->node];
    json_frame k;
    const uint64_t cand = key_candidates(s, n, t->a, *d);
    if (!cand) return R_DEAD;
    if (n->n_props == 0) {
        k = frame(F_STR, t->node);
    } else {
        k = frame(F_KEY, t->node);
        k.a = 1; /* the opening quote, taken here */
        k.b = cand;
    }
    t->phase = O_KEY, t->ws = 0;
    return push(f, d, k) ? R_EAT : R_DEAD;
}

static int obj_feed(const dsv4_json_schema *s, json_frame *f, int *d, uint8_t c) {
    json_frame *t = &f[*d - 1];
    const json_node *n = &s->nodes[t->node];
    if (is_ws(c)) return ws(t);
    switch (t->phase) {
    case O_OPEN:
        if (c == '}') return required_left(s, n, t->a) ? R_DEAD : R_EAT_POP;
        return c == '"' ? start_key(s, f, d) : R_DEAD;
    case O_COMMA:
        return c == '"' ? start_key(s, f, d) : R_DEAD;
    case O_COLON: {
        if (c != ':') return R_DEAD;
        const int v = n->n_props ? s->props[n->props + (int)t->b].node : n->additional;
        t->phase = O_VALUE, t->ws = 0;
        return push(f, d, frame(F_VALUE, v)) ? R_EAT : R_DEAD;
    }
    case O_AFTER:
        if (c == '}') return required_left(s, n, t->a) ? R_DEAD : R_EAT_POP;
        if (c != ',' || !key_candidates(s, n, t->a, *d)) return R_DEAD;
        t->phase = O_COMMA, t->ws = 0;
        return R_EAT;
    }
    return R_DEAD;
}

static int key_feed(const dsv4_json_schema *s, json_frame *t, uint8_t c) {
    const json_node *n = &s->nodes[t->node];
    uint64_t keep = 0;
    for (uint64_t m = t->b; m; m &= m - 1) {
        const json_prop *p = &s->props[n->props + __builtin_ctzll(m)];
        if ((int)t->a < p->key_len && (uint8_t)p->key[t->a] == c) keep |= m & -m;
    }
    if (!keep) return R_DEAD;
    t->a++, t->b = keep;
    /* quoted keys are prefix-free: a complete one is the only candidate left */
    const json_prop *p = &s->props[n->props + __builtin_ctzll(keep)];
    return (int)t->a == p->key_len ? R_EAT_POP : R_EAT;
}

/* ---- scalars ---- */

static int str_feed(json_frame *t, uint8_t c) {
    if (t->phase == 0) {
        if (t->a == 0 && c == '"') return R_EAT_POP;
        if (t->a == 0 && c == '\\') { t->phase = 1; return R_EAT; }
        const int u = json_utf8_next((int)t->a, c);
        if (u < 0) return R_DEAD;
        t->a = (uint32_t)u;
        return R_EAT;
    }
    if (t->phase == 1) {
        if (c == 'u') t->phase = 2;
        else if (strchr("\"\\/bfnrt", c) && c) t->phase = 0;
        else return R_DEAD;
        return R_EAT;
    }
    /* \uXXXX: phases 2..5 */
    const int hex = json_hexval(c) >= 0;
    if (!hex) return R_DEAD;
    t->phase = t->phase == 5 ? 0 : t->phase + 1;
    return R_EAT;
}

/* ---- constrained strings (json_strc) ---- */

static int strc_ok(const json_strc *sc, uint32_t q, uint64_t n) {
    if (sc->max >= 0 && n > (uint64_t)sc->max) return 0;
    if (!sc->ok) return 1;
    const size_t i = (size_t)q * ((size_t)sc->cap + 1) + (size_t)n;
    return sc->ok[i >> 6] >> (i & 63) & 1;
}

/* the count after one more code point: saturating at cap without maxLength */
static uint64_t strc_count(const json_strc *sc, uint64_t b) {
    return sc->max < 0 && b + 1 > (uint64_t)sc->cap ? (uint64_t)sc->cap : b + 1;
}

/* the string's count and DFA state after a code point of class k (0 without a DFA), if it
 * can still close */
static inline int strc_take_k(const json_strc *sc, json_frame *t, int k) {
    uint32_t q = 0;
    if (sc->dfa.n_states) {
        const int nq = sc->dfa.next[(size_t)t->q * (size_t)sc->dfa.n_classes + (size_t)k];
        if (nq < 0) return R_DEAD;
        q = (uint32_t)nq;
    }
    const uint64_t n = strc_count(sc, t->b);
    if (!strc_ok(sc, q, n)) return R_DEAD;
    t->q = q, t->b = n;
    return R_EAT;
}

/* the same after code point cp */
static int strc_take(const json_strc *sc, json_frame *t, uint32_t cp) {
    return strc_take_k(sc, t, sc->dfa.n_states ? json_dfa_class(&sc->dfa, cp) : 0);
}

/* some code point in [lo, hi] (surrogates aside) can come next: a character begun (UTF-8
 * lead byte, an escape's first digits) is kept only if some way to finish it is */
static int strc_range(const json_strc *sc, const json_frame *t, uint32_t lo, uint32_t hi) {
    const uint64_t n = strc_count(sc, t->b);
    const json_dfa *d = &sc->dfa;
    if (!d->n_states) return strc_ok(sc, 0, n);
    for (int k = json_dfa_class(d, lo); k < d->n_classes && d->lo[k] <= hi; k++) {
        const uint32_t a = d->lo[k] > lo ? d->lo[k] : lo;
        const uint32_t e = k + 1 < d->n_classes && d->lo[k + 1] - 1 < hi ? d->lo[k + 1] - 1 : hi;
        if (a >= 0xD800 && e <= 0xDFFF) continue;
        const int nq = d->next[(size_t)t->q * (size_t)d->n_classes + (size_t)k];
        if (nq >= 0 && strc_ok(sc, (uint32_t)nq, n)) return 1;
    }
    return 0;
}

static inline int cstr_feed_sc(const json_strc *sc, json_frame *t, uint8_t c) {
    const int u = (int)(t->a & 7);
    uint32_t cp = t->a >> 8;
    if (t->phase == 0) {
        if (u == 0 && c == '"') {
            const int closes = t->b >= (uint64_t)sc->min && (!sc->dfa.n_states || sc->dfa.accept[t->q]);
            return closes ? R_EAT_POP : R_DEAD;
        }
        if (u == 0 && c == '\\') {
            t->phase = 1;
            return strc_range(sc, t, 0, 0xFFFF) ? R_EAT : R_DEAD; /* every escape is in the BMP */
        }
        const int nu = utf8_next(u, c);
        if (nu < 0) return R_DEAD;
        cp = u ? cp << 6 | (c & 0x3Fu) : c < 0x80 ? c : c < 0xE0 ? c & 0x1Fu : c < 0xF0 ? c & 0x0Fu : c & 0x07u;
        if (nu == 0) {
            t->a = 0;
            return strc_take(sc, t, cp);
        }
        /* continuation bytes left in UTF-8 state nu (json_utf8_next), and the code points
         * they can make: after E0 at least U+0800, after ED below the surrogates, after F0
         * at least U+10000, after F4 at most U+10FFFF */
        static const int8_t left[8] = {0, 1, 2, 2, 2, 3, 3, 3};
        uint32_t lo = cp << (6 * left[nu]), hi = lo | ((1u << (6 * left[nu])) - 1);
        if (nu == 3 && lo < 0x800) lo = 0x800;
        if (nu == 4 && hi > 0xD7FF) hi = 0xD7FF;
        if (nu == 5 && lo < 0x10000) lo = 0x10000;
        if (nu == 7 && hi > 0x10FFFF) hi = 0x10FFFF;
        t->a = cp << 8 | (uint32_t)nu;
        return strc_range(sc, t, lo, hi) ? R_EAT : R_DEAD;
    }
    if (t->phase == 1) {
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        if (c == 'u') {
            t->phase = 2, t->a = 0;
            return R_EAT; /* strc_range(0, 0xFFFF) held at the backslash */
        }
        const char *at = c ? strchr(from, c) : NULL;
        if (!at) return R_DEAD;
        t->phase = 0;
        return strc_take(sc, t, (uint8_t)to[at - from]);
    }
    /* \uXXXX: phases 2..5 read digits 1..4; a surrogate escape never starts (strc_range
     * leaves the surrogates out: such a character is written as UTF-8 instead), so a code
     * point is whole after four digits */
    const int h = json_hexval(c);
    if (h < 0) return R_DEAD;
    cp = cp << 4 | (uint32_t)h;
    const int rem = 5 - t->phase;
    if (rem == 0) {
        t->phase = 0, t->a = 0;
        return strc_take(sc, t, cp);
    }
    t->phase++, t->a = cp << 8;
    const uint32_t lo = cp << (4 * rem);
    return strc_range(sc, t, lo, lo | ((1u << (4 * rem)) - 1)) ? R_EAT : R_DEAD;
}

static int cstr_feed(const dsv4_json_schema *s, json_frame *t, uint8_t c) {
    return cstr_feed_sc(&s->strcs[s->nodes[t->node].strc], t, c);
}

static int num_ends(const dsv4_json_schema *s, const json_frame *t) {
    const int nc = s->nodes[t->node].numc;
    if (nc >= 0) return s->nums[nc].accept[t->q];
    return t->phase == N_ZERO || t->phase == N_INT || t->phase == N_FRAC || t->phase == N_EXP;
}

static int num_feed(const dsv4_json_schema *s, json_frame *t, uint8_t c) {
    const int nc = s->nodes[t->node].numc;
    if (nc >= 0) {
        /* a bounded number: its DFA (only live states kept: alive => completable) */
        const json_dfa *d = &s->nums[nc];
        const int nq = c < 128 ? d->next[(size_t)t->q * (size_t)d->n_classes + d->ascii[c]] : -1;
        if (nq >= 0) { t->q = (uint32_t)nq; return R_EAT; }
        return d->accept[t->q] ? R_PASS : R_DEAD;
    }
    const int real = (s->nodes[t->node].types & JT_NUM) != 0; /* else integers only */
    int to = -1;
    switch (t->phase) {
    case N_START: to = c == '-' ? N_MINUS : c == '0' ? N_ZERO : is_digit(c) ? N_INT : -1; break;
    case N_MINUS: to = c == '0' ? N_ZERO : is_digit(c) ? N_INT : -1; break;
    case N_ZERO:
    case N_INT:
        if (t->phase == N_INT && is_digit(c)) to = N_INT;
        else if (real && c == '.') to = N_DOT;
        else if (real && (c == 'e' || c == 'E')) to = N_E;
        break;
    case N_DOT: to = is_digit(c) ? N_FRAC : -1; break;
    case N_FRAC: to = is_digit(c) ? N_FRAC : (c == 'e' || c == 'E') ? N_E : -1; break;
    case N_E: to = (c == '+' || c == '-') ? N_ESIGN : is_digit(c) ? N_EXP : -1; break;
    case N_ESIGN:
    case N_EXP: to = is_digit(c) ? N_EXP : -1; break;
    }
    if (to >= 0) { t->phase = (uint8_t)to; return R_EAT; }
    return num_ends(s, t) ? R_PASS : R_DEAD;
}

static int lit_ends(const dsv4_json_schema *s, const json_frame *t) {
    const json_node *n = &s->nodes[t->node];
    for (uint64_t m = t->b; m; m &= m - 1)
        if (s->lits[n->lits + __builtin_ctzll(m)].len == (int)t->a) return 1;
    return 0;
}

static int lit_feed(const dsv4_json_schema *s, json_frame *t, uint8_t c) {
    const json_node *n = &s->nodes[t->node];
    uint64_t keep = 0;
    int longer = 0;
    for (uint64_t m = t->b; m; m &= m - 1) {
        const json_lit *l = &s->lits[n->lits + __builtin_ctzll(m)];
        if ((int)t->a < l->len && (uint8_t)l->text[t->a] == c) {
            keep |= m & -m;
            longer |= l->len > (int)t->a + 1;
        }
    }
    /* a complete value that another one continues (numbers: 1 and 12) ends at the first
     * byte neither takes; every other literal delimits itself */
    if (!keep) return lit_ends(s, t) ? R_PASS : R_DEAD;
    t->a++, t->b = keep;
    return longer ? R_EAT : R_EAT_POP;
}

/* ---- arrays ---- */

/* the schema of item i, or -1 when there may be no item i */
static int item_node(const dsv4_json_schema *s, const json_node *n, uint32_t i) {
    if (n->max_items >= 0 && i >= (uint32_t)n->max_items) return -1;
    if (i < (uint32_t)n->n_prefix) return s->kids[n->prefix + (int)i];
    return n->items;
}

static int arr_feed(const dsv4_json_schema *s, json_frame *f, int *d, uint8_t c) {
    json_frame *t = &f[*d - 1];
    const json_node *n = &s->nodes[t->node];
    if (is_ws(c)) return ws(t);
    if (c == ']') return t->a >= (uint32_t)n->min_items ? R_EAT_POP : R_DEAD;
    const int it = item_node(s, n, t->a);
    if (it < 0 || !fits(s, it, *d)) return R_DEAD; /* only ']' then (minItems fit: need_arr) */
    if (t->phase == A_AFTER) {
        if (c != ',') return R_DEAD;
        t->phase = A_VALUE, t->ws = 0;
        return push(f, d, frame(F_VALUE, it)) ? R_EAT : R_DEAD;
    }
    /* A_OPEN: the first item starts with this byte */
    t->phase = A_VALUE, t->ws = 0;
    return push(f, d, frame(F_VALUE, it)) ? R_REFEED : R_DEAD;
}

/* ---- values ---- */

static void feed(const dsv4_json_schema *s, const json_frame *src, int depth, uint8_t c, json_state *dst);

static int value_feed(const dsv4_json_schema *s, json_state *st, int k, uint8_t c) {
    json_frame *t = &st->f[k][st->depth[k] - 1];
    const json_node *n = &s->nodes[t->node];
    if (is_ws(c)) return ws(t);
    if (n->kind == JN_ANYOF) {
        /* one stack per alternative: the others as copies, the first in place */
        for (int i = n->n_alts - 1; i >= 1; i--) {
            t->node = (uint16_t)s->kids[n->alts + i];
            feed(s, st->f[k], st->depth[k], c, st);
        }
        t->node = (uint16_t)s->kids[n->alts];
        return R_REFEED;
    }
    if (n->kind == JN_LIT) {
        *t = frame(F_LIT, t->node);
        t->b = n->n_lits == 64 ? ~0ull : (1ull << n->n_lits) - 1;
        return R_REFEED;
    }
    const int ty = n->types, node = t->node, d = st->depth[k];
    /* an object or array only when its cheapest completion fits under the bound */
    if (c == '{' && (ty & JT_OBJ) && d + n->need_obj <= JSON_MAX_DEPTH) { *t = frame(F_OBJ, node); return R_EAT; }
    if (c == '[' && (ty & JT_ARR) && d + n->need_arr <= JSON_MAX_DEPTH) { *t = frame(F_ARR, node); return R_EAT; }
    if (c == '"' && (ty & JT_STR)) { *t = frame(n->strc >= 0 ? F_CSTR : F_STR, node); return R_EAT; }
    if ((c == '-' || is_digit(c)) && (ty & (JT_NUM | JT_INT))) { *t = frame(F_NUM, node); return R_REFEED; }
    if ((c == 't' || c == 'f') && (ty & JT_BOOL)) { *t = frame(F_LIT, s->bool_node); t->b = 3; return R_REFEED; }
    if (c == 'n' && (ty & JT_NULL)) { *t = frame(F_LIT, s->null_node); t->b = 1; return R_REFEED; }
    return R_DEAD;
}

/* the top frame is complete: pop it and move its parent on */
static void pop_done(json_frame *f, int *d) {
    const json_frame done = f[--*d];
    json_frame *p = &f[*d - 1];
    p->ws = 0;
    switch (p->kind) {
    case F_END: p->phase = 1; break;
    case F_OBJ:
        if (p->phase == O_KEY) {
            p->phase = O_COLON;
            if (done.kind == F_KEY) {
                p->b = (uint64_t)__builtin_ctzll(done.b); /* the property whose value follows */
                p->a = (uint32_t)p->b + 1;                 /* the next one that may come */
            }
        } else {
            p->phase = O_AFTER;
        }
        break;
    case F_ARR:
        p->phase = A_AFTER;
        if (p->a != UINT32_MAX) p->a++;
        break;
    }
}

/* stack k of st takes byte c; 0 when it dies */
static int run(const dsv4_json_schema *s, json_state *st, int k, uint8_t c) {
    json_frame *f = st->f[k];
    int *d = &st->depth[k];
    for (;;) {
        json_frame *t = &f[*d - 1];
        int r = R_DEAD;
        switch (t->kind) {
        case F_END: r = t->phase == 1 && is_ws(c) ? ws(t) : R_DEAD; break;
        case F_VALUE: r = value_feed(s, st, k, c); break;
        case F_OBJ: r = obj_feed(s, f, d, c); break;
        case F_KEY: r = key_feed(s, t, c); break;
        case F_STR: r = str_feed(t, c); break;
        case F_CSTR: r = cstr_feed(s, t, c); break;
        case F_NUM: r = num_feed(s, t, c); break;
        case F_LIT: r = lit_feed(s, t, c); break;
        case F_ARR: r = arr_feed(s, f, d, c); break;
        }
        switch (r) {
        case R_EAT: return 1;
        case R_EAT_POP: pop_done(f, d); return 1;
        case R_PASS: pop_done(f, d); continue;
        case R_REFEED: continue;
        default: return 0;
        }
    }
}

/* a copy of stack src (depth frames) takes byte c, appended to dst if it lives. No reading
 * is ever dropped: the compile bounded the stacks a step can hold (json_readings: the
 * schema's max_stacks, which is also the capacity dst may have: json_state_size), and
 * should one not fit anyway the whole step fails (dst->over: the state is dead), so the
 * automaton never narrows the schema's meaning. */
static void feed(const dsv4_json_schema *s, const json_frame *src, int depth, uint8_t c, json_state *dst) {
    if (dst->over) return;
    if (dst->n >= s->max_stacks) {
        dst->over = 1;
        return;
    }
    const int k = dst->n++;
    memcpy(dst->f[k], src, (size_t)depth * sizeof *src);
    dst->depth[k] = depth;
    if (run(s, dst, k, c)) return;
    /* dead: the last stack (a fork made on the way, or k itself) takes its place */
    const int last = --dst->n;
    if (last != k) {
        memcpy(dst->f[k], dst->f[last], (size_t)dst->depth[last] * sizeof *src);
        dst->depth[k] = dst->depth[last];
    }
}

/* stacks i and j of st are the same: from the top down, where a union's readings differ
 * (each frame a fixed-size compare, inlined: a call per pair cost a union's steps more than
 * the steps) */
static int same_stack(const json_state *st, int i, int j) {
    if (st->depth[i] != st->depth[j]) return 0;
    for (int k = st->depth[i] - 1; k >= 0; k--)
        if (memcmp(&st->f[i][k], &st->f[j][k], sizeof(json_frame))) return 0;
    return 1;
}

void json_state_init(const dsv4_json_schema *s, json_state *st) {
    (void)s;
    st->n = 1, st->over = 0;
    st->depth[0] = 2;
    st->f[0][0] = frame(F_END, 0);
    st->f[0][1] = frame(F_VALUE, 0);
}

int json_state_step(const dsv4_json_schema *s, const json_state *src, uint8_t c, json_state *dst) {
    dst->n = 0, dst->over = 0;
    for (int i = 0; i < src->n; i++) feed(s, src->f[i], src->depth[i], c, dst);
    if (dst->over) {
        dst->n = 0;
        return 0;
    }
    /* readings that became the same go on as one */
    for (int i = 1; i < dst->n; i++)
        for (int j = 0; j < i; j++)
            if (same_stack(dst, i, j)) {
                const int last = --dst->n;
                if (last != i) {
                    memcpy(dst->f[i], dst->f[last], (size_t)dst->depth[last] * sizeof(json_frame));
                    dst->depth[i] = dst->depth[last];
                }
                i--;
                break;
            }
    return dst->n > 0;
}

void json_state_copy(json_state *dst, const json_state *src) {
    dst->n = src->n, dst->over = src->over;
    for (int i = 0; i < src->n; i++) {
        dst->depth[i] = src->depth[i];
        memcpy(dst->f[i], src->f[i], (size_t)src->depth[i] * sizeof(json_frame));
    }
}

int json_state_accepting(const dsv4_json_schema *s, const json_state *st) {
    for (int i = 0; i < st->n; i++) {
        const json_frame *t = &st->f[i][st->depth[i] - 1];
        if (st->depth[i] == 1 && t->phase == 1) return 1;
        if (st->depth[i] == 2 && ((t->kind == F_NUM && num_ends(s, t)) || (t->kind == F_LIT && lit_ends(s, t)))) return 1;
    }
    return 0;
}

int json_state_in_string(const json_state *st, int *utf8) {
    /* every reading (anyOf branches not told apart yet, e.g. all inside the same property's
     * string) in a plain string at the same UTF-8 state: such a token keeps all of them */
    if (st->n < 1) return 0;
    const uint32_t a = st->f[0][st->depth[0] - 1].a;
    for (int i = 0; i < st->n; i++) {
        const json_frame *t = &st->f[i][st->depth[i] - 1];
        if (t->kind != F_STR || t->phase != 0 || t->a != a) return 0;
    }
    *utf8 = (int)a;
    return 1;
}

int json_state_in_cstr(const json_state *st, json_frame *top) {
    if (st->n != 1) return 0;
    const json_frame *t = &st->f[0][st->depth[0] - 1];
    if (t->kind != F_CSTR || t->phase != 0) return 0;
    *top = *t;
    return 1;
}

int json_state_in_quotes(const dsv4_json_schema *s, const json_state *st) {
    for (int i = 0; i < st->n; i++) {
        const json_frame *t = &st->f[i][st->depth[i] - 1];
        if (t->kind == F_STR || t->kind == F_CSTR || t->kind == F_KEY) return 1;
        if (t->kind != F_LIT) continue;
        /* a literal's text is compact JSON: whitespace in it is inside one of its strings */
        const json_node *n = &s->nodes[t->node];
        for (uint64_t m = t->b; m; m &= m - 1) {
            const json_lit *l = &s->lits[n->lits + __builtin_ctzll(m)];
            if ((int)t->a < l->len && is_ws((uint8_t)l->text[t->a])) return 1;
        }
    }
    return 0;
}

int json_state_strings(const json_state *st, json_frame *tops, json_state *rest) {
    int n = 0;
    rest->n = 0, rest->over = 0;
    for (int i = 0; i < st->n; i++) {
        const json_frame *t = &st->f[i][st->depth[i] - 1];
        if ((t->kind == F_STR || t->kind == F_CSTR) && t->phase == 0) {
            tops[n++] = *t;
            continue;
        }
        const int k = rest->n++;
        rest->depth[k] = st->depth[i];
        memcpy(rest->f[k], st->f[i], (size_t)st->depth[i] * sizeof(json_frame));
    }
    return n;
}

int json_frame_is_cstr(const json_frame *t) { return t->kind == F_CSTR; }

int json_cstr_step(const dsv4_json_schema *s, json_frame *t, uint8_t c) { return cstr_feed(s, t, c) == R_EAT; }

int json_state_feed(const dsv4_json_schema *s, json_state st[2], int *cur, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++, *cur ^= 1)
        if (!json_state_step(s, &st[*cur], b[i], &st[*cur ^ 1])) return 0;
    return 1;
}

/* ---- the vocabulary walks inside constrained strings (json.h) ---- */

/* a string frame (of string sc) takes one more byte of a plain id's (no '"', '\\' or
 * control byte) */
static inline int cstr_byte(const json_strc *sc, json_frame *t, uint8_t c) {
    return c >= 0x20 && c != '"' && c != '\\' && cstr_feed_sc(sc, t, c) == R_EAT;
}

/* byte c cannot follow string frame t: between characters, outside its DFA state's byte set
 * (json_strc.acc; 0: it may, the step tells) */
static inline int cstr_refuses(const json_strc *sc, const json_frame *t, uint8_t c) {
    return sc->acc && t->phase == 0 && !(t->a & 7) && !(sc->acc[(size_t)t->q * 4 + (c >> 6)] >> (c & 63) & 1);
}

/* The step memo (json_walk.wm): the step that completes a code point of L bytes from a string
 * frame at the character boundary L bytes up depends on that frame and the code point's class
 * alone (its DFA class; without a DFA every code point goes alike): the same DFA state, count
 * and outcome. memo[d] holds 2 * (4 * (class + 1) + L - 1) + alive for the step that made the
 * frame at depth d from the one at d - L as it is now, or 0 (none known); a frame written
 * anew sets its own depth's entry and clears the four below it (whose frames a step may have
 * made from it). The key of a code point of class k and L bytes: */
static inline int32_t cstr_memo_key(int k, int len) { return 2 * (4 * (k + 1) + len - 1); }

/* f[d] and memo[d] written (ok: it lives): the memo of the depths that may step from it cleared */
static inline int memo_set(int32_t *memo, int d, int32_t key, int ok) {
    memo[d] = key ? key | ok : 0;
    memset(memo + d + 1, 0, 4 * sizeof *memo); /* (n_st + 5 entries) */
    return ok;
}

/* f[d] = f[d - 1] after byte c of a plain id, 1 when it lives: an ASCII character by the memo
 * when it knows, else the byte set, else a step (counted in *steps) */
static inline int cstr_next(const json_strc *sc, json_frame *f, int32_t *memo, int d, uint8_t c, long *steps) {
    const json_frame *p = &f[d - 1];
    const int ascii = !p->phase && !(p->a & 7) && c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
    const int32_t key = ascii ? cstr_memo_key(sc->dfa.n_states ? sc->dfa.ascii[c] : 0, 1) : 0;
    if (key && (memo[d] & ~1) == key) return memo[d] & 1;
    if (cstr_refuses(sc, p, c)) return 0; /* f[d] untouched: its memo holds */
    f[d] = *p;
    ++*steps;
    return memo_set(memo, d, key, cstr_byte(sc, &f[d], c));
}

/* A string brought along the walk's path (json_cstr_walk_any's any_reach) changes its DFA
 * state and count only at a code point's last byte: inside a multi-byte character its frame
 * just gathers the code point's bits, and it is alive there while some code point it can
 * still become can come next, which holds if the character completes alive (its code point
 * is in every prefix's range). So the path's UTF-8 is decoded once for every string
 * (json_walk.pu, pbase: path_through) and such a string is stepped once per code point, from its
 * frame at the character's boundary with the character's earlier bytes folded in: the step
 * of its last byte, as byte-by-byte stepping would make it, memoized by the code point's
 * class. */

/* a string frame t (between characters or inside one, not in an escape) after byte c of a
 * character not yet complete (UTF-8 state nu after it): the code point's bits gathered as
 * cstr_feed_sc does, without its test */
static inline void utf8_fold(json_frame *t, uint8_t c, int nu) {
    const uint32_t cp = t->a & 7 ? (t->a >> 8) << 6 | (c & 0x3Fu) : c < 0xE0 ? c & 0x1Fu : c < 0xF0 ? c & 0x0Fu : c & 0x07u;
    t->a = cp << 8 | (uint32_t)nu;
}

/* The path's UTF-8 decoded through depth d (the walk's path[1..d], its bytes a string took
 * already): per depth the UTF-8 state after its byte (w->pu) and the character boundary a
 * step there starts from (w->pbase), from the depth they were last known through (w->pv:
 * json_cstr_walk_any lowers it as the path moves) */
static void path_through(const json_trie *t, json_walk *w, int d) {
    for (int x = w->pv + 1; x <= d; x++) {
        const int u = utf8_next(w->pu[x - 1], t[w->path[x]].byte);
        w->pu[x] = (int8_t)(u < 0 ? 0 : u); /* (never: the bytes were taken) */
        w->pbase[x] = x == 1 || w->pu[x - 1] == 0 ? x - 1 : w->pbase[x - 1];
    }
    if (d > w->pv) w->pv = d;
}

/* The frame of string sc at depth x of the path, from its frame at the boundary w->pbase[x]
 * (f: its frames, memo its memo), with the bytes between folded in: a code point completed at
 * x by the memo when it knows, else the byte set at its lead byte, else strc_take's step
 * (counted in *steps); a character's prefix (the depth an any_reach ends at) by the byte set,
 * then its byte's step. Kept in f[x]; 1 when it lives. */
static int cstr_from_base(const json_strc *sc, const json_trie *t, const json_walk *w, json_frame *f, int32_t *memo,
                          int x, long *steps) {
    const int e = w->pbase[x];
    const uint8_t c = t[w->path[x]].byte;
    if (cstr_refuses(sc, &f[e], t[w->path[e + 1]].byte)) return 0;
    json_frame g = f[e];
    for (int y = e + 1; y < x; y++) utf8_fold(&g, t[w->path[y]].byte, w->pu[y]);
    if (w->pu[x]) {
        f[x] = g;
        ++*steps;
        return memo_set(memo, x, 0, cstr_byte(sc, &f[x], c));
    }
    /* the code point completed (its bytes valid: path_at), its class: strc_take's step, as
     * cstr_feed_sc takes it at the last byte */
    const json_dfa *dfa = &sc->dfa;
    const uint32_t cp = g.a & 7 ? (g.a >> 8) << 6 | (c & 0x3Fu) : c;
    const int k = !dfa->n_states ? 0 : cp < 128 ? dfa->ascii[cp] : json_dfa_class(dfa, cp);
    const int32_t key = cstr_memo_key(k, x - e);
    if ((memo[x] & ~1) == key) return memo[x] & 1;
    g.a = 0;
    f[x] = g;
    ++*steps;
    return memo_set(memo, x, key, strc_take_k(sc, &f[x], k) == R_EAT);
}

static const json_strc *strc_of(const dsv4_json_schema *s, const json_frame *t) {
    return &s->strcs[s->nodes[t->node].strc];
}

long json_cstr_walk(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, uint64_t *bits) {
    const json_trie *t = v->all;
    json_frame *fr = w->fr;
    const json_strc *sc = strc_of(s, &fr[0]);
    memset(w->wm, 0, ((size_t)w->n_st + 5) * sizeof *w->wm);
    long steps = 0;
    for (int i = 0; i < v->n_all;) {
        if (cstr_next(sc, fr, w->wm, t[i].depth, t[i].byte, &steps)) {
            if (t[i].tok >= 0) json_vocab_set_tok(v, bits, &t[i]);
            i++;
        } else {
            i = (int)t[i].skip;
        }
    }
    return steps;
}

/* the phase of a frame any_reach did not keep (a string frame's phases are 0..5) */
enum { CSTR_SKIPPED = 7 };

/* x is node i or one of its ancestors (a preorder trie: x's subtree is [x, skip)) */
static int holds(const json_trie *t, int32_t x, int i) { return x <= i && i < (int)t[x].skip; }

/* Frame j of the walk alive at depth d - 1 of the path to node i: from the deepest depth of
 * the path it is known alive at (on the way to wx[j]), brought along it a code point at a
 * time (cstr_from_base: the depths inside a character skipped, but for d - 1 itself, whose
 * frame the next byte steps from); 0 when it dies on the way (or died above). */
static int any_reach(const json_strc *sc, const json_trie *t, json_walk *w, int j, int d, int i, long *steps) {
    json_frame *f = w->wf + (size_t)j * (size_t)w->n_st;
    int32_t *memo = w->wm + (size_t)j * ((size_t)w->n_st + 5);
    if (w->wdeadn[j] >= 0 && holds(t, w->wdeadn[j], i)) return 0;
    path_through(t, w, d - 1);
    int e = w->wtop[j] < d - 1 ? w->wtop[j] : d - 1;
    if (w->wx[j] < 0) e = 0;
    while (e > 0 && !holds(t, w->path[e], w->wx[j])) e--;
    /* a depth inside a character skipped on the way there (its frame not kept, so marked):
     * from the boundary before it (those are all kept) */
    if (e > 0 && f[e].phase == CSTR_SKIPPED) e = w->pbase[e];
    for (int x = e + 1; x < d; x++) {
        if (w->pu[x] && x < d - 1) {
            f[x].phase = CSTR_SKIPPED, memo[x] = 0; /* (a memo entry vouches for its frame) */
            continue;
        }
        if (!cstr_from_base(sc, t, w, f, memo, x, steps)) {
            w->wdeadn[j] = w->path[x], w->wtop[j] = e, w->wx[j] = w->path[e];
            return 0;
        }
        e = x;
    }
    w->wtop[j] = d - 1, w->wx[j] = w->path[d - 1];
    return 1;
}

long json_cstr_walk_any(const dsv4_json_schema *s, const json_vocab *v, json_walk *w, int m, uint64_t *bits) {
    const json_trie *t = v->all;
    const size_t n = (size_t)w->n_st;
    const json_strc *sc[JSON_MAX_STACKS];
    long steps = 0;
    for (int j = 0; j < m; j++) {
        sc[j] = strc_of(s, &w->wf[(size_t)j * n]);
        w->wx[j] = -1, w->wtop[j] = 0, w->wdeadn[j] = -1;
    }
    memset(w->wm, 0, (size_t)m * (n + 5) * sizeof *w->wm);
    w->pu[0] = (int8_t)(w->wf[0].a & 7), w->pv = 0;
    w->path[0] = -1, w->wit[0] = 0;
    for (int i = 0; i < v->n_all;) {
        const int d = t[i].depth;
        w->path[d] = i;
        if (w->pv >= d) w->pv = d - 1;
        /* the frames before the parent's first live one are dead there (and so here); one
         * whose deepest frame is the parent's goes on from it */
        int j = w->wit[d - 1];
        for (; j < m; j++) {
            if (w->wx[j] != w->path[d - 1] && !any_reach(sc[j], t, w, j, d, i, &steps)) continue;
            if (cstr_next(sc[j], w->wf + (size_t)j * n, w->wm + (size_t)j * (n + 5), d, t[i].byte, &steps)) {
                w->wx[j] = i, w->wtop[j] = d;
                break;
            }
            w->wdeadn[j] = i;
        }
        if (j < m) {
            w->wit[d] = j;
            if (t[i].tok >= 0) json_vocab_set_tok(v, bits, &t[i]);
            i++;
        } else {
            i = (int)t[i].skip;
        }
    }
    return steps;
}
