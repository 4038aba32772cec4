#!/usr/bin/env python3
"""make_kvfile_seed.py OUT — a valid KV snapshot for fuzz_kvfile's fixed geometry (n = 128,
MTP section present), preceded by the harness's mode byte 0 (nothing re-sealed)."""
import struct
import sys


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


hd, dI, rd, win, A, hc, D, V = 8, 4, 4, 4, 128, 2, 8, 16
ratios = [4, 128, 4]
n_main = 2
n, m = 128, 127
flags = 3  # MTP + LAST
head = b"DSV4KVC\0" + struct.pack("<IIQQII", 1, 144 + 4 * len(ratios) + 4, n, m, flags, 0)
head += b"\x11" * 32 + b"\x22" * 32
head += struct.pack("<10I", len(ratios), n_main, hd, dI, rd, win, A, hc, D, V)
head += struct.pack("<%dI" % len(ratios), *ratios)
out = head + struct.pack("<I", crc32c(head))
toks = struct.pack("<%di" % n, *[(i * 7) % V for i in range(n)])
out += toks + struct.pack("<I", crc32c(toks))


def section(tag, layer, rows, row_bytes):
    h = struct.pack("<IIQI", tag, layer, rows, row_bytes)
    body = bytes((i * 13) & 0x7F for i in range(rows * row_bytes))
    return h + body + struct.pack("<I", crc32c(h + body))


for l, r in enumerate(ratios):
    ln = n if l < n_main else m
    out += section(1, l, min(ln, win - 1), hd * 4)
    coff = 2 if r == 4 else 1
    ring = min(ln, ln % r + (coff - 1) * r)
    out += section(2, l, ln // r, hd * 4)
    if r == 4:
        out += section(3, l, ln // 4, dI * 4)
    out += section(4, l, ring, 2 * coff * hd * 4)
    if r == 4:
        out += section(5, l, ring, 4 * dI * 4)
out += section(6, 0, 1, (1 + hc) * D * 4)
open(sys.argv[1], "wb").write(b"\0" + out)
