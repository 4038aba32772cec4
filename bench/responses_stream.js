#!/usr/bin/env node
// responses_stream.js — what a /v1/responses stream costs against a /v1/chat/completions
// stream of the same conversation on a running `dsv4 serve`: time to first token (the
// first text delta) and the gaps between text deltas (ITL), one request at a time, the two
// endpoints alternated round by round. Plain node (>= 18), no packages.
//
//   node bench/responses_stream.js --url http://127.0.0.1:8080 [--rounds 6] [--gen 64]
//        [--words 150]
//
// Greedy, --gen tokens at most; the prompt is --words words of text (the same every
// request: run the server with --prefix-entries 0 so each one is computed cold). One JSON
// line per request {endpoint, round, ttft_ms, itl_p50_ms, itl_p90_ms, tokens, bytes}, then
// one per endpoint with the medians over rounds.
'use strict';
const http = require('http');

function args() {
  const a = { url: 'http://127.0.0.1:8080', rounds: 6, gen: 64, words: 150 };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i += 2) {
    const k = v[i].replace(/^--/, '');
    if (!(k in a) || v[i + 1] === undefined) { console.error(`unknown option or missing value ${v[i]}`); process.exit(2); }
    a[k] = typeof a[k] === 'number' ? Number(v[i + 1]) : v[i + 1];
  }
  return a;
}

const WORDS = 'amber birch cedar dune ember fjord grove heath inlet juniper kelp lichen'.split(' ');

// One streamed request: resolves {ttft_ms, gaps (ms), tokens, bytes}. isText(event data)
// says whether an SSE data line carries generated text; usage(data) the output tokens.
function stream(url, path, body, isText, usage) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const ms = () => Number(process.hrtime.bigint() - t0) / 1e6;
    const req = http.request(url + path, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let buf = '', first = -1, last = -1, tokens = 0, bytes = 0;
      const gaps = [];
      res.setEncoding('utf8');
      res.on('data', (d) => {
        bytes += Buffer.byteLength(d);
        buf += d;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const line = ev.split('\n').find((l) => l.startsWith('data: '));
          if (!line || line === 'data: [DONE]') continue;
          const j = JSON.parse(line.slice(6));
          if (isText(j)) {
            const t = ms();
            if (first < 0) first = t;
            else gaps.push(t - last);
            last = t;
          }
          const u = usage(j);
          if (u !== undefined) tokens = u;
        }
      });
      res.on('end', () => resolve({ ttft_ms: first, gaps, tokens, bytes }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN; };
const r2 = (x) => Math.round(x * 100) / 100;

async function main() {
  const a = args();
  const text = Array.from({ length: a.words }, (_, k) => WORDS[(k * 5) % WORDS.length]).join(' ');
  const kinds = {
    chat: () => stream(a.url, '/v1/chat/completions',
      { model: 'm', stream: true, stream_options: { include_usage: true }, temperature: 0, max_tokens: a.gen,
        messages: [{ role: 'user', content: text }] },
      (j) => !!j.choices?.[0]?.delta?.content, (j) => j.usage?.completion_tokens),
    responses: () => stream(a.url, '/v1/responses',
      { model: 'm', stream: true, store: false, temperature: 0, max_output_tokens: a.gen, input: text },
      (j) => j.type === 'response.output_text.delta', (j) => j.response?.usage?.output_tokens),
  };
  const all = { chat: [], responses: [] };
  await kinds.chat();  // warm-up, unreported
  for (let round = 0; round < a.rounds; round++) {
    const order = round % 2 ? ['responses', 'chat'] : ['chat', 'responses'];
    for (const k of order) {
      const r = await kinds[k]();
      const row = { endpoint: k, round, ttft_ms: r2(r.ttft_ms), itl_p50_ms: r2(q(r.gaps, 0.5)),
        itl_p90_ms: r2(q(r.gaps, 0.9)), tokens: r.tokens, bytes: r.bytes };
      all[k].push(row);
      console.log(JSON.stringify(row));
    }
  }
  for (const k of Object.keys(all)) {
    const rows = all[k];
    console.log(JSON.stringify({ endpoint: k, rounds: rows.length, ttft_ms_median: r2(q(rows.map((x) => x.ttft_ms), 0.5)),
      itl_p50_ms_median: r2(q(rows.map((x) => x.itl_p50_ms), 0.5)), itl_p90_ms_median: r2(q(rows.map((x) => x.itl_p90_ms), 0.5)),
      bytes_per_token: r2(q(rows.map((x) => x.bytes / Math.max(1, x.tokens)), 0.5)) }));
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
