/* fuzz_config.c — libFuzzer target: any byte string through dsv4_config_parse.
 *
 * An accepted config must also survive the round trip: dsv4_config_to_json writes it back
 * and parsing that gives the identical struct (warnings aside: the written ratio list is
 * complete). A rejected one must say why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dsv4_config *a = calloc(2, sizeof *a), *b = a + 1;
    dsv4_err err;
    memset(&err, 0, sizeof err);
    if (dsv4_config_parse((const char *)data, size, a, &err) != 0) {
        if (err.msg[0] == 0 || memchr(err.msg, 0, sizeof err.msg) == NULL) __builtin_trap();
        free(a);
        return 0;
    }
    if (dsv4_config_validate(a, &err) != 0) __builtin_trap();
    char *json = dsv4_config_to_json(a);
    if (!json) __builtin_trap();
    if (dsv4_config_parse(json, strlen(json), b, &err) != 0) __builtin_trap();
    memset(a->warnings, 0, sizeof a->warnings);
    if (memcmp(a, b, sizeof *a) != 0) __builtin_trap();
    free(json);
    free(a);
    return 0;
}
