/* prefix_cache.c — what the server keeps in the prefix cache and the KV directory
 * (prefix_cache.h). */
#define _POSIX_C_SOURCE 200809L
#include "serve/prefix_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "serve/util.h"

/* One file of the directory: the snapshot of tokens [0, n) whose chain key is key. */
typedef struct kv_file {
    uint64_t key;
    int64_t n, bytes;
    int64_t used;    /* LRU order: mtime in ns at the scan, then the time of each use */
} kv_file;

struct srv_pcache {
    dsv4_engine *e;
    int A;                /* alignment: lcm of the compress ratios */
    char *dir;            /* NULL: memory only */
    uint64_t dir_bytes;   /* budget, 0 = unlimited */
    kv_file *files;       /* (n_files) */
    int n_files, cap_files;
    srv_pcache_stats st;
    uint64_t *keys;       /* (cap_keys) chain keys of a context's aligned blocks */
    int64_t cap_keys;
};

/* ---- names ------------------------------------------------------------------------------- */

/* Key of aligned block i given block i - 1's: FNV-1a over the previous key and the block's
 * token ids (little-endian bytes), so a file name depends on every token before it. */
static uint64_t chain_step(uint64_t prev, const int32_t *tok, int count) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 8; i++) h = (h ^ ((prev >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    for (int t = 0; t < count; t++) {
        const uint32_t v = (uint32_t)tok[t];
        for (int i = 0; i < 4; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    }
    return h;
}

static void file_name(char *buf, size_t cap, const char *dir, uint64_t key, int64_t n) {
    snprintf(buf, cap, "%s/p%" PRId64 "-%016" PRIx64 ".kv", dir, n, key);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* ---- the directory's index --------------------------------------------------------------- */

static kv_file *find_file(srv_pcache *pc, uint64_t key, int64_t n) {
    for (int i = 0; i < pc->n_files; i++)
        if (pc->files[i].key == key && pc->files[i].n == n) return &pc->files[i];
    return NULL;
}

static int add_file(srv_pcache *pc, uint64_t key, int64_t n, int64_t bytes, int64_t used) {
    if (pc->n_files == pc->cap_files) {
        int cap = 2 * pc->cap_files + 16;
        kv_file *f = realloc(pc->files, (size_t)cap * sizeof *f);
        if (!f) return -1;
        pc->files = f;
        pc->cap_files = cap;
    }
    pc->files[pc->n_files++] = (kv_file){key, n, bytes, used};
    pc->st.disk_files++;
    pc->st.disk_bytes += bytes;
    return 0;
}

static void drop_file(srv_pcache *pc, kv_file *f) {
    pc->st.disk_files--;
    pc->st.disk_bytes -= f->bytes;
    *f = pc->files[--pc->n_files];
}

/* Deletes least recently used files until the directory fits its budget. */
static void trim_dir(srv_pcache *pc) {
    while (pc->dir_bytes && (uint64_t)pc->st.disk_bytes > pc->dir_bytes && pc->n_files > 0) {
        kv_file *lru = &pc->files[0];
        for (int i = 1; i < pc->n_files; i++)
            if (pc->files[i].used < lru->used) lru = &pc->files[i];
        char path[4200];
        file_name(path, sizeof path, pc->dir, lru->key, lru->n);
        if (unlink(path) && errno != ENOENT)
            fprintf(stderr, "dsv4 serve: warning: kv-dir: cannot delete %s: %s\n", path, strerror(errno));
        drop_file(pc, lru);
    }
}

/* Sets a file that failed validation aside as NAME.bad (a later scan ignores it). */
static void set_aside(srv_pcache *pc, kv_file *f, const char *path, const char *why) {
    char bad[4300];
    snprintf(bad, sizeof bad, "%s.bad", path);
    fprintf(stderr, "dsv4 serve: warning: kv-dir: %s; set aside as %s, the request is served "
            "cold\n", why, bad);
    if (rename(path, bad)) unlink(path);
    drop_file(pc, f);
    pc->st.disk_bad++;
}

/* Indexes DIR: *.kv files by name; NAME.tmp.PID files of saves that never finished are
 * deleted (dsv4_snapshot_save renames them over NAME only once complete). */
static int scan_dir(srv_pcache *pc, dsv4_err *err) {
    if (mkdir(pc->dir, 0777) && errno != EEXIST)
        return srv_fail(err, DSV4_ERR_IO, "--kv-dir %s: cannot create it: %s", pc->dir, strerror(errno));
    DIR *d = opendir(pc->dir);
    if (!d) return srv_fail(err, DSV4_ERR_IO, "--kv-dir %s: %s", pc->dir, strerror(errno));
    struct dirent *de;
    char path[4200];
    while ((de = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", pc->dir, de->d_name);
        if (strstr(de->d_name, ".kv.tmp.")) {
            if (unlink(path) == 0)
                fprintf(stderr, "dsv4 serve: kv-dir: deleted %s (an interrupted save)\n", path);
            continue;
        }
        int64_t n;
        uint64_t key;
        int used = 0;
        const size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 3, ".kv")) continue;
        if (sscanf(de->d_name, "p%" SCNd64 "-%16" SCNx64 ".kv%n", &n, &key, &used) != 2 ||
            (size_t)used != len || n <= 0 || n % pc->A)
            continue;  /* not one of ours */
        struct stat st;
        if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
        if (add_file(pc, key, n, (int64_t)st.st_size,
                     (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec)) {
            closedir(d);
            return srv_fail(err, DSV4_ERR_NOMEM, "--kv-dir: out of memory");
        }
    }
    closedir(d);
    trim_dir(pc);
    return DSV4_OK;
}

/* ---- public ------------------------------------------------------------------------------ */

int srv_pcache_create(dsv4_engine *e, const char *dir, uint64_t dir_bytes, srv_pcache **out,
                      dsv4_err *err) {
    *out = NULL;
    srv_pcache *pc = calloc(1, sizeof *pc);
    if (!pc) return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
    pc->e = e;
    pc->A = dsv4_engine_alignment(e);
    pc->dir_bytes = dir_bytes;
    if (dir) {
        if (!(pc->dir = strdup(dir))) { free(pc); return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory"); }
        int rc = scan_dir(pc, err);
        if (rc) { srv_pcache_free(pc); return rc; }
    }
    *out = pc;
    return DSV4_OK;
}

void srv_pcache_free(srv_pcache *pc) {
    if (!pc) return;
    free(pc->dir);
    free(pc->files);
    free(pc->keys);
    free(pc);
}

int64_t srv_pcache_prompt_point(const srv_pcache *pc, int64_t n) {
    return pc && n > 1 ? (n - 1) / pc->A * pc->A : 0;
}

int srv_pcache_aligned(const srv_pcache *pc, int64_t n) { return pc && n > 0 && n % pc->A == 0; }

/* Writes snap to the directory unless its file is there (then marks it used). */
static void save(srv_pcache *pc, const dsv4_snapshot *snap) {
    const int64_t n = dsv4_snapshot_length(snap);
    const int32_t *tok = dsv4_snapshot_tokens(snap);
    uint64_t key = 0;
    for (int64_t i = 0; i < n / pc->A; i++) key = chain_step(key, tok + i * pc->A, pc->A);
    char path[4200];
    file_name(path, sizeof path, pc->dir, key, n);
    kv_file *f = find_file(pc, key, n);
    if (f) {
        f->used = now_ns();
        utimensat(AT_FDCWD, path, NULL, 0);
        return;
    }
    dsv4_err err = {0};
    struct stat st;
    if (dsv4_snapshot_save(pc->e, snap, path, &err)) {
        fprintf(stderr, "dsv4 serve: warning: kv-dir: %s\n", err.msg);
        return;
    }
    if (stat(path, &st) || add_file(pc, key, n, (int64_t)st.st_size, now_ns())) return;
    pc->st.disk_saves++;
    trim_dir(pc);
}

int64_t srv_pcache_keys(const srv_pcache *pc, const int32_t *tokens, int64_t n, uint64_t **keys, int64_t *cap) {
    const int64_t nb = pc && n > 0 ? n / pc->A : 0;
    if (nb > *cap) {
        uint64_t *k = realloc(*keys, (size_t)nb * sizeof *k);
        if (!k) return -1;
        *keys = k;
        *cap = nb;
    }
    for (int64_t i = 0; i < nb; i++) (*keys)[i] = chain_step(i ? (*keys)[i - 1] : 0, tokens + i * pc->A, pc->A);
    return nb;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int64_t srv_pcache_held(const srv_pcache *pc, uint64_t **keys, int64_t *cap) {
    if (!pc) return 0;
    const int64_t in_mem = dsv4_prefix_keys(pc->e, NULL, 0), need = in_mem + pc->n_files;
    if (need > *cap) {
        uint64_t *k = realloc(*keys, (size_t)need * sizeof *k);
        if (!k) return -1;
        *keys = k;
        *cap = need;
    }
    int64_t n = dsv4_prefix_keys(pc->e, *keys, in_mem);
    for (int i = 0; i < pc->n_files; i++) (*keys)[n++] = pc->files[i].key;
    if (n > 1) qsort(*keys, (size_t)n, sizeof **keys, cmp_u64);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (!m || (*keys)[m - 1] != (*keys)[i]) (*keys)[m++] = (*keys)[i];
    return m;
}

/* The longest file holding a prefix of tokens[0, n) longer than `than`, or NULL. */
static kv_file *longest_file(srv_pcache *pc, const int32_t *tokens, int64_t n, int64_t than) {
    if (!pc->dir || !pc->n_files || n / pc->A * pc->A <= than) return NULL;
    const int64_t nb = srv_pcache_keys(pc, tokens, n, &pc->keys, &pc->cap_keys);
    for (int64_t i = nb - 1; i >= 0 && (i + 1) * pc->A > than; i--) {
        kv_file *f = find_file(pc, pc->keys[i], (i + 1) * pc->A);
        if (f) return f;
    }
    return NULL;
}

/* Reads f into the cache; 0 when it is there now. A bad file is set aside. */
static int load(srv_pcache *pc, kv_file *f, const int32_t *tokens) {
    char path[4200];
    file_name(path, sizeof path, pc->dir, f->key, f->n);
    dsv4_snapshot *snap;
    dsv4_err err = {0};
    int rc = dsv4_snapshot_load(pc->e, path, &snap, &err);
    if (rc == DSV4_ERR_NOMEM) return -1;  /* the file may be fine: keep it */
    if (rc) { set_aside(pc, f, path, err.msg); return -1; }
    if (dsv4_snapshot_length(snap) != f->n ||
        memcmp(dsv4_snapshot_tokens(snap), tokens, (size_t)f->n * sizeof *tokens)) {
        /* a hash collision, or a file renamed by hand: it is not this prefix */
        dsv4_snapshot_free(pc->e, snap);
        set_aside(pc, f, path, "the file's tokens do not match its name");
        return -1;
    }
    if (dsv4_prefix_adopt(pc->e, snap, &err)) return -1;
    f->used = now_ns();
    utimensat(AT_FDCWD, path, NULL, 0);
    pc->st.disk_loads++;
    return 0;
}

int srv_pcache_start(srv_pcache *pc, const int32_t *tokens, int64_t n, int *seq, int64_t *n_cached,
                     float *streams, dsv4_err *err) {
    const int64_t look = n > 0 ? n - 1 : 0;  /* one row is left to give the logits */
    int rc = dsv4_prefix_start(pc->e, tokens, look, seq, n_cached, NULL, streams, err);
    if (rc) return rc;
    kv_file *f = longest_file(pc, tokens, look, *n_cached);
    if (f && !load(pc, f, tokens)) {
        /* the file's prefix is longer than the one restored: start again from it */
        dsv4_seq_free(pc->e, *seq, NULL);
        if ((rc = dsv4_prefix_start(pc->e, tokens, look, seq, n_cached, NULL, streams, err))) return rc;
    }
    if (*n_cached) pc->st.hits++;
    else pc->st.misses++;
    pc->st.reused_tokens += *n_cached;
    return DSV4_OK;
}

void srv_pcache_keep(srv_pcache *pc, int seq, const int32_t *tokens, const float *hidden,
                     const float *streams) {
    if (!pc) return;
    dsv4_snapshot *snap = NULL;
    srv_pcache_hold(pc, seq, tokens, hidden, streams, &snap);
    srv_pcache_release(pc, &snap, 1);
}

void srv_pcache_hold(srv_pcache *pc, int seq, const int32_t *tokens, const float *hidden,
                     const float *streams, dsv4_snapshot **snap) {
    if (!pc) return;
    dsv4_snapshot *s;
    dsv4_err err = {0};
    if (dsv4_snapshot_take(pc->e, seq, tokens, hidden, streams, &s, &err)) return;
    dsv4_snapshot_free(pc->e, *snap);
    *snap = s;
}

void srv_pcache_release(srv_pcache *pc, dsv4_snapshot **snap, int save_it) {
    if (!pc || !*snap) return;
    if (save_it && pc->dir) save(pc, *snap);
    dsv4_err err = {0};
    dsv4_prefix_adopt(pc->e, *snap, &err);  /* owns it from here, also on failure */
    *snap = NULL;
}

srv_pcache_stats srv_pcache_get_stats(const srv_pcache *pc) {
    return pc ? pc->st : (srv_pcache_stats){0};
}
