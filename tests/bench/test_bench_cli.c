/* test_bench_cli.c — `dsv4 bench` as a user runs it, on the tiny golden model.
 *
 * --json gives one object with the documented keys; rates and byte counts are positive,
 * roofline ratios lie in (0, 2), the figures agree with each other (tokens/s against
 * ms/step, bytes per token against bytes per step and batch, a batch-1 step reads K
 * experts per layer, longer contexts read more cache), and bad usage exits 2 with a
 * message, a missing model 1. --mtp on: one JSON line per measurement; forced drafts at
 * p = 1 are all accepted (2 tokens a step), at p = 0 none, every speculative run gives the
 * plain run's tokens, and a speculative step reads more bytes than a plain one; with two
 * interleaved rounds the gain is the mean of the rounds' paired ratios. */
#include <cjson/cJSON.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "util/file.h"

static const char *bin;
static char tmp[256];

/* Runs `dsv4 bench ARGS`; exit status, stdout and stderr (malloc'ed). */
static int run(const char *args, char **out, char **errs) {
    char line[4096], o[512], e[512];
    snprintf(o, sizeof o, "%s/out", tmp);
    snprintf(e, sizeof e, "%s/err", tmp);
    snprintf(line, sizeof line, "'%s' bench %s > '%s' 2> '%s' < /dev/null", bin, args, o, e);
    int st = system(line);
    *out = dsv4_read_file(o, 0, NULL, NULL);
    *errs = dsv4_read_file(e, 0, NULL, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    CHECK_MSG(cJSON_IsNumber(v), "key '%s' missing or not a number", key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static double median3(double a, double b, double c) {
    return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

/* Paired probes (on by default): each of a measurement's 3 repetitions against the probe
 * marks around it. The medians must be what the listed repetitions and the step's bytes and
 * FLOPs say, and the best repetition must be the headline's step time. */
static void check_paired(const cJSON *o) {
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(o, "paired_probes")));
    const cJSON *pr = cJSON_GetObjectItem(o, "prefill_paired_reps");
    CHECK_MSG(cJSON_GetArraySize(pr) == 3, "prefill_paired_reps: %d entries", cJSON_GetArraySize(pr));
    if (cJSON_GetArraySize(pr) == 3) {
        double v[3], best = 1e300;
        for (int r = 0; r < 3; r++) {
            const cJSON *e = cJSON_GetArrayItem(pr, r);
            CHECK(num(e, "peak_gflops") > 0 && num(e, "seconds") > 0);
            v[r] = num(o, "prefill_flops") / num(e, "seconds") / 1e9 / num(e, "peak_gflops");
            if (num(e, "seconds") < best) best = num(e, "seconds");
        }
        CHECK_NEAR(num(o, "prefill_roofline_ratio_paired"), median3(v[0], v[1], v[2]), 1e-9);
        CHECK_NEAR(best, num(o, "prefill_seconds"), 1e-12);
    }
    const cJSON *batches = cJSON_GetObjectItem(o, "batches"), *d;
    cJSON_ArrayForEach(d, batches) {
        const cJSON *p = cJSON_GetObjectItem(d, "paired"), *reps = cJSON_GetObjectItem(p, "reps");
        CHECK_MSG(cJSON_GetArraySize(reps) == 3, "batch %g: %d paired repetitions", num(d, "batch"),
                  cJSON_GetArraySize(reps));
        if (cJSON_GetArraySize(reps) != 3) continue;
        double roof[3], bound[3], best = 1e300;
        const double bytes = num(d, "decode_bytes_per_step"), flops = num(d, "decode_flops_per_step");
        for (int r = 0; r < 3; r++) {
            const cJSON *e = cJSON_GetArrayItem(reps, r);
            const double s = num(e, "ms_per_step") / 1e3, bw = num(e, "bandwidth_gbs") * 1e9, pk = num(e, "peak_gflops") * 1e9;
            CHECK(s > 0 && bw > 0 && pk > 0);
            roof[r] = bytes / s / bw;
            bound[r] = (bytes / bw > flops / pk ? bytes / bw : flops / pk) / s;
            if (num(e, "ms_per_step") < best) best = num(e, "ms_per_step");
        }
        CHECK_NEAR(num(p, "roofline_ratio_median"), median3(roof[0], roof[1], roof[2]), 1e-9);
        CHECK_NEAR(num(p, "bound_ratio_median"), median3(bound[0], bound[1], bound[2]), 1e-9);
        CHECK_NEAR(best, num(d, "decode_ms_per_step"), 1e-9);
        if (num(d, "batch") == num(o, "batch"))
            CHECK_NEAR(num(o, "decode_bound_ratio_paired"), num(p, "bound_ratio_median"), 0);
    }
}

/* a count of events, up to a mean's rounding: a whole number, not negative */
static int is_count(double v) { return isfinite(v) && v >= 0 && fabs(v - round(v)) < 1e-6; }

/* The page faults and system time of the timed spans (getrusage, every thread): per prefill
 * repetition in the order run, with the same seconds as the paired list; per decode
 * measurement a mean over its timed steps. Diagnostics of first touches, whose counts depend
 * on the machine, so only their form and their agreement with the other figures are checked. */
static void check_faults(const cJSON *o) {
    const cJSON *fr = cJSON_GetObjectItem(o, "prefill_reps"), *pr = cJSON_GetObjectItem(o, "prefill_paired_reps");
    CHECK_MSG(cJSON_GetArraySize(fr) == 3, "prefill_reps: %d entries", cJSON_GetArraySize(fr));
    for (int r = 0; r < cJSON_GetArraySize(fr) && r < cJSON_GetArraySize(pr); r++) {
        const cJSON *e = cJSON_GetArrayItem(fr, r);
        CHECK_MSG(is_count(num(e, "minor_faults")) && is_count(num(e, "major_faults")),
                  "prefill rep %d: faults %g / %g", r, num(e, "minor_faults"), num(e, "major_faults"));
        CHECK_MSG(num(e, "system_seconds") >= 0, "prefill rep %d: system %g s", r, num(e, "system_seconds"));
        CHECK_NEAR(num(e, "seconds"), num(cJSON_GetArrayItem(pr, r), "seconds"), 0);
    }
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItem(o, "batches")) {
        /* a mean over steps x 3 repetitions: a count times 1 / (3 steps) */
        const double steps = 3 * num(d, "steps");
        const double mi = num(d, "decode_minor_faults_per_step"), ma = num(d, "decode_major_faults_per_step");
        CHECK_MSG(is_count(mi * steps) && is_count(ma * steps),
                  "batch %g: faults a step %g / %g over %g steps", num(d, "batch"), mi, ma, steps);
        CHECK_MSG(num(d, "decode_system_ms_per_step") >= 0, "batch %g: system %g ms a step", num(d, "batch"),
                  num(d, "decode_system_ms_per_step"));
    }
}

static void test_json(const char *model) {
    char args[2048], *out, *errs;
    snprintf(args, sizeof args,
             "--model '%s' --json --prompt-len 40 --gen 4 --batch 2 --batches 1 --contexts 150 --reps 3 "
             "--probe-mb 16 --threads 2",
             model);
    int st = run(args, &out, &errs);
    CHECK_MSG(st == 0, "status %d, stderr '%s'", st, errs ? errs : "");
    cJSON *o = out ? cJSON_Parse(out) : NULL;
    CHECK_MSG(o != NULL, "stdout is not one JSON object: '%.200s'", out ? out : "");
    if (o) {
        const char *positive[] = {"prefill_tokens_per_s", "decode_tokens_per_s", "decode_bytes_per_token",
                                  "measured_bandwidth_gbs", "prefill_gflops", "measured_peak_gflops",
                                  "decode_bytes_per_step", "prefill_flops", "model_weight_bytes"};
        for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++) {
            const double v = num(o, positive[i]);
            CHECK_MSG(v > 0 && isfinite(v), "%s = %g", positive[i], v);
        }
        const char *ratios[] = {"decode_roofline_ratio", "prefill_roofline_ratio"};
        for (int i = 0; i < 2; i++) {
            const double v = num(o, ratios[i]);
            CHECK_MSG(v > 0 && v < 2, "%s = %g", ratios[i], v);
        }
        CHECK(num(o, "prefill_tokens") == 40 && num(o, "batch") == 2 && num(o, "threads") == 2);
        /* the L3 size is a positive byte count, or null where the machine does not say */
        const cJSON *l3 = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "machine"), "l3_bytes");
        CHECK_MSG(cJSON_IsNull(l3) || (cJSON_IsNumber(l3) && l3->valuedouble > 0), "machine.l3_bytes %s",
                  l3 ? (cJSON_IsNumber(l3) ? "<= 0" : "not a number") : "missing");
        /* the ratios are what the figures say */
        CHECK_NEAR(num(o, "prefill_roofline_ratio"), num(o, "prefill_gflops") / num(o, "measured_peak_gflops"), 1e-9);
        CHECK_NEAR(num(o, "prefill_tokens_per_s"), 40 / num(o, "prefill_seconds"), 1e-6 * num(o, "prefill_tokens_per_s"));
        CHECK_NEAR(num(o, "decode_bytes_per_token"), num(o, "decode_bytes_per_step") / 2, 1);
        CHECK_NEAR(num(o, "decode_roofline_ratio"),
                   num(o, "decode_bytes_per_step") * (num(o, "decode_tokens_per_s") / 2) /
                       (num(o, "measured_bandwidth_gbs") * 1e9), 1e-6);
        /* a batch of one reads K = 2 experts per layer of the tiny model (8 of them) */
        const cJSON *batches = cJSON_GetObjectItem(o, "batches"), *contexts = cJSON_GetObjectItem(o, "contexts");
        CHECK(cJSON_GetArraySize(batches) == 2 && cJSON_GetArraySize(contexts) == 1);
        const cJSON *b1 = cJSON_GetArrayItem(batches, 0), *b2 = cJSON_GetArrayItem(batches, 1);
        if (b1 && b2) {
            CHECK(num(b1, "batch") == 1 && num(b2, "batch") == 2);
            CHECK_NEAR(num(b1, "decode_experts_per_layer"), 2.0, 1e-12);
            CHECK(num(b2, "decode_experts_per_layer") >= 2.0 && num(b2, "decode_experts_per_layer") <= 4.0);
            CHECK(num(b2, "decode_bytes_per_step") >= num(b1, "decode_bytes_per_step"));
            /* experts by the rows that chose them: at batch 1 all K by one row; at batch 2 they sum to
             * the distinct experts and, weighted by rows, to the batch's B x K choices */
            const cJSON *r1 = cJSON_GetObjectItem(b1, "decode_expert_rows"), *r2 = cJSON_GetObjectItem(b2, "decode_expert_rows");
            CHECK(cJSON_GetArraySize(r1) == 1 && cJSON_GetArraySize(r2) >= 1 && cJSON_GetArraySize(r2) <= 2);
            if (cJSON_GetArraySize(r1) == 1) CHECK_NEAR(cJSON_GetArrayItem(r1, 0)->valuedouble, 2.0, 1e-12);
            double n_exp = 0, n_rows = 0;
            for (int r = 0; r < cJSON_GetArraySize(r2); r++) {
                n_exp += cJSON_GetArrayItem(r2, r)->valuedouble;
                n_rows += (r + 1) * cJSON_GetArrayItem(r2, r)->valuedouble;
            }
            CHECK_NEAR(n_exp, num(b2, "decode_experts_per_layer"), 1e-9);
            CHECK_NEAR(n_rows, 2 * 2.0, 1e-9);
            CHECK_NEAR(num(b2, "decode_tokens_per_s"), num(o, "decode_tokens_per_s"), 0);
            CHECK(num(b1, "decode_routing_steps_counted") == 4);
            /* the timed repetitions follow the first-touch step and the untimed census
             * repetition (4 steps): their context is the prompt's 40 + 1 + 4 */
            CHECK_MSG(num(b1, "context") == 45, "batch 1 context %g", num(b1, "context"));
            CHECK_NEAR(num(b1, "decode_tokens_per_s"), 1e3 / num(b1, "decode_ms_per_step"),
                       1e-6 * num(b1, "decode_tokens_per_s"));
        }
        const cJSON *c0 = cJSON_GetArrayItem(contexts, 0);
        if (c0 && b2) {
            CHECK(num(c0, "context") >= 150 && num(c0, "batch") == 2);
            CHECK(num(c0, "decode_cache_bytes_per_step") > num(b2, "decode_cache_bytes_per_step"));
            CHECK(num(c0, "prefill_tokens_per_s") > 0);
        }
        check_paired(o);
        check_faults(o);
        cJSON_Delete(o);
    }
    free(out);
    free(errs);
}

/* The line of batch b, mode m and (forced) p among n parsed lines, or NULL. */
static const cJSON *find_line(cJSON **lines, int n, int b, const char *m, double p) {
    for (int i = 0; i < n; i++) {
        const cJSON *mode = cJSON_GetObjectItem(lines[i], "mode"), *pv = cJSON_GetObjectItem(lines[i], "p");
        if (num(lines[i], "batch") == b && cJSON_IsString(mode) && !strcmp(mode->valuestring, m) &&
            (p < 0 || (cJSON_IsNumber(pv) && pv->valuedouble == p)))
            return lines[i];
    }
    return NULL;
}

static void test_mtp(const char *model) {
    char args[2048], *out, *errs;
    enum { GEN = 6 };
    snprintf(args, sizeof args, "--model '%s' --mtp on --accept 0,1 --json --prompt-len 40 --gen %d "
             "--batches 1,2 --reps 2 --threads 2", model, GEN);
    int st = run(args, &out, &errs);
    CHECK_MSG(st == 0, "status %d, stderr '%s'", st, errs ? errs : "");
    cJSON *lines[16];
    int n = 0;
    for (char *save = NULL, *l = out ? strtok_r(out, "\n", &save) : NULL; l && n < 16; l = strtok_r(NULL, "\n", &save)) {
        lines[n] = cJSON_Parse(l);
        CHECK_MSG(lines[n] != NULL, "not a JSON line: '%.200s'", l);
        if (lines[n]) n++;
    }
    /* per batch: plain, the model's drafts, p = 0, p = 1 */
    CHECK_MSG(n == 8, "%d lines", n);
    for (int b = 1; b <= 2; b++) {
        const cJSON *plain = find_line(lines, n, b, "plain", -1), *nat = find_line(lines, n, b, "mtp_natural", -1);
        const cJSON *p0 = find_line(lines, n, b, "mtp_forced", 0), *p1 = find_line(lines, n, b, "mtp_forced", 1);
        CHECK_MSG(plain && nat && p0 && p1, "batch %d: a line is missing", b);
        if (!plain || !nat || !p0 || !p1) continue;
        CHECK(num(plain, "tokens_per_step") == 1 && num(plain, "tokens_per_s") > 0);
        const cJSON *spec[3] = {nat, p0, p1};
        for (int i = 0; i < 3; i++) {
            const cJSON *m = spec[i];
            CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItem(m, "exact")), "batch %d line %d: tokens differ from plain", b, i);
            CHECK(num(m, "steps") == GEN && num(m, "drafts") == GEN * b);
            CHECK(num(m, "bytes_per_step") > num(plain, "bytes_per_step"));
            CHECK(num(m, "bytes_mtp_block") > 0 && num(m, "bytes_second_head") > 0);
            CHECK_NEAR(num(m, "bytes_per_step"), num(m, "bytes_main") + num(m, "bytes_mtp_block") +
                       num(m, "bytes_second_head"), 1e-6 * num(m, "bytes_per_step"));
            /* two interleaved rounds: the gain is the mean of the rounds' paired ratios */
            CHECK(num(m, "rounds") == 2 && num(plain, "rounds") == 2);
            CHECK(num(m, "gain_min") > 0 && num(m, "gain_min") <= num(m, "gain") && num(m, "gain") <= num(m, "gain_max"));
            CHECK_NEAR(num(m, "gain"), 0.5 * (num(m, "gain_min") + num(m, "gain_max")), 1e-9 * num(m, "gain"));
            CHECK_NEAR(num(m, "gain_over_ideal"), num(m, "gain") / num(m, "ideal_gain"), 1e-9 * num(m, "gain"));
            CHECK(num(m, "tokens_per_s_best") >= num(m, "tokens_per_s") && num(m, "time_spread") >= 0);
            CHECK_NEAR(num(m, "ideal_gain"), num(m, "tokens_per_step") /
                       (num(m, "bytes_per_step") / num(plain, "bytes_per_step")), 1e-9);
            CHECK_NEAR(num(m, "tokens"), num(m, "tokens_per_step") * GEN * b, 1e-9);
        }
        CHECK(num(p1, "acceptance") == 1 && num(p1, "tokens_per_step") == 2 && num(p1, "accepted") == GEN * b);
        CHECK(num(p0, "acceptance") == 0 && num(p0, "tokens_per_step") == 1 && num(p0, "accepted") == 0);
        /* each step's verify is 2 rows, its MTP call k rows: more MTP rows at p = 1 */
        CHECK(num(p1, "bytes_mtp_block") >= num(p0, "bytes_mtp_block"));
    }
    for (int i = 0; i < n; i++) cJSON_Delete(lines[i]);
    free(out);
    free(errs);
}

static void test_summary(const char *model) {
    char args[2048], *out, *errs;
    snprintf(args, sizeof args, "--model '%s' --prompt-len 8 --gen 2 --reps 1 --probe-mb 8", model);
    int st = run(args, &out, &errs);
    CHECK_MSG(st == 0 && out && strstr(out, "decode ") && strstr(out, "roofline:"),
              "status %d, stdout '%s', stderr '%s'", st, out ? out : "", errs ? errs : "");
    /* the L3 as a size or "unknown", never a negative one */
    const char *l3 = out ? strstr(out, ", L3 ") : NULL;
    CHECK_MSG(l3 && (!strncmp(l3 + 5, "unknown,", 8) || (l3[5] >= '1' && l3[5] <= '9')), "machine line: '%.120s'",
              out ? out : "");
    /* not a terminal: no progress line */
    CHECK(errs && errs[0] == 0);
    free(out);
    free(errs);
}

/* --paired-probes off: no marks, no paired figures */
static void test_paired_off(const char *model) {
    char args[2048], *out, *errs;
    snprintf(args, sizeof args, "--model '%s' --json --prompt-len 8 --gen 2 --reps 2 --probe-mb 8 --paired-probes off",
             model);
    int st = run(args, &out, &errs);
    CHECK_MSG(st == 0, "status %d, stderr '%s'", st, errs ? errs : "");
    cJSON *o = out ? cJSON_Parse(out) : NULL;
    CHECK(o != NULL);
    if (o) {
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "paired_probes")));
        CHECK(!cJSON_GetObjectItem(o, "decode_bound_ratio_paired") && !cJSON_GetObjectItem(o, "prefill_paired_reps"));
        CHECK(!cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "batches"), 0), "paired"));
        cJSON_Delete(o);
    }
    free(out);
    free(errs);
}

static void expect(const char *args, int status, const char *msg) {
    char *out, *errs;
    int st = run(args, &out, &errs);
    CHECK_MSG(st == status && errs && strstr(errs, msg), "bench %s: status %d (want %d), stderr '%s' (want '%s')",
              args, st, status, errs ? errs : "", msg);
    free(out);
    free(errs);
}

int main(void) {
    bin = getenv("DSV4_BIN");
    if (!bin) {
        fprintf(stderr, "DSV4_BIN is not set\n");
        return 1;
    }
    snprintf(tmp, sizeof tmp, "/tmp/dsv4_bench_cli_%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmp);
    if (system(cmd)) return 1;
    char model[1024], args[1200];
    test_shared("golden/tiny_s0/model", model, sizeof model);
    test_json(model);
    test_summary(model);
    test_paired_off(model);
    test_mtp(model);
    expect("", 2, "--model DIR is required");
    snprintf(args, sizeof args, "--model '%s' --accept 1", model);
    expect(args, 2, "--accept needs --mtp on");
    snprintf(args, sizeof args, "--model '%s' --mtp on --accept 0.5,1.5", model);
    expect(args, 2, "--accept: needs");
    snprintf(args, sizeof args, "--model '%s' --mtp on --contexts 100", model);
    expect(args, 2, "--contexts does not go with --mtp on");
    snprintf(args, sizeof args, "--model '%s' --batch 0", model);
    expect(args, 2, "--batch needs a whole number");
    snprintf(args, sizeof args, "--model '%s' --batches 1,x", model);
    expect(args, 2, "--batches: needs");
    snprintf(args, sizeof args, "--model '%s' --paired-probes maybe", model);
    expect(args, 2, "--paired-probes");
    expect("--model /nonexistent/dsv4_model --gen 1", 1, "dsv4 bench:");
    expect("--model x --frobnicate", 2, "unknown option");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd)) return 1;
    return test_report();
}
