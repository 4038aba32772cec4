/* chat.h — DeepSeek-V4 chat encoding; the API is public (include/dsv4_text.h). Internal
 * users include this for the cJSON types the JSON entry points take. */
#ifndef DSV4_TOK_CHAT_H
#define DSV4_TOK_CHAT_H

#include <cjson/cJSON.h>

#include "dsv4_text.h"
#include "tok/dsml.h"

#endif
