/* test_agree.c — ranks agree before they compute, and a stopped peer cannot hang the others
 * (issue 14 items 1 and 2), SPMD through the public API:
 *  - engine create with another checkpoint on rank 1: other shapes (the small golden), the
 *    same shapes with other weights (another generator seed), a single byte changed past
 *    the sampled ranges (caught by verify_weights = 1), other options (reference kernels,
 *    W8A8): create fails on every rank, naming what differs, and nothing is left running;
 *  - calls with other tokens, another prefill length, another MTP token, another LM-head
 *    row count on rank 1: the same error on every rank and no sequence changes; the next
 *    matching call works;
 *  - --stopped: rank 1 stops answering inside a call; with a 3 s peer timeout the others
 *    fail within a bounded time with a message naming rank 1, using little CPU while they
 *    wait (they sleep between polls), and rank 1 sleeping between calls for longer than the
 *    timeout is not an error (idle ranks are not timed out).
 *
 *   mpirun -np N test_agree TINY_MODEL SMALL_MODEL [--stopped]
 */
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"
#include "dsv4.h"
#include "model/config.h"
#include "model/generate.h"
#include "test.h"

static int g_rank, g_size;
static dsv4_dist *g_d;
static int g_rank1_max_rows; /* max_rows on rank 1 only (0 = default) */

/* Every rank must have seen the same verdict: rc != 0 everywhere, message containing want. */
static void expect_everywhere(int rc, const dsv4_err *err, const char *want, const char *what) {
    int failed = rc != 0, all = 0, bad_msg = !(rc && strstr(err->msg, want)), any_bad = 0;
    MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_MIN, g_d->comm);
    MPI_Allreduce(&bad_msg, &any_bad, 1, MPI_INT, MPI_MAX, g_d->comm);
    CHECK_MSG(all == 1, "%s: not every rank failed (rank %d rc %d)", what, g_rank, rc);
    CHECK_MSG(!bad_msg, "%s: rank %d message '%s' lacks '%s'", what, g_rank, err->msg, want);
    if (g_rank == 0) printf("%s: rank 0: %s\n", what, err->msg);
}

static dsv4_engine *create(const dsv4_model *m, int reference, int w8a8, int verify, dsv4_err *err) {
    dsv4_engine_opts o = {0};
    o.max_context = 256;
    o.max_seqs = 2;
    o.c_max = 64;
    o.mtp = 1;
    o.threads = 1;
    o.dist = g_d;
    /* EP where the tiny model's 8 experts divide over the ranks, else CP only (then the
     * other ranks idle through these short calls and meet only in the agreements) */
    o.parallel = 8 % g_size == 0 ? DSV4_PAR_EP : DSV4_PAR_CP;
    o.reference = reference;
    o.w8a8 = w8a8;
    o.verify_weights = verify;
    if (g_rank == 1) o.max_rows = g_rank1_max_rows; /* 0 = the default, as on the others */
    dsv4_engine *e = NULL;
    return dsv4_engine_create(m, &o, &e, err) ? NULL : e;
}

static dsv4_model *open_model(const char *dir) {
    dsv4_model *m = NULL;
    dsv4_err err = {0};
    if (dsv4_model_open(dir, &m, &err)) {
        fprintf(stderr, "rank %d: %s\n", g_rank, err.msg);
        dsv4_dist_abort(g_d, 1);
    }
    return m;
}

/* Another create on rank 1 only (the others open `mine`): must fail everywhere. */
static void mismatch_create(const char *mine, const char *theirs, int ref1, int w8a8_1, int verify,
                            const char *want, const char *what) {
    dsv4_model *m = open_model(g_rank == 1 ? theirs : mine);
    dsv4_err err = {0};
    dsv4_engine *e = create(m, g_rank == 1 ? ref1 : 0, g_rank == 1 ? w8a8_1 : 0, verify, &err);
    expect_everywhere(e ? 0 : 1, &err, want, what);
    dsv4_engine_free(e);
    dsv4_model_close(m);
}

/* A copy of dir's model under out with one byte of tensor data flipped at data offset off. */
static void flipped_copy(const char *dir, const char *out, uint64_t off) {
    char p[4096], q[2048];
    snprintf(p, sizeof p, "mkdir -p '%s' && cp '%s/config.json' '%s/model.safetensors' '%s'/", out, dir, dir, out);
    CHECK(system(p) == 0);
    snprintf(q, sizeof q, "%s/model.safetensors", out);
    FILE *f = fopen(q, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    uint8_t len[8];
    CHECK(fread(len, 1, 8, f) == 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len[i];
    fseek(f, (long)(8 + n + off), SEEK_SET);
    int c = fgetc(f);
    fseek(f, (long)(8 + n + off), SEEK_SET);
    fputc(c ^ 0x10, f);
    CHECK(fclose(f) == 0);
}

static void test_create(const char *tiny, const char *small, const char *tmp) {
    char s1[1024], s2[1024], flip[1024];
    snprintf(s1, sizeof s1, "%s/seed1", tmp);
    snprintf(s2, sizeof s2, "%s/seed2", tmp);
    snprintf(flip, sizeof flip, "%s/flip", tmp);
    if (g_rank == 0) {
        dsv4_config c;
        char p[1100];
        dsv4_err err = {0};
        snprintf(p, sizeof p, "%s/config.json", tiny);
        CHECK(dsv4_config_load(p, &c, &err) == 0);
        dsv4_gen_opts o1 = {.seed = 1, .dtype = DSV4_GEN_BF16}, o2 = {.seed = 2, .dtype = DSV4_GEN_BF16};
        CHECK_MSG(dsv4_gen_model(&c, &o1, s1, &err) == 0 && dsv4_gen_model(&c, &o2, s2, &err) == 0, "%s", err.msg);
        flipped_copy(tiny, flip, 700000); /* past the 64 KiB sample of a 5 MB shard */
    }
    MPI_Barrier(g_d->comm);
    mismatch_create(tiny, small, 0, 0, 0, "has another config", "other shapes");
    mismatch_create(s1, s2, 0, 0, 0, "has another checkpoint", "same shapes, other seed");
    mismatch_create(tiny, flip, 0, 0, 1, "every byte", "one byte past the samples, verify_weights");
    mismatch_create(tiny, tiny, 1, 0, 0, "engine options or kernel level", "reference kernels on rank 1");
    mismatch_create(tiny, tiny, 0, 1, 0, "engine options or kernel level", "W8A8 on rank 1");
    /* a smaller step budget on one rank would make it alone refuse a large call */
    g_rank1_max_rows = 16;
    mismatch_create(tiny, tiny, 0, 0, 0, "engine options or kernel level", "max_rows on rank 1");
    g_rank1_max_rows = 0;
    /* and the matching group still works */
    dsv4_model *m = open_model(tiny);
    dsv4_err err = {0};
    dsv4_engine *e = create(m, 0, 0, 1, &err);
    CHECK_MSG(e != NULL, "matching create: %s", err.msg);
    dsv4_engine_free(e);
    dsv4_model_close(m);
}

static void test_calls(const char *tiny) {
    dsv4_model *m = open_model(tiny);
    dsv4_err err = {0};
    dsv4_engine *e = create(m, 0, 0, 0, &err);
    CHECK_MSG(e != NULL, "create: %s", err.msg);
    if (!e) { dsv4_model_close(m); return; }
    const dsv4_model_info info = dsv4_model_get_info(m);
    const int D = info.hidden_size, hc = info.hc_mult;
    int seq = -1;
    CHECK(dsv4_seq_create(e, &seq, &err) == 0);
    int32_t tok[8] = {5, 9, 77, 3, 14, 2, 8, 40};
    float *hid = calloc((size_t)8 * D, sizeof(float)), *str = calloc((size_t)8 * hc * D, sizeof(float));

    /* another token on rank 1 */
    int32_t other[8];
    memcpy(other, tok, sizeof tok);
    if (g_rank == 1) other[3] = 4;
    dsv4_span sp = {.seq = seq, .start = 0, .n_tokens = 8, .tokens = other, .n_hidden = 1, .n_streams = 8};
    int rc = dsv4_forward(e, &sp, 1, hid, str, &err);
    expect_everywhere(rc, &err, "has another call", "other tokens");
    CHECK(dsv4_seq_length(e, seq) == 0);
    /* another prefill length */
    sp.tokens = tok;
    sp.n_tokens = g_rank == 1 ? 7 : 8;
    sp.n_streams = sp.n_tokens;
    rc = dsv4_forward(e, &sp, 1, hid, str, &err);
    expect_everywhere(rc, &err, "has another call", "other prefill length");
    CHECK(dsv4_seq_length(e, seq) == 0);
    /* invalid on rank 1 only: its own message there, "rank 1 failed" elsewhere */
    sp.n_tokens = 8;
    sp.n_streams = 8;
    sp.start = g_rank == 1 ? 3 : 0;
    rc = dsv4_forward(e, &sp, 1, hid, str, &err);
    expect_everywhere(rc, &err, g_rank == 1 ? "start 3" : "rank 1 failed", "invalid span on rank 1");
    CHECK(dsv4_seq_length(e, seq) == 0);
    /* the matching call works after all that */
    sp.start = 0;
    rc = dsv4_forward(e, &sp, 1, hid, str, &err);
    CHECK_MSG(rc == 0, "matching forward: %s", err.msg);
    CHECK(dsv4_seq_length(e, seq) == 8);

    /* MTP: another next token on rank 1 */
    int32_t nxt[7];
    memcpy(nxt, tok + 1, sizeof nxt);
    if (g_rank == 1) nxt[6] = 41;
    dsv4_mtp_span ms = {.seq = seq, .start = 0, .n = 7, .next_tokens = nxt, .streams = str};
    rc = dsv4_mtp_forward(e, &ms, 1, hid, &err);
    expect_everywhere(rc, &err, "has another call", "other MTP token");
    CHECK(dsv4_seq_mtp_length(e, seq) == 0);

    /* LM head: another row count on rank 1 (its shard sizes would disagree) */
    int32_t ids[8];
    rc = dsv4_lm_head_argmax(e, hid, g_rank == 1 ? 2 : 1, ids, NULL, &err);
    expect_everywhere(rc, &err, "has another row count", "LM head row count");
    float *logits = calloc((size_t)2 * info.vocab_size, sizeof(float));
    rc = dsv4_lm_head_dist(e, hid, g_rank == 1 ? 2 : 1, logits, &err);
    expect_everywhere(rc, &err, "has another row count", "LM head gather row count");
    rc = dsv4_lm_head_argmax(e, hid, 1, ids, NULL, &err);
    CHECK_MSG(rc == 0 && ids[0] >= 0 && ids[0] < info.vocab_size, "argmax: %s", err.msg);
    free(logits);
    free(hid);
    free(str);
    dsv4_engine_free(e);
    dsv4_model_close(m);
}

/* CPU seconds of the calling thread. */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 1 stops inside a call; the others must fail in bounded time naming it, without
 * spending the wait on its CPU. */
static void test_stopped(const char *tiny) {
    dsv4_model *m = open_model(tiny);
    dsv4_err err = {0};
    /* 3 s, not 1: on a loaded 2-core machine a healthy rank was once late by over a second */
    CHECK(dsv4_dist_set_timeout(g_d, 3.0, &err) == 0);
    CHECK(dsv4_dist_set_timeout(g_d, -1.0, &err) == DSV4_ERR_ARG);
    dsv4_engine *e = create(m, 0, 0, 0, &err);
    CHECK_MSG(e != NULL, "create: %s", err.msg);
    if (!e) dsv4_dist_abort(g_d, 1);
    int seq = -1;
    CHECK(dsv4_seq_create(e, &seq, &err) == 0);
    const dsv4_model_info info = dsv4_model_get_info(m);
    float *hid = calloc((size_t)info.hidden_size, sizeof(float));
    int32_t tok[4] = {1, 2, 3, 4};
    dsv4_span sp = {.seq = seq, .start = 0, .n_tokens = 4, .tokens = tok, .n_hidden = 1};
    /* idle between calls for twice the timeout (here: everyone waits in a barrier, as a
     * server's ranks wait for the next step outside the library): not an error */
    if (g_rank == 1) usleep(6500000);
    MPI_Barrier(g_d->comm);
    int rc = dsv4_forward(e, &sp, 1, hid, NULL, &err);
    CHECK_MSG(rc == 0, "forward after an idle rank: %s", err.msg);
    /* now rank 1 stops answering in the middle of the next call */
    sp.start = 4;
    if (g_rank == 1) {
        sleep(60); /* killed by the others' abort long before */
        return;
    }
    const double t0 = MPI_Wtime(), cpu0 = thread_cpu();
    rc = dsv4_forward(e, &sp, 1, hid, NULL, &err);
    const double waited = MPI_Wtime() - t0, cpu = thread_cpu() - cpu0;
    CHECK_MSG(rc == DSV4_ERR_IO && strstr(err.msg, "no answer from rank 1") && strstr(err.msg, "peer timeout of 3 s"),
              "rank %d: rc %d msg '%s'", g_rank, rc, err.msg);
    /* every other rank named, and only rank 1 (ranks >= 2 answered the probe) */
    CHECK_MSG(!strstr(err.msg, "ranks"), "rank %d named more than rank 1: %s", g_rank, err.msg);
    CHECK_MSG(waited >= 3.0 && waited < 20.0, "rank %d waited %.2f s", g_rank, waited);
    /* a long wait sleeps between its polls (dist/wait.c): the timeout and the grace after it
     * (~4.5 s) took ~0.1 s of this thread's CPU, where polling throughout took all of it */
    CHECK_MSG(cpu < 0.5, "rank %d used %.2f s of CPU in a wait of %.2f s", g_rank, cpu, waited);
    printf("rank %d: %s (after %.2f s, %.3f s of CPU)\n", g_rank, err.msg, waited, cpu);
    /* the group is unusable now: later calls fail at once */
    sp.start = 0;
    rc = dsv4_forward(e, &sp, 1, hid, NULL, &err);
    CHECK(rc == DSV4_ERR_STATE && strstr(err.msg, "unusable"));
    const int failed = test_failed_;
    printf("rank %d: stopped-rank test %s\n", g_rank, failed ? "FAILED" : "passed");
    fflush(stdout);
    if (g_rank == 0) {
        /* as the CLI does: end the job, which also ends the stopped rank */
        sleep(1); /* let the other ranks print */
        dsv4_dist_abort(g_d, failed ? 3 : 2);
    }
    sleep(30);
}

int main(int argc, char **argv) {
    dsv4_err err = {0};
    if (dsv4_dist_init(&argc, &argv, &g_d, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    g_rank = dsv4_dist_rank(g_d);
    g_size = dsv4_dist_size(g_d);
    if (argc < 3 || g_size < 2) {
        fprintf(stderr, "usage: mpirun -np N (N >= 2) test_agree TINY_MODEL SMALL_MODEL [--stopped]\n");
        dsv4_dist_finalize(g_d);
        return 2;
    }
    if (argc > 3 && !strcmp(argv[3], "--stopped")) {
        test_stopped(argv[1]);
        return 1; /* not reached on a passing run: rank 0 aborts the job */
    }
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/dsv4-agree-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getppid());
    test_create(argv[1], argv[2], tmp);
    test_calls(argv[1]);
    MPI_Barrier(g_d->comm);
    if (g_rank == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        CHECK(system(cmd) == 0);
    }
    int failed = test_failed_, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, g_d->comm);
    int rc = test_report();
    dsv4_dist_finalize(g_d);
    return any ? 1 : rc;
}
