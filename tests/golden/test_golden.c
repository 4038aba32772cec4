/* test_golden.c — whole-model check against the oracle's golden runs: runs `dsv4 run` on a
 * golden case and compares every array it shares with the golden dump.
 *
 *   test_golden CASE_DIR RUN_NAME [extra dsv4 run flags...]     a case of ../shared/golden
 *   test_golden --model DIR --ref RUN_DIR [flags...]             any model and oracle run
 *
 * Gate (spec/model.md §8): max|diff| / max|ref| <= 1e-4 on every array, identical argmax on
 * every logits row. Prints max-abs, max-rel and top-1 agreement for each array. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dump.h"
#include "test.h"

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: test_golden (CASE RUN | --model DIR --ref RUN) [flags...]\n"); return 2; }
    char model[1024], run[3200], buf[1024];
    int first_flag = 3;
    if (!strcmp(argv[1], "--model") && argc >= 5 && !strcmp(argv[3], "--ref")) {
        snprintf(model, sizeof model, "%s", argv[2]);
        snprintf(run, sizeof run, "%s", argv[4]);
        first_flag = 5;
    } else {
        snprintf(model, sizeof model, "%s", test_shared("golden", buf, sizeof buf));
        snprintf(run, sizeof run, "%s/%s/%s", model, argv[1], argv[2]);
        snprintf(model + strlen(model), sizeof model - strlen(model), "/%s/model", argv[1]);
    }
    dump_dir ref;
    if (dump_load(run, &ref)) return 1;

    char out[] = "/tmp/dsv4_golden_XXXXXX";
    if (!mkdtemp(out)) { perror("mkdtemp"); return 1; }
    size_t cap = (size_t)ref.n_tokens * 12 + 8192;
    char *cmd = malloc(cap);
    const char *bin = getenv("DSV4_BIN") ? getenv("DSV4_BIN") : "dsv4";
    /* the F32 cache: the 1e-4 gates are the reference math's (a flag after it may override) */
    int n = snprintf(cmd, cap, "%s run --model %s --kv-dtype f32 --prefill %d --dump %s/run --tokens ", bin, model,
                     ref.prefill_len, out);
    for (int i = 0; i < ref.n_tokens; i++)
        n += snprintf(cmd + n, cap - (size_t)n, "%s%d", i ? "," : "", ref.tokens[i]);
    for (int i = first_flag; i < argc; i++) n += snprintf(cmd + n, cap - (size_t)n, " %s", argv[i]);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "dsv4 run exited with %d", rc);

    snprintf(buf, sizeof buf, "%s/run", out);
    dump_dir eng;
    if (rc == 0 && dump_load(buf, &eng) == 0) {
        int compared = 0;
        for (int i = 0; i < ref.n_arrays; i++) {
            const dump_array *r = &ref.arrays[i];
            if (!r->data) continue;
            const dump_array *a = dump_find(&eng, r->name);
            if (r->is_i32) { /* routing: identical ids */
                if (!strstr(cmd, "--dump-choices")) continue;
                CHECK_MSG(a && a->n == r->n && !memcmp(a->data, r->data, r->n * 4),
                          "%s differs from the golden choices", r->name);
                printf("%-28s identical: %s\n", r->name, a && a->n == r->n && !memcmp(a->data, r->data, r->n * 4) ? "yes" : "NO");
                continue;
            }
            int layer_arr = strstr(r->name, "layer") != NULL;
            int mtp_arr = strstr(r->name, "mtp") != NULL;
            int want = (!layer_arr || strstr(cmd, "--dump-layers")) && (!mtp_arr || strstr(cmd, "--mtp"));
            if (!a) { CHECK_MSG(!want, "engine dump lacks %s", r->name); continue; }
            dump_cmp c;
            CHECK_MSG(dump_compare(a, r, &c) == 0, "%s: shape mismatch", r->name);
            printf("%-28s max-abs %.3e  max-rel %.3e", r->name, c.max_abs, c.max_rel);
            if (strstr(r->name, "logits")) printf("  top-1 %lld/%lld", c.top1_same, c.rows);
            printf("\n");
            CHECK_MSG(c.max_rel <= 1e-4, "%s: max-rel %.3e > 1e-4", r->name, c.max_rel);
            if (strstr(r->name, "logits"))
                CHECK_MSG(c.top1_same == c.rows, "%s: top-1 agreement %lld/%lld", r->name, c.top1_same, c.rows);
            compared++;
        }
        CHECK(compared >= 4);
        if (strstr(cmd, "--dump-choices")) {
            int same = ref.csa && eng.csa && cJSON_Compare(ref.csa, eng.csa, 1);
            printf("%-28s identical: %s\n", "csa_selected_entries", same ? "yes" : "NO");
            CHECK_MSG(same, "CSA selections differ from the golden run");
        }
        dump_free(&eng);
    }
    snprintf(cmd, cap, "rm -rf %s", out);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", out);
    free(cmd);
    dump_free(&ref);
    return test_report();
}
