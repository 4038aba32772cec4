/* cmd_info.c — `dsv4 info`: what a model directory holds and what serving it costs.
 *
 *   dsv4 info --model DIR [--json] [--check] [--max-context N] [--max-seqs N] [--c-max N]
 *
 * Reads config.json and the safetensors headers only (the weights stay unread in the
 * mapping), so it is quick on any checkpoint size; --check loads the model fully (scale
 * bytes, vectors, tid2eid) and decodes every matrix value looking for NaN/Inf (reads the
 * whole checkpoint; exit status 1 when any is found). Cache figures come from the cache planner, the one place that
 * derives cache geometry.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_opts.h"
#include "commands.h"
#include "dsv4_internal.h"

/* "1.23 B" style for parameter counts and byte sizes. */
static const char *human(double v, char *buf, size_t n, const char *unit) {
    const char *sfx[] = {"", " K", " M", " G", " T"};
    int k = 0;
    while (v >= 1000.0 && k < 4) { v /= 1000.0; k++; }
    snprintf(buf, n, k ? "%.2f%s%s" : "%.0f%s%s", v, sfx[k], unit);
    return buf;
}

/* The cache plan at each KV storage: F32, BF16 (the engine default), FP8-split rows with
 * BF16 indexer keys (fp8_ok = 0 where the shape does not allow it, fp8_err says why), and
 * BF16 rows with FP4 indexer keys ("bf16+fp4", fidelity F3 only). */
typedef struct plan_pair {
    dsv4_cache_plan f32, bf16, fp8, fp4k; /* fp4k: BF16 rows, FP4 indexer keys (fidelity F3) */
    int ok, fp8_ok;
    char err[1024], fp8_err[1024];
} plan_pair;

static void make_plans(const dsv4_config *c, int64_t max_context, int64_t max_seqs, int64_t c_max,
                       plan_pair *p) {
    dsv4_cache_opts o = {0};
    o.max_context = max_context;
    o.max_seqs = (int)max_seqs;
    o.c_max = (int)c_max;
    o.d_max = c->num_nextn_predict_layers > 0 ? 1 : 0;
    o.row_bytes_per_value = 4;
    o.idx_bytes_per_value = 4;
    dsv4_err err = {0};
    p->ok = !dsv4_cache_plan_make(c, &o, &p->f32, &err);
    if (p->ok) {
        o.row_bytes_per_value = 2;
        o.idx_bytes_per_value = 2;
        p->ok = !dsv4_cache_plan_make(c, &o, &p->bf16, &err);
    }
    if (p->ok) {
        dsv4_cache_opts k = o;
        k.idx_bytes_per_value = 3; /* DSV4_ROW_FP4 */
        k.idx_fp4_lossless = 1;
        p->ok = !dsv4_cache_plan_make(c, &k, &p->fp4k, &err);
    }
    if (p->ok) {
        dsv4_err ferr = {0};
        o.row_bytes_per_value = 1;
        p->fp8_ok = !dsv4_cache_plan_make(c, &o, &p->fp8, &ferr);
        if (!p->fp8_ok) snprintf(p->fp8_err, sizeof p->fp8_err, "%s", ferr.msg);
    }
    if (!p->ok) snprintf(p->err, sizeof p->err, "%s", err.msg);
}

/* Per-token bytes of one plan by state kind. */
typedef struct per_token { double window, compressed, indexer; } per_token;

static per_token token_bytes(const dsv4_cache_plan *p) {
    per_token t = {0};
    t.window = (double)p->win_page_bytes / p->win_block;
    for (int i = 0; i < p->n_ratios; i++) t.compressed += (double)p->cmp_page_bytes[i] / p->block;
    t.indexer = (double)p->idx_page_bytes / p->block;
    return t;
}

static cJSON *plan_json(const dsv4_cache_plan *p) {
    cJSON *j = cJSON_CreateObject();
    per_token t = token_bytes(p);
    cJSON *pt = cJSON_AddObjectToObject(j, "per_token_bytes");
    cJSON_AddNumberToObject(pt, "window", t.window);
    cJSON_AddNumberToObject(pt, "compressed", t.compressed);
    cJSON_AddNumberToObject(pt, "indexer", t.indexer);
    cJSON_AddNumberToObject(pt, "compressed_plus_indexer", p->bytes_per_token);
    cJSON_AddNumberToObject(j, "window_bytes_per_sequence_max", (double)p->w_live * (double)p->win_page_bytes);
    cJSON_AddNumberToObject(j, "compressor_state_bytes_per_sequence", (double)p->slot_bytes);
    cJSON_AddNumberToObject(j, "block", p->block);
    cJSON_AddNumberToObject(j, "win_block", p->win_block);
    cJSON_AddNumberToObject(j, "w_live", p->w_live);
    cJSON_AddNumberToObject(j, "win_page_bytes", (double)p->win_page_bytes);
    cJSON *cp = cJSON_AddArrayToObject(j, "cmp_pools");
    for (int i = 0; i < p->n_ratios; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "ratio", p->ratios[i]);
        cJSON_AddNumberToObject(e, "layers", p->n_cmp_layers[i]);
        cJSON_AddNumberToObject(e, "page_bytes", (double)p->cmp_page_bytes[i]);
        cJSON_AddItemToArray(cp, e);
    }
    cJSON_AddNumberToObject(j, "idx_layers", p->n_idx_layers);
    cJSON_AddNumberToObject(j, "idx_page_bytes", (double)p->idx_page_bytes);
    cJSON_AddNumberToObject(j, "slot_bytes", (double)p->slot_bytes);
    cJSON_AddNumberToObject(j, "seq_fixed_bytes", (double)p->seq_fixed_bytes);
    cJSON_AddNumberToObject(j, "block_bytes", (double)p->block_bytes);
    cJSON_AddNumberToObject(j, "n_blocks", (double)p->n_blocks);
    cJSON_AddNumberToObject(j, "token_capacity", (double)p->token_capacity);
    cJSON_AddNumberToObject(j, "win_pages", (double)p->win_pages);
    cJSON_AddNumberToObject(j, "total_bytes", (double)p->total_bytes);
    return j;
}

static void fit_json(cJSON *j, const dsv4_mem_fit *f);

static int print_json(const char *dir, const dsv4_config *c, const char *mwarn, const dsv4_param_counts *pc,
                      const dsv4_dtype_bytes *db, const plan_pair *pp, const dsv4_mem_fit *fit,
                      const dsv4_fp4_census *fc) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", dir);
    cJSON *cf = cJSON_AddObjectToObject(j, "config");
    cJSON_AddNumberToObject(cf, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(cf, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(cf, "num_hidden_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(cf, "num_nextn_predict_layers", c->num_nextn_predict_layers);
    cJSON_AddNumberToObject(cf, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(cf, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(cf, "n_routed_experts", c->n_routed_experts);
    cJSON_AddNumberToObject(cf, "num_experts_per_tok", c->num_experts_per_tok);
    cJSON_AddNumberToObject(cf, "sliding_window", c->sliding_window);
    cJSON *ls = cJSON_AddArrayToObject(j, "layers");
    for (int l = 0; l < dsv4_cfg_n_total_layers(c); l++) {
        cJSON *e = cJSON_CreateObject();
        const int r = c->compress_ratios[l];
        cJSON_AddNumberToObject(e, "layer", l);
        cJSON_AddBoolToObject(e, "mtp", l >= c->num_hidden_layers);
        cJSON_AddStringToObject(e, "kind", dsv4_layer_kind_name(dsv4_layer_kind_of(r)));
        cJSON_AddNumberToObject(e, "ratio", r);
        cJSON_AddStringToObject(e, "routing", l < c->num_hash_layers ? "hash" : "score");
        cJSON_AddNumberToObject(e, "params", (double)pc->layer[l]);
        cJSON_AddNumberToObject(e, "active_params", (double)pc->layer_active[l]);
        cJSON_AddItemToArray(ls, e);
    }
    cJSON *p = cJSON_AddObjectToObject(j, "params");
    cJSON_AddNumberToObject(p, "total", (double)pc->total);
    cJSON_AddNumberToObject(p, "main", (double)pc->main);
    cJSON_AddNumberToObject(p, "mtp", (double)pc->mtp);
    cJSON_AddNumberToObject(p, "embed", (double)pc->embed);
    cJSON_AddNumberToObject(p, "head", (double)pc->head);
    cJSON_AddNumberToObject(p, "routed_main", (double)pc->routed_main);
    cJSON_AddNumberToObject(p, "routed_mtp", (double)pc->routed_mtp);
    cJSON_AddNumberToObject(p, "active_main", (double)pc->active_main);
    cJSON_AddNumberToObject(p, "active_mtp", (double)pc->active_mtp);
    cJSON *b = cJSON_AddObjectToObject(j, "bytes");
    cJSON_AddNumberToObject(b, "files", db->n_files);
    cJSON_AddNumberToObject(b, "file_bytes", (double)db->file_bytes);
    cJSON_AddNumberToObject(b, "tensor_bytes", (double)db->total_bytes);
    cJSON_AddNumberToObject(b, "tensors", (double)db->total_tensors);
    cJSON *bd = cJSON_AddObjectToObject(b, "by_dtype");
    for (int t = 0; t < DSV4_ST_N_DTYPES; t++) {
        if (!db->tensors[t]) continue;
        cJSON *e = cJSON_AddObjectToObject(bd, dsv4_st_dtype_name((dsv4_st_dtype)t));
        cJSON_AddNumberToObject(e, "bytes", (double)db->bytes[t]);
        cJSON_AddNumberToObject(e, "tensors", (double)db->tensors[t]);
    }
    cJSON *cc = cJSON_AddObjectToObject(j, "cache");
    if (pp->ok) {
        const dsv4_cache_opts *o = &pp->f32.opts;
        cJSON *oj = cJSON_AddObjectToObject(cc, "options");
        cJSON_AddNumberToObject(oj, "max_context", (double)o->max_context);
        cJSON_AddNumberToObject(oj, "max_seqs", o->max_seqs);
        cJSON_AddNumberToObject(oj, "c_max", o->c_max);
        cJSON_AddNumberToObject(oj, "d_max", o->d_max);
        cJSON_AddItemToObject(cc, "f32", plan_json(&pp->f32));
        cJSON_AddItemToObject(cc, "bf16", plan_json(&pp->bf16));
        cJSON_AddItemToObject(cc, "bf16+fp4", plan_json(&pp->fp4k));
        if (pp->fp8_ok) cJSON_AddItemToObject(cc, "fp8", plan_json(&pp->fp8));
        else cJSON_AddStringToObject(cc, "fp8_error", pp->fp8_err);
        cJSON_AddStringToObject(cc, "default_kv_dtype", dsv4_kv_dtype_name(DSV4_KV_DEFAULT));
    } else {
        cJSON_AddStringToObject(cc, "error", pp->err);
    }
    cJSON *w = cJSON_AddArrayToObject(j, "warnings");
    if (c->warnings[0]) cJSON_AddItemToArray(w, cJSON_CreateString(c->warnings));
    for (const char *s = mwarn; s && *s;) {
        const char *e = strchr(s, '\n');
        size_t k = e ? (size_t)(e - s) : strlen(s);
        char *line = strndup(s, k);
        if (line) cJSON_AddItemToArray(w, cJSON_CreateString(line));
        free(line);
        s += k + (e ? 1 : 0);
    }
    fit_json(j, fit);
    if (fc) { /* a model's files (not --config): its FP4 matrices and --weights-memory lanes */
        cJSON *f = cJSON_AddObjectToObject(j, "fp4_layout");
        cJSON_AddNumberToObject(f, "fp4_matrices", (double)fc->fp4);
        cJSON_AddNumberToObject(f, "lanes_ok", (double)fc->lanes_ok);
        cJSON_AddNumberToObject(f, "stay_natural", (double)(fc->fp4 - fc->lanes_ok));
        cJSON_AddStringToObject(f, "first_natural", fc->first_natural);
    }
    char *txt = cJSON_Print(j);
    cJSON_Delete(j);
    if (!txt) {
        fprintf(stderr, "dsv4 info: out of memory\n");
        return 1;
    }
    printf("%s\n", txt);
    free(txt);
    return 0;
}

static void print_plan_text(const plan_pair *pp) {
    char b1[32], b2[32];
    const dsv4_cache_plan *f = &pp->f32, *h = &pp->bf16, *e = pp->fp8_ok ? &pp->fp8 : NULL;
    per_token tf = token_bytes(f), th = token_bytes(h), te = e ? token_bytes(e) : (per_token){0};
    printf("cache (max_context %lld, max_seqs %d, c_max %d, D_max %d; --kv-dtype, default %s):\n",
           (long long)f->opts.max_context, f->opts.max_seqs, f->opts.c_max, f->opts.d_max,
           dsv4_kv_dtype_name(DSV4_KV_DEFAULT));
    printf("  per token, bytes      f32        bf16         fp8\n");
    const double rows[4][3] = {{tf.window, th.window, te.window},
                               {tf.compressed, th.compressed, te.compressed},
                               {tf.indexer, th.indexer, te.indexer},
                               {f->bytes_per_token, h->bytes_per_token, e ? e->bytes_per_token : 0}};
    const char *names[4] = {"window", "compressed", "indexer", "compressed+idx"};
    const char *notes[4] = {"   (kept for the last positions of the window only)", "", "", "   (grows with the sequence)"};
    for (int i = 0; i < 4; i++) {
        printf("    %-15s %9.2f  %10.2f  ", names[i], rows[i][0], rows[i][1]);
        if (e) printf("%10.2f", rows[i][2]);
        else printf("%10s", "n/a");
        printf("%s\n", notes[i]);
    }
    if (!e) printf("    (fp8: %s)\n", pp->fp8_err);
    if (pp->bf16.n_idx_layers)
        printf("    indexer, FP4 keys %6.2f  (--kv-dtype ROWS+fp4, with --fidelity F3 only: %lld bytes a key, "
               "%lld in BF16)\n", token_bytes(&pp->fp4k).indexer, (long long)pp->fp4k.idx_row_bytes,
               (long long)pp->bf16.idx_row_bytes);
    f = h; /* pools and capacity below: the default storage */
    printf("  per sequence: compressor state %s, window pages up to %s (W_live %d)\n",
           human((double)f->slot_bytes, b1, sizeof b1, "B"),
           human((double)f->w_live * (double)f->win_page_bytes, b2, sizeof b2, "B"), f->w_live);
    printf("  pools (bf16): B %d, B_w %d, WIN page %lld B", f->block, f->win_block,
           (long long)f->win_page_bytes);
    for (int i = 0; i < f->n_ratios; i++)
        printf(", CMP[%d] page %lld B (%d layers)", f->ratios[i], (long long)f->cmp_page_bytes[i],
               f->n_cmp_layers[i]);
    printf(", IDX page %lld B (%d layers)\n", (long long)f->idx_page_bytes, f->n_idx_layers);
    printf("  capacity (bf16): %lld blocks, %lld tokens, %lld WIN pages, STATE slot %lld B, "
           "total %s\n", (long long)f->n_blocks, (long long)f->token_capacity,
           (long long)f->win_pages, (long long)f->slot_bytes,
           human((double)f->total_bytes, b1, sizeof b1, "B"));
}

static void print_text(const char *dir, const dsv4_config *c, const char *mwarn, const dsv4_param_counts *pc,
                       const dsv4_dtype_bytes *db, const plan_pair *pp) {
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
    printf("model %s\n", dir);
    printf("  vocab %d, hidden %d, %d layers + %d MTP, %d heads x %d (rope %d), q_lora %d, "
           "o_lora %d x %d groups\n", c->vocab_size, c->hidden_size, c->num_hidden_layers,
           c->num_nextn_predict_layers, c->num_attention_heads, c->head_dim, c->qk_rope_head_dim,
           c->q_lora_rank, c->o_lora_rank, c->o_groups);
    printf("  window %d, indexer %d x %d top-%d, experts %d (top-%d, inter %d) + 1 shared, "
           "hash layers %d, hc %d\n", c->sliding_window, c->index_n_heads, c->index_head_dim,
           c->index_topk, c->n_routed_experts, c->num_experts_per_tok, c->moe_intermediate_size,
           c->num_hash_layers, c->hc_mult);
    printf("layers:\n");
    for (int l = 0; l < dsv4_cfg_n_total_layers(c); l++) {
        const int r = c->compress_ratios[l];
        char name[32];
        if (l < c->num_hidden_layers) snprintf(name, sizeof name, "layers.%d", l);
        else snprintf(name, sizeof name, "mtp.%d", l - c->num_hidden_layers);
        printf("  %-10s %s ratio %-4d %s  params %s (active %s)\n", name,
               dsv4_layer_kind_name(dsv4_layer_kind_of(r)), r,
               l < c->num_hash_layers ? "hash-routed " : "score-routed",
               human((double)pc->layer[l], b1, sizeof b1, ""),
               human((double)pc->layer_active[l], b2, sizeof b2, ""));
    }
    printf("parameters: total %s = main %s + MTP %s (embed %s, head %s, routed experts %s)\n",
           human((double)pc->total, b1, sizeof b1, ""), human((double)pc->main, b2, sizeof b2, ""),
           human((double)pc->mtp, b3, sizeof b3, ""), human((double)pc->embed, b4, sizeof b4, ""),
           human((double)pc->head, b5, sizeof b5, ""),
           human((double)(pc->routed_main + pc->routed_mtp), b6, sizeof b6, ""));
    printf("  active per token: main %s, MTP %s   (exact: total %lld, main %lld, active main %lld)\n",
           human((double)pc->active_main, b1, sizeof b1, ""),
           human((double)pc->active_mtp, b2, sizeof b2, ""), (long long)pc->total,
           (long long)pc->main, (long long)pc->active_main);
    if (db->n_files)
        printf("bytes: %d file(s), %s on disk, %lld tensors\n", db->n_files,
               human((double)db->file_bytes, b1, sizeof b1, "B"), (long long)db->total_tensors);
    else
        printf("bytes of the released checkpoint layout (from the config): %s in %lld tensors\n",
               human((double)db->total_bytes, b1, sizeof b1, "B"), (long long)db->total_tensors);
    for (int t = 0; t < DSV4_ST_N_DTYPES; t++)
        if (db->tensors[t])
            printf("  %-8s %7lld tensors  %15llu B  (%s)\n", dsv4_st_dtype_name((dsv4_st_dtype)t),
                   (long long)db->tensors[t], (unsigned long long)db->bytes[t],
                   human((double)db->bytes[t], b1, sizeof b1, "B"));
    if (pp->ok) print_plan_text(pp);
    else printf("cache: no plan: %s\n", pp->err);
    if (c->warnings[0]) printf("warning: %s\n", c->warnings);
    for (const char *s = mwarn; s && *s;) {
        const char *e = strchr(s, '\n');
        int k = e ? (int)(e - s) : (int)strlen(s);
        printf("warning: %.*s\n", k, s);
        s += k + (e ? 1 : 0);
    }
}

static double gb(uint64_t bytes) { return (double)bytes / 1e9; }

/* The memory verdict: weights + cache + scratch against this machine (dsv4_mem_fit). */
static void print_fit(const dsv4_mem_fit *f, int64_t max_context, int64_t max_seqs) {
    printf("memory: weights %.1f GB (routed experts %.1f GB) + cache %.2f GB for %lld tokens x %lld "
           "sequence%s + scratch %.2f GB = %.1f GB\n", gb(f->weights_bytes), gb(f->routed_bytes),
           gb(f->cache_bytes), (long long)max_context, (long long)max_seqs, max_seqs == 1 ? "" : "s",
           gb(f->scratch_bytes), gb(f->need_bytes));
    printf("this machine: %.1f GB of memory, %d core%s available\n", gb(f->ram_bytes),
           dsv4_available_cores(), dsv4_available_cores() == 1 ? "" : "s");
    if (!f->ram_bytes) printf("verdict: unknown (this machine's memory could not be read)\n");
    else if (f->fits) printf("verdict: fits (%.1f GB to spare after %.1f GB kept for the system)\n",
                             gb(f->ram_bytes - f->need_bytes - f->headroom_bytes), gb(f->headroom_bytes));
    else {
        printf("verdict: needs %.1f GB more (%.1f GB kept for the system)",
               gb(f->need_bytes + f->headroom_bytes - f->ram_bytes), gb(f->headroom_bytes));
        if (f->ep_ranks)
            printf("; with expert parallelism over %d ranks like this machine each needs up to "
                   "%.1f GB", f->ep_ranks, gb(f->ep_rank_bytes));
        else printf("; even 64 expert-parallel ranks like this machine are not enough");
        printf("\n");
    }
}

static void fit_json(cJSON *j, const dsv4_mem_fit *f) {
    cJSON *o = cJSON_AddObjectToObject(j, "memory");
    cJSON_AddNumberToObject(o, "weights_bytes", (double)f->weights_bytes);
    cJSON_AddNumberToObject(o, "routed_bytes", (double)f->routed_bytes);
    cJSON_AddNumberToObject(o, "cache_bytes", (double)f->cache_bytes);
    cJSON_AddNumberToObject(o, "scratch_bytes", (double)f->scratch_bytes);
    cJSON_AddNumberToObject(o, "need_bytes", (double)f->need_bytes);
    cJSON_AddNumberToObject(o, "ram_bytes", (double)f->ram_bytes);
    cJSON_AddNumberToObject(o, "headroom_bytes", (double)f->headroom_bytes);
    cJSON_AddNumberToObject(o, "cores", dsv4_available_cores());
    cJSON_AddBoolToObject(o, "fits", f->fits);
    cJSON_AddNumberToObject(o, "ep_ranks", f->ep_ranks);
    cJSON_AddNumberToObject(o, "ep_rank_bytes", (double)f->ep_rank_bytes);
}

int cmd_info(int argc, char **argv) {
    const char *dir = NULL, *config = NULL;
    int json = 0, check = 0;
    int64_t max_context = 4096, max_seqs = 4, c_max = 2048;
    const cli_opt opts[] = {
        CLI_STR_OPT("model", 'm', &dir, "DIR", "model directory"),
        CLI_STR_OPT("config", 0, &config, "FILE", "a config.json alone (no weights): sizes for the released checkpoint layout and whether it fits this machine"),
        CLI_FLAG_OPT("json", 0, &json, 1, "machine-readable output"),
        CLI_FLAG_OPT("check", 0, &check, 1, "read the tensors too: check scale bytes, vectors, hash-routing tables and scan every weight for NaN/Inf"),
        CLI_I64_OPT("max-context", 'c', &max_context, 1, 1LL << 40, "N", "cache plan: longest sequence in tokens"),
        CLI_I64_OPT("max-seqs", 0, &max_seqs, 1, 1 << 20, "N", "cache plan: sequences served at once"),
        CLI_I64_OPT("c-max", 0, &c_max, 1, 1 << 30, "N", "cache plan: most tokens per model call"),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {"info", "(--model DIR | --config FILE) [--max-context N] [options]",
                         "Layer kinds, parameter counts, bytes by dtype, per-token cache bytes, the\n"
                         "cache pool geometry and whether it all fits in this machine's memory. Only\n"
                         "headers are read unless --check; --config needs no weights at all.",
                         {opts}};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc >= 0) return prc;
    if (!dir == !config) {
        fprintf(stderr, "dsv4 info: give one of --model DIR and --config FILE\n");
        cli_short_usage(&cmd, stderr);
        return 2;
    }
    dsv4_err err = {0};
    dsv4_engine_opts eo = {.max_context = max_context, .max_seqs = (int)max_seqs, .c_max = (int)c_max};
    dsv4_mem_fit fit;
    if (config) {
        dsv4_config cfg;
        dsv4_param_counts pc;
        dsv4_dtype_bytes db;
        uint64_t routed;
        if (dsv4_config_load(config, &cfg, &err) || dsv4_count_params(&cfg, &pc, &err) ||
            dsv4_count_release_bytes(&cfg, &db, &routed, &err) ||
            dsv4_mem_fit_config(config, &eo, &fit, &err)) {
            fprintf(stderr, "dsv4 info: %s\n", err.msg);
            return 1;
        }
        plan_pair pp;
        make_plans(&cfg, max_context, max_seqs, c_max, &pp);
        if (json) return print_json(config, &cfg, "", &pc, &db, &pp, &fit, NULL);
        print_text(config, &cfg, "", &pc, &db, &pp);
        print_fit(&fit, max_context, max_seqs);
        return 0;
    }
    struct dsv4_model *m = NULL;
    if (dsv4_model_load_ex(dir, check ? 0 : DSV4_LOAD_HEADERS_ONLY, &m, &err)) {
        fprintf(stderr, "dsv4 info: %s\n", err.msg);
        return 1;
    }
    dsv4_param_counts pc;
    if (dsv4_count_params(&m->cfg, &pc, &err)) {
        fprintf(stderr, "dsv4 info: %s\n", err.msg);
        dsv4_model_close(m);
        return 1;
    }
    dsv4_dtype_bytes db;
    dsv4_count_bytes(m->files, &db);
    plan_pair pp;
    make_plans(&m->cfg, max_context, max_seqs, c_max, &pp);
    int rc = 0;
    if (dsv4_mem_fit_model(m, &eo, &fit, &err)) {
        fprintf(stderr, "dsv4 info: %s\n", err.msg);
        dsv4_model_close(m);
        return 1;
    }
    dsv4_fp4_census fc;
    dsv4_model_fp4_census(m, &fc);
    if (json) rc = print_json(dir, &m->cfg, m->warnings, &pc, &db, &pp, &fit, &fc);
    else {
        print_text(dir, &m->cfg, m->warnings, &pc, &db, &pp);
        if (fc.fp4 && fc.lanes_ok == fc.fp4)
            printf("fp4 layout: %lld packed FP4 matrices, all can take --weights-memory lanes\n", (long long)fc.fp4);
        else if (fc.fp4)
            printf("fp4 layout: %lld packed FP4 matrices, %lld can take --weights-memory lanes; %lld stay natural "
                   "(width not a multiple of 128; first %s)\n", (long long)fc.fp4, (long long)fc.lanes_ok,
                   (long long)(fc.fp4 - fc.lanes_ok), fc.first_natural);
        print_fit(&fit, max_context, max_seqs);
    }
    if (check) {
        dsv4_scan_report sr;
        if (dsv4_model_scan(m, &sr, &err)) {
            fprintf(stderr, "dsv4 info: %s\n", err.msg);
            rc = 1;
        } else if (sr.bad_values) {
            fprintf(stderr, "dsv4 info: check failed: %lld of %lld weight values in %d matrices are NaN or "
                    "Inf: %s\n", (long long)sr.bad_values, (long long)sr.values, sr.bad_tensors, sr.first);
            rc = 1;
        } else {
            fprintf(stderr, "dsv4 info: check passed: all %lld weight values are finite\n", (long long)sr.values);
        }
    }
    dsv4_model_close(m);
    return rc;
}
