/* structured.c — structured output requests: OpenAI's response_format (chat completions,
 * and the same field on completions) and Anthropic's output_config.format (or the older
 * output_format), turned into the JSON
 * Schema text that constrains sampling (dsv4_gen_params.json_schema). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/srv.h"

/* Checks the schema compiles (the refusal names the keyword) and keeps its compact text. */
static int schema_text(const cJSON *schema, const char *dflt, const char *field, char **out, char *msg,
                       size_t n) {
    char *t = schema ? cJSON_PrintUnformatted(schema) : strdup(dflt);
    if (!t) { snprintf(msg, n, "out of memory"); return -1; }
    dsv4_json_schema *c = NULL;
    dsv4_err err = {0};
    if (dsv4_json_schema_compile(t, strlen(t), &c, &err)) {
        snprintf(msg, n, "'%s': %s", field, err.msg);
        free(t);
        return -1;
    }
    dsv4_json_schema_free(c);
    *out = t;
    return 1;
}

/* Anthropic's format: output_config.format (the current form) or the older output_format;
 * a null one is absent. Both given: they must agree (else -1). */
static int messages_format(const cJSON *body, const cJSON **rf, const char **key, char *msg, size_t n) {
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(body, "output_format");
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(body, "output_config");
    const cJSON *cur = cJSON_IsObject(oc) ? cJSON_GetObjectItemCaseSensitive(oc, "format") : NULL;
    if (cJSON_IsNull(old)) old = NULL;
    if (cJSON_IsNull(cur)) cur = NULL;
    if (old && cur && !cJSON_Compare(old, cur, 1)) {
        snprintf(msg, n, "'output_format' and 'output_config.format' differ: give one (output_format is the older form)");
        return -1;
    }
    *rf = cur ? cur : old;
    *key = cur ? "output_config.format" : "output_format";
    return 0;
}

int srv_json_format(const cJSON *body, int api, char **schema, const cJSON **shown, char *msg, size_t n) {
    *schema = NULL;
    *shown = NULL;
    const char *key = "response_format";
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, key);
    if (api == SRV_API_MESSAGES && messages_format(body, &rf, &key, msg, n)) return -1;
    if (!rf || cJSON_IsNull(rf)) return 0;
    const cJSON *ty = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
    if (api == SRV_API_MESSAGES) {
        /* {"type": "json_schema", "schema": {...}} */
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(rf, "schema");
        if (strcmp(t, "json_schema") || !cJSON_IsObject(sc)) {
            snprintf(msg, n, "%s: must be {\"type\": \"json_schema\", \"schema\": {...}}", key);
            return -1;
        }
        *shown = sc;
        return schema_text(sc, NULL, key, schema, msg, n);
    }
    if (!strcmp(t, "text")) return 0;
    *shown = rf;
    if (!strcmp(t, "json_object")) return schema_text(NULL, "{\"type\":\"object\"}", key, schema, msg, n);
    if (strcmp(t, "json_schema")) {
        snprintf(msg, n, "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
        return -1;
    }
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!cJSON_IsObject(js) || !cJSON_IsString(name)) {
        snprintf(msg, n, "'response_format.json_schema' must be an object with a string 'name'");
        return -1;
    }
    if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict)) {
        snprintf(msg, n, "'response_format.json_schema.strict' must be a boolean");
        return -1;
    }
    if (sc && !cJSON_IsNull(sc) && !cJSON_IsObject(sc) && !cJSON_IsBool(sc)) {
        snprintf(msg, n, "'response_format.json_schema.schema' must be an object");
        return -1;
    }
    /* no schema: any JSON value. strict false is enforced all the same: the subset
     * refuses what it would not enforce */
    return schema_text(cJSON_IsNull(sc) ? NULL : sc, "true", "response_format.json_schema.schema", schema, msg, n);
}

cJSON *srv_messages_with_format(const cJSON *messages, const cJSON *shown) {
    cJSON *m = cJSON_Duplicate(messages, 1);
    cJSON *rf = cJSON_Duplicate(shown, 1);
    if (!m || !rf) { cJSON_Delete(m); cJSON_Delete(rf); return NULL; }
    cJSON *first = m->child;
    const cJSON *role = first ? cJSON_GetObjectItemCaseSensitive(first, "role") : NULL;
    const int sys = cJSON_IsString(role) && (!strcmp(role->valuestring, "system") || !strcmp(role->valuestring, "developer"));
    if (sys && !cJSON_GetObjectItemCaseSensitive(first, "response_format")) {
        cJSON_AddItemToObject(first, "response_format", rf);
        return m;
    }
    if (sys) { cJSON_Delete(rf); return m; } /* the client's own per-message section stays */
    cJSON *s = cJSON_CreateObject();
    if (!s || !cJSON_AddStringToObject(s, "role", "system") || !cJSON_AddStringToObject(s, "content", "") ||
        !cJSON_InsertItemInArray(m, 0, s)) {
        cJSON_Delete(s);
        cJSON_Delete(rf);
        cJSON_Delete(m);
        return NULL;
    }
    cJSON_AddItemToObject(s, "response_format", rf);
    return m;
}

void srv_req_set_tools(srv_req *r, char *tools, int mode, int single, int after_think) {
    free(r->tools);
    r->tools = tools;
    r->gp.tools = tools;
    r->gp.tools_mode = mode;
    r->gp.tools_single = single;
    r->gp.json_after_think = after_think;
}

/* The tools' text (taken by *text) once the constraint's compile takes it; *strict: some
 * tool is strict. 0, or -1 with a message (400). */
static int tools_text(const cJSON *tools, char **text, int *strict, char *msg, size_t n) {
    *text = cJSON_PrintUnformatted(tools);
    if (!*text) { snprintf(msg, n, "out of memory"); return -1; }
    dsv4_err err = {0};
    if (dsv4_tools_check(*text, strlen(*text), strict, &err)) {
        snprintf(msg, n, "'tools': %s", err.msg);
        free(*text);
        *text = NULL;
        return -1;
    }
    return 0;
}

int srv_strict_tools(srv_req *r, const cJSON *tools, int tc, const char *name, int thinking, int single,
                     char *msg, size_t n) {
    if (!cJSON_IsArray(tools) || !tools->child || tc == SRV_TC_NONE) return 0;
    /* no strict tool: nothing to constrain, and none of the strict compile's refusals (two
     * tools of one name, a name DSML cannot write, over 1,024 tools) applies to the request */
    int any_strict = 0;
    for (const cJSON *t = tools->child; t && !any_strict; t = t->next)
        any_strict = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "strict"));
    if (!any_strict) return 0;
    cJSON *named = NULL;
    if (tc == SRV_TC_NAMED) {
        /* the named tool alone (srv_force_tool_call checked it is one of them) */
        named = cJSON_CreateArray();
        for (const cJSON *t = tools->child; named && t; t = t->next) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
            if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) {
                cJSON_AddItemToArray(named, cJSON_Duplicate(t, 1));
                break;
            }
        }
    }
    char *text = NULL;
    int strict = 0;
    const int rc = tools_text(named ? named : tools, &text, &strict, msg, n);
    cJSON_Delete(named);
    if (rc) return -1;
    if (!strict) { free(text); return 0; }
    /* a named choice calls that tool once */
    srv_req_set_tools(r, text, tc == SRV_TC_AUTO ? DSV4_TOOLS_AUTO : DSV4_TOOLS_REQUIRED, single || tc == SRV_TC_NAMED,
                      thinking);
    return 0;
}

int srv_callable_tools(srv_req *r, const cJSON *tools, int mode, char *schema, int thinking, int single, char *msg,
                       size_t n) {
    char *text = NULL;
    int strict = 0;
    if (tools_text(tools, &text, &strict, msg, n)) {
        free(schema);
        return -1;
    }
    srv_req_set_tools(r, text, mode, single, thinking);
    if (schema) srv_req_set_json(r, schema, thinking);
    return 0;
}

void srv_req_set_json(srv_req *r, char *schema, int after_think) {
    free(r->json_schema);
    r->json_schema = schema;
    r->gp.json_schema = schema;
    r->gp.json_after_think = after_think;
}

/* ---- guided decoding: vLLM's and SGLang's constraint fields ---- */

enum { G_JSON, G_JSON_OBJECT, G_REGEX, G_CHOICE, G_GRAMMAR, G_TAG };
typedef struct guide_field { const char *name; const cJSON *v; int kind; } guide_field;

#define MAX_CHOICES 100000

/* The request's constraint fields (null ones are absent): at most 14 */
static int guide_fields(const cJSON *body, const cJSON *so, guide_field *f) {
    static const struct { const char *key; int kind; } TOP[] = {
        {"guided_json", G_JSON},     {"guided_regex", G_REGEX}, {"guided_choice", G_CHOICE},
        {"guided_grammar", G_GRAMMAR}, {"regex", G_REGEX},       {"json_schema", G_JSON},
        {"ebnf", G_GRAMMAR},         {"grammar", G_GRAMMAR},
    };
    static const struct { const char *key, *name; int kind; } SO[] = {
        {"json", "structured_outputs.json", G_JSON},       {"regex", "structured_outputs.regex", G_REGEX},
        {"choice", "structured_outputs.choice", G_CHOICE}, {"json_object", "structured_outputs.json_object", G_JSON_OBJECT},
        {"grammar", "structured_outputs.grammar", G_GRAMMAR},
        {"structural_tag", "structured_outputs.structural_tag", G_TAG},
    };
    int k = 0;
    for (size_t i = 0; i < sizeof SO / sizeof *SO && so; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(so, SO[i].key);
        if (!v || cJSON_IsNull(v) || (SO[i].kind == G_JSON_OBJECT && cJSON_IsFalse(v))) continue;
        f[k++] = (guide_field){SO[i].name, v, SO[i].kind};
    }
    for (size_t i = 0; i < sizeof TOP / sizeof *TOP; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, TOP[i].key);
        if (!v || cJSON_IsNull(v)) continue;
        f[k++] = (guide_field){TOP[i].key, v, TOP[i].kind};
    }
    return k;
}

/* A choice list into the request: a non-empty array of strings */
static int guide_choice(srv_req *r, const guide_field *f, char *msg, size_t n) {
    const int cnt = cJSON_IsArray(f->v) ? cJSON_GetArraySize(f->v) : 0;
    if (!cnt || cnt > MAX_CHOICES) {
        snprintf(msg, n, "'%s' must be a non-empty list of at most %d strings", f->name, MAX_CHOICES);
        return -1;
    }
    const char **list = malloc((size_t)cnt * sizeof *list);
    if (!list) { snprintf(msg, n, "out of memory"); return -1; }
    int k = 0;
    for (const cJSON *x = f->v->child; x; x = x->next) {
        if (!cJSON_IsString(x)) {
            snprintf(msg, n, "'%s' must be a list of strings (item %d is not a string)", f->name, k);
            free(list);
            return -1;
        }
        list[k++] = x->valuestring;
    }
    const int rc = srv_req_set_guide(r, NULL, list, k);
    free(list);
    if (rc) snprintf(msg, n, "out of memory");
    return rc;
}

/* A JSON Schema given as an object (or true) or as a string of JSON, or json_object's
 * true: its text into *schema */
static int guide_json(const guide_field *f, char **schema, char *msg, size_t n) {
    if (f->kind == G_JSON_OBJECT) {
        if (!cJSON_IsTrue(f->v)) {
            snprintf(msg, n, "'%s' must be a boolean", f->name);
            return -1;
        }
        return schema_text(NULL, "{\"type\":\"object\"}", f->name, schema, msg, n) > 0 ? 0 : -1;
    }
    cJSON *parsed = cJSON_IsString(f->v) ? cJSON_Parse(f->v->valuestring) : NULL;
    const cJSON *sc = cJSON_IsString(f->v) ? parsed : f->v;
    int rc = -1;
    if (!cJSON_IsObject(sc) && !cJSON_IsBool(sc))
        snprintf(msg, n, "'%s' must be a JSON Schema (an object, or a string holding one)", f->name);
    else if (schema_text(sc, NULL, f->name, schema, msg, n) > 0)
        rc = 0;
    cJSON_Delete(parsed);
    return rc;
}

/* structured_outputs' keys: the constraints (guide_fields), the options that hold here
 * (disable_fallback: there is no other backend to fall back to; disable_additional_properties:
 * an object beside properties takes no other keys already; false of the whitespace options:
 * the default), and any other key a 400 naming it */
static int so_keys(const cJSON *so, char *msg, size_t n) {
    static const char *const KNOWN[] = {"json", "regex", "choice", "json_object", "grammar", "structural_tag",
                                        "disable_fallback", "disable_additional_properties"};
    for (const cJSON *x = so->child; x; x = x->next) {
        int known = 0;
        for (size_t i = 0; i < sizeof KNOWN / sizeof *KNOWN; i++) known |= !strcmp(x->string, KNOWN[i]);
        if (known) continue;
        if (!strcmp(x->string, "disable_any_whitespace") && (cJSON_IsFalse(x) || cJSON_IsNull(x))) continue;
        if (!strcmp(x->string, "whitespace_pattern") && cJSON_IsNull(x)) continue;
        snprintf(msg, n, "'structured_outputs.%.100s' is not supported (the keys taken: json, regex, choice, "
                 "json_object, grammar, disable_fallback, disable_additional_properties)", x->string);
        return -1;
    }
    return 0;
}

/* the body's structured_outputs (NULL: none), -1 when it is not an object or has a key not taken */
static int so_field(const cJSON *body, const cJSON **so, char *msg, size_t n) {
    *so = cJSON_GetObjectItemCaseSensitive(body, "structured_outputs");
    if (cJSON_IsNull(*so)) *so = NULL;
    if (*so && !cJSON_IsObject(*so)) {
        snprintf(msg, n, "'structured_outputs' must be an object");
        return -1;
    }
    return *so ? so_keys(*so, msg, n) : 0;
}

int srv_guided_refuse(const cJSON *body, const char *where, const char **param, char *msg, size_t n) {
    const cJSON *so;
    guide_field f[16];
    if (so_field(body, &so, msg, n)) {
        *param = "structured_outputs";
        return -1;
    }
    if (!guide_fields(body, so, f)) return 0;
    *param = f[0].name;
    snprintf(msg, n, "'%s' is not supported on %s (guided decoding is served on /v1/chat/completions and "
             "/v1/completions)", f[0].name, where);
    return -1;
}

int srv_guided(srv_req *r, const dsv4_tokenizer *tok, const cJSON *body, int json_format, char **doc, int thinking, const char **param,
               char *msg, size_t n) {
    const cJSON *so;
    *param = "structured_outputs";
    if (so_field(body, &so, msg, n)) return -1;
    guide_field f[16];
    const int k = guide_fields(body, so, f);
    *param = k ? f[0].name : NULL; /* a refusal names the field (the first, or the one at fault) */
    for (int i = 0; i < k; i++)
        if (f[i].kind == G_TAG) {
            *param = f[i].name;
            snprintf(msg, n, "'%s' is not supported (constrain the output with a grammar, a regex, a choice list or a "
                     "JSON Schema)", f[i].name);
            return -1;
        }
    if (k + (json_format != 0) > 1) {
        *param = json_format ? f[0].name : f[1].name;
        snprintf(msg, n, "one output constraint per request: '%s' and '%s' are both given", json_format ? "response_format" : f[0].name,
                 json_format ? f[0].name : f[1].name);
        return -1;
    }
    if (!k) return 0;
    const int json = f[0].kind == G_JSON || f[0].kind == G_JSON_OBJECT;
    if (doc && !json) {
        /* the tools' automaton (tool_match) takes a JSON document beside the opener, not a
         * regex's, a choice list's or a grammar's text */
        snprintf(msg, n, "'%s' together with 'tools' is not supported (a JSON constraint is: guided_json, "
                 "structured_outputs.json / json_object or response_format; else drop the tools or set "
                 "'tool_choice' to \"none\")", f[0].name);
        return -1;
    }
    r->gp.json_after_think = thinking;
    if (json) {
        char *schema = NULL;
        if (guide_json(&f[0], &schema, msg, n)) return -1;
        if (doc) *doc = schema; /* beside tools: the document or a call (srv_answer_constraint) */
        else srv_req_set_json(r, schema, thinking);
        return 0;
    }
    if (f[0].kind == G_CHOICE) return guide_choice(r, &f[0], msg, n);
    if (!cJSON_IsString(f[0].v)) {
        snprintf(msg, n, "'%s' must be a string (%s)", f[0].name, f[0].kind == G_GRAMMAR ? "a grammar" : "a regular expression");
        return -1;
    }
    dsv4_err err = {0};
    if (f[0].kind == G_GRAMMAR) {
        /* compiled once here (an intake lane) and its first mask made: a bound that mask passes
         * is the grammar's (a 400), not the tokens'; the choices share it and its masks */
        dsv4_grammar *g = NULL;
        if (dsv4_grammar_compile(f[0].v->valuestring, strlen(f[0].v->valuestring), tok, &g, &err)) {
            if (err.code == DSV4_ERR_NOMEM) snprintf(msg, n, "out of memory");
            else snprintf(msg, n, "'%s': the grammar %s", f[0].name, err.msg);
            return -1;
        }
        srv_req_set_compiled_grammar(r, g);
        if (srv_req_set_grammar(r, f[0].v->valuestring)) { snprintf(msg, n, "out of memory"); return -1; }
        return 0;
    }
    if (dsv4_regex_check(f[0].v->valuestring, strlen(f[0].v->valuestring), &err)) {
        snprintf(msg, n, "'%s': the regex %s", f[0].name, err.msg);
        return -1;
    }
    if (srv_req_set_guide(r, f[0].v->valuestring, NULL, 0)) { snprintf(msg, n, "out of memory"); return -1; }
    return 0;
}
