/* cmd_serve.c — `dsv4 serve`: parses options and runs the HTTP server (serve/server.h)
 * until SIGINT or SIGTERM.
 *
 *   dsv4 serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--max-seqs N]
 *              [--max-context N] [--step-tokens N] [--threads T] [--cache-bytes N] ...
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "serve/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dsv4 serve --model DIR [options]\n"
            "  --model DIR          model directory (config.json, safetensors, tokenizer.json)\n"
            "  --tokenizer FILE     tokenizer.json (default: DIR/tokenizer.json)\n"
            "  --model-name NAME    model id reported by the API (default: DIR's name)\n"
            "  --host H             address to bind (default 127.0.0.1: loopback only)\n"
            "  --port P             TCP port (default 8080; 0 = any free port)\n"
            "  --api-key KEY        require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "                       (default: $DSV4_API_KEY if set, else no key)\n"
            "  --max-seqs N         concurrent sequences (default 16)\n"
            "  --max-context N      longest sequence in tokens (default 4096)\n"
            "  --step-tokens N      rows per engine step, decode + prefill chunks (default 256)\n"
            "  --threads T          worker threads (default: all cores)\n"
            "  --cache-bytes N      byte budget of the cache pools (default: enough for\n"
            "                       max-seqs x max-context); suffixes K, M, G\n"
            "  --max-queue N        requests waiting beyond max-seqs before 503 (default 256)\n"
            "  --max-body N         request body limit in bytes (default 8M); suffixes K, M\n"
            "  --grace S            seconds in-flight requests get at SIGTERM (default 10)\n"
            "  --parallel MODE      not supported by serve yet (single process only)\n"
            "  --mtp on|off         MTP speculative decoding (default: on when the checkpoint\n"
            "                       has an MTP block); the tokens are the same either way\n");
}

/* A byte count with an optional K/M/G suffix. */
static int parse_bytes(const char *s, unsigned long long *out) {
    char *end;
    double x = strtod(s, &end);
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (end == s || *end || x < 0) return -1;
    *out = (unsigned long long)(x * mul);
    return 0;
}

/* Test-only scripted answers: a JSON array of {"match": "...", "text": "..."}. The text
 * and strings live as long as the returned cJSON. */
static cJSON *load_script(const char *path, dsv4_server_script *sc, const char **match,
                          const char **text, int cap) {
    char *buf = cli_read_file(path, NULL);
    cJSON *j = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    if (!cJSON_IsArray(j)) { cJSON_Delete(j); return NULL; }
    sc->n = 0;
    for (const cJSON *e = j->child; e && sc->n < cap; e = e->next) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "match");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "text");
        if (!cJSON_IsString(m) || !cJSON_IsString(t) || !*m->valuestring) { cJSON_Delete(j); return NULL; }
        match[sc->n] = m->valuestring;
        text[sc->n++] = t->valuestring;
    }
    sc->match = match;
    sc->text = text;
    return j;
}

int cmd_serve(int argc, char **argv) {
    enum { O_MODEL = 256, O_TOK, O_NAME, O_HOST, O_PORT, O_KEY, O_SEQS, O_CTX, O_STEP, O_THREADS,
           O_CACHE, O_QUEUE, O_BODY, O_GRACE, O_PARALLEL, O_SCRIPT, O_MTP };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL},     {"tokenizer", required_argument, 0, O_TOK},
        {"model-name", required_argument, 0, O_NAME}, {"host", required_argument, 0, O_HOST},
        {"port", required_argument, 0, O_PORT},       {"api-key", required_argument, 0, O_KEY},
        {"max-seqs", required_argument, 0, O_SEQS},   {"max-context", required_argument, 0, O_CTX},
        {"step-tokens", required_argument, 0, O_STEP}, {"threads", required_argument, 0, O_THREADS},
        {"cache-bytes", required_argument, 0, O_CACHE}, {"max-queue", required_argument, 0, O_QUEUE},
        {"max-body", required_argument, 0, O_BODY},   {"grace", required_argument, 0, O_GRACE},
        {"parallel", required_argument, 0, O_PARALLEL}, {"mtp", required_argument, 0, O_MTP},
        {"test-script", required_argument, 0, O_SCRIPT},  /* hidden: tests only */
        {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
    dsv4_server_opts so = {0};
    so.port = 8080;
    so.api_key = getenv("DSV4_API_KEY");
    if (so.api_key && !*so.api_key) so.api_key = NULL;
    const char *script_path = NULL;
    long long grace = 10, v;
    unsigned long long bytes;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case O_MODEL: so.model_dir = optarg; break;
        case O_TOK: so.tokenizer = optarg; break;
        case O_NAME: so.model_name = optarg; break;
        case O_HOST: so.host = optarg; break;
        case O_KEY: so.api_key = *optarg ? optarg : NULL; break;
        case O_SCRIPT: script_path = optarg; break;
        case O_MTP:
            bad = strcmp(optarg, "on") && strcmp(optarg, "off");
            so.mtp = !strcmp(optarg, "on") ? 1 : -1;
            break;
        case O_PORT: bad = cli_parse_int(optarg, 0, 65535, &v); so.port = (int)v; break;
        case O_SEQS: bad = cli_parse_int(optarg, 1, 4096, &v); so.max_seqs = (int)v; break;
        case O_CTX: bad = cli_parse_int(optarg, 16, 1 << 30, &v); so.max_context = v; break;
        case O_STEP: bad = cli_parse_int(optarg, 1, 1 << 20, &v); so.step_tokens = (int)v; break;
        case O_THREADS: bad = cli_parse_int(optarg, 1, 1024, &v); so.threads = (int)v; break;
        case O_QUEUE: bad = cli_parse_int(optarg, 1, 1 << 20, &v); so.max_queue = (int)v; break;
        case O_GRACE: bad = cli_parse_int(optarg, 0, 3600, &grace); break;
        case O_CACHE: bad = parse_bytes(optarg, &bytes); so.cache_bytes = bytes; break;
        case O_BODY:
            bad = parse_bytes(optarg, &bytes) || bytes < 1024;
            so.max_body = (size_t)bytes;
            break;
        case O_PARALLEL:
            fprintf(stderr, "dsv4 serve: --parallel is not supported by serve yet: the server "
                            "runs in one process (use dsv4 run/bench for CP/EP)\n");
            return 2;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad) {
            fprintf(stderr, "dsv4 serve: bad value '%s' for --%s\n", optarg, opts[c - O_MODEL].name);
            return 2;
        }
    }
    if (optind < argc || !so.model_dir) {
        fprintf(stderr, "dsv4 serve: %s\n", optind < argc ? "unexpected argument" : "need --model");
        usage(stderr);
        return 2;
    }
    dsv4_server_script script = {0};
    const char *match[64], *text[64];
    cJSON *script_json = NULL;
    if (script_path) {
        if (!(script_json = load_script(script_path, &script, match, text, 64))) {
            fprintf(stderr, "dsv4 serve: --test-script %s: not an array of {match, text}\n", script_path);
            return 2;
        }
        so.script = &script;
    }

    /* SIGINT/SIGTERM are taken by sigwait below: block them in every thread */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    dsv4_err err = {0};
    dsv4_server *srv = NULL;
    if (dsv4_server_start(&so, &srv, &err)) {
        fprintf(stderr, "dsv4 serve: %s\n", err.msg);
        cJSON_Delete(script_json);
        return 1;
    }
    fprintf(stderr, "dsv4 serve: listening on http://%s:%d\n", so.host ? so.host : "127.0.0.1",
            dsv4_server_port(srv));
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "dsv4 serve: %s, finishing in-flight requests (at most %llds)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", grace);
    dsv4_server_stop(srv, (double)grace);
    cJSON_Delete(script_json);
    fprintf(stderr, "dsv4 serve: stopped\n");
    return 0;
}
