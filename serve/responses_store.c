/* responses_store.c — the stored responses of OpenAI's Responses API (srv_rstore): each
 * response object and its conversation (input items, previous ones included, then output
 * items) by id, in an LRU under a byte cap (--responses-store-bytes), one entry at most
 * RS_ENTRY_SHARE-th of it; a background response's entry stays outside the LRU while it runs
 * (its run and log: responses_bg.c). Its mutex is a leaf lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/responses_int.h"
#include "serve/srv.h"

static unsigned rs_hash(const char *id) {
    unsigned h = 2166136261u;  /* FNV-1a */
    for (; *id; id++) h = (h ^ (unsigned char)*id) * 16777619u;
    return h % RS_BUCKETS;
}

srv_rstore *srv_rstore_create(size_t cap) {
    srv_rstore *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->wcv, NULL);
    pthread_cond_init(&st->idle, NULL);
    st->cap = cap;
    return st;
}

void rs_log_release(rs_log *l) {
    if (!l || atomic_fetch_sub(&l->refs, 1) > 1) return;
    srv_buf_free(&l->text);
    free(l->off);
    free(l->fol);  /* (empty: each follower holds a reference to l) */
    pthread_mutex_destroy(&l->mu);
    free(l);
}

void rs_run_release(rs_run *x) {
    if (!x || atomic_fetch_sub(&x->refs, 1) > 1) return;
    rs_log_release(x->log);
    srv_job_free(x->job);
    free(x);
}

static void rs_entry_free(rs_entry *e) {
    free(e->id);
    free(e->resp);
    free(e->conv);
    rs_run_release(e->run);
    rs_log_release(e->log);
    free(e);
}

void srv_rstore_free(srv_rstore *st) {
    if (!st) return;
    rs_worker_end(st);
    for (rs_entry *e = st->head, *n; e; e = n) {
        n = e->next;
        rs_entry_free(e);
    }
    pthread_cond_destroy(&st->wcv);
    pthread_cond_destroy(&st->idle);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* The link that points at id's entry (or at NULL, the bucket's end). Under mu. */
rs_entry **rs_link(srv_rstore *st, const char *id) {
    rs_entry **l = &st->bucket[rs_hash(id)];
    while (*l && strcmp((*l)->id, id)) l = &(*l)->hnext;
    return l;
}

static void lru_unlink(srv_rstore *st, rs_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else st->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else st->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_front(srv_rstore *st, rs_entry *e) {
    e->next = st->head;
    if (st->head) st->head->prev = e;
    st->head = e;
    if (!st->tail) st->tail = e;
}

/* Out of the table and the list, freed. Under mu. */
void rs_drop(srv_rstore *st, rs_entry **link) {
    rs_entry *e = *link;
    *link = e->hnext;
    lru_unlink(st, e);
    st->used -= e->bytes;
    rs_entry_free(e);
}

/* The least recently used entries go (but keep and running ones) until `more` bytes fit
 * under the cap; 0 when they cannot. Under mu. */
int rs_room(srv_rstore *st, size_t more, const rs_entry *keep) {
    rs_entry *e = st->tail;
    while (st->used + more > st->cap && e) {
        rs_entry *prev = e->prev;
        if (e != keep && !e->run) rs_drop(st, rs_link(st, e->id));
        e = prev;
    }
    return st->used + more <= st->cap;
}

/* The bytes of e but its log. */
size_t rs_base_bytes(const rs_entry *e) {
    return sizeof *e + strlen(e->id) + (e->resp ? strlen(e->resp) : 0) + (e->conv ? strlen(e->conv) : 0) + 3;
}

/* Keeps (id, resp, conv, n_in), taking the two texts (resp NULL: a background response that
 * starts running, run and log its own, a reference each taken); the least recently used
 * go until it fits. One larger than the cap's RS_ENTRY_SHARE-th part is not kept (an older
 * one of that id goes all the same: it is not this response). 1 when kept. */
int rs_put(srv_rstore *st, const char *id, char *resp, char *conv, int n_in, rs_run *run, rs_log *log) {
    rs_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->id = strdup(id))) {
        free(e);
        free(resp);
        free(conv);
        return 0;
    }
    e->resp = resp;
    e->conv = conv;
    e->conv_len = conv ? strlen(conv) : 0;
    e->n_in = n_in;
    e->bytes = rs_base_bytes(e);
    pthread_mutex_lock(&st->mu);
    rs_entry **l = rs_link(st, id);
    if (*l && !(*l)->run) rs_drop(st, l);
    if (*l || e->bytes > st->cap / RS_ENTRY_SHARE || !rs_room(st, e->bytes, NULL)) {
        pthread_mutex_unlock(&st->mu);
        rs_entry_free(e);
        return 0;
    }
    if (run) {
        e->bg = 1;
        atomic_fetch_add(&run->refs, 1);
        e->run = run;
        if (log) atomic_fetch_add(&log->refs, 1);
        e->log = log;
        e->streamed = log != NULL;
    }
    l = rs_link(st, id);
    *l = e;
    lru_front(st, e);
    st->used += e->bytes;
    pthread_mutex_unlock(&st->mu);
    return 1;
}

/* A copy of id's response object (conv = 0) or conversation (1; *n_in: its input items,
 * when n_in is not NULL), the entry made the most recently used; NULL when there is none
 * (or out of memory: *oom = 1; a background response still running: *oom = 2). */
char *rs_get(srv_rstore *st, const char *id, int conv, int *n_in, int *oom) {
    char *t = NULL;
    *oom = 0;
    pthread_mutex_lock(&st->mu);
    rs_entry *e = *rs_link(st, id);
    if (e && (e->run && (!conv || !n_in))) {
        *oom = 2;  /* (input_items, which asks n_in, may read a running one's input) */
        e = NULL;
    }
    if (e) {
        lru_unlink(st, e);
        lru_front(st, e);
        if (!(t = strdup(conv ? e->conv : e->resp))) *oom = 1;
        if (n_in) *n_in = e->n_in;
    }
    pthread_mutex_unlock(&st->mu);
    return t;
}

/* 1 deleted, 0 none, -1 a background response still running (not deleted). */
int rs_del(srv_rstore *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    rs_entry **l = rs_link(st, id);
    const int found = !*l ? 0 : (*l)->run ? -1 : 1;
    if (found > 0) rs_drop(st, l);
    pthread_mutex_unlock(&st->mu);
    return found;
}

/* id's entry, the most recently used now: a running background response's run (*run, a
 * reference), else a copy of its response object (*resp) and whether it ran in the
 * background (*bg). 0 when there is none (or out of memory: *oom). */
int rs_find(srv_rstore *st, const char *id, rs_run **run, char **resp, int *bg, int *oom) {
    *run = NULL;
    *resp = NULL;
    pthread_mutex_lock(&st->mu);
    rs_entry *e = *rs_link(st, id);
    if (e) {
        lru_unlink(st, e);
        lru_front(st, e);
        *bg = e->bg;
        if (e->run) {
            *run = e->run;
            atomic_fetch_add(&e->run->refs, 1);
        } else if (!(*resp = strdup(e->resp))) {
            *oom = 1;
        }
    }
    pthread_mutex_unlock(&st->mu);
    return *run || *resp;
}
