#!/usr/bin/env python3
"""make_tokenizer_seeds.py TOKENIZER_JSON OUT_DIR — small tokenizer.json seeds for
fuzz_tokenizer_json, cut from DeepSeek's tokenizer.json: its normalizer, pre-tokenizer and
decoder, the 256 byte tokens, the first merges whose parts are already in, and a few added
tokens. Each seed is the JSON, a NUL byte, then a text the target encodes (its input format).
"""
import json
import os
import sys


def main():
    src, out = sys.argv[1], sys.argv[2]
    t = json.load(open(src, encoding="utf-8"))
    # the ByteLevel alphabet (GPT-2's bytes_to_unicode): one character per byte
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    alphabet = [chr(c) for c in cs]

    def seed(name, n_merges, added, text, extra=None):
        v = {c: i for i, c in enumerate(alphabet)}
        merges = []
        for m in t["model"]["merges"]:
            if len(merges) >= n_merges:
                break
            left, right = m.split(" ") if isinstance(m, str) else m
            if left in v and right in v and left + right not in v:
                v[left + right] = len(v)
                merges.append([left, right])
        adds = []
        for k, content in enumerate(added):
            adds.append({"id": len(v) + k, "content": content, "single_word": False, "lstrip": False,
                         "rstrip": False, "normalized": False, "special": True})
        doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": adds,
               "normalizer": t["normalizer"], "pre_tokenizer": t["pre_tokenizer"],
               "post_processor": t["post_processor"], "decoder": t["decoder"],
               "model": dict(t["model"], vocab=v, merges=merges)}
        if extra:
            extra(doc)
        with open(os.path.join(out, name), "wb") as f:
            f.write(json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
            f.write(b"\0" + text.encode("utf-8"))

    def strip_flags(doc):
        doc["added_tokens"][0].update(lstrip=True, rstrip=True)

    def plain_pretok(doc):
        doc["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                "use_regex": True}
        doc["model"]["ignore_merges"] = True

    os.makedirs(out, exist_ok=True)
    seed("bytes_only", 0, [], "Hello, world! 123")
    seed("merges", 60, ["<｜User｜>", "<｜Assistant｜>"], "<｜User｜>the cat sat<｜Assistant｜> in 2024.")
    seed("cjk", 40, ["<think>"], "日本語のテキスト <think> 中文 ✓ émoji 🙂\n\ttabs")
    seed("strip", 30, ["<|x|>"], "a <|x|> b", strip_flags)
    seed("gpt2", 50, [], "it's   spaced\r\nlines", plain_pretok)


if __name__ == "__main__":
    main()
