/* test_grammar.c — grammar-guided decoding (grammar.c): the GBNF dialect read as llama.cpp and
 * xgrammar read it (texts accepted, prefixes alive, others dead), the compiler's refusals by
 * line and column, UTF-8 read byte by byte, the bounds (an ambiguous grammar fails as "over",
 * never a dropped stack), and the vocabulary mask against brute force (every id's bytes fed
 * from the state) along random walks over a byte-level vocabulary (tests/fuzz/byte_vocab.h)
 * and, when ../shared is there, over the real tokenizer.
 *   test_grammar */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/byte_vocab.h"
#include "sample/grammar.h"
#include "test.h"

/* balanced parentheses, arithmetic, a JSON-like list, counts and negated classes, UTF-8 */
static const char PARENS[] = "root ::= p*\np ::= \"(\" p* \")\" | \"[\" p* \"]\"\n";
static const char ARITH[] =
    "# arithmetic, llama.cpp's layout\n"
    "root  ::= expr\n"
    "expr  ::= term ((\"+\" | \"-\") term)*\n"
    "term  ::= factor ((\"*\" | \"/\") factor)*\n"
    "factor ::= num | \"(\" expr \")\" | \"-\" factor\n"
    "num   ::= [0-9]+ (\".\" [0-9]{1,3})?\n";
static const char LIST[] =
    "root ::= value\n"
    "value ::= list | str | num | \"true\" | \"false\" | \"null\"\n"
    "list ::= \"[\" ws ( value ws (\",\" ws value ws)* )? \"]\"\n"
    "str ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt] )* \"\\\"\"\n"
    "num ::= \"-\"? [0-9]+\n"
    "ws ::= [ \\t\\n]{0,4}\n";
static const char COUNTS[] = "root ::= id{2,4} (\"-\" [^-\\n]{1,3}){0,2} \"!\"?\nid ::= [a-z_][^\\x00-\\x40]{,2}\n";
static const char UTF8[] = "root ::= (\"caf\\u00e9\" | \"\xe4\xb8\xad\xe6\x96\x87\" | [\\U0001F600-\\U0001F64F])+ \".\"?\n";

typedef struct row { const char *g, *s; int want; } row;

/* want: 1 the text is a sentence; 0 it is not but can still be completed; -1 dead */
static const row ACCEPT[] = {
    {PARENS, "", 1}, {PARENS, "()", 1}, {PARENS, "([])[]", 1}, {PARENS, "(((", 0}, {PARENS, "(]", -1},
    {PARENS, "())", -1}, {PARENS, "([)]", -1},
    {ARITH, "1+2*3", 1}, {ARITH, "(1+2)*-3.25", 1}, {ARITH, "((4", 0}, {ARITH, "1+", 0}, {ARITH, "1.2345", -1},
    {ARITH, "1.", 0}, {ARITH, "1)", -1}, {ARITH, "", 0}, {ARITH, "--2", 1}, {ARITH, "2 ", -1},
    {LIST, "[1, \"a\\n\", [true,null], []]", 1}, {LIST, "[1,", 0}, {LIST, "[1,]", -1}, {LIST, "\"x", 0},
    {LIST, "\"\\q", -1}, {LIST, "[     1]", -1}, {LIST, "-", 0}, {LIST, "tru", 0}, {LIST, "truex", -1},
    {COUNTS, "ab", 1}, {COUNTS, "abcdef", 1}, {COUNTS, "a", 0}, {COUNTS, "ab-xyz-q!", 1}, {COUNTS, "ab-xyzw", -1},
    {COUNTS, "ab-x-y-z", -1}, {COUNTS, "ab-", 0}, {COUNTS, "a@", -1}, {COUNTS, "abc\xc3\xa9", 1},
    {UTF8, "caf\xc3\xa9", 1}, {UTF8, "caf\xc3", 0}, {UTF8, "caf\xc3\xa8", -1}, {UTF8, "\xe4\xb8\xad\xe6\x96\x87.", 1},
    {UTF8, "\xf0\x9f\x98\x80", 1}, {UTF8, "\xf0\x9f\x98", 0}, {UTF8, "\xf0\x9f\x99\x90", -1}, {UTF8, "\xf0\x9f\x9a", -1},
    {UTF8, "\xc0\xaf", -1}, {UTF8, "\xed\xa0\x80", -1}, {UTF8, ".", -1},
    /* the dialect: escapes, '.', comments, rules across lines, names with '-' and digits */
    {"root ::= \"a\\tb\\x41\\u00e9\\\"\\\\\"", "a\tbA\xc3\xa9\"\\", 1},
    {"root ::= . .", "\n\xe4\xb8\xad", 1},
    {"root ::= x-1 # the start\n  | y_2\nx-1 ::= \"x\" # a comment\ny_2 ::=\n  \"y\"\n  \"z\"", "yz", 1},
    {"root ::= (\n  \"a\" |\n  \"b\"\n)+", "abba", 1},
    {"root ::= [\\[\\]\\-^]+", "[]-^", 1},
    {"root ::= \"\" | \"a\"{3}", "aaa", 1}, {"root ::= \"\" | \"a\"{3}", "aa", 0},
    {"root ::= \"ab\"*", "abab", 1}, {"root ::= \"ab\"*", "aba", 0}, {"root ::= \"ab\"+", "", 0},
    {"root ::= \"x\" r\nr ::= \"y\" r | \"z\" | \"w\" r r", "xywyzz", 1},
    {"root ::= \"x\" r\nr ::= \"y\" r | \"z\" | \"w\" r r", "xywyzzz", -1},
    {"root ::= a | b\na ::= \"q\" a\nb ::= \"q\" \"!\"", "qq", -1}, /* a never ends: dropped */
    {"root ::= a | b\na ::= \"q\" a\nb ::= \"q\" \"!\"", "q!", 1},
};

/* state after text: 1 accepting, 0 alive, -1 dead */
static int run(gr_run *r, const char *text) {
    gr_run_reset(r);
    const int s = gr_run_feed(r, (const uint8_t *)text, strlen(text));
    if (s < 0) return -2;
    if (!s) return -1;
    return gr_run_accepting(r);
}

static void test_accept(void) {
    char why[256];
    for (size_t i = 0; i < sizeof ACCEPT / sizeof *ACCEPT; i++) {
        gr_grammar *g = NULL;
        gr_run *r = NULL;
        const int rc = gr_compile(ACCEPT[i].g, strlen(ACCEPT[i].g), &g, why, sizeof why);
        CHECK_MSG(rc == 0, "grammar %zu: %s", i, why);
        if (rc) continue;
        CHECK(gr_run_new(g, 16, 8, &r) == 0);
        const int got = r ? run(r, ACCEPT[i].s) : -3;
        CHECK_MSG(got == ACCEPT[i].want, "grammar %zu on \"%s\": %d, want %d", i, ACCEPT[i].s, got, ACCEPT[i].want);
        gr_run_free(r);
        gr_free(g);
    }
}

static void test_refused(void) {
    static const row BAD[] = {
        {"", "empty", 0},
        {"  # only a comment\n", "empty", 0},
        {"expr ::= \"a\"", "no rule named 'root'", 0},
        {"root ::= x", "line 1, column 10: undefined rule 'x'", 0},
        {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "left recursion: rule 'expr'", 0},
        {"root ::= a\na ::= b \"x\"\nb ::= c? a | \"y\"\nc ::= \"c\"", "left recursion", 0},
        {"root ::= (\"a\"?)*", "empty text", 0},
        {"root ::= x\nx ::= x? \"a\"", "left recursion: rule 'x'", 0},
        {"root ::= (\"a\" | \"b\"", "line 1, column 10: an unclosed '('", 0},
        {"root ::= \"a\" )", "unbalanced ')'", 0},
        {"root ::= [a-z", "an unclosed '['", 0},
        {"root ::= \"abc", "an unclosed '\"'", 0},
        {"root ::= \"\\q\"", "line 1, column 11: bad escape '\\q'", 0},
        {"root ::= \"\\x4\"", "takes 2 hex digits", 0},
        {"root ::= \"\\uD800\"", "not a character", 0},
        {"root ::= [z-a]", "reversed range", 0},
        {"root ::= []", "empty character class", 0},
        {"root ::= [^\\x00-\\U0010FFFF]", "matches no character", 0},
        {"root ::= \"a\"{1001}", "repetition bound past 1000", 0},
        {"root ::= \"a\"{3,2}", "below its minimum", 0},
        {"root ::= \"a\"{x}", "a repetition is {m}", 0},
        {"root ::= * \"a\"", "follows nothing", 0},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice", 0},
        {"root ::= a\na ::= \"x\" a", "matches no text", 0},
        {"root = \"a\"", "expected a rule", 0},
        {"start: \"a\" | b\nb: \"c\"", "Lark", 0},
        {"?start: x\n%import common.NUMBER", "Lark", 0},
        {"root ::= (((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((\"a\")))))))))))))))))))))))))))"
         "))))))))))))))))))))))))))))))))))))))", "nested more than 64", 0},
        {"root ::= \"\xc3\x28\"", "not well-formed UTF-8", 0},
        {"root ::= [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}"
         " [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}"
         " [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}"
         " [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}"
         " [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}"
         " [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}"
         " [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}"
         " [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}"
         " [a-z]{1000} [a-z]{1000} [a-z]{1000} [a-z]{1000}", "more than 65536 elements", 0},
        {"root ::= \"a\"{0,1000} \"b\"{0,1000} \"c\"{0,1000} \"d\"{0,1000} \"e\"{0,1000} \"f\"{0,1000} \"g\"{0,1000}"
         " \"h\"{0,1000} \"i\"{0,1000}", "more than 8192 rules", 0},
    };
    char why[256];
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        gr_grammar *g = NULL;
        why[0] = 0;
        const int rc = gr_compile(BAD[i].g, strlen(BAD[i].g), &g, why, sizeof why);
        CHECK_MSG(rc < 0 && !g && strstr(why, BAD[i].s), "bad grammar %zu: rc %d, '%s' (want '%s')", i, rc, why, BAD[i].s);
        gr_free(g);
    }
}

/* an ambiguous grammar: each "a" doubles the stacks (two return points per level), so a step
 * passes GR_MAX_STACKS and fails whole (over), never a dropped stack */
static void test_over(void) {
    static const char G[] = "root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"\"\n";
    char why[256];
    gr_grammar *g = NULL;
    gr_run *r = NULL;
    CHECK(gr_compile(G, sizeof G - 1, &g, why, sizeof why) == 0);
    if (!g || gr_run_new(g, 16, 8, &r)) { gr_free(g); CHECK(0); return; }
    CHECK(run(r, "aaabcb") == 1);
    char text[64];
    memset(text, 'a', 20), text[20] = 0;
    CHECK(run(r, text) == -2 && strstr(gr_run_why(r), "ambiguous past 512 parse stacks"));
    /* deep but unambiguous: nesting past GR_MAX_DEPTH is over too */
    gr_run_free(r), gr_free(g);
    static const char P[] = "root ::= p\np ::= \"(\" p \")\" | \"\"\n";
    CHECK(gr_compile(P, sizeof P - 1, &g, why, sizeof why) == 0 && gr_run_new(g, 16, 8, &r) == 0);
    char *deep = malloc(GR_MAX_DEPTH + 8);
    if (r && deep) {
        memset(deep, '(', GR_MAX_DEPTH + 4), deep[GR_MAX_DEPTH + 4] = 0;
        CHECK(run(r, deep) == -2 && strstr(gr_run_why(r), "deeper than"));
        deep[GR_MAX_DEPTH - 8] = 0;
        CHECK(run(r, deep) == 0);
    }
    free(deep);
    gr_run_free(r), gr_free(g);
    /* a repetition is a loop, not a nesting: 3,000 rounds stay one level deep */
    static const char STAR[] = "root ::= (\"a\" | \"b\" [a-z])* \".\"\n";
    CHECK(gr_compile(STAR, sizeof STAR - 1, &g, why, sizeof why) == 0 && gr_run_new(g, 16, 8, &r) == 0);
    char *many = malloc(3002);
    if (r && many) {
        memset(many, 'a', 3000), memcpy(many + 3000, ".", 2);
        CHECK(run(r, many) == 1);
    }
    free(many);
    gr_run_free(r), gr_free(g);
    /* a count: every character a new stack; compacted after each, the pool holds the state's */
    static const char COUNT[] = "root ::= \"x\"{0,900} \".\"\n";
    CHECK(gr_compile(COUNT, sizeof COUNT - 1, &g, why, sizeof why) == 0 && gr_run_new(g, 16, 8, &r) == 0);
    long most = 0;
    for (int i = 0; r && i < 800; i++) {
        CHECK(gr_run_feed(r, (const uint8_t *)"x", 1) == 1);
        gr_run_compact(r);
        long hits, misses, nodes;
        gr_run_stats(r, &hits, &misses, &nodes);
        most = nodes > most ? nodes : most;
    }
    CHECK_MSG(most <= 8, "the pool held %ld nodes", most);
    gr_run_free(r), gr_free(g);
    /* 2^16 ways to one character (x1 ::= x0 | x0, ...): each place is expanded once a step, so
     * it stays far under GR_MAX_WORK */
    char ways[1024];
    int k = snprintf(ways, sizeof ways, "root ::= x16 x16\nx0 ::= \"a\"\n");
    for (int i = 1; i <= 16; i++) k += snprintf(ways + k, sizeof ways - (size_t)k, "x%d ::= x%d | x%d\n", i, i - 1, i - 1);
    CHECK(gr_compile(ways, (size_t)k, &g, why, sizeof why) == 0 && gr_run_new(g, 16, 8, &r) == 0);
    if (r) CHECK(run(r, "aa") == 1);
    gr_run_free(r), gr_free(g);
}

/* pieces beside the 256 bytes: brackets, numbers, words, UTF-8 whole and split, malformed */
static const char *const PIECES[] = {
    "()", "((", "))", "[]", "([", "])", "(()", "12", "3.", ".25", "1+", "+(", ")*", "*-", "true", "tr", "ue",
    "null", ", ", ",\"", "\"a", "\\n", "[1", "\"]", "caf", "\xc3\xa9", "\xc3", "\xa9x", "\xe4\xb8", "\xad\xe6\x96\x87",
    "\xe4\xb8\xad", "\xf0\x9f", "\x98\x80", "\xf0\x9f\x98\x80", "\xed\xa0\x80", "\xc0\xaf", "  ", "ab", "abc", "-x",
    "xyz", "!", "__", "a-", "\n\n", "[ ", " ]", "caf\xc3\xa9.", "aa", "aaa", "aaaa", "aaaaaa",
};

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return rs;
}

/* random walks from the start: each mask equals brute force, is never empty before the text
 * is accepted, and the cache is used */
static void walks(gr_run *r, const dsv4_tokenizer *tok, const json_vocab *v, const char *name, const char *prefix,
                  int n_walks, int n_steps) {
    uint64_t *a = malloc((size_t)v->words * 8), *b = malloc((size_t)v->words * 8);
    int mismatches = 0, steps = 0;
    for (int walk = 0; walk < n_walks && a && b; walk++) {
        gr_run_reset(r);
        CHECK(gr_run_feed(r, (const uint8_t *)prefix, strlen(prefix)) == 1);
        for (int step = 0; step < n_steps; step++, steps++) {
            CHECK(gr_mask(r, v, a) >= 0);
            CHECK(gr_mask_brute(r, tok, b, v->words) == 0);
            if (memcmp(a, b, (size_t)v->words * 8)) mismatches++;
            int n = 0;
            for (int k = 0; k < v->words; k++) n += __builtin_popcountll(a[k]);
            const int acc = gr_run_accepting(r);
            CHECK_MSG(n > 0 || acc, "%s: an empty mask before the text is accepted", name);
            if (!n || (acc && rnd() % 6 == 0)) break;
            int id = 0; /* the pick-th id allowed */
            for (long pick = (long)(rnd() % (uint64_t)n);; id++)
                if ((a[id >> 6] >> (id & 63) & 1) && pick-- == 0) break;
            size_t len = 0;
            const char *bytes = dsv4_tok_id_bytes(tok, id, &len);
            CHECK(gr_run_feed(r, (const uint8_t *)bytes, len) == 1);
            gr_run_compact(r);
        }
    }
    long hits, misses, nodes;
    gr_run_stats(r, &hits, &misses, &nodes);
    CHECK_MSG(mismatches == 0, "%s: %d of %d masks differ from brute force", name, mismatches, steps);
    CHECK_MSG(hits > 0 && misses > 0, "%s: cache hits %ld, misses %ld", name, hits, misses);
    free(a);
    free(b);
}

/* each grammar of G[0 .. n) walked over tok's vocabulary from its text prefix[i] */
static void each_grammar(const dsv4_tokenizer *tok, const char *const *G, const char *const *prefix, int n, int n_walks,
                         int n_steps) {
    json_vocab *v = json_vocab_build(tok);
    CHECK(v != NULL);
    char why[256];
    for (int i = 0; v && i < n; i++) {
        gr_grammar *g = NULL;
        gr_run *r = NULL;
        CHECK_MSG(gr_compile(G[i], strlen(G[i]), &g, why, sizeof why) == 0, "%s", why);
        CHECK(g && gr_run_new(g, v->max_len, v->words, &r) == 0);
        if (r) walks(r, tok, v, G[i], prefix[i], n_walks, n_steps);
        gr_run_free(r);
        gr_free(g);
    }
    json_vocab_free(v);
}

/* Counted repetitions: the count left is clamped in the mask's key past what a token can read
 * (grammar.c's canon; the byte vocabulary's tokens are <= 6 bytes, so the clamp is at 8).
 * Masks equal brute force at every count of a string fed one character at a time (so at
 * each level near the clamp), and the levels past it share one walk; then random walks over
 * a mandatory count {n,m} with n > 0, nested counts, counts under alternatives with copies
 * of one and two characters (two levels of one chain at once), and one repetition rule used
 * twice (one chain, two parents). */
static void test_counts(void) {
    dsv4_tokenizer *tok = byte_vocab_tokenizer(PIECES, (int)(sizeof PIECES / sizeof *PIECES), 256 + 64);
    json_vocab *v = json_vocab_build(tok);
    CHECK(v != NULL && v->max_len == 6);
    static const char STR[] = "root ::= \"\\\"\" [^\"]{0,40} \"\\\"\"\n";
    char why[256];
    gr_grammar *g = NULL;
    gr_run *r = NULL;
    CHECK_MSG(gr_compile(STR, strlen(STR), &g, why, sizeof why) == 0, "%s", why);
    CHECK(g && v && gr_run_new(g, v->max_len, v->words, &r) == 0);
    uint64_t *a = malloc((size_t)(v ? v->words : 1) * 8), *b = malloc((size_t)(v ? v->words : 1) * 8);
    int mismatches = 0;
    for (int k = 0; r && a && b && k <= 40; k++) { /* '"' then k letters: 40 - k copies left */
        gr_run_reset(r);
        CHECK(gr_run_feed(r, (const uint8_t *)"\"", 1) == 1);
        for (int i = 0; i < k; i++) CHECK(gr_run_feed(r, (const uint8_t *)(i % 3 ? "a" : "z"), 1) == 1);
        CHECK(gr_mask(r, v, a) >= 0 && gr_mask_brute(r, tok, b, v->words) == 0);
        mismatches += memcmp(a, b, (size_t)v->words * 8) != 0;
    }
    long hits = 0, misses = 0, nodes;
    if (r) gr_run_stats(r, &hits, &misses, &nodes);
    CHECK_MSG(mismatches == 0, "string: %d of 41 masks differ from brute force", mismatches);
    /* 40 .. 8 copies left: one walk; 7 .. 1: one each; 0 (the closing quote): one */
    CHECK_MSG(misses == 9 && hits == 32, "string: cache misses %ld (want 9), hits %ld", misses, hits);
    gr_run_free(r);
    gr_free(g);
    free(a), free(b);
    static const char *const G[] = {
        "root ::= ([a-c]{3,25} \",\"){2,12} \".\"\n",
        "root ::= \"x\" [a-z]{10,30} \"!\" | \"y\" ([0-9] | \"ab\"){0,30} \"c\" | [a-c]{12}\n",
        "root ::= r \"-\"? r \".\"\nr ::= [a-c]{0,20}\n",
        "root ::= \"\\\"\" [^\"]{5,40} \"\\\"\" [a-z]{9}\n",
        /* the copies written out, then moved into a rule of their own by the second count */
        "root ::= \"<\" [a-c]{12}{2} \"!?.,;:=+\"\n",
    }, *const P[] = {"", "", "", "", ""};
    json_vocab_free(v);
    each_grammar(tok, G, P, 5, 12, 40);
    dsv4_tokenizer_free(tok);
}

static void test_masks(void) {
    dsv4_tokenizer *tok = byte_vocab_tokenizer(PIECES, (int)(sizeof PIECES / sizeof *PIECES), 256 + 64);
    /* AMBIG: after "a" 17 x 16 stacks, so "aa" passes 512: left out of the mask, "a" in */
    static const char AMBIG[] = "root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"a\" x \"d\" | \"a\" x \"e\" | \"a\" x \"f\" | "
                                "\"a\" x \"g\" | \"a\" x \"h\" | \"a\" x \"i\" | \"a\" x \"j\" | \"a\" x \"k\" | \"a\" x \"l\" | "
                                "\"a\" x \"m\" | \"a\" x \"n\" | \"a\" x \"o\" | \"a\" x \"p\" | \"a\" x \"q\" | \"a\"\n";
    static const char *const G[] = {PARENS, ARITH, LIST, COUNTS, UTF8, AMBIG}, *const P[] = {"", "", "", "", "", ""};
    each_grammar(tok, G, P, 6, 10, 30);
    dsv4_tokenizer_free(tok);
}

/* the real tokenizer: a few masks against brute force (129K ids each) */
static void test_real(void) {
    char path[512];
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    FILE *dir = fopen(test_shared_root(), "r");
    if (!dir) {
        fprintf(stderr, "note: %s not found: the real tokenizer's masks are not checked\n", test_shared_root());
        return;
    }
    fclose(dir);
    if (dsv4_tokenizer_load(test_shared("tokenizer/tokenizer.json", path, sizeof path), &tok, &err)) {
        fprintf(stderr, "tokenizer: %s\n", err.msg);
        CHECK(0);
        return;
    }
    /* inside a string most of the vocabulary is allowed: the whole trie is walked (the pool
     * pops back at each trie depth: without that, the walk would pass GR_POOL) */
    static const char *const G[] = {ARITH, LIST, LIST, UTF8, "root ::= \"\\\"\" [^\"]{0,1000} \"\\\"\"\n"},
                             *const P[] = {"", "", "[\"", "", "\""};
    each_grammar(tok, G, P, 5, 2, 4);
    dsv4_tokenizer_free(tok);
}

int main(void) {
    test_accept();
    test_refused();
    test_over();
    test_masks();
    test_counts();
    test_real();
    return test_report();
}
