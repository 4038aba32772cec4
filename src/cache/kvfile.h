/* kvfile.h — the KV snapshot file format (spec/serving.md §g): layout, the sections a file
 * of given lengths must hold, header encoding, and a validating parser.
 *
 * Little-endian, version 1:
 *   header   magic "DSV4KVC\0", u32 version, u32 header bytes, u64 n, u64 m, u32 flags,
 *            u32 kernel level, config hash [32], weights fingerprint [32], u32 layers,
 *            main layers, hd, dI, rd, win, alignment A, hc, D, vocab, u32 ratio per layer,
 *            u32 CRC32C of everything before it
 *   tokens   n x i32, u32 CRC32C
 *   sections each: u32 tag, u32 layer, u64 rows, u32 row bytes, payload, u32 CRC32C of the
 *            20 header bytes and the payload. Per layer in order (MTP layers only with
 *            the MTP flag): WIN rows [len - min(len, win-1), len); CMP entries 0 … len/r-1;
 *            IDX keys 0 … len/4-1 (CSA); RING / IRING the main / indexer compressor's ring
 *            rows [a | b] (full width) of the last len mod r + (coff-1)·r positions; then
 *            LAST: final hidden [D] and streams [hc, D] of position n-1. len is n for a main
 *            layer, m = n-1 for MTP. WIN/CMP rows and IDX keys are in the storage formats the
 *            flags name (pool bytes as they are), ring rows and LAST are F32.
 * The carries are stored as whole ring rows, not the first halves §g names: the same bits
 * restore either way (the second halves are never read at an aligned length), and the
 * cost is 4 rows per CSA compressor whatever n.
 *
 * Depends on util only, so the fuzz target links it alone.
 */
#ifndef DSV4_CACHE_KVFILE_H
#define DSV4_CACHE_KVFILE_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4.h"
#include "model/config.h"

#define DSV4_KV_VERSION 1
#define DSV4_KV_MAX_SECTIONS (5 * DSV4_MAX_LAYERS + 1)

enum { DSV4_KV_WIN = 1, DSV4_KV_CMP, DSV4_KV_IDX, DSV4_KV_RING, DSV4_KV_IRING, DSV4_KV_LAST };

/* flags: bit 0 MTP section present, bit 1 LAST present, bits 8-15 fidelity items, bits
 * 16-17 the W8A8 level, bits 24-27 the WIN/CMP row format, 28-31 the IDX key format
 * (DSV4_KV_FMT_*; 0 = F32, so files of F32 engines read as before). */
enum { DSV4_KV_F_MTP = 1u << 0, DSV4_KV_F_LAST = 1u << 1 };
#define DSV4_KV_MATH_MASK 0x0003ff00u   /* fidelity + w8a8: must match the engine */
#define DSV4_KV_DTYPE_MASK 0xff000000u  /* storage formats: must match the engine */
enum { DSV4_KV_FMT_F32 = 0, DSV4_KV_FMT_BF16 = 1, DSV4_KV_FMT_FP8 = 2, DSV4_KV_FMT_FP4 = 3 /* keys only */ };
#define DSV4_KV_DTYPE_FLAGS(row, key) ((uint32_t)(row) << 24 | (uint32_t)(key) << 28)

/* What the running engine expects of a file. */
typedef struct dsv4_kv_geom {
    int n_layers, n_main;          /* layers >= n_main are MTP layers */
    int hd, dI, rd, win, align, hc, dim, vocab;
    int ratios[DSV4_MAX_LAYERS];
    uint8_t config_hash[32];       /* SHA-256 of the math-relevant config fields */
    uint8_t weights[32];           /* weights fingerprint */
    uint32_t math_flags;           /* fidelity << 8 | w8a8 << 16 */
    uint32_t dtype_flags;          /* DSV4_KV_DTYPE_FLAGS of the engine's storage */
    uint32_t row_bytes, key_bytes; /* bytes of a stored WIN/CMP row, IDX key; 0 = F32 */
    int64_t max_context;
} dsv4_kv_geom;

typedef struct dsv4_kv_header {
    int64_t n, m;
    uint32_t flags;
    uint32_t kernel_level;         /* recorded; restoring under another level is allowed */
} dsv4_kv_header;

typedef struct dsv4_kv_section {
    uint32_t tag, layer;
    int64_t rows;
    uint32_t row_bytes;
    const uint8_t *data;           /* parser: the payload inside the file image */
} dsv4_kv_section;

/* Bytes of the header for this geometry. */
size_t dsv4_kv_header_size(const dsv4_kv_geom *g);
/* Writes the header (dsv4_kv_header_size bytes, CRC included) into out. */
void dsv4_kv_header_encode(const dsv4_kv_geom *g, const dsv4_kv_header *h, uint8_t *out);
/* The sections a file with header h holds, in file order; returns their count. */
int dsv4_kv_sections(const dsv4_kv_geom *g, const dsv4_kv_header *h, dsv4_kv_section *out);
/* Total file bytes for header h. */
int64_t dsv4_kv_file_size(const dsv4_kv_geom *g, const dsv4_kv_header *h);

/* Checks the header at the start of buf (len bytes: at least the header) against g: magic,
 * version, header size and CRC, widths, fingerprints, dtypes, modes, alignment and
 * lengths. DSV4_ERR_FORMAT with the first mismatch. */
int dsv4_kv_parse_header(const uint8_t *buf, size_t len, const dsv4_kv_geom *g,
                         dsv4_kv_header *h, dsv4_err *err);

/* A validated file image: the header, the tokens and every section's payload. */
typedef struct dsv4_kv_view {
    dsv4_kv_header h;
    const uint8_t *tokens;         /* n x i32 little-endian */
    int n_sections;
    dsv4_kv_section sec[DSV4_KV_MAX_SECTIONS];
} dsv4_kv_view;

/* Checks a whole file image (header as above, exact size, every CRC, section layout, token
 * ids) and fills v; never reads outside buf. */
int dsv4_kv_parse(const uint8_t *buf, size_t len, const dsv4_kv_geom *g, dsv4_kv_view *v,
                  dsv4_err *err);

/* Little-endian section framing for writers: the 20 header bytes of s. */
void dsv4_kv_section_head(const dsv4_kv_section *s, uint8_t out[20]);

#endif
