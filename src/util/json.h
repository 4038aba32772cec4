/* json.h — naming a cJSON value's type in error messages ("must be a number, got a
 * string"), shared by the config, safetensors and index readers; and a file's text parsed
 * as one whole JSON value (config.json, generation_config.json). */
#ifndef DSV4_UTIL_JSON_H
#define DSV4_UTIL_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

static inline const char *dsv4_json_kind(const cJSON *j) {
    if (!j) return "missing";
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "invalid";
}

/* text (len bytes, NUL at text[len]) parsed as one JSON value with nothing but blanks after
 * it, as any JSON reader takes a file. NULL on an error, *at then the byte it is at (and
 * *trailing = 1 when the value parsed but text follows it). */
static inline cJSON *dsv4_json_parse_whole(const char *text, size_t len, size_t *at, int *trailing) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 0);
    *trailing = 0;
    if (!root) {
        *at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return NULL;
    }
    size_t off = (size_t)(end - text);
    while (off < len && (text[off] == ' ' || text[off] == '\t' || text[off] == '\n' || text[off] == '\r')) off++;
    if (off < len) {
        cJSON_Delete(root);
        *at = off, *trailing = 1;
        return NULL;
    }
    return root;
}

#endif
