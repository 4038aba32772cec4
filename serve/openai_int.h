/* openai_int.h — what the two OpenAI endpoints share: openai.c (chat completions) defines
 * it, completions.c (legacy completions) uses it too. Messages are MSG (1200) bytes. */
#ifndef DSV4_SERVE_OPENAI_INT_H
#define DSV4_SERVE_OPENAI_INT_H

#include "serve/srv.h"

/* ---- the choices of one job: choice 0 is the job itself, choice k its more[k - 1]; the
 * stream and final functions run with choice 0's mu held and take each other choice's
 * around its part */
srv_job *oa_choice(srv_job *j, int k);
void oa_choice_lock(srv_job *j, int k);
void oa_choice_unlock(srv_job *j, int k);
/* what a job's handler set on choice 0, on every choice */
void oa_spread(srv_job *j);
/* a job's prompts (a completions list: several) and the choices of each */
int oa_prompts_of(const srv_job *j);
int oa_per_prompt(const srv_job *j);
/* usage: each prompt counted once, the tokens of every choice */
cJSON *oa_usage_json(srv_job *j);
/* an answer's (or chunk's) id, object, created, model, system_fingerprint */
cJSON *oa_head(const srv *s, const srv_job *j, const char *object);
/* the stream of every choice (one_fn: one choice's new chunks up to its finish chunk, j->done
 * set then): once all are done, the usage chunk (include_usage) and [DONE], *finished set */
void oa_stream_choices(srv *s, srv_job *j, srv_buf *out, int *finished, const char *object,
                       void (*one_fn)(srv *, srv_job *, srv_buf *));

/* ---- request fields */
/* a count of choices (n, best_of): absent 1, else a whole number in [1, the cap]; 0 or -1 */
int oa_choices_field(const srv *s, const cJSON *body, const char *key, int *n, char *msg);
/* n, stream, stream_options; *param the field at fault (NULL: none); 0 or -1 */
int oa_common_fields(const srv *s, const cJSON *body, srv_job *tmp, int *n, const char **param, char *msg);
/* a 400 in OpenAI's shape naming the field at fault (param; NULL: none) */
void oa_bad_field(srv_reply *out, const char *param, const char *msg);

/* ---- log-probabilities */
/* a logprob as a JSON number, -inf as vLLM's -9999.0 */
cJSON *oa_lp_num(float x);
/* vLLM's prompt_logprobs of r's prompt (null first, then a dict a token) and its request
 * field (*k = count + 1, 0 when absent; 0 or -1 with a message) */
cJSON *oa_prompt_logprobs_json(const srv *s, const srv_req *r, int k);
int oa_prompt_logprobs_field(const srv *s, const cJSON *body, int stream, int *k, char *msg);

#endif
