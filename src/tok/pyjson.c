/* pyjson.c — Python-compatible JSON serialization (see pyjson.h). */
#include "tok/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsv4_pyjson_string(dsv4_tbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    dsv4_tbuf_putc(b, '"');
    size_t run = 0;  /* start of the current stretch that needs no escaping */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                memcpy(u, "\\u00", 4);
                u[4] = hex[c >> 4];
                u[5] = hex[c & 15];
                u[6] = 0;
                esc = u;
            }
        }
        if (!esc) continue;
        dsv4_tbuf_put(b, s + run, i - run);
        dsv4_tbuf_puts(b, esc);
        run = i + 1;
    }
    dsv4_tbuf_put(b, s + run, n - run);
    dsv4_tbuf_putc(b, '"');
}

/* Python's repr(float): the shortest decimal that reads back as the same double, in fixed
 * notation when the decimal exponent is in [-4, 16), else d.ddde+XX. */
static void put_float_repr(dsv4_tbuf *b, double x) {
    char sci[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec - 1, x);
        if (strtod(sci, NULL) == x) break;
    }
    /* sci = [-]d[.ddd]e[+-]XX: collect the digits and the exponent. */
    const char *p = sci;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < (int)sizeof digits - 1) digits[nd++] = *p;
    digits[nd] = 0;
    int e = (*p == 'e') ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;  /* %.*e may pad with zeros */

    if (neg) dsv4_tbuf_putc(b, '-');
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) dsv4_tbuf_putc(b, i < nd ? digits[i] : '0');
            dsv4_tbuf_putc(b, '.');
            if (nd > e + 1) dsv4_tbuf_put(b, digits + e + 1, (size_t)(nd - e - 1));
            else dsv4_tbuf_putc(b, '0');
        } else {
            dsv4_tbuf_puts(b, "0.");
            for (int i = 0; i < -e - 1; i++) dsv4_tbuf_putc(b, '0');
            dsv4_tbuf_put(b, digits, (size_t)nd);
        }
    } else {
        char tail[16];
        dsv4_tbuf_putc(b, digits[0]);
        if (nd > 1) {
            dsv4_tbuf_putc(b, '.');
            dsv4_tbuf_put(b, digits + 1, (size_t)(nd - 1));
        }
        snprintf(tail, sizeof tail, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
        dsv4_tbuf_puts(b, tail);
    }
}

void dsv4_pyjson_number(dsv4_tbuf *b, double x) {
    char tmp[40];
    if (isnan(x)) { dsv4_tbuf_puts(b, "NaN"); return; }
    if (isinf(x)) { dsv4_tbuf_puts(b, x < 0 ? "-Infinity" : "Infinity"); return; }
    if (x == 0) { dsv4_tbuf_putc(b, '0'); return; }  /* JSON "-0" is Python int 0 */
    if (x == floor(x) && fabs(x) < 1e18) {
        snprintf(tmp, sizeof tmp, "%.0f", x);
        dsv4_tbuf_puts(b, tmp);
        return;
    }
    put_float_repr(b, x);
}

void dsv4_pyjson_value(dsv4_tbuf *b, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) { dsv4_tbuf_puts(b, "null"); return; }
    if (cJSON_IsTrue(v)) { dsv4_tbuf_puts(b, "true"); return; }
    if (cJSON_IsFalse(v)) { dsv4_tbuf_puts(b, "false"); return; }
    if (cJSON_IsNumber(v)) { dsv4_pyjson_number(b, v->valuedouble); return; }
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring ? v->valuestring : "";
        dsv4_pyjson_string(b, s, strlen(s));
        return;
    }
    if (cJSON_IsRaw(v)) { dsv4_tbuf_puts(b, v->valuestring); return; }
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v)) { dsv4_tbuf_puts(b, "null"); return; }
    int is_obj = cJSON_IsObject(v);
    dsv4_tbuf_putc(b, is_obj ? '{' : '[');
    int first = 1;
    for (const cJSON *c = v->child; c; c = c->next) {
        if (!first) dsv4_tbuf_puts(b, ", ");
        first = 0;
        if (is_obj) {
            const char *k = c->string ? c->string : "";
            dsv4_pyjson_string(b, k, strlen(k));
            dsv4_tbuf_puts(b, ": ");
        }
        dsv4_pyjson_value(b, c);
    }
    dsv4_tbuf_putc(b, is_obj ? '}' : ']');
}
