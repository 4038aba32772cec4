/* tokenizer.h — byte-level BPE tokenizer read from a Hugging Face tokenizer.json.
 *
 * Pipeline of an encode (the HF `tokenizers` order):
 *   1. added tokens (special or not) are cut out of the raw text, leftmost-longest;
 *   2. every other stretch goes through the normalizer (only identity ones are supported),
 *   3. the pre-tokenizer (Split regexes run with PCRE2 in UTF+UCP mode, then ByteLevel),
 *   4. the BPE model: byte symbols merged by rank, lowest rank first, leftmost on ties.
 * No BOS/EOS is ever added: the chat encoding writes them itself.
 *
 * Decoding maps every id to the bytes its token stands for (the ByteLevel decoder) and
 * turns the concatenation into UTF-8, each invalid stretch replaced by U+FFFD the way
 * Rust's String::from_utf8_lossy does it. The streaming decoder gives the same text piece
 * by piece and never emits a partial character.
 *
 * A loaded dsv4_tokenizer is read-only apart from an internal, mutex-guarded word cache:
 * several threads may encode and decode with one tokenizer at the same time.
 */
#ifndef DSV4_TOK_TOKENIZER_H
#define DSV4_TOK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4.h"

typedef struct dsv4_tokenizer dsv4_tokenizer;

/* A growable list of token ids. Start from {0}; dsv4_tokenize appends to it. */
typedef struct dsv4_tok_ids {
    int32_t *ids;  /* [cap], the first n used */
    size_t n, cap;
} dsv4_tok_ids;

void dsv4_tok_ids_free(dsv4_tok_ids *ids);

/* Reads a tokenizer.json. Errors: DSV4_ERR_IO (unreadable), DSV4_ERR_FORMAT (not JSON,
 * missing or mistyped fields, bad regex, merge of unknown tokens), DSV4_ERR_UNSUPPORTED
 * (a normalizer, pre-tokenizer, model or decoder type this build does not implement). */
int dsv4_tokenizer_load(const char *path, dsv4_tokenizer **out, dsv4_err *err);
/* Same, from the JSON text in memory (len bytes, need not be NUL-terminated). */
int dsv4_tokenizer_load_json(const char *json, size_t len, dsv4_tokenizer **out, dsv4_err *err);
void dsv4_tokenizer_free(dsv4_tokenizer *tok);

/* Flags of dsv4_tokenize_ex. */
enum {
    /* Do not recognise added/special token strings: "<｜User｜>" in the text is encoded as
     * ordinary characters (for untrusted content that must not forge control tokens). */
    DSV4_TOK_NO_ADDED = 1 << 0,
};

/* Encodes len bytes of UTF-8 text and appends the ids to out. Literal added-token strings
 * become those tokens. Errors: DSV4_ERR_ARG for text that is not valid UTF-8 (the message
 * names the byte offset), DSV4_ERR_NOMEM. On error out->n is left as it was. */
int dsv4_tokenize(const dsv4_tokenizer *tok, const char *text, size_t len, dsv4_tok_ids *out,
                  dsv4_err *err);
int dsv4_tokenize_ex(const dsv4_tokenizer *tok, const char *text, size_t len, int flags,
                     dsv4_tok_ids *out, dsv4_err *err);

/* Flags of dsv4_detokenize. */
enum {
    DSV4_DETOK_SKIP_SPECIAL = 1 << 0,  /* drop tokens marked "special" in added_tokens */
};

/* Decodes n ids to UTF-8. *text is malloc'ed and NUL-terminated (the caller frees it);
 * *text_len excludes the NUL. Errors: DSV4_ERR_ARG for an id that has no token (negative,
 * past the vocabulary, or a hole in it), naming the id and its index. */
int dsv4_detokenize(const dsv4_tokenizer *tok, const int32_t *ids, size_t n, int flags,
                    char **text, size_t *text_len, dsv4_err *err);

/* ---- streaming decode ---------------------------------------------------------------- */

typedef struct dsv4_tok_stream dsv4_tok_stream;

int dsv4_tok_stream_new(const dsv4_tokenizer *tok, int flags, dsv4_tok_stream **out,
                        dsv4_err *err);
void dsv4_tok_stream_free(dsv4_tok_stream *s);
/* Feeds one id. *text and *len receive the newly completed UTF-8 (possibly empty), valid
 * until the next call on s. Bytes of a character still incomplete are held back. An id
 * without a token returns DSV4_ERR_ARG and leaves the stream as it was. */
int dsv4_tok_stream_push(dsv4_tok_stream *s, int32_t id, const char **text, size_t *len,
                         dsv4_err *err);
/* Ends the stream: held-back bytes that never completed a character come out as U+FFFD.
 * The stream is then empty and can be reused. */
void dsv4_tok_stream_flush(dsv4_tok_stream *s, const char **text, size_t *len);

/* ---- lookups ------------------------------------------------------------------------- */

/* One more than the largest id (vocabulary and added tokens). */
int dsv4_tok_vocab_size(const dsv4_tokenizer *tok);
/* Id of a token given in its tokenizer.json spelling ("<｜end▁of▁sentence｜>", "Ġthe"),
 * added tokens first; -1 if there is none. */
int32_t dsv4_tok_token_to_id(const dsv4_tokenizer *tok, const char *token);
/* The tokenizer.json spelling of an id, or NULL for an id without a token. */
const char *dsv4_tok_id_to_token(const dsv4_tokenizer *tok, int32_t id);
/* The bytes an id decodes to (not NUL-terminated; may be a partial UTF-8 character), or
 * NULL for an id without a token. */
const char *dsv4_tok_id_bytes(const dsv4_tokenizer *tok, int32_t id, size_t *len);
/* 1 if the id is an added token / an added token marked special, else 0. */
int dsv4_tok_is_added(const dsv4_tokenizer *tok, int32_t id);
int dsv4_tok_is_special(const dsv4_tokenizer *tok, int32_t id);

#endif
