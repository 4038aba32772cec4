/* split.h — splits an answer's text, as it streams, into reasoning, content and the
 * tool-call block, without ever releasing part of a marker ("</think>", the DSML block
 * opening and the blank line before it) as text.
 *
 * The text is the whole answer so far (it only grows); each call releases the next piece.
 * Reasoning ends at "</think>" (thinking mode only); content ends where "\n\n" +
 * "<｜DSML｜tool_calls>" begins; everything after that is the tool-call block, which the
 * caller parses once the answer is complete (dsv4_dsml_parse). */
#ifndef DSV4_SERVE_SPLIT_H
#define DSV4_SERVE_SPLIT_H

#include <stddef.h>

enum { SRV_PART_REASONING = 0, SRV_PART_CONTENT, SRV_PART_TOOLS };

typedef struct srv_split {
    int part;    /* where pos is */
    size_t pos;  /* bytes of the text already released (or skipped as markers) */
    int tools;   /* tools were offered: a DSML block ends the content (else it is content) */
} srv_split;

/* thinking: the answer starts with reasoning; tools: a tool-call block may follow. */
void srv_split_init(srv_split *s, int thinking, int tools);
/* The next piece of text[0..len) to release, as *part and text[*off .. *off + *n); done: the
 * text is complete (release what was held back). Returns 0 when there is nothing more now.
 * Tool-block text is never returned: its part is entered and the rest is left to the
 * caller. */
int srv_split_next(srv_split *s, const char *text, size_t len, int done, int *part,
                   size_t *off, size_t *n);

#endif
