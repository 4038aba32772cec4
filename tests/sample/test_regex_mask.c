/* test_regex_mask.c — guided decoding's regex and choice constraints (regex_mask.c): a full
 * match (not a search) of raw text, UTF-8 read byte by byte (characters split across tokens,
 * malformed bytes refused), "alive => completable", the refusals, choice lists of any
 * strings, and the vocabulary mask against brute force (every id's bytes fed from the state)
 * along random walks over a byte-level vocabulary (tests/fuzz/byte_vocab.h).
 *   test_regex_mask */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "../fuzz/byte_vocab.h"
#include "sample/regex_mask.h"
#include "test.h"

typedef struct row { const char *p, *s; int want; } row;

/* want: 1 the text matches whole; 0 it does not but can still be completed; -1 dead */
static const row FULL[] = {
    {"\\d+", "123", 1}, {"\\d+", "12", 1}, {"\\d+", "", 0}, {"\\d+", "12a", -1},
    {"abc", "abc", 1}, {"abc", "xabc", -1}, {"abc", "abcx", -1}, {"abc", "ab", 0},
    {"a|b", "a", 1}, {"a|b", "ab", -1}, {"^abc$", "abc", 1}, {"(a|b)c", "bc", 1},
    {"caf\xc3\xa9", "caf\xc3\xa9", 1}, {"caf\xc3\xa9", "caf\xc3", 0}, {"caf\xc3\xa9", "caf\xc3\xa8", -1},
    {"caf\xc3\xa9", "cafe", -1}, {"[\\u4e00-\\u9fff]+", "\xe4\xb8\xad\xe6\x96\x87", 1},
    {"[\\u4e00-\\u9fff]+", "\xe4", 0}, {"[\\u4e00-\\u9fff]+", "\xe4\xb8", 0}, {"[\\u4e00-\\u9fff]+", "\xc3", -1},
    {"[\\u4e00-\\u9fff]+", "\xe3", -1}, {".", "\n", -1}, {".", "\xf0\x9f\x98\x80", 1}, {".", "\xf0\x9f", 0},
    /* malformed UTF-8: overlong, surrogate, past U+10FFFF, a stray continuation byte */
    {".+", "\xc0\xaf", -1}, {".+", "\xe0\x80", -1}, {".+", "\xed\xa0", -1}, {".+", "\xf4\x90", -1},
    {".+", "\xf5", -1}, {".+", "\x80", -1}, {".+", "\xed\x9f\xbf", 1}, {".+", "\xf4\x8f\xbf\xbf", 1},
    {"a\\)|\\(b", "a)", 1}, {"a\\)|\\(b", "(b", 1}, {"[)]x", ")x", 1}, {"\\d{4}-\\d{2}-\\d{2}", "2024-05-0", 0},
    {"\\d{4}-\\d{2}-\\d{2}", "2024-05-017", -1}, {"\"[a-z]*\"\\n", "\"ab\"\n", 1}, {"\\\\", "\\", 1},
    {"", "", 1}, {"", "a", -1}, {"x*", "", 1}, {"(?:yes|no)!?", "no!", 1}, {"(?:yes|no)!?", "ye", 0},
};

/* state after text: 1 accepting, 0 alive, -1 dead */
static int run(const rx_guide *g, const char *text) {
    rx_state st;
    rx_state_init(g, &st);
    if (!rx_state_feed(g, &st, (const uint8_t *)text, strlen(text))) return -1;
    return rx_state_accepting(g, &st);
}

static void test_full_match(void) {
    char why[256];
    for (size_t i = 0; i < sizeof FULL / sizeof *FULL; i++) {
        rx_guide *g = NULL;
        const int rc = rx_guide_regex(FULL[i].p, strlen(FULL[i].p), &g, why, sizeof why);
        CHECK_MSG(rc == 0, "/%s/: %s", FULL[i].p, why);
        if (rc) continue;
        const int got = run(g, FULL[i].s);
        CHECK_MSG(got == FULL[i].want, "/%s/ on \"%s\": %d, want %d", FULL[i].p, FULL[i].s, got, FULL[i].want);
        rx_guide_free(g);
    }
}

static void test_refused(void) {
    static const row BAD[] = {
        {"a)|(b", "unbalanced", 0}, {"a)", "unbalanced", 0}, {"(a", "unbalanced", 0}, {"(?=a)", "lookahead", 0},
        {"a^b", "matches no string", 0}, {"[]", "matches no string", 0}, {"\\1", "backreference", 0},
        {"a\\", "backslash", 0}, {"\\p{L}", "Unicode property", 0},
    };
    char why[256];
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        rx_guide *g = NULL;
        why[0] = 0;
        const int rc = rx_guide_regex(BAD[i].p, strlen(BAD[i].p), &g, why, sizeof why);
        CHECK_MSG(rc < 0 && !g && strstr(why, BAD[i].s), "/%s/: rc %d, '%s' (want '%s')", BAD[i].p, rc, why, BAD[i].s);
        rx_guide_free(g);
    }
    rx_guide *g = NULL;
    CHECK(rx_guide_choice(NULL, 0, &g, why, sizeof why) < 0 && !g);
}

static void test_choice(void) {
    static const char *const C[] = {"yes", "no", "no", "y\"es\\", "line\nbreak", "caf\xc3\xa9", "", "yesterday",
                                    "\xe4\xb8\xad"};
    const int n = (int)(sizeof C / sizeof *C);
    char why[256];
    rx_guide *g = NULL;
    CHECK(rx_guide_choice(C, n, &g, why, sizeof why) == 0);
    if (!g) return;
    for (int i = 0; i < n; i++) CHECK_MSG(run(g, C[i]) == 1, "choice \"%s\"", C[i]);
    CHECK(run(g, "ye") == 0);
    CHECK(run(g, "yest") == 0);
    CHECK(run(g, "yesx") == -1);
    CHECK(run(g, "caf\xc3") == 0);
    CHECK(run(g, "cafe") == -1);
    CHECK(run(g, "y\"es") == 0);
    CHECK(run(g, "maybe") == -1);
    rx_guide_free(g);
    /* 1,000 entries: a trie of any size compiles; each is accepted, a prefix alone is not */
    char *buf = malloc(1000 * 16);
    const char **big = malloc(1000 * sizeof *big);
    for (int i = 0; buf && big && i < 1000; i++) {
        snprintf(buf + i * 16, 16, "item-%d\xc3\xa9", i * 7);
        big[i] = buf + i * 16;
    }
    g = NULL;
    CHECK(buf && big && rx_guide_choice(big, 1000, &g, why, sizeof why) == 0);
    for (int i = 0; g && i < 1000; i += 37) CHECK(run(g, big[i]) == 1);
    if (g) CHECK(run(g, "item-7") == 0 && run(g, "item-x") == -1 && run(g, "item-7\xc3\xa9") == 1 && run(g, "item-") == 0);
    rx_guide_free(g);
    free(buf);
    free(big);
}

/* pieces beside the 256 bytes: words, digits, UTF-8 whole and split, malformed sequences */
static const char *const PIECES[] = {
    "ab", "abc", "12", "2024", "-0", "05", "@", ".com", "user", "caf", "\xc3\xa9", "\xc3", "\xa9x", "\xe4\xb8",
    "\xad\xe6\x96\x87", "\xe4\xb8\xad", "yes", "no", "ye", "sterday", "\"", "\\", "\n", "a\nb", "\xf0\x9f",
    "\x98\x80", "\xf0\x9f\x98\x80", "\xed\xa0\x80", "\xc0\xaf", " ", "  ", "item-", "7\xc3\xa9", "14", "-2", "x@y",
    "line", "\nbreak", "y\"", "es\\", "name", "@example", "e.org", "1-", "\xe6\x96\x87\xe4",
};

/* rng: xorshift64 */
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return rs;
}

/* random walks from the start: at each step the mask equals brute force, is never empty
 * before the text is accepted, and a cached mask equals a fresh walk's */
static void walks(const rx_guide *g, const dsv4_tokenizer *tok, const json_vocab *v, const char *name) {
    rx_walk w;
    CHECK(rx_walk_init(&w, v, g) == 0);
    uint64_t *a = malloc((size_t)v->words * 8), *b = malloc((size_t)v->words * 8);
    int mismatches = 0, steps = 0, accepted = 0;
    for (int walk = 0; walk < 12 && a && b; walk++) {
        rx_state st;
        rx_state_init(g, &st);
        for (int step = 0; step < 24; step++, steps++) {
            rx_mask(g, v, &w, &st, a);
            rx_mask_brute(g, tok, &st, b, v->words);
            if (memcmp(a, b, (size_t)v->words * 8)) mismatches++;
            int n = 0;
            for (int k = 0; k < v->words; k++) n += __builtin_popcountll(a[k]);
            const int acc = rx_state_accepting(g, &st);
            CHECK_MSG(n > 0 || acc, "%s: an empty mask before the text is accepted", name);
            if (!n || (acc && rnd() % 4 == 0)) { accepted += acc; break; }
            int pick = (int)(rnd() % (uint64_t)n), id = -1;
            for (int k = 0; k < v->words && id < 0; k++)
                for (uint64_t m = a[k]; m; m &= m - 1)
                    if (pick-- == 0) { id = k * 64 + __builtin_ctzll(m); break; }
            size_t len = 0;
            const char *bytes = dsv4_tok_id_bytes(tok, id, &len);
            CHECK(rx_state_feed(g, &st, (const uint8_t *)bytes, len));
        }
    }
    CHECK_MSG(mismatches == 0, "%s: %d of %d masks differ from brute force", name, mismatches, steps);
    CHECK_MSG(w.hits > 0 && w.misses > 0, "%s: cache hits %ld, misses %ld", name, w.hits, w.misses);
    free(a);
    free(b);
    rx_walk_free(&w);
}

static void test_masks(void) {
    dsv4_tokenizer *tok = byte_vocab_tokenizer(PIECES, (int)(sizeof PIECES / sizeof *PIECES), 256 + 64);
    json_vocab *v = json_vocab_build(tok);
    CHECK(v != NULL);
    static const char *const RX[] = {
        "[a-z]+@[a-z]+\\.(?:com|org)", "\\d{4}-\\d{2}-\\d{2}(?:, \\d{4}-\\d{2}-\\d{2})*", "caf\xc3\xa9|[\\u4e00-\\u9fff]{2,3}",
        ".{1,6}", "(?:yes|no|yesterday)\\n?", "[^\\n]*\\n", "\"[^\"\\\\]*\"", "[a-z ]{0,30}\\.",
    };
    char why[256];
    for (size_t i = 0; v && i < sizeof RX / sizeof *RX; i++) {
        rx_guide *g = NULL;
        CHECK_MSG(rx_guide_regex(RX[i], strlen(RX[i]), &g, why, sizeof why) == 0, "/%s/: %s", RX[i], why);
        if (g) walks(g, tok, v, RX[i]);
        rx_guide_free(g);
    }
    static const char *const C[] = {"yes", "no", "yesterday", "y\"es\\", "line\nbreak", "caf\xc3\xa9", "",
                                    "\xe4\xb8\xad\xe6\x96\x87", "name@example.org", "item-7\xc3\xa9"};
    rx_guide *g = NULL;
    CHECK(rx_guide_choice(C, (int)(sizeof C / sizeof *C), &g, why, sizeof why) == 0);
    if (g && v) walks(g, tok, v, "choice");
    rx_guide_free(g);
    /* a count's states with room for any token share one mask (one walk): after "abc" and
     * "abcd" the same, a cache hit; near the end ("x" * 28) another */
    g = NULL;
    CHECK(rx_guide_regex("[a-z]{0,30}\\.", 13, &g, why, sizeof why) == 0);
    rx_walk w;
    uint64_t *a = v ? malloc((size_t)v->words * 8) : NULL, *b = v ? malloc((size_t)v->words * 8) : NULL;
    if (g && a && b && rx_walk_init(&w, v, g) == 0) {
        rx_state s3, s4, s28;
        rx_state_init(g, &s3), rx_state_init(g, &s4), rx_state_init(g, &s28);
        rx_state_feed(g, &s3, (const uint8_t *)"abc", 3);
        rx_state_feed(g, &s4, (const uint8_t *)"abcd", 4);
        rx_state_feed(g, &s28, (const uint8_t *)"xxxxxxxxxxxxxxxxxxxxxxxxxxxx", 28);
        CHECK(s3.q != s4.q);
        rx_mask(g, v, &w, &s3, a);
        const long walked = rx_mask(g, v, &w, &s4, b);
        CHECK_MSG(walked == 0 && w.hits == 1 && !memcmp(a, b, (size_t)v->words * 8), "walked %ld, hits %ld", walked, w.hits);
        CHECK(rx_mask(g, v, &w, &s28, b) > 0 && memcmp(a, b, (size_t)v->words * 8));
        rx_walk_free(&w);
    }
    free(a);
    free(b);
    rx_guide_free(g);
    json_vocab_free(v);
    dsv4_tokenizer_free(tok);
}

/* ---- masks shared by several walks (the n choices of a request) ---- */

enum { N_WORDS = 120, N_SHARED = 4 * N_WORDS };

typedef struct share_job {
    const rx_guide *g;
    const json_vocab *v;
    const rx_walk *base;     /* the walk whose masks are shared */
    const rx_state *st;      /* (n) the states asked, in this order (dir -1: backwards) */
    const uint64_t *want;    /* [n][words] each state's mask by brute force */
    int n, dir, mismatches;
    long walked;
} share_job;

static pthread_barrier_t share_start;

static void *share_run(void *arg) {
    share_job *j = arg;
    rx_walk w;
    uint64_t *bits = malloc((size_t)j->v->words * 8);
    const int ok = bits && !rx_walk_share(&w, j->v, j->base);
    pthread_barrier_wait(&share_start); /* both at their first state at once */
    if (!ok) {
        free(bits);
        j->mismatches = -1;
        return NULL;
    }
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < j->n; k++) {
            const int i = j->dir > 0 ? k : j->n - 1 - k;
            j->walked += rx_mask(j->g, j->v, &w, &j->st[i], bits) > 0;
            j->mismatches += memcmp(bits, j->want + (size_t)i * (size_t)j->v->words, (size_t)j->v->words * 8) != 0;
        }
    rx_walk_free(&w);
    free(bits);
    return NULL;
}

/* Walks sharing one walk's masks: a state one walked is a copy for the others (no walk; two
 * walks keep 64 masks: each brings its 32 slots), the masks are brute force's, the first walk
 * may go first; two threads at once over more states than their slots hold (slots replaced
 * while the other walks) get brute force's masks. */
static void test_shared_masks(void) {
    dsv4_tokenizer *tok = byte_vocab_tokenizer(PIECES, (int)(sizeof PIECES / sizeof *PIECES), 256 + 64);
    json_vocab *v = json_vocab_build(tok);
    char why[256];
    /* a choice trie of 120 three-letter words: 181 nodes, each its own key */
    static char words[N_WORDS][4];
    const char *list[N_WORDS];
    for (int i = 0; i < N_WORDS; i++) {
        snprintf(words[i], sizeof words[i], "%c%c%c", 'a' + i % 5, 'a' + (i * 7) % 11, 'a' + (i * 3) % 13);
        list[i] = words[i];
    }
    rx_guide *g = NULL;
    CHECK(v && rx_guide_choice(list, N_WORDS, &g, why, sizeof why) == 0);
    rx_state *st = malloc(N_SHARED * sizeof *st);
    uint64_t *want = v ? malloc((size_t)N_SHARED * (size_t)v->words * 8) : NULL, *bits = v ? malloc((size_t)v->words * 8) : NULL;
    rx_walk a, b;
    if (!g || !st || !want || !bits || rx_walk_init(&a, v, g)) {
        CHECK(0);
        free(st), free(want), free(bits), rx_guide_free(g), json_vocab_free(v), dsv4_tokenizer_free(tok);
        return;
    }
    for (int i = 0; i < N_SHARED; i++) { /* each word's prefixes of length 0-3 */
        rx_state_init(g, &st[i]);
        rx_state_feed(g, &st[i], (const uint8_t *)list[i / 4], (size_t)(i % 4));
        rx_mask_brute(g, tok, &st[i], want + (size_t)i * (size_t)v->words, v->words);
    }
    /* one thread: b shares a's masks; what a walked, b copies */
    CHECK(rx_walk_share(&b, v, &a) == 0);
    int bad = 0, uniq[40], nu = 0; /* 40 distinct states (the first 40 words' second nodes) */
    for (int i = 2; i < N_SHARED && nu < 40; i += 4) uniq[nu++] = i;
    for (int i = 0; i < nu; i++) {
        CHECK(rx_mask(g, v, &a, &st[uniq[i]], bits) > 0);
        bad += memcmp(bits, want + (size_t)uniq[i] * (size_t)v->words, (size_t)v->words * 8) != 0;
    }
    for (int i = 0; i < nu; i++) {
        CHECK(rx_mask(g, v, &b, &st[uniq[i]], bits) == 0);
        bad += memcmp(bits, want + (size_t)uniq[i] * (size_t)v->words, (size_t)v->words * 8) != 0;
    }
    CHECK_MSG(b.hits == 40 && b.misses == 0 && a.misses == 40 && !bad, "b: hits %ld, misses %ld; a: misses %ld; %d differ",
              b.hits, b.misses, a.misses, bad);
    /* two threads at once over 480 states (181 keys; their 96 slots), from fresh masks each round:
     * the same way (each state's miss met by both at once: one walks, one waits) or the other
     * way each (slots replaced while the other walks) */
    int differ = 0;
    long walked[2] = {0, 0};
    for (int round = 0; round < 16; round++) {
        rx_walk base;
        if (rx_walk_init(&base, v, g)) { CHECK(0); break; }
        pthread_t th[2];
        share_job j[2];
        pthread_barrier_init(&share_start, NULL, 2);
        for (int t = 0; t < 2; t++) {
            j[t] = (share_job){g, v, &base, st, want, N_SHARED, t && (round & 1) ? -1 : 1, 0, 0};
            CHECK(pthread_create(&th[t], NULL, share_run, &j[t]) == 0);
        }
        for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
        pthread_barrier_destroy(&share_start);
        for (int t = 0; t < 2; t++) differ += j[t].mismatches, walked[t] += j[t].walked;
        rx_walk_free(&base);
    }
    CHECK_MSG(differ == 0, "threads: %d masks differ", differ);
    CHECK(walked[0] > 0 && walked[1] > 0);
    /* the first walk freed first: b goes on with the masks (the guide is g, not theirs) */
    rx_walk_free(&a);
    CHECK(rx_mask(g, v, &b, &st[0], bits) >= 0 && !memcmp(bits, want, (size_t)v->words * 8));
    rx_walk_free(&b);
    /* masks that own their guide free it with their last walk (ASan: no leak, no use after) */
    rx_guide *g2 = NULL;
    CHECK(rx_guide_regex("[a-z]{1,3}", 10, &g2, why, sizeof why) == 0);
    if (g2 && rx_walk_init_own(&a, v, g2) == 0) {
        CHECK(rx_walk_share(&b, v, &a) == 0);
        rx_walk_free(&a);
        rx_state s0;
        rx_state_init(rx_walk_guide(&b), &s0);
        CHECK(rx_mask(rx_walk_guide(&b), v, &b, &s0, bits) > 0);
        rx_walk_free(&b);
    }
    free(st), free(want), free(bits);
    rx_guide_free(g);
    json_vocab_free(v);
    dsv4_tokenizer_free(tok);
}

int main(void) {
    test_full_match();
    test_refused();
    test_choice();
    test_masks();
    test_shared_masks();
    return test_report();
}
