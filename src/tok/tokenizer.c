/* tokenizer.c — loading a Hugging Face tokenizer.json into a dsv4_tokenizer, and the
 * id/token lookups. Encoding is in tokenizer_encode.c, decoding in tokenizer_decode.c.
 *
 * At load the BPE vocabulary is taken out of its ByteLevel spelling (bytes shown as
 * printable code points, ' ' as 'Ġ') and each merge becomes an entry of a hash table keyed
 * by the pair of ids, so that encoding works on raw bytes and integer ids only. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer_impl.h"
#include "util/err.h"
#include "util/file.h"

/* Ids above this are refused: they would only make the per-id tables huge. */
#define TOK_MAX_ID (1 << 24)

/* ---- the ByteLevel alphabet ------------------------------------------------------------ */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves; the other 68
 * bytes (controls, space, DEL, NBSP, soft hyphen) take code points 256, 257, ... in byte
 * order, so that every byte has a visible, non-space character. */
static void byte_level_alphabet(uint32_t byte_cp[256], int16_t cp_byte[324]) {
    for (int i = 0; i < 324; i++) cp_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        byte_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + extra++);
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

static size_t utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | cp >> 12);
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* Bytes a token spelling decodes to, the way the HF ByteLevel decoder does it: if every
 * character belongs to the alphabet, the bytes they stand for; otherwise (added tokens
 * such as "<｜User｜>") the spelling's own UTF-8. Writes at most strlen(s) bytes. */
static size_t byte_level_decode(const char *s, const int16_t cp_byte[324], char *out) {
    size_t n = strlen(s), k = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        uint32_t cp;
        size_t w;
        if (c < 0x80) { cp = c; w = 1; }
        else if ((c & 0xE0) == 0xC0 && i + 1 < n) { cp = (uint32_t)(c & 0x1F) << 6 | ((uint8_t)s[i + 1] & 0x3F); w = 2; }
        else { cp = UINT32_MAX; w = 1; }  // 3+ byte characters are all outside the alphabet
        if (cp >= 324 || cp_byte[cp] < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[k++] = (char)cp_byte[cp];
        i += w;
    }
    return k;
}

/* ---- string map -------------------------------------------------------------------------- */

static int strmap_init(tok_strmap *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    m->mask = (uint32_t)(cap - 1);
    return m->slots ? 0 : -1;
}

static inline const char *key_of(const char *pool, const uint32_t *off, int trim, uint32_t id,
                                 size_t *n) {
    *n = off[id + 1] - off[id] - (uint32_t)trim;
    return pool + off[id];
}

int32_t tok_strmap_get(const tok_strmap *m, const char *pool, const uint32_t *off, int trim,
                       const char *s, size_t n) {
    for (uint32_t i = (uint32_t)tok_hash(s, n) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t v = m->slots[i];
        if (!v) return -1;
        size_t kn;
        const char *k = key_of(pool, off, trim, v - 1, &kn);
        if (kn == n && memcmp(k, s, n) == 0) return (int32_t)(v - 1);
    }
}

/* Inserts id under its own key; an id already stored under an equal key is replaced. */
static void strmap_put(tok_strmap *m, const char *pool, const uint32_t *off, int trim,
                       uint32_t id) {
    size_t n;
    const char *s = key_of(pool, off, trim, id, &n);
    for (uint32_t i = (uint32_t)tok_hash(s, n) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t v = m->slots[i];
        size_t kn = 0;
        const char *k = v ? key_of(pool, off, trim, v - 1, &kn) : NULL;
        if (!v || (kn == n && memcmp(k, s, n) == 0)) {
            m->slots[i] = id + 1;
            return;
        }
    }
}

/* ---- JSON helpers ------------------------------------------------------------------------ */

/* Reads an optional boolean field; absent or null gives def. */
static int get_bool(const cJSON *obj, const char *key, int def, int *out, const char *where,
                    dsv4_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) { *out = def; return 0; }
    if (!cJSON_IsBool(v))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s.%s must be a boolean", where, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

static const char *get_type(const cJSON *obj) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* A JSON number that is a whole id in [0, TOK_MAX_ID). */
static int get_id(const cJSON *v, int32_t *id) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < TOK_MAX_ID) || d != (double)(int32_t)d) return -1;
    *id = (int32_t)d;
    return 0;
}

/* ---- normalizer / pre-tokenizer / decoder ------------------------------------------------ */

static int check_normalizer(const cJSON *n, dsv4_err *err) {
    if (!n || cJSON_IsNull(n)) return 0;
    if (!cJSON_IsObject(n)) return dsv4_fail(err, DSV4_ERR_FORMAT, "normalizer must be an object or null");
    const char *type = get_type(n);
    if (!type) return dsv4_fail(err, DSV4_ERR_FORMAT, "normalizer has no \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "normalizer Sequence needs a \"normalizers\" array");
        const cJSON *e;
        cJSON_ArrayForEach(e, list) {
            int rc = check_normalizer(e, err);
            if (rc) return rc;
        }
        return 0;
    }
    // Only identity normalizers are implemented: a real one (NFC, Lowercase, Replace ...)
    // would change the ids, so it is refused rather than silently skipped.
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "normalizer type '%s' is not supported", type);
}

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* tokenizers compiles its patterns with Oniguruma, whose \s is the Unicode White_Space
 * property. PCRE2's \s (UCP mode) also takes U+180E, which stopped being a space in
 * Unicode 6.3, so \s and \S are spelled out as the property. Escapes are copied in pairs,
 * so an escaped backslash followed by 's' stays as it is. Returns a malloc'ed pattern. */
static char *onig_to_pcre2(const char *pat, size_t n, size_t *out_n) {
    static const char ws[] = "\\p{White_Space}";
    char *out = malloc(n / 2 * (sizeof ws - 1) + n + 1);  // each "\s" (2 bytes) may grow to 15
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (pat[i] == '\\' && i + 1 < n && (pat[i + 1] == 's' || pat[i + 1] == 'S')) {
            memcpy(out + k, ws, sizeof ws - 1);
            if (pat[i + 1] == 'S') out[k + 1] = 'P';
            k += sizeof ws - 1;
            i++;
        } else if (pat[i] == '\\' && i + 1 < n) {
            out[k++] = pat[i++];
            out[k++] = pat[i];
        } else {
            out[k++] = pat[i];
        }
    }
    out[k] = 0;
    *out_n = k;
    return out;
}

static int compile_regex(const char *pat, size_t n, int literal, pcre2_code **out, dsv4_err *err) {
    int ec;
    PCRE2_SIZE eoff;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // UCP is refused with LITERAL
    size_t pn = n;
    char *p = literal ? NULL : onig_to_pcre2(pat, n, &pn);
    if (!literal && !p) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory");
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(p ? p : pat), pn, opts, &ec, &eoff, NULL);
    free(p);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return dsv4_fail(err, DSV4_ERR_FORMAT, "pre_tokenizer regex /%s/ is invalid: %s", pat, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // without JIT pcre2_match interprets
    *out = re;
    return 0;
}

static int add_stage(dsv4_tokenizer *t, dsv4_err *err) {
    if (t->n_stages == TOK_MAX_STAGES)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "pre_tokenizer has more than %d stages", TOK_MAX_STAGES);
    tok_stage *s = &t->stages[t->n_stages++];
    memset(s, 0, sizeof *s);
    s->behavior = SPLIT_ISOLATED;
    return 0;
}

static int load_pre_tokenizer(dsv4_tokenizer *t, const cJSON *p, int *byte_level, dsv4_err *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    if (!cJSON_IsObject(p)) return dsv4_fail(err, DSV4_ERR_FORMAT, "pre_tokenizer must be an object or null");
    const char *type = get_type(p);
    if (!type) return dsv4_fail(err, DSV4_ERR_FORMAT, "pre_tokenizer has no \"type\"");
    int rc;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "pre_tokenizer Sequence needs a \"pretokenizers\" array");
        const cJSON *e;
        cJSON_ArrayForEach(e, list) {
            if ((rc = load_pre_tokenizer(t, e, byte_level, err))) return rc;
        }
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = pat ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
        const cJSON *str = pat ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
        const cJSON *src = re ? re : str;
        if (!cJSON_IsObject(pat) || !cJSON_IsString(src))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "pre_tokenizer Split needs \"pattern\": {\"Regex\" or \"String\": string}");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        int b = -1;
        for (int i = 0; i < 5 && cJSON_IsString(beh); i++)
            if (strcmp(beh->valuestring, names[i]) == 0) b = i;
        if (b < 0)
            return dsv4_fail(err, DSV4_ERR_FORMAT, "pre_tokenizer Split behavior %s%s%s is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
                             cJSON_IsString(beh) ? "'" : "", cJSON_IsString(beh) ? beh->valuestring : "(missing)", cJSON_IsString(beh) ? "'" : "");
        if ((rc = add_stage(t, err))) return rc;
        tok_stage *s = &t->stages[t->n_stages - 1];
        s->behavior = b;
        if ((rc = get_bool(p, "invert", 0, &s->invert, "pre_tokenizer Split", err))) return rc;
        return compile_regex(src->valuestring, strlen(src->valuestring), src == str, &s->re, err);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        int use_regex = 1;
        if ((rc = add_stage(t, err))) return rc;
        tok_stage *s = &t->stages[t->n_stages - 1];
        // tokenizers' defaults for a ByteLevel written without these fields.
        if ((rc = get_bool(p, "add_prefix_space", 1, &s->add_prefix_space, "pre_tokenizer ByteLevel", err))) return rc;
        if ((rc = get_bool(p, "use_regex", 1, &use_regex, "pre_tokenizer ByteLevel", err))) return rc;
        *byte_level = 1;
        if (use_regex) return compile_regex(GPT2_PATTERN, sizeof GPT2_PATTERN - 1, 0, &s->re, err);
        return 0;
    }
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "pre_tokenizer type '%s' is not supported", type);
}

/* Decoding is ByteLevel (or nothing said, taken to mean the same for a byte-level BPE). */
static int check_decoder(const cJSON *d, dsv4_err *err) {
    if (!d || cJSON_IsNull(d)) return 0;
    if (!cJSON_IsObject(d)) return dsv4_fail(err, DSV4_ERR_FORMAT, "decoder must be an object or null");
    const char *type = get_type(d);
    if (!type) return dsv4_fail(err, DSV4_ERR_FORMAT, "decoder has no \"type\"");
    if (strcmp(type, "ByteLevel") == 0) return 0;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (!cJSON_IsArray(list))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "decoder Sequence needs a \"decoders\" array");
        const cJSON *e;
        cJSON_ArrayForEach(e, list) {
            int rc = check_decoder(e, err);
            if (rc) return rc;
        }
        return 0;
    }
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "decoder type '%s' is not supported", type);
}

/* ---- model and added tokens ---------------------------------------------------------------- */

static int check_model(const cJSON *model, dsv4_err *err) {
    const char *type = get_type(model);
    if (type && strcmp(type, "BPE") != 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "model type '%s' is not supported (only BPE)", type);
    int b = 0, rc;
    if ((rc = get_bool(model, "byte_fallback", 0, &b, "model", err))) return rc;
    if (b) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "model.byte_fallback is not supported (byte-level BPE only)");
    static const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "model.%s is not supported", affixes[i]);
    }
    return 0;
}

static int trie_add(dsv4_tokenizer *t, const char *s, int added_index, int *cap) {
    int32_t node = 0;
    for (size_t i = 0; s[i]; i++) {
        uint8_t c = (uint8_t)s[i];
        int32_t ch = t->trie[node].child;
        while (ch >= 0 && t->trie[ch].byte != c) ch = t->trie[ch].sibling;
        if (ch < 0) {
            if (t->n_trie == *cap) {
                int ncap = *cap * 2;
                tok_trie_node *nt = realloc(t->trie, (size_t)ncap * sizeof *nt);
                if (!nt) return -1;
                t->trie = nt;
                *cap = ncap;
            }
            ch = t->n_trie++;
            t->trie[ch] = (tok_trie_node){.child = -1, .sibling = t->trie[node].child, .added = -1, .byte = c};
            t->trie[node].child = ch;
            if (node == 0) t->root[c] = ch;
        }
        node = ch;
    }
    t->trie[node].added = added_index;
    return 0;
}

/* Fills flags, the spelling pool, the decoded-bytes pool and both lookup maps, merges, the
 * added-token trie. spell_of[id] points into the JSON tree. */
static int build(dsv4_tokenizer *t, const cJSON *vocab, const cJSON *merges, const cJSON *added,
                 dsv4_err *err) {
    int rc = 0;
    const char **spell_of = NULL;
    char *scratch = NULL;
    const cJSON *e;

    // Largest id, so that the per-id tables can be sized.
    int32_t max_id = -1, id;
    int n_vocab = 0;
    cJSON_ArrayForEach(e, vocab) {
        if (get_id(e, &id))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "model.vocab['%s'] is not an id in [0, %d)", e->string, TOK_MAX_ID);
        if (id > max_id) max_id = id;
        n_vocab++;
    }
    if (n_vocab == 0) return dsv4_fail(err, DSV4_ERR_FORMAT, "model.vocab is empty");
    int n_added = cJSON_GetArraySize(added);
    int i = 0;
    cJSON_ArrayForEach(e, added) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsObject(e) || get_id(cJSON_GetObjectItemCaseSensitive(e, "id"), &id))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "added_tokens[%d] needs a numeric \"id\" in [0, %d)", i, TOK_MAX_ID);
        if (!cJSON_IsString(c) || !c->valuestring[0])
            return dsv4_fail(err, DSV4_ERR_FORMAT, "added_tokens[%d] (id %d) needs a non-empty string \"content\"", i, id);
        if (id > max_id) max_id = id;
        i++;
    }
    t->n_ids = max_id + 1;
    size_t n_ids = (size_t)t->n_ids;

    t->flags = calloc(n_ids, 1);
    spell_of = calloc(n_ids, sizeof *spell_of);
    t->spell_off = malloc((n_ids + 1) * sizeof *t->spell_off);
    t->bytes_off = malloc((n_ids + 1) * sizeof *t->bytes_off);
    t->added = calloc(n_added ? (size_t)n_added : 1, sizeof *t->added);
    if (!t->flags || !spell_of || !t->spell_off || !t->bytes_off || !t->added) goto nomem;

    cJSON_ArrayForEach(e, vocab) {
        get_id(e, &id);
        if (spell_of[id]) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "model.vocab: id %d is given to both '%s' and '%s'", id, spell_of[id], e->string);
            goto done;
        }
        spell_of[id] = e->string;
        t->flags[id] = TOK_HAS | TOK_VOCAB;
    }

    // Pools: the spelling of each id (NUL-terminated) and the bytes it decodes to.
    size_t spell_total = 0;
    for (size_t k = 0; k < n_ids; k++) spell_total += spell_of[k] ? strlen(spell_of[k]) + 1 : 0;
    size_t added_total = 0;
    cJSON_ArrayForEach(e, added) added_total += strlen(cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring) + 1;
    if (spell_total + added_total > UINT32_MAX / 2) {
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "token strings take more than 2 GiB");
        goto done;
    }

    // An added token may repeat a vocabulary entry (same id, same string, as DeepSeek's
    // BOS/EOS do); an id given to two different strings would decode one of them wrongly.
    i = 0;
    cJSON_ArrayForEach(e, added) {
        get_id(cJSON_GetObjectItemCaseSensitive(e, "id"), &id);
        const char *content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        if (t->flags[id] & TOK_ADDED) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "added_tokens[%d] '%s' has id %d, which an earlier added token "
                           "'%s' has too", i, content, id, spell_of[id]);
            goto done;
        }
        if (spell_of[id] && strcmp(spell_of[id], content)) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "added_tokens[%d] '%s' has id %d, which model.vocab gives to '%s'",
                           i, content, id, spell_of[id]);
            goto done;
        }
        if (spell_of[id]) spell_total -= strlen(spell_of[id]) + 1;
        spell_of[id] = content;
        spell_total += strlen(spell_of[id]) + 1;
        int special = 0, lstrip = 0, rstrip = 0, single = 0, normalized = 0;
        if ((rc = get_bool(e, "special", 0, &special, "added_tokens[]", err)) ||
            (rc = get_bool(e, "lstrip", 0, &lstrip, "added_tokens[]", err)) ||
            (rc = get_bool(e, "rstrip", 0, &rstrip, "added_tokens[]", err)) ||
            (rc = get_bool(e, "single_word", 0, &single, "added_tokens[]", err)) ||
            // tokenizers' default: special tokens are matched on the raw text.
            (rc = get_bool(e, "normalized", !special, &normalized, "added_tokens[]", err)))
            goto done;
        t->flags[id] = (uint8_t)((t->flags[id] & TOK_VOCAB) | TOK_HAS | TOK_ADDED | (special ? TOK_SPECIAL : 0));
        t->added[i] = (tok_added){.id = id, .lstrip = (uint8_t)lstrip, .rstrip = (uint8_t)rstrip,
                                  .single_word = (uint8_t)single, .normalized = (uint8_t)normalized};
        t->has_added_class[normalized] = 1;
        i++;
    }
    t->n_added = n_added;

    t->spell = malloc(spell_total ? spell_total : 1);
    t->bytes = malloc(spell_total ? spell_total : 1);  // decoding never lengthens a spelling
    if (!t->spell || !t->bytes) goto nomem;
    uint32_t byte_cp[256];
    int16_t cp_byte[324];
    byte_level_alphabet(byte_cp, cp_byte);
    uint32_t so = 0, bo = 0;
    for (size_t k = 0; k < n_ids; k++) {
        t->spell_off[k] = so;
        t->bytes_off[k] = bo;
        if (!spell_of[k]) continue;
        size_t n = strlen(spell_of[k]);
        memcpy(t->spell + so, spell_of[k], n + 1);
        so += (uint32_t)n + 1;
        bo += (uint32_t)byte_level_decode(spell_of[k], cp_byte, t->bytes + bo);
    }
    t->spell_off[n_ids] = so;
    t->bytes_off[n_ids] = bo;

    // Spelling map over the vocabulary alone first: merges name vocabulary tokens.
    if (strmap_init(&t->by_spell, n_ids)) goto nomem;
    for (size_t k = 0; k < n_ids; k++)
        if (t->flags[k] & TOK_VOCAB) strmap_put(&t->by_spell, t->spell, t->spell_off, 1, (uint32_t)k);
    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t n = utf8_put(s, byte_cp[b]);
        t->byte_id[b] = tok_strmap_get(&t->by_spell, t->spell, t->spell_off, 1, s, n);
    }
    if (t->ignore_merges) {
        if (strmap_init(&t->by_bytes, n_ids)) goto nomem;
        for (size_t k = 0; k < n_ids; k++)
            if (t->flags[k] & TOK_VOCAB) strmap_put(&t->by_bytes, t->bytes, t->bytes_off, 0, (uint32_t)k);
    }

    // Merges: "left right" strings (older files) or ["left", "right"] pairs.
    int n_merges = cJSON_GetArraySize(merges);
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n_merges) cap *= 2;
    t->merges = malloc(cap * sizeof *t->merges);
    scratch = malloc(2 * 1024 + 2);
    if (!t->merges || !scratch) goto nomem;
    for (uint64_t k = 0; k < cap; k++) t->merges[k].key = UINT64_MAX;
    t->merge_mask = cap - 1;
    int rank = 0;
    cJSON_ArrayForEach(e, merges) {
        const char *l, *r;
        size_t ln, rn;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == e->valuestring || !sp[1]) {
                rc = dsv4_fail(err, DSV4_ERR_FORMAT, "model.merges[%d] '%s' is not two tokens separated by one space", rank, e->valuestring);
                goto done;
            }
            l = e->valuestring, ln = (size_t)(sp - l), r = sp + 1, rn = strlen(r);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            l = e->child->valuestring, ln = strlen(l), r = e->child->next->valuestring, rn = strlen(r);
        } else {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "model.merges[%d] is neither a string nor a pair of strings", rank);
            goto done;
        }
        if (ln + rn > 2048) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "model.merges[%d] is longer than 2048 bytes", rank);
            goto done;
        }
        int32_t a = tok_strmap_get(&t->by_spell, t->spell, t->spell_off, 1, l, ln);
        int32_t b = tok_strmap_get(&t->by_spell, t->spell, t->spell_off, 1, r, rn);
        memcpy(scratch, l, ln);
        memcpy(scratch + ln, r, rn);
        int32_t c = tok_strmap_get(&t->by_spell, t->spell, t->spell_off, 1, scratch, ln + rn);
        if (a < 0 || b < 0) {
            int left = a < 0;
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "model.merges[%d] '%.*s %.*s': the %s token is not in the vocabulary",
                           rank, (int)ln, l, (int)rn, r, left ? "left" : "right");
            goto done;
        }
        if (c < 0) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "model.merges[%d] '%.*s %.*s': the merged token '%.*s' is not in the vocabulary",
                           rank, (int)ln, l, (int)rn, r, (int)(ln + rn), scratch);
            goto done;
        }
        // A repeated pair keeps its last rank, as tokenizers' HashMap collect does.
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint64_t s = tok_merge_hash(key) & t->merge_mask;
        while (t->merges[s].key != UINT64_MAX && t->merges[s].key != key) s = (s + 1) & t->merge_mask;
        t->merges[s] = (tok_merge){.key = key, .rank = rank, .id = c};
        rank++;
    }

    // Then added tokens join the spelling map, winning over vocabulary spellings.
    for (int k = 0; k < n_added; k++) strmap_put(&t->by_spell, t->spell, t->spell_off, 1, (uint32_t)t->added[k].id);

    // Trie of added-token contents for the leftmost-longest scan of the raw text.
    int trie_cap = 256;
    t->trie = malloc((size_t)trie_cap * sizeof *t->trie);
    if (!t->trie) goto nomem;
    t->trie[0] = (tok_trie_node){.child = -1, .sibling = -1, .added = -1, .byte = 0};
    t->n_trie = 1;
    for (int b = 0; b < 256; b++) t->root[b] = -1;
    for (int k = 0; k < n_added; k++)
        if (trie_add(t, t->spell + t->spell_off[t->added[k].id], k, &trie_cap)) goto nomem;
    goto done;

nomem:
    rc = dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory building the tokenizer (%d ids)", t->n_ids);
done:
    free(spell_of);
    free(scratch);
    return rc;
}

static int load_root(dsv4_tokenizer *t, const cJSON *root, dsv4_err *err) {
    int rc;
    if (!cJSON_IsObject(root)) return dsv4_fail(err, DSV4_ERR_FORMAT, "top level is not a JSON object");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return dsv4_fail(err, DSV4_ERR_FORMAT, "missing or non-object \"model\"");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) return dsv4_fail(err, DSV4_ERR_FORMAT, "missing or non-object \"model.vocab\"");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) return dsv4_fail(err, DSV4_ERR_FORMAT, "missing or non-array \"model.merges\"");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "\"added_tokens\" must be an array");
    if ((rc = check_model(model, err))) return rc;
    if ((rc = get_bool(model, "ignore_merges", 0, &t->ignore_merges, "model", err))) return rc;
    if ((rc = check_normalizer(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err))) return rc;
    int byte_level = 0;
    if ((rc = load_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &byte_level, err))) return rc;
    if (!byte_level)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "pre_tokenizer has no ByteLevel step: not a byte-level BPE tokenizer");
    if ((rc = check_decoder(cJSON_GetObjectItemCaseSensitive(root, "decoder"), err))) return rc;
    return build(t, vocab, merges, cJSON_IsArray(added) ? added : NULL, err);
}

int dsv4_tokenizer_load_json(const char *json, size_t len, dsv4_tokenizer **out, dsv4_err *err) {
    *out = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end && end >= json ? (size_t)(end - json) : 0;
        return dsv4_fail(err, DSV4_ERR_FORMAT, "not valid JSON (error near byte %zu of %zu)", at, len);
    }
    dsv4_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory");
    }
    t->cache = calloc(TOK_CACHE_SLOTS, sizeof *t->cache);
    int mu = t->cache && !pthread_mutex_init(&t->cache_mu, NULL);
    if (mu && pthread_mutex_init(&t->lazy_mu, NULL)) {
        pthread_mutex_destroy(&t->cache_mu);
        mu = 0;
    }
    if (!mu) {
        free(t->cache);
        free(t);
        cJSON_Delete(root);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory");
    }
    int rc = load_root(t, root, err);
    cJSON_Delete(root);
    if (!rc && !(t->text_mask = malloc((size_t)t->n_ids * sizeof *t->text_mask)))
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory");
    for (int id = 0; !rc && id < t->n_ids; id++) t->text_mask[id] = (t->flags[id] & TOK_HAS) ? 0.0f : -INFINITY;
    if (rc) {
        dsv4_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int dsv4_tokenizer_load(const char *path, dsv4_tokenizer **out, dsv4_err *err) {
    *out = NULL;
    size_t size;
    char *buf = dsv4_read_regular_file(path, 0, &size, err);
    if (!buf) {
        dsv4_err_prefix(err, "tokenizer");
        return err ? err->code : DSV4_ERR_IO;
    }
    int rc = dsv4_tokenizer_load_json(buf, size, out, err);
    free(buf);
    if (rc) dsv4_err_prefix(err, "tokenizer '%s'", path);
    return rc;
}

void dsv4_tokenizer_free(dsv4_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_stages; i++) pcre2_code_free(t->stages[i].re);
    if (t->cache) pthread_mutex_destroy(&t->cache_mu);
    if (t->cache) pthread_mutex_destroy(&t->lazy_mu);
    if (t->lazy) t->lazy_drop(t->lazy);
    free(t->cache);
    free(t->flags);
    free(t->text_mask);
    free(t->spell);
    free(t->spell_off);
    free(t->bytes);
    free(t->bytes_off);
    free(t->by_spell.slots);
    free(t->by_bytes.slots);
    free(t->merges);
    free(t->added);
    free(t->trie);
    free(t);
}

/* ---- lookups ------------------------------------------------------------------------------ */

int dsv4_tok_vocab_size(const dsv4_tokenizer *t) { return t->n_ids; }

const float *dsv4_tok_text_mask(const dsv4_tokenizer *t) { return t->text_mask; }

void *dsv4_tok_lazy(const dsv4_tokenizer *t, void *(*build)(const dsv4_tokenizer *), void (*drop)(void *)) {
    dsv4_tokenizer *w = (dsv4_tokenizer *)t; /* the slot is the one mutable part, under lazy_mu */
    pthread_mutex_lock(&w->lazy_mu);
    if (!w->lazy && (w->lazy = build(t))) w->lazy_drop = drop;
    void *r = w->lazy;
    pthread_mutex_unlock(&w->lazy_mu);
    return r;
}

static inline int has_id(const dsv4_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && (t->flags[id] & TOK_HAS);
}

int32_t dsv4_tok_token_to_id(const dsv4_tokenizer *t, const char *token) {
    return tok_strmap_get(&t->by_spell, t->spell, t->spell_off, 1, token, strlen(token));
}

const char *dsv4_tok_id_to_token(const dsv4_tokenizer *t, int32_t id) {
    return has_id(t, id) ? t->spell + t->spell_off[id] : NULL;
}

const char *dsv4_tok_id_bytes(const dsv4_tokenizer *t, int32_t id, size_t *len) {
    if (!has_id(t, id)) { *len = 0; return NULL; }
    *len = t->bytes_off[id + 1] - t->bytes_off[id];
    return t->bytes + t->bytes_off[id];
}

int dsv4_tok_is_added(const dsv4_tokenizer *t, int32_t id) {
    return has_id(t, id) && (t->flags[id] & TOK_ADDED) ? 1 : 0;
}

int dsv4_tok_is_special(const dsv4_tokenizer *t, int32_t id) {
    return has_id(t, id) && (t->flags[id] & TOK_SPECIAL) ? 1 : 0;
}
