#!/usr/bin/env python3
"""The AVX-512 exp kernels' tables are the math's, not anybody's copy: recompute them.

swiglu.c's dsv4_expf_tab[i]     = bits(round(2^(i/32)))  - (i << 47)
exp_f64.c's dsv4_exp_tab[2i+1]  = bits(H_i) - (i << 45), H_i = round(2^(i/128))
exp_f64.c's dsv4_exp_tab[2i]    = bits(round(2^(i/128) / H_i - 1))

2^(i/N) is taken to 80 digits (decimal); float() of a Decimal rounds to nearest. Usage:
exp_tables_math.py SWIGLU_C EXP_F64_C; exits 1 naming the first entry that differs.
"""
import re
import struct
import sys
from decimal import Decimal, getcontext

getcontext().prec = 80


def bits(d):
    return struct.unpack("<Q", struct.pack("<d", d))[0]


def table(path, name):
    src = open(path).read()
    m = re.search(re.escape(name) + r"\[\d+\]\s*=\s*\{(.*?)\};", src, re.S)
    if not m:
        sys.exit(f"{path}: no table {name}")
    return [int(x, 16) for x in re.findall(r"0x([0-9a-fA-F]+)ull", m.group(1))]


def main():
    swiglu, expf64 = sys.argv[1], sys.argv[2]
    want_f = [(bits(float(Decimal(2) ** (Decimal(i) / 32))) - (i << 47)) % 2**64 for i in range(32)]
    want_d = []
    for i in range(128):
        x = Decimal(2) ** (Decimal(i) / 128)
        h = float(x)
        want_d += [bits(float(x / Decimal(h) - 1)), (bits(h) - (i << 45)) % 2**64]
    bad = 0
    for path, name, want in ((swiglu, "dsv4_expf_tab", want_f), (expf64, "dsv4_exp_tab", want_d)):
        got = table(path, name)
        if len(got) != len(want):
            print(f"{name}: {len(got)} entries, the math has {len(want)}")
            bad += 1
            continue
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                print(f"{name}[{i}] = {g:#018x}, the math gives {w:#018x}")
                bad += 1
                break
        else:
            print(f"{name}: {len(got)} entries, all the math's")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
