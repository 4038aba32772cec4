/* json_reads.c — the most readings (json_match.c's stacks) a compiled schema's automaton
 * can hold at once, bounded at compile time, so that a schema whose anyOf / oneOf branches
 * could outgrow JSON_MAX_STACKS is refused by name rather than losing readings.
 *
 * A reading splits only where a value of an anyOf starts (one per branch that takes the
 * value's first byte: nested anyOfs flattened), and the readings of a value become one
 * stack again once it ends (below it they are the same stack: dedup merges them). So
 * R(v), the most readings a value of node v is read as at once, is at most:
 *   a literal, string, number, boolean or null: 1;
 *   an object or array: 1, or the most of any one of its values (one is read at a time);
 *   an anyOf: per first byte ('{', '[', '"', a digit or '-', 't', 'f', 'n') the sum over
 *     the branches that take it. For '{' the object branches are counted where they can be
 *     at once: all at a key, or all inside the same key's value (keys are matched whole and
 *     in order), and there only the branches that can agree on an earlier required `const`
 *     property (a discriminator: Pydantic's Literal tag) count together: for the property
 *     d that separates them best, the branches without d plus the largest group holding
 *     the same value of d.
 * $ref cycles make it a fixpoint: the least one, from 1 up (each round only raises a
 * bound; rounds stop once it exceeds the cap). Within a step, json_match.c also holds the
 * stacks still being expanded: the reading itself and one per nested anyOf level being
 * opened (E), so R(root) + E + 1 must fit JSON_MAX_STACKS. */
#include "sample/json.h"

#include <stdlib.h>
#include <string.h>

enum { C_OBJ, C_ARR, C_STR, C_NUM, C_T, C_F, C_N, N_CLS };

/* the first-byte class of a literal's text */
static int lit_class(char c) {
    switch (c) {
    case '{': return C_OBJ;
    case '[': return C_ARR;
    case '"': return C_STR;
    case 't': return C_T;
    case 'f': return C_F;
    case 'n': return C_N;
    default: return C_NUM;
    }
}

/* A multi-branch anyOf's bound as a program over the bounds of other nodes: per class the
 * branches read as one frame (cnt), the array branches (their items' bounds), the object
 * branches, and per key the code: n_unc, unc nodes..., n_groups, (n, nodes...)... */
typedef struct plan {
    int cnt[N_CLS];
    int arr0, n_arr;  /* array branches: [arr0, arr0 + n_arr) of rd.ids */
    int n_obj;
    int code0, n_keys;
} plan;

typedef struct rd {
    const dsv4_json_schema *s;
    int *ids, n_ids, cap_ids;
    plan *p;          /* (n_nodes) for multi-branch anyOfs */
    int *leaf, n_leaf, cap_leaf;
    json_budget *bud;
} rd;

/* appends x to the growing list (*a, *n, *cap); -1 out of memory */
static int push_int(int **a, int *n, int *cap, int x) {
    if (json_grow((void **)a, cap, *n + 1, sizeof **a)) return -1;
    (*a)[(*n)++] = x;
    return 0;
}

static int push_id(rd *r, int v) { return push_int(&r->ids, &r->n_ids, &r->cap_ids, v); }

/* the branches of anyOf v that are not anyOfs (the nesting has no cycle: json_schema.c
 * refused those), into r->leaf */
static int flatten(rd *r, int v) {
    const json_node *n = &r->s->nodes[v];
    if (n->kind != JN_ANYOF) return push_int(&r->leaf, &r->n_leaf, &r->cap_leaf, v);
    for (int i = 0; i < n->n_alts; i++)
        if (flatten(r, r->s->kids[n->alts + i])) return -1;
    return 0;
}

/* node v through one-branch anyOfs ($ref placeholders) */
static int resolve(const dsv4_json_schema *s, int v) {
    while (s->nodes[v].kind == JN_ANYOF && s->nodes[v].n_alts == 1) v = s->kids[s->nodes[v].alts];
    return v;
}

/* the index of key k (quoted JSON text) in object node o, or -1 */
static int find_key(rd *r, const json_node *o, const char *k) {
    for (int i = 0; i < o->n_props; i++) {
        r->bud->work--;
        if (!strcmp(r->s->props[o->props + i].key, k)) return i;
    }
    return -1;
}

/* the single value of property d of object o when it is required, a const and comes before
 * index `before` (so every reading inside a later key has read it); NULL otherwise */
static const char *tag_of(rd *r, const json_node *o, const char *d, int before) {
    const int i = find_key(r, o, d);
    if (i < 0 || i >= before || !r->s->props[o->props + i].required) return NULL;
    const json_node *n = &r->s->nodes[resolve(r->s, r->s->props[o->props + i].node)];
    return n->kind == JN_LIT && n->n_lits == 1 ? r->s->lits[n->lits].text : NULL;
}

/* The code of one key k: its members are the object branches that declare it (or take
 * free keys); grouped by the discriminator that separates them best. */
static int key_code(rd *r, const int *obj, int n_obj, const char *k) {
    const dsv4_json_schema *s = r->s;
    int mem[JSON_MAX_STACKS], at[JSON_MAX_STACKS], val[JSON_MAX_STACKS], m = 0;
    for (int b = 0; b < n_obj; b++) {
        const json_node *o = &s->nodes[obj[b]];
        const int i = o->n_props ? find_key(r, o, k) : -1;
        if (i >= 0) mem[m] = b, at[m] = i, val[m++] = s->props[o->props + i].node;
        else if (!o->n_props && o->additional >= 0) mem[m] = b, at[m] = 0, val[m++] = o->additional;
    }
    /* candidates: the first declaring member's earlier required consts */
    int first = 0;
    while (first < m && !s->nodes[obj[mem[first]]].n_props) first++;
    const char *best = NULL;
    int best_score = m;
    const char *tag[JSON_MAX_STACKS];
    for (int j = 0; first < m && j < at[first]; j++) {
        const json_node *o = &s->nodes[obj[mem[first]]];
        const char *d = s->props[o->props + j].key;
        if (!tag_of(r, o, d, at[first])) continue;
        int unc = 0, big = 0;
        for (int x = 0; x < m; x++) {
            const json_node *ox = &s->nodes[obj[mem[x]]];
            tag[x] = ox->n_props ? tag_of(r, ox, d, at[x]) : NULL;
            unc += !tag[x];
        }
        for (int x = 0; x < m; x++) {
            if (!tag[x]) continue;
            int same = 0;
            for (int y = 0; y < m; y++) {
                r->bud->work--;
                same += tag[y] && !strcmp(tag[x], tag[y]);
            }
            if (same > big) big = same;
        }
        if (unc + big < best_score) best_score = unc + big, best = d;
    }
    for (int x = 0; x < m; x++) {
        const json_node *ox = &s->nodes[obj[mem[x]]];
        tag[x] = best && ox->n_props ? tag_of(r, ox, best, at[x]) : NULL;
    }
    int unc = 0;
    for (int x = 0; x < m; x++) unc += !tag[x];
    if (push_id(r, unc)) return -1;
    for (int x = 0; x < m; x++)
        if (!tag[x] && push_id(r, val[x])) return -1;
    /* the groups: each led by its first member */
    int n_groups = 0;
    for (int x = 0; x < m; x++) {
        int lead = tag[x] != NULL;
        for (int y = 0; y < x && lead; y++) lead = !(tag[y] && !strcmp(tag[x], tag[y]));
        n_groups += lead;
    }
    if (push_id(r, n_groups)) return -1;
    for (int x = 0; x < m; x++) {
        int lead = tag[x] != NULL;
        for (int y = 0; y < x && lead; y++) lead = !(tag[y] && !strcmp(tag[x], tag[y]));
        if (!lead) continue;
        int n = 0;
        for (int y = x; y < m; y++) n += tag[y] && !strcmp(tag[x], tag[y]);
        if (push_id(r, n)) return -1;
        for (int y = x; y < m; y++)
            if (tag[y] && !strcmp(tag[x], tag[y]) && push_id(r, val[y])) return -1;
    }
    return 0;
}

/* The plan of multi-branch anyOf v; a branch count past the cap saturates it (n_obj or a
 * class count above JSON_MAX_STACKS is a bound above the cap already). */
static int build_plan(rd *r, int v) {
    const dsv4_json_schema *s = r->s;
    plan *p = &r->p[v];
    memset(p, 0, sizeof *p);
    r->n_leaf = 0;
    if (flatten(r, v)) return -1;
    int obj[JSON_MAX_STACKS];
    p->arr0 = r->n_ids;
    for (int i = 0; i < r->n_leaf; i++) {
        const json_node *n = &s->nodes[r->leaf[i]];
        if (n->kind == JN_LIT) {
            int seen = 0;
            for (int k = 0; k < n->n_lits; k++) {
                const int c = lit_class(s->lits[n->lits + k].text[0]);
                if (!(seen >> c & 1)) p->cnt[c]++;
                seen |= 1 << c;
            }
            continue;
        }
        p->cnt[C_STR] += (n->types & JT_STR) != 0;
        p->cnt[C_NUM] += (n->types & (JT_NUM | JT_INT)) != 0;
        p->cnt[C_T] += (n->types & JT_BOOL) != 0;
        p->cnt[C_F] += (n->types & JT_BOOL) != 0;
        p->cnt[C_N] += (n->types & JT_NULL) != 0;
        if ((n->types & JT_ARR) && push_id(r, r->leaf[i])) return -1;
        if (n->types & JT_OBJ) {
            if (p->n_obj < JSON_MAX_STACKS) obj[p->n_obj] = r->leaf[i];
            p->n_obj++;
        }
    }
    p->n_arr = r->n_ids - p->arr0;
    p->code0 = r->n_ids;
    if (p->n_obj > JSON_MAX_STACKS) return 0; /* saturated: no keys needed */
    /* each distinct declared key once (at its first declaring branch), then any other key
     * (the free-key branches alone) */
    int free_keys = 0;
    for (int b = 0; b < p->n_obj; b++) {
        const json_node *o = &s->nodes[obj[b]];
        free_keys |= !o->n_props && o->additional >= 0;
        for (int i = 0; i < o->n_props; i++) {
            const char *k = s->props[o->props + i].key;
            int seen = 0;
            for (int a = 0; a < b && !seen; a++) seen = s->nodes[obj[a]].n_props && find_key(r, &s->nodes[obj[a]], k) >= 0;
            if (seen) continue;
            if (key_code(r, obj, p->n_obj, k)) return -1;
            p->n_keys++;
        }
    }
    if (free_keys) {
        if (key_code(r, obj, p->n_obj, "")) return -1; /* "" is no quoted key: the free ones alone */
        p->n_keys++;
    }
    return 0;
}

static int max2(int a, int b) { return a > b ? a : b; }

/* R(v) from the current bounds R */
static int eval(const rd *r, const int *R, int v) {
    const dsv4_json_schema *s = r->s;
    const json_node *n = &s->nodes[v];
    if (n->kind == JN_LIT) return 1;
    if (n->kind == JN_TYPED) {
        int m = 1;
        for (int i = 0; (n->types & JT_OBJ) && i < n->n_props; i++) m = max2(m, R[s->props[n->props + i].node]);
        if ((n->types & JT_OBJ) && n->additional >= 0) m = max2(m, R[n->additional]);
        for (int i = 0; (n->types & JT_ARR) && i < n->n_prefix; i++) m = max2(m, R[s->kids[n->prefix + i]]);
        if ((n->types & JT_ARR) && n->items >= 0) m = max2(m, R[n->items]);
        return m;
    }
    if (n->n_alts == 1) return R[s->kids[n->alts]];
    const plan *p = &r->p[v];
    int m = 0;
    for (int c = C_STR; c < N_CLS; c++) m = max2(m, p->cnt[c]);
    int arr = p->cnt[C_ARR];
    for (int i = 0; i < p->n_arr; i++) arr += R[r->ids[p->arr0 + i]];
    m = max2(m, arr);
    if (p->n_obj > JSON_MAX_STACKS) return JSON_MAX_STACKS + 1;
    int obj = p->n_obj;
    const int *c = p->n_keys ? r->ids + p->code0 : NULL; /* (no ids at all: NULL) */
    for (int k = 0; k < p->n_keys; k++) {
        int sum = 0, big = 0;
        for (int u = *c++; u > 0; u--) sum += R[*c++];
        for (int g = *c++; g > 0; g--) {
            int gs = 0;
            for (int x = *c++; x > 0; x--) gs += R[*c++];
            big = max2(big, gs);
        }
        obj = max2(obj, sum + big);
    }
    return max2(m, p->cnt[C_OBJ] + (p->n_obj ? obj : 0));
}

/* E(v): the multi-branch anyOfs opened one inside another at a value's first byte */
static int chain(const dsv4_json_schema *s, int v, int *E) {
    const json_node *n = &s->nodes[v];
    if (n->kind != JN_ANYOF) return 0;
    if (E[v] >= 0) return E[v];
    int m = 0;
    for (int i = 0; i < n->n_alts; i++) m = max2(m, chain(s, s->kids[n->alts + i], E));
    return E[v] = m + (n->n_alts > 1);
}

int json_readings(const dsv4_json_schema *s, json_budget *bud, int *worst) {
    const int N = s->n_nodes, LIM = JSON_MAX_STACKS + 1;
    rd r = {.s = s, .bud = bud};
    int *R = malloc((size_t)N * sizeof *R), *E = malloc((size_t)N * sizeof *E);
    r.p = calloc((size_t)N, sizeof *r.p);
    int rc = -1;
    *worst = 0;
    if (!R || !E || !r.p) goto done;
    int e_max = 0;
    for (int v = 0; v < N; v++) R[v] = 1, E[v] = -1;
    for (int v = 0; v < N; v++) {
        e_max = max2(e_max, chain(s, v, E));
        if (s->nodes[v].kind == JN_ANYOF && s->nodes[v].n_alts > 1 && build_plan(&r, v)) goto done;
        if (bud->work < 0) { rc = -2; goto done; }
    }
    int over = 0;
    for (int changed = 1; changed && !over;) {
        changed = 0;
        for (int v = 0; v < N && !over; v++) {
            int x = eval(&r, R, v);
            if (x > LIM) x = LIM;
            if (x > R[v]) {
                R[v] = x, changed = 1;
                /* the innermost anyOf past the cap (nodes are made before their parents) */
                if (x + 1 + e_max > JSON_MAX_STACKS) over = 1, *worst = v;
            }
        }
    }
    /* (R[0] bounds every node's: a value holds its parts' readings) */
    rc = over ? JSON_MAX_STACKS + 1 : R[0] + 1 + e_max;
    if (rc > JSON_MAX_STACKS && (s->nodes[*worst].kind != JN_ANYOF || s->nodes[*worst].n_alts < 2)) *worst = 0;
done:
    free(R), free(E), free(r.p), free(r.ids), free(r.leaf);
    return rc;
}
