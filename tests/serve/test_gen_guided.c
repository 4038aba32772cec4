/* test_gen_guided.c — guided decoding and the benchmark clients' sampling fields inside
 * dsv4_gen (include/dsv4_text.h only), driven with made-up logits rows over the real
 * vocabulary (no forward):
 *   - regex: over random rows (greedy and seeded, EOS always likely) every text matches the
 *     pattern whole (checked by hand-written matchers), EOS waits for a match;
 *   - choice: every text is one of the list (quotes, backslash, newline, UTF-8, "");
 *   - thinking: the reasoning is free, the regex starts after "</think>";
 *   - ignore_eos: EOS never drawn, exactly max_tokens tokens; but a regex that allows
 *     nothing more still ends;
 *   - min_tokens: EOS and stop tokens banned, stop strings end nothing before it;
 *   - include_stop_str, skip_special; the refusals (two constraints, a bad regex, bounds);
 *   - share: a regex's masks, a grammar compiled once (its first mask made at compile).
 *   test_gen_guided MODEL_DIR (with tokenizer.json)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4_text.h"
#include "serve/gen.h"
#include "test.h"

static dsv4_model *M;
static dsv4_tokenizer *T;
static int V;
static int32_t EOS, BOS;
static float *row; /* (V) */
static int32_t single[128]; /* the id of each ASCII byte alone */

static uint64_t rng = 88172645463325252ull;
static float urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 24);
}

/* the id of a text that is one token (a failed check otherwise) */
static int32_t one_id(const char *text) {
    dsv4_tok_ids ids = {0};
    dsv4_err err = {0};
    const int one = dsv4_tokenize(T, text, strlen(text), &ids, &err) == 0 && ids.n == 1;
    const int32_t id = one ? ids.ids[0] : -1;
    dsv4_tok_ids_free(&ids);
    CHECK_MSG(one, "'%s' is not one token", text);
    return id;
}

static dsv4_gen *new_gen(dsv4_gen_params *p, uint64_t seed) {
    p->sample.seed = seed;
    p->sample.temperature = seed ? 1.0f : 0.0f;
    dsv4_gen *g = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_gen_create(M, T, p, &g, &err) == 0, "%s", err.msg);
    return g;
}

static int32_t step(dsv4_gen *g, const float *r, char *text, size_t cap, int *finish) {
    dsv4_gen_token t;
    dsv4_err err = {0};
    if (dsv4_gen_next(g, r, &t, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        *finish = -1;
        return -1;
    }
    size_t n = strlen(text);
    if (n + t.text_len < cap) memcpy(text + n, t.text, t.text_len), text[n + t.text_len] = 0;
    *finish = t.finish;
    return t.token;
}

/* a row whose best id is `best`, the others 0 */
static const float *prefer(int32_t best) {
    for (int v = 0; v < V; v++) row[v] = 0;
    row[best] = 30;
    return row;
}

/* a peaked random row: a few random ids and the ASCII bytes likely, EOS likelier */
static const float *random_row(void) {
    for (int v = 0; v < V; v++) row[v] = -20;
    for (int k = 0; k < 64; k++) row[(int)(urand() * (float)(V - 1))] = 8 * urand();
    for (int k = 0; k < 128; k++) row[single[k]] = 4 + 4 * urand();
    row[EOS] = 9;
    return row;
}

/* runs p to its end over random rows; the text in text, the count returned */
static int random_run(dsv4_gen_params *p, uint64_t seed, char *text, size_t cap, int *fin) {
    dsv4_gen *g = new_gen(p, seed);
    text[0] = 0;
    *fin = 0;
    int n = 0;
    while (g && !*fin && n < 300) {
        step(g, random_row(), text, cap, fin);
        n++;
    }
    dsv4_gen_free(g);
    return n;
}

static int digits(const char *s, int n) {
    for (int i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* \d{4}-\d{2}-\d{2}(?:, \d{4}-\d{2}-\d{2})* */
static int is_dates(const char *s) {
    for (;;) {
        if (strlen(s) < 10 || !digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' || !digits(s + 8, 2))
            return 0;
        s += 10;
        if (!*s) return 1;
        if (s[0] != ',' || s[1] != ' ') return 0;
        s += 2;
    }
}

/* [a-z]+@[a-z]+\.(?:com|org) */
static int is_email(const char *s) {
    const char *at = strchr(s, '@');
    if (!at || at == s) return 0;
    for (const char *p = s; p < at; p++)
        if (*p < 'a' || *p > 'z') return 0;
    const char *dot = strrchr(at, '.');
    if (!dot || dot == at + 1 || (strcmp(dot, ".com") && strcmp(dot, ".org"))) return 0;
    for (const char *p = at + 1; p < dot; p++)
        if (*p < 'a' || *p > 'z') return 0;
    return 1;
}

static void test_regex(void) {
    static char text[4096];
    static const struct { const char *rx; int (*ok)(const char *); } R[] = {
        {"\\d{4}-\\d{2}-\\d{2}(?:, \\d{4}-\\d{2}-\\d{2})*", is_dates},
        {"[a-z]+@[a-z]+\\.(?:com|org)", is_email},
    };
    for (int k = 0; k < 2; k++)
        for (uint64_t seed = 0; seed < 4; seed++) {
            dsv4_gen_params p = {.regex = R[k].rx};
            int fin;
            random_run(&p, seed * 11, text, sizeof text, &fin);
            CHECK_MSG(fin == DSV4_FINISH_STOP_TOKEN && R[k].ok(text), "/%s/ seed %d: finish %d, text '%s'", R[k].rx,
                      (int)seed, fin, text);
        }
    /* EOS most likely from the start: refused until the text matches */
    dsv4_gen_params p = {.regex = "ab"};
    dsv4_gen *g = new_gen(&p, 0);
    for (int v = 0; v < V; v++) row[v] = 0;
    row[EOS] = 30;
    text[0] = 0;
    int fin = 0, n = 0;
    while (g && !fin && n < 10) step(g, row, text, sizeof text, &fin), n++;
    CHECK_MSG(fin == DSV4_FINISH_STOP_TOKEN && !strcmp(text, "ab"), "'%s' after %d", text, n);
    dsv4_gen_free(g);
}

static void test_choice(void) {
    static const char *const C[] = {"yes", "no", "y\"es\\", "line\nbreak", "caf\xc3\xa9", "", "no", "yesterday"};
    static char text[1024];
    int empty = 0;
    for (uint64_t seed = 0; seed < 6; seed++) {
        dsv4_gen_params p = {.choices = C, .n_choices = 8};
        int fin, found = 0;
        random_run(&p, seed * 5, text, sizeof text, &fin);
        for (int i = 0; i < 8; i++) found |= !strcmp(text, C[i]);
        empty += !text[0];
        CHECK_MSG(fin == DSV4_FINISH_STOP_TOKEN && found, "seed %d: finish %d, text '%s'", (int)seed, fin, text);
    }
    CHECK(empty < 6); /* EOS is likely: "" may win, but not always (the walk went somewhere) */
}

static void test_think(void) {
    dsv4_gen_params p = {.regex = "\\d+", .json_after_think = 1};
    dsv4_gen *g = new_gen(&p, 0);
    char text[256] = "";
    int fin;
    CHECK(step(g, prefer(one_id("abc")), text, sizeof text, &fin) == one_id("abc"));
    /* EOS likeliest in the reasoning: not drawn (the answer is still owed) */
    const int32_t t0 = step(g, prefer(EOS), text, sizeof text, &fin);
    CHECK_MSG(t0 != EOS && !fin, "EOS in the reasoning: %d, finish %d", t0, fin);
    dsv4_tok_ids ids = {0};
    dsv4_err err = {0};
    CHECK(dsv4_tokenize(T, " </think>", 9, &ids, &err) == 0);
    for (size_t i = 0; i < ids.n; i++) step(g, prefer(ids.ids[i]), text, sizeof text, &fin);
    dsv4_tok_ids_free(&ids);
    const int32_t t = step(g, prefer(one_id("abc")), text, sizeof text, &fin);
    CHECK(t != one_id("abc") && t != EOS);
    dsv4_gen_free(g);
}

/* ignore_eos: EOS always likeliest, never drawn: exactly max_tokens tokens */
static void test_ignore_eos(void) {
    static char text[4096];
    dsv4_gen_params p = {.max_tokens = 17, .ignore_eos = 1};
    dsv4_gen *g = new_gen(&p, 3);
    int fin = 0, n = 0, eos = 0;
    text[0] = 0;
    while (g && !fin && n < 40) {
        random_row();
        row[EOS] = 40; /* the likeliest by far */
        eos += step(g, row, text, sizeof text, &fin) == EOS, n++;
    }
    CHECK_MSG(n == 17 && fin == DSV4_FINISH_LENGTH && !eos, "%d tokens, finish %d, %d EOS", n, fin, eos);
    dsv4_gen_free(g);
    /* a stop token still ends it (ignore_eos is about EOS alone) */
    const int32_t y = one_id("y");
    dsv4_gen_params r = {.max_tokens = 17, .ignore_eos = 1, .stop_tokens = &y, .n_stop_tokens = 1};
    g = new_gen(&r, 0);
    fin = 0, n = 0;
    for (; g && !fin && n < 40; n++) {
        random_row();
        if (n == 3) row[y] = 50;
        step(g, row, text, sizeof text, &fin);
    }
    CHECK_MSG(n == 4 && fin == DSV4_FINISH_STOP_TOKEN, "%d tokens, finish %d", n, fin);
    dsv4_gen_free(g);
    /* a regex complete with nothing to follow: its EOS still ends it */
    dsv4_gen_params q = {.max_tokens = 17, .ignore_eos = 1, .regex = "abc"};
    g = new_gen(&q, 0);
    fin = 0, n = 0;
    text[0] = 0;
    while (g && !fin && n < 40) step(g, random_row(), text, sizeof text, &fin), n++;
    CHECK_MSG(fin == DSV4_FINISH_STOP_TOKEN && !strcmp(text, "abc"), "finish %d, '%s'", fin, text);
    dsv4_gen_free(g);
}

/* min_tokens: EOS and the stop tokens banned before it; stop strings end nothing before it */
static void test_min_tokens(void) {
    char text[256] = "";
    const int32_t x = one_id("x"), y = one_id("y");
    dsv4_gen_params p = {.min_tokens = 5, .stop_tokens = &y, .n_stop_tokens = 1};
    dsv4_gen *g = new_gen(&p, 0);
    int fin = 0, n = 0;
    for (; g && !fin && n < 10; n++) {
        for (int v = 0; v < V; v++) row[v] = 0;
        row[EOS] = n % 2 ? 30 : 0, row[y] = n % 2 ? 0 : 30, row[x] = 20;
        step(g, row, text, sizeof text, &fin);
    }
    /* tokens 1..5 are x (EOS and y banned), the 6th (y, likeliest then) stops */
    CHECK_MSG(n == 6 && fin == DSV4_FINISH_STOP_TOKEN && !strcmp(text, "xxxxx"), "%d tokens, finish %d, '%s'", n, fin, text);
    dsv4_gen_free(g);
    /* the stop string "xx" completes at token 2: shown; it ends the text when it ends in a
     * token after the 4th: token 5, begun in token 4's text (held back, cut there) */
    const char *stop[] = {"xx"};
    dsv4_gen_params q = {.min_tokens = 4, .stop_strings = stop, .n_stop = 1};
    g = new_gen(&q, 0);
    text[0] = 0, fin = 0, n = 0;
    for (; g && !fin && n < 10; n++) step(g, prefer(x), text, sizeof text, &fin);
    CHECK_MSG(n == 5 && fin == DSV4_FINISH_STOP_STRING && !strcmp(text, "xxx"), "%d tokens, finish %d, '%s'", n, fin, text);
    dsv4_gen_free(g);
    /* include_stop_str: the text ends with it */
    dsv4_gen_params r = {.stop_strings = stop, .n_stop = 1, .include_stop_str = 1};
    g = new_gen(&r, 0);
    text[0] = 0, fin = 0, n = 0;
    for (; g && !fin && n < 10; n++) step(g, prefer(n ? x : y), text, sizeof text, &fin);
    CHECK_MSG(fin == DSV4_FINISH_STOP_STRING && !strcmp(text, "yxx"), "finish %d, '%s'", fin, text);
    dsv4_gen_free(g);
}

/* skip_special: a special token's text is not shown */
static void test_skip_special(void) {
    const int32_t bos = BOS;
    CHECK(bos >= 0);
    for (int skip = 0; skip < 2 && bos >= 0; skip++) {
        dsv4_gen_params p = {.max_tokens = 1, .skip_special = skip};
        dsv4_gen *g = new_gen(&p, 0);
        char text[256] = "";
        int fin;
        CHECK(step(g, prefer(bos), text, sizeof text, &fin) == bos);
        CHECK_MSG(skip ? !text[0] : strstr(text, "begin") != NULL, "skip %d: '%s'", skip, text);
        dsv4_gen_free(g);
    }
}

static void refused(dsv4_gen_params p, int code, const char *what) {
    dsv4_gen *g = NULL;
    dsv4_err err = {0};
    CHECK(dsv4_gen_create(M, T, &p, &g, &err) == code && g == NULL);
    CHECK_ERR(err, code, what);
}

static void test_refused(void) {
    static const char *const C[] = {"a", "b"};
    static const int32_t bad = -1;
    refused((dsv4_gen_params){.regex = "a", .json_schema = "{}"}, DSV4_ERR_ARG, "goes alone");
    refused((dsv4_gen_params){.regex = "a", .choices = C, .n_choices = 2}, DSV4_ERR_ARG, "goes alone");
    refused((dsv4_gen_params){.regex = "(?=a)"}, DSV4_ERR_UNSUPPORTED, "lookahead");
    refused((dsv4_gen_params){.regex = "a)|(b"}, DSV4_ERR_UNSUPPORTED, "unbalanced");
    refused((dsv4_gen_params){.regex = "[]"}, DSV4_ERR_UNSUPPORTED, "matches no string");
    refused((dsv4_gen_params){.min_tokens = 9, .max_tokens = 4}, DSV4_ERR_ARG, "min_tokens");
    refused((dsv4_gen_params){.min_tokens = -1}, DSV4_ERR_ARG, "min_tokens");
    refused((dsv4_gen_params){.stop_tokens = &bad, .n_stop_tokens = 1}, DSV4_ERR_ARG, "stop token -1");
}

/* B and C (the same constraint, B's masks shared) from step n on the same rows to their ends
 * (same: they drew the same so far; tb, tc: 512 bytes, their texts so far; fb, fc: their
 * finishes so far): the same tokens,
 * an email ended by a stop token */
static void same_to_end(dsv4_gen *b, dsv4_gen *c, char *tb, char *tc, int n, int same, int fb, int fc) {
    for (; n < 300 && !fb; n++) {
        const float *r = random_row();
        same &= step(b, r, tb, 512, &fb) == step(c, r, tc, 512, &fc);
    }
    CHECK_MSG(same && fb == fc && !strcmp(tb, tc) && fb == DSV4_FINISH_STOP_TOKEN && is_email(tb), "shared '%s' (%d), own '%s' (%d)",
              tb, fb, tc, fc);
}

/* dsv4_gen_params.share: B shares A's masks (same regex), C has its own, D shares nothing
 * (another regex): on the same rows and seed A, B and C draw the same tokens; B walks no
 * state A walked first; A freed, B goes on alone; D's text matches its own regex. */
static void test_share(void) {
    static char tb[512], tc[512], td[512], ta[512];
    const char *rx = "[a-z]{1,8}@[a-z]{1,8}\\.(?:com|org)";
    dsv4_gen_params pa = {.regex = rx}, pb = pa, pc = pa, pd = {.regex = "[a-z]{1,8}@x\\.com"};
    dsv4_gen *a = new_gen(&pa, 7);
    pb.share = a, pd.share = a;
    dsv4_gen *b = new_gen(&pb, 7), *c = new_gen(&pc, 7), *d = new_gen(&pd, 5);
    if (!a || !b || !c || !d) { dsv4_gen_free(a), dsv4_gen_free(b), dsv4_gen_free(c), dsv4_gen_free(d); return; }
    ta[0] = tb[0] = tc[0] = td[0] = 0;
    int fa = 0, fb = 0, fc = 0, fd = 0, n = 0, same = 1;
    for (; n < 4 && !fa && !fb; n++) {
        const float *r = random_row();
        const int32_t ya = step(a, r, ta, sizeof ta, &fa), yb = step(b, r, tb, sizeof tb, &fb), yc = step(c, r, tc, sizeof tc, &fc);
        same &= ya == yb && yb == yc;
    }
    CHECK_MSG(dsv4_gen_guide_walks(b) == 0 && dsv4_gen_guide_walks(a) > 0 && dsv4_gen_guide_walks(c) == dsv4_gen_guide_walks(a),
              "walks: a %ld, b %ld, c %ld", dsv4_gen_guide_walks(a), dsv4_gen_guide_walks(b), dsv4_gen_guide_walks(c));
    dsv4_gen_free(a);
    same_to_end(b, c, tb, tc, n, same, fb, fc);
    step(d, random_row(), td, sizeof td, &fd);
    CHECK_MSG(dsv4_gen_guide_walks(d) > 0, "another regex took the masks");
    for (n = 1; n < 300 && !fd; n++) step(d, random_row(), td, sizeof td, &fd);
    const char *at = strchr(td, '@');
    CHECK_MSG(fd == DSV4_FINISH_STOP_TOKEN && at && !strcmp(at, "@x.com"), "'%s'", td);
    dsv4_gen_free(b), dsv4_gen_free(c), dsv4_gen_free(d);
}

/* A grammar compiled once (dsv4_grammar_compile, as the server's intake does): its first mask
 * made there, so A (given it) walks one state fewer than C (its own text, its own masks); B
 * (the same text, share = A) takes A's compiled grammar and walks nothing; the caller's and
 * then A's references dropped, B goes on. On the same rows A, B and C draw the same tokens.
 * A grammar whose first mask passes the work budget is refused at compile with a tokenizer,
 * and compiles without one. */
static void test_grammar_once(void) {
    static char ta[512], tb[512], tc[512];
    static const char G[] = "root ::= [a-z]{1,8} \"@\" [a-z]{1,8} \".\" (\"com\" | \"org\")";
    dsv4_grammar *gram = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_grammar_compile(G, strlen(G), T, &gram, &err) == 0, "%s", err.msg);
    if (!gram) return;
    dsv4_gen_params pa = {.compiled_grammar = gram}, pb = {.grammar = G}, pc = pb;
    dsv4_gen *a = new_gen(&pa, 7);
    dsv4_grammar_free(gram); /* a holds its own reference */
    pb.share = a;
    dsv4_gen *b = new_gen(&pb, 7), *c = new_gen(&pc, 7);
    if (!a || !b || !c) { dsv4_gen_free(a), dsv4_gen_free(b), dsv4_gen_free(c); return; }
    ta[0] = tb[0] = tc[0] = 0;
    int fa = 0, fb = 0, fc = 0, n = 0, same = 1;
    for (; n < 3 && !fa && !fb; n++) {
        const float *r = random_row();
        const int32_t ya = step(a, r, ta, sizeof ta, &fa), yb = step(b, r, tb, sizeof tb, &fb), yc = step(c, r, tc, sizeof tc, &fc);
        same &= ya == yb && yb == yc;
    }
    const long wa = dsv4_gen_guide_walks(a), wb = dsv4_gen_guide_walks(b), wc = dsv4_gen_guide_walks(c);
    CHECK_MSG(wb == 0 && wc > 1 && wa == wc - 1, "walks: a %ld, b %ld, c %ld", wa, wb, wc);
    dsv4_gen_free(a);
    same_to_end(b, c, tb, tc, n, same, fb, fc);
    dsv4_gen_free(b), dsv4_gen_free(c);
    /* rv-gram's: 8,000 ways to one character, counted 1,000 times */
    char exp[1024];
    int k = snprintf(exp, sizeof exp, "root ::= x13{0,1000}\nx0 ::= [^\\x00]\n");
    for (int i = 1; i <= 13; i++) k += snprintf(exp + k, sizeof exp - (size_t)k, "x%d ::= x%d | x%d\n", i, i - 1, i - 1);
    CHECK(dsv4_grammar_compile(exp, (size_t)k, T, &gram, &err) == DSV4_ERR_UNSUPPORTED && gram == NULL);
    CHECK_ERR(err, DSV4_ERR_UNSUPPORTED, "cannot be followed from its start: the grammar's token mask needs more than");
    CHECK(dsv4_grammar_compile(exp, (size_t)k, NULL, &gram, &err) == 0 && gram != NULL);
    dsv4_grammar_free(gram);
}

/* the model and its tokenizer (MODEL_DIR/tokenizer.json), the ids of the ASCII bytes */
static int open_model(const char *dir) {
    char path[4200];
    dsv4_err err = {0};
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    const int rc = dsv4_model_open(dir, &M, &err) ? 1 : dsv4_tokenizer_load(path, &T, &err) ? 2 : 0;
    if (rc) return fprintf(stderr, "test_gen_guided: %s\n", err.msg), rc;
    const dsv4_model_info info = dsv4_model_get_info(M);
    V = info.vocab_size, EOS = info.eos_token_id, BOS = info.bos_token_id;
    if (!(row = malloc((size_t)V * sizeof *row))) return 3;
    char b[2] = {0, 0};
    for (int c = 1; c < 128; c++) b[0] = (char)c, single[c] = one_id(b);
    single[0] = single[' '];
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_gen_guided MODEL_DIR\n");
        return 2;
    }
    if (open_model(argv[1])) return 1;
    test_regex();
    test_choice();
    test_think();
    test_ignore_eos();
    test_min_tokens();
    test_skip_special();
    test_refused();
    test_share();
    test_grammar_once();
    free(row);
    dsv4_tokenizer_free(T);
    dsv4_model_close(M);
    return test_report();
}
