#!/usr/bin/env python3
"""bench/prefix_ttft.py — what a prefix-cache hit saves a served request: time to first
token of a long prompt cold, repeated, and with the same prefix and another tail, on one
`dsv4 serve` (one process, or `mpirun -np N ... --parallel ep`).

  python3 bench/prefix_ttft.py --bin build/dsv4 --model DIR --tokenizer FILE \
      [--np 2 [--attention dp|home] [--cp on|off]] [--step-tokens N] [--threads 1] [--prefix 2048] [--tail 64] [--rounds 3] [--tag T] >> OUT.jsonl

Each round has its own random prefix of --prefix token ids (a new first token, so no round
hits another's), then three completions of one token (greedy, max_tokens 1: the request's
wall clock is its TTFT plus one sampler draw): cold (prefix + tail A), repeat (prefix +
tail A again) and shared (prefix + tail B). One JSON line per request (kind, seconds,
prompt and cached tokens, the token), then one with the server's dsv4_prefix_* metrics.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={'content-type': 'application/json'})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return time.perf_counter() - t0, out


def start_server(cmd):
    """Starts `dsv4 serve` (cmd); returns (process, the ready line's pid, base url)."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, 'OMPI_MCA_mpi_yield_when_idle': '1'})
    for line in proc.stderr:
        m = re.search(r'ready on http://[^:]+:(\d+) \(pid (\d+)', line)
        if m:
            return proc, int(m.group(2)), f'http://127.0.0.1:{m.group(1)}'
    sys.exit('the server did not start')


def stop_server(proc, pid):
    """SIGTERM to the server (rank 0 under mpirun), its log drained, waited for."""
    os.kill(pid, signal.SIGTERM)
    for _ in proc.stderr:
        pass
    proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--bin', required=True)
    ap.add_argument('--model', required=True)
    ap.add_argument('--tokenizer', required=True)
    ap.add_argument('--np', type=int, default=0, help='ranks under mpirun (0: one process)')
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--prefix', type=int, default=2048)
    ap.add_argument('--tail', type=int, default=64)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--vocab', type=int, default=8192)
    ap.add_argument('--tag', default='')
    ap.add_argument('--attention', default='', help='with --np: dp or home (dsv4 serve --attention)')
    ap.add_argument('--cp', default='', help='with --attention dp: on or off (dsv4 serve --cp)')
    ap.add_argument('--step-tokens', type=int, default=0, help='dsv4 serve --step-tokens (0: its default)')
    a = ap.parse_args()
    serve = [a.bin, 'serve', '--model', a.model, '--tokenizer', a.tokenizer, '--port', '0',
             '--threads', str(a.threads), '--max-seqs', '2', '--max-context', str(a.prefix + 2 * a.tail + 64)]
    if a.step_tokens:
        serve += ['--step-tokens', str(a.step_tokens)]
    if a.np:
        serve = ['mpirun', '--allow-run-as-root', '--oversubscribe', '-np', str(a.np)] + serve + ['--parallel', 'ep']
        if a.attention:
            serve += ['--attention', a.attention]
        if a.cp:
            serve += ['--cp', a.cp]
    proc, pid, url = start_server(serve)
    rng = random.Random(1234)
    try:
        for rnd in range(a.rounds):
            prefix = [rng.randrange(100, a.vocab) for _ in range(a.prefix)]
            tail_a = [rng.randrange(100, a.vocab) for _ in range(a.tail)]
            tail_b = [rng.randrange(100, a.vocab) for _ in range(a.tail)]
            for kind, prompt in (('cold', prefix + tail_a), ('repeat', prefix + tail_a), ('shared', prefix + tail_b)):
                s, out = post(url + '/v1/completions', {'model': 'm', 'prompt': prompt, 'max_tokens': 1,
                                                        'temperature': 0})
                u = out['usage']
                print(json.dumps({'tag': a.tag, 'np': a.np, 'attention': a.attention, 'cp': a.cp,
                                  'step_tokens': a.step_tokens, 'threads': a.threads, 'round': rnd, 'kind': kind,
                                  'seconds': round(s, 4), 'prompt_tokens': u['prompt_tokens'],
                                  'cached_tokens': u['prompt_tokens_details']['cached_tokens'],
                                  'text': out['choices'][0]['text']}), flush=True)
        with urllib.request.urlopen(url + '/metrics') as r:
            met = {k: float(v) for k, v in re.findall(r'^(dsv4_prefix_\w+) (\S+)$', r.read().decode(), re.M)}
        print(json.dumps({'tag': a.tag, 'np': a.np, 'metrics': met}), flush=True)
    finally:
        stop_server(proc, pid)


if __name__ == '__main__':
    main()
