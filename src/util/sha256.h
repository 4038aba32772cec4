/* sha256.h — SHA-256 through OpenSSL's libcrypto (EVP), the one hash of the tree: weights
 * fingerprints, the canonical config hash, KV file headers. Incremental (update as often as
 * needed) or one-shot. */
#ifndef DSV4_UTIL_SHA256_H
#define DSV4_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4.h"

typedef struct dsv4_sha256 dsv4_sha256;

/* A fresh context, or NULL with DSV4_ERR_NOMEM in err. */
dsv4_sha256 *dsv4_sha256_new(dsv4_err *err);
/* Starts a new digest on h, whatever it held (a context kept for many digests: nothing of
 * ours is allocated again). */
int dsv4_sha256_reset(dsv4_sha256 *h, dsv4_err *err);
/* Adds n bytes. Returns 0, or DSV4_ERR_NOMEM-style failure of the library (never expected
 * for SHA-256; reported rather than ignored). */
int dsv4_sha256_update(dsv4_sha256 *h, const void *data, size_t n, dsv4_err *err);
/* Little-endian integers, so a hash over numbers does not depend on the host. */
int dsv4_sha256_u64(dsv4_sha256 *h, uint64_t v, dsv4_err *err);
/* Writes the digest; the context is then spent (free it). */
int dsv4_sha256_final(dsv4_sha256 *h, uint8_t out[32], dsv4_err *err);
void dsv4_sha256_free(dsv4_sha256 *h);

/* One-shot digest of a buffer. */
int dsv4_sha256_buf(const void *data, size_t n, uint8_t out[32], dsv4_err *err);

/* 64 lowercase hex digits + NUL into hex. */
void dsv4_sha256_hex(const uint8_t d[32], char hex[65]);

#endif
