/* json_number.c — a number's bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum)
 * and multipleOf compiled to a DFA over the number's bytes (json_dfa, ASCII classes), which
 * the automaton's number frame runs (json.h, json_num_spec).
 *
 * The DFA's states are the reachable values of a small tuple that says everything the bytes
 * so far decide: where in the text we are (sign, integer part, point, fraction), the digit
 * count (capped where no bound's digits reach), each bound's comparison with the magnitude
 * so far (lexicographic over the aligned digits, the integer part's length deciding when it
 * ends), whether a nonzero digit came (no negative zero), and the residue modulo multipleOf's
 * digits. The tuple is explored breadth first from the empty text; then the states that
 * cannot reach an accepting one are cut (with their transitions), so every live state can
 * still be completed to an accepted number (alive => completable), and a range no number
 * is in leaves the start state dead (refused). */
#include "sample/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIGITS 40       /* a bound's digits before and after the point */
#define MAX_STATES 32000    /* of one number's DFA (int16 states) */
#define MAX_MULT_DIGITS 6   /* multipleOf written out (its digits' residues are states) */
#define CLASSES 15          /* [0, ','], '-', '.', '/', '0'..'9', [':', max] */

/* |x| = i.f: i without leading zeros, f without trailing zeros (0: both empty) */
typedef struct dec {
    int neg, ni, nf;
    char i[MAX_DIGITS + 1], f[MAX_DIGITS + 1];
} dec;

/* v's shortest decimal that reads back as v: the number as the schema wrote it when that
 * had at most 15 (DBL_DIG) significant digits (two such decimals are never the same double).
 * -1 when it is not finite or has more than MAX_DIGITS digits on a side of the point; -2
 * when it needs more than 15 significant digits (then what was written, 9007199254740993
 * say, may not be the double's decimal: refused rather than compared inexactly). */
static int dec_of(double v, dec *d) {
    memset(d, 0, sizeof *d);
    if (!isfinite(v)) return -1;
    if (v == 0) return 0;
    char buf[40];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (p > 15) return -2;
    d->neg = v < 0;
    char m[20];
    int nm = 0;
    const char *c = buf + d->neg;
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9') m[nm++] = *c;
    const int pos = atoi(c + 1) + 1; /* digits of m before the point */
    while (nm > 1 && m[nm - 1] == '0') nm--;
    if (pos > MAX_DIGITS || nm - pos > MAX_DIGITS) return -1;
    for (int k = 0; k < pos; k++) d->i[d->ni++] = k < nm ? m[k] : '0';
    for (int k = pos < 0 ? pos : 0; k < 0; k++) d->f[d->nf++] = '0';
    for (int k = pos > 0 ? pos : 0; k < nm; k++) d->f[d->nf++] = m[k];
    return 0;
}

enum { P_START, P_MINUS, P_ZERO, P_INT, P_DOT, P_FRAC };
enum { LT = 0, EQ = 1, GT = 2 };

/* the tuple, packed in a uint64 (the hash key): phase 3 bits, neg 1, nz 1, k 6, j 6,
 * four comparisons 2 bits each, the residue above (below 10^6) */
typedef struct sem {
    int phase, neg, nz, k, j, c[4]; /* c: |x| against bound b's digits so far (EQ at the start) */
    uint32_t r;
} sem;

static uint64_t pack(const sem *s) {
    uint64_t x = (uint64_t)s->phase | (uint64_t)s->neg << 3 | (uint64_t)s->nz << 4 | (uint64_t)s->k << 5 |
                 (uint64_t)s->j << 11;
    for (int b = 0; b < 4; b++) x |= (uint64_t)s->c[b] << (17 + 2 * b);
    return x | (uint64_t)s->r << 25;
}

static sem unpack(uint64_t x) {
    sem s = {.phase = (int)(x & 7), .neg = (int)(x >> 3 & 1), .nz = (int)(x >> 4 & 1), .k = (int)(x >> 5 & 63),
             .j = (int)(x >> 11 & 63), .r = (uint32_t)(x >> 25)};
    for (int b = 0; b < 4; b++) s.c[b] = (int)(x >> (17 + 2 * b) & 3);
    return s;
}

typedef struct nb {
    const json_num_spec *sp;
    dec b[4];
    int mult;            /* multipleOf given */
    uint32_t a;          /* multipleOf's digits as an integer (1: none) */
    int d;               /* multipleOf's fraction digits */
    int kcap, jcap;
} nb;

static int cmp_digit(int g, int h) { return g < h ? LT : g > h ? GT : EQ; }

/* the integer part ended after k digits: its length decides, then the digits */
static int int_done(int c, int k, int ni) { return k < ni ? LT : k > ni ? GT : c; }

/* s after byte ch; 0 when the byte cannot come (the form, or a multipleOf digit) */
static int step(const nb *n, sem *s, int ch) {
    const int real = !n->sp->integer;
    const int g = ch >= '0' && ch <= '9' ? ch - '0' : -1;
    switch (s->phase) {
    case P_START:
        if (ch == '-') { s->phase = P_MINUS, s->neg = 1; return 1; }
        /* fall through */
    case P_MINUS:
        if (g == 0) { s->phase = P_ZERO; return 1; }
        if (g < 0) return 0;
        s->phase = P_INT;
        break;
    case P_ZERO:
    case P_INT:
        if (ch == '.' && real) {
            for (int b = 0; b < n->sp->n_bounds; b++) s->c[b] = int_done(s->c[b], s->k, n->b[b].ni);
            s->phase = P_DOT, s->j = 0;
            return 1;
        }
        if (g < 0 || s->phase == P_ZERO) return 0;
        break;
    case P_DOT:
    case P_FRAC:
        if (g < 0) return 0;
        if (n->mult && s->j >= n->d && g) return 0; /* past multipleOf's digits only zeros */
        for (int b = 0; b < n->sp->n_bounds; b++)
            if (s->c[b] == EQ) s->c[b] = cmp_digit(g, s->j < n->b[b].nf ? n->b[b].f[s->j] - '0' : 0);
        if (s->j < n->d) s->r = (s->r * 10 + (uint32_t)g) % n->a;
        s->phase = P_FRAC, s->nz |= g != 0;
        if (s->j < n->jcap) s->j++;
        return 1;
    }
    /* an integer digit g (nonzero first) */
    for (int b = 0; b < n->sp->n_bounds; b++)
        if (s->k < n->b[b].ni && s->c[b] == EQ) s->c[b] = cmp_digit(g, n->b[b].i[s->k] - '0');
    s->r = (s->r * 10 + (uint32_t)g) % n->a;
    s->nz |= g != 0;
    if (s->k < n->kcap) s->k++;
    return 1;
}

static int accepts(const nb *n, const sem *s) {
    if (s->phase != P_ZERO && s->phase != P_INT && s->phase != P_FRAC) return 0;
    if (s->neg && !s->nz) return 0; /* no negative zero */
    const int frac = s->phase == P_FRAC;
    for (int b = 0; b < n->sp->n_bounds; b++) {
        const dec *B = &n->b[b];
        int m = frac ? s->c[b] : int_done(s->c[b], s->k, B->ni);
        if (m == EQ && (frac ? s->j : 0) < B->nf) m = LT; /* B's digits left, the last nonzero */
        int cmp = m - EQ;                                  /* |x| against |B| */
        if (s->neg != B->neg) cmp = s->neg ? -1 : 1;
        else if (s->neg) cmp = -cmp;
        const int op = n->sp->op[b];
        if (!(op == JSON_NUM_GE ? cmp >= 0 : op == JSON_NUM_GT ? cmp > 0 : op == JSON_NUM_LE ? cmp <= 0 : cmp < 0))
            return 0;
    }
    uint32_t r = s->r;
    for (int k = frac ? s->j : 0; k < n->d; k++) r = r * 10 % n->a; /* the digits not written are zeros */
    return r == 0;
}

static int budget(json_budget *b, int64_t work, int64_t bytes, char *why, size_t why_len) {
    b->work -= work, b->bytes -= bytes;
    if (b->work >= 0 && b->bytes >= 0) return 0;
    snprintf(why, why_len, "exceeds the schema's compile budget (fewer bounded numbers)");
    return -1;
}

int json_number_compile(const json_num_spec *sp, json_dfa *out, json_budget *bud, char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    json_budget fresh = {JSON_BUDGET_WORK, JSON_BUDGET_BYTES};
    if (!bud) bud = &fresh;
    nb n = {.sp = sp, .a = 1};
    for (int b = 0; b < sp->n_bounds; b++) {
        const int rc = dec_of(sp->bound[b], &n.b[b]);
        if (rc == -2) {
            snprintf(why, why_len, "'%s' has more than 15 significant digits (not exact as a double)", sp->name[b]);
            return -1;
        }
        if (rc) {
            snprintf(why, why_len, "'%s' is outside the supported range (a finite number with at most %d digits "
                     "before and after the point)", sp->name[b], MAX_DIGITS);
            return -1;
        }
        if (n.b[b].ni + 1 > n.kcap) n.kcap = n.b[b].ni + 1;
        if (n.b[b].nf > n.jcap) n.jcap = n.b[b].nf;
    }
    if (sp->multiple != 0) {
        dec m;
        uint64_t a = 0;
        if (!(sp->multiple > 0) || dec_of(sp->multiple, &m) || m.ni + m.nf > MAX_MULT_DIGITS) {
            snprintf(why, why_len, "'multipleOf' must be a positive number of at most %d digits written out "
                     "(e.g. 5, 0.25, 0.01)", MAX_MULT_DIGITS);
            return -1;
        }
        for (int k = 0; k < m.ni + m.nf; k++) a = a * 10 + (uint64_t)((k < m.ni ? m.i[k] : m.f[k - m.ni]) - '0');
        n.mult = 1, n.a = (uint32_t)a, n.d = m.nf;
        if (n.d > n.jcap) n.jcap = n.d;
    }
    if (n.kcap < 1) n.kcap = 1;
    /* breadth first over the tuples: key[q], the transitions, a hash of keys to states */
    const int H = 1 << 16; /* a power of two above 2 x MAX_STATES */
    uint64_t *key = malloc(MAX_STATES * sizeof *key);
    int *hash = calloc((size_t)H, sizeof *hash);
    int16_t *next = malloc((size_t)MAX_STATES * CLASSES * sizeof *next);
    uint8_t *acc = calloc(MAX_STATES, 1), *live = calloc(MAX_STATES, 1);
    int *map = malloc(MAX_STATES * sizeof *map);
    int rc = key && hash && next && acc && live && map ? 0 : -1;
    if (rc) snprintf(why, why_len, "out of memory");
    /* the buffers above, zeroed or touched whatever the DFA's size */
    if (!rc && budget(bud, ((int64_t)H * 4 + MAX_STATES * 2) / 8, 0, why, why_len)) rc = -1;
    static const char cls_byte[CLASSES] = {0, '-', '.', '/', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 0};
    int Q = 1;
    if (!rc) key[0] = pack(&(sem){.c = {EQ, EQ, EQ, EQ}});
    for (int q = 0; !rc && q < Q; q++) {
        const sem s0 = unpack(key[q]);
        acc[q] = (uint8_t)accepts(&n, &s0);
        /* ~1 us a state (15 steps, packs, hash probes; rv-num measured ~1.9 us with the buffers) */
        if (budget(bud, CLASSES * 64, 0, why, why_len)) { rc = -1; break; }
        for (int k = 0; k < CLASSES; k++) {
            sem s = s0;
            int t = -1;
            if (cls_byte[k] && step(&n, &s, cls_byte[k])) {
                const uint64_t x = pack(&s);
                int h = (int)((x * 0x9E3779B97F4A7C15ull) >> 40) & (H - 1);
                while (hash[h] && key[hash[h] - 1] != x) h = (h + 1) & (H - 1);
                if (!hash[h]) {
                    if (Q >= MAX_STATES) {
                        snprintf(why, why_len, "needs more than %d automaton states (fewer digits in the bounds or "
                                 "multipleOf)", MAX_STATES);
                        rc = -1;
                        break;
                    }
                    key[Q] = x, hash[h] = ++Q;
                }
                t = hash[h] - 1;
            }
            next[(size_t)q * CLASSES + (size_t)k] = (int16_t)t;
        }
    }
    /* the states that can still reach acceptance */
    for (int q = 0; !rc && q < Q; q++) live[q] = acc[q];
    for (int changed = !rc; changed;) {
        changed = 0;
        for (int q = Q - 1; q >= 0; q--)
            for (int k = 0; k < CLASSES && !live[q]; k++) {
                const int t = next[(size_t)q * CLASSES + (size_t)k];
                if (t >= 0 && live[t]) live[q] = 1, changed = 1;
            }
    }
    if (!rc && !live[0]) {
        snprintf(why, why_len, "leaves no number that satisfies them");
        rc = -1;
    }
    /* the live states, renumbered in order (the start stays 0) */
    int nq = 0;
    for (int q = 0; !rc && q < Q; q++) map[q] = live[q] ? nq++ : -1;
    if (!rc && budget(bud, (int64_t)Q * CLASSES, (int64_t)nq * (CLASSES * 2 + 1) + CLASSES * 4, why, why_len)) rc = -1;
    if (!rc) {
        out->n_states = nq, out->n_classes = CLASSES;
        out->lo = malloc(CLASSES * sizeof *out->lo);
        out->next = malloc((size_t)nq * CLASSES * sizeof *out->next);
        out->accept = malloc((size_t)nq);
        if (!out->lo || !out->next || !out->accept) {
            snprintf(why, why_len, "out of memory");
            rc = -1;
        }
    }
    if (!rc) {
        static const uint32_t lo[CLASSES] = {0, '-', '.', '/', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', ':'};
        memcpy(out->lo, lo, sizeof lo);
        for (int c = 0; c < 128; c++) {
            int k = 0;
            while (k + 1 < CLASSES && lo[k + 1] <= (uint32_t)c) k++;
            out->ascii[c] = (uint16_t)k;
        }
        for (int q = 0; q < Q; q++) {
            if (map[q] < 0) continue;
            out->accept[map[q]] = acc[q];
            for (int k = 0; k < CLASSES; k++) {
                const int t = next[(size_t)q * CLASSES + (size_t)k];
                out->next[(size_t)map[q] * CLASSES + (size_t)k] = (int16_t)(t >= 0 ? map[t] : -1);
            }
        }
    }
    free(key), free(hash), free(next), free(acc), free(live), free(map);
    if (rc) json_dfa_free(out);
    return rc;
}
