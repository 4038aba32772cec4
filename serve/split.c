/* split.c — reasoning / content / tool-block split of streamed text (split.h). */
#include "serve/split.h"

#include "serve/util.h"

#include <string.h>

#define THINK_END "</think>"
#define TOOLS_OPEN "\n\n<｜DSML｜tool_calls>"

void srv_split_init(srv_split *s, int thinking, int tools) {
    s->part = thinking ? SRV_PART_REASONING : SRV_PART_CONTENT;
    s->pos = 0;
    s->tools = tools;
}

int srv_split_next(srv_split *s, const char *text, size_t len, int done, int *part,
                   size_t *off, size_t *n) {
    while (s->part != SRV_PART_TOOLS && s->pos < len) {
        const char *t = text + s->pos;
        size_t left = len - s->pos;
        if (s->part == SRV_PART_CONTENT && !s->tools) {
            /* no tools offered: everything after the reasoning is content */
            *part = s->part;
            *off = s->pos;
            *n = left;
            s->pos = len;
            return 1;
        }
        const char *marker = s->part == SRV_PART_REASONING ? THINK_END : TOOLS_OPEN;
        size_t at = srv_find(t, left, 0, marker);
        /* the DSML block may also follow content without the blank line */
        if (s->part == SRV_PART_CONTENT) {
            size_t bare = srv_find(t, left, 0, &TOOLS_OPEN[2]);
            if (bare < at) at = bare;
        }
        size_t upto = at;
        if (at == left && !done) {
            size_t hold = srv_partial_tail(t, left, marker);
            if (s->part == SRV_PART_CONTENT) {
                size_t h2 = srv_partial_tail(t, left, &TOOLS_OPEN[2]);
                if (h2 > hold) hold = h2;
            }
            upto = left - hold;
        }
        *part = s->part;
        *off = s->pos;
        *n = upto;
        s->pos += upto;
        if (at < left) {
            /* the marker: reasoning ends (skip "</think>"); the tool block begins */
            if (s->part == SRV_PART_REASONING) {
                s->pos += strlen(THINK_END);
                s->part = SRV_PART_CONTENT;
            } else {
                s->part = SRV_PART_TOOLS;
            }
        }
        if (upto) return 1;
        if (at == left) return 0;
    }
    return 0;
}
