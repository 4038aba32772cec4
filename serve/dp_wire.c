/* dp_wire.c — a request to its home rank and its news back (dp_wire.h).
 *
 * A request: id(i64) n_prompt prompt[n] sample(dsv4_sample_params) max_tokens
 *   n_stop {len bytes}[n_stop] n_bias bias_ids[n] bias[n] n_prefix prefix[n]
 *   n_forced (-1: none) forced[n] n_schema (-1: none) json_schema[n] json_after_think
 *   n_tools (-1: none) tools[n] tools_mode tools_single n_regex (-1: none) regex[n]
 *   n_choices {len bytes}[n_choices] n_grammar (-1: none) grammar[n] n_stop_ids stop_ids[n] ignore_eos min_tokens
 *   include_stop_str skip_special lead(i64: choice 0's id for choices
 *   1..n-1 of n > 1, sent in the same message before them; -1: none) priority
 * News of a request: id(i64) n_cached (-1: not admitted yet) n_items
 *   {EV token sample(dsv4_sample_out) len text[len] | TXT len text[len]}[n_items]
 *   end (SRV_END_*, 0: runs on) [finish stop_index len errmsg[len]]
 * The text of the events and TXT items, in order, is the home rank's text exactly, so the
 * client-facing request gets the same events with the same text offsets.
 */
#include "serve/dp_wire.h"

#include <stdlib.h>
#include <string.h>

#include "serve/srv.h"
#include "serve/util.h"

enum { ITEM_EV = 1, ITEM_TXT };

static void wr_ids(srv_buf *b, const int32_t *ids, int n) {
    srv_wr_i32(b, n);
    if (n > 0) srv_buf_put(b, (const char *)ids, (size_t)n * sizeof *ids);
}

/* A count read back: within [lo, cap] or the message is bad. */
static int rd_count(srv_rd *r, int lo, int cap) {
    const int n = srv_rd_i32(r);
    if (n < lo || n > cap) r->bad = 1;
    return r->bad ? 0 : n;
}

/* n ids (at most the bytes left) into a new array; NULL when n = 0 or bad. */
static int32_t *rd_ids(srv_rd *r, int n) {
    if (n <= 0 || r->bad) return NULL;
    const void *v = srv_rd_view(r, (size_t)n * sizeof(int32_t));
    int32_t *ids = v ? malloc((size_t)n * sizeof *ids) : NULL;
    if (ids) memcpy(ids, v, (size_t)n * sizeof *ids);
    else r->bad = 1;
    return ids;
}

void srv_wire_put_req(srv_buf *b, const srv_req *r) {
    srv_wr_i64(b, r->id);
    wr_ids(b, r->prompt, r->n_prompt);
    srv_buf_put(b, (const char *)&r->gp.sample, sizeof r->gp.sample);
    srv_wr_i32(b, r->gp.max_tokens);
    srv_wr_i32(b, r->gp.n_stop);
    for (int i = 0; i < r->gp.n_stop; i++) {
        const size_t n = strlen(r->gp.stop_strings[i]);
        srv_wr_i32(b, (int32_t)n);
        srv_buf_put(b, r->gp.stop_strings[i], n);
    }
    wr_ids(b, r->gp.bias_ids, r->gp.n_bias);
    if (r->gp.n_bias > 0) srv_buf_put(b, (const char *)r->gp.bias, (size_t)r->gp.n_bias * sizeof(float));
    wr_ids(b, r->prefix, r->n_prefix);
    if (r->forced) wr_ids(b, r->forced, r->n_forced);
    else srv_wr_i32(b, -1);
    /* structured output: the schema's text (the home rank's dsv4_gen compiles it) */
    const size_t n_schema = r->gp.json_schema ? strlen(r->gp.json_schema) : 0;
    srv_wr_i32(b, r->gp.json_schema ? (int32_t)n_schema : -1);
    srv_buf_put(b, r->gp.json_schema, n_schema);
    srv_wr_i32(b, r->gp.json_after_think);
    /* strict tool calls: the tools' text, the mode */
    const size_t n_tools = r->gp.tools ? strlen(r->gp.tools) : 0;
    srv_wr_i32(b, r->gp.tools ? (int32_t)n_tools : -1);
    srv_buf_put(b, r->gp.tools, n_tools);
    srv_wr_i32(b, r->gp.tools_mode);
    srv_wr_i32(b, r->gp.tools_single);
    /* guided decoding: the regex, the choices; the stop ids and the benchmark fields */
    const size_t n_rx = r->gp.regex ? strlen(r->gp.regex) : 0;
    srv_wr_i32(b, r->gp.regex ? (int32_t)n_rx : -1);
    srv_buf_put(b, r->gp.regex, n_rx);
    srv_wr_i32(b, r->gp.n_choices);
    for (int i = 0; i < r->gp.n_choices; i++) {
        const size_t n = strlen(r->gp.choices[i]);
        srv_wr_i32(b, (int32_t)n);
        srv_buf_put(b, r->gp.choices[i], n);
    }
    const size_t n_gram = r->gp.grammar ? strlen(r->gp.grammar) : 0;
    srv_wr_i32(b, r->gp.grammar ? (int32_t)n_gram : -1);
    srv_buf_put(b, r->gp.grammar, n_gram);
    wr_ids(b, r->gp.stop_tokens, r->gp.n_stop_tokens);
    srv_wr_i32(b, r->gp.ignore_eos);
    srv_wr_i32(b, r->gp.min_tokens);
    srv_wr_i32(b, r->gp.include_stop_str);
    srv_wr_i32(b, r->gp.skip_special);
    srv_wr_i64(b, r->lead ? r->lead->id : -1);
    srv_wr_i32(b, r->priority);
}

srv_req *srv_wire_get_req(srv_rd *rd, int64_t *lead) {
    const int64_t id = srv_rd_i64(rd);
    const int n_prompt = rd_count(rd, 1, 1 << 30);
    const void *prompt = srv_rd_view(rd, (size_t)n_prompt * sizeof(int32_t));
    if (rd->bad) return NULL;
    srv_req *r = srv_req_new(prompt, n_prompt);
    if (!r) return NULL;
    r->id = id;
    srv_rd_bytes(rd, &r->gp.sample, sizeof r->gp.sample);
    r->gp.max_tokens = srv_rd_i32(rd);
    const int n_stop = rd_count(rd, 0, 1 << 16);
    char **stops = calloc((size_t)n_stop + 1, sizeof *stops);
    int oom = !stops;
    for (int i = 0; stops && i < n_stop && !rd->bad; i++) {
        const int n = rd_count(rd, 0, 1 << 24);
        const char *t = srv_rd_view(rd, (size_t)n);
        if (t && !(stops[i] = strndup(t, (size_t)n))) oom = 1;
    }
    if (!rd->bad && !oom && srv_req_set_stops(r, (const char *const *)stops, n_stop)) oom = 1;
    for (int i = 0; stops && i < n_stop; i++) free(stops[i]);
    free(stops);
    const int n_bias = rd_count(rd, 0, 1 << 24);
    int32_t *ids = rd_ids(rd, n_bias);
    const void *bias = srv_rd_view(rd, (size_t)n_bias * sizeof(float));
    if (!rd->bad && n_bias && srv_req_set_bias(r, ids, bias, n_bias)) oom = 1;
    free(ids);
    r->n_prefix = rd_count(rd, 0, 1 << 24);
    r->prefix = rd_ids(rd, r->n_prefix);
    const int n_forced = rd_count(rd, -1, 1 << 24);
    if (n_forced >= 0) {
        /* an empty script is a script too: EOS right after the prefix */
        r->forced_own = n_forced ? rd_ids(rd, n_forced) : malloc(sizeof(int32_t));
        r->forced = r->forced_own;
        r->n_forced = n_forced;
        if (!r->forced_own) oom = 1;
    }
    const int n_schema = rd_count(rd, -1, 1 << 30);
    const char *schema = n_schema > 0 ? srv_rd_view(rd, (size_t)n_schema) : "";
    const int after_think = srv_rd_i32(rd);
    r->gp.json_after_think = after_think; /* a regex's or choice list's too */
    if (!rd->bad && n_schema >= 0) {
        char *t = strndup(schema, (size_t)n_schema);
        if (t) srv_req_set_json(r, t, after_think);
        else oom = 1;
    }
    const int n_tools = rd_count(rd, -1, 1 << 30);
    const char *tools = n_tools > 0 ? srv_rd_view(rd, (size_t)n_tools) : "";
    const int tools_mode = srv_rd_i32(rd), tools_single = srv_rd_i32(rd);
    if (!rd->bad && n_tools >= 0) {
        char *t = strndup(tools, (size_t)n_tools);
        if (t) srv_req_set_tools(r, t, tools_mode, tools_single, after_think);
        else oom = 1;
    }
    const int n_rx = rd_count(rd, -1, 1 << 30);
    const char *rx = n_rx > 0 ? srv_rd_view(rd, (size_t)n_rx) : "";
    char *rx_text = !rd->bad && n_rx >= 0 ? strndup(rx ? rx : "", (size_t)n_rx) : NULL;
    if (!rd->bad && n_rx >= 0 && !rx_text) oom = 1;
    const int n_choices = rd_count(rd, 0, 1 << 20);
    char **choices = calloc((size_t)n_choices + 1, sizeof *choices);
    if (!choices) oom = 1;
    for (int i = 0; choices && i < n_choices && !rd->bad; i++) {
        const int n = rd_count(rd, 0, 1 << 24);
        const char *t = srv_rd_view(rd, (size_t)n);
        if (t && !(choices[i] = strndup(t, (size_t)n))) oom = 1;
    }
    if (!rd->bad && !oom && srv_req_set_guide(r, rx_text, (const char *const *)choices, n_choices)) oom = 1;
    for (int i = 0; choices && i < n_choices; i++) free(choices[i]);
    free(choices);
    free(rx_text);
    const int n_gram = rd_count(rd, -1, 1 << 30);
    const char *gram = n_gram > 0 ? srv_rd_view(rd, (size_t)n_gram) : "";
    if (!rd->bad && n_gram >= 0) {
        char *t = strndup(gram ? gram : "", (size_t)n_gram);
        if (!t || srv_req_set_grammar(r, t)) oom = 1;
        free(t);
    }
    const int n_stop_ids = rd_count(rd, 0, 1 << 24);
    int32_t *stop_ids = rd_ids(rd, n_stop_ids);
    if (!rd->bad && srv_req_set_stop_ids(r, stop_ids, n_stop_ids)) oom = 1;
    free(stop_ids);
    r->gp.ignore_eos = srv_rd_i32(rd);
    r->gp.min_tokens = srv_rd_i32(rd);
    r->gp.include_stop_str = srv_rd_i32(rd);
    r->gp.skip_special = srv_rd_i32(rd);
    *lead = srv_rd_i64(rd);
    if (*lead < -1 || *lead >= id) rd->bad = 1;  /* choice 0 came first */
    r->priority = srv_rd_i32(rd);
    if (rd->bad || oom) {
        srv_req_release(r);
        srv_req_release(r);
        return NULL;
    }
    return r;
}

int srv_wire_put_news(srv_buf *b, srv_req *r) {
    pthread_mutex_lock(&r->mu);
    const int cached = r->admitted && !r->dp_sent_cached;
    if (r->n_ev == r->dp_sent_ev && r->text_len == r->dp_sent_text && !r->end && !cached) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    srv_wr_i64(b, r->id);
    srv_wr_i32(b, cached ? r->n_cached : -1);
    r->dp_sent_cached |= cached;
    /* the events, each after the text released before it, then the text after them */
    size_t at = r->dp_sent_text;
    int n_items = 0;
    const size_t count_at = b->n;
    srv_wr_i32(b, 0);
    for (int i = r->dp_sent_ev; i < r->n_ev; i++) {
        const srv_event *e = &r->ev[i];
        if (e->text_off > at) {
            srv_wr_i32(b, ITEM_TXT);
            srv_wr_i64(b, (int64_t)(e->text_off - at));
            srv_buf_put(b, r->text + at, e->text_off - at);
            n_items++;
        }
        srv_wr_i32(b, ITEM_EV);
        srv_wr_i32(b, e->token);
        srv_buf_put(b, (const char *)&e->sample, sizeof e->sample);
        srv_wr_i64(b, (int64_t)e->text_len);
        srv_buf_put(b, r->text + e->text_off, e->text_len);
        at = e->text_off + e->text_len;
        n_items++;
    }
    if (r->text_len > at) {
        srv_wr_i32(b, ITEM_TXT);
        srv_wr_i64(b, (int64_t)(r->text_len - at));
        srv_buf_put(b, r->text + at, r->text_len - at);
        n_items++;
    }
    if (!b->oom) memcpy(b->s + count_at, &n_items, sizeof n_items);
    r->dp_sent_ev = r->n_ev;
    r->dp_sent_text = r->text_len;
    const int end = r->end;
    srv_wr_i32(b, end);
    if (end) {
        srv_wr_i32(b, r->finish);
        srv_wr_i32(b, r->stop_index);
        const size_t n = strnlen(r->errmsg, sizeof r->errmsg);
        srv_wr_i32(b, (int32_t)n);
        srv_buf_put(b, r->errmsg, n);
    }
    pthread_mutex_unlock(&r->mu);
    return end != 0;
}

int64_t srv_wire_news_id(srv_rd *rd) { return srv_rd_i64(rd); }

int srv_wire_apply_news(srv_rd *rd, srv_req *r, srv_metrics *met, int *end_out, int *fin_out, char *msg) {
    const int cached = srv_rd_i32(rd);
    if (cached >= 0) {
        pthread_mutex_lock(&r->mu);
        r->n_cached = cached;
        pthread_mutex_unlock(&r->mu);
    }
    const int n_items = rd_count(rd, 0, 1 << 30);
    for (int i = 0; i < n_items && !rd->bad; i++) {
        const int kind = srv_rd_i32(rd);
        dsv4_gen_token t = {0};
        if (kind == ITEM_EV) {
            t.token = srv_rd_i32(rd);
            srv_rd_bytes(rd, &t.sample, sizeof t.sample);
        } else if (kind != ITEM_TXT) {
            rd->bad = 1;
            break;
        }
        const int64_t n = srv_rd_i64(rd);
        const char *text = n >= 0 ? srv_rd_view(rd, (size_t)n) : NULL;
        if (!text && n) rd->bad = 1;
        if (rd->bad) break;
        if (kind == ITEM_TXT) {
            srv_req_push_text(r, text, (size_t)n);
            continue;
        }
        t.text = text;
        t.text_len = (size_t)n;
        const double now = srv_now();
        srv_metrics_latency(met, r->n_sampled ? -1 : now - r->t_arrival, r->n_sampled ? now - r->t_last : -1);
        r->t_last = now;
        r->n_sampled++;
        srv_req_push(r, &t);
    }
    const int end = srv_rd_i32(rd);
    if (rd->bad) return 0;
    if (!end) return 0;
    *end_out = end;
    *fin_out = srv_rd_i32(rd);
    r->stop_index = srv_rd_i32(rd);
    const int n = rd_count(rd, 0, (int)sizeof r->errmsg - 1);
    srv_rd_bytes(rd, msg, (size_t)n);
    msg[n] = 0;
    return 1;
}

int64_t srv_keys_minus(const uint64_t *a, int64_t na, const uint64_t *b, int64_t nb, uint64_t *out) {
    int64_t n = 0, j = 0;
    for (int64_t i = 0; i < na; i++) {
        while (j < nb && b[j] < a[i]) j++;
        if (j == nb || b[j] != a[i]) out[n++] = a[i];
    }
    return n;
}

int64_t srv_keys_apply(const uint64_t *held, int64_t n, const uint64_t *del, int64_t nd,
                       const uint64_t *add, int64_t na, uint64_t *out) {
    int64_t m = 0, d = 0, a = 0;
    for (int64_t i = 0; i <= n; i++) {
        /* the added keys below held[i] (all that are left after the last), then held[i]
         * unless deleted */
        while (a < na && (i == n || add[a] < held[i])) {
            /* an added key held already comes after its held copy (or a repeated one
             * after the first): kept once */
            if (!m || out[m - 1] != add[a]) out[m++] = add[a];
            a++;
        }
        if (i == n) break;
        while (d < nd && del[d] < held[i]) d++;
        if (d < nd && del[d] == held[i]) continue;
        out[m++] = held[i];
    }
    return m;
}

uint64_t srv_keys_sum(const uint64_t *k, int64_t n) {
    /* the sets hold distinct keys: a sum (or equally a xor) of a bijective mix of each
     * changes with any one key more, less or other, except the one key that mixes to 0 */
    uint64_t s = 0;
    for (int64_t i = 0; i < n; i++) {
        s += srv_splitmix64(k[i] + 0x9e3779b97f4a7c15ull);
    }
    return s;
}

/* *keys with room for n (*cap); 0, or -1 when out of memory. */
static int grow_keys(uint64_t **keys, int64_t *cap, int64_t n) {
    if (n <= *cap) return 0;
    uint64_t *k = realloc(*keys, (size_t)n * sizeof *k);
    if (!k) return -1;
    *keys = k;
    *cap = n;
    return 0;
}

#define KEYS_UNCHANGED (-1)
#define KEYS_DELTA (-2)

void srv_keys_put(srv_keys_tx *tx, srv_buf *b, const uint64_t *own, int64_t n) {
    if (n == tx->n_sent && (!n || !memcmp(own, tx->sent, (size_t)n * sizeof *own))) {
        srv_wr_i64(b, KEYS_UNCHANGED);
        srv_wr_i64(b, (int64_t)tx->sum);
        return;
    }
    const int64_t old = tx->n_sent < 0 ? 0 : tx->n_sent;
    if (grow_keys(&tx->sent, &tx->cap_sent, n) || grow_keys(&tx->delta, &tx->cap_delta, old + n)) {
        srv_wr_i64(b, 0);  /* out of memory: none now, the whole list next time */
        tx->n_sent = -1;
        tx->sum = srv_keys_sum(NULL, 0);
        srv_wr_i64(b, (int64_t)tx->sum);
        return;
    }
    int64_t gone = 0, added = 0;
    if (tx->n_sent >= 0) {
        gone = srv_keys_minus(tx->sent, tx->n_sent, own, n, tx->delta);
        added = srv_keys_minus(own, n, tx->sent, tx->n_sent, tx->delta + gone);
    }
    if (tx->n_sent >= 0 && gone + added < n) {
        srv_wr_i64(b, KEYS_DELTA);
        srv_wr_i64(b, gone);
        srv_buf_put(b, (const char *)tx->delta, (size_t)gone * sizeof *tx->delta);
        srv_wr_i64(b, added);
        srv_buf_put(b, (const char *)(tx->delta + gone), (size_t)added * sizeof *tx->delta);
    } else {
        srv_wr_i64(b, n);
        srv_buf_put(b, (const char *)own, (size_t)n * sizeof *own);
    }
    if (n) memcpy(tx->sent, own, (size_t)n * sizeof *own);
    tx->n_sent = n;
    tx->sum = srv_keys_sum(own, n);
    srv_wr_i64(b, (int64_t)tx->sum);
}

void srv_keys_resend(srv_keys_tx *tx) { tx->n_sent = -1; }

void srv_keys_tx_free(srv_keys_tx *tx) {
    free(tx->sent);
    free(tx->delta);
    *tx = (srv_keys_tx){.n_sent = -1};
}

int srv_keys_set(srv_keys_rx *h, const void *k, int64_t n) {
    const int rc = grow_keys(&h->k, &h->cap, n);
    h->n = rc ? 0 : n;
    if (h->n) memcpy(h->k, k, (size_t)n * sizeof *h->k);
    h->sum = srv_keys_sum(h->k, h->n);
    return rc;
}

/* n keys of a report: a view of its bytes (maybe unaligned: read with memcpy), or NULL with
 * rd->bad when the report is shorter. */
static const void *rd_keys(srv_rd *rd, int64_t n) {
    if (n < 0 || (uint64_t)n > (uint64_t)(rd->end - rd->p) / sizeof(uint64_t)) rd->bad = 1;
    return rd->bad ? NULL : srv_rd_view(rd, (size_t)n * sizeof(uint64_t));
}

static int ascending(const uint64_t *k, int64_t n) {
    for (int64_t i = 1; i < n; i++)
        if (k[i - 1] >= k[i]) return 0;
    return 1;
}

/* The keys gone and the keys new (KEYS_DELTA) applied to h. 0, or -1 when malformed. Out
 * of memory: h stays as it was, or empty (srv_keys_set); its checksum then tells. */
static int apply_delta(srv_keys_rx *h, srv_rd *rd) {
    const int64_t nd = srv_rd_i64(rd);
    const void *dv = rd_keys(rd, nd);
    const int64_t na = rd->bad ? 0 : srv_rd_i64(rd);
    const void *av = rd_keys(rd, na);
    if (rd->bad) return -1;
    /* the gone keys, the new ones, then the result (at most n + na) */
    const int fail = h->fail_next;
    h->fail_next = 0;
    uint64_t *buf = fail ? NULL : malloc((size_t)(nd + na + h->n + na + 1) * sizeof *buf);
    if (!buf) return 0;
    uint64_t *del = buf, *add = buf + nd, *out = add + na;
    if (nd) memcpy(del, dv, (size_t)nd * sizeof *del);
    if (na) memcpy(add, av, (size_t)na * sizeof *add);
    int rc = -1;
    if (ascending(del, nd) && ascending(add, na)) {
        srv_keys_set(h, out, srv_keys_apply(h->k, h->n, del, nd, add, na, out));
        rc = 0;
    }
    free(buf);
    return rc;
}

int srv_keys_get(srv_keys_rx *h, srv_rd *rd) {
    const int64_t nh = srv_rd_i64(rd);
    if (nh == KEYS_DELTA) {
        if (apply_delta(h, rd)) return -1;
    } else {
        const void *keys = rd_keys(rd, nh < 0 ? 0 : nh);
        if (nh < KEYS_UNCHANGED || rd->bad) return -1;
        /* copied out aligned, then checked ascending (the merge of later changes relies on it) */
        if (nh >= 0 && !srv_keys_set(h, keys, nh) && !ascending(h->k, h->n)) return -1;
    }
    const uint64_t sum = (uint64_t)srv_rd_i64(rd);
    if (rd->bad) return -1;
    return sum != h->sum;
}

void srv_keys_rx_free(srv_keys_rx *h) {
    free(h->k);
    *h = (srv_keys_rx){0};
}
