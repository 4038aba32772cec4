/* sha256.c — SHA-256 via libcrypto's EVP interface (see sha256.h). */
#include "util/sha256.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/err.h"

struct dsv4_sha256 {
    EVP_MD_CTX *ctx;
};

dsv4_sha256 *dsv4_sha256_new(dsv4_err *err) {
    dsv4_sha256 *h = calloc(1, sizeof *h);
    if (h && (h->ctx = EVP_MD_CTX_new()) && EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) == 1) return h;
    dsv4_sha256_free(h);
    dsv4_fail(err, DSV4_ERR_NOMEM, "sha256: cannot create a digest context");
    return NULL;
}

int dsv4_sha256_reset(dsv4_sha256 *h, dsv4_err *err) {
    if (EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "sha256: cannot restart the digest");
    return 0;
}

int dsv4_sha256_update(dsv4_sha256 *h, const void *data, size_t n, dsv4_err *err) {
    if (n && EVP_DigestUpdate(h->ctx, data, n) != 1)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "sha256: digest update failed");
    return 0;
}

int dsv4_sha256_u64(dsv4_sha256 *h, uint64_t v, dsv4_err *err) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    return dsv4_sha256_update(h, b, sizeof b, err);
}

int dsv4_sha256_final(dsv4_sha256 *h, uint8_t out[32], dsv4_err *err) {
    unsigned n = 0;
    if (EVP_DigestFinal_ex(h->ctx, out, &n) != 1 || n != 32)
        return dsv4_fail(err, DSV4_ERR_NOMEM, "sha256: digest final failed");
    return 0;
}

void dsv4_sha256_free(dsv4_sha256 *h) {
    if (!h) return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

int dsv4_sha256_buf(const void *data, size_t n, uint8_t out[32], dsv4_err *err) {
    dsv4_sha256 *h = dsv4_sha256_new(err);
    if (!h) return DSV4_ERR_NOMEM;
    int rc = dsv4_sha256_update(h, data, n, err);
    if (!rc) rc = dsv4_sha256_final(h, out, err);
    dsv4_sha256_free(h);
    return rc;
}

void dsv4_sha256_hex(const uint8_t d[32], char hex[65]) {
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}
