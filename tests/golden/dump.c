/* dump.c — reading and comparing dump directories (see dump.h). */
#include "dump.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/file.h"

int dump_load(const char *dir, dump_dir *out) {
    memset(out, 0, sizeof *out);
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = dsv4_read_file(path, 0, NULL, NULL);
    if (!text) { fprintf(stderr, "cannot read %s\n", path); return -1; }
    cJSON *m = cJSON_Parse(text);
    free(text);
    if (!m) { fprintf(stderr, "bad JSON in %s\n", path); return -1; }
    cJSON *toks = cJSON_GetObjectItem(m, "tokens");
    cJSON *files = cJSON_GetObjectItem(m, "files");
    cJSON *pl = cJSON_GetObjectItem(m, "prefill_len");
    if (!cJSON_IsArray(toks) || !cJSON_IsObject(files) || !cJSON_IsNumber(pl)) {
        fprintf(stderr, "%s: missing tokens/files/prefill_len\n", path);
        cJSON_Delete(m);
        return -1;
    }
    out->n_tokens = cJSON_GetArraySize(toks);
    out->tokens = malloc((size_t)out->n_tokens * sizeof(int32_t) + 1);
    for (int i = 0; i < out->n_tokens; i++) out->tokens[i] = (int32_t)cJSON_GetArrayItem(toks, i)->valuedouble;
    out->prefill_len = (int)pl->valuedouble;
    out->n_arrays = cJSON_GetArraySize(files);
    out->arrays = calloc((size_t)out->n_arrays + 1, sizeof(dump_array));
    int i = 0, bad = 0;
    for (cJSON *f = files->child; f; f = f->next, i++) {
        dump_array *a = &out->arrays[i];
        snprintf(a->name, sizeof a->name, "%s", f->string);
        cJSON *shape = cJSON_GetObjectItem(f, "shape");
        cJSON *dtype = cJSON_GetObjectItem(f, "dtype");
        cJSON *file = cJSON_GetObjectItem(f, "file");
        a->ndim = cJSON_GetArraySize(shape);
        a->n = 1;
        for (int d = 0; d < a->ndim && d < 8; d++) {
            a->shape[d] = (long long)cJSON_GetArrayItem(shape, d)->valuedouble;
            a->n *= (size_t)a->shape[d];
        }
        if (!cJSON_IsString(dtype)) continue;
        a->is_i32 = !strcmp(dtype->valuestring, "i32");
        if (strcmp(dtype->valuestring, "f32") && !a->is_i32) continue;
        snprintf(path, sizeof path, "%s/%s", dir, file->valuestring);
        size_t len = 0;
        a->data = (float *)dsv4_read_file(path, 0, &len, NULL);
        if (!a->data || len != a->n * sizeof(float)) {
            fprintf(stderr, "%s: expected %zu bytes, got %zu\n", path, a->n * sizeof(float), len);
            bad = 1;
        }
    }
    out->csa = cJSON_DetachItemFromObject(m, "csa_selected_entries");
    cJSON_Delete(m);
    if (bad) { dump_free(out); return -1; }
    return 0;
}

void dump_free(dump_dir *d) {
    for (int i = 0; i < d->n_arrays; i++) free(d->arrays[i].data);
    free(d->arrays);
    free(d->tokens);
    cJSON_Delete(d->csa);
    memset(d, 0, sizeof *d);
}

const dump_array *dump_find(const dump_dir *d, const char *name) {
    for (int i = 0; i < d->n_arrays; i++)
        if (!strcmp(d->arrays[i].name, name) && d->arrays[i].data) return &d->arrays[i];
    return NULL;
}

int dump_compare(const dump_array *a, const dump_array *ref, dump_cmp *out) {
    memset(out, 0, sizeof *out);
    if (a->ndim != ref->ndim || a->n != ref->n) return -1;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != ref->shape[d]) return -1;
    for (size_t i = 0; i < a->n; i++) {
        double diff = fabs((double)a->data[i] - (double)ref->data[i]);
        if (!(diff <= out->max_abs)) out->max_abs = diff; /* NaN propagates as a failure */
        if (fabs((double)ref->data[i]) > out->max_ref) out->max_ref = fabs((double)ref->data[i]);
    }
    out->max_rel = out->max_ref > 0 ? out->max_abs / out->max_ref : out->max_abs;
    const long long last = a->ndim ? a->shape[a->ndim - 1] : 1;
    out->rows = last ? (long long)(a->n / (size_t)last) : 0;
    for (long long r = 0; r < out->rows; r++) {
        const float *x = a->data + r * last, *y = ref->data + r * last;
        long long ax = 0, ay = 0;
        for (long long c = 1; c < last; c++) {
            if (x[c] > x[ax]) ax = c;
            if (y[c] > y[ay]) ay = c;
        }
        out->top1_same += ax == ay;
    }
    return 0;
}
