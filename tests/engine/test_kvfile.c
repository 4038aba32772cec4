/* test_kvfile.c — KV persistence (spec/serving.md §g, issue 11):
 *   1. save at n = 2A, load into a fresh engine and into one whose pools other sequences
 *      used (free lists shuffled), restore, continue: bitwise the uninterrupted run
 *      (hidden, streams, MTP hidden, logits, tokens), MTP off and on;
 *   2. bad files are refused with the check that failed, before any pool page is taken:
 *      flipped payload byte (CRC), flipped header byte, truncation, trailing bytes, wrong
 *      version, unaligned n (header re-sealed with a valid CRC), other weights and other
 *      config (fingerprints), a missing file;
 *   3. kill -9 during saves: the file at the path is always the previous or the new one,
 *      and loads.
 *
 *   test_kvfile MODEL_DIR WORK_DIR [reference]
 * WORK_DIR receives the files and two generated models (other seed, other rms_norm_eps).
 */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prefix_run.h"
#include "util/crc32c.h"

static const char *WORK;

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len);
    if (b && fread(b, 1, *len, f) != *len) { free(b); b = NULL; }
    fclose(f);
    return b;
}

static void spill(const char *path, const unsigned char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(b, 1, len, f); fclose(f); }
}

/* Loads path into e and expects failure code with msg in the message; the pools untouched. */
static void expect_bad(dsv4_engine *e, const char *path, int code, const char *msg) {
    dsv4_cache_usage before = dsv4_cache_get_usage(e->cache);
    dsv4_snapshot *s = NULL;
    dsv4_err err = {0};
    int rc = dsv4_snapshot_load(e, path, &s, &err);
    CHECK_MSG(rc == code && s == NULL && strstr(err.msg, msg), "%s: rc %d (want %d), '%s' (want '%s')",
              path, rc, code, err.msg, msg);
    dsv4_cache_usage after = dsv4_cache_get_usage(e->cache);
    CHECK(before.blk_used == after.blk_used && before.win_used == after.win_used &&
          before.slots_used == after.slots_used);
}

typedef struct {
    log_t base;       /* the uninterrupted continuation from 2A */
    int32_t *tokens;  /* (N) */
    int64_t N;
} reference_run;

static const int TAIL = 37, DEC = 5;

/* The uninterrupted run of N = 2A + TAIL tokens and DEC decode steps in e; saves its state
 * at 2A to path on the way. */
static void run_and_save(dsv4_engine *e, int mtp, const char *path, reference_run *ref) {
    ref->N = 2 * A + TAIL;
    ref->tokens = malloc((size_t)ref->N * sizeof *ref->tokens);
    for (int64_t i = 0; i < ref->N; i++) ref->tokens[i] = rnd_token();
    dsv4_err err = {0};
    int sq;
    CHECK(dsv4_seq_create(e, &sq, &err) == 0);
    run_t r;
    run_init(&r, e, sq, mtp, ref->tokens, ref->N);
    run_chunk(&r, 2 * A);
    dsv4_snapshot *s = NULL;
    CHECK_MSG(dsv4_snapshot_take(e, sq, ref->tokens, r.last_h, r.last_s, &s, &err) == 0, "%s", err.msg);
    CHECK_MSG(s && dsv4_snapshot_save(e, s, path, &err) == 0, "save: %s", err.msg);
    dsv4_snapshot_free(e, s);
    const size_t mark = r.log.n;
    run_chunk(&r, TAIL);
    run_decode(&r, DEC);
    memset(&ref->base, 0, sizeof ref->base);
    log_add(&ref->base, r.log.buf + mark, r.log.n - mark);
    CHECK(dsv4_seq_free(e, sq, &err) == 0);
    run_free(&r);
}

/* Loads path into e, restores it and continues like the reference; 1 when bitwise equal. */
static int load_and_continue(dsv4_engine *e, int mtp, const char *path, const reference_run *ref) {
    dsv4_err err = {0};
    dsv4_snapshot *s = NULL;
    int rc = dsv4_snapshot_load(e, path, &s, &err);
    CHECK_MSG(rc == 0, "load: %s", err.msg);
    if (rc) return 0;
    CHECK(dsv4_snapshot_length(s) == 2 * A && !memcmp(dsv4_snapshot_tokens(s), ref->tokens, 2 * A * sizeof(int32_t)));
    int sq;
    float *h = malloc((size_t)D * sizeof(float)), *st = malloc((size_t)HC * D * sizeof(float));
    rc = dsv4_snapshot_restore(e, s, &sq, h, st, &err);
    CHECK_MSG(rc == 0, "restore: %s", err.msg);
    dsv4_snapshot_free(e, s);
    int same = 0;
    if (!rc) {
        CHECK(dsv4_seq_length(e, sq) == 2 * A && dsv4_seq_mtp_length(e, sq) == (mtp ? 2 * A - 1 : 0));
        same = continues_like(e, sq, mtp, ref->tokens, ref->N, 2 * A, h, st, &TAIL, 1, DEC,
                              &ref->base, NULL);
        CHECK(dsv4_seq_free(e, sq, &err) == 0);
    }
    free(h); free(st);
    return same;
}

static void test_roundtrip(const dsv4_model *m, int mtp) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt_mtp%d.kv", WORK, mtp);
    const int64_t ctx = 2 * A + TAIL + 64;
    dsv4_engine *e1 = mk_engine(m, mtp, ctx, 2, 0);
    if (!e1) return;
    reference_run ref;
    run_and_save(e1, mtp, path, &ref);
    dsv4_engine_free(e1);

    /* a fresh engine */
    dsv4_engine *e2 = mk_engine(m, mtp, ctx, 2, 0);
    if (e2) CHECK_MSG(load_and_continue(e2, mtp, path, &ref), "fresh engine: continuation differs");
    dsv4_engine_free(e2);

    /* an engine whose pools other sequences used: pages in other places, other contents */
    dsv4_engine *e3 = mk_engine(m, mtp, ctx, 3, 0);
    if (e3) {
        dsv4_err err = {0};
        int a, b;
        int32_t *other = malloc((size_t)ctx * sizeof *other);
        for (int64_t i = 0; i < ctx; i++) other[i] = rnd_token();
        CHECK(dsv4_seq_create(e3, &a, &err) == 0 && dsv4_seq_create(e3, &b, &err) == 0);
        run_t ra, rb;
        run_init(&ra, e3, a, mtp, other, ctx);
        run_init(&rb, e3, b, mtp, other + 5, ctx - 5);
        run_chunk(&ra, A + 17);
        run_chunk(&rb, 2 * A + 3);
        CHECK(dsv4_seq_free(e3, a, &err) == 0);
        dsv4_cache_shuffle_free(e3->cache, 7);
        CHECK_MSG(load_and_continue(e3, mtp, path, &ref), "used engine: continuation differs");
        run_chunk(&rb, 9);  /* the other sequence goes on undisturbed */
        run_free(&ra); run_free(&rb);
        free(other);
        check_cache(e3, "used engine");
    }
    dsv4_engine_free(e3);
    free(ref.base.buf);
    free(ref.tokens);
}

/* Writes a variant of file `good` with bytes patched, the header CRC re-sealed if reseal. */
static void variant(const unsigned char *good, size_t len, size_t at, const void *bytes, size_t n,
                    int reseal, size_t header_bytes, const char *path) {
    unsigned char *b = malloc(len);
    memcpy(b, good, len);
    memcpy(b + at, bytes, n);
    if (reseal) {
        const uint32_t c = dsv4_crc32c(0, b, header_bytes - 4);
        memcpy(b + header_bytes - 4, &c, 4);
    }
    spill(path, b, len);
    free(b);
}

static int gen_model(const char *cfg, int seed, const char *out) {
    const char *bin = getenv("DSV4_BIN");
    if (!bin) { fprintf(stderr, "DSV4_BIN not set\n"); return -1; }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s gen-model --config %s --seed %d --out %s > /dev/null", bin, cfg, seed, out);
    return system(cmd);
}

static void test_bad_files(const dsv4_model *m, const char *model_dir) {
    char path[512], bad[512];
    snprintf(path, sizeof path, "%s/good.kv", WORK);
    snprintf(bad, sizeof bad, "%s/bad.kv", WORK);
    const int64_t ctx = 2 * A + TAIL + 64;
    /* a file of BF16 rows is refused by an F32 engine, and the other way round */
    {
        KV_DTYPE = DSV4_KV_BF16;
        dsv4_engine *eb = mk_engine(m, 0, ctx, 2, 0);
        KV_DTYPE = DSV4_KV_F32;
        dsv4_engine *ef = mk_engine(m, 0, ctx, 2, 0);
        if (eb && ef) {
            reference_run rb, rf;
            run_and_save(eb, 0, bad, &rb);
            run_and_save(ef, 0, path, &rf);
            expect_bad(ef, bad, DSV4_ERR_FORMAT, "stores BF16 rows and BF16 indexer keys; this engine stores F32 and F32");
            expect_bad(eb, path, DSV4_ERR_FORMAT, "stores F32 rows and F32 indexer keys; this engine stores BF16 and BF16");
            free(rb.base.buf); free(rb.tokens);
            free(rf.base.buf); free(rf.tokens);
        }
        dsv4_engine_free(eb);
        dsv4_engine_free(ef);
    }
    /* the byte offsets below are those of a file of F32 rows */
    KV_DTYPE = DSV4_KV_F32;
    dsv4_engine *e = mk_engine(m, 0, ctx, 2, 0);
    if (!e) return;
    reference_run ref;
    run_and_save(e, 0, path, &ref);
    size_t len = 0;
    unsigned char *good = slurp(path, &len);
    CHECK(good != NULL && len > 1000);
    if (!good) { dsv4_engine_free(e); return; }
    uint32_t hb;
    memcpy(&hb, good + 12, 4);

    const unsigned char flip = (unsigned char)(good[len / 2] ^ 0x10);
    variant(good, len, len / 2, &flip, 1, 0, hb, bad);
    expect_bad(e, bad, DSV4_ERR_FORMAT, "CRC mismatch");
    const unsigned char hflip = (unsigned char)(good[20] ^ 1);  /* inside n */
    variant(good, len, 20, &hflip, 1, 0, hb, bad);
    expect_bad(e, bad, DSV4_ERR_FORMAT, "header CRC mismatch");
    spill(bad, good, len - 100);
    expect_bad(e, bad, DSV4_ERR_FORMAT, "truncated");
    spill(bad, good, 10);
    expect_bad(e, bad, DSV4_ERR_FORMAT, "bad magic");
    spill(bad, good, hb - 1);
    expect_bad(e, bad, DSV4_ERR_FORMAT, "truncated");
    unsigned char *longer = calloc(len + 8, 1);
    memcpy(longer, good, len);
    spill(bad, longer, len + 8);
    free(longer);
    expect_bad(e, bad, DSV4_ERR_FORMAT, "trailing bytes");
    const uint32_t v2 = 2;
    variant(good, len, 8, &v2, 4, 1, hb, bad);
    expect_bad(e, bad, DSV4_ERR_FORMAT, "version 2");
    uint64_t n_odd = (uint64_t)(2 * A - 1);
    variant(good, len, 16, &n_odd, 8, 1, hb, bad);
    expect_bad(e, bad, DSV4_ERR_FORMAT, "not a positive multiple of the alignment");
    const uint32_t f16 = 1u << 24;  /* BF16 rows in the flags (DSV4_KV_FMT_BF16) */
    uint32_t flags;
    memcpy(&flags, good + 32, 4);
    flags |= f16;
    variant(good, len, 32, &flags, 4, 1, hb, bad);
    expect_bad(e, bad, DSV4_ERR_FORMAT, "stores BF16 rows and F32 indexer keys; this engine stores F32 and F32");
    snprintf(bad, sizeof bad, "%s/missing.kv", WORK);
    expect_bad(e, bad, DSV4_ERR_IO, "cannot open");
    CHECK(load_and_continue(e, 0, path, &ref));  /* the good file still is */
    dsv4_engine_free(e);

    /* other weights (same config, other seed) and another config (rms_norm_eps) */
    char cfg[512], dir[512], cmd[2048];
    snprintf(cfg, sizeof cfg, "%s/config.json", model_dir);
    snprintf(dir, sizeof dir, "%s/other_seed", WORK);
    if (gen_model(cfg, 12345, dir) == 0) {
        dsv4_model *m2;
        dsv4_err err = {0};
        if (dsv4_model_open(dir, &m2, &err) == 0) {
            dsv4_engine *e2 = mk_engine(m2, 0, ctx, 2, 0);
            if (e2) expect_bad(e2, path, DSV4_ERR_FORMAT, "weights fingerprint differs");
            dsv4_engine_free(e2);
            dsv4_model_close(m2);
        } else CHECK_MSG(0, "%s", err.msg);
    } else CHECK_MSG(0, "gen-model failed");
    char cfg2[512];
    snprintf(cfg2, sizeof cfg2, "%s/eps_config.json", WORK);
    snprintf(cmd, sizeof cmd, "sed 's/\"rms_norm_eps\":[[:space:]]*[0-9.e+-]*/\"rms_norm_eps\": 2e-06/' %s > %s", cfg, cfg2);
    snprintf(dir, sizeof dir, "%s/other_eps", WORK);
    if (system(cmd) == 0 && gen_model(cfg2, 0, dir) == 0) {
        dsv4_model *m3;
        dsv4_err err = {0};
        if (dsv4_model_open(dir, &m3, &err) == 0) {
            dsv4_engine *e3 = mk_engine(m3, 0, ctx, 2, 0);
            if (e3) expect_bad(e3, path, DSV4_ERR_FORMAT, "config fingerprint differs");
            dsv4_engine_free(e3);
            dsv4_model_close(m3);
        } else CHECK_MSG(0, "%s", err.msg);
    } else CHECK_MSG(0, "gen-model (other eps) failed");
    free(good);
    free(ref.base.buf);
    free(ref.tokens);
}

/* A child saves in a loop; the parent kills it (SIGKILL) at a few points in time. After
 * each kill the file at the path is complete and restores exactly. */
static void test_kill_during_save(const dsv4_model *m) {
    char path[512];
    snprintf(path, sizeof path, "%s/crash.kv", WORK);
    const int64_t ctx = 2 * A + TAIL + 64;
    dsv4_engine *e = mk_engine(m, 0, ctx, 2, 0);
    if (!e) return;
    reference_run ref;
    run_and_save(e, 0, path, &ref);  /* the previous file */
    /* a snapshot the child keeps saving */
    dsv4_err err = {0};
    int sq;
    CHECK(dsv4_seq_create(e, &sq, &err) == 0);
    run_t r;
    run_init(&r, e, sq, 0, ref.tokens, ref.N);
    run_chunk(&r, 2 * A);
    dsv4_snapshot *s = NULL;
    CHECK(dsv4_snapshot_take(e, sq, ref.tokens, r.last_h, r.last_s, &s, &err) == 0);
    int loads_ok = 0;
    const int delays_us[5] = {300, 1100, 2500, 4700, 9000};
    for (int k = 0; k < 5 && s; k++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            for (;;) dsv4_snapshot_save(e, s, path, NULL);
        }
        usleep((useconds_t)delays_us[k]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        loads_ok += load_and_continue(e, 0, path, &ref);
    }
    CHECK_MSG(loads_ok == 5, "%d of 5 loads after kill -9 continued exactly", loads_ok);
    dsv4_snapshot_free(e, s);
    run_free(&r);
    dsv4_engine_free(e);
    free(ref.base.buf);
    free(ref.tokens);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: test_kvfile MODEL_DIR WORK_DIR [reference]\n"); return 2; }
    WORK = argv[2];
    mkdir(WORK, 0755);
    dsv4_model *m = prefix_run_open(argv[1], argc > 3 && !strcmp(argv[3], "reference"));
    if (!m) return 1;
    test_roundtrip(m, 0);
    if (HAS_MTP) test_roundtrip(m, 1);
    test_bad_files(m, argv[1]);
    test_kill_during_save(m);
    dsv4_model_close(m);
    return test_report();
}
