#!/usr/bin/python3
"""P2 W8A8 in the numpy oracle: an implementation of serving.md §f independent of the
engine's, used to tell the P2 definition's own error on a golden model from the engine's.

  /usr/bin/python3 w8a8_oracle_p2.py [--case DIR] [--run NAME] [--all] [--mode wa|w|a] [--out FILE]

Runs the oracle (float64) on the golden run's tokens twice, with and without the P2
quantization of wq_b, wo_b, indexer wq_b, shared/routed w1/w3/w2, MTP e_proj/h_proj
(--all: also wq_a, wkv; wo_a is an einsum in the oracle and stays exact), and prints the
same metrics as test_w8a8_accuracy. --mode w quantizes only the weights, --mode a only the
activations. On small_s1/run_p392_d8 (wa): hidden rel-L2 8.17e-2, cosine 0.99666, top-1
92.0 %, mean KL 3.36e-3; w: 6.59e-2 / 0.99783 / 93.75 %; a: 7.41e-2 / 0.99725 / 92.5 %.

--out FILE writes the figures test_w8a8_accuracy gates the engine's P2 against
(serving.md §f), one "name value" per line: hidden_rel_l2, hidden_cosine, logits_top1
(a fraction), logits_mean_kl. CTest runs it as the fixture of that test.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("DSV4_SHARED", os.path.join(HERE, "..", "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "oracle"))
import dsv4_oracle as O  # noqa: E402


def quant_rows(a, floor):
    """per-row amax / 127 scales, round half to even, clamp to +-127"""
    amax = np.max(np.abs(a), axis=-1, keepdims=True)
    if floor:
        amax = np.maximum(amax, floor)
        s = amax / 127.0
    else:
        s = np.where(amax > 0, amax / 127.0, 1.0)
    return np.clip(np.rint(a / s), -127, 127), s


class P2Transposed:
    """w.T for `x @ w.T`: numpy defers to __rmatmul__ (no __array_ufunc__)."""
    __array_ufunc__ = None

    def __init__(self, w, mode):
        self.w, self.mode = w, mode
        q, s = quant_rows(w, 0)
        self.wd = q * s  # dequantized INT8 weights

    def __rmatmul__(self, x):
        if "a" in self.mode:
            q, s = quant_rows(x, 1e-4)
            x = q * s
        w = self.wd if "w" in self.mode else self.w
        return x @ w.T


class P2Weight:
    __array_ufunc__ = None

    def __init__(self, w, mode):
        self.shape = w.shape
        self.T = P2Transposed(w, mode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default=os.path.join(SHARED, "golden", "small_s1"))
    ap.add_argument("--run", default="run_p392_d8")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--mode", default="wa", choices=["wa", "w", "a"])
    ap.add_argument("--out", help="write the gated figures here")
    a = ap.parse_args()
    man = json.load(open(os.path.join(a.case, a.run, "manifest.json")))
    toks, P = np.array(man["tokens"]), man["prefill_len"]
    cfg, W = O.load_checkpoint(os.path.join(a.case, "model"))
    names = r"attn\.wq_b|attn\.wo_b|attn\.indexer\.wq_b|ffn\.experts\.\d+\.w[123]|ffn\.shared_experts\.w[123]|e_proj|h_proj"
    if a.all:
        names += r"|attn\.wq_a|attn\.wkv"
    pat = re.compile(r"(%s)\.weight$" % names)
    ref = O.run_sequence(O.Model(cfg, W), toks, P)
    Wq = {k: (P2Weight(v, a.mode) if pat.search(k) else v) for k, v in W.items()}
    print("quantized %d matrices (%s)" % (sum(isinstance(v, P2Weight) for v in Wq.values()), a.mode))
    out = O.run_sequence(O.Model(cfg, Wq), toks, P)

    def cat(r, key):
        return np.concatenate([r["prefill"][key]] + [d[key] for d in r["decode"]])

    figures = {}
    for key in ["hidden", "logits"]:
        x, y = cat(out, key), cat(ref, key)
        d = x - y
        rel_l2 = np.linalg.norm(d) / np.linalg.norm(y)
        cosine = (x * y).sum() / np.linalg.norm(x) / np.linalg.norm(y)
        figures[key + "_rel_l2"], figures[key + "_cosine"] = rel_l2, cosine
        line = "%-7s max-abs %.3e  max-rel %.3e  rel-L2 %.3e  cosine %.6f" % (
            key, np.abs(d).max(), np.abs(d).max() / np.abs(y).max(), rel_l2, cosine)
        if key == "logits":
            lp = y - y.max(-1, keepdims=True)
            lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
            lq = x - x.max(-1, keepdims=True)
            lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
            figures["logits_top1"] = np.mean(x.argmax(-1) == y.argmax(-1))
            figures["logits_mean_kl"] = np.mean(np.sum(np.exp(lp) * (lp - lq), -1))
            line += "  top-1 %.2f%%  mean KL %.3e" % (100 * figures["logits_top1"], figures["logits_mean_kl"])
        print(line)
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            for k in ["hidden_rel_l2", "hidden_cosine", "logits_top1", "logits_mean_kl"]:
                f.write("%s %.9e\n" % (k, figures[k]))
        os.replace(a.out + ".tmp", a.out)
        print("wrote", a.out)


if __name__ == "__main__":
    main()
