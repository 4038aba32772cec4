/* test_util_hash.c — SHA-256 (libcrypto wrapper) and CRC-32C against published vectors.
 *
 * SHA-256: FIPS 180-2 examples ("abc", the 448-bit message, a million 'a' fed in uneven
 * pieces) and the empty string. CRC-32C: the check value of "123456789" and the RFC 3720
 * B.4 vectors; the table against a bitwise computation from the polynomial; continuation
 * over split buffers equals the whole. */
#include <stdint.h>

#include "test.h"
#include "util/crc32c.h"
#include "util/sha256.h"

static void check_sha(const char *msg, const char *want) {
    uint8_t d[32];
    char hex[65];
    dsv4_err err = {0};
    CHECK_MSG(dsv4_sha256_buf(msg, strlen(msg), d, &err) == 0, "%s", err.msg);
    dsv4_sha256_hex(d, hex);
    CHECK_MSG(!strcmp(hex, want), "sha256(\"%.20s\") = %s, want %s", msg, hex, want);
}

static void test_sha256(void) {
    check_sha("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    check_sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a million 'a' in pieces of 1, 2, ... bytes: the incremental path */
    dsv4_err err = {0};
    dsv4_sha256 *h = dsv4_sha256_new(&err);
    CHECK(h != NULL);
    if (!h) return;
    char buf[1000];
    memset(buf, 'a', sizeof buf);
    size_t left = 1000000, piece = 1;
    while (left) {
        size_t n = piece < left ? piece : left;
        CHECK(dsv4_sha256_update(h, buf, n, &err) == 0 || (fprintf(stderr, "%s\n", err.msg), 0));
        left -= n;
        piece = piece % 999 + 1;
    }
    uint8_t d[32];
    char hex[65];
    CHECK(dsv4_sha256_final(h, d, &err) == 0);
    dsv4_sha256_free(h);
    dsv4_sha256_hex(d, hex);
    CHECK_MSG(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "1M a: %s", hex);
    /* u64 is little-endian bytes */
    h = dsv4_sha256_new(&err);
    CHECK(dsv4_sha256_u64(h, 0x0807060504030201ull, &err) == 0);
    CHECK(dsv4_sha256_final(h, d, &err) == 0);
    dsv4_sha256_free(h);
    uint8_t le[8] = {1, 2, 3, 4, 5, 6, 7, 8}, d2[32];
    CHECK(dsv4_sha256_buf(le, 8, d2, &err) == 0);
    CHECK(memcmp(d, d2, 32) == 0);
}

/* CRC-32C one bit at a time from the reflected polynomial: the definition. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static void test_crc32c(void) {
    CHECK(dsv4_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(dsv4_crc32c(0, "", 0) == 0);
    uint8_t b[32];
    memset(b, 0, sizeof b);
    CHECK(dsv4_crc32c(0, b, 32) == 0x8A9136AAu);
    memset(b, 0xff, sizeof b);
    CHECK(dsv4_crc32c(0, b, 32) == 0x62A8AB43u);
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
    CHECK(dsv4_crc32c(0, b, 32) == 0x46DD794Eu);
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
    CHECK(dsv4_crc32c(0, b, 32) == 0x113FDB5Cu);
    /* every byte value through the table, and continuation */
    uint8_t all[4096];
    uint64_t s = 12345;
    for (size_t i = 0; i < sizeof all; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        all[i] = (uint8_t)(s >> 56);
    }
    uint32_t whole = dsv4_crc32c(0, all, sizeof all);
    CHECK(whole == crc_bitwise(all, sizeof all));
    int cont_ok = 1;
    for (size_t cut = 0; cut <= sizeof all; cut += 337)
        cont_ok &= dsv4_crc32c(dsv4_crc32c(0, all, cut), all + cut, sizeof all - cut) == whole;
    CHECK(cont_ok);
    for (int v = 0; v < 256; v++) {
        uint8_t one = (uint8_t)v;
        if (dsv4_crc32c(0, &one, 1) != crc_bitwise(&one, 1)) {
            CHECK_MSG(0, "byte %d", v);
            break;
        }
    }
}

int main(void) {
    test_sha256();
    test_crc32c();
    return test_report();
}
