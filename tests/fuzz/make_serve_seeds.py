#!/usr/bin/env python3
"""make_serve_seeds.py CAPTURE_DIR OUT_DIR — fuzz_serve's seeds from the request bodies the
server tests send (captured by capture_bodies.js), in its input format: a control byte (the
route, and a variant of the answer's end and tokens), the body, a NUL byte, a model answer
that fits the request (a DSML tool call when it offers tools, reasoning when it thinks, JSON
when it asks for JSON). Bodies over 8,000 bytes are left out (the target's -max_len is
8,192); at most three bodies of each route and set of top-level keys are kept. A few seeds
chain records: a stored response, then one that continues it (previous_response_id) and the
lookups of GET / DELETE /v1/responses/{id}.
"""
import hashlib
import json
import os
import sys

ROUTES = {"/v1/chat/completions": 0, "/v1/completions": 1, "/v1/messages": 2,
          "/v1/messages/count_tokens": 3, "/v1/responses": 4, "/tokenize": 5, "/detokenize": 6}
D = "｜DSML｜"


def splitmix64(z):
    m = (1 << 64) - 1
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & m
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & m
    return z ^ (z >> 31)


def resp_id(no):
    """the id of the input's no-th answer (the server's id salt 0, as in fuzz_serve)"""
    return "resp_%016x%d" % (splitmix64(no * 0x9E3779B97F4A7C15 & ((1 << 64) - 1)), no)


def tool_name(tools):
    for t in tools if isinstance(tools, list) else []:
        if isinstance(t, dict):
            f = t.get("function") if isinstance(t.get("function"), dict) else t
            if isinstance(f.get("name"), str):
                return f["name"]
    return None


def answer(body):
    think = isinstance(body, dict) and any(k in body for k in ("thinking", "reasoning", "reasoning_effort"))
    text = "Let me see.</think>" if think else ""
    name = tool_name(body.get("tools")) if isinstance(body, dict) else None
    if name:
        return (text + "Calling.\n\n<%stool_calls>\n<%sinvoke name=\"%s\">\n"
                "<%sparameter name=\"city\" string=\"true\">Paris</%sparameter>\n"
                "<%sparameter name=\"days\" string=\"false\">3</%sparameter>\n"
                "</%sinvoke>\n</%stool_calls>" % (D, D, name, D, D, D, D, D, D))
    if isinstance(body, dict) and any(k in body for k in ("response_format", "output_config", "text")):
        return text + '{"name": "Ada", "age": 36}'
    return text + "Hello there, a short answer."


def main():
    cap, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    kept, seeds = {}, {}
    for f in sorted(os.listdir(cap)):
        d = json.load(open(os.path.join(cap, f)))
        route = ROUTES.get(d["path"])
        raw = d["body"].encode("latin1")
        if route is None or len(raw) > 8000:
            continue
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        sig = (route, tuple(sorted(body)) if isinstance(body, dict) else type(body).__name__)
        if kept.get(sig, 0) >= 3:
            continue
        kept[sig] = kept.get(sig, 0) + 1
        h = int(hashlib.sha1(raw).hexdigest(), 16)
        ctl = route | ((h >> 8) & 0x60) | ((h >> 4) & 0x80)  # the end and the tokens vary
        seeds["%d_%s" % (route, hashlib.sha1(raw).hexdigest()[:10])] = (
            bytes([ctl]) + raw + b"\0" + answer(body).encode())
    # chains over the stored responses
    first = json.dumps({"model": "m", "input": "Name a colour.", "store": True}).encode()
    cont = json.dumps({"model": "m", "input": [{"role": "user", "content": "And another?"}],
                       "previous_response_id": resp_id(1), "truncation": "auto"}).encode()
    look = [{"method": "GET", "path": resp_id(1)},
            {"method": "GET", "path": resp_id(2) + "/input_items", "order": "asc", "limit": "2"},
            {"method": "GET", "path": resp_id(2) + "/input_items", "after": "msg_x", "order": "desc"},
            {"method": "DELETE", "path": resp_id(1)}]
    for i, lk in enumerate(look):
        seeds["chain_%d" % i] = (b"\x04" + first + b"\0Blue.\0\x04" + cont + b"\0Green.\0\x07" +
                                 json.dumps(lk).encode() + b"\0")
    # background responses: polled, cancelled, a stream followed from the start and after an event
    bg = json.dumps({"model": "m", "input": "Name a colour.", "background": True, "store": True}).encode()
    bgs = json.dumps({"model": "m", "input": "Name a colour.", "background": True, "stream": True}).encode()
    later = [{"method": "GET", "path": resp_id(1)}, {"method": "POST", "path": resp_id(1) + "/cancel"},
             {"method": "GET", "path": resp_id(1), "stream": True},
             {"method": "GET", "path": resp_id(1), "stream": True, "starting_after": "2"}]
    for i, lk in enumerate(later):
        seeds["background_%d" % i] = ((b"\x04" + bg if i < 2 else b"\x04" + bgs) + b"\0Blue.\0\x07" +
                                      json.dumps(lk).encode() + b"\0")
    # POST /v1/responses/input_tokens continuing the first
    count = {"method": "POST", "path": "input_tokens", "body": {"model": "m", "previous_response_id": resp_id(1),
                                                                "input": "And another?", "truncation": "auto"}}
    seeds["input_tokens_0"] = b"\x04" + first + b"\0Blue.\0\x07" + json.dumps(count).encode() + b"\0"
    seeds["chain_small_ctx"] = (b"\x04" + first + b"\0" + b"Blue. " * 60 + b"\0\x14" + cont + b"\0Green.")
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("make_serve_seeds: %d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
