/* test_safetensors.c — the safetensors reader on valid, malformed and sharded inputs.
 *
 * Malformed files are built in memory, one per class of damage, and each must fail with its
 * own message. The golden checkpoint's shapes are derived from its config (spec/model.md
 * §2.2), and its header is counted independently with cJSON. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "model/safetensors.h"
#include "test.h"

/* ---- building file images ---------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n;
} image;

/* 8-byte length field (hlen_field), the header text, then data_len bytes of i & 0xff. */
static image make_raw(uint64_t hlen_field, const char *header, size_t data_len) {
    size_t h = strlen(header);
    image im = {malloc(8 + h + data_len + 1), 8 + h + data_len};
    for (int i = 0; i < 8; i++) im.p[i] = (uint8_t)(hlen_field >> (8 * i));
    memcpy(im.p + 8, header, h);
    for (size_t i = 0; i < data_len; i++) im.p[8 + h + i] = (uint8_t)i;
    return im;
}

static image make_image(const char *header, size_t data_len) {
    return make_raw(strlen(header), header, data_len);
}

static int write_file(const char *path, image im) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(im.p, 1, im.n, f);
    fclose(f);
    return w == im.n ? 0 : -1;
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f);
    fclose(f);
    return 0;
}

/* The header must be rejected with a DSV4_ERR_FORMAT message containing want. */
static void expect_bad_image(image im, const char *want, int line) {
    dsv4_st_set *s = (dsv4_st_set *)1;
    dsv4_err e = {0};
    int rc = dsv4_st_open_buffer(im.p, im.n, &s, &e);
    CHECK_MSG(rc == DSV4_ERR_FORMAT && s == NULL, "line %d: rc %d", line, rc);
    CHECK_MSG(strstr(e.msg, want) != NULL, "line %d: msg '%s' (want '%s')", line, e.msg, want);
    if (!rc) dsv4_st_close(s);
    free(im.p);
}
#define EXPECT_BAD(header, data_len, want) expect_bad_image(make_image(header, data_len), want, __LINE__)

#define T_F32_23 "{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"

/* ---- valid files --------------------------------------------------------------------- */

static void test_valid(void) {
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"w.b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
        "\"w.a\":" T_F32_23 ","
        "\"scalar\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
        "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[8,8]}}    "; /* space padding */
    image im = make_image(hdr, 40);
    dsv4_st_set *s = NULL;
    dsv4_err e = {0};
    int rc = dsv4_st_open_buffer(im.p, im.n, &s, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (!rc) {
        const uint8_t *data = im.p + 8 + strlen(hdr);
        CHECK(dsv4_st_count(s) == 4 && dsv4_st_n_files(s) == 1);
        CHECK(dsv4_st_file_size(s, 0) == im.n && dsv4_st_file_size(s, 1) == 0);
        CHECK(dsv4_st_file_path(s, 0) != NULL && dsv4_st_file_path(s, 1) == NULL);
        /* sorted by name */
        const char *order[4] = {"empty", "scalar", "w.a", "w.b"};
        for (int i = 0; i < 4; i++) CHECK_MSG(strcmp(dsv4_st_at(s, i)->name, order[i]) == 0, "at %d", i);
        CHECK(dsv4_st_at(s, 4) == NULL && dsv4_st_at(s, -1) == NULL);
        const dsv4_st_tensor *a = dsv4_st_find(s, "w.a"), *b = dsv4_st_find(s, "w.b");
        const dsv4_st_tensor *sc = dsv4_st_find(s, "scalar"), *em = dsv4_st_find(s, "empty");
        CHECK(a && a->dtype == DSV4_ST_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3);
        CHECK(a && a->data == data && a->nbytes == 24 && a->file == 0);
        CHECK(b && b->dtype == DSV4_ST_BF16 && b->ndim == 1 && b->shape[0] == 4 && b->data == data + 24);
        CHECK(b && b->nbytes == 8 && b->data[0] == 24 && b->data[7] == 31);
        CHECK(sc && sc->ndim == 0 && sc->nbytes == 8 && sc->data == data + 32);
        CHECK(em && em->ndim == 2 && em->nbytes == 0);
        CHECK(dsv4_st_find(s, "w") == NULL && dsv4_st_find(s, "__metadata__") == NULL);
        CHECK(dsv4_st_find(s, "w.c") == NULL && dsv4_st_find(s, "") == NULL);
    }
    dsv4_st_close(s);
    free(im.p);

    /* no tensors at all; adjacent ranges; an empty range inside another tensor's bytes */
    const char *ok[] = {
        "{}",
        "{\"__metadata__\":{}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]},"
        "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        im = make_image(ok[i], 16);
        rc = dsv4_st_open_buffer(im.p, im.n, &s, &e);
        CHECK_MSG(rc == 0, "%s: %s", ok[i], e.msg);
        if (!rc) dsv4_st_close(s);
        free(im.p);
    }
}

static void test_dtypes(void) {
    /* from the safetensors format: element sizes in bytes */
    static const struct { const char *name; int size; } want[DSV4_ST_N_DTYPES] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2}, {"I32", 4},
        {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
        {"F8_E8M0", 1},
    };
    char hdr[4096];
    size_t k = 0, off = 0;
    k += (size_t)snprintf(hdr + k, sizeof hdr - k, "{");
    for (int i = 0; i < DSV4_ST_N_DTYPES; i++) {
        CHECK_MSG(strcmp(dsv4_st_dtype_name((dsv4_st_dtype)i), want[i].name) == 0, "dtype %d", i);
        CHECK_MSG(dsv4_st_dtype_size((dsv4_st_dtype)i) == want[i].size, "dtype %s", want[i].name);
        dsv4_st_dtype t;
        CHECK(dsv4_st_dtype_from_name(want[i].name, &t) == 0 && t == (dsv4_st_dtype)i);
        k += (size_t)snprintf(hdr + k, sizeof hdr - k, "%s\"t_%s\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", want[i].name, want[i].name, off, off + 3 * (size_t)want[i].size);
        off += 3 * (size_t)want[i].size;
    }
    snprintf(hdr + k, sizeof hdr - k, "}");
    dsv4_st_dtype t;
    CHECK(dsv4_st_dtype_from_name("bf16", &t) != 0 && dsv4_st_dtype_from_name("F4", &t) != 0);
    CHECK(dsv4_st_dtype_size(DSV4_ST_N_DTYPES) == 0);

    image im = make_image(hdr, off);
    dsv4_st_set *s = NULL;
    dsv4_err e = {0};
    int rc = dsv4_st_open_buffer(im.p, im.n, &s, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    char name[32];
    for (int i = 0; !rc && i < DSV4_ST_N_DTYPES; i++) {
        snprintf(name, sizeof name, "t_%s", want[i].name);
        const dsv4_st_tensor *x = dsv4_st_find(s, name);
        CHECK_MSG(x && x->dtype == (dsv4_st_dtype)i && x->nbytes == 3u * (unsigned)want[i].size, "%s", name);
    }
    dsv4_st_close(s);
    free(im.p);
}

/* ---- one test per class of damage ------------------------------------------------------ */

static void test_malformed(void) {
    dsv4_st_set *s = NULL;
    dsv4_err e = {0};
    uint8_t tiny[7] = {0};
    CHECK(dsv4_st_open_buffer(tiny, 7, &s, &e) == DSV4_ERR_FORMAT);
    CHECK_ERR(e, DSV4_ERR_FORMAT, "buffer: file is 7 bytes, shorter than the 8-byte header length");
    CHECK(dsv4_st_open_buffer(tiny, 0, &s, &e) == DSV4_ERR_FORMAT);
    CHECK_ERR(e, DSV4_ERR_FORMAT, "file is 0 bytes");
    CHECK(dsv4_st_open_buffer(NULL, 0, &s, &e) == DSV4_ERR_FORMAT);
    CHECK(dsv4_st_open_buffer(NULL, 5, &s, &e) == DSV4_ERR_ARG);
    CHECK(dsv4_st_open_buffer(tiny, 7, NULL, &e) == DSV4_ERR_ARG);

    /* header length */
    expect_bad_image(make_raw(100, "{\"a\":{}}            ", 0),
                     "buffer: header length 100 extends beyond the file (20 bytes after the length field)", __LINE__);
    expect_bad_image(make_raw(9, "{}", 4), "header length 9 extends beyond the file (6 bytes", __LINE__);
    expect_bad_image(make_raw(1ull << 63, "{}", 0), "buffer: header length 9223372036854775808 is absurd (limit 100000000 bytes)",
                     __LINE__);
    expect_bad_image(make_raw(UINT64_MAX, "{}", 0), "header length 18446744073709551615 is absurd", __LINE__);
    expect_bad_image(make_raw(100000001, "{}", 0), "header length 100000001 is absurd", __LINE__);

    /* JSON */
    EXPECT_BAD("", 0, "buffer: header is not valid JSON (syntax error at byte 0 of 0)");
    EXPECT_BAD("{\"a\": ", 0, "header is not valid JSON (syntax error at byte");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "header is not valid JSON");
    EXPECT_BAD("{} x", 0, "buffer: header has bytes after its JSON object (at byte 3 of 4)");
    image nul = make_image("{}  ", 0);
    nul.p[8 + 2] = 0; /* a NUL instead of padding */
    expect_bad_image(nul, "header has bytes after its JSON object (at byte 2 of 4)", __LINE__);
    EXPECT_BAD("[1,2]", 0, "buffer: header is an array, must be a JSON object");
    EXPECT_BAD("\"x\"", 0, "header is a string, must be a JSON object");
    EXPECT_BAD("{\"__metadata__\":\"pt\"}", 0, "buffer: __metadata__ is a string, must be an object");

    /* entries */
    EXPECT_BAD("{\"a\":5}", 0, "buffer: tensor \"a\": entry is a number, must be an object");
    EXPECT_BAD("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor \"a\": dtype is missing");
    EXPECT_BAD("{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "tensor \"a\": dtype is a number, must be a string");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor \"a\": unknown dtype \"F4\"");
    EXPECT_BAD("{\"a\":{\"dtype\":\"bf16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2, "unknown dtype \"bf16\"");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor \"a\": shape is missing");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4,
               "tensor \"a\": shape is a string, must be an array");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]}}", 8,
               "tensor \"a\": shape[1] is a string, must be an integer");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
               "tensor \"a\": shape[0] = -1, must be a non-negative integer below 2^53");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape[0] = 1.5, must be");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, "shape[0] = 1.0000000000000001e+300");
    EXPECT_BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
               "tensor \"a\": shape has more than 8 dimensions");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
               "tensor \"a\": shape [4294967296, 4294967296] x F32 overflows 64 bits");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,4]}}", 4,
               "shape [4294967296, 1073741824] x F64 overflows 64 bits"); /* elements fit, bytes do not */
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor \"a\": data_offsets is missing");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
               "tensor \"a\": data_offsets must be [begin, end], two non-negative integers");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4, "data_offsets must be [begin, end]");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "data_offsets must be [begin, end]");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"b\":0,\"e\":4}}}", 4,
               "data_offsets must be [begin, end]");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
               "tensor \"a\": data_offsets [8, 4] has begin > end");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[0,100]}}", 64,
               "tensor \"a\": data_offsets [0, 100] outside the data area of 64 bytes");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4503599627370496,4503599627370500]}}", 64,
               "data_offsets [4503599627370496, 4503599627370500] outside the data area of 64 bytes");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9007199254740996,9007199254741000]}}", 64,
               "data_offsets must be [begin, end]"); /* above 2^53: not exact in JSON */
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24,
               "tensor \"a\": data_offsets span 20 bytes, but shape [2, 3] x F32 needs 24 bytes");
    EXPECT_BAD("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24,
               "data_offsets span 24 bytes, but shape [2, 3] x BF16 needs 12 bytes");

    /* ranges and names */
    EXPECT_BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
               "\"b\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[8,24]}}", 24,
               "buffer: tensors \"a\" [0, 16) and \"b\" [8, 24) overlap");
    EXPECT_BAD("{\"big\":{\"dtype\":\"U8\",\"shape\":[32],\"data_offsets\":[0,32]},"
               "\"c\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[20,24]},"
               "\"in\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 32,
               "tensors \"big\" [0, 32) and \"in\" [8, 12) overlap");
    EXPECT_BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
               "tensors \"a\" [0, 4) and \"b\" [0, 4) overlap");
    EXPECT_BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8,
               "buffer: tensor \"a\" appears twice in the header");
}

static void test_files(void) {
    char dir[] = "/tmp/dsv4_st_file_XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    dsv4_st_set *s = NULL;
    dsv4_err e = {0};

    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    CHECK(dsv4_st_open_file(path, &s, &e) == DSV4_ERR_IO && s == NULL);
    CHECK_ERR(e, DSV4_ERR_IO, "none.safetensors: cannot open");

    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    write_text(path, "abc");
    CHECK(dsv4_st_open_file(path, &s, &e) == DSV4_ERR_FORMAT);
    CHECK_ERR(e, DSV4_ERR_FORMAT, "short.safetensors: file is 3 bytes, shorter than the 8-byte header length");
    unlink(path);
    write_text(path, "");
    CHECK(dsv4_st_open_file(path, &s, &e) == DSV4_ERR_FORMAT);
    CHECK_ERR(e, DSV4_ERR_FORMAT, "file is 0 bytes");
    unlink(path);

    CHECK(dsv4_st_open_file(dir, &s, &e) == DSV4_ERR_IO);
    CHECK_ERR(e, DSV4_ERR_IO, "not a regular file");

    /* one file, read through open_file and open_dir */
    image im = make_image("{\"x\":" T_F32_23 "}", 24);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, im);
    CHECK(dsv4_st_open_file(path, &s, &e) == 0);
    const dsv4_st_tensor *x = dsv4_st_find(s, "x");
    CHECK(x && x->nbytes == 24 && x->data[5] == 5 && strcmp(dsv4_st_file_path(s, 0), path) == 0);
    CHECK(dsv4_st_file_size(s, 0) == im.n);
    dsv4_st_close(s);
    s = NULL;
    CHECK(dsv4_st_open_dir(dir, &s, &e) == 0 && dsv4_st_count(s) == 1);
    dsv4_st_close(s);
    s = NULL;
    unlink(path);
    free(im.p);
    CHECK(dsv4_st_open_dir(dir, &s, &e) == DSV4_ERR_IO);
    CHECK_ERR(e, DSV4_ERR_IO, "neither model.safetensors.index.json nor model.safetensors found");
    rmdir(dir);
}

/* ---- sharded sets ------------------------------------------------------------------- */

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

/* Writes the index text, opens the dir, expects rc and (for errors) a message part. */
static void expect_index(const char *dir, const char *index, int want_rc, const char *want, int line) {
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_text(path, index);
    dsv4_st_set *s = (dsv4_st_set *)1;
    dsv4_err e = {0};
    int rc = dsv4_st_open_dir(dir, &s, &e);
    CHECK_MSG(rc == want_rc, "line %d: rc %d (want %d): %s", line, rc, want_rc, e.msg);
    if (want_rc) {
        CHECK_MSG(s == NULL, "line %d", line);
        CHECK_MSG(strstr(e.msg, want) != NULL, "line %d: msg '%s' (want '%s')", line, e.msg, want);
    }
    if (!rc) dsv4_st_close(s);
}

static void test_sharded(void) {
    char dir[] = "/tmp/dsv4_st_shard_XXXXXX", p1[256], p2[256], pi[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(p1, sizeof p1, "%s/" SHARD1, dir);
    snprintf(p2, sizeof p2, "%s/" SHARD2, dir);
    snprintf(pi, sizeof pi, "%s/model.safetensors.index.json", dir);
    image s1 = make_image("{\"a\":" T_F32_23 ",\"b\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[24,40]}}", 40);
    image s2 = make_image("{\"c\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[4,16]}}", 16);
    write_file(p1, s1);
    write_file(p2, s2);

    const char *good = "{\"metadata\":{\"total_size\":52},\"weight_map\":{\"c\":\"" SHARD2 "\",\"a\":\"" SHARD1
                       "\",\"b\":\"" SHARD1 "\"}}";
    write_text(pi, good);
    dsv4_st_set *s = NULL;
    dsv4_err e = {0};
    int rc = dsv4_st_open_dir(dir, &s, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (!rc) {
        CHECK(dsv4_st_count(s) == 3 && dsv4_st_n_files(s) == 2);
        const dsv4_st_tensor *a = dsv4_st_find(s, "a"), *b = dsv4_st_find(s, "b"), *c = dsv4_st_find(s, "c");
        CHECK(a && b && c);
        if (a && b && c) {
            CHECK(a->file == b->file && c->file != a->file);
            CHECK(strcmp(dsv4_st_file_path(s, c->file), p2) == 0 && strcmp(dsv4_st_file_path(s, a->file), p1) == 0);
            CHECK(dsv4_st_file_size(s, c->file) == s2.n && dsv4_st_file_size(s, a->file) == s1.n);
            CHECK(c->dtype == DSV4_ST_BF16 && c->shape[0] == 3 && c->nbytes == 12 && c->data[0] == 4);
            CHECK(b->dtype == DSV4_ST_I64 && b->data[0] == 24);
        }
    }
    dsv4_st_close(s);

    expect_index(dir, "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2
                 "\",\"d\":\"" SHARD2 "\"}}", DSV4_ERR_FORMAT,
                 "tensor \"d\" is listed in shard " SHARD2 " but is not there", __LINE__);
    expect_index(dir, "{\"weight_map\":{\"a\":\"" SHARD2 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\"}}",
                 DSV4_ERR_FORMAT, "tensor \"a\" is listed in shard " SHARD2 " but is in " SHARD1, __LINE__);
    expect_index(dir, "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\"}}", DSV4_ERR_FORMAT,
                 SHARD1 " holds tensor \"b\" that", __LINE__);
    expect_index(dir, "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\"}}", DSV4_ERR_FORMAT,
                 "(1 unlisted tensors in all)", __LINE__);
    expect_index(dir, "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2
                 "\",\"e\":\"model-00003.safetensors\"}}", DSV4_ERR_IO, "model-00003.safetensors: cannot open", __LINE__);
    expect_index(dir, "{\"metadata\":{}}", DSV4_ERR_FORMAT, "weight_map is missing, must be an object", __LINE__);
    expect_index(dir, "{\"weight_map\":[]}", DSV4_ERR_FORMAT, "weight_map is an array, must be an object", __LINE__);
    expect_index(dir, "{\"weight_map\":{}}", DSV4_ERR_FORMAT, "weight_map is empty", __LINE__);
    expect_index(dir, "{\"weight_map\":{\"a\":1}}", DSV4_ERR_FORMAT, "weight_map[\"a\"] is a number, must be a file name",
                 __LINE__);
    expect_index(dir, "{\"weight_map\":{\"a\":\"../" SHARD1 "\"}}", DSV4_ERR_FORMAT,
                 "weight_map[\"a\"] = \"../" SHARD1 "\" is not a plain file name", __LINE__);
    expect_index(dir, "{\"weight_map\":{\"a\":\"\"}}", DSV4_ERR_FORMAT, "is not a plain file name", __LINE__);
    expect_index(dir, "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"a\":\"" SHARD1 "\"}}", DSV4_ERR_FORMAT,
                 "weight_map lists tensor \"a\" twice", __LINE__);
    expect_index(dir, "{\"weight_map\":", DSV4_ERR_FORMAT, "model.safetensors.index.json: not valid JSON", __LINE__);

    /* a damaged shard is reported under its own path */
    image bad = make_image("{\"c\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[4,20]}}", 16);
    write_file(p2, bad);
    expect_index(dir, good, DSV4_ERR_FORMAT, SHARD2 ": tensor \"c\": data_offsets [4, 20] outside the data area", __LINE__);
    free(bad.p);
    /* the same tensor in two shards */
    bad = make_image("{\"c\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[4,16]},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[16,40]}}", 40);
    write_file(p2, bad);
    expect_index(dir, good, DSV4_ERR_FORMAT, "tensor \"a\" is in both", __LINE__);
    free(bad.p);

    unlink(p1), unlink(p2), unlink(pi), rmdir(dir);
    free(s1.p), free(s2.p);
}

/* ---- the golden checkpoint ------------------------------------------------------------ */

static void expect_tensor(const dsv4_st_set *s, const char *name, dsv4_st_dtype dt, int ndim, int64_t d0, int64_t d1) {
    const dsv4_st_tensor *t = dsv4_st_find(s, name);
    CHECK_MSG(t != NULL, "%s missing", name);
    if (!t) return;
    CHECK_MSG(t->dtype == dt && t->ndim == ndim && t->shape[0] == d0 && (ndim < 2 || t->shape[1] == d1),
              "%s: %s ndim %d [%lld, %lld]", name, dsv4_st_dtype_name(t->dtype), t->ndim, (long long)t->shape[0],
              (long long)(t->ndim > 1 ? t->shape[1] : -1));
}

static void test_golden(void) {
    char dir[1024], path[1100];
    test_shared("golden/tiny_s0/model", dir, sizeof dir);
    dsv4_st_set *s = NULL;
    dsv4_err e = {0};
    int rc = dsv4_st_open_dir(dir, &s, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) return;
    CHECK(dsv4_st_n_files(s) == 1);
    /* tiny: V 512, D 128, H 4, hd 64, q_lora 64, o_lora 32, G 2, hc 4, E 8, K 2, I 64,
     * nI 8, dI 32, ratios 0,0,4,128,4,128 + MTP 0 (spec/model.md §1, golden/README.md) */
    expect_tensor(s, "embed.weight", DSV4_ST_BF16, 2, 512, 128);
    expect_tensor(s, "head.weight", DSV4_ST_BF16, 2, 512, 128);
    expect_tensor(s, "norm.weight", DSV4_ST_BF16, 1, 128, 0);
    expect_tensor(s, "hc_head_fn", DSV4_ST_F32, 2, 4, 4 * 128);
    expect_tensor(s, "layers.0.hc_attn_fn", DSV4_ST_F32, 2, (2 + 4) * 4, 4 * 128);
    expect_tensor(s, "layers.0.attn.attn_sink", DSV4_ST_F32, 1, 4, 0);
    expect_tensor(s, "layers.0.attn.wq_b.weight", DSV4_ST_BF16, 2, 4 * 64, 64);
    expect_tensor(s, "layers.0.attn.wo_a.weight", DSV4_ST_BF16, 2, 2 * 32, 4 * 64 / 2);
    expect_tensor(s, "layers.2.attn.compressor.ape", DSV4_ST_F32, 2, 4, 2 * 64);
    expect_tensor(s, "layers.3.attn.compressor.ape", DSV4_ST_F32, 2, 128, 64);
    expect_tensor(s, "layers.2.attn.indexer.compressor.ape", DSV4_ST_F32, 2, 4, 2 * 32);
    expect_tensor(s, "layers.2.attn.indexer.wq_b.weight", DSV4_ST_BF16, 2, 8 * 32, 64);
    expect_tensor(s, "layers.0.ffn.gate.tid2eid", DSV4_ST_I64, 2, 512, 2);
    expect_tensor(s, "layers.3.ffn.gate.bias", DSV4_ST_F32, 1, 8, 0);
    expect_tensor(s, "layers.5.ffn.experts.7.w2.weight", DSV4_ST_BF16, 2, 128, 64);
    expect_tensor(s, "mtp.0.e_proj.weight", DSV4_ST_BF16, 2, 128, 128);
    CHECK(dsv4_st_find(s, "layers.3.ffn.gate.tid2eid") == NULL);
    CHECK(dsv4_st_find(s, "layers.0.attn.compressor.ape") == NULL);

    /* The data pointer reaches the right bytes: every tid2eid entry is an expert id. */
    const dsv4_st_tensor *t = dsv4_st_find(s, "layers.1.ffn.gate.tid2eid");
    int bad = 0;
    for (uint64_t i = 0; t && i < t->nbytes / 8; i++) {
        int64_t v;
        memcpy(&v, t->data + 8 * i, 8);
        bad += v < 0 || v >= 8;
    }
    CHECK(t && bad == 0);

    /* Count the header's tensors independently. */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    uint8_t lenb[8] = {0};
    CHECK(f && fread(lenb, 1, 8, f) == 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | lenb[i];
    char *h = malloc(hl + 1);
    CHECK(f && fread(h, 1, hl, f) == hl);
    h[hl] = 0;
    if (f) fclose(f);
    cJSON *root = cJSON_Parse(h);
    int n = 0;
    for (cJSON *j = root ? root->child : NULL; j; j = j->next) n += strcmp(j->string, "__metadata__") != 0;
    CHECK_MSG(n > 100 && n == dsv4_st_count(s), "header %d, reader %d", n, dsv4_st_count(s));
    for (int i = 1; i < dsv4_st_count(s); i++) CHECK(strcmp(dsv4_st_at(s, i - 1)->name, dsv4_st_at(s, i)->name) < 0);
    cJSON_Delete(root);
    free(h);
    dsv4_st_close(s);
}

/* Flash has 69,187 tensors: lookups must stay fast at that size. */
static void test_many_tensors(void) {
    enum { N = 70000 };
    size_t cap = (size_t)N * 96 + 16, k = 0;
    char *hdr = malloc(cap);
    k += (size_t)snprintf(hdr + k, cap - k, "{");
    for (int i = 0; i < N; i++)
        k += (size_t)snprintf(hdr + k, cap - k, "%s\"layers.%d.ffn.experts.%d.w1.weight\":{\"dtype\":\"U8\",\"shape\":[1],"
                              "\"data_offsets\":[%d,%d]}", i ? "," : "", i / 256, i % 256, i, i + 1);
    snprintf(hdr + k, cap - k, "}");
    image im = make_image(hdr, N);
    free(hdr);
    dsv4_st_set *s = NULL;
    dsv4_err e = {0};
    clock_t t0 = clock();
    int rc = dsv4_st_open_buffer(im.p, im.n, &s, &e);
    clock_t t1 = clock();
    CHECK_MSG(rc == 0, "%s", e.msg);
    int found = 0;
    char name[64];
    for (int r = 0; !rc && r < 4; r++)
        for (int i = 0; i < N; i++) {
            int j = (int)(((int64_t)i * 7919) % N); /* scattered order */
            snprintf(name, sizeof name, "layers.%d.ffn.experts.%d.w1.weight", j / 256, j % 256);
            const dsv4_st_tensor *t = dsv4_st_find(s, name);
            found += t && t->data[0] == (uint8_t)j;
        }
    clock_t t2 = clock();
    CHECK(found == 4 * N);
    printf("70000 tensors: open %.0f ms, 280000 finds %.0f ms\n", 1e3 * (double)(t1 - t0) / CLOCKS_PER_SEC,
           1e3 * (double)(t2 - t1) / CLOCKS_PER_SEC);
    /* generous: a linear search would take tens of seconds */
    CHECK((double)(t2 - t1) / CLOCKS_PER_SEC < 5.0);
    dsv4_st_close(s);
    free(im.p);
}

int main(void) {
    test_valid();
    test_dtypes();
    test_malformed();
    test_files();
    test_sharded();
    test_golden();
    test_many_tensors();
    return test_report();
}
