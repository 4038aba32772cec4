/* cmd_run.c — `dsv4 run`: token ids through the model with teacher forcing, dumping
 * logits and hidden states in the golden layout (a contract used by automated checks).
 *
 *   dsv4 run --model DIR (--tokens ID,ID,... | --tokens-file FILE) [--prefill P]
 *            [--chunk C] [--mtp] --dump OUTDIR [--threads T] [--dump-layers]
 *            [--parallel cp|ep|cp+ep [--ep-wave N]] [--w8a8 | --w8a8-all]
 *            [--fidelity official|none|F1,F3,...]
 *
 * With --parallel under mpirun every rank runs this same program on the same inputs
 * (SPMD): rank 0 is the home rank that holds the caches and writes the dump; the others
 * take part in the collectives (expert-parallel MoE, context-parallel prefill, the
 * vocabulary-sharded LM head). A failure on any rank ends the whole job (MPI_Abort) with
 * the rank's message, so no rank is left waiting. One rank = the single-process run.
 *
 * The first P tokens of each sequence are prefilled (in chunks of C when given), the rest
 * go through single-token decode steps; with several sequences (--tokens-file, one per
 * line) prefills run batched, then shared decode steps from which finished sequences drop
 * out. MTP row t (streams h_t, token t+1) runs as soon as both exist.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_opts.h"
#include "cli_output.h"
#include "cli_util.h"
#include "commands.h"
#include "dsv4.h"

typedef struct run_seq {
    int32_t *tokens;      /* (N) */
    int N, P;
    int handle;
    int64_t done;         /* main positions processed */
    int64_t mtp_done;     /* MTP positions processed */
    float *pre_hidden;    /* (P, D) */
    float *pre_logits;    /* (P, V) */
    float *dec_hidden;    /* (N-P, D) */
    float *dec_logits;    /* (N-P, V) */
    float *streams;       /* (N, hc, D) last-block streams, with --mtp */
    float *mtp_logits;    /* (N-1, V) */
    float *layer_streams; /* (N, L, hc, D) after each block, with --dump-layers */
    float *layer_attn;    /* (N, L, hc, D) after each attention sub-block */
    int32_t *routing;     /* (L, N, K) routed experts in k order, -1 unknown; --dump-choices */
    cJSON *csa;           /* {"layer": {"pos": [entries]}} CSA selections; --dump-choices */
} run_seq;

typedef struct run_ctx {
    run_seq *seqs;
    int n_seqs;
    int L, hc, D, K;
    int sharded_head;     /* logits through the vocabulary-sharded head (collective) */
} run_ctx;

/* Choice hook: routing and CSA selections of main layers, for --dump-choices. */
static void trace_choices(void *user, int seq, int64_t pos, int layer, int kind, const int *ids,
                          int n) {
    run_ctx *rc = user;
    if (layer >= rc->L) return; /* the MTP block */
    for (int i = 0; i < rc->n_seqs; i++) {
        run_seq *s = &rc->seqs[i];
        if (s->handle != seq || pos >= s->N) continue;
        if (kind == DSV4_CHOICE_EXPERTS) {
            for (int k = 0; k < n && k < rc->K; k++)
                s->routing[((size_t)layer * s->N + (size_t)pos) * rc->K + k] = ids[k];
            continue;
        }
        char lk[16], pk[24];
        snprintf(lk, sizeof lk, "%d", layer);
        snprintf(pk, sizeof pk, "%lld", (long long)pos);
        cJSON *lo = cJSON_GetObjectItem(s->csa, lk);
        if (!lo) lo = cJSON_AddObjectToObject(s->csa, lk);
        cJSON *arr = lo ? cJSON_AddArrayToObject(lo, pk) : NULL;
        for (int k = 0; arr && k < n; k++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[k]));
    }
}

/* Trace hook: copies the streams of main layers into the per-sequence dump arrays. */
static void trace_layers(void *user, int seq, int64_t pos, int layer, int kind, const float *streams) {
    run_ctx *rc = user;
    if (layer >= rc->L) return; /* the MTP block */
    for (int i = 0; i < rc->n_seqs; i++) {
        run_seq *s = &rc->seqs[i];
        if (s->handle != seq || pos >= s->N) continue;
        float *dst = kind ? s->layer_streams : s->layer_attn;
        size_t per = (size_t)rc->hc * rc->D;
        memcpy(dst + ((size_t)pos * rc->L + layer) * per, streams, per * sizeof(float));
    }
}

static cJSON *shape_json(int ndim, const long long *dims) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < ndim; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)dims[i]));
    return a;
}

/* Writes one array (in the dump's temporary directory) and records it in the manifest's
 * "files"; floats must be finite (checked before, see nonfinite). */
static int dump_array(const char *dir, cJSON *files, const char *name, const float *data, int ndim,
                      const long long *dims) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)dims[i];
    char fname[256], path[4600], why[600];
    snprintf(fname, sizeof fname, "%s.bin", name);
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    /* the engine runs on little-endian hosts only, so values are written as they are */
    if (cli_write_whole(path, data, n * sizeof(float), why, sizeof why)) {
        fprintf(stderr, "dsv4 run: %s\n", why);
        return -1;
    }
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "file", fname);
    cJSON_AddItemToObject(f, "shape", shape_json(ndim, dims));
    cJSON_AddStringToObject(f, "dtype", "f32");
    cJSON_AddItemToObject(files, name, f);
    return 0;
}

/* NaN or Inf in an output array: reported (name, row, value) instead of dumped. */
static int nonfinite(const char *seq_dir, const char *name, const float *data, long long rows, long long cols) {
    for (long long i = 0; i < rows * cols; i++)
        if (!(data[i] - data[i] == 0)) { /* NaN or Inf: x - x is NaN */
            fprintf(stderr, "dsv4 run: %s of %s is not finite (%g at row %lld, column %lld): the model "
                    "produced NaN/Inf (`dsv4 info --check` scans the weights); no dump written\n",
                    name, seq_dir, (double)data[i], i / cols, i % cols);
            return 1;
        }
    return 0;
}

/* Every output array of s is finite. */
static int check_outputs(const char *dir, const run_seq *s, int V, int D, int hc, int L, int mtp, int layers) {
    const long long P = s->P, K = s->N - s->P, per = (long long)L * hc * D;
    int bad = nonfinite(dir, "prefill_logits", s->pre_logits, P, V) ||
              nonfinite(dir, "prefill_hidden", s->pre_hidden, P, D);
    if (!bad && K > 0)
        bad = nonfinite(dir, "decode_logits", s->dec_logits, K, V) || nonfinite(dir, "decode_hidden", s->dec_hidden, K, D);
    if (!bad && layers)
        bad = nonfinite(dir, "layer_streams", s->layer_streams, s->N, per) ||
              nonfinite(dir, "layer_attn_streams", s->layer_attn, s->N, per);
    if (!bad && mtp && s->N >= 2) bad = nonfinite(dir, "mtp_logits", s->mtp_logits, s->N - 1, V);
    return bad;
}

/* The dump of one sequence: built in a temporary directory next to `final` (every file
 * written and fsync'd, the manifest last), then swapped in whole, replacing an earlier
 * dump, so a failure (disk full) leaves the earlier dump as it was and no partial one. */
static int dump_seq(const char *final, const run_seq *s, int V, int D, int hc, int L, int n_exp,
                    int mtp, int layers) {
    if (check_outputs(final, s, V, D, hc, L, mtp, layers)) return -1;
    char dir[4200], why[600];
    if (cli_dir_begin(final, dir, sizeof dir, why, sizeof why)) {
        fprintf(stderr, "dsv4 run: %s\n", why);
        return -1;
    }
    cJSON *man = cJSON_CreateObject();
    cJSON *toks = cJSON_CreateArray();
    for (int i = 0; i < s->N; i++) cJSON_AddItemToArray(toks, cJSON_CreateNumber(s->tokens[i]));
    cJSON_AddItemToObject(man, "tokens", toks);
    cJSON_AddNumberToObject(man, "prefill_len", s->P);
    cJSON *files = cJSON_CreateObject();
    cJSON_AddItemToObject(man, "files", files);
    const long long P = s->P, K = s->N - s->P;
    const size_t per = (size_t)L * hc * D;
    int bad = 0;
    bad |= dump_array(dir, files, "prefill_logits", s->pre_logits, 2, (long long[]){P, V});
    bad |= dump_array(dir, files, "prefill_hidden", s->pre_hidden, 2, (long long[]){P, D});
    if (K > 0) {
        bad |= dump_array(dir, files, "decode_logits", s->dec_logits, 2, (long long[]){K, V});
        bad |= dump_array(dir, files, "decode_hidden", s->dec_hidden, 2, (long long[]){K, D});
    }
    if (layers) {
        bad |= dump_array(dir, files, "prefill_layer_streams", s->layer_streams, 4,
                          (long long[]){P, L, hc, D});
        bad |= dump_array(dir, files, "prefill_layer_attn_streams", s->layer_attn, 4,
                          (long long[]){P, L, hc, D});
        if (K > 0) {
            bad |= dump_array(dir, files, "decode_layer_streams", s->layer_streams + P * per, 4,
                              (long long[]){K, L, hc, D});
            bad |= dump_array(dir, files, "decode_layer_attn_streams", s->layer_attn + P * per, 4,
                              (long long[]){K, L, hc, D});
        }
    }
    if (mtp && s->N >= 2)
        bad |= dump_array(dir, files, "mtp_logits", s->mtp_logits, 2, (long long[]){s->N - 1, V});
    if (s->routing) {
        /* int32 little-endian like the floats: same byte size, written as they are */
        const long long dims[3] = {L, s->N, n_exp};
        bad |= dump_array(dir, files, "routing_experts", (const float *)s->routing, 3, dims);
        cJSON_SetValuestring(cJSON_GetObjectItem(cJSON_GetObjectItem(files, "routing_experts"), "dtype"), "i32");
        cJSON_AddItemReferenceToObject(man, "csa_selected_entries", s->csa);
    }
    char *text = cJSON_Print(man);
    cJSON_Delete(man);
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (!bad && !text) {
        fprintf(stderr, "dsv4 run: out of memory for the manifest\n");
        bad = 1;
    }
    if (!bad && cli_write_whole(path, text, strlen(text), why, sizeof why)) {
        fprintf(stderr, "dsv4 run: %s\n", why);
        bad = 1;
    }
    free(text);
    if (!bad && cli_dir_commit(dir, final, why, sizeof why)) {
        fprintf(stderr, "dsv4 run: %s\n", why);
        bad = 1;
    }
    if (bad) {
        cli_dir_abandon(dir);
        fprintf(stderr, "dsv4 run: no dump written to %s (an earlier one there is unchanged)\n", final);
    }
    return bad ? -1 : 0;
}

/* Reads one sequence per non-empty line. Returns the count, -1 on malformed content, or
 * -2 when the file cannot be read (missing, too large): exit status 2 and 1, as the other
 * commands that read an input whole. */
static int read_tokens_file(const char *path, run_seq **out) {
    size_t len;
    char why[512];
    char *text = cli_read_input(path, CLI_IDS_LIMIT, &len, why, sizeof why);
    if (!text) {
        fprintf(stderr, "dsv4 run: %s\n", why);
        return -2;
    }
    int n = 0, cap = 4;
    run_seq *seqs = calloc((size_t)cap, sizeof *seqs);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line && seqs; line = strtok_r(NULL, "\n", &save)) {
        char err[128];
        int32_t *ids;
        int cnt = cli_parse_ids(line, &ids, err, sizeof err);
        if (cnt < 0) {
            fprintf(stderr, "dsv4 run: %s line %d: %s\n", path, n + 1, err);
            for (int i = 0; i < n; i++) free(seqs[i].tokens);
            free(seqs); free(text);
            return -1;
        }
        if (cnt == 0) { free(ids); continue; }
        if (n == cap) {
            run_seq *g = realloc(seqs, (size_t)(cap *= 2) * sizeof *seqs);
            if (!g) { free(ids); break; }
            seqs = g;
        }
        memset(&seqs[n], 0, sizeof seqs[n]);
        seqs[n].tokens = ids;
        seqs[n].N = cnt;
        n++;
    }
    free(text);
    if (!seqs) return -1;
    *out = seqs;
    return n;
}

static int head_logits(dsv4_engine *eng, const run_ctx *rc, const float *hid, int n, float *logits,
                       dsv4_err *err) {
    return rc->sharded_head ? dsv4_lm_head_dist(eng, hid, n, logits, err)
                            : dsv4_lm_head(eng, hid, n, logits, err);
}

/* "cp", "ep", "cp+ep" / "ep+cp" -> DSV4_PAR_* flags, or -1. */
static int parse_parallel(const char *s) {
    if (!strcmp(s, "cp")) return DSV4_PAR_CP;
    if (!strcmp(s, "ep")) return DSV4_PAR_EP;
    if (!strcmp(s, "cp+ep") || !strcmp(s, "ep+cp")) return DSV4_PAR_CP | DSV4_PAR_EP;
    return -1;
}

/* Runs MTP rows [mtp_done, min(done, N-1)) of every sequence that has any ready. */
static int run_mtp(dsv4_engine *eng, run_ctx *rc, int V, dsv4_err *err) {
    const size_t per = (size_t)rc->hc * rc->D;
    for (int i = 0; i < rc->n_seqs; i++) {
        run_seq *s = &rc->seqs[i];
        int64_t end = s->done < s->N - 1 ? s->done : s->N - 1;
        if (s->mtp_done >= end) continue;
        int n = (int)(end - s->mtp_done);
        float *hid = malloc((size_t)n * rc->D * sizeof(float));
        if (!hid) return -1;
        dsv4_mtp_span sp = {s->handle, s->mtp_done, n, s->tokens + s->mtp_done + 1,
                            s->streams + (size_t)s->mtp_done * per};
        int r = dsv4_mtp_forward(eng, &sp, 1, hid, err);
        if (!r) r = head_logits(eng, rc, hid, n, s->mtp_logits + (size_t)s->mtp_done * V, err);
        free(hid);
        if (r) return r;
        s->mtp_done = end;
    }
    return 0;
}

static int parse_parallel_opt(const char *v, void *dst, char *msg, size_t n) {
    if ((*(int *)dst = parse_parallel(v)) >= 0) return 0;
    snprintf(msg, n, "must be cp, ep or cp+ep, not '%s'", v);
    return -1;
}

int cmd_run(int argc, char **argv) {
    const char *model_dir = NULL, *tokens_arg = NULL, *tokens_file = NULL, *dump = NULL;
    int64_t prefill = -1, peer_timeout = -1;
    int chunk = 0, threads = 0, ep_wave = 0, cp_granule = 0;
    int mtp = 0, layers = 0, parallel = 0, w8a8 = 0, choices = 0, verify_weights = 0, warmup = 0, pin = 0;
    int pin_threads = 0, kv_dtype = 0, numa = 0, fp4_layout = 0;
    unsigned fidelity = 0;
    const cli_opt opts[] = {
        CLI_STR_OPT("model", 'm', &model_dir, "DIR", "model directory"),
        CLI_STR_OPT("tokens", 0, &tokens_arg, "IDS", "one sequence of token ids, e.g. 0,5,17"),
        CLI_FILE_OPT("tokens-file", 0, &tokens_file, "FILE", "several sequences, one line of ids each"),
        CLI_STR_OPT("dump", 'o', &dump, "DIR", "output directory (one seqN/ per sequence with --tokens-file)"),
        CLI_I64_OPT("prefill", 0, &prefill, 1, 1LL << 40, "P", "prefill the first P tokens, decode the rest one by one",
                    .def = "every token"),
        CLI_INT_OPT("chunk", 0, &chunk, 0, 1 << 30, "C", "prefill in chunks of C tokens; 0 = all at once"),
        CLI_FLAG_OPT("mtp", 0, &mtp, 1, "also run the multi-token-prediction block (mtp_logits)"),
        CLI_INT_OPT("threads", 't', &threads, 0, 1024, "N", "worker threads (per rank under --parallel: give each rank its share)",
                    .def = "the cores this process may use"),
        CLI_FN_OPT("numa", 0, &numa, cli_parse_numa, "auto|none|interleave", "auto", "NUMA placement of the weights: interleave spreads their pages over the memory nodes; auto = interleave when there are several, none = the OS default"),
        CLI_FN_OPT("kv-dtype", 0, &kv_dtype, cli_parse_kv_dtype, "f32|bf16|fp8[+fp4]", "bf16", "KV cache storage: f32 (the reference), bf16 (half the bytes) or fp8 (FP8-split rows, BF16 indexer keys); +fp4: FP4 indexer keys (with --fidelity F3 only)"),
        CLI_FP4_LAYOUT_OPT(&fp4_layout),
        CLI_FLAG_OPT("pin-threads", 0, &pin_threads, 1, "pin worker thread i to the i-th CPU of the affinity mask (CPU 0 stays with the calling thread)"),
        CLI_FLAG_OPT("dump-layers", 0, &layers, 1, "also the streams after every layer"),
        CLI_FLAG_OPT("dump-choices", 0, &choices, 1, "also routing_experts.bin (i32 [layers, N, K]) and the "
                     "CSA selections (manifest csa_selected_entries), as in the golden runs (single process only)"),
        CLI_FN_OPT("parallel", 0, &parallel, parse_parallel_opt, "MODE", "off", "under mpirun: context-parallel prefill (cp), "
                   "expert-parallel MoE (ep) or both (cp+ep) over all ranks; rank 0 writes the dump"),
        CLI_INT_OPT("ep-wave", 0, &ep_wave, 0, 1 << 20, "N", "expert parallel: rows per rank per exchange; 0 = min(256, rows of the largest call)"),
        CLI_INT_OPT("cp-granule", 0, &cp_granule, 0, 1 << 20, "G", "context parallel: segment granule in positions; 0 = a multiple of every ratio >= window - 1 (128 for Flash)"),
        CLI_I64_OPT("peer-timeout", 0, &peer_timeout, 0, 1 << 24, "SEC", "with --parallel: a collective inside a call that a peer does not join within SEC seconds ends the job naming that rank; 0 = wait forever", .def = "300"),
        CLI_FLAG_OPT("verify-weights", 0, &verify_weights, 1, "with --parallel: ranks compare a hash of every weight byte at start (reads the whole checkpoint) instead of the sampled fingerprint; config, options and kernel level are always compared"),
        CLI_FLAG_OPT("warmup", 0, &warmup, 1, "read the weights into memory first, with progress (under --parallel ep each rank only its own experts)"),
        CLI_FLAG_OPT("mlock", 0, &pin, 1, "pin the weights in memory (needs `ulimit -l` as large as the weights)"),
        CLI_FLAG_OPT("w8a8", 0, &w8a8, 1, "faster, approximate: INT8 weights and activations for the large projections and the experts"),
        CLI_FLAG_OPT("w8a8-all", 0, &w8a8, 2, "the same for every projection"),
        CLI_FN_OPT("fidelity", 0, &fidelity, cli_parse_fidelity, "SET", "none", "simulate the official model's FP8/BF16 roundings: "
                   "official, none, or a comma list of F1..F5"),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {"run", "--model DIR (--tokens IDS | --tokens-file F) --dump DIR [opts]",
                         "Runs token ids through the model with teacher forcing and writes logits and\n"
                         "hidden states (manifest.json + f32 arrays) for automated checks.", {opts}};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc >= 0) return prc;
    if (!model_dir || !dump || (!tokens_arg == !tokens_file)) {
        fprintf(stderr, "dsv4 run: need --model, --dump and exactly one of --tokens / --tokens-file\n");
        cli_short_usage(&cmd, stderr);
        return 2;
    }
    cli_warn_threads("run", threads);
    if (choices && parallel) {
        /* the routing and CSA choices are made on the ranks that own the experts and rows;
         * rank 0 alone would dump its own partial view as if it were the whole */
        fprintf(stderr, "dsv4 run: --dump-choices is for a single process; run without --parallel to dump "
                        "routing and CSA selections\n");
        return 2;
    }
    if (parallel && !dsv4_dist_available()) {
        fprintf(stderr, "dsv4 run: --parallel needs a build with MPI (cmake -DDSV4_MPI=ON with "
                        "Open MPI installed); this one has none\n");
        return 2;
    }
    if (cp_granule && !(parallel & DSV4_PAR_CP)) {
        fprintf(stderr, "dsv4 run: --cp-granule needs --parallel cp or cp+ep\n");
        return 2;
    }
    if ((peer_timeout >= 0 || verify_weights) && !parallel) {
        fprintf(stderr, "dsv4 run: --peer-timeout and --verify-weights need --parallel\n");
        return 2;
    }
    if (ep_wave && !(parallel & DSV4_PAR_EP)) {
        fprintf(stderr, "dsv4 run: --ep-wave needs --parallel ep or cp+ep\n");
        return 2;
    }

    /* From here on a failure on one rank must end all of them (see `out`). */
    dsv4_dist *dist = NULL;
    int rank = 0, n_ranks = 1;
    if (parallel) {
        dsv4_err derr = {0};
        if (dsv4_dist_init(NULL, NULL, &dist, &derr)) {
            fprintf(stderr, "dsv4 run: %s\n", derr.msg);
            return 1;
        }
        rank = dsv4_dist_rank(dist);
        n_ranks = dsv4_dist_size(dist);
        if (peer_timeout >= 0 && dsv4_dist_set_timeout(dist, (double)peer_timeout, &derr)) {
            fprintf(stderr, "dsv4 run: %s\n", derr.msg);
            dsv4_dist_finalize(dist);
            return 2;
        }
    }
    char who[32] = "";
    if (n_ranks > 1) snprintf(who, sizeof who, "rank %d: ", rank);

    int status = 1;
    dsv4_err err = {0};
    dsv4_model *model = NULL;
    dsv4_engine *eng = NULL;
    run_ctx rc = {0};
    rc.sharded_head = n_ranks > 1;
    if (tokens_arg) {
        char perr[128];
        rc.seqs = calloc(1, sizeof *rc.seqs);
        int n = rc.seqs ? cli_parse_ids(tokens_arg, &rc.seqs[0].tokens, perr, sizeof perr) : -1;
        if (n <= 0) {
            fprintf(stderr, "dsv4 run: %s--tokens: %s\n", who, n == 0 ? "no token ids" : perr);
            free(rc.seqs);
            rc.seqs = NULL;
            status = n == -2 ? 1 : 2;
            goto out;
        }
        rc.seqs[0].N = n;
        rc.n_seqs = 1;
    } else {
        int n = read_tokens_file(tokens_file, &rc.seqs);
        if (n <= 0) {
            if (n == 0) { fprintf(stderr, "dsv4 run: %s%s holds no sequences\n", who, tokens_file); free(rc.seqs); }
            rc.seqs = NULL;
            status = n == -2 ? 1 : 2;
            goto out;
        }
        rc.n_seqs = n;
    }

    if (dsv4_model_open(model_dir, &model, &err)) {
        fprintf(stderr, "dsv4 run: %s%s\n", who, err.msg);
        goto out;
    }
    if (*dsv4_model_warnings(model) && rank == 0)
        fprintf(stderr, "dsv4 run: warning: %s\n", dsv4_model_warnings(model));
    if (cli_prepare_weights("run", model, warmup, pin, (int)threads,
                            parallel & DSV4_PAR_EP ? rank : 0, parallel & DSV4_PAR_EP ? n_ranks : 1))
        goto out;
    dsv4_model_info info = dsv4_model_get_info(model);
    const int V = info.vocab_size, D = info.hidden_size, hc = info.hc_mult, L = info.n_layers;
    rc.L = L; rc.hc = hc; rc.D = D; rc.K = info.n_experts_per_tok;
    if (mtp && info.n_mtp == 0) {
        fprintf(stderr, "dsv4 run: %s--mtp: the model has no MTP block\n", who);
        status = 2;
        goto out;
    }
    /* rows of one forward call: every sequence's prefill chunk at once, or one decode row
     * each (sized by what is used: the product of the two grew with the square of the
     * number of sequences) */
    int max_n = 0, max_c = 1;
    size_t max_rows = (size_t)rc.n_seqs;
    size_t chunk_rows = 0;
    for (int i = 0; i < rc.n_seqs; i++) {
        run_seq *s = &rc.seqs[i];
        s->P = prefill < 0 ? s->N : (int)prefill;
        if (prefill > s->N) {
            fprintf(stderr, "dsv4 run: %s--prefill %lld exceeds the %d tokens of sequence %d\n",
                    who, (long long)prefill, s->N, i);
            status = 2;
            goto out;
        }
        for (int j = 0; j < s->N; j++)
            if (s->tokens[j] >= V) {
                fprintf(stderr, "dsv4 run: %ssequence %d: token id %d at index %d is >= vocab size %d\n",
                        who, i, s->tokens[j], j, V);
                status = 2;
                goto out;
            }
        if (s->N > max_n) max_n = s->N;
        int c = chunk ? (int)(chunk < s->P ? chunk : s->P) : s->P;
        if (c > max_c) max_c = c;
        chunk_rows += (size_t)c;
        size_t K = (size_t)(s->N - s->P);
        s->pre_hidden = malloc((size_t)s->P * D * sizeof(float));
        s->pre_logits = malloc((size_t)s->P * V * sizeof(float));
        s->dec_hidden = malloc((K ? K : 1) * D * sizeof(float));
        s->dec_logits = malloc((K ? K : 1) * V * sizeof(float));
        if (mtp) {
            s->streams = malloc((size_t)s->N * hc * D * sizeof(float));
            s->mtp_logits = malloc((size_t)(s->N > 1 ? s->N - 1 : 1) * V * sizeof(float));
        }
        if (layers) {
            s->layer_streams = calloc((size_t)s->N * L * hc * D, sizeof(float));
            s->layer_attn = calloc((size_t)s->N * L * hc * D, sizeof(float));
        }
        if (choices) {
            s->routing = malloc((size_t)L * s->N * rc.K * sizeof(int32_t));
            s->csa = cJSON_CreateObject();
            if (!s->routing || !s->csa) { fprintf(stderr, "dsv4 run: out of memory\n"); goto out; }
            for (size_t k = 0; k < (size_t)L * s->N * rc.K; k++) s->routing[k] = -1;
        }
        if (!s->pre_hidden || !s->pre_logits || !s->dec_hidden || !s->dec_logits ||
            (mtp && (!s->streams || !s->mtp_logits)) || (layers && (!s->layer_streams || !s->layer_attn))) {
            fprintf(stderr, "dsv4 run: %sout of memory for the dump buffers\n", who);
            goto out;
        }
    }

    dsv4_engine_opts eo = {0};
    eo.max_context = max_n;
    eo.max_seqs = rc.n_seqs;
    eo.c_max = max_c;
    eo.mtp = mtp;
    eo.threads = (int)threads;
    eo.pin_threads = pin_threads;
    eo.kv_dtype = kv_dtype;
    eo.numa = numa;
    eo.fp4_layout = fp4_layout;
    eo.dist = dist;
    eo.parallel = parallel;
    eo.ep_wave = (int)ep_wave;
    eo.cp_granule = (int)cp_granule;
    eo.w8a8 = w8a8;
    eo.fidelity = fidelity;
    eo.verify_weights = verify_weights;
    cli_progress prep;
    cli_progress_start(&prep, "preparing the INT8 weights");
    if (w8a8 && rank == 0) eo.progress = cli_progress_show, eo.progress_user = &prep;
    if (dsv4_engine_create(model, &eo, &eng, &err)) {
        fprintf(stderr, "dsv4 run: %s%s\n", who, err.msg);
        goto out;
    }
    if (layers) dsv4_engine_set_trace(eng, trace_layers, &rc);
    if (choices) dsv4_engine_set_choice_trace(eng, trace_choices, &rc);
    for (int i = 0; i < rc.n_seqs; i++)
        if (dsv4_seq_create(eng, &rc.seqs[i].handle, &err)) {
            fprintf(stderr, "dsv4 run: %s%s\n", who, err.msg);
            goto out;
        }

    dsv4_span *spans = calloc((size_t)rc.n_seqs, sizeof *spans);
    run_seq **owner = calloc((size_t)rc.n_seqs, sizeof *owner);
    if (chunk_rows > max_rows) max_rows = chunk_rows;
    float *hid = malloc(max_rows * D * sizeof(float));          // (rows, D)
    float *str = mtp ? malloc(max_rows * hc * D * sizeof(float)) : NULL; // (rows, hc, D)
    if (!spans || !owner || !hid || (mtp && !str)) {
        fprintf(stderr, "dsv4 run: %sout of memory\n", who);
        free(spans); free(owner); free(hid); free(str);
        goto out;
    }
    const size_t per = (size_t)hc * D;
    for (;;) {
        /* one call: the next prefill chunk of every sequence still prefilling, else one
         * decode row of every unfinished sequence */
        int n = 0, prefilling = 0;
        for (int i = 0; i < rc.n_seqs; i++) prefilling |= rc.seqs[i].done < rc.seqs[i].P;
        for (int i = 0; i < rc.n_seqs; i++) {
            run_seq *s = &rc.seqs[i];
            int64_t limit = prefilling ? s->P : s->N;
            if (s->done >= limit) continue;
            int cnt = prefilling ? (int)(chunk ? (chunk < limit - s->done ? chunk : limit - s->done)
                                                : limit - s->done)
                                 : 1;
            spans[n] = (dsv4_span){.seq = s->handle, .start = s->done, .n_tokens = cnt,
                                   .tokens = s->tokens + s->done, .n_hidden = cnt,
                                   .n_streams = mtp ? cnt : 0};
            owner[n++] = s;
        }
        if (!n) break;
        if (dsv4_forward(eng, spans, n, hid, str, &err)) {
            fprintf(stderr, "dsv4 run: %s%s\n", who, err.msg);
            break;
        }
        int rows = 0;
        for (int k = 0; k < n; k++) {
            run_seq *s = owner[k];
            int cnt = spans[k].n_tokens;
            /* a span is all prefill or one decode row, so its rows are contiguous */
            const int64_t t0 = s->done;
            float *dh = t0 < s->P ? s->pre_hidden + (size_t)t0 * D : s->dec_hidden + (size_t)(t0 - s->P) * D;
            float *dl = t0 < s->P ? s->pre_logits + (size_t)t0 * V : s->dec_logits + (size_t)(t0 - s->P) * V;
            memcpy(dh, hid + (size_t)rows * D, (size_t)cnt * D * sizeof(float));
            if (head_logits(eng, &rc, dh, cnt, dl, &err)) break;
            if (mtp) memcpy(s->streams + (size_t)t0 * per, str + (size_t)rows * per, (size_t)cnt * per * sizeof(float));
            rows += cnt;
            s->done += cnt;
        }
        if (err.code) { fprintf(stderr, "dsv4 run: %s%s\n", who, err.msg); break; }
        if (mtp && run_mtp(eng, &rc, V, &err)) {
            fprintf(stderr, "dsv4 run: %sMTP: %s\n", who, err.msg);
            break;
        }
    }
    free(spans); free(owner); free(hid); free(str);
    int finished = 1;
    for (int i = 0; i < rc.n_seqs; i++) finished &= rc.seqs[i].done == rc.seqs[i].N;
    if (!finished) goto out;

    status = 0;
    for (int i = 0; i < rc.n_seqs && !status && rank == 0; i++) {
        char dir[4096];
        if (tokens_arg) snprintf(dir, sizeof dir, "%s", dump);
        else snprintf(dir, sizeof dir, "%s/seq%d", dump, i);
        if (dump_seq(dir, &rc.seqs[i], V, D, hc, L, rc.K, mtp, layers)) status = 1;
    }
out:
    dsv4_engine_free(eng);
    dsv4_model_close(model);
    for (int i = 0; i < rc.n_seqs; i++) {
        run_seq *s = &rc.seqs[i];
        free(s->tokens); free(s->pre_hidden); free(s->pre_logits); free(s->dec_hidden);
        free(s->dec_logits); free(s->streams); free(s->mtp_logits); free(s->layer_streams);
        free(s->layer_attn);
        free(s->routing);
        cJSON_Delete(s->csa);
    }
    free(rc.seqs);
    if (status && n_ranks > 1) {
        fprintf(stderr, "dsv4 run: rank %d failed; ending all %d ranks\n", rank, n_ranks);
        dsv4_dist_abort(dist, status);
    }
    dsv4_dist_finalize(dist);
    return status;
}
