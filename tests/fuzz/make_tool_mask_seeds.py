#!/usr/bin/env python3
"""Seeds for fuzz_tool_mask (and the ctest test_fuzz_tool_mask, which replays them): the
tools of tests/sample/test_tool_match.c and bench/bench_tools.c's shapes, as the target reads
them (fuzz_tool_mask.c): a flags byte (1: TM_AUTO, 2: one call, 4: a JSON document beside
AUTO tools), the tools' JSON, a NUL, [the document's schema, a NUL], a text that steers the
tokens (the longest allowed token the text goes on with, else its next byte a choice: the
low bit 1 for the long ids, the other seven the place among them). Per tools list: a block
written out (then a few random bytes), random choices, and choices that prefer long tokens;
AUTO lists also free text before the block, and with a document the document.

    python3 tests/fuzz/make_tool_mask_seeds.py tests/fuzz/corpus/tool_mask
"""
import json
import os
import random
import sys

DS = "｜DSML｜"
S = {"type": "string"}


def tool(name, props=None, required=(), strict=True):
    fn = {"name": name}
    if strict:
        fn["strict"] = True
        fn["parameters"] = {"type": "object", "properties": props or {}, "required": list(required),
                            "additionalProperties": False}
    elif props is not None:
        fn["parameters"] = {"type": "object", "properties": props}
    return {"type": "function", "function": fn}


def par(name, string, value):
    return '<%sparameter name="%s" string="%s">%s</%sparameter>\n' % (DS, name, string, value, DS)


def block(*invokes):
    """the block as the chat template's encoder writes it: invokes are (name, [par(...)])"""
    body = "".join('<%sinvoke name="%s">\n%s</%sinvoke>\n' % (DS, n, "".join(ps), DS) for n, ps in invokes)
    return "\n\n<%stool_calls>\n%s</%stool_calls>" % (DS, body, DS)


def branch(k, mx):
    return {"type": "object", "properties": {"note": dict(S, maxLength=mx), "k": {"const": k}},
            "required": ["note", "k"], "additionalProperties": False}


WEATHER = tool("get_weather", {"city": dict(S, maxLength=12), "unit": {"enum": ["c", "f"]}, "days": {"type": "integer"},
                               "where": {"type": "object", "properties": {"lat": {"type": "number"},
                                                                          "tag": dict(S, maxLength=4)},
                                         "required": ["lat"], "additionalProperties": False},
                               "note": {"type": ["string", "null"], "maxLength": 6}, "memo": S,
                               "meta": {"type": "object", "properties": {"k": S}}},
               ["city", "unit", "days", "where"])
CLOCK = tool("get_time", {"zone": {"enum": ["utc", "cet"]}, "label": dict(S, minLength=2, maxLength=10)})
FREE = tool("search", {"q": dict(S, pattern="(?=x)")}, strict=False)
A = tool("a", {"note": dict(S, maxLength=12), "code": dict(S, pattern="^[a-z]+$"), "tag": dict(S, pattern="^[a-z<]+$"),
               "item": {"oneOf": [branch(0, 8), branch(1, 9), branch(2, 10)]},
               "either": {"anyOf": [{"enum": ["alpha beta"]}, dict(S, maxLength=20), {"type": "integer", "minimum": 3}]}})
B = tool("b", {"note": dict(S, maxLength=12), "code": dict(S, pattern="^[a-y]+$")})
F = tool("f", None, strict=False)
E = tool("e", {"m": {"enum": ["one  two", 3]}, "c": {"const": {"k": "p  q"}},
               "o": {"type": "object", "properties": {"a  b": {"type": "integer"}}, "required": ["a  b"],
                     "additionalProperties": False},
               "u": {"anyOf": [dict(S, pattern="^[a-z ]+$"), S, {"type": "integer"}]}}, ["m"])
NOPARAMS = {"type": "function", "function": {"name": "ping", "strict": True}}
UNION30 = tool("u", {"x": {"oneOf": [branch(i, 200) for i in range(30)]}}, ["x"])
DOC = {"type": "object", "properties": {"ok": {"type": "boolean"}, "msg": dict(S, maxLength=20)}, "required": ["ok"],
       "additionalProperties": False}

WEATHER_CALL = block(("get_weather", [par("city", "true", "Paris <centre>"), par("unit", "true", "c"),
                                      par("days", "false", "3"), par("where", "false", '{"lat": 48.85, "tag": "a b"}'),
                                      par("note", "false", "null")]))
FAST_CALL = block(("a", [par("note", "true", 'ab "q" <i>'), par("tag", "true", "ab<c"), par("code", "true", "xyz"),
                         par("item", "false", '{"note": "abc de", "k": 1}'), par("either", "false", '"alpha b"')]),
                  ("b", [par("code", "true", "ab")]), ("f", [par("x y", "false", '{"k": [1, "<"]}')]))

# name: (flags, tools, document schema or None, texts that steer to the block or the document)
CASES = {
    "weather_clock": (0, [WEATHER, CLOCK], None, [WEATHER_CALL]),
    "weather_clock_single": (2, [WEATHER, CLOCK], None,
                             [block(("get_time", [par("zone", "true", "utc"), par("label", "true", "ab  c")]))]),
    "weather_auto": (1, [WEATHER, FREE], None, ["Let me check: a <b> tag.\n\n" + WEATHER_CALL[2:]]),
    "fast": (0, [A, B, F], None, [FAST_CALL]),
    "fast_auto_doc": (1 | 2 | 4, [A, B, F], DOC, ['\n\n{"ok": true, "msg": "a <' + DS[:4] + '"}',
                                                   block(("a", [par("either", "false", "12")]))]),
    "text_ws": (0, [E], None, [block(("e", [par("m", "false", '"one  two"'), par("c", "false", '{"k":"p  q"}'),
                                            par("o", "false", '{"a  b": 1}'), par("u", "false", '"ab  cd"')]))]),
    "free_and_noparams": (1, [F, NOPARAMS], None, ["ok.\n\n" + block(("ping", []), ("f", [par("q", "true", "x")]))[2:]]),
    "union30": (0, [UNION30], None, [block(("u", [par("x", "false", '{"note": "a  b <c> d", "k": 29}')]))]),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus/tool_mask"
    os.makedirs(out, exist_ok=True)
    rnd = random.Random(46)
    for name, (flags, tools, doc, texts) in CASES.items():
        head = bytes([flags]) + json.dumps(tools, separators=(",", ":"), ensure_ascii=False).encode() + b"\0"
        if doc is not None:
            head += json.dumps(doc, separators=(",", ":")).encode() + b"\0"
        seeds = {"any": bytes(rnd.randrange(256) for _ in range(60)),
                 "long": bytes(rnd.randrange(128) << 1 | rnd.choice((1, 1, 0)) for _ in range(60))}
        for i, t in enumerate(texts):
            seeds["text%d" % i] = t.encode() + bytes(rnd.randrange(256) for _ in range(12))
        for kind, steer in seeds.items():
            with open(os.path.join(out, "%s_%s" % (name, kind)), "wb") as f:
                f.write(head + steer)


if __name__ == "__main__":
    main()
