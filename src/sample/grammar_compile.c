/* grammar_compile.c — the GBNF compiler (grammar.h): rules compiled to flat alternatives of
 * character-class and rule-reference elements (groups and repetitions become rules of their
 * own), checked for left recursion and trimmed of what can never complete. The matcher that
 * runs the result is grammar.c. */
#include "sample/grammar_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gr_free(gr_grammar *g) {
    if (!g) return;
    free(g->e);
    free(g->alt);
    free(g->alt0);
    free(g->nalt);
    free(g->rng);
    free(g->cls);
    free(g->pchain);
    free(g->plevel);
    free(g->cbase);
    free(g->cb0);
    free(g);
}

/* ==== the compiler ==== */

enum { R_NAMED = 0, R_GROUP, R_REPEAT };

typedef struct brule {
    const char *name;       /* R_NAMED: in the text */
    int name_len, kind, owner; /* owner: the named rule it was written in */
    int defined;
    size_t off;             /* where it was defined (named), written (group, repetition) or
                             * first used (an undefined name) */
    gelem *e;               /* the body: alternatives separated by E_ALT */
    int n, cap;
} brule;

/* a counted repetition's chain (grammar_impl.h): C_COPIES, the n copies written out in rule
 * from element `from` on (the last is level 1); C_OPTIONAL, the rules first .. first + n - 1
 * (O1 .. On); e, the element repeated */
enum { C_COPIES = 0, C_OPTIONAL };
typedef struct bchain { int kind, rule, from, n; gelem e; } bchain;

typedef struct gb {
    const char *t;
    size_t n, i;
    brule *r;
    int nr, capr;
    uint32_t *rng;
    int nrng, caprng;
    gclass *cls;
    int ncls, capcls;
    int total;              /* elements so far */
    int any;                /* the class of '.', -1 none yet */
    int32_t *names;         /* (NAMES) the named rules by their name's hash, -1 empty */
    bchain *ch;
    int nch, capch;
    char *why;
    size_t wl;
    int failed;
} gb;

static int grow(void *pp, int *cap, int need, size_t size) {
    void **p = pp;
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return -1;
    *p = q, *cap = c;
    return 0;
}

/* the message, with the line and column (characters, from 1) of text offset off */
static int fail(gb *b, size_t off, const char *fmt, ...) {
    if (b->failed) return -1;
    b->failed = 1;
    int line = 1, col = 1;
    for (size_t k = 0; k < off && k < b->n; k++) {
        if (b->t[k] == '\n') line++, col = 1;
        else if (((uint8_t)b->t[k] & 0xC0) != 0x80) col++;
    }
    const int k = snprintf(b->why, b->wl, "at line %d, column %d: ", line, col);
    va_list ap;
    va_start(ap, fmt);
    if (k > 0 && (size_t)k < b->wl) vsnprintf(b->why + k, b->wl - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static int oom(gb *b) {
    if (!b->failed) snprintf(b->why, b->wl, "out of memory");
    b->failed = 1;
    return -1;
}

static int new_rule(gb *b, const char *name, int len, int kind, int owner, size_t off) {
    if (b->nr >= GR_MAX_RULES)
        return fail(b, off, "more than %d rules (the groups and repetitions count as rules)", GR_MAX_RULES);
    if (grow(&b->r, &b->capr, b->nr + 1, sizeof *b->r)) return oom(b);
    b->r[b->nr] = (brule){name, len, kind, owner < 0 ? b->nr : owner, 0, off, NULL, 0, 0};
    return b->nr++;
}

static int add(gb *b, int rule, int type, int a) {
    if (type != E_ALT && ++b->total > GR_MAX_ELEMS)
        return fail(b, b->i, "more than %d elements once repetitions are expanded", GR_MAX_ELEMS);
    brule *r = &b->r[rule];
    if (grow(&r->e, &r->cap, r->n + 1, sizeof *r->e)) return oom(b);
    r->e[r->n++] = (gelem){type, a};
    return 0;
}

static int word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* spaces, newlines and comments */
static void skip_ws(gb *b) {
    while (b->i < b->n) {
        const char c = b->t[b->i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') b->i++;
        else if (c == '#')
            while (b->i < b->n && b->t[b->i] != '\n') b->i++;
        else break;
    }
}

/* a rule's definition begins at b->i: a name, blanks, "::=" */
static int at_rule_start(const gb *b) {
    size_t k = b->i;
    while (k < b->n && word_char(b->t[k])) k++;
    if (k == b->i) return 0;
    while (k < b->n && (b->t[k] == ' ' || b->t[k] == '\t')) k++;
    return b->n - k >= 3 && !memcmp(b->t + k, "::=", 3);
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* one character of a literal or class at b->i (an escape, or UTF-8) into *cp */
static int read_char(gb *b, uint32_t *cp) {
    const size_t at = b->i;
    const uint8_t c = (uint8_t)b->t[b->i];
    if (c == '\\') {
        if (b->i + 1 >= b->n) return fail(b, at, "a backslash at the end of the text");
        const char e = b->t[b->i + 1];
        b->i += 2;
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (!digits) {
            static const char from[] = "nrt\\\"'[]-^", to[] = "\n\r\t\\\"'[]-^";
            const char *f = memchr(from, e, sizeof from - 1);
            if (!f) return fail(b, at, "bad escape '\\%c' (the escapes: \\n \\r \\t \\\\ \\\" \\' \\[ \\] \\- \\^ \\xHH \\uHHHH \\UHHHHHHHH)", e);
            *cp = (uint8_t)to[f - from];
            return 0;
        }
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            const int h = b->i < b->n ? hexval(b->t[b->i]) : -1;
            if (h < 0) return fail(b, at, "bad escape: '\\%c' takes %d hex digits", e, digits);
            v = v << 4 | (uint32_t)h, b->i++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return fail(b, at, "bad escape: U+%X is not a character", (unsigned)v);
        *cp = v;
        return 0;
    }
    /* UTF-8, well-formed (no overlong form, surrogate, or code point past U+10FFFF) */
    const int len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1Fu : len == 3 ? c & 0x0Fu : c & 0x07u;
    for (int k = 1; len && k < len; k++) {
        const uint8_t d = b->i + (size_t)k < b->n ? (uint8_t)b->t[b->i + (size_t)k] : 0;
        if ((d & 0xC0) != 0x80) { v = 0xFFFFFFFFu; break; }
        v = v << 6 | (d & 0x3Fu);
    }
    if (!len || v == 0xFFFFFFFFu || (len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) ||
        (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
        return fail(b, at, "the text is not well-formed UTF-8");
    b->i += (size_t)len;
    *cp = v;
    return 0;
}

static int by_lo(const void *x, const void *y) {
    const uint32_t *a = x, *c = y;
    return (a[0] > c[0]) - (a[0] < c[0]);
}

/* a class of the ranges r[0 .. n) ([lo, hi] pairs, any order), complemented when neg */
static int add_class(gb *b, uint32_t *r, int n, int neg, size_t at) {
    qsort(r, (size_t)n, 2 * sizeof *r, by_lo);
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (m && r[2 * k] <= r[2 * m - 1] + 1) {
            if (r[2 * k + 1] > r[2 * m - 1]) r[2 * m - 1] = r[2 * k + 1];
        } else {
            r[2 * m] = r[2 * k], r[2 * m + 1] = r[2 * k + 1], m++;
        }
    }
    if (grow(&b->rng, &b->caprng, b->nrng + m + 1, 2 * sizeof *b->rng) || grow(&b->cls, &b->capcls, b->ncls + 1, sizeof *b->cls))
        return oom(b);
    gclass *c = &b->cls[b->ncls];
    *c = (gclass){b->nrng, 0, {0, 0}};
    uint32_t *o = b->rng + 2 * (size_t)b->nrng;
    if (!neg) {
        memcpy(o, r, (size_t)m * 2 * sizeof *r);
        c->nr = m;
    } else {
        uint32_t lo = 0;
        for (int k = 0; k < m; k++) {
            if (r[2 * k] > lo) o[2 * c->nr] = lo, o[2 * c->nr + 1] = r[2 * k] - 1, c->nr++;
            lo = r[2 * k + 1] + 1;
        }
        if (lo <= 0x10FFFF) o[2 * c->nr] = lo, o[2 * c->nr + 1] = 0x10FFFF, c->nr++;
    }
    if (!c->nr) return fail(b, at, "a character class that matches no character");
    for (int k = 0; k < c->nr; k++)
        for (uint32_t x = o[2 * k]; x <= o[2 * k + 1] && x < 128; x++) c->ascii[x >> 6] |= 1ull << (x & 63);
    b->nrng += c->nr;
    return b->ncls++;
}

static int one_char(gb *b, uint32_t cp, size_t at) {
    uint32_t r[2] = {cp, cp};
    return add_class(b, r, 1, 0, at);
}

/* [...] at b->i */
static int read_class(gb *b) {
    const size_t at = b->i++;
    const int neg = b->i < b->n && b->t[b->i] == '^';
    b->i += (size_t)neg;
    uint32_t *r = NULL;
    int n = 0, cap = 0;
    for (;;) {
        if (b->i >= b->n) { free(r); return fail(b, at, "an unclosed '[' (a character class)"); }
        if (b->t[b->i] == ']') break;
        uint32_t lo, hi;
        if (read_char(b, &lo)) { free(r); return -1; }
        hi = lo;
        if (b->i + 1 < b->n && b->t[b->i] == '-' && b->t[b->i + 1] != ']') {
            const size_t ra = b->i - 1;
            b->i++;
            if (read_char(b, &hi)) { free(r); return -1; }
            if (hi < lo) { free(r); return fail(b, ra, "a reversed range in a character class (U+%X-U+%X)", (unsigned)lo, (unsigned)hi); }
        }
        if (grow(&r, &cap, n + 1, 2 * sizeof *r)) { free(r); return oom(b); }
        r[2 * n] = lo, r[2 * n + 1] = hi, n++;
    }
    b->i++;
    if (!n) return fail(b, at, "an empty character class '[]'");
    const int k = add_class(b, r, n, neg, at);
    free(r);
    return k;
}

#define NAMES (2 * GR_MAX_RULES) /* a power of two past the rules: never full */

static int lookup(gb *b, const char *name, int len, size_t off) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < len; k++) h = (h ^ (uint8_t)name[k]) * 0x100000001b3ull;
    size_t at = (size_t)(h ^ h >> 29) & (NAMES - 1);
    for (; b->names[at] >= 0; at = (at + 1) & (NAMES - 1)) {
        const brule *x = &b->r[b->names[at]];
        if (x->name_len == len && !memcmp(x->name, name, (size_t)len)) return b->names[at];
    }
    const int k = new_rule(b, name, len, R_NAMED, -1, off);
    if (k >= 0) b->names[at] = k;
    return k;
}

static int parse_alts(gb *b, int rule, int nest);

static int add_chain(gb *b, int kind, int rule, int from, int n, gelem e) {
    if (n < 2) return 0; /* level 1 is never clamped */
    if (grow(&b->ch, &b->capch, b->nch + 1, sizeof *b->ch)) return oom(b);
    b->ch[b->nch++] = (bchain){kind, rule, from, n, e};
    return 0;
}

/* rule X ::= e X | (empty): what e* becomes */
static int star_rule(gb *b, int rule, gelem e, size_t at) {
    const int s = new_rule(b, NULL, 0, R_REPEAT, b->r[rule].owner, at);
    if (s < 0 || add(b, s, e.type, e.a) || add(b, s, E_REF, s) || add(b, s, E_ALT, 0)) return -1;
    return s;
}

/* {m,n} at b->i: *m, *n (-1: no upper bound) */
static int read_bounds(gb *b, int *m, int *n) {
    const size_t at = b->i++;
    long v[2] = {-1, -1};
    int k = 0, comma = 0;
    for (;;) {
        while (b->i < b->n && (b->t[b->i] == ' ' || b->t[b->i] == '\t')) b->i++;
        if (b->i >= b->n) return fail(b, at, "an unclosed '{' (a repetition)");
        const char c = b->t[b->i];
        if (c >= '0' && c <= '9') {
            if (v[k] < 0) v[k] = 0;
            if (v[k] <= 100000000) v[k] = v[k] * 10 + (c - '0');
            b->i++;
        } else if (c == ',' && !comma) {
            comma = 1, k = 1, b->i++;
        } else if (c == '}') {
            b->i++;
            break;
        } else {
            return fail(b, at, "a repetition is {m}, {m,}, {m,n} or {,n} with m and n numbers");
        }
    }
    if (!comma) v[1] = v[0];
    if (v[0] < 0 && !comma) return fail(b, at, "a repetition is {m}, {m,}, {m,n} or {,n} with m and n numbers");
    if (v[0] < 0) v[0] = 0;
    if (v[0] > GR_MAX_REPEAT || v[1] > GR_MAX_REPEAT)
        return fail(b, at, "a repetition bound past %d (the limit here)", GR_MAX_REPEAT);
    if (v[1] >= 0 && v[1] < v[0]) return fail(b, at, "a repetition {%ld,%ld} whose maximum is below its minimum", v[0], v[1]);
    *m = (int)v[0], *n = (int)v[1];
    return 0;
}

/* the postfix operator at b->i applied to the elements [from, end) of rule's body */
static int postfix(gb *b, int rule, int from) {
    const size_t at = b->i;
    const char op = b->t[b->i];
    int m = 0, n = -1;
    if (op == '{') {
        if (read_bounds(b, &m, &n)) return -1;
    } else {
        b->i++;
        m = op == '+', n = op == '?' ? 1 : -1;
    }
    brule *r = &b->r[rule];
    const int len = r->n - from;
    if (len == 0) return 0; /* "" repeated: still the empty text */
    gelem e = r->e[from];
    if (len > 1) { /* a literal of several characters: a rule of its own */
        const int w = new_rule(b, NULL, 0, R_GROUP, b->r[rule].owner, at);
        if (w < 0) return -1;
        r = &b->r[rule];
        for (int k = from; k < r->n; k++)
            if (add(b, w, r->e[k].type, r->e[k].a)) return -1;
        r = &b->r[rule];
        b->total -= len;
        e = (gelem){E_REF, w};
        for (int k = 0; k < b->nch; k++) /* copies written out there (X{3}{2}) moved with them */
            if (b->ch[k].kind == C_COPIES && b->ch[k].rule == rule && b->ch[k].from >= from)
                b->ch[k].rule = w, b->ch[k].from -= from;
    }
    b->r[rule].n = from;
    b->total--;
    for (int k = 0; k < m; k++)
        if (add(b, rule, e.type, e.a)) return -1;
    if (add_chain(b, C_COPIES, rule, from, m, e)) return -1;
    if (n < 0) {
        const int s = star_rule(b, rule, e, at);
        return s < 0 ? -1 : add(b, rule, E_REF, s);
    }
    /* n - m optional copies, nested: O1 ::= e | (empty), Ok ::= e O(k-1) | (empty) */
    int prev = -1;
    for (int k = m; k < n; k++) {
        const int o = new_rule(b, NULL, 0, R_REPEAT, b->r[rule].owner, at);
        if (o < 0 || add(b, o, e.type, e.a) || (prev >= 0 && add(b, o, E_REF, prev)) || add(b, o, E_ALT, 0)) return -1;
        prev = o;
    }
    if (prev >= 0 && add_chain(b, C_OPTIONAL, prev - (n - m - 1), 0, n - m, e)) return -1;
    return prev < 0 ? 0 : add(b, rule, E_REF, prev);
}

/* one element (and its postfix operators) at b->i */
static int primary(gb *b, int rule, int nest) {
    const size_t at = b->i;
    const int from = b->r[rule].n;
    const char c = b->t[b->i];
    if (c == '"') {
        b->i++;
        for (;;) {
            if (b->i >= b->n) return fail(b, at, "an unclosed '\"' (a string literal)");
            if (b->t[b->i] == '"') break;
            uint32_t cp;
            const size_t ca = b->i;
            int k;
            if (read_char(b, &cp) || (k = one_char(b, cp, ca)) < 0 || add(b, rule, E_CHAR, k)) return -1;
        }
        b->i++;
    } else if (c == '[') {
        const int k = read_class(b);
        if (k < 0 || add(b, rule, E_CHAR, k)) return -1;
    } else if (c == '.') {
        b->i++;
        if (b->any < 0) {
            uint32_t r[2] = {0, 0x10FFFF};
            if ((b->any = add_class(b, r, 1, 0, at)) < 0) return -1;
        }
        if (add(b, rule, E_CHAR, b->any)) return -1;
    } else if (c == '(') {
        if (nest >= GR_MAX_NEST) return fail(b, at, "parentheses nested more than %d deep", GR_MAX_NEST);
        b->i++;
        const int g = new_rule(b, NULL, 0, R_GROUP, b->r[rule].owner, at);
        if (g < 0 || parse_alts(b, g, nest + 1)) return -1;
        if (b->i >= b->n || b->t[b->i] != ')') return fail(b, at, "an unclosed '('");
        b->i++;
        if (add(b, rule, E_REF, g)) return -1;
    } else if (word_char(c)) {
        size_t k = b->i;
        while (k < b->n && word_char(b->t[k])) k++;
        const int ref = lookup(b, b->t + b->i, (int)(k - b->i), at);
        b->i = k;
        if (ref < 0 || add(b, rule, E_REF, ref)) return -1;
    } else if (c == ']' || c == '}') {
        return fail(b, at, "an unbalanced '%c'", c);
    } else {
        return fail(b, at, "unexpected '%c' (an element is a \"literal\", a [class], '.', a rule name or a ( group ))", c);
    }
    for (;;) {
        while (b->i < b->n && (b->t[b->i] == ' ' || b->t[b->i] == '\t')) b->i++;
        if (b->i >= b->n || !b->t[b->i] || !strchr("*+?{", b->t[b->i])) return 0; /* strchr finds a NUL too */
        if (postfix(b, rule, from)) return -1;
    }
}

static int parse_seq(gb *b, int rule, int nest) {
    for (;;) {
        skip_ws(b);
        if (b->i >= b->n || b->t[b->i] == '|' || b->t[b->i] == ')') return 0;
        if (nest == 0 && at_rule_start(b)) return 0;
        if ((b->t[b->i] && strchr("*+?", b->t[b->i])) || b->t[b->i] == '{')
            return fail(b, b->i, "'%c' follows nothing it could repeat", b->t[b->i]);
        if (primary(b, rule, nest)) return -1;
    }
}

static int parse_alts(gb *b, int rule, int nest) {
    if (parse_seq(b, rule, nest)) return -1;
    while (b->i < b->n && b->t[b->i] == '|') {
        b->i++;
        if (add(b, rule, E_ALT, 0) || parse_seq(b, rule, nest)) return -1;
    }
    return 0;
}

/* Lark (vLLM's other grammar syntax): rules "name:" and "?name:", %import / %ignore */
static int lark_like(const char *t, size_t n) {
    int has_bnf = 0;
    for (size_t k = 0; k + 2 < n && !has_bnf; k++) has_bnf = !memcmp(t + k, "::=", 3);
    for (size_t k = 0; k < n;) {
        while (k < n && (t[k] == ' ' || t[k] == '\t')) k++;
        if (n - k >= 7 && (!memcmp(t + k, "%import", 7) || !memcmp(t + k, "%ignore", 7))) return 1;
        if (!has_bnf) {
            size_t j = k + (k < n && (t[k] == '?' || t[k] == '!'));
            const size_t w = j;
            while (j < n && (word_char(t[j]) || t[j] == '.')) j++;
            while (j < n && (t[j] == ' ' || t[j] == '\t')) j++;
            if (j > w && j < n && t[j] == ':') return 1;
        }
        while (k < n && t[k] != '\n') k++;
        k++;
    }
    return 0;
}

static void rule_name(const gb *b, int r, char *out, size_t n) {
    const brule *o = &b->r[b->r[r].owner];
    snprintf(out, n, "%.*s", o->name_len > 60 ? 60 : o->name_len, o->name);
}

/* Horn closure over the flat grammar: ok[r] = 1 when some alternative of r has every element
 * satisfied (a CHAR when chars, a REF when its rule is ok). A counter per alternative. */
static int horn(const gr_grammar *g, const int32_t *alt_rule, int chars, uint8_t *ok) {
    const int R = g->n_rules, A = g->n_alt;
    int32_t *cnt = calloc((size_t)A, sizeof *cnt), *ost = calloc((size_t)R + 1, sizeof *ost);
    int32_t *occ = malloc(((size_t)g->n_e + 1) * sizeof *occ), *queue = malloc(((size_t)R + 1) * sizeof *queue);
    if (!cnt || !ost || !occ || !queue) {
        free(cnt), free(ost), free(occ), free(queue);
        return -1;
    }
    memset(ok, 0, (size_t)R);
    for (int a = 0; a < A; a++)
        for (int p = g->alt[a]; g->e[p].type != E_END; p++) {
            if (g->e[p].type == E_REF) cnt[a]++, ost[g->e[p].a + 1]++;
            else if (!chars) cnt[a] = 1 << 30;
        }
    for (int r = 0; r < R; r++) ost[r + 1] += ost[r];
    for (int a = 0; a < A; a++)
        for (int p = g->alt[a]; g->e[p].type != E_END; p++)
            if (g->e[p].type == E_REF) occ[ost[g->e[p].a]++] = a;
    for (int r = R; r > 0; r--) ost[r] = ost[r - 1];
    ost[0] = 0;
    int qn = 0;
    for (int a = 0; a < A; a++)
        if (!cnt[a] && !ok[alt_rule[a]]) ok[alt_rule[a]] = 1, queue[qn++] = alt_rule[a];
    while (qn) {
        const int r = queue[--qn];
        for (int k = ost[r]; k < ost[r + 1]; k++)
            if (--cnt[occ[k]] == 0 && !ok[alt_rule[occ[k]]]) ok[alt_rule[occ[k]]] = 1, queue[qn++] = alt_rule[occ[k]];
    }
    free(cnt), free(ost), free(occ), free(queue);
    return 0;
}

/* A rule reaching itself before a character (through a nullable prefix): refused, naming the
 * cycle. An iterative depth-first search over the "can start with" edges. */
static int left_recursion(gb *b, const gr_grammar *g, const uint8_t *nullable) {
    const int R = g->n_rules;
    uint8_t *color = calloc((size_t)R, 1);
    int32_t *path = malloc((size_t)R * sizeof *path), *edge = malloc((size_t)R * sizeof *edge);
    int32_t *ealt = malloc((size_t)R * sizeof *ealt);
    if (!color || !path || !edge || !ealt) {
        free(color), free(path), free(edge), free(ealt);
        return oom(b);
    }
    int rc = 0;
    for (int s = 0; s < R && !rc; s++) {
        if (color[s]) continue;
        int top = 0;
        path[0] = s, ealt[0] = 0, edge[0] = -1, color[s] = 1;
        while (top >= 0 && !rc) {
            const int r = path[top];
            /* the next "starts with" edge of r: alternative ealt, element after edge */
            int next = -1;
            while (ealt[top] < g->nalt[r] && next < 0) {
                const int a0 = g->alt[g->alt0[r] + ealt[top]];
                int p = edge[top] < 0 ? a0 : edge[top] + 1;
                if (edge[top] >= 0 && !(g->e[edge[top]].type == E_REF && nullable[g->e[edge[top]].a])) p = -1;
                if (p >= 0 && g->e[p].type == E_REF) {
                    edge[top] = p, next = g->e[p].a;
                } else {
                    ealt[top]++, edge[top] = -1;
                }
            }
            if (next < 0) {
                color[r] = 2, top--;
                continue;
            }
            if (color[next] == 1) {
                int from = top;
                while (path[from] != next) from--;
                int rep = 0, named = 0;
                for (int k = from; k <= top; k++) rep |= b->r[path[k]].kind == R_REPEAT, named |= b->r[path[k]].kind == R_NAMED;
                if (rep && !named) {
                    int k = from;
                    while (b->r[path[k]].kind != R_REPEAT) k++;
                    rc = fail(b, b->r[path[k]].off, "a repetition of something that can match the empty text (it "
                              "could repeat forever without reading a character)");
                } else {
                    char chain[400] = "", nm[64];
                    size_t len = 0;
                    for (int k = from; k <= top + 1 && len < sizeof chain - 80; k++) {
                        const int x = k <= top ? path[k] : next;
                        if (k > from && b->r[x].kind != R_NAMED && k <= top) continue;
                        rule_name(b, x, nm, sizeof nm);
                        len += (size_t)snprintf(chain + len, sizeof chain - len, "%s%s", k > from ? " -> " : "", nm);
                    }
                    rule_name(b, next, nm, sizeof nm);
                    rc = fail(b, b->r[b->r[next].owner].off, "left recursion: rule '%s' can come back to itself before "
                              "reading a character (%s); rewrite it with a repetition", nm, chain);
                }
            } else if (!color[next]) {
                color[next] = 1;
                top++;
                path[top] = next, ealt[top] = 0, edge[top] = -1;
            }
        }
    }
    free(color), free(path), free(edge), free(ealt);
    return rc;
}

/* the builder's rules flattened into g (alternatives split at E_ALT, each ended by E_END) */
static int flatten(gb *b, gr_grammar *g, int32_t **alt_rule) {
    int ne = 0, na = 0;
    for (int r = 0; r < b->nr; r++) {
        ne += b->r[r].n + 1;
        na++;
        for (int k = 0; k < b->r[r].n; k++) na += b->r[r].e[k].type == E_ALT;
    }
    g->e = malloc((size_t)ne * sizeof *g->e);
    g->alt = malloc((size_t)na * sizeof *g->alt);
    *alt_rule = malloc((size_t)na * sizeof **alt_rule);
    g->alt0 = malloc((size_t)b->nr * sizeof *g->alt0);
    g->nalt = malloc((size_t)b->nr * sizeof *g->nalt);
    if (!g->e || !g->alt || !*alt_rule || !g->alt0 || !g->nalt) return oom(b);
    g->n_rules = b->nr;
    for (int r = 0; r < b->nr; r++) {
        g->alt0[r] = g->n_alt;
        g->nalt[r] = 1;
        (*alt_rule)[g->n_alt] = r;
        g->alt[g->n_alt++] = g->n_e;
        for (int k = 0; k < b->r[r].n; k++) {
            const gelem x = b->r[r].e[k];
            if (x.type != E_ALT) {
                g->e[g->n_e++] = x;
                continue;
            }
            g->e[g->n_e++] = (gelem){E_END, 0};
            g->nalt[r]++;
            (*alt_rule)[g->n_alt] = r;
            g->alt[g->n_alt++] = g->n_e;
        }
        g->e[g->n_e++] = (gelem){E_END, 0};
    }
    return 0;
}

/* The chains of the counted repetitions whose element always reads a character (not nullable):
 * their levels' positions (grammar_impl.h). Before prune (g->alt still in rule order). */
static int chains(gb *b, gr_grammar *g, const uint8_t *nullable) {
    g->pchain = malloc((size_t)g->n_e * sizeof *g->pchain);
    g->plevel = malloc((size_t)g->n_e * sizeof *g->plevel);
    long nl = 0;
    for (int c = 0; c < b->nch; c++) nl += b->ch[c].n;
    g->cbase = malloc(((size_t)nl + 1) * sizeof *g->cbase);
    g->cb0 = malloc(((size_t)b->nch + 1) * sizeof *g->cb0);
    if (!g->pchain || !g->plevel || !g->cbase || !g->cb0) return oom(b);
    for (int p = 0; p < g->n_e; p++) g->pchain[p] = -1, g->plevel[p] = 0;
    int at = 0;
    for (int k = 0; k < b->nch; k++) {
        const bchain *x = &b->ch[k];
        if (x->e.type == E_REF && nullable[x->e.a]) continue;
        const int c = g->n_chain++;
        g->cb0[c] = at;
        for (int lv = 1; lv <= x->n; lv++) {
            /* copies: level lv is copy n - lv (its return, the next copy, is that level's own
             * position); optionals: O(lv), whose call of O(lv - 1) follows its element */
            const int base = x->kind == C_COPIES ? g->alt[g->alt0[x->rule]] + x->from + (x->n - lv)
                                                 : g->alt[g->alt0[x->rule + lv - 1]];
            g->cbase[at++] = base;
            g->pchain[base] = c, g->plevel[base] = lv;
            if (x->kind == C_OPTIONAL && g->e[base + 1].type == E_REF) g->pchain[base + 1] = c, g->plevel[base + 1] = lv;
        }
    }
    return 0;
}

/* drops the alternatives that refer to a rule with no finite sentence */
static void prune(gr_grammar *g, const uint8_t *productive) {
    int out = 0;
    for (int r = 0; r < g->n_rules; r++) {
        const int a0 = g->alt0[r], n = g->nalt[r];
        g->alt0[r] = out;
        for (int k = 0; k < n; k++) {
            const int a = g->alt[a0 + k];
            int ok = 1;
            for (int p = a; g->e[p].type != E_END && ok; p++) ok = g->e[p].type != E_REF || productive[g->e[p].a];
            if (ok) g->alt[out++] = a;
        }
        g->nalt[r] = out - g->alt0[r];
    }
    g->n_alt = out;
}

int gr_compile(const char *text, size_t len, gr_grammar **out, char *why, size_t why_len) {
    *out = NULL;
    if (len > GR_MAX_TEXT) {
        snprintf(why, why_len, "is longer than %d bytes", GR_MAX_TEXT);
        return -1;
    }
    if (lark_like(text, len)) {
        snprintf(why, why_len, "is in Lark's syntax ('start:' rules, %%import), which is not taken here: give the "
                 "GBNF / EBNF form (rules 'name ::= ...', the start rule named 'root')");
        return -1;
    }
    gb b = {.t = text, .n = len, .any = -1, .why = why, .wl = why_len};
    gr_grammar *g = calloc(1, sizeof *g);
    int32_t *alt_rule = NULL;
    uint8_t *flags = NULL;
    b.names = malloc(NAMES * sizeof *b.names);
    int rc = g && b.names ? 0 : oom(&b);
    for (int k = 0; !rc && k < NAMES; k++) b.names[k] = -1;
    skip_ws(&b);
    if (!rc && b.i >= b.n) {
        snprintf(why, why_len, "is empty (no rule)");
        rc = -1;
    }
    while (!rc && b.i < b.n) {
        const size_t at = b.i;
        size_t k = b.i;
        while (k < b.n && word_char(text[k])) k++;
        if (k == b.i || !at_rule_start(&b)) {
            rc = text[at] == ')' ? fail(&b, at, "an unbalanced ')'")
                                 : fail(&b, at, "expected a rule ('name ::= ...') here");
            break;
        }
        const int r = lookup(&b, text + at, (int)(k - at), at);
        if (r < 0) { rc = -1; break; }
        if (b.r[r].defined) {
            rc = fail(&b, at, "rule '%.*s' is defined twice", (int)(k - at > 60 ? 60 : k - at), text + at);
            break;
        }
        b.r[r].defined = 1, b.r[r].off = at;
        /* past the blanks and the "::=" at_rule_start saw (the text need not end in a NUL, so no strstr) */
        while (text[k] == ' ' || text[k] == '\t') k++;
        b.i = k + 3;
        rc = parse_alts(&b, r, 0);
        if (!rc && b.i < b.n && text[b.i] == ')') rc = fail(&b, b.i, "an unbalanced ')'");
        skip_ws(&b);
    }
    g->root = -1;
    for (int r = 0; !rc && r < b.nr; r++) {
        if (b.r[r].kind == R_NAMED && !b.r[r].defined) {
            rc = fail(&b, b.r[r].off, "undefined rule '%.*s'", b.r[r].name_len > 60 ? 60 : b.r[r].name_len, b.r[r].name);
        }
        if (b.r[r].kind == R_NAMED && b.r[r].name_len == 4 && !memcmp(b.r[r].name, "root", 4)) g->root = r;
    }
    if (!rc && g->root < 0) {
        snprintf(why, why_len, "has no rule named 'root' (the start rule)");
        rc = -1;
    }
    if (!rc) rc = flatten(&b, g, &alt_rule);
    if (!rc && !(flags = malloc((size_t)g->n_rules))) rc = oom(&b);
    if (!rc && horn(g, alt_rule, 0, flags)) rc = oom(&b);
    if (!rc) rc = left_recursion(&b, g, flags);
    if (!rc) rc = chains(&b, g, flags);
    if (!rc && horn(g, alt_rule, 1, flags)) rc = oom(&b);
    if (!rc && !flags[g->root]) {
        snprintf(why, why_len, "matches no text (rule 'root' can never complete)");
        rc = -1;
    }
    if (!rc) {
        prune(g, flags);
        g->rng = b.rng, g->cls = b.cls, g->n_cls = b.ncls;
        b.rng = NULL, b.cls = NULL;
    }
    for (int r = 0; r < b.nr; r++) free(b.r[r].e);
    free(b.r), free(b.rng), free(b.cls), free(alt_rule), free(flags), free(b.names), free(b.ch);
    if (rc) {
        gr_free(g);
        return -1;
    }
    *out = g;
    return 0;
}
