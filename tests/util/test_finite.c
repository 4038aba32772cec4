/* test_finite.c — dsv4_all_finite (util/finite.h), the forward's output check's fast pass:
 * every finite class passes (zeros of both signs, subnormals, FLT_MIN, FLT_MAX), and one
 * infinity or NaN (quiet, signalling, either sign, any payload) at any position of arrays
 * of 1-70 and a few thousand elements (the vector loop's body and its tail) fails it. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "test.h"
#include "util/finite.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* a finite value of every class, by index */
static float finite_at(int64_t i) {
    const float v[] = {0.0f, -0.0f, 1.0f, -2.5f, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
                       from_bits(0x00000001u), from_bits(0x807fffffu), from_bits(0x7f7fffffu), 3e38f};
    return v[i % (int64_t)(sizeof v / sizeof v[0])];
}

int main(void) {
    const uint32_t bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu, 0xffffffffu};
    const int64_t lens[] = {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 70, 1024, 4099};
    float *x = malloc(4099 * sizeof *x);
    CHECK(x != NULL);
    if (!x) return test_report();
    CHECK(dsv4_all_finite(x, 0) == 1);
    int fails = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int64_t n = lens[li];
        for (int64_t i = 0; i < n; i++) x[i] = finite_at(i);
        if (dsv4_all_finite(x, n) != 1) fails++;
        for (int64_t p = 0; p < n; p++)
            for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
                x[p] = from_bits(bad[b]);
                if (dsv4_all_finite(x, n) != 0) fails++;
                /* a value past the end is not read as part of the array */
                if (p == n - 1 && n > 1 && dsv4_all_finite(x, n - 1) != 1) fails++;
                x[p] = finite_at(p);
            }
    }
    CHECK_MSG(fails == 0, "%d wrong answers", fails);
    CHECK(!isfinite(from_bits(bad[0])) && isfinite(finite_at(4)));
    free(x);
    return test_report();
}
