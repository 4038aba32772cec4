/* json_regex.c — JSON Schema's "pattern" (a subset of ECMA-262 regular expressions) compiled
 * to a DFA over Unicode code points (json_dfa, json.h), for the automaton's constrained
 * strings.
 *
 * The subset: literals and escapes (\t \n \v \f \r \0 \cX \xHH \uHHHH, a surrogate pair
 * \uHHHH\uHHHH as one code point, identity escapes of punctuation), \d \w \s \D \W \S,
 * classes [...] / [^...] with ranges and those escapes, '.', groups (...), (?:...),
 * (?<name>...), '|', the quantifiers * + ? {m} {m,} {m,n} (greedy or lazy: a pattern only
 * asks whether some match exists, which laziness does not change; counts at most 1000),
 * and the assertions ^ and $ (input start and end: no flags). Outside it, refused by name:
 * backreferences, lookaround, \b \B, \p{...}, \u{...}, octal escapes, unknown letter escapes.
 * A pattern is unanchored, as JSON Schema says: it matches a string that contains a match,
 * so it is compiled as .*(?:P).* with '.' here any code point.
 *
 * Parse to a tree, tree to a Thompson NFA (quantifiers copy their operand), NFA to a DFA by
 * subset construction over the classes of code points that no set in the pattern splits
 * (which states can still reach acceptance, within the lengths, is json_strc.ok's job,
 * json_strc_lengths below). Every size is bounded (NFA states, DFA states,
 * classes): a pattern past a bound is refused, never compiled partly. */
#include "sample/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NFA 4096
#define MAX_CLASSES 1024
#define MAX_REPEAT 1000
#define MAX_NEST 64
#define MAX_NODES (2 * MAX_NFA) /* every leaf costs at least 2 NFA states: a larger tree cannot compile */
#define CP_MAX 0x10FFFFu

typedef struct iv { uint32_t lo, hi; } iv;
typedef struct cset { iv *v; int n, cap; } cset;

enum { X_SET, X_CAT, X_ALT, X_REP, X_BOL, X_EOL, X_EMPTY };
typedef struct xnode { int kind, a, b, min, max; } xnode; /* X_SET: a = set; X_REP: max -1 = no bound */

enum { N_EPS, N_SET, N_BOL, N_EOL };
typedef struct nst { int kind, out0, out1, set; } nst;

typedef struct rx {
    const uint8_t *p, *end;     /* the pattern's UTF-8 bytes left */
    xnode *x;                   /* (n_x) the tree */
    int n_x, cap_x;
    cset *sets;                 /* (n_sets) code point sets of X_SET nodes */
    int n_sets, cap_sets;
    nst *nfa;                   /* (n_nfa) */
    int n_nfa, cap_nfa;
    json_budget *bud;           /* the schema's budget, charged as the work is done */
    char *why;
    size_t why_len;
    int failed;
} rx;

static int fail(rx *r, const char *fmt, ...) {
    if (!r->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->why, r->why_len, fmt, ap);
        va_end(ap);
    }
    r->failed = 1;
    return -1;
}

/* charges the budget; -1 (refused) once either part is spent */
static int spend(rx *r, int64_t work, int64_t bytes) {
    r->bud->work -= work, r->bud->bytes -= bytes;
    if (r->bud->work < 0)
        return fail(r, "exceeds the schema's compile budget of %d work units (fewer or simpler patterns, "
                    "formats or lengths)", JSON_BUDGET_WORK);
    if (r->bud->bytes < 0)
        return fail(r, "exceeds the schema's compile budget of %d MB of tables (fewer or simpler patterns, "
                    "formats or lengths)", JSON_BUDGET_BYTES >> 20);
    return 0;
}

static int grow(rx *r, void **p, int *cap, int need, size_t size) {
    return json_grow(p, cap, need, size) ? fail(r, "out of memory") : 0;
}

/* capped here, while parsing: build() recurses down a sequence's left-deep chain of
 * concatenations before it makes a state, so an unbounded tree would overflow the stack
 * (a 90 KB pattern did) before nnew()'s cap could fire */
static int node(rx *r, int kind, int a, int b) {
    if (r->n_x >= MAX_NODES) return fail(r, "has more than %d terms (a shorter pattern)", MAX_NODES);
    if (grow(r, (void **)&r->x, &r->cap_x, r->n_x + 1, sizeof *r->x)) return -1;
    r->x[r->n_x] = (xnode){kind, a, b, 0, 0};
    return r->n_x++;
}

/* ---- code point sets ---- */

static int new_set(rx *r) {
    if (grow(r, (void **)&r->sets, &r->cap_sets, r->n_sets + 1, sizeof *r->sets)) return -1;
    r->sets[r->n_sets] = (cset){0};
    return r->n_sets++;
}

static int set_add(rx *r, int s, uint32_t lo, uint32_t hi) {
    cset *c = &r->sets[s];
    if (grow(r, (void **)&c->v, &c->cap, c->n + 1, sizeof *c->v)) return -1;
    c->v[c->n++] = (iv){lo, hi};
    return 0;
}

static int by_lo(const void *a, const void *b) {
    const iv *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* sorted, overlapping and adjacent intervals merged */
static void set_norm(cset *c) {
    if (!c->n) return;
    qsort(c->v, (size_t)c->n, sizeof *c->v, by_lo);
    int k = 0;
    for (int i = 1; i < c->n; i++) {
        if (c->v[i].lo <= c->v[k].hi + 1) {
            if (c->v[i].hi > c->v[k].hi) c->v[k].hi = c->v[i].hi;
        } else {
            c->v[++k] = c->v[i];
        }
    }
    c->n = k + 1;
}

/* adds the intervals of v[n] (sorted, disjoint), or their complement in [0, CP_MAX] */
static int set_add_list(rx *r, int s, const iv *v, int n, int negate) {
    if (!negate) {
        for (int i = 0; i < n; i++)
            if (set_add(r, s, v[i].lo, v[i].hi)) return -1;
        return 0;
    }
    uint32_t from = 0;
    for (int i = 0; i < n; i++) {
        if (v[i].lo > from && set_add(r, s, from, v[i].lo - 1)) return -1;
        from = v[i].hi + 1;
    }
    return from <= CP_MAX ? set_add(r, s, from, CP_MAX) : 0;
}

static const iv DIGIT[] = {{'0', '9'}};
static const iv WORD[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
/* ECMA-262 WhiteSpace and LineTerminator */
static const iv SPACE[] = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                           {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
static const iv NEWLINE[] = {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}}; /* what '.' does not match */

/* \d \D \w \W \s \S into set s */
static int set_add_class(rx *r, int s, int letter) {
    const int neg = letter >= 'A' && letter <= 'Z';
    switch (letter | 0x20) {
    case 'd': return set_add_list(r, s, DIGIT, 1, neg);
    case 'w': return set_add_list(r, s, WORD, 4, neg);
    default: return set_add_list(r, s, SPACE, 10, neg);
    }
}

/* ---- the parser (ECMA-262's grammar, the subset above) ---- */

/* the next code point of the pattern's UTF-8 */
static int take_cp(rx *r, uint32_t *cp) {
    const uint8_t *p = r->p;
    if (p >= r->end) return fail(r, "ends too early");
    const uint8_t c = *p;
    int n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!n || r->end - p < n) return fail(r, "is not valid UTF-8");
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return fail(r, "is not valid UTF-8");
        v = v << 6 | (p[i] & 0x3F);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[n] || v > CP_MAX || (v >= 0xD800 && v <= 0xDFFF)) return fail(r, "is not valid UTF-8");
    r->p += n;
    *cp = v;
    return 0;
}

int json_hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* n hex digits, or -1 (nothing consumed) */
static long hex_n(rx *r, int n) {
    if (r->end - r->p < n) return -1;
    long v = 0;
    for (int i = 0; i < n; i++) {
        const int h = json_hexval(r->p[i]);
        if (h < 0) return -1;
        v = v << 4 | h;
    }
    r->p += n;
    return v;
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_alnum(int c) { return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); }

/* After a backslash: one code point (*cp) or a class escape (*cls = its letter). */
static int parse_escape(rx *r, int in_class, uint32_t *cp, int *cls) {
    *cls = 0;
    if (r->p >= r->end) return fail(r, "ends with a backslash");
    const int c = *r->p;
    if (c >= 0x80) return take_cp(r, cp); /* an identity escape */
    r->p++;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': *cls = c; return 0;
    case 't': *cp = 9; return 0;
    case 'n': *cp = 10; return 0;
    case 'v': *cp = 11; return 0;
    case 'f': *cp = 12; return 0;
    case 'r': *cp = 13; return 0;
    case 'b':
        if (in_class) { *cp = 8; return 0; }
        return fail(r, "uses the word boundary assertion \\b");
    case 'B': return fail(r, "uses the word boundary assertion \\B");
    case '0':
        if (r->p < r->end && is_digit(*r->p)) return fail(r, "uses an octal escape");
        *cp = 0;
        return 0;
    case 'c':
        if (r->p < r->end && ((*r->p | 0x20) >= 'a' && (*r->p | 0x20) <= 'z')) { *cp = *r->p++ % 32; return 0; }
        return fail(r, "has a \\c without a letter");
    case 'x': {
        const long v = hex_n(r, 2);
        if (v < 0) return fail(r, "has a \\x without two hex digits");
        *cp = (uint32_t)v;
        return 0;
    }
    case 'u': {
        if (r->p < r->end && *r->p == '{') return fail(r, "uses \\u{...} (a Unicode-mode escape)");
        long v = hex_n(r, 4);
        if (v < 0) return fail(r, "has a \\u without four hex digits");
        if (v >= 0xD800 && v <= 0xDBFF && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
            const uint8_t *at = r->p;
            r->p += 2;
            const long lo = hex_n(r, 4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            else r->p = at;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return fail(r, "has a lone surrogate \\u escape");
        *cp = (uint32_t)v;
        return 0;
    }
    case 'k': return fail(r, "uses a named backreference \\k");
    case 'p': case 'P': return fail(r, "uses a Unicode property escape \\%c", c);
    }
    if (is_digit(c)) return fail(r, "uses a backreference \\%c", c);
    if (is_alnum(c)) return fail(r, "uses the unknown escape \\%c", c);
    *cp = (uint32_t)c;
    return 0;
}

/* [...] after its '[' */
static int parse_class(rx *r) {
    const int s = new_set(r);
    if (s < 0) return -1;
    int neg = 0;
    if (r->p < r->end && *r->p == '^') r->p++, neg = 1;
    while (r->p < r->end && *r->p != ']') {
        uint32_t a, b;
        int cls = 0, cls2 = 0;
        if (*r->p == '\\') {
            r->p++;
            if (parse_escape(r, 1, &a, &cls)) return -1;
        } else if (take_cp(r, &a)) {
            return -1;
        }
        const int range = r->end - r->p >= 2 && r->p[0] == '-' && r->p[1] != ']';
        if (cls) {
            if (range) return fail(r, "has a class escape \\%c as a range's end", cls);
            if (set_add_class(r, s, cls)) return -1;
            continue;
        }
        if (!range) {
            if (set_add(r, s, a, a)) return -1;
            continue;
        }
        r->p++;
        if (*r->p == '\\') {
            r->p++;
            if (parse_escape(r, 1, &b, &cls2)) return -1;
            if (cls2) return fail(r, "has a class escape \\%c as a range's end", cls2);
        } else if (take_cp(r, &b)) {
            return -1;
        }
        if (b < a) return fail(r, "has a class range out of order");
        if (set_add(r, s, a, b)) return -1;
    }
    if (r->p >= r->end) return fail(r, "has an unterminated character class");
    r->p++;
    cset *c = &r->sets[s];
    set_norm(c);
    if (neg) {
        /* the complement, built after the intervals it negates */
        iv *old = c->v;
        const int n = c->n;
        r->sets[s] = (cset){0};
        const int rc = set_add_list(r, s, old, n, 1);
        free(old);
        if (rc) return -1;
    }
    return node(r, X_SET, s, 0);
}

/* {m}, {m,}, {m,n} at r->p; 0 (nothing consumed) if the text there is not one */
static int parse_braces(rx *r, int *mn, int *mx) {
    const uint8_t *p = r->p + 1;
    long a = 0, b = -1;
    int nd = 0;
    for (; p < r->end && is_digit(*p); p++, nd++) a = a < 100000 ? a * 10 + (*p - '0') : a;
    if (!nd || p >= r->end) return 0;
    if (*p == ',') {
        p++;
        nd = 0;
        if (p < r->end && is_digit(*p)) b = 0;
        for (; p < r->end && is_digit(*p); p++, nd++) b = b < 100000 ? b * 10 + (*p - '0') : b;
    } else {
        b = a;
    }
    if (p >= r->end || *p != '}') return 0;
    r->p = p + 1;
    *mn = (int)a, *mx = (int)b;
    return 1;
}

static int quant_start(rx *r) {
    int a, b;
    const uint8_t *at = r->p;
    if (r->p >= r->end) return 0;
    if (*r->p == '*' || *r->p == '+' || *r->p == '?') return 1;
    const int q = *r->p == '{' && parse_braces(r, &a, &b);
    r->p = at;
    return q;
}

static int parse_alt(rx *r, int nest);

static int parse_atom(rx *r, int nest) {
    const int c = *r->p;
    uint32_t cp;
    int cls, s;
    switch (c) {
    case '(': {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            const uint8_t *q = r->p + 1;
            if (q < r->end && *q == ':') {
                r->p += 2;
            } else if (q < r->end && (*q == '=' || *q == '!')) {
                return fail(r, "uses a lookahead (?%c", *q);
            } else if (r->end - q >= 2 && *q == '<' && (q[1] == '=' || q[1] == '!')) {
                return fail(r, "uses a lookbehind (?<%c", q[1]);
            } else if (q < r->end && *q == '<') {
                const uint8_t *e = q + 1;
                while (e < r->end && (is_alnum(*e) || *e == '_' || *e == '$')) e++;
                if (e == q + 1 || e >= r->end || *e != '>') return fail(r, "has a bad group name");
                r->p = e + 1;
            } else {
                return fail(r, "has an unknown group (?");
            }
        }
        const int in = parse_alt(r, nest + 1);
        if (in < 0) return -1;
        if (r->p >= r->end || *r->p != ')') return fail(r, "has an unbalanced '('");
        r->p++;
        return in;
    }
    case '[': r->p++; return parse_class(r);
    case '.':
        r->p++;
        if ((s = new_set(r)) < 0 || set_add_list(r, s, NEWLINE, 3, 1)) return -1;
        return node(r, X_SET, s, 0);
    case '\\':
        r->p++;
        if (parse_escape(r, 0, &cp, &cls)) return -1;
        if ((s = new_set(r)) < 0) return -1;
        if (cls ? set_add_class(r, s, cls) : set_add(r, s, cp, cp)) return -1;
        return node(r, X_SET, s, 0);
    case '*': case '+': case '?': return fail(r, "has a quantifier '%c' with nothing to repeat", c);
    case '{':
        if (quant_start(r)) return fail(r, "has a quantifier '%c' with nothing to repeat", c);
        break; /* a literal '{' (Annex B), as ']' and '}' below */
    }
    if (take_cp(r, &cp) || (s = new_set(r)) < 0 || set_add(r, s, cp, cp)) return -1;
    return node(r, X_SET, s, 0);
}

static int parse_term(rx *r, int nest) {
    if (*r->p == '^' || *r->p == '$') {
        const int k = *r->p++ == '^' ? X_BOL : X_EOL;
        if (quant_start(r)) return fail(r, "has a quantifier after an assertion");
        return node(r, k, 0, 0);
    }
    const int a = parse_atom(r, nest);
    if (a < 0 || !quant_start(r)) return a;
    int mn, mx;
    const int q = *r->p;
    if (q == '{') parse_braces(r, &mn, &mx);
    else r->p++, mn = q == '+', mx = q == '?' ? 1 : -1;
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: the same strings match */
    if (mn > MAX_REPEAT || mx > MAX_REPEAT) return fail(r, "repeats more than %d times", MAX_REPEAT);
    if (mx >= 0 && mx < mn) return fail(r, "has a quantifier {%d,%d} out of order", mn, mx);
    const int n = node(r, X_REP, a, 0);
    if (n >= 0) r->x[n].min = mn, r->x[n].max = mx;
    return n;
}

static int parse_seq(rx *r, int nest) {
    int acc = -1;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        const int t = parse_term(r, nest);
        if (t < 0) return -1;
        if ((acc = acc < 0 ? t : node(r, X_CAT, acc, t)) < 0) return -1;
    }
    return acc < 0 ? node(r, X_EMPTY, 0, 0) : acc;
}

static int parse_alt(rx *r, int nest) {
    if (nest > MAX_NEST) return fail(r, "nests groups deeper than %d", MAX_NEST);
    int a = parse_seq(r, nest);
    while (a >= 0 && r->p < r->end && *r->p == '|') {
        r->p++;
        const int b = parse_seq(r, nest);
        a = b < 0 ? -1 : node(r, X_ALT, a, b);
    }
    return a;
}

/* ---- tree to NFA ---- */

static int nnew(rx *r, int kind, int set) {
    if (r->n_nfa >= MAX_NFA) return fail(r, "needs more than %d automaton states (repeat less)", MAX_NFA);
    if (grow(r, (void **)&r->nfa, &r->cap_nfa, r->n_nfa + 1, sizeof *r->nfa)) return -1;
    r->nfa[r->n_nfa] = (nst){kind, -1, -1, set};
    return r->n_nfa++;
}

static void link(rx *r, int from, int to) {
    nst *n = &r->nfa[from];
    if (n->out0 < 0) n->out0 = to;
    else n->out1 = to; /* the construction gives an epsilon state two exits at most */
}

/* the fragment of tree node x: entry *s, exit *e (an epsilon state with no exit yet) */
static int build(rx *r, int x, int *s, int *e) {
    const xnode n = r->x[x];
    int s1, e1, s2, e2;
    switch (n.kind) {
    case X_SET: case X_BOL: case X_EOL: case X_EMPTY:
        *s = nnew(r, n.kind == X_SET ? N_SET : n.kind == X_BOL ? N_BOL : n.kind == X_EOL ? N_EOL : N_EPS, n.a);
        *e = nnew(r, N_EPS, 0);
        if (*s < 0 || *e < 0) return -1;
        link(r, *s, *e);
        return 0;
    case X_CAT:
        if (build(r, n.a, &s1, &e1) || build(r, n.b, &s2, &e2)) return -1;
        link(r, e1, s2);
        *s = s1, *e = e2;
        return 0;
    case X_ALT:
        if (build(r, n.a, &s1, &e1) || build(r, n.b, &s2, &e2)) return -1;
        if ((*s = nnew(r, N_EPS, 0)) < 0 || (*e = nnew(r, N_EPS, 0)) < 0) return -1;
        link(r, *s, s1), link(r, *s, s2), link(r, e1, *e), link(r, e2, *e);
        return 0;
    }
    /* X_REP: min copies, then a loop (no bound) or max - min optional copies */
    if ((*s = nnew(r, N_EPS, 0)) < 0) return -1;
    int at = *s;
    for (int i = 0; i < n.min; i++) {
        if (build(r, n.a, &s1, &e1)) return -1;
        link(r, at, s1);
        at = e1;
    }
    if ((*e = nnew(r, N_EPS, 0)) < 0) return -1;
    if (n.max < 0) {
        const int loop = nnew(r, N_EPS, 0);
        if (loop < 0 || build(r, n.a, &s1, &e1)) return -1;
        link(r, at, loop), link(r, loop, s1), link(r, loop, *e), link(r, e1, loop);
        return 0;
    }
    for (int i = n.min; i < n.max; i++) {
        const int opt = nnew(r, N_EPS, 0);
        if (opt < 0 || build(r, n.a, &s1, &e1)) return -1;
        link(r, at, opt), link(r, opt, s1), link(r, opt, *e);
        at = e1;
    }
    link(r, at, *e);
    return 0;
}

/* ---- NFA to DFA ---- */

typedef struct sub {
    int nw;                 /* words of an NFA state set */
    uint64_t *sets;         /* [JSON_MAX_DFA][nw] the DFA states' NFA sets */
    int *hash;              /* (hcap) DFA state + 1, 0: empty */
    int hcap;
    int *stack;             /* (n_nfa) */
} sub;

/* set's epsilon closure (in place), charged to the budget: the words scanned, the states pushed
 * (a push costs more than a word's operation, ~10 ns: a pattern that pushes every alternative
 * back at every class, ^(?:A|B|...)*$, runs ~2 s before the budget stops it; charging pushes
 * 8 units refused legitimate schemas, four ".{0,1000}" strings: rv-smx6) */
static int closure(rx *r, sub *u, uint64_t *set, int bol, int eol) {
    int top = 0, pushed = 0;
    for (int w = 0; w < u->nw; w++)
        for (uint64_t m = set[w]; m; m &= m - 1) u->stack[top++] = w * 64 + __builtin_ctzll(m);
    pushed = top;
    while (top) {
        const nst *n = &r->nfa[u->stack[--top]];
        if (n->kind == N_SET || (n->kind == N_BOL && !bol) || (n->kind == N_EOL && !eol)) continue;
        const int out[2] = {n->out0, n->out1};
        for (int k = 0; k < 2; k++)
            if (out[k] >= 0 && !(set[out[k] >> 6] >> (out[k] & 63) & 1)) {
                set[out[k] >> 6] |= 1ull << (out[k] & 63);
                u->stack[top++] = out[k];
                pushed++;
            }
    }
    return spend(r, u->nw + (int64_t)pushed, 0);
}

static uint64_t hash_set(const uint64_t *s, int nw) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < nw; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h ^ h >> 29;
}

/* the DFA state of NFA set `set` (added if new; never the start state, which the
 * start-of-input assertions make apart); -1 past the bound */
static int dfa_state(rx *r, sub *u, json_dfa *d, const uint64_t *set) {
    int h = (int)(hash_set(set, u->nw) & (uint64_t)(u->hcap - 1));
    for (; u->hash[h]; h = (h + 1) & (u->hcap - 1)) {
        const int k = u->hash[h] - 1;
        if (!memcmp(u->sets + (size_t)k * (size_t)u->nw, set, (size_t)u->nw * 8)) return k;
    }
    if (d->n_states >= JSON_MAX_DFA)
        return fail(r, "needs more than %d automaton states (a simpler pattern, or anchor it)", JSON_MAX_DFA);
    const int k = d->n_states++;
    memcpy(u->sets + (size_t)k * (size_t)u->nw, set, (size_t)u->nw * 8);
    u->hash[h] = k + 1;
    return k;
}

static int class_of_bound(const uint32_t *lo, int n, uint32_t cp) {
    int a = 0, b = n - 1; /* the last class starting at or below cp */
    while (a < b) {
        const int m = (a + b + 1) / 2;
        if (lo[m] <= cp) a = m;
        else b = m - 1;
    }
    return a;
}

int json_dfa_class(const json_dfa *d, uint32_t cp) {
    return cp < 128 ? d->ascii[cp] : class_of_bound(d->lo, d->n_classes, cp);
}

static int by_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* the classes: every interval end of every set splits [0, CP_MAX] */
static int make_classes(rx *r, json_dfa *d, uint32_t *bound, int nb) {
    bound[nb++] = 0;
    qsort(bound, (size_t)nb, sizeof *bound, by_u32);
    int k = 0;
    for (int i = 0; i < nb; i++)
        if (!k || bound[i] != bound[k - 1]) bound[k++] = bound[i];
    if (k > MAX_CLASSES) return fail(r, "splits characters into more than %d classes", MAX_CLASSES);
    d->n_classes = k;
    d->lo = malloc((size_t)k * sizeof *d->lo);
    if (!d->lo) return fail(r, "out of memory");
    memcpy(d->lo, bound, (size_t)k * sizeof *d->lo);
    for (uint32_t c = 0; c < 128; c++) d->ascii[c] = (uint16_t)class_of_bound(d->lo, k, c);
    return 0;
}

static int64_t dfa_bytes(const json_dfa *d, int states) {
    return (int64_t)states * ((int64_t)d->n_classes * (int64_t)sizeof *d->next + 1) + (int64_t)d->n_classes * 4;
}

/* room for `states` states (charged to the budget: dfa_shrink refunds what goes unused) */
static int alloc_dfa(rx *r, json_dfa *d, int states) {
    if (spend(r, 0, dfa_bytes(d, states))) return -1;
    d->next = malloc((size_t)states * (size_t)d->n_classes * sizeof *d->next);
    d->accept = calloc((size_t)states, 1);
    return d->next && d->accept ? 0 : fail(r, "out of memory");
}

/* the tables cut to the states made (kept for the schema's life: 8 MB at the class bound) */
static void dfa_shrink(rx *r, json_dfa *d) {
    r->bud->bytes += dfa_bytes(d, JSON_MAX_DFA) - dfa_bytes(d, d->n_states);
    int16_t *n = realloc(d->next, (size_t)(d->n_states ? d->n_states : 1) * (size_t)d->n_classes * sizeof *n);
    if (n) d->next = n;
}

/* The NFA states from which `final` can still be reached past the input's start: '^' no
 * longer passes there and '$' only where no character follows it (in the closure of the end).
 * A DFA state past the start keeps only these: the others (e.g. the unanchored prefix's
 * ".*" once '^' is behind it) accept nothing whatever follows, so dropping them leaves the
 * language as it is and a set that holds nothing else dead (-1, no trap state), and a state
 * no longer pays for the classes only they move on. live: [nw] bits; -1 out of memory. */
static int live_states(rx *r, int final, uint64_t *live) {
    const int n = r->n_nfa;
    int *first = calloc((size_t)n + 1, sizeof *first), *from = malloc((size_t)(2 * n + 1) * sizeof *from);
    int *queue = malloc((size_t)(n ? n : 1) * sizeof *queue);
    if (!first || !from || !queue) {
        free(first), free(from), free(queue);
        return fail(r, "out of memory");
    }
    /* the edges by their head (counting sort): an N_SET's one, an epsilon kind's two */
    for (int x = 0; x < n; x++)
        for (int k = 0; k < 2; k++) {
            const int to = k ? r->nfa[x].out1 : r->nfa[x].out0;
            if (to >= 0) first[to + 1]++;
        }
    for (int x = 0; x < n; x++) first[x + 1] += first[x];
    int *at = queue; /* the fill cursor per head, then the queue */
    memcpy(at, first, (size_t)n * sizeof *at);
    for (int x = 0; x < n; x++)
        for (int k = 0; k < 2; k++) {
            const int to = k ? r->nfa[x].out1 : r->nfa[x].out0;
            if (to >= 0) from[at[to]++] = x;
        }
    /* pass 0: the end's closure backwards (epsilon and '$'); pass 1: from it backwards over
     * epsilon and characters */
    int head = 0, tail = 0;
    memset(live, 0, (size_t)((n + 63) / 64) * 8);
    live[final >> 6] |= 1ull << (final & 63);
    queue[tail++] = final;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) head = 0; /* every state found so far goes on backwards over characters too */
        while (head < tail) {
            const int y = queue[head++];
            for (int e = first[y]; e < first[y + 1]; e++) {
                const int x = from[e], kind = r->nfa[x].kind;
                if (kind == N_BOL || kind == (pass ? N_EOL : N_SET) || live[x >> 6] >> (x & 63) & 1) continue;
                live[x >> 6] |= 1ull << (x & 63);
                queue[tail++] = x;
            }
        }
    }
    free(first), free(from), free(queue);
    return spend(r, 4 * (int64_t)n, 0);
}

static int subset(rx *r, int start, int final, json_dfa *d) {
    uint32_t *bound = NULL;
    int nb = 0;
    for (int i = 0; i < r->n_sets; i++) nb += 2 * r->sets[i].n;
    if (!(bound = malloc((size_t)(nb + 1) * sizeof *bound))) return fail(r, "out of memory");
    nb = 0;
    for (int i = 0; i < r->n_sets; i++) {
        set_norm(&r->sets[i]);
        for (int k = 0; k < r->sets[i].n; k++) {
            bound[nb++] = r->sets[i].v[k].lo;
            if (r->sets[i].v[k].hi < CP_MAX) bound[nb++] = r->sets[i].v[k].hi + 1;
        }
    }
    const int rc = make_classes(r, d, bound, nb);
    free(bound);
    if (rc) return -1;
    const int C = d->n_classes, cw = (C + 63) / 64;
    sub u = {.nw = (r->n_nfa + 63) / 64, .hcap = 2 * JSON_MAX_DFA};
    uint64_t *member = calloc((size_t)r->n_sets * (size_t)cw, 8);   /* [n_sets][cw] classes in each set */
    uint64_t *tgt = calloc((size_t)C * (size_t)u.nw, 8);             /* [C][nw] a state's moves */
    uint64_t *touched = malloc((size_t)cw * 8);                      /* [cw] the classes it moves on */
    uint64_t *acc = malloc((size_t)u.nw * 8), *live = malloc((size_t)u.nw * 8);
    u.sets = malloc((size_t)JSON_MAX_DFA * (size_t)u.nw * 8);
    u.hash = calloc((size_t)u.hcap, sizeof *u.hash);
    u.stack = malloc((size_t)r->n_nfa * sizeof *u.stack);
    int ok = member && tgt && touched && acc && live && u.sets && u.hash && u.stack ? 1 : fail(r, "out of memory") + 1;
    if (ok && (alloc_dfa(r, d, JSON_MAX_DFA) || live_states(r, final, live))) ok = 0;
    for (int i = 0; ok && i < r->n_sets; i++)
        for (int k = 0, j = 0; k < C; k++) {
            const cset *s = &r->sets[i];
            while (j < s->n && s->v[j].hi < d->lo[k]) j++;
            if (j < s->n && s->v[j].lo <= d->lo[k]) member[(size_t)i * (size_t)cw + (size_t)(k >> 6)] |= 1ull << (k & 63);
        }
    if (ok) {
        /* the start state: input start, so ^ may pass; apart from every other state */
        d->n_states = 1;
        memset(u.sets, 0, (size_t)u.nw * 8);
        u.sets[start >> 6] |= 1ull << (start & 63);
        if (closure(r, &u, u.sets, 1, 0)) ok = 0;
    }
    for (int q = 0; ok && q < d->n_states; q++) {
        const uint64_t *S = u.sets + (size_t)q * (size_t)u.nw;
        memcpy(acc, S, (size_t)u.nw * 8);
        /* the moves: only the classes some member moves on are touched (a row of tgt each,
         * zero again once used), the others have no transition */
        if (closure(r, &u, acc, q == 0, 1) || spend(r, (int64_t)C / 4 + cw, 0)) {
            ok = 0;
            break;
        }
        d->accept[q] = (uint8_t)(acc[final >> 6] >> (final & 63) & 1);
        memset(touched, 0, (size_t)cw * 8);
        for (int k = 0; k < C; k++) d->next[(size_t)q * (size_t)C + (size_t)k] = -1;
        for (int w = 0; w < u.nw && ok; w++)
            for (uint64_t bits = S[w]; bits && ok; bits &= bits - 1) {
                const int i = w * 64 + __builtin_ctzll(bits);
                if (r->nfa[i].kind != N_SET) continue;
                const uint64_t *m = member + (size_t)r->nfa[i].set * (size_t)cw;
                const int to = r->nfa[i].out0;
                int64_t moved = 0;
                for (int cwi = 0; cwi < cw; cwi++) {
                    touched[cwi] |= m[cwi];
                    for (uint64_t mk = m[cwi]; mk; mk &= mk - 1, moved++) {
                        const int k = cwi * 64 + __builtin_ctzll(mk);
                        tgt[(size_t)k * (size_t)u.nw + (size_t)(to >> 6)] |= 1ull << (to & 63);
                    }
                }
                if (spend(r, cw + moved, 0)) ok = 0;
            }
        for (int cwi = 0; cwi < cw && ok; cwi++)
            for (uint64_t mk = touched[cwi]; mk && ok; mk &= mk - 1) {
                const int k = cwi * 64 + __builtin_ctzll(mk);
                uint64_t *T = tgt + (size_t)k * (size_t)u.nw;
                int t = -1;
                if (closure(r, &u, T, 0, 0) || spend(r, 2 * (int64_t)u.nw, 0)) ok = 0;
                int any = 0;
                for (int w = 0; ok && w < u.nw; w++) any |= (T[w] &= live[w]) != 0;
                if (ok && any && (t = dfa_state(r, &u, d, T)) < 0) ok = 0;
                d->next[(size_t)q * (size_t)C + (size_t)k] = (int16_t)t;
                memset(T, 0, (size_t)u.nw * 8);
            }
    }
    free(member), free(tgt), free(touched), free(acc), free(live), free(u.sets), free(u.hash), free(u.stack);
    if (ok) dfa_shrink(r, d);
    return ok ? 0 : -1;
}

void json_dfa_free(json_dfa *d) {
    free(d->lo);
    free(d->next);
    free(d->accept);
    memset(d, 0, sizeof *d);
}

int json_regex_compile(const char *pattern, size_t len, json_dfa *out, json_budget *b, char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    json_budget fresh = {JSON_BUDGET_WORK, JSON_BUDGET_BYTES};
    rx r = {.p = (const uint8_t *)pattern, .end = (const uint8_t *)pattern + len, .bud = b ? b : &fresh,
            .why = why, .why_len = why_len};
    int root = parse_alt(&r, 0);
    if (root >= 0 && r.p < r.end) root = fail(&r, "has an unbalanced ')'");
    /* unanchored: .*(?:P).* with any code point */
    int any = root < 0 ? -1 : new_set(&r);
    if (any >= 0 && set_add(&r, any, 0, CP_MAX)) any = -1;
    const int a = any < 0 ? -1 : node(&r, X_SET, any, 0);
    const int star = a < 0 ? -1 : node(&r, X_REP, a, 0);
    if (star >= 0) r.x[star].max = -1;
    const int whole = star < 0 ? -1 : node(&r, X_CAT, star, root);
    const int all = whole < 0 ? -1 : node(&r, X_CAT, whole, star);
    int s, e, rc = all < 0 || build(&r, all, &s, &e) || subset(&r, s, e, out) ? -1 : 0;
    for (int i = 0; i < r.n_sets; i++) free(r.sets[i].v);
    free(r.sets), free(r.x), free(r.nfa);
    if (rc) json_dfa_free(out);
    return rc;
}

/* The strings of code points that do not hold w (UTF-8, at most 32 code points): the
 * matcher of w's prefixes (state q: the longest prefix of w the string ends with; w
 * whole: dead), every state accepting. */
int json_dfa_without(const char *w, size_t len, json_dfa *out, json_budget *b, char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    json_budget fresh = {JSON_BUDGET_WORK, JSON_BUDGET_BYTES};
    rx r = {.bud = b ? b : &fresh, .why = why, .why_len = why_len};
    uint32_t cp[32], bound[64];
    int L = 0;
    for (size_t i = 0; i < len; L++) {
        const uint8_t c = (uint8_t)w[i];
        const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (L == 32 || i + (size_t)n > len) return fail(&r, "is too long a string to leave out");
        uint32_t v = n == 1 ? c : c & (0x7Fu >> n);
        for (int k = 1; k < n; k++) v = v << 6 | ((uint8_t)w[i + (size_t)k] & 0x3Fu);
        cp[L] = v, i += (size_t)n;
    }
    if (!L) return fail(&r, "is an empty string to leave out");
    int nb = 0;
    for (int i = 0; i < L; i++) {
        bound[nb++] = cp[i];
        if (cp[i] < CP_MAX) bound[nb++] = cp[i] + 1;
    }
    if (make_classes(&r, out, bound, nb) || alloc_dfa(&r, out, L)) {
        json_dfa_free(out);
        return -1;
    }
    out->n_states = L;
    for (int q = 0; q < L; q++) {
        out->accept[q] = 1;
        for (int k = 0; k < out->n_classes; k++) {
            /* the longest prefix of w that w[0..q) + c ends with (c: the class's first code point) */
            const uint32_t c = out->lo[k];
            int t = q + 1;
            for (; t > 0; t--) {
                int m = cp[t - 1] == c;
                for (int i = 0; m && i < t - 1; i++) m = cp[i] == cp[q - (t - 1) + i];
                if (m) break;
            }
            out->next[(size_t)q * (size_t)out->n_classes + (size_t)k] = (int16_t)(t == L ? -1 : t);
        }
    }
    return 0;
}

/* both DFAs at once: the strings both accept (pattern and format together) */
int json_dfa_copy(const json_dfa *d, json_dfa *out, json_budget *b, char *why, size_t why_len) {
    json_budget fresh = {JSON_BUDGET_WORK, JSON_BUDGET_BYTES};
    rx r = {.bud = b ? b : &fresh, .why = why, .why_len = why_len};
    *out = *d;
    out->lo = NULL, out->next = NULL, out->accept = NULL;
    const int64_t bytes = dfa_bytes(d, d->n_states);
    if (spend(&r, bytes / 8, bytes)) return -1;
    out->lo = malloc((size_t)d->n_classes * sizeof *out->lo);
    out->next = malloc((size_t)d->n_states * (size_t)d->n_classes * sizeof *out->next);
    out->accept = malloc((size_t)d->n_states);
    if (!out->lo || !out->next || !out->accept) {
        json_dfa_free(out);
        return fail(&r, "out of memory");
    }
    memcpy(out->lo, d->lo, (size_t)d->n_classes * sizeof *out->lo);
    memcpy(out->next, d->next, (size_t)d->n_states * (size_t)d->n_classes * sizeof *out->next);
    memcpy(out->accept, d->accept, (size_t)d->n_states);
    return 0;
}

int json_dfa_intersect(const json_dfa *a, const json_dfa *b, json_dfa *out, json_budget *bud, char *why,
                       size_t why_len) {
    memset(out, 0, sizeof *out);
    json_budget fresh = {JSON_BUDGET_WORK, JSON_BUDGET_BYTES};
    rx r = {.bud = bud ? bud : &fresh, .why = why, .why_len = why_len};
    uint32_t *bound = malloc((size_t)(a->n_classes + b->n_classes + 1) * sizeof *bound);
    int *pair = malloc((size_t)a->n_states * (size_t)b->n_states * sizeof *pair); /* [na][nb] state + 1 */
    int *qa = malloc(JSON_MAX_DFA * sizeof *qa), *qb = malloc(JSON_MAX_DFA * sizeof *qb);
    int rc = bound && pair && qa && qb ? 0 : fail(&r, "out of memory");
    if (!rc) {
        memcpy(bound, a->lo, (size_t)a->n_classes * sizeof *bound);
        memcpy(bound + a->n_classes, b->lo, (size_t)b->n_classes * sizeof *bound);
        rc = make_classes(&r, out, bound, a->n_classes + b->n_classes);
    }
    if (!rc && (spend(&r, (int64_t)a->n_states * b->n_states / 2, 0) || alloc_dfa(&r, out, JSON_MAX_DFA))) rc = -1;
    if (!rc) {
        memset(pair, 0, (size_t)a->n_states * (size_t)b->n_states * sizeof *pair);
        pair[0] = 1, qa[0] = qb[0] = 0, out->n_states = 1;
    }
    const int C = out->n_classes;
    for (int q = 0; !rc && q < out->n_states; q++) {
        out->accept[q] = a->accept[qa[q]] && b->accept[qb[q]];
        if (spend(&r, 4 * C, 0)) {
            rc = -1;
            break;
        }
        for (int k = 0; k < C && !rc; k++) {
            const int ta = a->next[(size_t)qa[q] * (size_t)a->n_classes + (size_t)json_dfa_class(a, out->lo[k])];
            const int tb = b->next[(size_t)qb[q] * (size_t)b->n_classes + (size_t)json_dfa_class(b, out->lo[k])];
            int t = -1;
            if (ta >= 0 && tb >= 0) {
                int *p = &pair[(size_t)ta * (size_t)b->n_states + (size_t)tb];
                if (!*p) {
                    if (out->n_states >= JSON_MAX_DFA) {
                        rc = fail(&r, "needs more than %d automaton states with the format", JSON_MAX_DFA);
                        break;
                    }
                    qa[out->n_states] = ta, qb[out->n_states] = tb;
                    *p = ++out->n_states;
                }
                t = *p - 1;
            }
            out->next[(size_t)q * (size_t)C + (size_t)k] = (int16_t)t;
        }
    }
    free(bound), free(pair), free(qa), free(qb);
    if (!rc) dfa_shrink(&r, out);
    if (rc) json_dfa_free(out);
    return rc;
}

/* the UTF-8 lead byte of code point cp >= 0x80 */
static int lead_byte(uint32_t cp) { return cp < 0x800 ? 0xC0 | (int)(cp >> 6) : cp < 0x10000 ? 0xE0 | (int)(cp >> 12) : 0xF0 | (int)(cp >> 18); }

/* json_strc.acc (json.h): per state, the bytes that can begin a code point there, to a
 * state that can still close the string at some count (live: its row of ok has a bit; the
 * DFA's other states, such as a trap state, strc_ok refuses at every count). One pass over
 * each state's classes: a class's ASCII characters, and the lead bytes of its other code
 * points (from its first one's to its last one's: the lead byte grows with the code point;
 * ED for a class that starts inside the surrogates, a superset) */
static void byte_sets(const json_dfa *d, const uint8_t *live, uint64_t *acc) {
    const int C = d->n_classes;
    for (int q = 0; q < d->n_states; q++) {
        uint64_t *a = acc + (size_t)q * 4;
        const int16_t *nx = d->next + (size_t)q * (size_t)C;
        for (int k = 0; k < C; k++) {
            if (nx[k] < 0 || !live[nx[k]]) continue;
            const uint32_t lo = d->lo[k], hi = k + 1 < C ? d->lo[k + 1] - 1 : CP_MAX;
            if (lo >= 0xD800 && hi <= 0xDFFF) continue; /* surrogates only: never read */
            for (uint32_t c = lo < 0x20 ? 0x20 : lo; c <= hi && c < 0x80; c++)
                if (c != '"' && c != '\\') a[c >> 6] |= 1ull << (c & 63);
            if (hi < 0x80) continue;
            for (int c = lead_byte(lo < 0x80 ? 0x80 : lo), e = lead_byte(hi); c <= e; c++) a[c >> 6] |= 1ull << (c & 63);
        }
    }
}

/* json_strc.ok: from the last count down (see json.h); json_strc.acc after it */
int json_strc_lengths(json_strc *sc, json_budget *b, char *why, size_t why_len) {
    sc->cap = sc->max >= 0 ? sc->max : sc->min;
    sc->flat = sc->max >= 0 ? sc->max : 0;
    sc->acc = NULL;
    const json_dfa *d = &sc->dfa;
    if (!d->n_states) return 0; /* any characters: every count up to max can still close */
    json_budget fresh = {JSON_BUDGET_WORK, JSON_BUDGET_BYTES};
    rx r = {.bud = b ? b : &fresh, .why = why, .why_len = why_len};
    const size_t row = (size_t)sc->cap + 1, nbits = (size_t)d->n_states * row;
    const int Q = d->n_states, C = d->n_classes;
    int *first = malloc(((size_t)Q + 1) * sizeof *first), *succ = malloc((size_t)Q * (size_t)C * sizeof *succ);
    int *mark = malloc((size_t)Q * sizeof *mark);
    if (!first || !succ || !mark) {
        free(first), free(succ), free(mark);
        return fail(&r, "out of memory");
    }
    /* each state's distinct successors, over the classes a string can hold: a class of
     * surrogates only is never read (UTF-8 has none, and a \u escape of one never starts),
     * so a pattern that needs one leaves no string (refused, not an empty mask) */
    int E = 0;
    for (int q = 0; q < Q; q++) mark[q] = -1;
    for (int q = 0; q < Q; q++) {
        first[q] = E;
        for (int k = 0; k < C; k++) {
            if (d->lo[k] >= 0xD800 && (k + 1 < C ? d->lo[k + 1] - 1 : CP_MAX) <= 0xDFFF) continue;
            const int t = d->next[(size_t)q * (size_t)C + (size_t)k];
            if (t >= 0 && mark[t] != q) mark[t] = q, succ[E++] = t;
        }
    }
    first[Q] = E;
    free(mark);
    if (nbits > (1u << 24) || row * ((size_t)E + (size_t)Q) > (1u << 27)) {
        free(first), free(succ);
        return fail(&r, "with a length bound of %d needs too large a table (a smaller maxLength/minLength)", sc->cap);
    }
    /* the fill below: every count through every edge (and the flat scan), the byte sets
     * (one more pass over each state's classes); the table and the sets are kept */
    const size_t words = (nbits + 63) / 64;
    if (spend(&r, (int64_t)Q * (2 * C + 96) + (int64_t)row * ((int64_t)E + 2 * Q),
              (int64_t)(words + (size_t)Q * 4) * 8)) {
        free(first), free(succ);
        return -1;
    }
    uint64_t *ok = calloc(words + (size_t)Q * 4, 8);
    if (!ok) {
        free(first), free(succ);
        return fail(&r, "out of memory");
    }
#define OK_AT(q, n) (ok[((size_t)(q) * row + (size_t)(n)) >> 6] >> (((size_t)(q) * row + (size_t)(n)) & 63) & 1)
#define OK_SET(q, n) (ok[((size_t)(q) * row + (size_t)(n)) >> 6] |= 1ull << (((size_t)(q) * row + (size_t)(n)) & 63))
    const size_t cap = (size_t)sc->cap;
    for (int q = 0; q < Q; q++)
        if (d->accept[q]) OK_SET(q, cap);
    /* without maxLength the last count is "min or more": acceptance reachable at all */
    for (int changed = sc->max < 0; changed;) {
        changed = 0;
        for (int q = Q - 1; q >= 0; q--)
            for (int e = first[q]; e < first[q + 1] && !OK_AT(q, cap); e++)
                if (OK_AT(succ[e], cap)) OK_SET(q, cap), changed = 1;
    }
    for (size_t n = cap; n-- > 0;)
        for (int q = 0; q < Q; q++) {
            int y = d->accept[q] && n >= (size_t)sc->min;
            for (int e = first[q]; e < first[q + 1] && !y; e++) y = (int)OK_AT(succ[e], n + 1);
            if (y) OK_SET(q, n);
        }
    /* json_strc.flat: the run of equal columns at the saturated end (no max) or from 0 */
    const size_t ref = sc->max < 0 ? cap : 0;
    size_t f = ref;
    for (int same = 1; same && (sc->max < 0 ? f > 0 : f < cap);) {
        const size_t n = sc->max < 0 ? f - 1 : f + 1;
        for (int q = 0; q < Q && same; q++) same = OK_AT(q, n) == OK_AT(q, ref);
        if (same) f = n;
    }
    sc->flat = (int)f;
    /* the live states, in first's memory (no longer needed) */
    uint8_t *live = (uint8_t *)first;
    for (int q = 0; q < Q; q++) {
        live[q] = 0;
        for (size_t n = 0; n <= cap && !live[q]; n++) live[q] = (uint8_t)OK_AT(q, n);
    }
    byte_sets(d, live, ok + words);
    free(first), free(succ);
#undef OK_AT
#undef OK_SET
    sc->ok = ok, sc->acc = ok + words;
    return 0;
}
