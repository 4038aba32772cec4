/* tool_match.c — the DSML tool_calls block as a byte automaton (tool_match.h): literal
 * markup and sets of alternatives (tool names, property names, branches) matched by
 * narrowing a range of a sorted list, and the values run through json_match.c, each from
 * its property's node of the tool's compiled parameters schema. */
#include "sample/tool_match.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/err.h"

#define TC_OPEN "<" DSV4_DSML "tool_calls>"
#define TC_CLOSE "</" DSV4_DSML "tool_calls>"
#define INV_OPEN "<" DSV4_DSML "invoke name=\""
#define INV_CLOSE "</" DSV4_DSML "invoke>"
#define PAR_OPEN "<" DSV4_DSML "parameter name=\""
#define PAR_CLOSE "</" DSV4_DSML "parameter>"

/* the sets: the fixed ones, then the tool names, then each tool's property names */
enum { S_OPEN_REQ, S_OPEN_AUTO, S_STRING, S_FLAG, S_NL, S_BODY, S_NEXT, S_FIXED, S_TNAME = S_FIXED, S_PNAME };
/* branches: idx of the fixed sets' alternatives */
enum { B_FALSE = 0, B_TRUE = 1, B_PAR = 0, B_INV_CLOSE = 1, B_INV = 0, B_TC_CLOSE = 1 };

static const int PC_LEN = (int)sizeof PAR_CLOSE - 1;
static const int OPEN_LEN = (int)sizeof TC_OPEN - 1;
/* free text that holds this much of the opener holds "｜DSML｜", which the parser refuses
 * as stray markup: the text may not end there */
static const int OPEN_STRAY = (int)sizeof("<" DSV4_DSML) - 1;

struct tm_tools {
    int mode, single;
    tm_set fixed[S_FIXED];
    tm_set names;         /* NAME + "\">\n" (idx: the tool) */
    tm_tool *tools;       /* (n_tools) in the request's order */
    int n_tools, strict;
    dsv4_json_schema *any; /* a free tool's values */
    dsv4_json_schema *doc; /* the JSON document the text may be instead, or NULL */
};

/* ---- compile ----------------------------------------------------------------------- */

static int alt_cmp(const void *a, const void *b) {
    const tm_alt *x = a, *y = b;
    const int n = x->len < y->len ? x->len : y->len;
    const int c = memcmp(x->s, y->s, (size_t)n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void set_free(tm_set *s) {
    for (int i = 0; i < s->n; i++) free(s->a[i].s);
    free(s->a);
    memset(s, 0, sizeof *s);
}

/* appends a + b as an alternative meaning idx; -1 out of memory */
static int set_add(tm_set *s, const char *a, size_t an, const char *b, int idx) {
    tm_alt *na = realloc(s->a, (size_t)(s->n + 1) * sizeof *na);
    if (!na) return -1;
    s->a = na;
    const size_t bn = strlen(b);
    char *t = malloc(an + bn + 1);
    if (!t) return -1;
    memcpy(t, a, an);
    memcpy(t + an, b, bn + 1);
    s->a[s->n++] = (tm_alt){t, (int)(an + bn), idx};
    return 0;
}

/* (an empty set has no array: qsort's pointer must not be NULL even for no elements) */
static void set_sort(tm_set *s) {
    if (s->n > 1) qsort(s->a, (size_t)s->n, sizeof *s->a, alt_cmp);
}

/* a name the block can carry: no '"', '<' or control byte (and not empty) */
static int writable(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '"' || c == '<' || c == 0x7f) return 0;
    }
    return 1;
}

/* 1 when node takes strings only (bounded through anyOf) */
static int str_only(const dsv4_json_schema *s, int node, int depth) {
    const json_node *n = &s->nodes[node];
    if (depth > 8) return 0;
    if (n->kind == JN_TYPED) return n->types == JT_STR;
    if (n->kind == JN_LIT) {
        for (int i = 0; i < n->n_lits; i++)
            if (s->lits[n->lits + i].text[0] != '"') return 0;
        return n->n_lits > 0;
    }
    for (int i = 0; i < n->n_alts; i++)
        if (!str_only(s, s->kids[n->alts + i], depth + 1)) return 0;
    return n->n_alts > 0;
}

static void js_init_at(const dsv4_json_schema *s, int node, json_state *st) {
    json_state_init(s, st);
    st->f[0][1].node = (uint16_t)node; /* the root frame (F_VALUE) of node instead of 0 */
}

/* A strict tool's parameters: an object of declared properties. */
static int compile_strict(tm_tool *tt, const char *name, const cJSON *params, dsv4_err *err) {
    char *text = params ? cJSON_PrintUnformatted(params) : strdup("{\"type\":\"object\",\"properties\":{}}");
    if (!text) return dsv4_fail(err, DSV4_ERR_NOMEM, "tools: out of memory");
    /* no value may hold the closing tag (the parser would end the value there): a const,
     * enum value or property name holding it is refused, every pattern cut to the strings
     * without it (json_schema_compile_without), so that no value can run into a dead end */
    int rc = json_schema_compile_without(text, strlen(text), PAR_CLOSE, " (a tool call's value cannot: it ends the parameter)",
                                         &tt->schema, err);
    free(text);
    if (rc) {
        dsv4_err_prefix(err, "strict tool '%.100s': parameters", name);
        return rc;
    }
    const dsv4_json_schema *s = tt->schema;
    int r = 0; /* node 0 is an anyOf of the root alone */
    while (s->nodes[r].kind == JN_ANYOF && s->nodes[r].n_alts == 1) r = s->kids[s->nodes[r].alts];
    tt->root = r;
    const json_node *root = &s->nodes[r];
    /* no properties: no parameters (strict mode's additionalProperties false) */
    if (root->kind != JN_TYPED || root->types != JT_OBJ || (root->additional >= 0 && root->n_props))
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "strict tool '%.100s': parameters must be an object "
                         "schema with \"properties\" and \"additionalProperties\": false", name);
    if (root->n_props > TM_MAX_PARAMS)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "strict tool '%.100s': more than %d properties", name,
                         TM_MAX_PARAMS);
    json_state *a = malloc(2 * sizeof *a);
    if (!a) return dsv4_fail(err, DSV4_ERR_NOMEM, "tools: out of memory");
    for (int i = 0; i < root->n_props; i++) {
        const json_prop *p = &s->props[root->props + i];
        /* the key as JSON text, quotes included: the name is its inside, unescaped here
         * only when it has no escape (the block writes the name raw) */
        const char *k = p->key + 1;
        const size_t kn = (size_t)p->key_len - 2;
        if (!writable(k, kn) || memchr(k, '\\', kn)) {
            free(a);
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "strict tool '%.100s': property name %.100s cannot "
                             "be written in a tool call (a '\"', '\\\\', '<' or control character)", name, p->key);
        }
        if (set_add(&tt->pnames, k, kn, "\"", i)) { free(a); return dsv4_fail(err, DSV4_ERR_NOMEM, "tools: out of memory"); }
        const uint64_t bit = 1ull << i;
        tt->all |= bit;
        if (p->required) tt->required |= bit;
        if (str_only(s, p->node, 0)) tt->str_only |= bit;
        js_init_at(s, p->node, &a[0]);
        if (json_state_step(s, &a[0], '"', &a[1])) tt->can_str |= bit;
    }
    free(a);
    set_sort(&tt->pnames);
    return DSV4_OK;
}

int tm_compile(const char *tools, size_t len, int mode, int single, tm_tools **out, dsv4_err *err) {
    *out = NULL;
    cJSON *j = cJSON_ParseWithLength(tools, len);
    tm_tools *t = calloc(1, sizeof *t);
    int rc = DSV4_OK;
    if (!t) { cJSON_Delete(j); return dsv4_fail(err, DSV4_ERR_NOMEM, "tools: out of memory"); }
    t->mode = mode, t->single = single;
    if (!cJSON_IsArray(j) || !j->child) { rc = dsv4_fail(err, DSV4_ERR_FORMAT, "tools: not a non-empty JSON array"); goto done; }
    const int n = cJSON_GetArraySize(j);
    if (n > TM_MAX_TOOLS) { rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "tools: more than %d", TM_MAX_TOOLS); goto done; }
    t->tools = calloc((size_t)n, sizeof *t->tools);
    int oom = !t->tools;
    static const char *const open_req = "\n\n" TC_OPEN "\n" INV_OPEN, *const open_auto = "\n" INV_OPEN;
    oom = oom || set_add(&t->fixed[S_OPEN_REQ], open_req, strlen(open_req), "", 0) ||
          set_add(&t->fixed[S_OPEN_AUTO], open_auto, strlen(open_auto), "", 0) ||
          set_add(&t->fixed[S_STRING], " string=\"", 9, "", 0) ||
          set_add(&t->fixed[S_FLAG], "false\">", 7, "", B_FALSE) || set_add(&t->fixed[S_FLAG], "true\">", 6, "", B_TRUE) ||
          set_add(&t->fixed[S_NL], "\n", 1, "", 0) ||
          set_add(&t->fixed[S_BODY], PAR_OPEN, strlen(PAR_OPEN), "", B_PAR) ||
          set_add(&t->fixed[S_BODY], INV_CLOSE "\n", strlen(INV_CLOSE "\n"), "", B_INV_CLOSE) ||
          set_add(&t->fixed[S_NEXT], INV_OPEN, strlen(INV_OPEN), "", B_INV) ||
          set_add(&t->fixed[S_NEXT], TC_CLOSE, strlen(TC_CLOSE), "", B_TC_CLOSE);
    if (oom || dsv4_json_schema_compile("true", 4, &t->any, err)) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "tools: out of memory"); goto done; }
    for (int i = 0; i < S_FIXED; i++) set_sort(&t->fixed[i]);
    int k = 0;
    for (const cJSON *x = j->child; x; x = x->next, k++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(x, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(nm)) { rc = dsv4_fail(err, DSV4_ERR_FORMAT, "tools[%d]: no function.name", k); goto done; }
        const char *name = nm->valuestring;
        if (!writable(name, strlen(name))) {
            rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "tool '%.100s': the name cannot be written in a tool call "
                           "(empty, or a '\"', '<' or control character)", name);
            goto done;
        }
        for (int i = 0; i < t->names.n; i++)
            if (!strncmp(t->names.a[i].s, name, strlen(name)) && t->names.a[i].s[strlen(name)] == '"') {
                rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "tool '%.100s': two tools have this name", name);
                goto done;
            }
        if (set_add(&t->names, name, strlen(name), "\">\n", k)) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "tools: out of memory"); goto done; }
        t->n_tools = k + 1;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fn, "strict"))) {
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
            if (params && cJSON_IsNull(params)) params = NULL;
            if ((rc = compile_strict(&t->tools[k], name, params, err))) goto done;
            t->strict = 1;
        }
    }
    set_sort(&t->names);
done:
    cJSON_Delete(j);
    if (rc) tm_free(t);
    else *out = t;
    return rc;
}

void tm_free(tm_tools *t) {
    if (!t) return;
    for (int i = 0; i < S_FIXED; i++) set_free(&t->fixed[i]);
    set_free(&t->names);
    for (int i = 0; i < t->n_tools; i++) {
        dsv4_json_schema_free(t->tools[i].schema);
        set_free(&t->tools[i].pnames);
    }
    free(t->tools);
    dsv4_json_schema_free(t->any);
    dsv4_json_schema_free(t->doc);
    free(t);
}

int tm_set_doc(tm_tools *t, const char *schema, size_t len, dsv4_err *err) {
    if (t->mode != TM_AUTO || t->doc)
        return dsv4_fail(err, DSV4_ERR_ARG, "tools: a JSON document goes with TM_AUTO tools, once");
    return dsv4_json_schema_compile(schema, len, &t->doc, err);
}

int tm_any_strict(const tm_tools *t) { return t->strict; }

int tm_max_stacks(const tm_tools *t) {
    int m = t->doc && t->doc->max_stacks > t->any->max_stacks ? t->doc->max_stacks : t->any->max_stacks;
    for (int i = 0; i < t->n_tools; i++)
        if (t->tools[i].schema && t->tools[i].schema->max_stacks > m) m = t->tools[i].schema->max_stacks;
    return m;
}

/* ---- the automaton --------------------------------------------------------------------- */

static const tm_set *set_of(const tm_tools *t, const tm_state *st) {
    if (st->set < S_FIXED) return &t->fixed[st->set];
    if (st->set == S_TNAME) return &t->names;
    return &t->tools[st->tool].pnames;
}

static const dsv4_json_schema *val_schema(const tm_tools *t, const tm_state *st) {
    return st->prop >= 0 ? t->tools[st->tool].schema : t->any;
}

/* out = in after n bytes (out may not be in); 0 once dead. n may be 0 (a copy). */
static int js_feed(const dsv4_json_schema *s, const json_state *in, const uint8_t *b, int n, json_state *out) {
    if (n == 0) { json_state_copy(out, in); return 1; }
    if (n == 1) return json_state_step(s, in, b[0], out);
    json_state tmp;
    const json_state *src = in;
    for (int i = 0; i < n; i++) {
        /* the last byte lands in out: alternate so that it does */
        json_state *dst = (n - 1 - i) % 2 == 0 ? out : &tmp;
        if (!json_state_step(s, src, b[i], dst)) return 0;
        src = dst;
    }
    return 1;
}

/* the JSON bytes of raw string byte c (string="true" values: the characters themselves) */
static int escape(uint8_t c, uint8_t *e) {
    static const char hex[] = "0123456789abcdef";
    if (c == '"' || c == '\\') { e[0] = '\\', e[1] = c; return 2; }
    if (c == '\n') { e[0] = '\\', e[1] = 'n'; return 2; }
    if (c == '\t') { e[0] = '\\', e[1] = 't'; return 2; }
    if (c == '\r') { e[0] = '\\', e[1] = 'r'; return 2; }
    if (c < 0x20) { memcpy(e, "\\u00", 4); e[4] = (uint8_t)hex[c >> 4], e[5] = (uint8_t)hex[c & 15]; return 6; }
    e[0] = c;
    return 1;
}

/* 1 when the value in js may end now (a string="true" value: with its closing quote) */
static int can_end(const tm_tools *t, const tm_state *st, const json_state *js) {
    const dsv4_json_schema *s = val_schema(t, st);
    if (!st->is_str) return json_state_accepting(s, js);
    json_state a;
    return json_state_step(s, js, '"', &a) && json_state_accepting(s, &a);
}

/* the value's raw bytes b[0..n) into JSON (escaped for string="true"), in -> out */
static int feed_raw(const tm_tools *t, const tm_state *st, const json_state *in, const uint8_t *b, int n,
                    json_state *out) {
    uint8_t e[6 * 24];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (st->is_str) m += escape(b[i], e + m);
        else e[m++] = b[i];
    }
    return js_feed(val_schema(t, st), in, e, m, out);
}

static void enter_set(tm_state *st, const tm_tools *t, int set) {
    st->phase = TP_ALT;
    st->set = (int16_t)set;
    st->off = 0;
    st->lo = 0;
    st->hi = set_of(t, st)->n;
}

/* whether alternative a of the state's set may be taken now */
static int viable(const tm_tools *t, const tm_state *st, const tm_alt *a) {
    const tm_tool *tt = st->tool >= 0 && st->tool < t->n_tools ? &t->tools[st->tool] : NULL;
    switch (st->set) {
    case S_PNAME: return !(st->used >> a->idx & 1);
    case S_FLAG:
        if (st->prop < 0) return 1;
        return a->idx == B_TRUE ? (int)(tt->can_str >> st->prop & 1) : !(tt->str_only >> st->prop & 1);
    case S_BODY:
        if (a->idx == B_PAR) return !tt->schema || (tt->all & ~st->used) != 0;
        return !tt->schema || (tt->required & ~st->used) == 0;
    case S_NEXT: return a->idx == B_TC_CLOSE || !t->single;
    default: return 1;
    }
}

/* the alternative a was written whole: what comes next (dst's js is filled here when a
 * value starts) */
static int take(const tm_tools *t, tm_state *st, const tm_alt *a) {
    switch (st->set) {
    case S_OPEN_REQ:
    case S_OPEN_AUTO: enter_set(st, t, S_TNAME); return 1;
    case S_TNAME:
        st->tool = a->idx;
        st->used = 0;
        enter_set(st, t, S_BODY);
        return 1;
    case S_PNAME: st->prop = (int16_t)a->idx; enter_set(st, t, S_STRING); return 1;
    case S_STRING: enter_set(st, t, S_FLAG); return 1;
    case S_FLAG: {
        st->is_str = a->idx == B_TRUE;
        st->phase = TP_VALUE;
        st->k = 0;
        st->ws = 0;
        const dsv4_json_schema *s = val_schema(t, st);
        const int node = st->prop >= 0 ? s->props[s->nodes[t->tools[st->tool].root].props + st->prop].node : 0;
        if (!st->is_str) { js_init_at(s, node, &st->js); return 1; }
        json_state a0;
        js_init_at(s, node, &a0);
        return json_state_step(s, &a0, '"', &st->js);
    }
    case S_NL: enter_set(st, t, S_BODY); return 1;
    case S_BODY:
        if (a->idx == B_INV_CLOSE) { st->n_inv++; enter_set(st, t, S_NEXT); return 1; }
        if (t->tools[st->tool].schema) enter_set(st, t, S_PNAME);
        else { st->phase = TP_FNAME; st->prop = -1; }
        return 1;
    case S_NEXT:
        if (a->idx == B_INV) enter_set(st, t, S_TNAME);
        else st->phase = TP_DONE;
        return 1;
    }
    return 0;
}

void tm_state_init(const tm_tools *t, tm_state *st) {
    memset(st, 0, offsetof(tm_state, js));
    st->tool = -1;
    st->prop = -1;
    if (t->doc) {
        enter_set(st, t, S_OPEN_REQ);
        st->doc = 1;
        json_state_init(t->doc, &st->js);
    } else if (t->mode == TM_AUTO) {
        st->phase = TP_FREE;
    } else {
        enter_set(st, t, S_OPEN_REQ);
    }
}

void tm_state_copy(tm_state *dst, const tm_state *src) {
    memcpy(dst, src, offsetof(tm_state, js));
    if (src->phase == TP_VALUE || src->phase == TP_DOC || src->doc) json_state_copy(&dst->js, &src->js);
}

static int alt_step(const tm_tools *t, tm_state *st, uint8_t c) {
    const tm_set *s = set_of(t, st);
    int lo = st->lo, hi = st->hi;
    while (lo < hi && !(s->a[lo].len > st->off && (uint8_t)s->a[lo].s[st->off] == c)) lo++;
    int h = lo;
    while (h < hi && s->a[h].len > st->off && (uint8_t)s->a[h].s[st->off] == c) h++;
    hi = h;
    int any = 0;
    for (int i = lo; i < hi && !any; i++) any = viable(t, st, &s->a[i]);
    if (!any) return 0;
    st->lo = lo, st->hi = hi, st->off++;
    /* no alternative is a prefix of another: the one that ends here is the only one */
    for (int i = lo; i < hi; i++)
        if (s->a[i].len == st->off) return viable(t, st, &s->a[i]) && take(t, st, &s->a[i]);
    return 1;
}

/* 1 when a JSON value's whitespace may be text, not between tokens: some reading inside a
 * string, a key, or a quoted part of an enum/const literal. (Any reading, not each: the
 * rule keeps noise short; a reading between tokens beside one in text may take a longer
 * run, within json_match's JSON_MAX_WS.) */
static int in_text(const tm_tools *t, const tm_state *st) {
    return json_state_in_quotes(val_schema(t, st), &st->js);
}

/* A value's byte. src's js: the value so far without the k pending bytes of PAR_CLOSE. */
static int value_step(const tm_tools *t, const tm_state *src, uint8_t c, tm_state *dst) {
    const uint8_t *pc = (const uint8_t *)PAR_CLOSE;
    const int k = src->k;
    if (k > 0 && c == pc[k]) {
        if (k + 1 == PC_LEN) { /* the value ends */
            if (!can_end(t, src, &src->js)) return 0;
            if (src->prop >= 0) dst->used |= 1ull << src->prop;
            enter_set(dst, t, S_NL);
            return 1;
        }
        dst->k = (uint16_t)(k + 1);
        json_state_copy(&dst->js, &src->js);
        if (can_end(t, src, &src->js)) return 1;
        json_state a;
        return feed_raw(t, src, &src->js, pc, k + 1, &a);
    }
    /* JSON values are written compact (as the encoder writes them): whitespace between
     * tokens is one ' ' at a time. (Noise, such as a random model's, would otherwise spend
     * its tokens on runs of it; no value needs any.) */
    const int ws = !src->is_str && (c == ' ' || c == '\n' || c == '\t' || c == '\r');
    const int in_str = ws && in_text(t, src);
    if (ws && !in_str && (c != ' ' || src->ws)) return 0;
    dst->ws = (uint8_t)(ws && !in_str);
    /* the pending bytes were the value's after all, then c */
    uint8_t b[32];
    int n = k;
    memcpy(b, pc, (size_t)k);
    if (c != '<') b[n++] = c;
    if (!feed_raw(t, src, &src->js, b, n, &dst->js)) return 0;
    dst->k = c == '<';
    if (c != '<' || can_end(t, dst, &dst->js)) return 1;
    json_state a;
    return feed_raw(t, dst, &dst->js, pc, 1, &a);
}

/* The document's byte: its JSON, and no "<｜DSML｜" (the opener's first OPEN_STRAY bytes,
 * matched as in free text) */
static int doc_step(const tm_tools *t, const tm_state *src, uint8_t c, tm_state *dst) {
    const uint8_t *o = (const uint8_t *)TC_OPEN;
    dst->k = c == o[src->k] ? (uint16_t)(src->k + 1) : c == '<';
    return dst->k < OPEN_STRAY && json_state_step(t->doc, &src->js, c, &dst->js);
}

/* The opener and the document both read (dst's header is src's): the opener goes on, with
 * the document while it lives, or the document alone from here */
static int doc_or_block(const tm_tools *t, const tm_state *src, uint8_t c, tm_state *dst) {
    const int doc = json_state_step(t->doc, &src->js, c, &dst->js);
    if (alt_step(t, dst, c)) {
        dst->doc = (uint8_t)doc;
        return 1;
    }
    memcpy(dst, src, offsetof(tm_state, js));
    dst->phase = TP_DOC;
    dst->doc = 0;
    dst->k = c == '<';
    return doc;
}

int tm_state_step(const tm_tools *t, const tm_state *src, uint8_t c, tm_state *dst) {
    memcpy(dst, src, offsetof(tm_state, js));
    switch (src->phase) {
    case TP_FREE: {
        const uint8_t *o = (const uint8_t *)TC_OPEN;
        /* '<' occurs once in the opener: a mismatch restarts */
        dst->k = c == o[src->k] ? (uint16_t)(src->k + 1) : c == '<';
        if (dst->k == OPEN_LEN) enter_set(dst, t, S_OPEN_AUTO);
        return 1;
    }
    case TP_ALT: return src->doc ? doc_or_block(t, src, c, dst) : alt_step(t, dst, c);
    case TP_FNAME:
        if (c == '"') { enter_set(dst, t, S_STRING); return 1; }
        return c >= 0x20 && c != '<' && c != 0x7f;
    case TP_VALUE: return value_step(t, src, c, dst);
    case TP_DOC: return doc_step(t, src, c, dst);
    default: return 0;
    }
}

int tm_state_feed(const tm_tools *t, tm_state st[2], int *cur, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!tm_state_step(t, &st[*cur], b[i], &st[*cur ^ 1])) return 0;
        *cur ^= 1;
    }
    return 1;
}

int tm_state_accepting(const tm_tools *t, const tm_state *st) {
    if (st->phase == TP_DOC) return json_state_accepting(t->doc, &st->js);
    return st->phase == TP_DONE || (st->phase == TP_FREE && st->k < OPEN_STRAY);
}

int tm_state_free(const tm_state *st) { return st->phase == TP_FREE; }

/* ---- the vocabulary walk ----------------------------------------------------------------- */

int tm_walk_init(tm_walk *w, const json_vocab *v, const dsv4_tokenizer *tok, int cap) {
    memset(w, 0, sizeof *w);
    w->n_st = v->max_len + 1;
    cap = cap < 1 ? 1 : cap > JSON_MAX_STACKS ? JSON_MAX_STACKS : cap;
    w->stride = (offsetof(tm_state, js) + json_state_size(cap) + 7) & ~(size_t)7;
    w->st = malloc((size_t)(w->n_st + 1) * w->stride);
    w->neutral = calloc((size_t)v->words, sizeof *w->neutral);
    w->space = calloc((size_t)v->words, sizeof *w->space);
    if (!w->st || !w->neutral || !w->space || json_walk_init(&w->jw, v, cap)) return -1;
    /* the ids that hold the whole closing tag (the fast path leaves them to tm_state_feed):
     * among those with a '>' (json_vocab.gt, in id order) */
    if (v->n_gt && !(w->close = malloc((size_t)v->n_gt * sizeof *w->close))) return -1;
    for (int k = 0; k < v->n_gt; k++) {
        const int32_t id = v->gt[k];
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(tok, id, &len);
        if (!b || len < (size_t)PC_LEN || dsv4_tok_is_added(tok, id)) continue;
        int hit = 0;
        for (size_t i = 0; i + (size_t)PC_LEN <= len && !hit; i++) hit = !memcmp(b + i, PAR_CLOSE, (size_t)PC_LEN);
        if (hit) w->close[w->n_close++] = id;
    }
    /* the plain ids: neutral, or stepped one by one (a '<' or 0x7f; "  " in a JSON value) */
    int n_lt = 0, n_dbl = 0;
    for (int i = 0; i < v->n_plain; i++) {
        const json_tok *p = &v->plain[i];
        if (memchr(p->b, '<', (size_t)p->len) || memchr(p->b, 0x7f, (size_t)p->len)) n_lt++;
        else if (memmem(p->b, (size_t)p->len, "  ", 2)) n_dbl++;
    }
    if ((n_lt && !(w->lt = malloc((size_t)n_lt * sizeof *w->lt))) || (n_dbl && !(w->dbl = malloc((size_t)n_dbl * sizeof *w->dbl))))
        return -1;
    for (int i = 0; i < v->n_plain; i++) {
        const json_tok *p = &v->plain[i];
        if (memchr(p->b, '<', (size_t)p->len) || memchr(p->b, 0x7f, (size_t)p->len)) {
            w->lt[w->n_lt++] = p->id;
            continue;
        }
        if (memmem(p->b, (size_t)p->len, "  ", 2)) w->dbl[w->n_dbl++] = p->id;
        w->neutral[p->id >> 6] |= 1ull << (p->id & 63);
        if (p->b[0] == ' ') w->space[p->id >> 6] |= 1ull << (p->id & 63);
    }
    return 0;
}

void tm_walk_free(tm_walk *w) {
    free(w->st);
    free(w->close);
    free(w->neutral);
    free(w->space);
    free(w->lt);
    free(w->dbl);
    json_walk_free(&w->jw);
    w->st = NULL;
    w->close = NULL;
    w->neutral = w->space = NULL;
    w->lt = w->dbl = NULL;
}

/* the walk's state at depth d (w->stride bytes each: a tm_state whose js holds the tools'
 * max_stacks, json_state_size) */
static tm_state *walk_st(const tm_walk *w, int d) { return (tm_state *)(void *)(w->st + (size_t)d * w->stride); }

/* sets the ids of trie nodes tr[from..to) (whole subtrees) whose bytes can follow walk_st(w, 0) */
static long walk(const tm_tools *t, const json_vocab *v, tm_walk *w, const json_trie *tr, int from, int to,
                 uint64_t *bits) {
    long steps = 0;
    for (int i = from; i < to;) {
        const int d = tr[i].depth;
        steps++;
        if (tm_state_step(t, walk_st(w, d - 1), tr[i].byte, walk_st(w, d))) {
            if (tr[i].tok >= 0) json_vocab_set_tok(v, bits, &tr[i]);
            i++;
        } else {
            i = (int)tr[i].skip;
        }
    }
    return steps;
}

static void load(tm_walk *w, const tm_state *st) { tm_state_copy(walk_st(w, 0), st); }

static long mask_k0(const tm_tools *t, const json_vocab *v, tm_walk *w, const tm_state *st, uint64_t *bits,
                    const dsv4_tokenizer *tok);

long tm_mask(const tm_tools *t, const json_vocab *v, tm_walk *w, const tm_state *st, uint64_t *bits,
             const dsv4_tokenizer *tok) {
    if ((st->phase != TP_VALUE && st->phase != TP_DOC) || st->k == 0) return mask_k0(t, v, w, st, bits, tok);
    /* k bytes of a tag matched (a value's closing tag pending, or "<｜DSML｜" begun in the
     * document): the ids that go on with it (its next byte first) step from st; all the
     * others step from the state without them, k = 0 (a value's pending bytes flushed into
     * it; the document's the same state: a mismatch restarts the match), its mask fast */
    const json_trie *tr = v->all;
    const uint8_t next = (uint8_t)(st->phase == TP_VALUE ? PAR_CLOSE : TC_OPEN)[st->k];
    int i = 0;
    while (i < v->n_all && tr[i].byte != next) i = (int)tr[i].skip; /* the depth-1 nodes */
    const int end = i < v->n_all ? (int)tr[i].skip : i;
    long steps = 0;
    tm_state *f = walk_st(w, w->n_st); /* the state without them (a slot of its own) */
    memcpy(f, st, offsetof(tm_state, js));
    f->k = 0;
    int alive = 1;
    if (st->phase == TP_DOC) json_state_copy(&f->js, &st->js);
    else alive = feed_raw(t, st, &st->js, (const uint8_t *)PAR_CLOSE, st->k, &f->js);
    if (alive) {
        steps += mask_k0(t, v, w, f, bits, tok);
        for (int j = i; j < end; j++) /* the ids under `next` are st's: cleared here */
            for (int32_t id = tr[j].tok; id >= 0; id = v->dup[id]) bits[id >> 6] &= ~(1ull << (id & 63));
    } else {
        memset(bits, 0, (size_t)v->words * sizeof *bits);
    }
    load(w, st);
    if (i < end) steps += walk(t, v, w, tr, i, end, bits);
    return steps;
}

/* the ids of list[0..n) whose bytes can follow walk_st(w, 0) set in bits (the others
 * cleared); the trie's states above depth 0 are scratch */
static long step_ids(const tm_tools *t, tm_walk *w, const int32_t *list, int n, uint64_t *bits,
                     const dsv4_tokenizer *tok) {
    long steps = 0;
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        const uint8_t *b = (const uint8_t *)dsv4_tok_id_bytes(tok, list[i], &len);
        int ok = 1;
        for (size_t j = 0; j < len && ok; j++) ok = tm_state_step(t, walk_st(w, (int)j), b[j], walk_st(w, (int)j + 1));
        if (ok) bits[list[i] >> 6] |= 1ull << (list[i] & 63);
        else bits[list[i] >> 6] &= ~(1ull << (list[i] & 63));
        steps += (long)len;
    }
    return steps;
}

/* The JSON part of a mask (a value's or the document's, k = 0, walk_st(w, 0) = st): a
 * neutral id follows st iff it follows st->js as JSON (schema s: json_mask, the in-string
 * bitset, the constrained strings' cache and shared walk; the document's neutral ids keep
 * its opener match at 0, no '<'); the spec trie walked and the lt ids stepped with the
 * whole state. */
static long json_part(const tm_tools *t, const json_vocab *v, tm_walk *w, const dsv4_json_schema *s,
                      const tm_state *st, uint64_t *bits, const dsv4_tokenizer *tok) {
    if (w->jw_schema != s) { /* its cache holds one schema's masks */
        json_walk_reset(&w->jw);
        w->jw_schema = s;
    }
    long steps = json_mask(s, v, &w->jw, &st->js, bits);
    for (int i = 0; i < v->words; i++) bits[i] &= w->neutral[i];
    steps += walk(t, v, w, v->spec, 0, v->n_spec, bits);
    return steps + step_ids(t, w, w->lt, w->n_lt, bits, tok);
}

static long mask_k0(const tm_tools *t, const json_vocab *v, tm_walk *w, const tm_state *st, uint64_t *bits,
                    const dsv4_tokenizer *tok) {
    load(w, st);
    if (st->phase == TP_DOC) return json_part(t, v, w, t->doc, st, bits, tok);
    const size_t bytes = (size_t)v->words * sizeof *bits;
    if (st->phase == TP_FNAME) {
        /* a free tool's parameter name: every neutral id goes on with it (no '"', '<', 0x7f
         * or control byte), no other plain id does ('<' or 0x7f before any '"') */
        memcpy(bits, w->neutral, bytes);
        return walk(t, v, w, v->spec, 0, v->n_spec, bits);
    }
    if (st->phase != TP_VALUE) {
        memset(bits, 0, bytes);
        return walk(t, v, w, v->all, 0, v->n_all, bits);
    }
    int u;
    if (json_state_in_string(&st->js, &u)) {
        /* Inside a plain string (raw or JSON): an id without '"', '\\' or a control byte
         * stays in it exactly when its UTF-8 is valid from u (json_vocab's bitset), a '<' in
         * it too (what follows is a prefix of the closing tag, pending, or the string's
         * text); the ids with the whole closing tag end the value: stepped one by one, as
         * the ids with a '"', '\\' or control byte are walked. */
        memcpy(bits, v->safe + (size_t)u * (size_t)v->words, bytes);
        for (int i = 0; i < w->n_close; i++) bits[w->close[i] >> 6] &= ~(1ull << (w->close[i] & 63));
        const long steps = walk(t, v, w, v->spec, 0, v->n_spec, bits);
        return steps + step_ids(t, w, w->close, w->n_close, bits, tok);
    }
    /* Elsewhere in a value (k = 0 here): a neutral id's bytes go to the value's JSON as they
     * are (no escape in a string="true" value, no closing tag begun), so json_part serves
     * it, but for a JSON value's whitespace rule: it refuses a ' ' after whitespace between
     * tokens, which in a neutral id without "  " can only be its first byte after st's
     * (st->ws). The ids with "  " are stepped. st->ws alone decides: it is set by a space
     * that no reading took as text (value_step: in_text was false before it), and a reading
     * enters text only by a '"' or a literal's whitespace, which in_text would have seen
     * then, so in_text is false after it too; a pending tag's flushed state has ws 0. */
    long steps = json_part(t, v, w, val_schema(t, st), st, bits, tok);
    if (st->is_str) return steps;
    if (st->ws)
        for (int i = 0; i < v->words; i++) bits[i] &= ~w->space[i];
    return steps + step_ids(t, w, w->dbl, w->n_dbl, bits, tok);
}

long tm_mask_walk(const tm_tools *t, const json_vocab *v, tm_walk *w, const tm_state *st, uint64_t *bits) {
    load(w, st);
    memset(bits, 0, (size_t)v->words * sizeof *bits);
    return walk(t, v, w, v->all, 0, v->n_all, bits);
}
