/* test_json_number.c — bounded numbers (minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum, multipleOf) in the JSON automaton, exhaustively: for a table of bounds
 * (integer and number, inclusive and exclusive, negative, zero and fractional bounds,
 * multipleOf), every text over "-0123456789.eE+" whose proper prefixes are all alive, up to
 * a few bytes, is run through the automaton, and both its acceptance and its aliveness are
 * compared with a direct predicate: the text's value as an exact decimal (scaled integers)
 * against the bounds, and "some completion satisfies them" as interval arithmetic over the
 * values the text's completions can take. So the automaton accepts exactly the numbers in
 * range and every state it keeps alive can still be completed (no dead-end prefix). Then
 * bounded numbers inside a document (test_json has their refusals and masks).
 *   test_json_number   (no files) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/json.h"
#include "test.h"

typedef __int128 i128;
#define SCALE 1000000      /* values are scaled integers: 6 decimals (every text and bound here has fewer) */
#define INF ((i128)1 << 100)

typedef struct ncase {
    const char *schema;
    int integer, depth;        /* integers only; the longest text tried */
    const char *ge, *gt, *le, *lt, *mult; /* decimals, NULL: none */
} ncase;

/* a decimal ("-2.5") scaled */
static i128 scaled(const char *d) {
    int neg = *d == '-';
    d += neg;
    i128 v = 0;
    int frac = -1;
    for (; *d; d++) {
        if (*d == '.') { frac = 0; continue; }
        v = v * 10 + (*d - '0');
        if (frac >= 0) frac++;
    }
    for (int f = frac < 0 ? 0 : frac; f < 6; f++) v *= 10;
    return neg ? -v : v;
}

typedef struct ivl { i128 lo, hi; int lo_open, hi_open; } ivl;

static i128 gcd(i128 a, i128 b) { while (b) { i128 t = a % b; a = b, b = t; } return a; }

/* some value in x (any decimal; an integer when k->integer) meets k's bounds and multipleOf */
static int has_value(const ncase *k, ivl x) {
    const char *lower[2] = {k->ge, k->gt}, *upper[2] = {k->le, k->lt};
    for (int i = 0; i < 2; i++) {
        if (lower[i]) {
            const i128 b = scaled(lower[i]);
            if (b > x.lo || (b == x.lo && i)) x.lo = b, x.lo_open = i;
        }
        if (upper[i]) {
            const i128 b = scaled(upper[i]);
            if (b < x.hi || (b == x.hi && i)) x.hi = b, x.hi_open = i;
        }
    }
    i128 step = k->mult ? scaled(k->mult) : 0;
    if (k->integer) step = step ? step / gcd(step, SCALE) * SCALE : SCALE;
    if (!step) return x.lo < x.hi || (x.lo == x.hi && !x.lo_open && !x.hi_open);
    if (x.lo <= -INF) return 1; /* unbounded below: multiples reach down to x.hi */
    i128 q = x.lo / step;
    if (q * step > x.lo) q--; /* floor */
    i128 v = q * step;
    if (v < x.lo || (v == x.lo && x.lo_open)) v += step;
    return v < x.hi || (v == x.hi && !x.hi_open);
}

/* the text's form: -?(0|[1-9]d*)(.d+)? (no point for integers); out: sign, integer digits,
 * point, fraction digits; -1 when no completion of it has the form */
typedef struct parsed { int neg, point; const char *i, *f; int ni, nf; } parsed;

static int parse(const ncase *k, const char *t, parsed *p) {
    memset(p, 0, sizeof *p);
    if (*t == '-') p->neg = 1, t++;
    p->i = t;
    while (*t >= '0' && *t <= '9') t++;
    p->ni = (int)(t - p->i);
    if (p->ni > 1 && p->i[0] == '0') return -1;
    if (*t == '.') {
        if (k->integer || !p->ni) return -1;
        p->point = 1, p->f = ++t;
        while (*t >= '0' && *t <= '9') t++;
        p->nf = (int)(t - p->f);
    }
    return *t ? -1 : 0;
}

static i128 digits(const char *d, int n) {
    i128 v = 0;
    for (int i = 0; i < n; i++) v = v * 10 + (d[i] - '0');
    return v;
}

static i128 pow10i(int n) {
    i128 v = 1;
    while (n-- > 0) v *= 10;
    return v;
}

/* the text is a complete number in range */
static int want_accept(const ncase *k, const char *t) {
    parsed p;
    if (parse(k, t, &p) || !p.ni || (p.point && !p.nf)) return 0;
    const i128 v = digits(p.i, p.ni) * SCALE + (p.nf ? digits(p.f, p.nf) * pow10i(6 - p.nf) : 0);
    if (p.neg && v == 0) return 0; /* no negative zero */
    const i128 x = p.neg ? -v : v;
    return has_value(k, (ivl){x, x, 0, 0});
}

static ivl signed_ivl(int neg, i128 lo, i128 hi, int hi_open) {
    if (!neg) return (ivl){lo, hi, 0, hi_open};
    return (ivl){-hi, -lo, hi_open, 0};
}

/* some completion of the text is a number in range */
static int want_alive(const ncase *k, const char *t) {
    parsed p;
    if (parse(k, t, &p)) return 0;
    if (!p.ni) /* "-": any negative value; "": any value */
        return has_value(k, (ivl){-INF, 0, 0, 1}) || (!p.neg && has_value(k, (ivl){0, INF, 0, 0}));
    const i128 I = digits(p.i, p.ni);
    if (p.point) { /* [I.F, I.F + 10^-nf): at least one more digit when nf = 0 */
        const i128 lo = I * SCALE + digits(p.f, p.nf) * pow10i(6 - p.nf), w = pow10i(6 - p.nf);
        ivl x = signed_ivl(p.neg, lo, lo + w, 1);
        if (p.neg && lo == 0) x.hi_open = 1; /* not negative zero */
        return has_value(k, x);
    }
    if (I == 0) { /* "0": 0 or 0.xxx; "-0": -0.xxx only */
        if (p.neg) return !k->integer && has_value(k, (ivl){-SCALE, 0, 1, 1});
        return has_value(k, (ivl){0, k->integer ? 0 : SCALE, 0, !k->integer});
    }
    /* more integer digits (n of them), then maybe a fraction: [I 10^n, (I + 1) 10^n) */
    for (int n = 0; n <= 12; n++) {
        const i128 lo = I * pow10i(n) * SCALE, hi = (I + 1) * pow10i(n) * SCALE;
        if (has_value(k, signed_ivl(p.neg, lo, hi, 1))) return 1;
    }
    return 0;
}

static const char ALPHA[] = "-0123456789.eE+";

typedef struct walk {
    const ncase *k;
    const dsv4_json_schema *s;
    json_state *st; /* (depth + 1) */
    char text[16];
    long texts, accepted, alive;
} walk;

static void dfs(walk *w, int len) {
    for (const char *a = ALPHA; *a; a++) {
        w->text[len] = *a, w->text[len + 1] = 0;
        const int alive = json_state_step(w->s, &w->st[len], (uint8_t)*a, &w->st[len + 1]);
        const int acc = alive && json_state_accepting(w->s, &w->st[len + 1]);
        const int wa = want_accept(w->k, w->text), wl = want_alive(w->k, w->text);
        w->texts++, w->accepted += acc, w->alive += alive;
        CHECK_MSG(acc == wa, "%s: \"%s\" %s", w->k->schema, w->text, wa ? "should be accepted" : "should be refused");
        CHECK_MSG(alive == wl, "%s: \"%s\" %s", w->k->schema, w->text,
                  wl ? "can be completed but the automaton killed it" : "is a dead end the automaton kept alive");
        if (alive && wl && len + 1 < w->k->depth) dfs(w, len + 1);
    }
    w->text[len] = 0;
}

static const ncase CASES[] = {
    {"{\"type\":\"integer\",\"minimum\":0}", 1, 5, "0", NULL, NULL, NULL, NULL},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0}", 1, 5, NULL, "0", NULL, NULL, NULL},
    {"{\"type\":\"integer\",\"exclusiveMaximum\":1}", 1, 5, NULL, NULL, NULL, "1", NULL},
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}", 1, 6, "-5", NULL, "12", NULL, NULL},
    {"{\"type\":\"integer\",\"minimum\":0.5,\"maximum\":99.5}", 1, 6, "0.5", NULL, "99.5", NULL, NULL},
    {"{\"type\":\"integer\",\"minimum\":-20,\"maximum\":40,\"multipleOf\":3}", 1, 6, "-20", NULL, "40", NULL, "3"},
    {"{\"type\":\"integer\",\"multipleOf\":5}", 1, 5, NULL, NULL, NULL, NULL, "5"},
    {"{\"type\":\"integer\",\"minimum\":100,\"maximum\":100}", 1, 6, "100", NULL, "100", NULL, NULL},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":-1,\"exclusiveMaximum\":1}", 1, 6, NULL, "-1", NULL, "1", NULL},
    {"{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true,\"maximum\":30}", 1, 6, NULL, "0", "30", NULL, NULL},
    {"{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":2,\"maximum\":10,\"exclusiveMaximum\":9.5}", 1, 6,
     "0", "2", "10", "9.5", NULL},
    {"{\"type\":\"integer\",\"multipleOf\":0.5,\"maximum\":-3}", 1, 5, NULL, NULL, "-3", NULL, "0.5"},
    {"{\"type\":\"number\",\"minimum\":0}", 0, 5, "0", NULL, NULL, NULL, NULL},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", 0, 6, NULL, "0", NULL, "1", NULL},
    {"{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":-0.25}", 0, 6, "-2.5", NULL, "-0.25", NULL, NULL},
    {"{\"type\":\"number\",\"maximum\":0}", 0, 5, NULL, NULL, "0", NULL, NULL},
    {"{\"type\":\"number\",\"minimum\":-1,\"maximum\":3,\"multipleOf\":0.25}", 0, 6, "-1", NULL, "3", NULL, "0.25"},
    {"{\"type\":\"number\",\"exclusiveMinimum\":1.5,\"maximum\":1.75}", 0, 6, NULL, "1.5", "1.75", NULL, NULL},
    {"{\"type\":\"number\",\"minimum\":3.14159}", 0, 5, "3.14159", NULL, NULL, NULL, NULL},
    {"{\"type\":\"number\",\"exclusiveMaximum\":-0.001,\"multipleOf\":0.01}", 0, 5, NULL, NULL, NULL, "-0.001", "0.01"},
    {"{\"type\":[\"number\",\"null\"],\"exclusiveMinimum\":-10,\"maximum\":10,\"multipleOf\":2.5}", 0, 6,
     NULL, "-10", "10", NULL, "2.5"},
};

static void test_exhaustive(void) {
    long texts = 0;
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        const ncase *k = &CASES[c];
        dsv4_json_schema *s = NULL;
        dsv4_err err = {0};
        CHECK_MSG(dsv4_json_schema_compile(k->schema, strlen(k->schema), &s, &err) == 0, "%s: %s", k->schema, err.msg);
        if (!s) continue;
        walk w = {.k = k, .s = s, .st = malloc((size_t)(k->depth + 1) * sizeof *w.st)};
        json_state_init(s, &w.st[0]);
        CHECK_MSG(want_alive(k, ""), "%s: the predicate finds no value", k->schema);
        dfs(&w, 0);
        printf("%-90s %6ld texts, %5ld accepted, %6ld alive\n", k->schema, w.texts, w.accepted, w.alive);
        CHECK_MSG(w.accepted > 0, "%s: nothing accepted", k->schema);
        texts += w.texts;
        free(w.st);
        dsv4_json_schema_free(s);
    }
    printf("%ld texts compared\n", texts);
}

/* within a document: the bounds of each property, the form (no exponent, no negative zero) */
static void test_in_object(void) {
    const char *schema = "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0,"
                         "\"maximum\":150},\"score\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1},"
                         "\"n\":{\"minimum\":-3}},\"required\":[\"age\"]}";
    dsv4_json_schema *s = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_json_schema_compile(schema, strlen(schema), &s, &err) == 0, "%s", err.msg);
    if (!s) return;
    static const struct { const char *t; int ok; } T[] = {
        {"{\"age\":0}", 1}, {"{\"age\":150}", 1}, {"{\"age\":151}", 0}, {"{\"age\":-1}", 0}, {"{\"age\":-0}", 0},
        {"{\"age\":1e2}", 0}, {"{\"age\":12.0}", 0}, {"{\"age\":7,\"score\":0.5}", 1}, {"{\"age\":7,\"score\":0}", 0},
        {"{\"age\":7,\"score\":1.000}", 1}, {"{\"age\":7,\"score\":1.0001}", 0}, {"{\"age\": 7 , \"score\": 1 }", 1},
        {"{\"age\":7,\"n\":-3}", 1}, {"{\"age\":7,\"n\":-3.5}", 0}, {"{\"age\":7,\"n\":1234.5}", 1},
        {"{\"age\":7,\"n\":1e3}", 0},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        CHECK_MSG(dsv4_json_schema_accepts(s, T[i].t, strlen(T[i].t)) == T[i].ok, "%s: %s", T[i].t,
                  T[i].ok ? "should be accepted" : "should be refused");
    dsv4_json_schema_free(s);
}

int main(void) {
    test_exhaustive();
    test_in_object();
    return test_report();
}
