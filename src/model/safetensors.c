/* safetensors.c — mmap-based reader of safetensors files and sharded sets (see safetensors.h).
 *
 * The file is untrusted input. Everything read from it is checked before use: the header
 * length against the file, every JSON value's type, every shape against 64-bit overflow,
 * every byte range against the data area and against the other ranges. Allocations are
 * proportional to the header length (itself bounded by the file size and ST_MAX_HEADER).
 * The tensors of all shards live in one array sorted by name, so dsv4_st_find is a binary
 * search (Flash: 69,187 tensors over 46 shards).
 */
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/file.h"
#include "util/json.h"

/* The reference implementation's limit; Flash shard headers are a few hundred KiB. */
#define ST_MAX_HEADER 100000000ull
/* JSON numbers are doubles: integers above 2^53 are not exact, so they are refused. */
#define ST_MAX_INT (1ull << 53)
/* An index.json names every tensor once (Flash: about 6 MiB). */
#define ST_MAX_INDEX (256u << 20)

typedef struct {
    char *path;          /* as opened, for messages; "buffer" for dsv4_st_open_buffer */
    const uint8_t *base; /* whole file image */
    uint64_t size;
    int mapped;          /* munmap on close */
} st_file;

struct dsv4_st_set {
    int n_files;
    st_file *files;     /* (n_files) */
    int n;
    dsv4_st_tensor *t;  /* (n) sorted by name */
    char **names;       /* (n_files) one block of NUL-separated tensor names per file */
};

static const struct {
    const char *name;
    int size;
} DTYPES[DSV4_ST_N_DTYPES] = {
    [DSV4_ST_BOOL] = {"BOOL", 1},       [DSV4_ST_U8] = {"U8", 1},
    [DSV4_ST_I8] = {"I8", 1},           [DSV4_ST_I16] = {"I16", 2},
    [DSV4_ST_U16] = {"U16", 2},         [DSV4_ST_F16] = {"F16", 2},
    [DSV4_ST_BF16] = {"BF16", 2},       [DSV4_ST_I32] = {"I32", 4},
    [DSV4_ST_U32] = {"U32", 4},         [DSV4_ST_F32] = {"F32", 4},
    [DSV4_ST_F64] = {"F64", 8},         [DSV4_ST_I64] = {"I64", 8},
    [DSV4_ST_U64] = {"U64", 8},         [DSV4_ST_F8_E4M3] = {"F8_E4M3", 1},
    [DSV4_ST_F8_E5M2] = {"F8_E5M2", 1}, [DSV4_ST_F8_E8M0] = {"F8_E8M0", 1},
};

const char *dsv4_st_dtype_name(dsv4_st_dtype t) {
    return (unsigned)t < DSV4_ST_N_DTYPES ? DTYPES[t].name : "?";
}

int dsv4_st_dtype_size(dsv4_st_dtype t) { return (unsigned)t < DSV4_ST_N_DTYPES ? DTYPES[t].size : 0; }

int dsv4_st_dtype_from_name(const char *name, dsv4_st_dtype *out) {
    for (int i = 0; i < DSV4_ST_N_DTYPES; i++)
        if (strcmp(name, DTYPES[i].name) == 0) {
            *out = (dsv4_st_dtype)i;
            return 0;
        }
    return -1;
}

/* ---- small helpers ------------------------------------------------------------------ */

/* A non-negative integer that a double holds exactly. */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= (double)ST_MAX_INT) || v != (double)(uint64_t)v) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* "[2, 3]" into buf. */
static const char *fmt_shape(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static int tensor_name_cmp(const void *a, const void *b) {
    return strcmp(((const dsv4_st_tensor *)a)->name, ((const dsv4_st_tensor *)b)->name);
}

static int range_cmp(const void *a, const void *b) {
    const dsv4_st_tensor *x = *(const dsv4_st_tensor *const *)a, *y = *(const dsv4_st_tensor *const *)b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* ---- one file image ------------------------------------------------------------------ */

/* Reads one tensor entry of the header into t (name and file already set). */
static int parse_entry(const char *label, const cJSON *e, const uint8_t *data, uint64_t data_len,
                       dsv4_st_tensor *t, dsv4_err *err) {
    const char *nm = t->name;
    if (!cJSON_IsObject(e))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": entry is %s, must be an object", label, nm,
                         dsv4_json_kind(e));

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!dt) return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": dtype is missing", label, nm);
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": dtype is %s, must be a string", label, nm,
                         dsv4_json_kind(dt));
    if (dsv4_st_dtype_from_name(dt->valuestring, &t->dtype))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": unknown dtype \"%.40s\"", label, nm,
                         dt->valuestring);

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!sh) return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": shape is missing", label, nm);
    if (!cJSON_IsArray(sh))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": shape is %s, must be an array", label, nm,
                         dsv4_json_kind(sh));
    int ndim = 0;
    uint64_t elems = 1;
    int overflow = 0;
    for (const cJSON *d = sh->child; d; d = d->next, ndim++) {
        if (ndim >= DSV4_ST_MAX_DIMS)
            return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": shape has more than %d dimensions", label,
                             nm, DSV4_ST_MAX_DIMS);
        uint64_t v;
        if (json_uint(d, &v)) {
            if (cJSON_IsNumber(d))
                return dsv4_fail(err, DSV4_ERR_FORMAT,
                                 "%s: tensor \"%.200s\": shape[%d] = %.17g, must be a non-negative integer below 2^53",
                                 label, nm, ndim, d->valuedouble);
            return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": shape[%d] is %s, must be an integer",
                             label, nm, ndim, dsv4_json_kind(d));
        }
        t->shape[ndim] = (int64_t)v;
        if (v && elems > UINT64_MAX / v) overflow = 1;
        else elems *= v;
    }
    t->ndim = ndim;
    uint64_t need = 0;
    char sbuf[256];
    unsigned isz = (unsigned)dsv4_st_dtype_size(t->dtype);
    if (elems == 0) overflow = 0; /* a zero dimension makes the product 0 whatever the rest */
    if (overflow || elems > UINT64_MAX / isz)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": shape %s x %s overflows 64 bits", label, nm,
                         fmt_shape(sbuf, sizeof sbuf, t->shape, ndim), dsv4_st_dtype_name(t->dtype));
    need = elems * isz;

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!off) return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": data_offsets is missing", label, nm);
    uint64_t b = 0, en = 0;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || json_uint(off->child, &b) ||
        json_uint(off->child->next, &en))
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "%s: tensor \"%.200s\": data_offsets must be [begin, end], two non-negative integers", label,
                         nm);
    if (b > en)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\": data_offsets [%llu, %llu] has begin > end",
                         label, nm, (unsigned long long)b, (unsigned long long)en);
    if (en > data_len)
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "%s: tensor \"%.200s\": data_offsets [%llu, %llu] outside the data area of %llu bytes", label,
                         nm, (unsigned long long)b, (unsigned long long)en, (unsigned long long)data_len);
    if (en - b != need)
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "%s: tensor \"%.200s\": data_offsets span %llu bytes, but shape %s x %s needs %llu bytes",
                         label, nm, (unsigned long long)(en - b), fmt_shape(sbuf, sizeof sbuf, t->shape, ndim),
                         dsv4_st_dtype_name(t->dtype), (unsigned long long)need);
    t->data = data + b;
    t->nbytes = need;
    return 0;
}

/* No two non-empty byte ranges of one file may share a byte. ts: the file's tensors. */
static int check_overlaps(const char *label, dsv4_st_tensor *ts, int n, const uint8_t *data, dsv4_err *err) {
    if (n < 2) return 0;
    const dsv4_st_tensor **by = malloc((size_t)n * sizeof *by);
    if (!by) return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", label);
    for (int i = 0; i < n; i++) by[i] = &ts[i];
    qsort(by, (size_t)n, sizeof *by, range_cmp);
    int rc = 0;
    const dsv4_st_tensor *reach = NULL; /* the tensor whose range ends furthest so far */
    for (int i = 0; i < n && !rc; i++) {
        const dsv4_st_tensor *t = by[i];
        if (!t->nbytes) continue;
        if (reach && t->data < reach->data + reach->nbytes) {
            unsigned long long rb = (unsigned long long)(reach->data - data), tb = (unsigned long long)(t->data - data);
            rc = dsv4_fail(err, DSV4_ERR_FORMAT,
                           "%s: tensors \"%.200s\" [%llu, %llu) and \"%.200s\" [%llu, %llu) overlap", label,
                           reach->name, rb, rb + (unsigned long long)reach->nbytes, t->name, tb,
                           tb + (unsigned long long)t->nbytes);
        }
        if (!reach || t->data + t->nbytes > reach->data + reach->nbytes) reach = t;
    }
    free(by);
    return rc;
}

/* Parses the file image s->files[fi] and appends its tensors to s->t (unsorted). */
static int parse_file(dsv4_st_set *s, int fi, dsv4_err *err) {
    const st_file *f = &s->files[fi];
    const char *label = f->path;
    const uint8_t *buf = f->base;
    uint64_t len = f->size;
    if (len < 8)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: file is %llu bytes, shorter than the 8-byte header length",
                         label, (unsigned long long)len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    if (hlen > ST_MAX_HEADER)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: header length %llu is absurd (limit %llu bytes)", label,
                         (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen > len - 8)
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "%s: header length %llu extends beyond the file (%llu bytes after the length field)", label,
                         (unsigned long long)hlen, (unsigned long long)(len - 8));
    const uint8_t *data = buf + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;

    /* A NUL-terminated private copy: cJSON cannot then run past the header. */
    char *text = malloc(hlen + 1);
    if (!text) return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory for a %llu-byte header", label,
                                (unsigned long long)hlen);
    memcpy(text, buf + 8, hlen);
    text[hlen] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, hlen + 1, &end, 0);
    int rc = 0;
    dsv4_st_tensor *ts = NULL;
    if (!root) {
        size_t at = end && end >= text && end <= text + hlen ? (size_t)(end - text) : 0;
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: header is not valid JSON (syntax error at byte %zu of %llu)",
                       label, at, (unsigned long long)hlen);
        goto done;
    }
    /* Writers pad the header with spaces to align the data area; nothing else may follow. */
    for (size_t at = (size_t)(end - text); at < hlen; at++)
        if (!(text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: header has bytes after its JSON object (at byte %zu of %llu)",
                           label, at, (unsigned long long)hlen);
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: header is %s, must be a JSON object", label, dsv4_json_kind(root));
        goto done;
    }

    /* Names go into one block per file: total bytes < the header length. */
    int n = 0;
    size_t name_bytes = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (e->string && strcmp(e->string, "__metadata__") == 0) continue;
        n++;
        name_bytes += strlen(e->string ? e->string : "") + 1;
    }
    char *names = malloc(name_bytes ? name_bytes : 1);
    ts = calloc(n ? (size_t)n : 1, sizeof *ts);
    if (!names || !ts) {
        free(names);
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory for %d tensors", label, n);
        goto done;
    }
    s->names[fi] = names;
    int k = 0;
    for (const cJSON *e = root->child; e && !rc; e = e->next) {
        const char *nm = e->string ? e->string : "";
        if (strcmp(nm, "__metadata__") == 0) {
            if (!cJSON_IsObject(e))
                rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: __metadata__ is %s, must be an object", label, dsv4_json_kind(e));
            continue;
        }
        size_t l = strlen(nm) + 1;
        memcpy(names, nm, l);
        ts[k].name = names;
        ts[k].file = fi;
        names += l;
        rc = parse_entry(label, e, data, data_len, &ts[k], err);
        k++;
    }
    if (rc) goto done;

    qsort(ts, (size_t)n, sizeof *ts, tensor_name_cmp);
    for (int i = 1; i < n; i++)
        if (strcmp(ts[i - 1].name, ts[i].name) == 0) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\" appears twice in the header", label, ts[i].name);
            goto done;
        }
    if ((rc = check_overlaps(label, ts, n, data, err))) goto done;

    dsv4_st_tensor *grown = realloc(s->t, ((size_t)s->n + (size_t)n + 1) * sizeof *grown);
    if (!grown) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", label);
        goto done;
    }
    s->t = grown;
    if (n) memcpy(s->t + s->n, ts, (size_t)n * sizeof *ts);
    s->n += n;
done:
    free(ts);
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* Sorts all tensors by name and refuses a name held by two shards. */
static int finish(dsv4_st_set *s, dsv4_err *err) {
    if (s->n > 1) qsort(s->t, (size_t)s->n, sizeof *s->t, tensor_name_cmp);
    for (int i = 1; i < s->n; i++)
        if (strcmp(s->t[i - 1].name, s->t[i].name) == 0)
            return dsv4_fail(err, DSV4_ERR_FORMAT, "tensor \"%.200s\" is in both %.300s and %.300s", s->t[i].name,
                             s->files[s->t[i - 1].file].path, s->files[s->t[i].file].path);
    return 0;
}

static dsv4_st_set *set_new(int n_files, dsv4_err *err) {
    dsv4_st_set *s = calloc(1, sizeof *s);
    if (s) {
        s->files = calloc((size_t)n_files, sizeof *s->files);
        s->names = calloc((size_t)n_files, sizeof *s->names);
        if (s->files && s->names) {
            s->n_files = n_files;
            return s;
        }
        free(s->files);
        free(s->names);
        free(s);
    }
    dsv4_fail(err, DSV4_ERR_NOMEM, "safetensors: out of memory");
    return NULL;
}

void dsv4_st_close(dsv4_st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) {
        if (s->files[i].mapped) munmap((void *)s->files[i].base, s->files[i].size);
        free(s->files[i].path);
        free(s->names[i]);
    }
    free(s->files);
    free(s->names);
    free(s->t);
    free(s);
}

/* Maps path into s->files[fi]. */
static int map_file(dsv4_st_set *s, int fi, const char *path, dsv4_err *err) {
    st_file *f = &s->files[fi];
    if (!(f->path = strdup(path))) return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", path);
    struct stat st;
    int fd = dsv4_open_regular(path, &st, err); /* a FIFO would block in open() */
    if (fd < 0) return -fd;
    int rc = 0;
    if (st.st_size < 8) {
        /* mmap of an empty file fails; report what is wrong with the file instead. */
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: file is %lld bytes, shorter than the 8-byte header length", path,
                       (long long)st.st_size);
    } else {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            rc = dsv4_fail(err, DSV4_ERR_IO, "%s: mmap of %lld bytes failed: %s", path, (long long)st.st_size,
                           strerror(errno));
        } else {
            f->base = p;
            f->size = (uint64_t)st.st_size;
            f->mapped = 1;
        }
    }
    close(fd);
    return rc;
}

int dsv4_st_open_file(const char *path, dsv4_st_set **out, dsv4_err *err) {
    if (!path || !out) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_st_open_file: NULL argument");
    *out = NULL;
    dsv4_st_set *s = set_new(1, err);
    if (!s) return DSV4_ERR_NOMEM;
    int rc = map_file(s, 0, path, err);
    if (!rc) rc = parse_file(s, 0, err);
    if (!rc) rc = finish(s, err);
    if (rc) dsv4_st_close(s);
    else *out = s;
    return rc;
}

int dsv4_st_open_buffer(const uint8_t *buf, size_t len, dsv4_st_set **out, dsv4_err *err) {
    if ((!buf && len) || !out) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_st_open_buffer: NULL argument");
    *out = NULL;
    dsv4_st_set *s = set_new(1, err);
    if (!s) return DSV4_ERR_NOMEM;
    int rc = 0;
    if (!(s->files[0].path = strdup("buffer"))) rc = dsv4_fail(err, DSV4_ERR_NOMEM, "safetensors: out of memory");
    s->files[0].base = buf;
    s->files[0].size = len;
    if (!rc) rc = parse_file(s, 0, err);
    if (!rc) rc = finish(s, err);
    if (rc) dsv4_st_close(s);
    else *out = s;
    return rc;
}

/* ---- sharded sets ------------------------------------------------------------------- */

typedef struct {
    const char *tensor, *shard;
} map_entry;

static int map_tensor_cmp(const void *a, const void *b) {
    return strcmp(((const map_entry *)a)->tensor, ((const map_entry *)b)->tensor);
}
static int str_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard name must stay inside the model directory. */
static int bad_shard_name(const char *s) {
    return !s[0] || strchr(s, '/') || strchr(s, '\\') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0;
}

static int open_index(const char *dir, const char *index_path, dsv4_st_set **out, dsv4_err *err) {
    size_t len = 0;
    char *text = dsv4_read_regular_file(index_path, ST_MAX_INDEX, &len, err);
    if (!text) return err ? err->code : DSV4_ERR_IO;
    const char *endp = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &endp, 0);
    map_entry *map = NULL;
    const char **shards = NULL;
    dsv4_st_set *s = NULL;
    char *path = NULL;
    int rc = 0, n_map = 0, n_shards = 0;
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!root) {
        size_t at = endp && endp >= text && endp <= text + len ? (size_t)(endp - text) : 0;
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: not valid JSON (syntax error at byte %zu)", index_path, at);
        goto done;
    }
    if (!cJSON_IsObject(root) || !cJSON_IsObject(wm)) {
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: weight_map is %s, must be an object", index_path, dsv4_json_kind(wm));
        goto done;
    }
    for (const cJSON *e = wm->child; e; e = e->next) n_map++;
    if (!n_map) {
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: weight_map is empty", index_path);
        goto done;
    }
    map = calloc((size_t)n_map, sizeof *map);
    shards = calloc((size_t)n_map, sizeof *shards);
    if (!map || !shards) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    int k = 0;
    for (const cJSON *e = wm->child; e; e = e->next, k++) {
        const char *tn = e->string ? e->string : "";
        if (!cJSON_IsString(e) || !e->valuestring) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: weight_map[\"%.200s\"] is %s, must be a file name", index_path,
                           tn, dsv4_json_kind(e));
            goto done;
        }
        if (bad_shard_name(e->valuestring)) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: weight_map[\"%.200s\"] = \"%.200s\" is not a plain file name",
                           index_path, tn, e->valuestring);
            goto done;
        }
        map[k].tensor = tn;
        map[k].shard = e->valuestring;
        shards[k] = e->valuestring;
    }
    qsort(map, (size_t)n_map, sizeof *map, map_tensor_cmp);
    for (int i = 1; i < n_map; i++)
        if (strcmp(map[i - 1].tensor, map[i].tensor) == 0) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: weight_map lists tensor \"%.200s\" twice", index_path,
                           map[i].tensor);
            goto done;
        }
    /* The distinct shard files, in name order: their position is the shard index. */
    qsort(shards, (size_t)n_map, sizeof *shards, str_ptr_cmp);
    for (int i = 0; i < n_map; i++)
        if (!n_shards || strcmp(shards[n_shards - 1], shards[i]) != 0) shards[n_shards++] = shards[i];

    if (!(s = set_new(n_shards, err))) {
        rc = DSV4_ERR_NOMEM;
        goto done;
    }
    size_t dl = strlen(dir);
    for (int i = 0; i < n_shards && !rc; i++) {
        free(path);
        path = malloc(dl + strlen(shards[i]) + 2);
        if (!path) {
            rc = dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", index_path);
            break;
        }
        sprintf(path, "%s/%s", dir, shards[i]);
        rc = map_file(s, i, path, err);
        if (!rc) rc = parse_file(s, i, err);
    }
    if (rc || (rc = finish(s, err))) goto done;

    /* Every listed tensor is in the shard the index names ... */
    for (int i = 0; i < n_map; i++) {
        dsv4_st_tensor key = {.name = map[i].tensor};
        const dsv4_st_tensor *t = s->n ? bsearch(&key, s->t, (size_t)s->n, sizeof *s->t, tensor_name_cmp) : NULL;
        if (!t) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\" is listed in shard %.200s but is not there",
                           index_path, map[i].tensor, map[i].shard);
            goto done;
        }
        const char *held = s->files[t->file].path + dl + 1;
        if (strcmp(held, map[i].shard) != 0) {
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tensor \"%.200s\" is listed in shard %.200s but is in %.200s",
                           index_path, map[i].tensor, map[i].shard, held);
            goto done;
        }
    }
    /* ... and every tensor of the shards is listed (a stray one means mixed-up files). */
    if (s->n != n_map) {
        for (int i = 0; i < s->n; i++) {
            map_entry key = {.tensor = s->t[i].name};
            if (!bsearch(&key, map, (size_t)n_map, sizeof *map, map_tensor_cmp)) {
                rc = dsv4_fail(err, DSV4_ERR_FORMAT,
                               "%s holds tensor \"%.200s\" that %s does not list (%d unlisted tensors in all)",
                               s->files[s->t[i].file].path, s->t[i].name, index_path, s->n - n_map);
                goto done;
            }
        }
    }
done:
    free(path);
    free(map);
    free(shards);
    cJSON_Delete(root);
    free(text);
    if (rc) dsv4_st_close(s);
    else *out = s;
    return rc;
}

int dsv4_st_open_dir(const char *dir, dsv4_st_set **out, dsv4_err *err) {
    if (!dir || !out) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_st_open_dir: NULL argument");
    *out = NULL;
    size_t dl = strlen(dir);
    char *p = malloc(dl + 64);
    if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", dir);
    int rc;
    struct stat st;
    sprintf(p, "%s/model.safetensors.index.json", dir);
    if (stat(p, &st) == 0) {
        rc = open_index(dir, p, out, err);
    } else {
        sprintf(p, "%s/model.safetensors", dir);
        if (stat(p, &st) == 0) rc = dsv4_st_open_file(p, out, err);
        else
            rc = dsv4_fail(err, DSV4_ERR_IO, "%s: neither model.safetensors.index.json nor model.safetensors found",
                           dir);
    }
    free(p);
    return rc;
}

/* ---- queries -------------------------------------------------------------------------- */

int dsv4_st_count(const dsv4_st_set *s) { return s ? s->n : 0; }

const dsv4_st_tensor *dsv4_st_at(const dsv4_st_set *s, int i) {
    return s && i >= 0 && i < s->n ? &s->t[i] : NULL;
}

const dsv4_st_tensor *dsv4_st_find(const dsv4_st_set *s, const char *name) {
    if (!s || !name || !s->n) return NULL;
    dsv4_st_tensor key = {.name = name};
    return bsearch(&key, s->t, (size_t)s->n, sizeof *s->t, tensor_name_cmp);
}

int dsv4_st_n_files(const dsv4_st_set *s) { return s ? s->n_files : 0; }

uint64_t dsv4_st_file_size(const dsv4_st_set *s, int file) {
    return s && file >= 0 && file < s->n_files ? s->files[file].size : 0;
}

const char *dsv4_st_file_path(const dsv4_st_set *s, int file) {
    return s && file >= 0 && file < s->n_files ? s->files[file].path : NULL;
}

const uint8_t *dsv4_st_file_image(const dsv4_st_set *s, int file) {
    return s && file >= 0 && file < s->n_files ? s->files[file].base : NULL;
}

uint64_t dsv4_st_file_data_offset(const dsv4_st_set *s, int file) {
    if (!s || file < 0 || file >= s->n_files) return 0;
    const uint8_t *b = s->files[file].base; /* the length was validated at open */
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return 8 + n;
}
