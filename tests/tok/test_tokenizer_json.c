/* test_tokenizer_json.c — tokenizer.json features on small hand-made tokenizers, and the
 * errors for malformed files.
 *
 * The synthetic vocabulary: ids 0..255 are the 256 single bytes (id = byte value, spelled
 * in the GPT-2 byte alphabet), then the merges below in rank order, then extra tokens.
 * Expected ids are worked out by hand in the comments. */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "test.h"
#include "tok/tokenizer.h"

/* Byte-level spelling of one byte (GPT-2 alphabet), independent of the library. */
static void byte_spelling(int b, char out[4]) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174, k = 0;
    uint32_t cp = (uint32_t)b;
    if (!printable) {
        cp = 256;
        for (int x = 0; x < b; x++) cp += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    }
    if (cp < 0x80) out[k++] = (char)cp;
    else { out[k++] = (char)(0xC0 | cp >> 6); out[k++] = (char)(0x80 | (cp & 0x3F)); }
    out[k] = 0;
}

/* Merges by rank; the merged token gets id 256 + rank. */
static const char *MERGES[][2] = {
    {"c", "Ġ"},   // 256 "cĠ"
    {"a", "b"},   // 257 "ab"
    {"ab", "c"},  // 258 "abc"
    {"Ġ", "a"},   // 259 "Ġa"
    {"Ġa", "b"},  // 260 "Ġab"
    {"Ġ", "Ġ"},   // 261 "ĠĠ"
};
enum { N_MERGES = 6, ID_CG = 256, ID_AB, ID_ABC, ID_GA, ID_GAB, ID_GG, ID_AC = 270, ID_EURO = 271 };
enum { SP = 32, LT = 60, GT = 62 };

/* A valid tokenizer.json tree: byte vocab, the merges, extra tokens "ac" (reachable by no
 * merge) and "€uro" (outside the byte alphabet), pre_tokenizer = pre (taken over). */
static cJSON *base(cJSON *pre) {
    cJSON *root = cJSON_CreateObject();
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_spelling(b, s);
        cJSON_AddNumberToObject(vocab, s, b);
    }
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < N_MERGES; i++) {
        char m[32], joined[32];
        snprintf(m, sizeof m, "%s %s", MERGES[i][0], MERGES[i][1]);
        snprintf(joined, sizeof joined, "%s%s", MERGES[i][0], MERGES[i][1]);
        cJSON_AddItemToArray(merges, cJSON_CreateString(m));
        cJSON_AddNumberToObject(vocab, joined, 256 + i);
    }
    cJSON_AddNumberToObject(vocab, "ac", ID_AC);
    cJSON_AddNumberToObject(vocab, "€uro", ID_EURO);
    cJSON_AddItemToObject(root, "added_tokens", cJSON_CreateArray());
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", pre);
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    return root;
}

static cJSON *byte_level(int prefix, int regex) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "ByteLevel");
    cJSON_AddBoolToObject(p, "add_prefix_space", prefix);
    cJSON_AddBoolToObject(p, "use_regex", regex);
    return p;
}

/* Sequence [Split(pattern, behavior, invert), ByteLevel(no prefix, no regex)]. */
static cJSON *split(const char *kind, const char *pattern, const char *behavior, int invert) {
    cJSON *seq = cJSON_CreateObject();
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON *list = cJSON_AddArrayToObject(seq, "pretokenizers");
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "pattern"), kind, pattern);
    cJSON_AddStringToObject(s, "behavior", behavior);
    cJSON_AddBoolToObject(s, "invert", invert);
    cJSON_AddItemToArray(list, s);
    cJSON_AddItemToArray(list, byte_level(0, 0));
    return seq;
}

static void add_token(cJSON *root, int id, const char *content, int special, int lstrip, int rstrip,
                      int single, int normalized) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "id", id);
    cJSON_AddStringToObject(t, "content", content);
    cJSON_AddBoolToObject(t, "single_word", single);
    cJSON_AddBoolToObject(t, "lstrip", lstrip);
    cJSON_AddBoolToObject(t, "rstrip", rstrip);
    cJSON_AddBoolToObject(t, "normalized", normalized);
    cJSON_AddBoolToObject(t, "special", special);
    cJSON_AddItemToArray(cJSON_GetObjectItem(root, "added_tokens"), t);
}

static int load_tree(cJSON *root, dsv4_tokenizer **tok, dsv4_err *err) {
    char *json = cJSON_PrintUnformatted(root);
    int rc = dsv4_tokenizer_load_json(json, strlen(json), tok, err);
    free(json);
    cJSON_Delete(root);
    return rc;
}

/* Encodes text and compares with the n expected ids. */
static int enc_is(const dsv4_tokenizer *tok, const char *text, int flags, int n, const int32_t *want) {
    dsv4_tok_ids ids = {0};
    dsv4_err err = {0};
    int ok = dsv4_tokenize_ex(tok, text, strlen(text), flags, &ids, &err) == 0 && ids.n == (size_t)n;
    for (int i = 0; ok && i < n; i++) ok = ids.ids[i] == want[i];
    if (!ok) {
        fprintf(stderr, "  '%s' -> [", text);
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, "%s%d", i ? " " : "", ids.ids[i]);
        fprintf(stderr, "] %s\n", err.msg);
    }
    dsv4_tok_ids_free(&ids);
    return ok;
}
#define ENC(tok, text, flags, ...) do { \
    const int32_t want_[] = {__VA_ARGS__}; \
    CHECK_MSG(enc_is(tok, text, flags, (int)(sizeof want_ / sizeof want_[0]), want_), "%s", text); \
} while (0)

static void test_bpe_order(void) {
    dsv4_tokenizer *tok;
    dsv4_err err = {0};
    if (load_tree(base(byte_level(0, 0)), &tok, &err)) { CHECK_MSG(0, "%s", err.msg); return; }
    // One pre-token "abc abc" = a b c Ġ a b c: rank 0 "c Ġ" -> a b cĠ a b c; rank 1 "a b"
    // at both places -> ab cĠ ab c; rank 2 "ab c" only at the end -> ab cĠ abc.
    ENC(tok, "abc abc", 0, ID_AB, ID_CG, ID_ABC);
    // "aaa" has no merge; "abab": a b a b -> ab ab (leftmost first, both taken).
    ENC(tok, "aaa", 0, 'a', 'a', 'a');
    ENC(tok, "abab", 0, ID_AB, ID_AB);
    // " ab": Ġ a b: rank 1 "a b" beats rank 3 "Ġ a" -> Ġ ab, and "Ġ ab" is no merge.
    ENC(tok, " ab", 0, SP, ID_AB);
    // " a b": Ġ a Ġ b: rank 3 "Ġ a" -> Ġa Ġ b.
    ENC(tok, " a b", 0, ID_GA, SP, 'b');
    // "   ": Ġ Ġ Ġ: rank 5, leftmost first -> ĠĠ Ġ.
    ENC(tok, "   ", 0, ID_GG, SP);
    // "ac" only by merges: a c (ignore_merges is off).
    ENC(tok, "ac", 0, 'a', 'c');
    ENC(tok, "", 0);
    size_t n;
    const char *b = dsv4_tok_id_bytes(tok, ID_EURO, &n);  // spelled outside the alphabet: raw UTF-8
    CHECK(b && n == strlen("€uro") && memcmp(b, "€uro", n) == 0);
    b = dsv4_tok_id_bytes(tok, ID_GAB, &n);
    CHECK(b && n == 3 && memcmp(b, " ab", 3) == 0);
    CHECK(dsv4_tok_vocab_size(tok) == 272);
    CHECK(dsv4_tok_id_to_token(tok, 265) == NULL);  // a hole between 261 and 270
    int32_t hole = 265;
    char *text;
    size_t len;
    CHECK(dsv4_detokenize(tok, &hole, 1, 0, &text, &len, &err) == DSV4_ERR_ARG);
    dsv4_tokenizer_free(tok);

    cJSON *root = base(byte_level(0, 0));
    cJSON_AddBoolToObject(cJSON_GetObjectItem(root, "model"), "ignore_merges", 1);
    if (load_tree(root, &tok, &err)) { CHECK_MSG(0, "%s", err.msg); return; }
    ENC(tok, "ac", 0, ID_AC);        // the whole word is a vocabulary entry
    ENC(tok, "abc abc", 0, ID_AB, ID_CG, ID_ABC);
    dsv4_tokenizer_free(tok);
}

static void test_byte_level_flags(void) {
    dsv4_tokenizer *tok;
    dsv4_err err = {0};
    if (load_tree(base(byte_level(1, 0)), &tok, &err)) { CHECK_MSG(0, "%s", err.msg); return; }
    ENC(tok, "a", 0, ID_GA);         // " a"
    ENC(tok, " a", 0, ID_GA);        // already starts with a space: none added
    dsv4_tokenizer_free(tok);
    // GPT-2 split: "a  x" -> "a", " ", " x" (\s+(?!\S) leaves the last space to the word).
    if (load_tree(base(byte_level(0, 1)), &tok, &err)) { CHECK_MSG(0, "%s", err.msg); return; }
    ENC(tok, "a  x", 0, 'a', SP, SP, 'x');
    dsv4_tokenizer_free(tok);
    if (load_tree(base(byte_level(0, 0)), &tok, &err)) { CHECK_MSG(0, "%s", err.msg); return; }
    ENC(tok, "a  x", 0, 'a', ID_GG, 'x');  // one pre-token
    dsv4_tokenizer_free(tok);
}

static void test_split_behaviors(void) {
    dsv4_tokenizer *tok;
    dsv4_err err = {0};
    struct {
        const char *behavior, *text;
        int invert, n;
        int32_t want[6];
    } cases[] = {
        {"Isolated", "x a", 0, 3, {'x', SP, 'a'}},
        {"Removed", "x a", 0, 2, {'x', 'a'}},
        {"MergedWithPrevious", "x a", 0, 3, {'x', SP, 'a'}},   // "x ", "a"
        {"MergedWithNext", "x a", 0, 2, {'x', ID_GA}},         // "x", " a"
        {"Isolated", "x  a", 0, 4, {'x', SP, SP, 'a'}},
        {"Contiguous", "x  a", 0, 3, {'x', ID_GG, 'a'}},       // adjacent matches join
        {"MergedWithPrevious", "abc abc", 0, 3, {ID_AB, ID_CG, ID_ABC}},  // "abc ", "abc"
        {"Removed", "x a", 1, 1, {SP}},                        // invert: the spaces are kept
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = load_tree(base(split("String", " ", cases[i].behavior, cases[i].invert)), &tok, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc) continue;
        CHECK_MSG(enc_is(tok, cases[i].text, 0, cases[i].n, cases[i].want), "%s%s on '%s'", cases[i].behavior,
                  cases[i].invert ? " (invert)" : "", cases[i].text);
        dsv4_tokenizer_free(tok);
    }
    // Regex: words kept, the rest removed, with invert.
    if (load_tree(base(split("Regex", "[a-z]+", "Removed", 1)), &tok, &err) == 0) {
        ENC(tok, "ab, c", 0, ID_AB, 'c');
        dsv4_tokenizer_free(tok);
    } else CHECK_MSG(0, "%s", err.msg);
    if (load_tree(base(split("Regex", "[a-z]+", "Removed", 0)), &tok, &err) == 0) {
        ENC(tok, "ab, c", 0, ',', SP);
        dsv4_tokenizer_free(tok);
    } else CHECK_MSG(0, "%s", err.msg);
    // A regex String is literal: "." splits on dots only.
    if (load_tree(base(split("String", ".", "Removed", 0)), &tok, &err) == 0) {
        ENC(tok, "a.b", 0, 'a', 'b');
        ENC(tok, "ab", 0, ID_AB);
        dsv4_tokenizer_free(tok);
    } else CHECK_MSG(0, "%s", err.msg);
}

static void test_added_tokens(void) {
    dsv4_tokenizer *tok;
    dsv4_err err = {0};
    cJSON *root = base(byte_level(0, 0));
    add_token(root, 300, "<X>", 1, 0, 0, 0, 0);
    add_token(root, 301, "<Y>", 0, 0, 1, 0, 1);   // rstrip
    add_token(root, 302, "<Z>", 0, 1, 0, 0, 1);   // lstrip
    add_token(root, 305, "<X>>", 1, 0, 0, 0, 0);  // longer than <X>
    add_token(root, 306, "<W>", 0, 0, 0, 1, 1);   // single_word
    add_token(root, 309, "<A", 0, 0, 0, 0, 1);    // normalized: matched in the second pass
    add_token(root, 310, "A>", 1, 0, 0, 0, 0);    // not normalized: first pass
    if (load_tree(root, &tok, &err)) { CHECK_MSG(0, "%s", err.msg); return; }
    ENC(tok, "a <X> b", 0, 'a', SP, 300, SP, 'b');
    ENC(tok, "<X><X>", 0, 300, 300);
    ENC(tok, "<X>>", 0, 305);
    ENC(tok, "a<Y>  b", 0, 'a', 301, 'b');
    ENC(tok, "a  <Z>b", 0, 'a', 302, 'b');
    ENC(tok, "a  <Z>  <Y>  b", 0, 'a', 302, ID_GG, 301, 'b');  // the middle spaces touch neither strip side
    ENC(tok, "x<W>", 0, 'x', LT, 'W', GT);
    ENC(tok, " <W> ", 0, SP, 306, SP);
    // "A>" (raw pass) is cut before "<A" (normalized pass) is looked for, although
    // "<A" starts further left.
    ENC(tok, "<A>", 0, LT, 310);
    ENC(tok, "<Ab", 0, 309, 'b');
    ENC(tok, "<X>", DSV4_TOK_NO_ADDED, LT, 'X', GT);
    CHECK(dsv4_tok_token_to_id(tok, "<X>>") == 305 && dsv4_tok_is_special(tok, 305) && !dsv4_tok_is_special(tok, 301));
    // Added tokens decode to their content; SKIP_SPECIAL drops the special ones.
    int32_t seq[] = {300, 'a', 301, 'b'};
    char *text;
    size_t len;
    CHECK(dsv4_detokenize(tok, seq, 4, 0, &text, &len, &err) == 0 && strcmp(text, "<X>a<Y>b") == 0);
    free(text);
    CHECK(dsv4_detokenize(tok, seq, 4, DSV4_DETOK_SKIP_SPECIAL, &text, &len, &err) == 0 && strcmp(text, "a<Y>b") == 0);
    free(text);
    dsv4_tokenizer_free(tok);
}

/* ---- malformed files ---------------------------------------------------------------------- */

static void expect_fail(cJSON *root, int code, const char *substr, const char *what) {
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    int rc = load_tree(root, &tok, &err);
    CHECK_MSG(rc == code && tok == NULL && strstr(err.msg, substr), "%s: rc %d (want %d), msg '%s' (want '%s')", what,
              rc, code, err.msg, substr);
    dsv4_tokenizer_free(tok);
}

static cJSON *model_of(cJSON *root) { return cJSON_GetObjectItem(root, "model"); }

static void test_malformed(void) {
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    const char *texts[] = {"not json {", "{\"model\": ", "", "[1, 2]"};
    const char *want[] = {"not valid JSON", "not valid JSON", "not valid JSON", "top level"};
    for (int i = 0; i < 4; i++) {
        int rc = dsv4_tokenizer_load_json(texts[i], strlen(texts[i]), &tok, &err);
        CHECK_MSG(rc == DSV4_ERR_FORMAT && strstr(err.msg, want[i]), "'%s': %s", texts[i], err.msg);
    }
    CHECK(dsv4_tokenizer_load("/nonexistent/dir/tokenizer.json", &tok, &err) == DSV4_ERR_IO);
    CHECK_ERR(err, DSV4_ERR_IO, "/nonexistent/dir/tokenizer.json");

    cJSON *r;
    r = base(byte_level(0, 0)), cJSON_DeleteItemFromObject(r, "model");
    expect_fail(r, DSV4_ERR_FORMAT, "\"model\"", "no model");
    r = base(byte_level(0, 0)), cJSON_DeleteItemFromObject(model_of(r), "vocab");
    expect_fail(r, DSV4_ERR_FORMAT, "model.vocab", "no vocab");
    r = base(byte_level(0, 0)), cJSON_ReplaceItemInObject(model_of(r), "vocab", cJSON_CreateArray());
    expect_fail(r, DSV4_ERR_FORMAT, "model.vocab", "vocab is an array");
    r = base(byte_level(0, 0)), cJSON_ReplaceItemInObject(model_of(r), "vocab", cJSON_CreateObject());
    expect_fail(r, DSV4_ERR_FORMAT, "model.vocab is empty", "empty vocab");
    r = base(byte_level(0, 0)), cJSON_DeleteItemFromObject(model_of(r), "merges");
    expect_fail(r, DSV4_ERR_FORMAT, "model.merges", "no merges");
    r = base(byte_level(0, 0)), cJSON_ReplaceItemInObject(model_of(r), "merges", cJSON_CreateNumber(5));
    expect_fail(r, DSV4_ERR_FORMAT, "model.merges", "merges is a number");
    r = base(byte_level(0, 0)), cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(r), "merges"), cJSON_CreateString("zz y"));
    expect_fail(r, DSV4_ERR_FORMAT, "model.merges[6] 'zz y': the left token", "merge of an unknown token");
    r = base(byte_level(0, 0)), cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(r), "merges"), cJSON_CreateString("x y"));
    expect_fail(r, DSV4_ERR_FORMAT, "merged token 'xy'", "merge result unknown");
    r = base(byte_level(0, 0)), cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(r), "merges"), cJSON_CreateNumber(3));
    expect_fail(r, DSV4_ERR_FORMAT, "model.merges[6] is neither", "merge is a number");
    r = base(byte_level(0, 0)), cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(r), "merges"), cJSON_CreateString("abc"));
    expect_fail(r, DSV4_ERR_FORMAT, "two tokens separated by one space", "merge without a space");
    r = base(byte_level(0, 0)), cJSON_AddItemToObject(cJSON_GetObjectItem(model_of(r), "vocab"), "q7", cJSON_CreateString("7"));
    expect_fail(r, DSV4_ERR_FORMAT, "model.vocab['q7'] is not an id", "string id");
    r = base(byte_level(0, 0)), cJSON_AddItemToObject(cJSON_GetObjectItem(model_of(r), "vocab"), "q7", cJSON_CreateNumber(1.5));
    expect_fail(r, DSV4_ERR_FORMAT, "model.vocab['q7'] is not an id", "fractional id");
    r = base(byte_level(0, 0)), cJSON_AddItemToObject(cJSON_GetObjectItem(model_of(r), "vocab"), "q7", cJSON_CreateNumber(-1));
    expect_fail(r, DSV4_ERR_FORMAT, "model.vocab['q7'] is not an id", "negative id");
    r = base(byte_level(0, 0)), cJSON_AddItemToObject(cJSON_GetObjectItem(model_of(r), "vocab"), "q7", cJSON_CreateNumber(97));
    expect_fail(r, DSV4_ERR_FORMAT, "id 97 is given to both 'a' and 'q7'", "duplicate id");
    expect_fail(base(split("Regex", "(ab", "Isolated", 0)), DSV4_ERR_FORMAT, "regex /(ab/ is invalid", "bad regex");
    expect_fail(base(split("Regex", "\\p{Nonsense}", "Isolated", 0)), DSV4_ERR_FORMAT, "is invalid", "bad property");
    expect_fail(base(split("Regex", "a", "Sideways", 0)), DSV4_ERR_FORMAT, "behavior 'Sideways'", "bad behavior");
    expect_fail(base(split("Glob", "a", "Isolated", 0)), DSV4_ERR_FORMAT, "\"pattern\"", "bad pattern kind");
    r = base(split("Regex", "a", "Isolated", 0));
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "pre_tokenizer"), "pretokenizers"), 0),
                              "invert", cJSON_CreateString("no"));
    expect_fail(r, DSV4_ERR_FORMAT, "invert must be a boolean", "invert is a string");

    r = base(byte_level(0, 0));
    cJSON *nf = cJSON_CreateObject();
    cJSON_AddStringToObject(nf, "type", "NFC");
    cJSON_ReplaceItemInObject(r, "normalizer", nf);
    expect_fail(r, DSV4_ERR_UNSUPPORTED, "normalizer type 'NFC'", "NFC");
    r = base(byte_level(0, 0));
    cJSON *ws = cJSON_CreateObject();
    cJSON_AddStringToObject(ws, "type", "Whitespace");
    cJSON_ReplaceItemInObject(r, "pre_tokenizer", ws);
    expect_fail(r, DSV4_ERR_UNSUPPORTED, "pre_tokenizer type 'Whitespace'", "Whitespace");
    r = base(byte_level(0, 0));
    cJSON_ReplaceItemInObject(r, "pre_tokenizer", cJSON_CreateNull());
    expect_fail(r, DSV4_ERR_UNSUPPORTED, "no ByteLevel", "no pre-tokenizer");
    r = base(byte_level(0, 0));
    cJSON_ReplaceItemInObject(model_of(r), "type", cJSON_CreateString("WordPiece"));
    expect_fail(r, DSV4_ERR_UNSUPPORTED, "model type 'WordPiece'", "WordPiece");
    r = base(byte_level(0, 0));
    cJSON_AddBoolToObject(model_of(r), "byte_fallback", 1);
    expect_fail(r, DSV4_ERR_UNSUPPORTED, "byte_fallback", "byte_fallback");
    r = base(byte_level(0, 0));
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "decoder"), "type", cJSON_CreateString("WordPiece"));
    expect_fail(r, DSV4_ERR_UNSUPPORTED, "decoder type 'WordPiece'", "decoder");
    r = base(byte_level(0, 0));
    cJSON_ReplaceItemInObject(r, "added_tokens", cJSON_CreateObject());
    expect_fail(r, DSV4_ERR_FORMAT, "\"added_tokens\" must be an array", "added_tokens object");
    r = base(byte_level(0, 0));
    add_token(r, 300, "<X>", 1, 0, 0, 0, 0);
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "added_tokens"), 0), "content");
    expect_fail(r, DSV4_ERR_FORMAT, "added_tokens[0] (id 300) needs a non-empty string \"content\"", "no content");
    r = base(byte_level(0, 0));
    add_token(r, 300, "<X>", 1, 0, 0, 0, 0);
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "added_tokens"), 0), "special", cJSON_CreateString("yes"));
    expect_fail(r, DSV4_ERR_FORMAT, "special must be a boolean", "special is a string");
    r = base(byte_level(0, 0));
    add_token(r, 300, "<X>", 1, 0, 0, 0, 0);
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "added_tokens"), 0), "id", cJSON_CreateNumber(1e9));
    expect_fail(r, DSV4_ERR_FORMAT, "added_tokens[0] needs a numeric \"id\"", "huge id");
    // An id given to two strings: the collision is named (not a merge it breaks later).
    r = base(byte_level(0, 0));
    add_token(r, 256, "<Q>", 1, 0, 0, 0, 0);
    char clash[96];
    snprintf(clash, sizeof clash, "added_tokens[0] '<Q>' has id 256, which model.vocab gives to '%s%s'", MERGES[0][0],
             MERGES[0][1]);
    expect_fail(r, DSV4_ERR_FORMAT, clash, "added id taken by the vocabulary");
    r = base(byte_level(0, 0));
    add_token(r, 300, "<X>", 1, 0, 0, 0, 0);
    add_token(r, 300, "<Y>", 1, 0, 0, 0, 0);
    expect_fail(r, DSV4_ERR_FORMAT, "added_tokens[1] '<Y>' has id 300, which an earlier added token '<X>' has too",
                "two added tokens with one id");
    // The same string under the same id (DeepSeek's BOS/EOS are in both lists) is fine.
    r = base(byte_level(0, 0));
    snprintf(clash, sizeof clash, "%s%s", MERGES[0][0], MERGES[0][1]);
    add_token(r, 256, clash, 0, 0, 0, 0, 0);
    CHECK_MSG(load_tree(r, &tok, &err) == 0, "%s", err.msg);
    dsv4_tokenizer_free(tok);

    // The real file cut short.
    char path[1024];
    test_shared("tokenizer/tokenizer.json", path, sizeof path);
    FILE *f = fopen(path, "rb");
    char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECK(n == sizeof buf);
    CHECK(dsv4_tokenizer_load_json(buf, n, &tok, &err) == DSV4_ERR_FORMAT && tok == NULL);
    CHECK_ERR(err, DSV4_ERR_FORMAT, "not valid JSON");
}

/* A token whose text is empty (an added token "" or a vocab entry "") decodes to nothing,
 * also as the first piece of a fresh stream, whose buffers are not allocated yet. */
static void test_empty_token(void) {
    dsv4_tokenizer *tok;
    dsv4_err err = {0};
    cJSON *root = base(byte_level(0, 0));
    cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(root), "vocab"), "", 272);
    if (load_tree(root, &tok, &err)) { CHECK_MSG(0, "%s", err.msg); return; }
    dsv4_tok_stream *s;
    const char *p;
    size_t m;
    CHECK(dsv4_tok_stream_new(tok, 0, &s, &err) == 0);
    CHECK(dsv4_tok_stream_push(s, 272, &p, &m, &err) == 0 && m == 0 && p && p[0] == 0);
    CHECK(dsv4_tok_stream_push(s, 'a', &p, &m, &err) == 0 && m == 1 && p[0] == 'a');
    CHECK(dsv4_tok_stream_push(s, 272, &p, &m, &err) == 0 && m == 0);
    dsv4_tok_stream_flush(s, &p, &m);
    CHECK(m == 0);
    dsv4_tok_stream_free(s);
    int32_t seq[] = {272, 'b', 272};
    char *text;
    size_t len;
    CHECK(dsv4_detokenize(tok, seq, 3, 0, &text, &len, &err) == 0 && len == 1 && strcmp(text, "b") == 0);
    free(text);
    dsv4_tokenizer_free(tok);
}

int main(void) {
    test_bpe_order();
    test_byte_level_flags();
    test_split_behaviors();
    test_added_tokens();
    test_malformed();
    test_empty_token();
    return test_report();
}
