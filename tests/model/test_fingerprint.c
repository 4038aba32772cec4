/* test_fingerprint.c — the weights fingerprint and canonical config hash (serving.md §g).
 *
 * The sampled fingerprint of the tiny golden model is recomputed here from the files' bytes
 * by the documented layout (fingerprint.c); byte flips show what each mode sees (inside the
 * first 64 KiB sample: both change; past it in a model under 1 GiB: only the full hash);
 * another seed of the same config changes both; a reformatted config.json changes the
 * fingerprint but not the config hash, another eps changes the config hash. */
#include <stdint.h>

#include "model/model.h"
#include "model/generate.h"
#include "model_tmp.h"
#include "test.h"
#include "util/sha256.h"

typedef struct { uint8_t sampled[32], full[32], cfg[32]; int ok; } ids;

static ids ids_of(const char *dir) {
    ids r = {.ok = 0};
    dsv4_model *m = NULL;
    dsv4_err err = {0};
    if (dsv4_model_open(dir, &m, &err)) {
        CHECK_MSG(0, "open %s: %s", dir, err.msg);
        return r;
    }
    int rc = dsv4_model_fingerprint(m, 0, r.sampled, &err);
    if (!rc) rc = dsv4_model_fingerprint(m, 1, r.full, &err);
    if (!rc) rc = dsv4_model_config_hash(m, r.cfg, &err);
    CHECK_MSG(rc == 0, "%s: %s", dir, err.msg);
    r.ok = rc == 0;
    dsv4_model_close(m);
    return r;
}

static void put_u64(dsv4_sha256 *h, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    dsv4_sha256_update(h, b, 8, NULL);
}

/* The sampled fingerprint of a one-shard model under 1 GiB, from the layout's definition. */
static void expected_sampled(const char *cfg, size_t cfg_len, const uint8_t *st, size_t st_len,
                             uint8_t out[32]) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | st[i];
    uint64_t hdr = 8 + n, data = st_len - hdr, sample = data < 65536 ? data : 65536;
    dsv4_sha256 *h = dsv4_sha256_new(NULL);
    dsv4_sha256_update(h, "dsv4-weights-v1", 16, NULL); /* with the NUL */
    uint8_t mode = 0;
    dsv4_sha256_update(h, &mode, 1, NULL);
    put_u64(h, cfg_len);
    dsv4_sha256_update(h, cfg, cfg_len, NULL);
    put_u64(h, 1);
    put_u64(h, st_len);
    put_u64(h, hdr);
    dsv4_sha256_update(h, st, hdr, NULL);
    put_u64(h, 0);
    put_u64(h, sample);
    dsv4_sha256_update(h, st + hdr, sample, NULL);
    dsv4_sha256_final(h, out, NULL);
    dsv4_sha256_free(h);
}

/* dir/config.json and dir/model.safetensors from the given bytes. */
static int write_model(const char *dir, const char *cfg, size_t cfg_len, const uint8_t *st, size_t st_len) {
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (write_all(p, cfg, cfg_len)) return -1;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    return write_all(p, st, st_len);
}

int main(void) {
    char src[1024], p[1200];
    test_shared("golden/tiny_s0/model", src, sizeof src);
    size_t cfg_len = 0, st_len = 0;
    snprintf(p, sizeof p, "%s/config.json", src);
    char *cfg = read_all(p, &cfg_len);
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    uint8_t *st = (uint8_t *)read_all(p, &st_len);
    CHECK(cfg && st && st_len > (1u << 20));
    if (!cfg || !st) return test_report();

    ids base = ids_of(src), again = ids_of(src);
    CHECK(base.ok && again.ok);
    CHECK(!memcmp(base.sampled, again.sampled, 32) && !memcmp(base.full, again.full, 32));
    CHECK(memcmp(base.sampled, base.full, 32) != 0);
    uint8_t want[32];
    expected_sampled(cfg, cfg_len, st, st_len, want);
    CHECK_MSG(!memcmp(want, base.sampled, 32), "sampled fingerprint differs from the documented layout");

    char dir[256];
    CHECK(tmp_dir(dir, sizeof dir, "fp") != NULL);
    uint64_t hdr = 8;
    for (int i = 7; i >= 0; i--) hdr += (uint64_t)st[i] << (8 * i);
    /* a flip inside the first sample: both modes see it */
    st[hdr + 10] ^= 0x01;
    CHECK(write_model(dir, cfg, cfg_len, st, st_len) == 0);
    ids in = ids_of(dir);
    CHECK(in.ok && memcmp(in.sampled, base.sampled, 32) && memcmp(in.full, base.full, 32));
    CHECK(!memcmp(in.cfg, base.cfg, 32));
    st[hdr + 10] ^= 0x01;
    /* a flip past it: only the full hash (the documented limit of sampling) */
    st[hdr + 700000] ^= 0x40;
    CHECK(write_model(dir, cfg, cfg_len, st, st_len) == 0);
    ids past = ids_of(dir);
    CHECK(past.ok && !memcmp(past.sampled, base.sampled, 32) && memcmp(past.full, base.full, 32));
    st[hdr + 700000] ^= 0x40;
    /* the same config reformatted: another fingerprint, the same config hash */
    char *cfg2 = malloc(cfg_len + 2);
    cfg2[0] = ' ';
    memcpy(cfg2 + 1, cfg, cfg_len);
    CHECK(write_model(dir, cfg2, cfg_len + 1, st, st_len) == 0);
    ids ws = ids_of(dir);
    CHECK(ws.ok && memcmp(ws.sampled, base.sampled, 32) && !memcmp(ws.cfg, base.cfg, 32));
    free(cfg2);
    tmp_rm(dir);

    /* other weights of the same shapes (seeds 1, 2), and another eps */
    dsv4_config c;
    dsv4_err err = {0};
    snprintf(p, sizeof p, "%s/config.json", src);
    CHECK(dsv4_config_load(p, &c, &err) == 0);
    char d1[256], d2[256];
    CHECK(tmp_dir(d1, sizeof d1, "fp1") && tmp_dir(d2, sizeof d2, "fp2"));
    dsv4_gen_opts o1 = {.seed = 1, .dtype = DSV4_GEN_BF16}, o2 = {.seed = 2, .dtype = DSV4_GEN_BF16};
    CHECK(dsv4_gen_model(&c, &o1, d1, &err) == 0 && dsv4_gen_model(&c, &o2, d2, &err) == 0);
    ids s1 = ids_of(d1), s2 = ids_of(d2);
    CHECK(s1.ok && s2.ok && memcmp(s1.sampled, s2.sampled, 32) && memcmp(s1.full, s2.full, 32));
    CHECK(!memcmp(s1.cfg, s2.cfg, 32));
    c.rms_norm_eps *= 2;
    CHECK(dsv4_gen_model(&c, &o2, d2, &err) == 0);
    ids e2 = ids_of(d2);
    CHECK(e2.ok && memcmp(e2.cfg, s1.cfg, 32));
    tmp_rm(d1);
    tmp_rm(d2);
    free(cfg);
    free(st);
    return test_report();
}
