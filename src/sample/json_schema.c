/* json_schema.c — a JSON Schema (the subset documented in dsv4_text.h) compiled to the node
 * graph the automaton walks (json.h). Anything the automaton would not enforce is refused
 * by name: a schema is never half applied. */
#include "sample/json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#define MAX_NEST 64 /* schema nesting (not $ref chains, which are memoized) */

typedef struct memo { const cJSON *def; int node; } memo;

typedef struct ctx {
    dsv4_json_schema *s;
    const cJSON *root;
    memo *m;                 /* (n_m) $ref targets compiled so far */
    int n_m, cap_m;
    int any;                 /* the shared "any value" node, -1 until needed */
    json_budget bud;         /* the compile's budget: all patterns, formats and lengths */
    json_dfa *fmt;           /* (N_FORMATS) each format compiled once, on first use (n_states 0: not yet) */
    json_num_spec *num;      /* (s->n_nums) each bounded number's spec: an identical one shares its DFA */
    int cap_num;
    struct { int node; char *path; } *ap; /* (n_ap) each anyOf / oneOf of several branches: where it is */
    int n_ap, cap_ap;
    const char *forbid;      /* NULL, or a text no value may hold (json_schema_compile_without) */
    const char *forbid_why;
    json_dfa without;        /* forbid's complement: every pattern / format is cut to it */
    dsv4_err *err;
} ctx;

int json_grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return 0;
    if (need > INT_MAX / 2 || (size_t)need > SIZE_MAX / 2 / size) return -1; /* the doubling fits */
    int c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return -1;
    *p = q, *cap = c;
    return 0;
}

static int oom(ctx *c) { return dsv4_fail(c->err, DSV4_ERR_NOMEM, "json_schema: out of memory"), -1; }

static int new_node(ctx *c, int kind) {
    dsv4_json_schema *s = c->s;
    if (s->n_nodes >= JSON_MAX_NODES)
        return dsv4_fail(c->err, DSV4_ERR_UNSUPPORTED, "json_schema: more than %d schema nodes",
                         JSON_MAX_NODES), -1;
    if (json_grow((void **)&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof *s->nodes)) return oom(c);
    json_node *n = &s->nodes[s->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->additional = n->items = -1;
    n->max_items = -1;
    n->strc = n->numc = -1;
    return s->n_nodes++;
}

static int add_lit(ctx *c, const char *text) {
    dsv4_json_schema *s = c->s;
    if (json_grow((void **)&s->lits, &s->cap_lits, s->n_lits + 1, sizeof *s->lits)) return oom(c);
    char *t = strdup(text);
    if (!t) return oom(c);
    s->lits[s->n_lits] = (json_lit){t, (int)strlen(t)};
    return s->n_lits++;
}

/* "any JSON value": every type, free-key objects and arrays of any values */
static int any_node(ctx *c) {
    if (c->any >= 0) return c->any;
    int n = new_node(c, JN_TYPED);
    if (n < 0) return -1;
    json_node *a = &c->s->nodes[n];
    a->types = JT_OBJ | JT_ARR | JT_STR | JT_NUM | JT_INT | JT_BOOL | JT_NULL;
    a->additional = a->items = n;
    return c->any = n;
}

static const char *const ANNOTATIONS[] = {"title", "description", "$schema", "$id", "$comment",
                                          "default", "examples", "deprecated", "readOnly",
                                          "writeOnly", "$defs", "definitions", "discriminator", NULL};
static const char *const STRUCTURAL[] = {"type", "properties", "required", "additionalProperties",
                                         "items", "prefixItems", "minItems", "maxItems", "enum",
                                         "const", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern",
                                         "format", "minimum", "maximum", "exclusiveMinimum",
                                         "exclusiveMaximum", "multipleOf", NULL};

static int in(const char *k, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i])) return 1;
    return 0;
}

/* The first structural keyword of j other than those in `allowed`, or NULL. */
static const char *other_key(const cJSON *j, const char *const *allowed) {
    for (const cJSON *k = j->child; k; k = k->next)
        if (in(k->string, STRUCTURAL) && !in(k->string, allowed)) return k->string;
    return NULL;
}

static int compile(ctx *c, const cJSON *j, const char *path, int nest);

static int fail(ctx *c, const char *path, const char *fmt, const char *a) {
    char m[512];
    snprintf(m, sizeof m, fmt, a);
    return dsv4_fail(c->err, DSV4_ERR_UNSUPPORTED, "json_schema: %s (at %s)", m, path), -1;
}

/* The value a $ref's JSON pointer ("#", "#/$defs/NAME", "#/properties/a/items", with ~0
 * and ~1 escapes) names inside the schema, or NULL. */
static const cJSON *pointer(const cJSON *root, const char *ref) {
    if (*ref++ != '#') return NULL;
    const cJSON *t = root;
    char tok[256];
    while (t && *ref == '/') {
        int n = 0;
        for (ref++; *ref && *ref != '/'; ref++) {
            char ch = *ref;
            if (ch == '~') {
                if (ref[1] != '0' && ref[1] != '1') return NULL;
                ch = *++ref == '0' ? '~' : '/';
            }
            if (n >= (int)sizeof tok - 1) return NULL;
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (cJSON_IsObject(t)) {
            t = cJSON_GetObjectItemCaseSensitive(t, tok);
        } else if (cJSON_IsArray(t)) {
            char *end;
            const long i = strtol(tok, &end, 10);
            t = n && n < 10 && !*end && tok[0] >= '0' && tok[0] <= '9' ? cJSON_GetArrayItem(t, (int)i) : NULL;
        } else {
            t = NULL;
        }
    }
    return *ref ? NULL : t;
}

/* The node of a $ref (a JSON pointer into this schema), compiled once. */
static int ref_node(ctx *c, const char *ref, const char *path, int nest) {
    const cJSON *t = pointer(c->root, ref);
    if (!t) return fail(c, path, "'$ref' \"%s\" does not point into this schema (\"#\", \"#/$defs/NAME\", a JSON pointer)", ref);
    for (int i = 0; i < c->n_m; i++)
        if (c->m[i].def == t) return c->m[i].node;
    /* a placeholder ANYOF of one alternative, filled after the target compiled: the
     * target may refer back to itself */
    int n = new_node(c, JN_ANYOF);
    if (n < 0) return -1;
    if (json_grow((void **)&c->m, &c->cap_m, c->n_m + 1, sizeof *c->m)) return oom(c);
    c->m[c->n_m++] = (memo){t, n};
    int k = compile(c, t, ref, nest + 1);
    if (k < 0) return -1;
    if (json_grow((void **)&c->s->kids, &c->s->cap_kids, c->s->n_kids + 1, sizeof *c->s->kids)) return oom(c);
    c->s->kids[c->s->n_kids] = k;
    c->s->nodes[n].alts = c->s->n_kids++;
    c->s->nodes[n].n_alts = 1;
    return n;
}

static int type_bit(const char *t) {
    static const char *const names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

static int value_types(const cJSON *v) {
    if (cJSON_IsObject(v)) return JT_OBJ;
    if (cJSON_IsArray(v)) return JT_ARR;
    if (cJSON_IsString(v)) return JT_STR;
    if (cJSON_IsBool(v)) return JT_BOOL;
    if (cJSON_IsNull(v)) return JT_NULL;
    if (cJSON_IsNumber(v)) return v->valuedouble == floor(v->valuedouble) ? JT_NUM | JT_INT : JT_NUM;
    return 0;
}

/* A list of child schemas into json_schema.kids (compiled first: kids must be contiguous). */
static int kid_list(ctx *c, const cJSON *arr, const char *key, const char *path, int nest, int *first) {
    int n = cJSON_GetArraySize(arr), k = 0;
    int *tmp = malloc(sizeof *tmp * (size_t)(n ? n : 1));
    if (!tmp) return oom(c);
    char sub[300];
    for (const cJSON *x = arr->child; x; x = x->next, k++) {
        snprintf(sub, sizeof sub, "%.200s/%s/%d", path, key, k);
        if ((tmp[k] = compile(c, x, sub, nest + 1)) < 0) { free(tmp); return -1; }
    }
    dsv4_json_schema *s = c->s;
    if (json_grow((void **)&s->kids, &s->cap_kids, s->n_kids + n, sizeof *s->kids)) { free(tmp); return oom(c); }
    *first = s->n_kids;
    if (n) memcpy(s->kids + s->n_kids, tmp, sizeof *tmp * (size_t)n);
    s->n_kids += n;
    free(tmp);
    return n;
}

static int opt_count(ctx *c, const cJSON *j, const char *key, const char *path, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9 ||
        v->valuedouble != floor(v->valuedouble))
        return fail(c, path, "'%s' must be a non-negative integer", key);
    *out = (int)v->valuedouble;
    return 0;
}

/* a literal, key or pattern that can only be met by holding c->forbid */
static int forbidden(ctx *c, const char *path, const char *what) {
    char m[400];
    snprintf(m, sizeof m, "%s holds \"%s\"%s", what, c->forbid, c->forbid_why);
    return fail(c, path, "%s", m);
}

static int compile_lit(ctx *c, const cJSON *j, int types, const char *path) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "enum");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "const");
    if (e && (!cJSON_IsArray(e) || !e->child)) return fail(c, path, "'%s' must be a non-empty array", "enum");
    if (e && k) {
        /* both (Pydantic's Literal): the const, which must be one of the enum's values */
        int hit = 0;
        for (const cJSON *v = e->child; v && !hit; v = v->next) hit = cJSON_Compare(v, k, 1);
        if (!hit) return fail(c, path, "'%s' is not one of the 'enum' values", "const");
        e = NULL;
    }
    int n = new_node(c, JN_LIT);
    if (n < 0) return -1;
    c->s->nodes[n].lits = c->s->n_lits;
    for (const cJSON *v = e ? e->child : k; v; v = e ? v->next : NULL) {
        if (types && !(value_types(v) & types))
            return fail(c, path, "an '%s' value does not have the schema's 'type'", e ? "enum" : "const");
        char *t = cJSON_PrintUnformatted(v);
        if (!t) return oom(c);
        if (c->forbid && strstr(t, c->forbid)) {
            free(t);
            return forbidden(c, path, e ? "an 'enum' value" : "the 'const' value");
        }
        int dup = 0;
        for (int i = c->s->nodes[n].lits; i < c->s->n_lits; i++) dup |= !strcmp(c->s->lits[i].text, t);
        int rc = dup ? 0 : add_lit(c, t);
        free(t);
        if (rc < 0) return -1;
    }
    json_node *nd = &c->s->nodes[n];
    nd->n_lits = c->s->n_lits - nd->lits;
    if (nd->n_lits > JSON_MAX_LITS) return fail(c, path, "more than 64 '%s' values", "enum");
    return n;
}

static int compile_object(ctx *c, const cJSON *j, int n, const char *path, int nest) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(j, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(j, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(j, "additionalProperties");
    char sub[300];
    if (props && !cJSON_IsObject(props)) return fail(c, path, "'%s' must be an object", "properties");
    if (req && !cJSON_IsArray(req)) return fail(c, path, "'%s' must be an array", "required");
    int np = props ? cJSON_GetArraySize(props) : 0;
    if (np > JSON_MAX_PROPS) return fail(c, path, "more than 64 '%s'", "properties");
    int *kid = malloc(sizeof *kid * (size_t)(np ? np : 1));
    if (!kid) return oom(c);
    int k = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, k++) {
        for (const cJSON *q = props->child; q != p; q = q->next)
            if (!strcmp(q->string, p->string)) { free(kid); return fail(c, path, "property \"%s\" appears twice", p->string); }
        if (c->forbid && strstr(p->string, c->forbid)) { free(kid); return forbidden(c, path, "a property name"); }
        snprintf(sub, sizeof sub, "%.200s/properties/%.60s", path, p->string);
        if ((kid[k] = compile(c, p, sub, nest + 1)) < 0) { free(kid); return -1; }
    }
    dsv4_json_schema *s = c->s;
    if (json_grow((void **)&s->props, &s->cap_props, s->n_props + np, sizeof *s->props)) { free(kid); return oom(c); }
    const int first = s->n_props;
    k = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, k++) {
        cJSON *name = cJSON_CreateString(p->string);
        char *t = name ? cJSON_PrintUnformatted(name) : NULL;
        cJSON_Delete(name);
        if (!t) { free(kid); return oom(c); }
        s->props[s->n_props++] = (json_prop){t, (int)strlen(t), kid[k], 0};
    }
    free(kid);
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        int hit = 0;
        for (int i = 0; cJSON_IsString(r) && i < np; i++)
            if (!strcmp(cJSON_GetArrayItem(props, i)->string, r->valuestring)) s->props[first + i].required = hit = 1;
        if (!hit) return fail(c, path, "'required' names \"%s\", which is not in 'properties'",
                              cJSON_IsString(r) ? r->valuestring : "(not a string)");
    }
    int additional = -1;
    if (!add ? np == 0 : !cJSON_IsFalse(add)) {
        /* free keys: only without declared properties (absent beside 'properties' means
         * false, as in strict mode: the declared keys only) */
        if (np) return fail(c, path, "'%s' beside 'properties' is not supported (declare every "
                            "property, or leave it out or false)", "additionalProperties");
        snprintf(sub, sizeof sub, "%.200s/additionalProperties", path);
        if ((additional = add ? compile(c, add, sub, nest + 1) : any_node(c)) < 0) return -1;
    }
    json_node *nd = &s->nodes[n];
    nd->props = first, nd->n_props = np, nd->additional = additional;
    return 0;
}

static int compile_array(ctx *c, const cJSON *j, int n, const char *path, int nest) {
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(j, "prefixItems");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(j, "items");
    char sub[300];
    int first = 0, np = 0, it, mn = 0, mx = -1;
    if (pre && !cJSON_IsArray(pre)) return fail(c, path, "'%s' must be an array", "prefixItems");
    if (pre && (np = kid_list(c, pre, "prefixItems", path, nest, &first)) < 0) return -1;
    snprintf(sub, sizeof sub, "%.200s/items", path);
    if (cJSON_IsFalse(items)) it = -1;
    else if ((it = items ? compile(c, items, sub, nest + 1) : any_node(c)) < 0) return -1;
    if (opt_count(c, j, "minItems", path, &mn) || opt_count(c, j, "maxItems", path, &mx)) return -1;
    if (it < 0 && (mx < 0 || mx > np)) mx = np;
    if (mx >= 0 && mn > mx) return fail(c, path, "%s: minItems above maxItems (or the items allowed)", "array");
    json_node *nd = &c->s->nodes[n];
    nd->prefix = first, nd->n_prefix = np, nd->items = it, nd->min_items = mn, nd->max_items = mx;
    return 0;
}

/* "format": built-in patterns (anchored) and the length the format bounds. email: the
 * dot-atom local part of RFC 5321 (no quoted local parts, no IP literal domains), a domain
 * of two labels or more; hostname: RFC 1123 labels of at most 63 characters. */
#define DATE "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|[12]\\d))"
#define TIME "(?:[01]\\d|2[0-3]):[0-5]\\d:(?:[0-5]\\d|60)(?:\\.\\d+)?(?:[Zz]|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"
#define LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define ATOM "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
#define OCTET "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
#define DUR_TIME "T(?:\\d+H(?:\\d+M(?:\\d+S)?)?|\\d+M(?:\\d+S)?|\\d+S)"
static const struct { const char *name, *pattern; int max; } FORMATS[] = {
    {"date", "^" DATE "$", -1},
    {"time", "^" TIME "$", -1},
    {"date-time", "^" DATE "[Tt]" TIME "$", -1},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", -1},
    {"email", "^" ATOM "(?:\\." ATOM ")*@" LABEL "(?:\\." LABEL ")+$", 254},
    {"hostname", "^" LABEL "(?:\\." LABEL ")*$", 253},
    {"ipv4", "^" OCTET "(?:\\." OCTET "){3}$", -1},
    {"duration", "^P(?:(?:\\d+D|\\d+M(?:\\d+D)?|\\d+Y(?:\\d+M(?:\\d+D)?)?)(?:" DUR_TIME ")?|" DUR_TIME "|\\d+W)$", -1},
};

#define N_FORMATS ((int)(sizeof FORMATS / sizeof *FORMATS))

static int fail_why(ctx *c, const char *path, const char *key, const char *why) {
    char m[512];
    snprintf(m, sizeof m, "'%s' %s", key, why);
    return fail(c, path, "%s", m);
}

/* a and b constrain strings alike (the same lengths and the same DFA, as the same pattern
 * and format compile to) */
static int strc_same(const json_strc *a, const json_strc *b, json_budget *bud) {
    const json_dfa *x = &a->dfa, *y = &b->dfa;
    bud->work--;
    if (a->min != b->min || a->max != b->max || a->cap != b->cap || a->flat != b->flat ||
        x->n_states != y->n_states || x->n_classes != y->n_classes)
        return 0;
    if (!x->n_states) return 1;
    const size_t cells = (size_t)x->n_states * (size_t)x->n_classes;
    bud->work -= (int64_t)cells;
    return !memcmp(x->lo, y->lo, (size_t)x->n_classes * sizeof *x->lo) && !memcmp(x->ascii, y->ascii, sizeof x->ascii) &&
           !memcmp(x->next, y->next, cells * sizeof *x->next) &&
           !memcmp(x->accept, y->accept, (size_t)x->n_states * sizeof *x->accept);
}

/* minLength, maxLength, pattern, format: node n's json_strc (none when all are absent) */
static int compile_string(ctx *c, const cJSON *j, int n, const char *path) {
    json_strc sc = {.min = 0, .max = -1};
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    char why[200];
    if (opt_count(c, j, "minLength", path, &sc.min) || opt_count(c, j, "maxLength", path, &sc.max)) return -1;
    if (!pat && !fmt && sc.min == 0 && sc.max < 0) return 0;
    if (pat && !cJSON_IsString(pat)) return fail(c, path, "'%s' must be a string", "pattern");
    if (fmt && !cJSON_IsString(fmt)) return fail(c, path, "'%s' must be a string", "format");
    if (pat && json_regex_compile(pat->valuestring, strlen(pat->valuestring), &sc.dfa, &c->bud, why, sizeof why))
        return fail_why(c, path, "pattern", why);
    if (fmt) {
        int f = 0;
        while (f < N_FORMATS && strcmp(FORMATS[f].name, fmt->valuestring)) f++;
        if (f == N_FORMATS) {
            json_dfa_free(&sc.dfa);
            return fail(c, path, "unsupported 'format' \"%s\"", fmt->valuestring);
        }
        /* compiled once per schema (4000 email fields compiled 4000 times took 28 s), then copied */
        json_dfa d, both, *once = &c->fmt[f];
        if ((!once->n_states && json_regex_compile(FORMATS[f].pattern, strlen(FORMATS[f].pattern), once, &c->bud,
                                                   why, sizeof why)) ||
            json_dfa_copy(once, &d, &c->bud, why, sizeof why)) {
            json_dfa_free(&sc.dfa);
            return fail_why(c, path, "format", why); /* out of memory or budget */
        }
        if (sc.dfa.n_states) {
            const int rc = json_dfa_intersect(&sc.dfa, &d, &both, &c->bud, why, sizeof why);
            json_dfa_free(&sc.dfa), json_dfa_free(&d);
            if (rc) return fail_why(c, path, "pattern", why);
            d = both;
        }
        sc.dfa = d;
        if (FORMATS[f].max >= 0 && (sc.max < 0 || sc.max > FORMATS[f].max)) sc.max = FORMATS[f].max;
    }
    const char *bad = sc.max >= 0 && sc.min > sc.max ? "is above maxLength (or the format's length)" : NULL;
    if (!bad && json_strc_lengths(&sc, &c->bud, why, sizeof why)) bad = why;
    if (!bad && sc.ok && !(sc.ok[0] & 1)) bad = "leaves no string that satisfies it (with pattern/format/maxLength)";
    /* a text no value may hold: the DFA cut to the strings without it, so that a pattern
     * that needs it leaves no string (refused here) and one that needs it on some branch
     * loses that branch (alive => completable still holds) */
    char cut[300];
    if (!bad && c->forbid && sc.dfa.n_states) {
        json_dfa both;
        if (json_dfa_intersect(&sc.dfa, &c->without, &both, &c->bud, why, sizeof why)) {
            bad = why;
        } else {
            json_dfa_free(&sc.dfa);
            free(sc.ok);
            sc.ok = NULL, sc.dfa = both;
            if (json_strc_lengths(&sc, &c->bud, why, sizeof why)) bad = why;
            else if (!(sc.ok[0] & 1)) {
                snprintf(cut, sizeof cut, "can only be met by a string that holds \"%s\"%s", c->forbid, c->forbid_why);
                bad = cut;
            }
        }
    }
    dsv4_json_schema *s = c->s;
    /* one the schema already has is shared (Pydantic repeats a Field in each branch of a
     * union): readings inside such strings in the same state then take one mask (json_mask) */
    for (int i = 0; !bad && i < s->n_strcs; i++) {
        if (!strc_same(&s->strcs[i], &sc, &c->bud)) continue;
        json_dfa_free(&sc.dfa);
        free(sc.ok);
        s->nodes[n].strc = i;
        return 0;
    }
    if (!bad && json_grow((void **)&s->strcs, &s->cap_strcs, s->n_strcs + 1, sizeof *s->strcs)) bad = "";
    if (bad) {
        json_dfa_free(&sc.dfa);
        free(sc.ok);
        const char *key = sc.max >= 0 && sc.min > sc.max ? "minLength" : pat ? "pattern" : fmt ? "format" : "minLength";
        return *bad ? fail_why(c, path, key, bad) : oom(c);
    }
    s->strcs[s->n_strcs] = sc;
    s->nodes[n].strc = s->n_strcs++;
    return 0;
}

/* minimum, maximum, exclusiveMinimum, exclusiveMaximum (a number; or, as in draft 4, a
 * boolean that makes minimum / maximum exclusive), multipleOf: node n's number DFA */
static int compile_number(ctx *c, const cJSON *j, int n, const char *path) {
    static const char *const key[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    static const int op[4] = {JSON_NUM_GE, JSON_NUM_GT, JSON_NUM_LE, JSON_NUM_LT};
    const int types = c->s->nodes[n].types;
    json_num_spec sp = {.integer = !(types & JT_NUM)};
    for (int k = 0; k < 4; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key[k]);
        if (!v) continue;
        if (cJSON_IsBool(v) && (k & 1)) {
            /* draft 4: exclusiveMinimum true makes minimum exclusive */
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, key[k - 1]);
            if (cJSON_IsTrue(v) && !m) return fail(c, path, "'%s': true without the bound it qualifies", key[k]);
            continue;
        }
        if (!cJSON_IsNumber(v)) return fail(c, path, "'%s' must be a number", key[k]);
        const cJSON *x = (k & 1) ? NULL : cJSON_GetObjectItemCaseSensitive(j, key[k + 1]);
        sp.bound[sp.n_bounds] = v->valuedouble;
        sp.op[sp.n_bounds] = cJSON_IsTrue(x) ? op[k + 1] : op[k];
        sp.name[sp.n_bounds++] = key[k];
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "multipleOf");
    if (m && !cJSON_IsNumber(m)) return fail(c, path, "'%s' must be a number", "multipleOf");
    if (m) sp.multiple = m->valuedouble;
    if (m && !(sp.multiple > 0)) return fail(c, path, "'%s' must be greater than 0", "multipleOf");
    if (!sp.n_bounds && !m) return 0;
    dsv4_json_schema *s = c->s;
    for (int i = 0; i < s->n_nums; i++) {
        const json_num_spec *o = &c->num[i];
        int same = o->integer == sp.integer && o->n_bounds == sp.n_bounds && o->multiple == sp.multiple;
        for (int b = 0; same && b < sp.n_bounds; b++) same = o->bound[b] == sp.bound[b] && o->op[b] == sp.op[b];
        if (same) return s->nodes[n].numc = i, 0;
    }
    if (json_grow((void **)&c->num, &c->cap_num, s->n_nums + 1, sizeof *c->num)) return oom(c);
    char why[200];
    json_dfa d;
    if (json_grow((void **)&s->nums, &s->cap_nums, s->n_nums + 1, sizeof *s->nums)) return oom(c);
    if (json_number_compile(&sp, &d, &c->bud, why, sizeof why)) {
        char m2[300];
        snprintf(m2, sizeof m2, "the number's bounds/multipleOf: %s", why);
        return fail(c, path, "%s", m2);
    }
    c->num[s->n_nums] = sp;
    s->nums[s->n_nums] = d;
    s->nodes[n].numc = s->n_nums++;
    return 0;
}

/* ---- allOf: the subschemas merged into one ---- */

static const char *const LOWER[] = {"minimum", "exclusiveMinimum", "minLength", "minItems", NULL};
static const char *const UPPER[] = {"maximum", "exclusiveMaximum", "maxLength", "maxItems", NULL};

/* the type names of v as bits, integers inside numbers (all bits when absent) */
static int type_bits(const cJSON *v) {
    int b = 0;
    if (!v) return 127;
    if (cJSON_IsString(v)) b = type_bit(v->valuestring);
    for (const cJSON *t = cJSON_IsArray(v) ? v->child : NULL; t; t = t->next) b |= cJSON_IsString(t) ? type_bit(t->valuestring) : 0;
    return b & JT_NUM ? b | JT_INT : b;
}

static int merge_into(ctx *c, cJSON *out, const cJSON *part, const char *path, int nest, int *types);

/* one allOf part: true adds nothing; a $ref merges its target; a nested allOf its parts */
static int merge_part(ctx *c, cJSON *out, const cJSON *part, const char *path, int nest, int *types) {
    if (nest > MAX_NEST) return fail(c, path, "%s nested too deep", "allOf");
    if (cJSON_IsTrue(part)) return 0;
    if (!cJSON_IsObject(part)) return fail(c, path, "an '%s' subschema must be an object or true", "allOf");
    return merge_into(c, out, part, path, nest, types);
}

static int merge_into(ctx *c, cJSON *out, const cJSON *part, const char *path, int nest, int *types) {
    for (const cJSON *k = part->child; k; k = k->next) {
        const char *name = k->string;
        if (!in(name, ANNOTATIONS) && !in(name, STRUCTURAL))
            return fail(c, path, "unsupported JSON Schema keyword \"%s\"", name);
        if (in(name, ANNOTATIONS)) continue;
        if (!strcmp(name, "$ref")) {
            const cJSON *t = cJSON_IsString(k) ? pointer(c->root, k->valuestring) : NULL;
            if (!t) return fail(c, path, "'$ref' \"%s\" inside 'allOf' does not point into this schema",
                                cJSON_IsString(k) ? k->valuestring : "");
            if (merge_part(c, out, t, path, nest + 1, types)) return -1;
        } else if (!strcmp(name, "allOf")) {
            if (!cJSON_IsArray(k) || !k->child) return fail(c, path, "'%s' must be a non-empty array", "allOf");
            for (const cJSON *x = k->child; x; x = x->next)
                if (merge_part(c, out, x, path, nest + 1, types)) return -1;
        } else if (!strcmp(name, "type")) {
            *types &= type_bits(k);
        } else if (!strcmp(name, "properties") && cJSON_IsObject(k)) {
            /* joined in order; a property in both: the allOf of its two schemas */
            cJSON *props = cJSON_GetObjectItemCaseSensitive(out, "properties");
            if (!props && !(props = cJSON_AddObjectToObject(out, "properties"))) return oom(c);
            for (const cJSON *p = k->child; p; p = p->next) {
                const cJSON *had = cJSON_GetObjectItemCaseSensitive(props, p->string);
                cJSON *v = had ? cJSON_CreateObject() : cJSON_Duplicate(p, 1);
                cJSON *list = had && v ? cJSON_AddArrayToObject(v, "allOf") : NULL;
                if (list) cJSON_AddItemToArray(list, cJSON_Duplicate(had, 1)), cJSON_AddItemToArray(list, cJSON_Duplicate(p, 1));
                if (!v || (had && (!list || cJSON_GetArraySize(list) != 2))) { cJSON_Delete(v); return oom(c); }
                if (had ? !cJSON_ReplaceItemInObjectCaseSensitive(props, p->string, v)
                        : !cJSON_AddItemToObject(props, p->string, v))
                    return oom(c);
            }
        } else if (!strcmp(name, "required") && cJSON_IsArray(k)) {
            cJSON *req = cJSON_GetObjectItemCaseSensitive(out, "required");
            if (!req && !(req = cJSON_AddArrayToObject(out, "required"))) return oom(c);
            for (const cJSON *r = k->child; r; r = r->next) {
                int dup = 0;
                for (const cJSON *q = req->child; q && !dup; q = q->next) dup = cJSON_Compare(q, r, 1);
                if (!dup) cJSON_AddItemToArray(req, cJSON_Duplicate(r, 1));
            }
        } else {
            /* the tightest bound; any other keyword only where the parts agree */
            cJSON *had = cJSON_GetObjectItemCaseSensitive(out, name);
            const int lower = in(name, LOWER), upper = in(name, UPPER);
            if (had && cJSON_IsNumber(had) && cJSON_IsNumber(k) && (lower || upper)) {
                if (lower ? k->valuedouble > had->valuedouble : k->valuedouble < had->valuedouble)
                    cJSON_SetNumberValue(had, k->valuedouble);
            } else if (had && !cJSON_Compare(had, k, 1)) {
                return fail(c, path, "'allOf' subschemas set \"%s\" differently (only properties, required, type and "
                            "bounds merge)", name);
            } else if (!had && !cJSON_AddItemToObject(out, name, cJSON_Duplicate(k, 1))) {
                return oom(c);
            }
        }
    }
    return 0;
}

/* j's allOf (and the keywords beside it) as one schema (the caller deletes it), or NULL */
static cJSON *merge_all(ctx *c, const cJSON *j, const char *path, int nest) {
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(j, "allOf");
    if (!cJSON_IsArray(all) || !all->child) return fail(c, path, "'%s' must be a non-empty array", "allOf"), NULL;
    cJSON *out = cJSON_CreateObject();
    if (!out) return oom(c), NULL;
    int types = 127;
    if (merge_part(c, out, j, path, nest, &types)) { cJSON_Delete(out); return NULL; }
    if (types != 127) {
        static const char *const names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
        if (!types) {
            cJSON_Delete(out);
            return fail(c, path, "'allOf' subschemas' types have %s in common", "nothing"), NULL;
        }
        if (types & JT_NUM) types &= ~JT_INT;
        cJSON *ty = cJSON_AddArrayToObject(out, "type");
        for (int i = 0; ty && i < 7; i++)
            if (types & (1 << i)) cJSON_AddItemToArray(ty, cJSON_CreateString(names[i]));
        if (!ty) { cJSON_Delete(out); return oom(c), NULL; }
    }
    return out;
}

static int compile(ctx *c, const cJSON *j, const char *path, int nest) {
    if (nest > MAX_NEST) return fail(c, path, "%s nested too deep", "schema");
    if (cJSON_IsTrue(j)) return any_node(c);
    if (!cJSON_IsObject(j)) return fail(c, path, "%s must be an object or true", "a schema");
    for (const cJSON *k = j->child; k; k = k->next)
        if (!in(k->string, ANNOTATIONS) && !in(k->string, STRUCTURAL))
            return fail(c, path, "unsupported JSON Schema keyword \"%s\"", k->string);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(j, "$ref");
    if (ref) {
        static const char *const only[] = {"$ref", NULL};
        const char *o = other_key(j, only);
        if (o) return fail(c, path, "keyword \"%s\" beside '$ref' is not supported", o);
        if (!cJSON_IsString(ref)) return fail(c, path, "'%s' must be a string", "$ref");
        return ref_node(c, ref->valuestring, path, nest);
    }
    if (cJSON_GetObjectItemCaseSensitive(j, "allOf")) {
        cJSON *m = merge_all(c, j, path, nest);
        if (!m) return -1;
        char sub[300];
        snprintf(sub, sizeof sub, "%.200s/allOf", path);
        const int n = compile(c, m, sub, nest + 1);
        cJSON_Delete(m);
        return n;
    }
    /* oneOf as anyOf (json.h says when that differs) */
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(j, "anyOf");
    const char *akey = "anyOf";
    if (!any && (any = cJSON_GetObjectItemCaseSensitive(j, "oneOf"))) akey = "oneOf";
    if (any) {
        const char *const only[] = {akey, NULL};
        const char *o = other_key(j, only);
        if (o) return fail(c, path, "keyword \"%s\" beside 'anyOf'/'oneOf' is not supported", o);
        if (!cJSON_IsArray(any) || !any->child) return fail(c, path, "'%s' must be a non-empty array", akey);
        int first, na = kid_list(c, any, akey, path, nest, &first);
        if (na < 0) return -1;
        int n = new_node(c, JN_ANYOF);
        if (n < 0) return -1;
        c->s->nodes[n].alts = first, c->s->nodes[n].n_alts = na;
        if (na > 1) {
            char sub[300];
            snprintf(sub, sizeof sub, "%.200s/%s", path, akey);
            if (json_grow((void **)&c->ap, &c->cap_ap, c->n_ap + 1, sizeof *c->ap) || !(c->ap[c->n_ap].path = strdup(sub)))
                return oom(c);
            c->ap[c->n_ap++].node = n;
        }
        return n;
    }
    int types = 0;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (cJSON_IsString(ty)) {
        if (!(types = type_bit(ty->valuestring))) return fail(c, path, "unknown type \"%s\"", ty->valuestring);
    } else if (cJSON_IsArray(ty) && ty->child) {
        for (const cJSON *t = ty->child; t; t = t->next) {
            int b = cJSON_IsString(t) ? type_bit(t->valuestring) : 0;
            if (!b) return fail(c, path, "%s: 'type' lists an unknown type", "schema");
            types |= b;
        }
    } else if (ty) {
        return fail(c, path, "'%s' must be a type name or a non-empty array of them", "type");
    }
    if (cJSON_GetObjectItemCaseSensitive(j, "enum") || cJSON_GetObjectItemCaseSensitive(j, "const")) {
        static const char *const only[] = {"enum", "const", "type", NULL};
        const char *o = other_key(j, only);
        if (o) return fail(c, path, "keyword \"%s\" beside 'enum'/'const' is not supported", o);
        return compile_lit(c, j, types, path);
    }
    static const char *const obj_keys[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const arr_keys[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
    static const char *const str_keys[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *const num_keys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                           "multipleOf", NULL};
    int has_obj = 0, has_arr = 0, has_str = 0, has_num = 0;
    for (const cJSON *k = j->child; k; k = k->next) {
        has_obj |= in(k->string, obj_keys);
        has_arr |= in(k->string, arr_keys);
        has_str |= in(k->string, str_keys);
        has_num |= in(k->string, num_keys);
    }
    if (!types)
        types = (has_obj ? JT_OBJ : 0) | (has_arr ? JT_ARR : 0) | (has_str ? JT_STR : 0) | (has_num ? JT_NUM : 0);
    if (!types) return any_node(c);
    if (has_obj && !(types & JT_OBJ)) return fail(c, path, "object keywords without type %s", "\"object\"");
    if (has_arr && !(types & JT_ARR)) return fail(c, path, "array keywords without type %s", "\"array\"");
    if (has_str && !(types & JT_STR)) return fail(c, path, "string keywords without type %s", "\"string\"");
    if (has_num && !(types & (JT_NUM | JT_INT)))
        return fail(c, path, "number keywords without type %s", "\"number\" or \"integer\"");
    int n = new_node(c, JN_TYPED);
    if (n < 0) return -1;
    c->s->nodes[n].types = (uint8_t)types;
    if ((types & JT_OBJ) && compile_object(c, j, n, path, nest)) return -1;
    if ((types & JT_ARR) && compile_array(c, j, n, path, nest)) return -1;
    if ((types & JT_STR) && compile_string(c, j, n, path)) return -1;
    if ((types & (JT_NUM | JT_INT)) && compile_number(c, j, n, path)) return -1;
    return n;
}

/* an anyOf / $ref chain that comes back to itself before any byte ({"$ref": "#"}) */
static int anyof_cycle(const dsv4_json_schema *s, int n, uint8_t *color) {
    const json_node *nd = &s->nodes[n];
    if (nd->kind != JN_ANYOF || color[n] == 2) return 0;
    if (color[n] == 1) return 1;
    color[n] = 1;
    for (int i = 0; i < nd->n_alts; i++)
        if (anyof_cycle(s, s->kids[nd->alts + i], color)) return 1;
    color[n] = 2;
    return 0;
}

/* json_node.need*: a fixpoint from "never" down, over the graph ($ref cycles included) */
enum { NEVER = 1 << 20 };

static int min2(int a, int b) { return a < b ? a : b; }
static int max2(int a, int b) { return a > b ? a : b; }

static void needs(dsv4_json_schema *s) {
    for (int i = 0; i < s->n_nodes; i++) s->nodes[i].need = s->nodes[i].need_obj = s->nodes[i].need_arr = NEVER;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < s->n_nodes; i++) {
            json_node *n = &s->nodes[i];
            int ob = NEVER, ar = NEVER, all = NEVER;
            if (n->kind == JN_LIT) {
                all = 0;
            } else if (n->kind == JN_ANYOF) {
                for (int k = 0; k < n->n_alts; k++) all = min2(all, s->nodes[s->kids[n->alts + k]].need);
            } else {
                if (n->types & JT_OBJ) {
                    ob = 0;
                    for (int k = 0; k < n->n_props; k++)
                        if (s->props[n->props + k].required) ob = max2(ob, 1 + s->nodes[s->props[n->props + k].node].need);
                }
                if (n->types & JT_ARR) {
                    ar = 0;
                    for (int k = 0; k < n->min_items; k++) {
                        const int it = k < n->n_prefix ? s->kids[n->prefix + k] : n->items;
                        ar = max2(ar, it < 0 ? NEVER : 1 + s->nodes[it].need);
                    }
                }
                all = n->types & (JT_STR | JT_NUM | JT_INT | JT_BOOL | JT_NULL) ? 0 : min2(ob, ar);
            }
            ob = min2(ob, NEVER), ar = min2(ar, NEVER), all = min2(all, NEVER);
            if (ob < n->need_obj || ar < n->need_arr || all < n->need) {
                n->need_obj = min2(ob, n->need_obj), n->need_arr = min2(ar, n->need_arr), n->need = min2(all, n->need);
                changed = 1;
            }
        }
    }
}

void dsv4_json_schema_free(dsv4_json_schema *s) {
    if (!s) return;
    for (int i = 0; i < s->n_props; i++) free(s->props[i].key);
    for (int i = 0; i < s->n_lits; i++) free(s->lits[i].text);
    for (int i = 0; i < s->n_strcs; i++) {
        json_dfa_free(&s->strcs[i].dfa);
        free(s->strcs[i].ok);
    }
    free(s->strcs);
    for (int i = 0; i < s->n_nums; i++) json_dfa_free(&s->nums[i]);
    free(s->nums);
    free(s->nodes);
    free(s->props);
    free(s->kids);
    free(s->lits);
    free(s);
}

int dsv4_json_schema_compile(const char *text, size_t len, dsv4_json_schema **out, dsv4_err *err) {
    return json_schema_compile_without(text, len, NULL, NULL, out, err);
}

int json_schema_compile_without(const char *text, size_t len, const char *forbid, const char *forbid_why,
                                dsv4_json_schema **out, dsv4_err *err) {
    dsv4_err local;
    if (!err) err = &local;
    *out = NULL;
    /* cJSON ends a string at a \u0000 escape: a pattern, name or literal holding one would
     * be cut short silently, so such a schema is refused (an escaped backslash before "u0000"
     * is refused too: rare, and never applied wrongly) */
    for (size_t i = 0; i + 6 <= len; i++)
        if (!memcmp(text + i, "\\u0000", 6))
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "json_schema: a \\u0000 escape in a string is not supported");
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    while (j && end < text + len && (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r')) end++;
    if (j && end != text + len) {
        cJSON_Delete(j);
        j = NULL;
    }
    if (!j) return dsv4_fail(err, DSV4_ERR_FORMAT, "json_schema: the schema is not valid JSON");
    dsv4_json_schema *s = calloc(1, sizeof *s);
    ctx c = {.s = s, .root = j, .any = -1, .bud = {JSON_BUDGET_WORK, JSON_BUDGET_BYTES},
             .fmt = calloc(N_FORMATS, sizeof *c.fmt), .forbid = forbid, .forbid_why = forbid_why ? forbid_why : "",
             .err = err};
    int rc = DSV4_OK;
    char why[200];
    if (!s || !c.fmt) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "json_schema: out of memory"); goto done; }
    if (forbid && json_dfa_without(forbid, strlen(forbid), &c.without, &c.bud, why, sizeof why)) {
        rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "json_schema: \"%s\" %s", forbid, why);
        goto done;
    }
    /* node 0 is the root: an ANYOF of one alternative, as for a $ref ("#" refers to it) */
    if (new_node(&c, JN_ANYOF) < 0 || json_grow((void **)&c.m, &c.cap_m, 1, sizeof *c.m)) { rc = err->code; goto done; }
    c.m[c.n_m++] = (memo){j, 0};
    int r = compile(&c, j, "#", 0);
    if (r < 0 || json_grow((void **)&s->kids, &s->cap_kids, s->n_kids + 1, sizeof *s->kids)) {
        rc = r < 0 ? err->code : dsv4_fail(err, DSV4_ERR_NOMEM, "json_schema: out of memory");
        goto done;
    }
    s->kids[s->n_kids] = r;
    s->nodes[0].alts = s->n_kids++, s->nodes[0].n_alts = 1;
    uint8_t *color = calloc((size_t)s->n_nodes, 1);
    if (!color) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "json_schema: out of memory"); goto done; }
    for (int i = 0; i < s->n_nodes && !rc; i++)
        if (anyof_cycle(s, i, color))
            rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "json_schema: a '$ref' / 'anyOf' cycle that never reads a value");
    free(color);
    if (rc) goto done;
    needs(s);
    if (s->nodes[0].need >= NEVER)
        rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "json_schema: no finite JSON value satisfies the schema "
                       "(a required property or item that recurses without end)");
    else if (2 + s->nodes[0].need > JSON_MAX_DEPTH)
        rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "json_schema: its values nest deeper than %d levels",
                       JSON_MAX_DEPTH - 2);
    if (rc) goto done;
    /* the readings the automaton can hold at once: within JSON_MAX_STACKS, or refused here
     * by the anyOf that outgrows it (json_reads.c) */
    int worst = 0;
    const int reads = json_readings(s, &c.bud, &worst);
    if (reads == -1) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "json_schema: out of memory");
    } else if (reads == -2) {
        rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "json_schema: its 'anyOf'/'oneOf' branches are too many to bound "
                       "within the compile's budget");
    } else if (reads > JSON_MAX_STACKS) {
        const char *at = "#";
        for (int i = 0; i < c.n_ap; i++)
            if (c.ap[i].node == worst) at = c.ap[i].path;
        rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "json_schema: the 'anyOf'/'oneOf' at %s can leave more branches "
                       "open at once than the automaton keeps: at most %d branches can be open at once (every object "
                       "branch is open at an object's '{', until a key or value tells it apart; nested unions "
                       "multiply)", at, JSON_MAX_STACKS - 2);
    }
    if (rc) goto done;
    s->max_stacks = reads;
    /* the literals true/false and null, for the boolean and null types */
    static const char *const lit[] = {"true", "false", "null"};
    for (int i = 0; i < 2 && !rc; i++) {
        int n = new_node(&c, JN_LIT);
        if (n < 0) { rc = err->code; break; }
        s->nodes[n].lits = s->n_lits;
        for (int k = i ? 2 : 0; k < (i ? 3 : 2); k++)
            if (add_lit(&c, lit[k]) < 0) { rc = err->code; break; }
        s->nodes[n].n_lits = s->n_lits - s->nodes[n].lits;
        if (i) s->null_node = n;
        else s->bool_node = n;
    }
done:
    for (int f = 0; c.fmt && f < N_FORMATS; f++) json_dfa_free(&c.fmt[f]);
    json_dfa_free(&c.without);
    free(c.fmt);
    free(c.num);
    free(c.m);
    for (int i = 0; i < c.n_ap; i++) free(c.ap[i].path);
    free(c.ap);
    cJSON_Delete(j);
    if (rc) dsv4_json_schema_free(s);
    else *out = s;
    return rc;
}

int dsv4_json_schema_accepts(const dsv4_json_schema *s, const char *text, size_t len) {
    json_state *a = malloc(2 * sizeof *a);
    if (!a) return -1;
    json_state_init(s, &a[0]);
    int cur = 0;
    const int ok = json_state_feed(s, a, &cur, (const uint8_t *)text, len) && json_state_accepting(s, &a[cur]);
    free(a);
    return ok;
}
