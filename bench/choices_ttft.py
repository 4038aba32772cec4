#!/usr/bin/env python3
"""bench/choices_ttft.py — what OpenAI's `n` saves: one request of n choices against n separate
concurrent requests of the same prompt and against one request of n = 1, on one `dsv4 serve`.

  python3 bench/choices_ttft.py --bin build/dsv4 --model DIR --tokenizer FILE \
      [--prompt 1536] [--n 4] [--max-tokens 16] [--threads 2] [--serve-args "..."] [--tag T] \
      [--np 2 --attention dp|home] >> OUT.jsonl

Each mode streams a /v1/completions of its own random prompt of --prompt token ids (a new first
token each, so no mode hits another's prefix cache), seeded sampling, --max-tokens
tokens a choice: n1 (one request, n = 1), nN (one request, n = N), sepN (N requests of n = 1 at
once, on N threads). One JSON line per mode: time to each choice's first token (seconds from
the send; the first and the last of them), the wall time to the last [DONE], and the
server's counters over the mode: prompt rows computed (step rows - decode rows: rank 0's steps
only under --attention dp), choices forked and the prompt positions they shared (every rank's).
"""
import argparse
import json
import os
import random
import re
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prefix_ttft import start_server, stop_server  # noqa: E402


def stream(url, body, t0, firsts, base=0):
    """POSTs a streamed completion; records each choice's first token time in firsts."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={'content-type': 'application/json'})
    with urllib.request.urlopen(req, timeout=900) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith('data: ') or line == 'data: [DONE]':
                continue
            for c in json.loads(line[6:]).get('choices', []):
                if c.get('text') and base + c['index'] not in firsts:
                    firsts[base + c['index']] = time.perf_counter() - t0
    return time.perf_counter() - t0


def counters(url):
    with urllib.request.urlopen(url + '/metrics') as r:
        t = r.read().decode()
    return {k: float(v) for k, v in re.findall(r'^(dsv4_\w+) (\S+)$', t, re.M)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--bin', required=True)
    ap.add_argument('--model', required=True)
    ap.add_argument('--tokenizer', required=True)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--prompt', type=int, default=1536)
    ap.add_argument('--n', type=int, default=4)
    ap.add_argument('--max-tokens', type=int, default=16)
    ap.add_argument('--vocab', type=int, default=8192)
    ap.add_argument('--tag', default='')
    ap.add_argument('--serve-args', default='', help='more dsv4 serve flags (e.g. "--prefix-entries 0")')
    ap.add_argument('--np', type=int, default=0, help='ranks under mpirun (0: one process)')
    ap.add_argument('--attention', default='dp', help='with --np: dp or home (dsv4 serve --attention)')
    a = ap.parse_args()
    serve = [a.bin, 'serve', '--model', a.model, '--tokenizer', a.tokenizer, '--port', '0',
             '--threads', str(a.threads), '--max-seqs', str(a.n),
             '--max-context', str(a.prompt + a.max_tokens + 64)] + a.serve_args.split()
    if a.np:
        serve = ['mpirun', '--allow-run-as-root', '--oversubscribe', '-np', str(a.np)] + serve + [
            '--parallel', 'ep', '--attention', a.attention]
    proc, pid, url = start_server(serve)
    rng = random.Random(4321)
    try:
        for mode in ('n1', f'n{a.n}', f'sep{a.n}'):
            prompt = [rng.randrange(100, a.vocab) for _ in range(a.prompt)]
            body = {'model': 'm', 'prompt': prompt, 'max_tokens': a.max_tokens, 'temperature': 1.0,
                    'seed': 7, 'stream': True}
            before = counters(url)
            firsts = {}
            t0 = time.perf_counter()
            if mode == 'n1':
                total = stream(url + '/v1/completions', body, t0, firsts)
            elif mode.startswith('n'):
                total = stream(url + '/v1/completions', {**body, 'n': a.n}, t0, firsts)
            else:
                ths = [threading.Thread(target=stream, args=(url + '/v1/completions',
                                                            {**body, 'seed': 7 + i}, t0, firsts, 100 * i))
                       for i in range(a.n)]
                for t in ths:
                    t.start()
                for t in ths:
                    t.join()
                total = time.perf_counter() - t0
            after = counters(url)
            d = {k: after.get(k, 0) - before.get(k, 0) for k in
                 ('dsv4_step_rows_total', 'dsv4_decode_rows_total', 'dsv4_choices_forked_total',
                  'dsv4_prompt_tokens_forked_total', 'dsv4_steps_total')}
            ft = sorted(firsts.values())
            print(json.dumps({'tag': a.tag, 'serve_args': a.serve_args, 'np': a.np,
                              'attention': a.attention if a.np else '', 'mode': mode, 'prompt': a.prompt, 'max_tokens': a.max_tokens,
                              'ttft_first': round(ft[0], 3), 'ttft_last': round(ft[-1], 3), 'choices': len(ft),
                              'total': round(total, 3),
                              'prompt_rows': d['dsv4_step_rows_total'] - d['dsv4_decode_rows_total'],
                              'steps': d['dsv4_steps_total'], 'forked': d['dsv4_choices_forked_total'],
                              'forked_tokens': d['dsv4_prompt_tokens_forked_total']}), flush=True)
    finally:
        stop_server(proc, pid)

if __name__ == '__main__':
    main()
