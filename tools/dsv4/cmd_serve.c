/* cmd_serve.c — `dsv4 serve`: parses options, opens and warms the model, and runs the HTTP
 * server (dsv4_server.h) until SIGINT or SIGTERM.
 *
 *   dsv4 serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--max-seqs N]
 *              [--max-context N] [--step-tokens N] [--threads T] [--cache-bytes N] ...
 *   mpirun -np K dsv4 serve --model DIR --parallel ep ...
 *
 * The listener is up first, answering /health with 503 "loading" while the weights are
 * read. Under MPI rank 0 serves; the other ranks follow its steps (dsv4_server_follow; with
 * --attention dp each runs the requests rank 0 places on it) and
 * exit when it stops. SIGINT/SIGTERM matter on rank 0 only: the others ignore them and
 * wait for its stop message.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_opts.h"
#include "cli_util.h"
#include "commands.h"
#include "dsv4_server.h"

/* A byte count: a whole number with an optional K/M/G suffix (powers of 1024). */
static int parse_bytes(const char *s, unsigned long long *out) {
    char num[32];
    size_t n = strlen(s);
    unsigned shift = 0;
    if (n && strchr("KkMmGg", s[n - 1])) {
        shift = strchr("Kk", s[n - 1]) ? 10 : strchr("Mm", s[n - 1]) ? 20 : 30;
        n--;
    }
    int64_t v;
    if (n == 0 || n >= sizeof num) return -1;
    memcpy(num, s, n);
    num[n] = 0;
    if (cli_parse_i64(num, 0, INT64_MAX >> shift, &v)) return -1;
    *out = (unsigned long long)v << shift;
    return 0;
}

static int cache_bytes_opt(const char *v, void *dst, char *msg, size_t n) {
    unsigned long long b;
    if (!parse_bytes(v, &b)) { *(uint64_t *)dst = b; return 0; }
    snprintf(msg, n, "needs a byte count such as 8G, not '%s'", v);
    return -1;
}

static int body_bytes_opt(const char *v, void *dst, char *msg, size_t n) {
    unsigned long long b;
    if (!parse_bytes(v, &b) && b >= 1024) { *(size_t *)dst = (size_t)b; return 0; }
    snprintf(msg, n, "needs a byte count of at least 1K, such as 8M, not '%s'", v);
    return -1;
}

/* on = 1, off = -1 (0: not given) */
static int on_off_opt(const char *v, void *dst, char *msg, size_t n) {
    if (!strcmp(v, "on")) *(int *)dst = 1;
    else if (!strcmp(v, "off")) *(int *)dst = -1;
    else { snprintf(msg, n, "needs on or off, not '%s'", v); return -1; }
    return 0;
}

static int policy_opt(const char *v, void *dst, char *msg, size_t n) {
    if (!strcmp(v, "priority")) *(int *)dst = 1;
    else if (!strcmp(v, "fcfs")) *(int *)dst = 0;
    else { snprintf(msg, n, "needs fcfs or priority, not '%s'", v); return -1; }
    return 0;
}

/* vLLM's names: auto (the model's generation_config.json) and vllm (the server's own
 * defaults), which is ours "none" */
static int gen_config_opt(const char *v, void *dst, char *msg, size_t n) {
    if (!strcmp(v, "auto")) *(int *)dst = 0;
    else if (!strcmp(v, "none") || !strcmp(v, "vllm")) *(int *)dst = 1;
    else { snprintf(msg, n, "needs auto or none, not '%s'", v); return -1; }
    return 0;
}

static int attention_opt(const char *v, void *dst, char *msg, size_t n) {
    if (!strcmp(v, "dp")) *(int *)dst = 1;
    else if (!strcmp(v, "home")) *(int *)dst = 0;
    else { snprintf(msg, n, "needs dp or home, not '%s'", v); return -1; }
    return 0;
}

static int parallel_opt(const char *v, void *dst, char *msg, size_t n) {
    int p = !strcmp(v, "ep") ? DSV4_PAR_EP : !strcmp(v, "cp") ? DSV4_PAR_CP
          : !strcmp(v, "cp+ep") || !strcmp(v, "ep+cp") ? DSV4_PAR_CP | DSV4_PAR_EP : -1;
    dsv4_err err = {0};
    if (p < 0) { snprintf(msg, n, "must be ep (cp and cp+ep are not served), not '%s'", v); return -1; }
    if (dsv4_server_check_parallel(p, &err)) { snprintf(msg, n, "%s", err.msg); return -1; }
    *(int *)dst = p;
    return 0;
}

/* Test-only scripted answers: a JSON array of {"match": "...", "text": "..."[, "error":
 * "..."]} (error: the request then fails with it). The strings live as long as the
 * returned cJSON. */
static cJSON *load_script(const char *path, dsv4_server_script *sc, const char **match,
                          const char **text, const char **error, int cap) {
    char why[512];
    char *buf = cli_read_input(path, CLI_TEXT_LIMIT, NULL, why, sizeof why);
    cJSON *j = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    if (!cJSON_IsArray(j)) { cJSON_Delete(j); return NULL; }
    sc->n = 0;
    for (const cJSON *e = j->child; e && sc->n < cap; e = e->next) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "match");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "text");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(e, "error");
        if (!cJSON_IsString(m) || !cJSON_IsString(t) || !*m->valuestring || (x && !cJSON_IsString(x))) {
            cJSON_Delete(j);
            return NULL;
        }
        match[sc->n] = m->valuestring;
        error[sc->n] = x ? x->valuestring : NULL;
        text[sc->n++] = t->valuestring;
    }
    sc->match = match;
    sc->text = text;
    sc->error = error;
    return j;
}

/* Rank 0's side: the listener, then the model served until a signal. Returns the exit
 * status; *group_broken = 1 when the other ranks may still wait. */
static int serve_home(dsv4_server_opts *so, int warmup, int pin, int n_ranks, int64_t grace,
                      sigset_t *stop, int *group_broken);

int cmd_serve(int argc, char **argv) {
    dsv4_server_opts so = {0};
    so.port = 8080;
    so.max_seqs = 16;
    so.max_context = 4096;
    so.max_queue = 256;
    so.max_body = 8u << 20;
    so.api_key = getenv("DSV4_API_KEY");
    if (so.api_key && !*so.api_key) so.api_key = NULL;
    const char *script_path = NULL;
    int64_t grace = 10, peer_timeout = -1;
    int warmup = 1, pin = 0, prefix_entries = 64, attention = -1, cp = 0;
    const cli_opt opts[] = {
        CLI_STR_OPT("model", 'm', &so.model_dir, "DIR", "model directory (config.json, safetensors, tokenizer.json)"),
        CLI_STR_OPT("tokenizer", 0, &so.tokenizer, "FILE", "tokenizer.json", .def = "DIR/tokenizer.json"),
        CLI_STR_OPT("model-name", 0, &so.model_name, "NAME", "model id reported by the API", .def = "DIR's name"),
        CLI_STR_OPT("host", 0, &so.host, "H", "address to bind", .def = "127.0.0.1, loopback only"),
        CLI_INT_OPT("port", 'p', &so.port, 0, 65535, "P", "TCP port; 0 = any free port"),
        CLI_STR_OPT("api-key", 0, &so.api_key, "KEY", "require 'Authorization: Bearer KEY' or 'x-api-key: KEY'", .def = "$DSV4_API_KEY if set, else no key"),
        CLI_INT_OPT("max-seqs", 0, &so.max_seqs, 1, 4096, "N", "concurrent sequences"),
        CLI_I64_OPT("max-context", 'c', &so.max_context, 16, 1 << 30, "N", "longest sequence in tokens"),
        CLI_INT_OPT("step-tokens", 0, &so.step_tokens, 1, 1 << 20, "N", "rows per engine step, decode + prefill chunks (per rank under data-parallel attention)", .def = "256; 256 x ranks with context-parallel prefill"),
        CLI_INT_OPT("threads", 't', &so.threads, 0, 1024, "N", "worker threads (per rank under --parallel: give each rank its share)", .def = "the cores this process may use"),
        CLI_FN_OPT("kv-dtype", 0, &so.kv_dtype, cli_parse_kv_dtype, "f32|bf16|fp8[+fp4]", "bf16", "KV cache storage: f32 (the reference), bf16 (half the bytes) or fp8 (FP8-split rows, BF16 indexer keys); +fp4: FP4 indexer keys (with --fidelity F3 only)"),
        CLI_FN_OPT("fidelity", 0, &so.fidelity, cli_parse_fidelity, "SET", "none", "the official model's roundings (official, none, "
                   "or a comma list of F1..F5; F3 allows --kv-dtype ...+fp4; under --parallel every rank must be given the same)"),
        CLI_FP4_LAYOUT_OPT(&so.fp4_layout),
        CLI_FLAG_OPT("pin-threads", 0, &so.pin_threads, 1, "pin worker thread i to the i-th CPU of the affinity mask (CPU 0 stays with the calling thread)"),
        CLI_FN_OPT("cache-bytes", 0, &so.cache_bytes, cache_bytes_opt, "N", "enough for max-seqs x max-context", "byte budget of the cache pools; suffixes K, M, G"),
        CLI_INT_OPT("max-queue", 0, &so.max_queue, 1, 1 << 20, "N", "requests waiting beyond max-seqs before 503"),
        CLI_FN_OPT("scheduling-policy", 0, &so.priority_sched, policy_opt, "fcfs|priority", "fcfs", "the order of admission: fcfs = arrival; priority = each request's integer `priority` (lower first, ties in arrival order; default 0), a preemption takes the lowest priority's newest request, and a request that finds every slot taken preempts the newest of a lower priority once it has waited longer than that one's recompute would take (under fcfs a priority other than 0 is a 400)"),
        CLI_FN_OPT("generation-config", 0, &so.no_generation_config, gen_config_opt, "auto|none", "auto", "auto = the sampling defaults of the model directory's generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty) for requests that omit them, its max_new_tokens as a cap on every request's max_tokens, and its eos_token_id ids as stop_token_ids of every request without ignore_eos (vLLM's --generation-config auto; a malformed file is an error at startup); none = the API's own defaults, the file ignored (vLLM's 'vllm', also accepted)"),
        CLI_FN_OPT("max-body", 0, &so.max_body, body_bytes_opt, "N", "8M", "request body limit in bytes; suffixes K, M"),
        CLI_I64_OPT("grace", 0, &grace, 0, 3600, "S", "seconds in-flight requests get at SIGTERM"),
        CLI_INT_OPT("hangup-check-ms", 0, &so.hangup_ms, 1, 3600000, "MS", "how often the clients of connections waiting for their requests' tokens are checked for a hang-up (each token wakes its connection at once)", .def = "100"),
        CLI_FN_OPT("mtp", 0, &so.mtp, on_off_opt, "on|off", "on when the checkpoint has an MTP block", "MTP speculative decoding; the tokens are the same either way"),
        CLI_INT_OPT("prefix-entries", 0, &prefix_entries, 0, 1 << 20, "N", "prompt and conversation prefixes (KV snapshots) the prefix cache keeps in memory, least recently used dropped first (also when the pools run short); 0 = no prefix cache, every request computes its whole prompt", .def = "64"),
        CLI_STR_OPT("kv-dir", 0, &so.kv_dir, "DIR", "keep prompt and conversation prefixes (KV snapshots) in DIR across restarts (under --parallel rank 0 reads and writes it; with --attention dp rank r > 0 keeps its own in DIR/rank-r)", .def = "memory only"),
        CLI_FN_OPT("kv-dir-bytes", 0, &so.kv_dir_bytes, cache_bytes_opt, "N", "unlimited", "byte budget of --kv-dir (least recently used files go first); suffixes K, M, G"),
        CLI_FN_OPT("responses-store-bytes", 0, &so.responses_bytes, cache_bytes_opt, "N", "64M", "byte budget of the responses /v1/responses keeps (store: true) for previous_response_id and GET /v1/responses/{id}, least recently used dropped first; suffixes K, M, G"),
        CLI_FLAG_OPT("warmup", 0, &warmup, 1, "read all weights into memory before serving, with progress (/health says loading meanwhile)", .def = "on"),
        CLI_FLAG_OPT("no-warmup", 0, &warmup, 0, "let the weights page in as the first requests use them"),
        CLI_FLAG_OPT("mlock", 0, &pin, 1, "pin the weights in memory (needs `ulimit -l` as large as the weights)"),
        CLI_FN_OPT("parallel", 0, &so.parallel, parallel_opt, "ep", "one process", "under mpirun: expert-parallel MoE over all ranks; rank 0 serves HTTP (see --attention for where each request's attention, sampling and prefix cache run) (cp and cp+ep are refused: context parallelism is served inside data-parallel attention, see --cp)"),
        CLI_FN_OPT("attention", 0, &attention, attention_opt, "dp|home", "dp", "with --parallel ep: dp = data-parallel attention, every rank the home rank of its own requests (placed at admission by cached prefix, then load; each rank runs their attention, head, sampling and prefix cache; --kv-dir: rank r > 0 keeps DIR/rank-r); home = rank 0 runs every request's attention, head and sampling, the others only the experts"),
        CLI_FN_OPT("cp", 0, &cp, on_off_opt, "on|off", "on", "with --attention dp: a rank's long prefill chunk (one touching 2 x ranks granules of 128 positions on Flash: --step-tokens then defaults to 256 x ranks) runs as a context-parallel prefill over the whole group with that rank as home, the other ranks computing shares of its attention and projections (a long prompt's first token comes sooner; the tokens are the same either way); off = each rank computes its own chunks alone"),
        CLI_I64_OPT("peer-timeout", 0, &peer_timeout, 0, 1 << 24, "SEC", "with --parallel: a collective inside a step that a peer does not join within SEC seconds fails; 0 = wait forever (an idle server's ranks wait for the next step without limit either way)", .def = "300"),
        CLI_STR_OPT("trace-steps", 0, &so.trace_steps, "FILE", "write one JSON line per engine step to FILE: rows, decode rows, admissions and milliseconds per phase (admit, forward, head, sample, snapshot, mtp)", .def = "none"),
        CLI_STR_OPT("test-script", 0, &script_path, "FILE", "scripted answers (tests only)", .hidden = 1),
        CLI_FLAG_OPT("test-key-fault", 0, &so.test_key_fault, 1, "with --attention dp, rank 0 fails to apply the first prefix-key change of each rank, as out of memory (tests only)", .hidden = 1),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {"serve", "--model DIR [options]",
                         "An OpenAI-compatible HTTP server until SIGINT or SIGTERM.", {opts}};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc >= 0) return prc;
    if (!so.model_dir) {
        fprintf(stderr, "dsv4 serve: --model DIR is required\n");
        cli_short_usage(&cmd, stderr);
        return 2;
    }
    if (so.parallel && !dsv4_dist_available()) {
        fprintf(stderr, "dsv4 serve: --parallel needs a build with MPI (cmake -DDSV4_MPI=ON with "
                        "Open MPI installed); this one has none\n");
        return 2;
    }
    /* here, before the listener: the engine would refuse it only once the model is read */
    if ((so.kv_dtype & DSV4_KV_IDX_FP4) && !(so.fidelity & DSV4_FID_F3)) {
        fprintf(stderr, "dsv4 serve: --kv-dtype %s: FP4 indexer keys need fidelity item F3 (--fidelity F3 or "
                        "official), which rounds every key to FP4 values\n", dsv4_kv_dtype_name(so.kv_dtype));
        return 2;
    }
    if (peer_timeout >= 0 && !so.parallel) {
        fprintf(stderr, "dsv4 serve: --peer-timeout needs --parallel\n");
        return 2;
    }
    if (attention >= 0 && !(so.parallel & DSV4_PAR_EP)) {
        fprintf(stderr, "dsv4 serve: --attention needs --parallel ep\n");
        return 2;
    }
    /* data-parallel attention by default: a group then serves at every rank's attention
     * rate (BENCHMARKS.md, session 40 dps) */
    if (attention != 0 && (so.parallel & DSV4_PAR_EP)) so.parallel |= DSV4_PAR_DP;
    if (cp && !(so.parallel & DSV4_PAR_DP)) {
        fprintf(stderr, "dsv4 serve: --cp needs --parallel ep with --attention dp\n");
        return 2;
    }
    /* and context-parallel prefill inside it: a long prompt's chunks then take the whole
     * group's cores instead of its home rank's (BENCHMARKS.md, session 41 cps) */
    if (cp >= 0 && (so.parallel & DSV4_PAR_DP)) so.parallel |= DSV4_PAR_CP;
    if (so.api_key && !*so.api_key) so.api_key = NULL;
    so.prefix_entries = prefix_entries ? prefix_entries : -1;
    cli_warn_threads("serve", so.threads);
    dsv4_server_script script = {0};
    const char *match[64], *text[64], *error[64];
    cJSON *script_json = NULL;
    if (script_path) {
        if (!(script_json = load_script(script_path, &script, match, text, error, 64))) {
            fprintf(stderr, "dsv4 serve: --test-script %s: not an array of {match, text[, error]}\n", script_path);
            return 2;
        }
        so.script = &script;
    }

    /* SIGINT/SIGTERM are taken by sigwait on rank 0 and ignored elsewhere: block them in
     * every thread, MPI's included */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    dsv4_err err = {0};
    int rank = 0, n_ranks = 1, status = 1, broken = 0;
    if (so.parallel) {
        if (dsv4_dist_init(NULL, NULL, &so.dist, &err)) {
            fprintf(stderr, "dsv4 serve: %s\n", err.msg);
            cJSON_Delete(script_json);
            return 1;
        }
        rank = dsv4_dist_rank(so.dist);
        n_ranks = dsv4_dist_size(so.dist);
        if (peer_timeout >= 0 && dsv4_dist_set_timeout(so.dist, (double)peer_timeout, &err)) {
            fprintf(stderr, "dsv4 serve: %s\n", err.msg);
            dsv4_dist_finalize(so.dist);
            cJSON_Delete(script_json);
            return 2;
        }
    }
    if (rank == 0) {
        status = serve_home(&so, warmup, pin, n_ranks, grace, &stop, &broken);
    } else {
        /* a follower: the same model and engine, rank 0's steps */
        dsv4_model *m = NULL;
        broken = 1;  /* until the engine exists, a failure here leaves rank 0 waiting */
        if (dsv4_model_open(so.model_dir, &m, &err))
            fprintf(stderr, "dsv4 serve: rank %d: %s\n", rank, err.msg);
        else if (!cli_prepare_weights("serve", m, warmup, pin, so.threads, rank, n_ranks)) {
            broken = 0;
            status = dsv4_server_follow(&so, m, &err) ? 1 : 0;
            if (status) {
                fprintf(stderr, "dsv4 serve: rank %d: %s\n", rank, err.msg);
                broken = 1;
            }
        }
        dsv4_model_close(m);
    }
    cJSON_Delete(script_json);
    if (broken && n_ranks > 1) {
        fprintf(stderr, "dsv4 serve: rank %d failed; ending all %d ranks\n", rank, n_ranks);
        dsv4_dist_abort(so.dist, status ? status : 1);
    }
    dsv4_dist_finalize(so.dist);
    return status;
}

/* The defaults the model's generation_config.json gives requests (vLLM logs them too). */
static void log_gen_config(const dsv4_gen_config *gc) {
    if (!gc->has) return;
    char line[512];
    int n = 0;
    const struct { unsigned bit; const char *name; double v; } f[] = {
        {DSV4_GENCFG_TEMPERATURE, "temperature", gc->temperature},
        {DSV4_GENCFG_TOP_P, "top_p", gc->top_p},
        {DSV4_GENCFG_TOP_K, "top_k", gc->top_k},
        {DSV4_GENCFG_MIN_P, "min_p", gc->min_p},
        {DSV4_GENCFG_REPETITION_PENALTY, "repetition_penalty", gc->repetition_penalty},
        {DSV4_GENCFG_MAX_NEW_TOKENS, "max_new_tokens", gc->max_new_tokens},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (gc->has & f[i].bit) n += snprintf(line + n, sizeof line - (size_t)n, "%s%s %g", n ? ", " : "", f[i].name, f[i].v);
    for (int i = 0; (gc->has & DSV4_GENCFG_EOS_TOKEN_ID) && i < gc->n_eos; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s%d", i ? " " : n ? ", eos_token_id " : "eos_token_id ",
                      (int)gc->eos_token_id[i]);
    fprintf(stderr, "dsv4 serve: the model's generation_config.json sets the defaults of requests that omit "
                    "them: %s (--generation-config none ignores it)\n", line);
}

static int serve_home(dsv4_server_opts *so, int warmup, int pin, int n_ranks, int64_t grace,
                      sigset_t *stop, int *group_broken) {
    dsv4_err err = {0};
    dsv4_server *srv = NULL;
    dsv4_model *m = NULL;
    *group_broken = n_ranks > 1;  /* the followers wait in engine create until it runs */
    if (dsv4_server_start(so, &srv, &err)) {
        fprintf(stderr, "dsv4 serve: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "dsv4 serve: listening on http://%s:%d (loading the model)\n",
            so->host ? so->host : "127.0.0.1", dsv4_server_port(srv));
    int status = 1;
    dsv4_gen_config gc;
    if (dsv4_model_open(so->model_dir, &m, &err)) {
        fprintf(stderr, "dsv4 serve: %s\n", err.msg);
    } else if (!so->no_generation_config && dsv4_model_gen_config(m, &gc, &err)) {
        /* before the warm-up (minutes on the release) and with the group still marked broken:
         * dsv4_server_load would refuse it only after the followers entered the engine create */
        fprintf(stderr, "dsv4 serve: %s (--generation-config none ignores the file)\n", err.msg);
    } else {
        if (*dsv4_model_warnings(m)) fprintf(stderr, "dsv4 serve: warning: %s\n", dsv4_model_warnings(m));
        if (!so->no_generation_config) log_gen_config(&gc);
        /* under EP each rank warms and pins only the experts it owns */
        if (!cli_prepare_weights("serve", m, warmup, pin, so->threads, 0, n_ranks)) {
            *group_broken = 0;  /* from here the followers end with the server */
            if (dsv4_server_load(srv, m, &err)) fprintf(stderr, "dsv4 serve: %s\n", err.msg);
            else status = 0;
        }
    }
    if (!status) {
        /* the pid: under mpirun, SIGTERM to this process stops the group cleanly (mpirun's
         * own SIGTERM kills every rank) */
        fprintf(stderr, "dsv4 serve: ready on http://%s:%d (pid %d%s)\n", so->host ? so->host : "127.0.0.1",
                dsv4_server_port(srv), (int)getpid(), n_ranks > 1 ? ", rank 0 of an expert-parallel group" : "");
        int sig = 0;
        sigwait(stop, &sig);
        fprintf(stderr, "dsv4 serve: %s, finishing in-flight requests (at most %llds)\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", (long long)grace);
    }
    if (dsv4_server_stop(srv, status ? 0 : (double)grace, &err)) {
        fprintf(stderr, "dsv4 serve: %s\n", err.msg);
        *group_broken = 1;
        status = 1;
    }
    dsv4_model_close(m);
    if (!status) fprintf(stderr, "dsv4 serve: stopped\n");
    return status;
}
