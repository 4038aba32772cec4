/* test_mem_fit.c — the memory fit check (dsv4_mem_fit_*): the released Flash checkpoint's
 * bytes computed from its config alone against the published figures (spec/model.md §2.1:
 * total_size 159,609,485,896 bytes in 69,187 tensors), the cache figure against the
 * planner, the verdict's arithmetic, the scratch arena resident from create, and the
 * machine-memory parsers. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cache/cache.h"
#include "dsv4.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/info.h"
#include "test.h"
#include "util/arena.h"
#include "util/machine.h"

int main(void) {
    char path[1024];
    const char *src = getenv("DSV4_SRC");
    snprintf(path, sizeof path, "%s/tests/cli/flash_config.json", src ? src : "..");
    dsv4_err err = {0};
    dsv4_config cfg;
    int rc = dsv4_config_load(path, &cfg, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return test_report();

    /* the release layout from the config equals the published checkpoint, byte for byte */
    dsv4_dtype_bytes db;
    uint64_t routed = 0;
    CHECK(dsv4_count_release_bytes(&cfg, &db, &routed, &err) == 0);
    CHECK_MSG(db.total_bytes == 159609485896ull, "release bytes %llu", (unsigned long long)db.total_bytes);
    CHECK_MSG(db.total_tensors == 69187, "release tensors %lld", (long long)db.total_tensors);
    /* 43 main layers + 1 MTP, 256 experts x 3 matrices (FP4 bytes + scales) each */
    const uint64_t per_expert = 3ull * (2048ull * 4096 / 2 + 2048ull * 4096 / 32);
    CHECK_MSG(routed == 44ull * 256 * per_expert, "routed %llu", (unsigned long long)routed);

    /* the fit: weights as above, cache = what the engine's planner allocates */
    dsv4_engine_opts eo = {.max_context = 8192, .max_seqs = 2};
    dsv4_mem_fit f;
    CHECK(dsv4_mem_fit_config(path, &eo, &f, &err) == 0);
    CHECK(f.weights_bytes == db.total_bytes && f.routed_bytes == routed);
    dsv4_engine_opts_resolve(&eo);
    dsv4_cache_opts co;
    dsv4_engine_cache_opts(&eo, &co);
    dsv4_cache_plan plan;
    CHECK(dsv4_cache_plan_make(&cfg, &co, &plan, &err) == 0);
    CHECK(f.cache_bytes == (uint64_t)plan.total_bytes && f.cache_bytes > 0);
    CHECK(f.scratch_bytes > 0);
    CHECK(f.need_bytes == f.weights_bytes + f.cache_bytes + f.scratch_bytes);
    CHECK(f.ram_bytes == dsv4_machine_ram_bytes());
    if (f.ram_bytes) {
        CHECK(f.fits == (f.need_bytes + f.headroom_bytes <= f.ram_bytes));
        if (!f.fits && f.ep_ranks) {
            /* the fewest ranks: that many fit, one fewer does not */
            const uint64_t dense = f.weights_bytes - f.routed_bytes, k = (uint64_t)f.ep_ranks;
            const uint64_t own = f.cache_bytes + f.scratch_bytes;
            CHECK(f.ep_rank_bytes == dense + (routed + k - 1) / k + own);
            CHECK(f.ep_rank_bytes + f.headroom_bytes <= f.ram_bytes);
            CHECK(k == 2 || dense + (routed + k - 2) / (k - 1) + own + f.headroom_bytes > f.ram_bytes);
        }
    }
    /* a longer context costs more cache */
    dsv4_engine_opts eo2 = {.max_context = 65536, .max_seqs = 2};
    dsv4_mem_fit f2;
    CHECK(dsv4_mem_fit_config(path, &eo2, &f2, &err) == 0 && f2.cache_bytes > f.cache_bytes);
    /* more rows per call cost more scratch */
    dsv4_engine_opts eo3 = {.max_context = 8192, .max_seqs = 8, .c_max = 2048};
    dsv4_mem_fit f3;
    CHECK(dsv4_mem_fit_config(path, &eo3, &f3, &err) == 0 && f3.scratch_bytes > f.scratch_bytes);
    /* a missing config is an error with the path in it */
    CHECK(dsv4_mem_fit_config("/nonexistent/config.json", &eo, &f2, &err) != 0);
    CHECK(strstr(err.msg, "/nonexistent/config.json") != NULL);

    /* the scratch figure is the arena a real engine makes with these options (threads
     * included: attention keeps per-thread buffers); with scratch_resident every page of it is
     * resident after create (util/arena.h: the forward does not fault it in), without it (the
     * first engine, so that its arena is fresh memory) next to none is */
    FILE *shared = fopen(test_shared_root(), "r");
    if (shared) {
        fclose(shared);
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/golden/small_s1/model", test_shared_root());
        dsv4_model *m = NULL;
        dsv4_engine *e = NULL;
        for (int v = 0; v < 3; v++) {
            const int threads = v < 2 ? 1 : 3, resident = v > 0;
            dsv4_engine_opts eo4 = {.max_context = 600, .max_seqs = 3, .c_max = 100, .threads = threads, .mtp = 1,
                                    .scratch_resident = resident};
            dsv4_mem_fit f4;
            CHECK(dsv4_model_open(dir, &m, &err) == 0);
            CHECK(dsv4_mem_fit_model(m, &eo4, &f4, &err) == 0);
            CHECK_MSG(dsv4_engine_create(m, &eo4, &e, &err) == 0, "%s", err.msg);
            CHECK_MSG(e && f4.scratch_bytes == dsv4_engine_scratch_bytes(e) && e->scratch.cap >= f4.scratch_bytes,
                      "fit says %llu scratch bytes, the engine made %zu", (unsigned long long)f4.scratch_bytes,
                      e ? e->scratch.cap : 0);
            if (e) { /* the whole 4 KB pages inside the arena */
                const uintptr_t pg = 4096, lo = ((uintptr_t)e->scratch.base + pg - 1) & ~(pg - 1);
                const uintptr_t hi = ((uintptr_t)e->scratch.base + e->scratch.cap) & ~(pg - 1);
                const size_t n_pg = hi > lo ? (hi - lo) / pg : 0;
                unsigned char *in = malloc(n_pg ? n_pg : 1);
                size_t on = 0;
                const int mc = in && n_pg ? mincore((void *)lo, hi - lo, in) : -1;
                for (size_t i = 0; mc == 0 && i < n_pg; i++) on += in[i] & 1;
                if (resident)
                    CHECK_MSG(mc == 0 && on == n_pg && (uintptr_t)e->scratch.base % (2u << 20) == 0,
                              "scratch arena: mincore %d, %zu of %zu pages resident after create", mc, on, n_pg);
                else /* create writes none of it; an allocator may write a page at either end */
                    CHECK_MSG(mc == 0 && n_pg > 64 && on <= 2,
                              "lazy scratch arena: mincore %d, %zu of %zu pages resident after create", mc, on, n_pg);
                free(in);
            }
            dsv4_engine_free(e);
            dsv4_model_close(m);
        }
    }

    /* the arena's parts: part 1 of 3 of 7 huge pages writes huge pages [2, 4) and nothing else;
     * the three parts together are the whole arena */
    {
        const size_t H = (size_t)2 << 20, pg = 4096, n_pg = 7 * H / pg;
        dsv4_arena a;
        unsigned char *in = malloc(n_pg);
        CHECK(in && dsv4_arena_init_huge(&a, 7 * H - 100, &err) == 0 && a.cap == 7 * H);
        if (in && a.base) {
            dsv4_arena_populate(&a, 1, 3);
            size_t wrong = 0;
            CHECK(mincore(a.base, a.cap, in) == 0);
            /* from page 1: an allocator may write the first (ASan fills an allocation's first 4 KB) */
            for (size_t i = 1; i < n_pg; i++) wrong += (in[i] & 1) != (i >= 2 * H / pg && i < 4 * H / pg);
            CHECK_MSG(wrong == 0, "part 1 of 3: %zu of %zu pages resident or not where they should", wrong, n_pg);
            dsv4_arena_populate(&a, 0, 3);
            dsv4_arena_populate(&a, 2, 3);
            wrong = 0;
            CHECK(mincore(a.base, a.cap, in) == 0);
            for (size_t i = 0; i < n_pg; i++) wrong += !(in[i] & 1);
            CHECK_MSG(wrong == 0, "three parts: %zu of %zu pages not resident", wrong, n_pg);
        }
        free(in);
        dsv4_arena_free(&a);
    }

    /* machine memory parsers */
    CHECK(dsv4_meminfo_total("MemTotal:       24683584 kB\nMemFree: 1 kB\n") == 24683584ull * 1024);
    CHECK(dsv4_meminfo_total("MemFree: 1 kB\n") == 0 && dsv4_meminfo_total(NULL) == 0);
    CHECK(dsv4_cgroup_mem_limit("max\n") == 0);
    CHECK(dsv4_cgroup_mem_limit("9223372036854771712\n") == 0);
    CHECK(dsv4_cgroup_mem_limit("2147483648\n") == 2147483648ull);
    CHECK(dsv4_cgroup_mem_limit(NULL) == 0);
    /* a field by its key at a line's start (the fp4 layout's auto rule reads MemAvailable and
     * VmLck): not inside another key, not a prefix of a longer one's value */
    const char *mi = "MemTotal:       24683584 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n"
                     "Active(file):  777 kB\nfile):  5 kB\n";
    CHECK(dsv4_meminfo_field(mi, "MemAvailable:") == 20000000ull * 1024);
    CHECK(dsv4_meminfo_field(mi, "file):") == 5ull * 1024); /* the line's own, not Active(file)'s */
    CHECK(dsv4_meminfo_field(mi, "SwapTotal:") == 0 && dsv4_meminfo_field(NULL, "MemFree:") == 0);
    CHECK(dsv4_meminfo_field("Name:\tdsv4\nVmLck:\t    1024 kB\nVmPin: 0 kB\n", "VmLck:") == 1024ull * 1024);
    /* this process: something available, nothing locked (the suite never mlocks) */
    CHECK(dsv4_machine_available_bytes() > 0);
    CHECK(dsv4_process_locked_bytes() == 0);
    return test_report();
}
