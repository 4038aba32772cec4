#!/usr/bin/env python3
"""Seeds for fuzz_json_mask (and the ctest test_fuzz_json_mask, which replays them):
the test suite's schemas (tests/sample/test_json.c, bench/bench_json.c, the json_schema
corpus), each followed by a NUL and a text that steers the tokens (fuzz_json_mask.c: the
longest allowed token the text goes on with, else its next byte a choice: the low two bits
its kind, 0 short, 2 long, 1 and 3 any). Three a schema: a document valid under it (then a
few random bytes), random choices, and choices that prefer long tokens (to stay inside
strings, where the constrained strings' caches and shared walk work).

    python3 tests/fuzz/make_json_mask_seeds.py tests/fuzz/corpus/json_mask
"""
import json
import os
import random
import sys

S = {"type": "string"}


def string(**kw):
    return dict(S, **kw)


def branch(a, k):
    """an object branch with string "a" (schema a) and const k after it (test_json's STR_BRANCH)"""
    return {"type": "object", "properties": {"a": a, "k": {"const": k}}, "required": ["a", "k"]}


PERSON = {"type": "object", "properties": {"name": S, "age": {"type": "integer"},
          "tags": {"type": "array", "items": {"enum": ["a", "b", 1, 12]}, "minItems": 1, "maxItems": 3},
          "ok": {"type": ["boolean", "null"]}, "w": {"type": "number"}},
          "required": ["name", "tags"], "additionalProperties": False, "title": "P"}
TREE = {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "number"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
        "anyOf": [{"$ref": "#/$defs/node"}, {"type": "object", "properties": {"v": {"const": "leaf"}},
                  "required": ["v"]}, {"type": "null"}]}
STRS = {"type": "object", "properties": {"id": string(pattern="^[A-Z]{2}-\\d{3}$"),
        "d": string(format="date-time"), "e": string(format="email"), "n": string(minLength=3, maxLength=5),
        "t": string(pattern="é|中", maxLength=4), "w": string(pattern="^\\w+( \\w+)*$", maxLength=24)},
        "required": ["id", "d", "e", "n", "t", "w"]}
NUMS = {"type": "array", "items": {"type": "object", "properties": {
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "step": {"type": "integer", "multipleOf": 5, "exclusiveMaximum": 100},
        "t": {"type": "number", "minimum": -2.5, "maximum": -0.25}},
        "required": ["age", "score", "step", "t"]}, "minItems": 1}
PYD = {"$defs": {"Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
       "Cat": {"properties": {"pet_type": {"const": "cat", "enum": ["cat"], "type": "string"},
               "meows": {"maximum": 10, "minimum": 0, "type": "integer"}}, "required": ["pet_type", "meows"],
               "type": "object"},
       "Dog": {"properties": {"pet_type": {"const": "dog", "type": "string"},
               "barks": {"exclusiveMaximum": 5, "exclusiveMinimum": 0, "type": "number"}},
               "required": ["pet_type", "barks"], "type": "object"}},
       "properties": {"qty": {"maximum": 99, "minimum": 1, "type": "integer"},
                      "color": {"$ref": "#/$defs/Color", "description": "the color"},
                      "note": {"anyOf": [{"maxLength": 8, "type": "string"}, {"type": "null"}], "default": None},
                      "pet": {"discriminator": {"propertyName": "pet_type"},
                              "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}},
       "required": ["qty", "color", "pet"], "type": "object"}
AND = {"allOf": [{"type": "object", "properties": {"a": {"type": "number", "minimum": 0}, "b": S},
                  "required": ["a"], "additionalProperties": False},
                 {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5},
                  "c": {"$ref": "#/allOf/0/properties/b"}}, "required": ["c"], "additionalProperties": False}]}


def union_of(n):
    """test_json's union_of: n branches alive through string "a", told apart by "k" """
    return {"type": "object", "properties": {"u": {"anyOf": [
        {"type": "object", "properties": {"a": S, "k": {"const": i}}, "required": ["a", "k"],
         "additionalProperties": False} for i in range(n)]}}, "required": ["u"]}


STR_CONSTRAINED = [branch(string(maxLength=5), 1), branch(string(maxLength=5), 2),
                   branch(string(pattern="^[a-z ]+$", maxLength=60), 3),
                   branch(string(pattern="^[^0-9]*$", minLength=3), 4)]

UNION_TEXT = "Enjoys long walks, short programs and the quiet of early mornings; writes C for fun."


def bench_union(n, note):
    """bench_json's union_late shape: n branches, "note" (schema note(i)) then "k" const i"""
    return {"oneOf": [{"type": "object", "properties": {"note": note(i), "k": {"const": i}, "v": {"type": "number"}},
                       "required": ["note", "k", "v"], "additionalProperties": False} for i in range(n)]}


X = "oabcdefghijklmnpqrstuvwxyzABCD"  # bench_json's union_cstrx characters
BENCH_DOC = '{"note": "%s", "k": %%d, "v": 2.5}' % UNION_TEXT

# name: (schema, a document valid under it)
SCHEMAS = {
    "person": (PERSON, '{"name": "John Smith", "tags": ["a", 12], "ok": null, "w": -1.5e3}'),
    "tree": (TREE, '{"v": 1, "kids": [{"v": 2, "kids": [{"v": -3}]}, {"v": 0.5}]}'),
    "object": ({"type": "object"}, '{\n  "title": "Quarterly report",\n  "ok": true,\n  "authors": ["Ada", "Alan"],'
               '\n  "中文": "人工智能 \\"x\\" \\u00e9",\n  "n": null\n}'),
    "strings": (STRS, '{"id": "AB-123", "d": "2024-05-01T10:30:00Z", "e": "john.smith@example.com", "n": "abcd", '
                '"t": "é", "w": "hello big world"}'),
    "numbers": (NUMS, '[{"age":150,"score":0.75,"step":95,"t":-1.125},{"age":7,"score":1,"step":0,"t":-0.25}]'),
    "pydantic": (PYD, '{"qty": 3, "color": "red", "note": "short", "pet": {"pet_type": "dog", "barks": 4.5}}'),
    "allof": (AND, '{"a": 7, "b": "x", "c": "y"}'),
    "pair": ({"type": "array", "prefixItems": [S, {"type": "integer"}], "items": False}, '["x", 3]'),
    "union_same_string": (union_of(12), '{"u":{"a":"x y\\n","k":1}}'),
    "union_strings": ({"anyOf": STR_CONSTRAINED}, '{"a":"ab cdéxy","k":3}'),
    "union_strings_plain": ({"anyOf": STR_CONSTRAINED + [branch(S, 0)]}, '{"a":"ab cd\\u00e9xy 123","k":0}'),
    "union_counting": ({"anyOf": [branch(string(pattern="^.{0,6}$"), 1), branch(string(pattern="^[a-z ]{0,9}$"), 2),
                                  branch(string(pattern="^.{0,12}$"), 3)]}, '{"a":"ab cdefghijk","k":3}'),
    "union_literal": ({"anyOf": [branch(string(pattern="^.{0,6}$"), 1), branch(string(pattern="^[a-z ]{0,12}$"), 2),
                                 {"type": "object", "properties": {"a": {"enum": ["ab cde, fgh"]}, "k": {"const": 4}},
                                  "required": ["a", "k"]}]}, '{"a":"ab cde, fgh","k":4}'),
    # rv-smx4's case, small: each string takes three characters, then only its own
    "union_distinct_char": ({"anyOf": [branch(string(pattern="^(.{0,3}|.{3}%s.*)$" % c), i)
                                       for i, c in enumerate("abcxyz ")]}, '{"a":"Enjxoys","k":3}'),
    "union_maxlengths": ({"anyOf": [branch(string(maxLength=4 + i), i) for i in range(5)]}, '{"a":"abcdefgh","k":4}'),
    "union_patterns": ({"anyOf": [branch(string(pattern="^.{0,%d}$" % (3 + i)), i) for i in range(6)]},
                       '{"a":"abcdefgh","k":5}'),
    # bench_json's unions at 30 branches: rv-smx4's distinct characters, distinct maxLengths, a literal
    "bench_cstrx_30": (bench_union(30, lambda i: string(pattern="^(.{0,3}|.{3}%s.*)$" % X[29 - i])), BENCH_DOC % 29),
    "bench_cstrd_8": (bench_union(8, lambda i: string(maxLength=200 + i)), BENCH_DOC % 7),
    "bench_lit_8": (bench_union(8, lambda i: {"enum": [UNION_TEXT]} if i == 0 else S), BENCH_DOC % 7),
    "string_lower_max60": (string(pattern="^[a-z ]+$", maxLength=60), '"the quick brown fox jumps over the lazy dog"'),
    "string_min40": (string(minLength=40), '"%s"' % UNION_TEXT),
    "string_max6": (string(maxLength=6), '"abc\\u00e9f"'),
    "string_3_to_10": (string(minLength=3, maxLength=10), '"hello"'),
    "strings_max60": ({"type": "array", "items": string(pattern="^[a-z ]+$", maxLength=60)},
                      '["abcdefghijabcdefghijabcdefghijabcdefghij","ab"]'),
    "string_no_digits_min10": (string(pattern="^[^0-9]*$", minLength=10), '"no digits in here at all"'),
    "string_utf8": (string(pattern="^[é中a-z😀]{0,12}$"), '"a中é😀b"'),
    "formats": ({"type": "array", "items": {"anyOf": [string(format="email"), string(format="date"),
                                                      string(format="uuid")]}, "maxItems": 4},
                '["john@example.com", "2024-05-01", "123e4567-e89b-12d3-a456-426614174000"]'),
    "strings_anyof": ({"anyOf": [string(pattern="(a|ab)+c?$", maxLength=5), string(format="email"),
                                 string(pattern="^\\w+( \\w+)*$")]}, '"ab@c.de"'),
    "enum": ({"enum": ["red", "green", "grün", 12, 1]}, '"grün"'),
    "number_bounded": ({"type": "number", "exclusiveMinimum": -2.5, "maximum": 1000, "multipleOf": 0.125}, "12.375"),
    "deep": ({"type": "object", "properties": {"k": {"$ref": "#"}, "v": {"type": "integer"}}, "required": ["v"]},
             '{"k":{"k":{"k":{"v":1},"v":2},"v":3},"v":4}'),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus/json_mask"
    os.makedirs(out, exist_ok=True)
    rnd = random.Random(45)
    for name, (schema, doc) in SCHEMAS.items():
        json.loads(doc)
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode()
        seeds = {"doc": doc.encode() + bytes(rnd.randrange(256) for _ in range(12)),
                 "any": bytes(rnd.randrange(256) for _ in range(40)),
                 "long": bytes(rnd.randrange(64) << 2 | rnd.choice((2, 2, 2, 1, 0)) for _ in range(40))}
        for kind, steer in seeds.items():
            with open(os.path.join(out, "%s_%s" % (name, kind)), "wb") as f:
                f.write(text + b"\0" + steer)

if __name__ == "__main__":
    main()
