/* cmd_chat.c — `dsv4 chat`: an interactive multi-turn conversation. Each turn typed (or
 * read from standard input) is a user message; the answer streams to standard output. The
 * sequence keeps its cache between turns, so only the new turn is prefilled (when the chat
 * template drops earlier reasoning the whole conversation is re-encoded and the sequence
 * starts over).
 *
 * On a terminal: line editing and history (libedit; ~/.dsv4_history), a trailing '\' or a
 * block between lines of three double quotes for multi-line turns, Ctrl-C to interrupt a
 * reply (and at the prompt to quit). Commands: /help /reset /save FILE /load FILE /exit.
 * A turn that cannot run (invalid UTF-8, longer than the context left) is reported and
 * the conversation goes on without it.
 *
 * --session FILE keeps the conversation across runs: the messages in FILE (as /save writes
 * them, after every turn) and the cache in FILE.kv, a KV snapshot (spec/serving.md §g) at
 * the last compression-aligned length a turn's prefill crossed. A later run with the same
 * FILE loads both; its first turn restores the snapshot when its tokens start the
 * re-encoded conversation and recomputes only what follows (else it recomputes all, with
 * a note). */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef DSV4_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

#include "cli_output.h"
#include "cli_util.h"
#include "commands.h"
#include "gen_flags.h"
#include "dsv4_text.h"

static volatile sig_atomic_t interrupted;
static volatile sig_atomic_t at_prompt;  /* 1 while libedit waits for a line */

/* Ctrl-C during a reply stops the reply; at the prompt it ends the session. libedit may
 * restart its read after the signal instead of returning, so the prompt case exits here
 * (history is already written after every turn). */
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
    if (at_prompt) {
        static const char nl[] = "\n";
        (void)!write(STDERR_FILENO, nl, 1);
        _exit(130);
    }
}

static const char HELP[] =
    "  /help          this list\n"
    "  /reset         start a new conversation (the system message stays)\n"
    "  /save FILE     write the conversation to FILE (JSON messages)\n"
    "  /load FILE     continue a conversation saved with /save\n"
    "  /exit          quit (also Ctrl-D, or Ctrl-C at the prompt)\n"
    "  a line ending in \\ continues on the next line; a line of \"\"\" starts and ends a\n"
    "  block of several lines. Ctrl-C during a reply stops the reply.\n";

/* ---- the conversation ---------------------------------------------------------------- */

typedef struct chat_session {
    gen_flags *f;
    dsv4_tokenizer *tok;
    dsv4_engine *eng;
    int seq;
    dsv4_chat_opts co;
    dsv4_chat *conv;
    cJSON *messages;  /* what /save writes: every message in order */
    /* --session */
    const char *session;     /* FILE, NULL without --session */
    char kv_path[4200];      /* FILE.kv */
    int A;                   /* alignment of snapshots (dsv4_engine_alignment) */
    dsv4_snapshot *resume;   /* FILE.kv as loaded, until the first turn uses it */
    int32_t *toks;           /* (n_toks) the tokens the sequence holds (and the turn's prompt) */
    int64_t n_toks, cap_toks;
} chat_session;

/* Makes room for n tokens in s->toks; 0 or -1 (out of memory). */
static int toks_reserve(chat_session *s, int64_t n) {
    if (n <= s->cap_toks) return 0;
    int64_t cap = n > 2 * s->cap_toks ? n : 2 * s->cap_toks;
    int32_t *t = realloc(s->toks, (size_t)cap * sizeof *t);
    if (!t) return -1;
    s->toks = t;
    s->cap_toks = cap;
    return 0;
}

/* Rebuilds the conversation from s->messages on a fresh sequence: after /reset, /load, or
 * a turn that failed (its message is not in the list), so the next turn re-encodes all. */
static int rebuild(chat_session *s, dsv4_err *err) {
    dsv4_chat_free(s->conv);
    s->conv = NULL;
    int rc = dsv4_chat_create(&s->co, &s->conv, err);
    const cJSON *m;
    cJSON_ArrayForEach(m, s->messages) if (!rc) rc = dsv4_chat_add_json(s->conv, m, err);
    int fresh = 0; /* a new sequence needs its own speculative-decoding state */
    s->n_toks = 0;
    if (!rc && dsv4_seq_length(s->eng, s->seq) > 0) {
        rc = dsv4_seq_free(s->eng, s->seq, err);
        if (!rc) rc = dsv4_seq_create(s->eng, &s->seq, err);
        fresh = 1;
    }
    if (!rc && (fresh || !s->f->gen.spec) && gen_spec_open(s->f, "chat", s->eng, s->seq)) {
        err->code = rc = DSV4_ERR_STATE;
        snprintf(err->msg, sizeof err->msg, "speculative decoding could not start");
    }
    return rc;
}

static cJSON *message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (m && (!cJSON_AddStringToObject(m, "role", role) || !cJSON_AddStringToObject(m, "content", content))) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

/* Is s[0..n) valid UTF-8? Returns the offset of the first bad byte, or n. */
static size_t utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 9;
        if (k == 9 || (k == 1 && c < 0xc2) || (k && i + k >= n)) return i;
        unsigned cp = k ? c & (0x3f >> k) : c;
        for (unsigned j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return i;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += k + 1;
    }
    return n;
}

static void save(const chat_session *s, const char *path, int verbose);

/* ---- --session: the snapshot ----------------------------------------------------------- */

typedef struct keep_ctx {
    chat_session *s;
    gen_printer *out;
} keep_ctx;

static int keep_text(void *user, const char *text, size_t len) {
    return gen_printer_text(((keep_ctx *)user)->out, text, len);
}

/* The prefill reached an aligned length: the sequence there goes to FILE.kv (temp file,
 * fsync, rename: a crash leaves the previous snapshot). Failures only cost the reuse. */
static void keep_snapshot(void *user, int seq, const float *hidden, const float *streams) {
    chat_session *s = ((keep_ctx *)user)->s;
    dsv4_snapshot *snap = NULL;
    dsv4_err err = {0};
    const int64_t n = dsv4_seq_length(s->eng, seq);
    if (s->n_toks < 0 || n > s->cap_toks ||
        dsv4_snapshot_take(s->eng, seq, s->toks, hidden, streams, &snap, &err) ||
        dsv4_snapshot_save(s->eng, snap, s->kv_path, &err))
        fprintf(stderr, "dsv4 chat: warning: the session's cache was not saved: %s\n", err.msg);
    dsv4_snapshot_free(s->eng, snap);
}

/* The first turn after --session loaded FILE.kv: when its tokens start the turn's ids (the
 * whole conversation, re-encoded, on a fresh sequence), the sequence is restored from it.
 * Returns the ids it covers (0: nothing restored). */
static size_t resume(chat_session *s, const dsv4_tok_ids *ids) {
    if (!s->resume) return 0;
    dsv4_snapshot *snap = s->resume;
    s->resume = NULL;
    const int64_t n = dsv4_snapshot_length(snap);
    dsv4_err err = {0};
    size_t got = 0;
    if (dsv4_seq_length(s->eng, s->seq) != 0 || n >= (int64_t)ids->n ||
        memcmp(dsv4_snapshot_tokens(snap), ids->ids, (size_t)n * sizeof *ids->ids)) {
        fprintf(stderr, "dsv4 chat: %s does not hold the start of this conversation; it is "
                "recomputed\n", s->kv_path);
    } else if (toks_reserve(s, n)) {
        fprintf(stderr, "dsv4 chat: out of memory; the conversation is recomputed\n");
    } else {
        const dsv4_model_info mi = dsv4_model_get_info(dsv4_engine_model(s->eng));
        float *streams = malloc((size_t)mi.hc_mult * mi.hidden_size * sizeof(float));  /* (hc, D) */
        int seq = -1;
        int rc = !streams ? DSV4_ERR_NOMEM : dsv4_seq_free(s->eng, s->seq, &err);
        if (!rc) rc = dsv4_snapshot_restore(s->eng, snap, &seq, NULL, streams, &err);
        if (!rc && s->f->gen.spec) {
            dsv4_spec_free(s->f->gen.spec);
            s->f->gen.spec = NULL;
            rc = dsv4_spec_resume(s->eng, seq, streams, &s->f->gen.spec, &err);
        }
        free(streams);
        if (!rc) {
            s->seq = seq;
            memcpy(s->toks, dsv4_snapshot_tokens(snap), (size_t)n * sizeof *s->toks);
            s->n_toks = n;
            got = (size_t)n;
            fprintf(stderr, "[resumed %lld tokens from %s]\n", (long long)n, s->kv_path);
        } else {
            /* back to a fresh sequence: the turn recomputes everything */
            fprintf(stderr, "dsv4 chat: %s: %s; the conversation is recomputed\n", s->kv_path, err.msg);
            if (seq >= 0) dsv4_seq_free(s->eng, seq, NULL);
            if (dsv4_seq_length(s->eng, s->seq) < 0 && !dsv4_seq_create(s->eng, &s->seq, &err))
                gen_spec_open(s->f, "chat", s->eng, s->seq);
        }
    }
    dsv4_snapshot_free(s->eng, snap);
    return got;
}

/* One user turn: encode, check it fits, generate, record the answer. Returns 0, or 1
 * when the turn failed but the session goes on (reported), or -1 on a failure that ends
 * the session. */
static int turn(chat_session *s, const char *line) {
    dsv4_err err = {0};
    const size_t n = strlen(line);
    const size_t bad = utf8_valid_prefix((const unsigned char *)line, n);
    if (bad < n) {
        fprintf(stderr, "dsv4 chat: that line is not valid UTF-8 (byte %zu); it was not sent\n", bad + 1);
        return 1;
    }
    cJSON *um = message("user", line);
    if (!um || dsv4_chat_add(s->conv, "user", line, &err)) {
        fprintf(stderr, "dsv4 chat: %s\n", um ? err.msg : "out of memory");
        cJSON_Delete(um);
        return rebuild(s, &err) ? -1 : 1;
    }
    dsv4_tok_ids ids = {0};
    int reset = 0;
    /* content as plain text: special-token strings a user types cannot open a role */
    if (dsv4_chat_next_ids(s->conv, s->tok, &ids, &reset, &err)) {
        fprintf(stderr, "dsv4 chat: %s\n", err.msg);
        dsv4_tok_ids_free(&ids);
        cJSON_Delete(um);
        return rebuild(s, &err) ? -1 : 1;
    }
    if (reset) s->n_toks = 0;
    if (reset && dsv4_seq_length(s->eng, s->seq) > 0 &&
        (dsv4_seq_free(s->eng, s->seq, &err) || dsv4_seq_create(s->eng, &s->seq, &err) ||
         gen_spec_open(s->f, "chat", s->eng, s->seq))) {
        fprintf(stderr, "dsv4 chat: %s\n", err.msg);
        dsv4_tok_ids_free(&ids);
        cJSON_Delete(um);
        return -1;
    }
    const int thinking = dsv4_chat_gen_thinking(s->conv);
    size_t skip = resume(s, &ids);  /* tokens restored from FILE.kv */
    const int64_t have = dsv4_seq_length(s->eng, s->seq), room = s->f->max_context - have;
    if ((int64_t)(ids.n - skip) >= room) {
        fprintf(stderr, "dsv4 chat: this turn needs %zu tokens but only %lld of the context "
                        "(--max-context %lld) are left; it was not sent (/reset starts over)\n",
                ids.n - skip, (long long)(room > 0 ? room : 0), (long long)s->f->max_context);
        dsv4_tok_ids_free(&ids);
        cJSON_Delete(um);
        return rebuild(s, &err) ? -1 : 1;
    }
    dsv4_generation_result res = {0};
    gen_printer out;
    gen_printer_start(&out, thinking, &interrupted);
    dsv4_generation_callbacks cb = {.user = &out, .text = gen_printer_text, .progress = gen_progress};
    /* the sequence's tokens with this turn's prompt; with --session the prefill stops at the
     * last aligned length it crosses to save the snapshot there */
    keep_ctx kc = {s, &out};
    const int64_t n_new = (int64_t)(ids.n - skip);
    if (s->session && s->n_toks == have && !toks_reserve(s, have + n_new)) {
        memcpy(s->toks + have, ids.ids + skip, (size_t)n_new * sizeof *s->toks);
        s->n_toks = have;
        cb.user = &kc;
        cb.text = keep_text;
        cb.keep_at = (have + n_new - 1) / s->A * s->A;
        cb.keep = keep_snapshot;
    }
    int rc = dsv4_generation_run(s->eng, s->tok, s->seq, ids.ids + skip, (int)n_new, &s->f->gen, &cb,
                                 &res, &err);
    gen_printer_end(&out);
    dsv4_tok_ids_free(&ids);
    if (rc) {
        fprintf(stderr, "\ndsv4 chat: %s\n", err.msg);
        cJSON_Delete(um);
        return rebuild(s, &err) ? -1 : 1;
    }
    printf("\n");
    fflush(stdout);
    /* record exactly what the sequence now holds after the prompt */
    size_t fed = (size_t)res.gen_tokens - (res.last_fed ? 0 : 1);
    if (s->session && s->n_toks == have && !toks_reserve(s, have + n_new + (int64_t)fed)) {
        memcpy(s->toks + have + n_new, res.ids, fed * sizeof *s->toks);
        s->n_toks = have + n_new + (int64_t)fed;
    } else {
        s->n_toks = -1;  /* unknown: no more snapshots until a rebuild */
    }
    char *answer = NULL;
    size_t answer_len = 0;
    dsv4_parsed parsed = {0};
    rc = dsv4_detokenize(s->tok, res.ids, fed, 0, &answer, &answer_len, &err);
    if (!rc) rc = dsv4_chat_add_generated(s->conv, answer, answer_len, &parsed, &err);
    free(answer);
    free(res.ids);
    cJSON *am = rc && rc != DSV4_ERR_FORMAT ? NULL : dsv4_parsed_to_json(&parsed);
    dsv4_parsed_free(&parsed);
    if (!am) {
        fprintf(stderr, "dsv4 chat: %s\n", rc ? err.msg : "out of memory");
        cJSON_Delete(um);
        return -1;
    }
    cJSON_AddItemToArray(s->messages, um);
    cJSON_AddItemToArray(s->messages, am);
    if (s->session) save(s, s->session, 0);
    if (interrupted) fprintf(stderr, "[interrupted] ");
    else if (res.finish == DSV4_FINISH_NONE && dsv4_seq_length(s->eng, s->seq) >= s->f->max_context)
        fprintf(stderr, "[the context is full: /reset to start over] ");
    char mtp[160];
    gen_spec_stats(&res, mtp, sizeof mtp);
    fprintf(stderr, "[%lld prompt tokens, %lld generated, %.2f tokens/s%s]\n",
            (long long)res.prompt_tokens, (long long)res.gen_tokens,
            res.decode_seconds > 0 ? res.gen_tokens / res.decode_seconds : 0.0, mtp);
    return 0;
}

/* /save FILE: the messages as a JSON array, written atomically (cli_write_atomic). */
static void save(const chat_session *s, const char *path, int verbose) {
    char *json = cJSON_Print(s->messages);
    char why[4400] = "out of memory";
    size_t n = json ? strlen(json) : 0;
    char *text = json ? realloc(json, n + 2) : NULL; /* the file ends with a newline */
    if (text) {
        json = text;
        memcpy(json + n++, "\n", 2);
    }
    if (text && !cli_write_atomic(path, json, n, why, sizeof why)) {
        if (verbose) fprintf(stderr, "saved %d messages to %s\n", cJSON_GetArraySize(s->messages), path);
    } else
        fprintf(stderr, "dsv4 chat: cannot save the conversation: %s\n", why);
    free(json);
}

/* /load FILE: a saved conversation replaces the current one. */
static int load(chat_session *s, const char *path) {
    char why[512];
    size_t len;
    char *text = cli_read_input(path, CLI_TEXT_LIMIT, &len, why, sizeof why);
    if (!text) {
        fprintf(stderr, "dsv4 chat: %s\n", why);
        return 1;
    }
    cJSON *msgs = cJSON_ParseWithLength(text, len);
    free(text);
    int ok = cJSON_IsArray(msgs);
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) ok &= cJSON_IsObject(m) && cJSON_IsString(cJSON_GetObjectItem(m, "role"));
    if (!ok) {
        fprintf(stderr, "dsv4 chat: %s is not a saved conversation (a JSON array of messages)\n", path);
        cJSON_Delete(msgs);
        return 1;
    }
    cJSON *old = s->messages;
    s->messages = msgs;
    dsv4_err err = {0};
    if (rebuild(s, &err)) {
        fprintf(stderr, "dsv4 chat: %s: %s; the conversation is unchanged\n", path, err.msg);
        s->messages = old;
        cJSON_Delete(msgs);
        return rebuild(s, &err) ? -1 : 1;
    }
    cJSON_Delete(old);
    fprintf(stderr, "loaded %d messages from %s; the next turn runs them through the model\n",
            cJSON_GetArraySize(msgs), path);
    return 0;
}

/* ---- input --------------------------------------------------------------------------- */

typedef struct chat_input {
    int tty;
    char history[4096];  /* "" = no history file */
    char *buf;           /* getline's buffer */
    size_t cap;
    int nul;             /* a line of this turn held a NUL byte: the turn is dropped */
} chat_input;

/* One line without its newline (malloc'd), or NULL at end of input or on Ctrl-C. */
static char *read_line(chat_input *in, const char *prompt) {
#ifdef DSV4_HAVE_LIBEDIT
    if (in->tty) {
        at_prompt = 1;
        char *line = readline(prompt);
        at_prompt = 0;
        return line;
    }
#endif
    if (in->tty) { fputs(prompt, stderr); fflush(stderr); }
    ssize_t got = getline(&in->buf, &in->cap, stdin);
    if (got < 0) return NULL;
    /* text is a C string from here on: a NUL would silently cut the line */
    const char *nul = memchr(in->buf, 0, (size_t)got);
    if (nul && !in->nul) {
        fprintf(stderr, "dsv4 chat: that line holds a NUL byte (byte %zu); it was not sent\n",
                (size_t)(nul - in->buf) + 1);
        in->nul = 1;
    }
    while (got > 0 && (in->buf[got - 1] == '\n' || in->buf[got - 1] == '\r')) in->buf[--got] = 0;
    return strdup(in->buf);
}

/* Appends b (and a newline first when t is not empty) to the growing turn t. */
static char *append(char *t, const char *b) {
    size_t n = t ? strlen(t) : 0, m = strlen(b);
    char *r = realloc(t, n + m + 2);
    if (!r) { free(t); return NULL; }
    if (n) r[n++] = '\n';
    memcpy(r + n, b, m + 1);
    return r;
}

/* One turn: a line, lines joined by a trailing '\', or a """ block. NULL at the end. */
static char *read_turn(chat_input *in) {
    char *line = read_line(in, "> ");
    if (!line) return NULL;
    char *turn = NULL;
    if (!strcmp(line, "\"\"\"")) {
        free(line);
        int ok = 1;
        while (ok && (line = read_line(in, "")) && strcmp(line, "\"\"\"")) {
            ok = (turn = append(turn, line)) != NULL;
            free(line);
            line = NULL;
        }
        free(line);
        if (!turn && ok) turn = strdup("");
    } else {
        for (;;) {
            size_t n = strlen(line);
            int more = n && line[n - 1] == '\\';
            if (more) line[n - 1] = 0;
            turn = append(turn, line);
            free(line);
            if (!more || !turn || !(line = read_line(in, ". "))) break;
        }
    }
    if (in->nul) {
        in->nul = 0;
        free(turn);
        turn = strdup("");
    }
#ifdef DSV4_HAVE_LIBEDIT
    if (in->tty && turn && *turn) {
        add_history(turn);
        if (*in->history) write_history(in->history);
    }
#endif
    return turn;
}

/* ---- the command --------------------------------------------------------------------- */

int cmd_chat(int argc, char **argv) {
    gen_flags f;
    gen_flags_init(&f, 512, 1);
    const char *system = NULL, *session = NULL;
    const cli_opt own[] = {
        CLI_STR_OPT("system", 0, &system, "TEXT", "system message that starts the conversation"),
        CLI_STR_OPT("session", 0, &session, "FILE", "keep the conversation in FILE and its cache in FILE.kv; resume them when they exist"),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {"chat", "--model DIR [--system TEXT] [options]",
                         "An interactive conversation: each line is your turn, the reply streams back.\n"
                         "Type /help in the chat for its commands; Ctrl-C stops a reply.", {own, f.opts}};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc >= 0) return prc;
    if ((prc = gen_flags_finish(&f, &cmd))) return prc;

    dsv4_model *model;
    chat_session s = {.f = &f, .co = {.thinking = f.think == 1}, .session = session};
    if (gen_open(&f, "chat", &model, &s.tok, &s.eng, &s.seq)) return 1;
    dsv4_err err = {0};
    int status = 1;
    chat_input in = {.tty = isatty(0)};
    s.messages = cJSON_CreateArray();
    if (!s.messages || (system && !cJSON_AddItemToArray(s.messages, message("system", system)))) {
        fprintf(stderr, "dsv4 chat: out of memory\n");
        goto out;
    }
    if (rebuild(&s, &err)) {
        fprintf(stderr, "dsv4 chat: %s\n", err.msg);
        goto out;
    }
    if (s.session) {
        /* resume: the messages, then the cache (used by the first turn when it fits) */
        s.A = dsv4_engine_alignment(s.eng);
        snprintf(s.kv_path, sizeof s.kv_path, "%s.kv", s.session);
        if (access(s.session, F_OK) == 0 && load(&s, s.session)) goto out;
        if (access(s.kv_path, F_OK) == 0 && dsv4_snapshot_load(s.eng, s.kv_path, &s.resume, &err))
            fprintf(stderr, "dsv4 chat: warning: %s; the conversation is recomputed\n", err.msg);
    }
#ifdef DSV4_HAVE_LIBEDIT
    const char *home = getenv("HOME");
    if (in.tty && home && *home) {
        snprintf(in.history, sizeof in.history, "%s/.dsv4_history", home);
        read_history(in.history);
    }
#endif
    struct sigaction sa = {0}, old_sa;
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    if (in.tty) fprintf(stderr, "dsv4 chat: type /help for commands, Ctrl-D or /exit to quit\n");
    for (;;) {
        interrupted = 0;
        char *line = read_turn(&in);
        if (!line) {
            if (in.tty) fputc('\n', stderr);
            status = interrupted ? 130 : 0;
            break;
        }
        char *cmdline = line + strspn(line, " \t");
        int rc = 0;
        if (!*cmdline) {
        } else if (!strcmp(cmdline, "/exit") || !strcmp(cmdline, "/quit")) {
            free(line);
            status = 0;
            break;
        } else if (!strcmp(cmdline, "/help")) {
            fputs(HELP, stderr);
        } else if (!strcmp(cmdline, "/reset")) {
            cJSON *keep = cJSON_CreateArray();
            const cJSON *m;
            cJSON_ArrayForEach(m, s.messages)
                if (keep && !strcmp(cJSON_GetObjectItem(m, "role")->valuestring, "system"))
                    cJSON_AddItemToArray(keep, cJSON_Duplicate(m, 1));
            if (!keep) rc = -1;
            else {
                cJSON_Delete(s.messages);
                s.messages = keep;
                rc = rebuild(&s, &err) ? -1 : 0;
                if (!rc) fprintf(stderr, "new conversation\n");
            }
        } else if (!strncmp(cmdline, "/save ", 6) && cmdline[6]) {
            save(&s, cmdline + 6, 1);
        } else if (!strncmp(cmdline, "/load ", 6) && cmdline[6]) {
            rc = load(&s, cmdline + 6);
        } else if (cmdline[0] == '/' && !strchr(cmdline, ' ') && cmdline[1]) {
            fprintf(stderr, "dsv4 chat: unknown command %s (/help lists them)\n", cmdline);
        } else {
            rc = turn(&s, line);
        }
        free(line);
        if (rc < 0) {
            if (err.code) fprintf(stderr, "dsv4 chat: %s\n", err.msg);
            break;
        }
    }
    sigaction(SIGINT, &old_sa, NULL);
out:
    dsv4_spec_free(f.gen.spec);
    free(in.buf);
    cJSON_Delete(s.messages);
    dsv4_snapshot_free(s.eng, s.resume);
    free(s.toks);
    dsv4_chat_free(s.conv);
    dsv4_engine_free(s.eng);
    dsv4_tokenizer_free(s.tok);
    dsv4_model_close(model);
    return status;
}
