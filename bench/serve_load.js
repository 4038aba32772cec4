#!/usr/bin/env node
// serve_load.js — load generator for `dsv4 serve`: throughput, time to first token and
// inter-token latency against concurrency. Plain node (>= 18), no packages.
//
//   node bench/serve_load.js --url http://127.0.0.1:8080 [--levels 1,2,4,8,16,32]
//        [--requests-per-level N] [--prompt-len 128] [--gen 64] [--key KEY] [--vocab 8192]
//        [--eos 1] [--seed 1] [--serial C] [--client http|fetch] [--warmup 1] [--server-pid P]
//        [--response-format JSON] [--arrival-body FILE] [--arrival-path P] [--arrival-ms T]
//
// Each level keeps `c` streaming /v1/completions requests in flight (prompts of
// --prompt-len random token ids below --vocab, greedy, --gen tokens, the EOS id --eos banned
// through logit_bias so every request runs its full length) until N requests (default 2c,
// at least 8) are done. --serial C adds one line (serial: true) after the levels: the
// workload of level C (its request count, the same prompt lengths) served one request at a
// time. --warmup W requests (16 tokens) go first, unreported. --client http (node:http, a
// chunk's bytes searched, only the last events parsed) costs this process ~0.5 ms of CPU a
// token on the bench VM, fetch (web streams, a JSON.parse an event: the old client) ~0.65:
// on the server's machine that CPU is taken from the engine (session 38, srv).
// One JSON line per level on stdout:
//   concurrency, requests, gen_tokens, wall_s, gen_tok_s (generated tokens / wall),
//   decode_tok_s (tokens after each request's first / time from the first first-token to
//   the last token), steady_decode_tok_s (tokens per second while the first c requests all
//   decode and no prefill runs: one wave, ~64 tokens at c = 1, a noisy figure),
//   steady_decode_all_tok_s (the same over every stretch in which c requests decode, all
//   waves; steady_decode_all_s their seconds), server_steady_decode_tok_s (the server's
//   decode-only steps: their rows / their seconds with the scheduler's time before each,
//   from /metrics), ttft_p50_ms, ttft_p99_ms, itl_p50_ms, itl_p99_ms,
//   server_steps, server_decode_rows_per_step, server_step_s (the steps' wall time),
//   server_forward_s, server_phase_s (seconds per step phase) (from /metrics), loadavg_1m
//   (the machine's 1-minute load average when the level started), client_cpu_s and
//   client_cpu_ms_per_token (this process), server_cpu_s (the server process, /metrics);
//   with --server-pid (a server on this machine): server_http_cpu_s and
//   server_http_cpu_ms_per_token, the server's CPU outside its engine's threads (the
//   process's, /proc/P/stat, less that of its threads not named MHD-*: the HTTP threads',
//   live or exited)
'use strict';

// --arrival-body FILE: while each level runs, one more client POSTs FILE's bytes to
// --arrival-path (default /v1/chat/completions) every --arrival-ms (default 1000; the next
// one goes when the last was answered and at least that long after the last was sent): long
// prompts arriving beside the streams, whatever their answer (an over-long one's 400 costs
// the server its parse, template and tokenization, no engine work). Adds arrivals,
// arrival_status ({status: count}), arrival_ms_p50 (send to answer). Every level also reports
// itl_max_ms, and steady_itl_p50_ms / _p90 / _p99 / _p999 / _max_ms: the gaps that end while c requests
// decode (steady_decode_all's stretches: no prefill beside them).
// --arrival-burst B (default 1): each arrival is B such POSTs at once. --probe-body FILE: a
// small request (FILE's bytes to --probe-path, default /v1/chat/completions) sent
// --probe-after-ms (default 20) after each arrival's POSTs, while they are being read in:
// probe_ms_p50 / _max (send to answer; with a 1-token answer its time to first token).
//
// --response-format JSON: structured output on every request (the object as given)
function format(a) { return a['response-format'] ? { response_format: JSON.parse(a['response-format']) } : {}; }

function args() {
  const a = { url: 'http://127.0.0.1:8080', levels: '1,2,4,8,16,32', 'prompt-len': 128, gen: 64,
    'requests-per-level': 0, key: '', eos: 1, seed: 1, vocab: 8192, serial: 0, client: 'http', warmup: 1,
    'server-pid': 0, 'response-format': '', 'arrival-body': '', 'arrival-path': '/v1/chat/completions',
    'arrival-ms': 1000, 'arrival-burst': 1, 'probe-body': '', 'probe-path': '/v1/chat/completions',
    'probe-after-ms': 20 };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i += 2) {
    const k = v[i].replace(/^--/, '');
    if (!(k in a) || v[i + 1] === undefined) { console.error(`unknown option or missing value ${v[i]}`); process.exit(2); }
    a[k] = typeof a[k] === 'number' ? Number(v[i + 1]) : v[i + 1];
  }
  // a misspelt client would otherwise run the fetch one and mislabel the figures
  if (!['http', 'fetch'].includes(a.client)) { console.error(`--client ${a.client}: must be http or fetch`); process.exit(2); }
  return a;
}

const pct = (xs, p) => {
  if (!xs.length) return null;
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

async function metrics(url) {
  const t = await (await fetch(url + '/metrics')).text();
  const m = {};
  for (const line of t.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

let rng = 1;
const rand = () => { rng = (rng * 1103515245 + 12345) % 2147483648; return rng; };

// One streaming request over node:http (no web streams, no TextDecoder: a chunk is a
// Buffer, an event is found by its bytes and only the last ones are parsed); resolves
// {t0, first, last, n, gaps}.
const http = require('http');
const agent = new http.Agent({ keepAlive: true });
function oneHttp(a, vocab) {
  const prompt = Array.from({ length: a['prompt-len'] }, () => 2 + (rand() % (vocab - 2)));
  const body = JSON.stringify({ model: 'm', prompt, max_tokens: a.gen, temperature: 0, stream: true,
    stream_options: { include_usage: true }, logit_bias: { [String(a.eos)]: -100 }, ...format(a) });
  const u = new URL(a.url + '/v1/completions');
  const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
  if (a.key) headers.authorization = 'Bearer ' + a.key;
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers, agent }, (res) => {
      let buf = '', first = null, last = null, n = 0, err = null;
      const gaps = [];
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        const now = performance.now();
        buf += chunk;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          if (res.statusCode !== 200 || !ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
          // a token's chunk has "finish_reason":null; the finish, usage and error ones are parsed
          if (!ev.includes('"finish_reason":null')) {
            const j = JSON.parse(ev.slice(6));
            if (j.error) err = new Error(`server error event: ${j.error.message}`);
            if (j.usage) n = j.usage.completion_tokens;
            continue;
          }
          if (first === null) first = now;
          else gaps.push(now - last);
          last = now;
        }
      });
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}: ${buf}`));
        if (err) return reject(err);
        if (n !== a.gen) return reject(new Error(`a request ended after ${n} of ${a.gen} tokens`));
        resolve({ t0, first, last, n, gaps });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

// One streaming request; resolves {t0, first, last, n, gaps}.
async function one(a, vocab) {
  if (a.client === 'http') return oneHttp(a, vocab);
  const prompt = Array.from({ length: a['prompt-len'] }, () => 2 + (rand() % (vocab - 2)));
  const body = { model: 'm', prompt, max_tokens: a.gen, temperature: 0, stream: true,
    stream_options: { include_usage: true }, logit_bias: { [String(a.eos)]: -100 }, ...format(a) };
  const headers = { 'content-type': 'application/json' };
  if (a.key) headers.authorization = 'Bearer ' + a.key;
  const t0 = performance.now();
  const res = await fetch(a.url + '/v1/completions', { method: 'POST', headers, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const dec = new TextDecoder();
  let buf = '', first = null, last = null, n = 0;
  const gaps = [];
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      if (j.error) throw new Error(`server error event: ${j.error.message}`);
      if (j.usage) { n = j.usage.completion_tokens; continue; }
      if (!j.choices?.length || j.choices[0].finish_reason) continue;
      const now = performance.now();
      if (first === null) first = now;
      else gaps.push(now - last);
      last = now;
    }
  }
  if (n !== a.gen) throw new Error(`a request ended after ${n} of ${a.gen} tokens`);
  return { t0, first, last, n, gaps };
}

// One POST of body to path; resolves its status.
function post(a, path, body) {
  const u = new URL(a.url + path);
  const headers = { 'content-type': 'application/json', 'content-length': body.length };
  if (a.key) headers.authorization = 'Bearer ' + a.key;
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers, agent },
      (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); res.on('error', reject); });
    req.on('error', reject);
    req.end(body);
  });
}

// The arrival client (--arrival-body, --arrival-burst at once, a --probe-body after them)
// until stop() is true; resolves {n, status, ms, probe}.
async function arrivals(a, stop) {
  const out = { n: 0, status: {}, ms: [], probe: [] };
  if (!a['arrival-body']) return out;
  const fs = require('fs');
  const body = fs.readFileSync(a['arrival-body']);
  const probe = a['probe-body'] ? fs.readFileSync(a['probe-body']) : null;
  while (!stop()) {
    const t0 = performance.now();
    const sent = Array.from({ length: a['arrival-burst'] }, () => post(a, a['arrival-path'], body).then((st) => {
      out.n++;
      out.status[st] = (out.status[st] || 0) + 1;
      out.ms.push(performance.now() - t0);
    }));
    if (probe) {
      await new Promise((r) => setTimeout(r, a['probe-after-ms']));
      const p0 = performance.now();
      const st = await post(a, a['probe-path'], probe);
      if (st !== 200) throw new Error(`the probe answered ${st}`);
      out.probe.push(performance.now() - p0);
    }
    await Promise.all(sent);
    const wait = a['arrival-ms'] - (performance.now() - t0);
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  return out;
}

const PHASES = ['admit', 'forward', 'head', 'sample', 'snapshot', 'mtp'];

// CPU seconds of process pid so far: all its threads' (exited ones too) and those of its
// live threads not named MHD-* or dsv4-intake* (the engine's: scheduler, pool workers; main,
// watcher idle).
let clkTck = 0;
function serverCpu(pid) {
  if (!pid) return null;
  if (!clkTck) clkTck = Number(require('child_process').execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
  const fs = require('fs');
  const ticks = (st) => { const f = st.slice(st.lastIndexOf(')') + 2).split(' '); return Number(f[11]) + Number(f[12]); };
  let engine = 0;
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const st = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = st.slice(st.indexOf('(') + 1, st.lastIndexOf(')'));
      if (!name.startsWith('MHD-') && !name.startsWith('dsv4-intake')) engine += ticks(st);
    } catch (e) { /* the thread ended meanwhile */ }
  }
  return { total: ticks(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')) / clkTck, engine: engine / clkTck };
}

// One level: `c` clients until `total` requests are done (serial: c = 1 with the request
// count of level `serial`).
async function level(a, c, vocab, serial = 0) {
  const total = a['requests-per-level'] || Math.max(8, 2 * (serial || c));
  const load = require('os').loadavg()[0];
  const m0 = await metrics(a.url);
  const s0 = serverCpu(a['server-pid']);
  const cpu0 = process.cpuUsage();
  const out = [];
  let next = 0;
  const t0 = performance.now();
  let done = false;
  const arr = arrivals(a, () => done);
  await Promise.all(Array.from({ length: c }, async () => {
    while (next < total) { const i = next++; out[i] = await one(a, vocab); }  // in start order
  }));
  const wall = (performance.now() - t0) / 1000;
  done = true;
  const ar = await arr;
  const cpu = process.cpuUsage(cpu0);
  const s1 = serverCpu(a['server-pid']);
  const m1 = await metrics(a.url);
  const http = s0 && s1 ? (s1.total - s0.total) - (s1.engine - s0.engine) : null;
  const gen = out.reduce((s, r) => s + r.n, 0);
  const firstFirst = Math.min(...out.map((r) => r.first));
  const lastLast = Math.max(...out.map((r) => r.last));
  const steps = m1.dsv4_steps_total - m0.dsv4_steps_total;
  // steady decode: between the moment every request of the first wave has its first token
  // and the moment the first one finishes, no prefill runs (with one wave per level)
  const times = out.map((r) => { let t = r.first; return [t, ...r.gaps.map((g) => (t += g))]; });
  const from = Math.max(...out.slice(0, c).map((r) => r.first));
  const to = Math.min(...out.slice(0, c).map((r) => r.last));
  const inWindow = times.reduce((s, ts) => s + ts.filter((t) => t > from && t <= to).length, 0);
  // the same over every wave: each stretch in which c requests decode (from the moment the
  // c-th has its first token to the moment the next one finishes), tokens (t_from, t_to]
  const edges = out.flatMap((r) => [[r.first, 1], [r.last, -1]]).sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let active = 0, allTok = 0, allS = 0;
  const steadyGaps = [];  // the gaps that end in those stretches: no prefill beside them
  for (let i = 0; i < edges.length; i++) {
    active += edges[i][1];
    if (active !== c || i + 1 === edges.length) continue;
    const f = edges[i][0], t = edges[i + 1][0];
    allS += (t - f) / 1000;
    allTok += times.reduce((s, ts) => s + ts.filter((x) => x > f && x <= t).length, 0);
    for (const ts of times)
      for (let k = 1; k < ts.length; k++) if (ts[k] > f && ts[k] <= t) steadyGaps.push(ts[k] - ts[k - 1]);
  }
  const phase = (p) => m1[`dsv4_step_phase_seconds_total{phase="${p}"}`] - m0[`dsv4_step_phase_seconds_total{phase="${p}"}`];
  return {
    concurrency: c, ...(serial ? { serial: true } : {}), requests: total, prompt_len: a['prompt-len'], gen: a.gen,
    gen_tokens: gen,
    wall_s: +wall.toFixed(3), gen_tok_s: +(gen / wall).toFixed(2),
    decode_tok_s: +((gen - out.length) / ((lastLast - firstFirst) / 1000)).toFixed(2),
    steady_decode_tok_s: to > from ? +(inWindow / ((to - from) / 1000)).toFixed(2) : null,
    steady_decode_all_tok_s: allS > 0 ? +(allTok / allS).toFixed(2) : null,
    steady_decode_all_s: +allS.toFixed(3),
    // the server's own count: its decode-only steps' rows over their seconds (null before
    // the server had dsv4_decode_steps_total)
    server_steady_decode_tok_s: m1.dsv4_decode_step_seconds_total === undefined ? null
      : +((m1.dsv4_decode_step_rows_total - m0.dsv4_decode_step_rows_total) /
          (m1.dsv4_decode_step_seconds_total - m0.dsv4_decode_step_seconds_total)).toFixed(2),
    ttft_p50_ms: +pct(out.map((r) => r.first - r.t0), 50).toFixed(1),
    ttft_p99_ms: +pct(out.map((r) => r.first - r.t0), 99).toFixed(1),
    itl_p50_ms: +pct(out.flatMap((r) => r.gaps), 50).toFixed(1),
    itl_p99_ms: +pct(out.flatMap((r) => r.gaps), 99).toFixed(1),
    itl_max_ms: +Math.max(...out.flatMap((r) => r.gaps)).toFixed(1),
    steady_itl_p50_ms: steadyGaps.length ? +pct(steadyGaps, 50).toFixed(1) : null,
    steady_itl_p90_ms: steadyGaps.length ? +pct(steadyGaps, 90).toFixed(1) : null,
    steady_itl_p99_ms: steadyGaps.length ? +pct(steadyGaps, 99).toFixed(1) : null,
    steady_itl_p999_ms: steadyGaps.length ? +pct(steadyGaps, 99.9).toFixed(1) : null,
    steady_itl_max_ms: steadyGaps.length ? +Math.max(...steadyGaps).toFixed(1) : null,
    ...(a['arrival-body'] ? { arrivals: ar.n, arrival_status: ar.status,
      arrival_ms_p50: +pct(ar.ms, 50).toFixed(1) } : {}),
    ...(ar.probe.length ? { probes: ar.probe.length, probe_ms_p50: +pct(ar.probe, 50).toFixed(1),
      probe_ms_max: +Math.max(...ar.probe).toFixed(1) } : {}),
    server_steps: steps,
    server_decode_rows_per_step: +((m1.dsv4_decode_rows_total - m0.dsv4_decode_rows_total) / steps).toFixed(2),
    server_step_s: +(m1.dsv4_step_seconds_sum - m0.dsv4_step_seconds_sum).toFixed(3),
    server_forward_s: +phase('forward').toFixed(3),
    server_phase_s: Object.fromEntries(PHASES.map((p) => [p, +phase(p).toFixed(4)])),
    loadavg_1m: +load.toFixed(2),
    // CPU seconds of this load client and of the server process over the level, and per
    // generated token in ms: on one machine the client's share is taken from the engine
    client_cpu_s: +((cpu.user + cpu.system) / 1e6).toFixed(3),
    client_cpu_ms_per_token: +((cpu.user + cpu.system) / 1e3 / gen).toFixed(4),
    server_cpu_s: m1.process_cpu_seconds_total === undefined ? null
      : +(m1.process_cpu_seconds_total - m0.process_cpu_seconds_total).toFixed(3),
    ...(http === null ? {} : { server_http_cpu_s: +http.toFixed(3),
      server_http_cpu_ms_per_token: +(1000 * http / gen).toFixed(4) }),
  };
}

(async () => {
  const a = args();
  rng = a.seed;
  // warm-up requests, not reported: the first request after a server's start and this
  // client's own first (its JIT) ran slow (a level's first wave at 342 tok/s, the next ones
  // 450-507, in one server's trace)
  for (let i = 0; i < a.warmup; i++) await one({ ...a, gen: Math.min(a.gen, 16) }, a.vocab);
  rng = a.seed;
  for (const c of String(a.levels).split(',').map(Number)) console.log(JSON.stringify(await level(a, c, a.vocab)));
  if (a.serial) console.log(JSON.stringify(await level(a, 1, a.vocab, a.serial)));
})().catch((e) => { console.error(e); process.exit(1); });
