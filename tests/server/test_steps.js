// test_steps.js — where the server's time goes, and that waiting costs none of it.
// 1. --trace-steps FILE writes one JSON line per engine step, and /metrics agrees with it:
//    as many lines as dsv4_steps_total, their rows and decode rows add up to the step
//    counters, the phases of a line add up to its total, dsv4_step_seconds counts every
//    step and dsv4_step_phase_seconds_total sums the lines' phases; the decode-only steps'
//    counters (dsv4_decode_steps_total, _rows_total, _seconds_total with each step's wait)
//    are the lines' with only decode rows and no admission.
// 2. Streaming clients queued behind a running request (--max-seqs 1), waiting for their
//    first token, cost nothing: each looks once (dsv4_stream_waits_total counts the looks
//    that found nothing), then waits suspended: no look in the next second. (Connection
//    threads once spun on the request's mutex until the first token, which took the cores
//    from the engine: a seconds-long stall of every step under concurrency; a read callback
//    returning 0 without suspending would spin the HTTP thread, thousands of looks.)
// 3. Tokens flow while the requests run (below).
// 4. A client that stops reading stalls only its own stream (the one HTTP thread serves
//    the others meanwhile), and its tokens, sent when it reads again, are its answer, none
//    lost or doubled: a stream's text equals the same request's non-stream answer, read
//    late or at once. (On loopback the socket's buffers, ~4 MB here, take a paused
//    stream's whole answer: MHD's send to it does not block in this test.)
// 5. Hang-ups of waiting (suspended) connections are noticed (below).
'use strict';
const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { start, metrics, run } = require('./harness');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const ban = { logit_bias: { 1: -100 } };  // EOS banned: every request runs max_tokens

// One streaming completion; resolves to the number of text chunks before finish.
async function stream(url, body, signal) {
  const res = await fetch(url + '/v1/completions', { method: 'POST', signal,
    headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
  assert.strictEqual(res.status, 200);
  const text = await res.text();
  return text.split('\n\n').filter((e) => e.startsWith('data: {') && !e.includes('finish_reason":"')).length;
}

async function traceAgreesWithMetrics() {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-trace-')), 'steps.jsonl');
  const srv = await start(['--max-seqs', '4', '--step-tokens', '32', '--trace-steps', file]);
  const prompt = (i) => Array.from({ length: 20 + 30 * i }, (_, k) => 100 + ((k * 7 + i) % 500));
  // the first request decodes 40 steps: the others' prefill overlaps it however late they come
  await Promise.all([0, 1, 2].map((i) => stream(srv.url, { model: 'm', prompt: prompt(i), max_tokens: i ? 6 + i : 40,
    temperature: 0, ...ban })));
  // the last step is counted and traced before the gauges say nothing runs
  let m;
  for (let i = 0; i < 500 && (m = await metrics(srv.url)).dsv4_running_sequences; i++) await sleep(10);
  assert.strictEqual(m.dsv4_running_sequences, 0);
  await srv.stop();
  const lines = fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const phases = ['admit', 'forward', 'head', 'sample', 'snapshot', 'mtp'];
  const sum = (f) => lines.reduce((s, l) => s + f(l), 0);
  assert.strictEqual(lines.length, m.dsv4_steps_total, 'one trace line per step');
  assert.strictEqual(m.dsv4_step_seconds_count, m.dsv4_steps_total);
  assert.strictEqual(sum((l) => l.rows), m.dsv4_step_rows_total);
  assert.strictEqual(sum((l) => l.decode), m.dsv4_decode_rows_total);
  // the prompts (20 + 50 + 80 tokens) went through 32-row steps: several steps mixed
  assert(lines.some((l) => l.rows > l.decode && l.decode > 0), 'no step mixed decode rows and prefill:\n' +
    lines.map((l) => JSON.stringify(l)).join('\n'));
  assert(sum((l) => l.admitted) === 3, 'three admissions');
  // the decode-only steps (the first request alone once the others are done): their count,
  // decode rows and seconds (each with the wait before it) are the lines' where every span
  // is a decode span (MTP: a verify span of 1-2 rows) and nothing was admitted
  const dec = lines.filter((l) => l.decode > 0 && l.spans === l.decode && !l.admitted);
  assert(dec.length > 0 && dec.length < lines.length, `${dec.length} decode-only steps of ${lines.length}`);
  assert.strictEqual(m.dsv4_decode_steps_total, dec.length);
  assert.strictEqual(m.dsv4_decode_step_rows_total, dec.reduce((s, l) => s + l.decode, 0));
  const decS = dec.reduce((s, l) => s + l.wait_ms + l.total_ms, 0) / 1000;
  assert(Math.abs(m.dsv4_decode_step_seconds_total - decS) < 1e-5 * dec.length + 1e-6,
    `decode-only seconds ${m.dsv4_decode_step_seconds_total} vs the lines' ${decS}`);
  assert(m.process_cpu_seconds_total > 0, 'process_cpu_seconds_total');
  lines.forEach((l, i) => {
    assert.strictEqual(l.step, i);
    assert(l.rows <= 32 && l.decode <= l.rows && l.head_rows <= l.rows && l.spans <= 4, JSON.stringify(l));
    const ph = phases.reduce((s, p) => s + l[p + '_ms'], 0);
    assert(Math.abs(ph - l.total_ms) < 0.01, `phases ${ph} ms vs total ${l.total_ms} ms`);
    assert(l.forward_ms > 0 && l.total_ms < 60000, JSON.stringify(l));
  });
  for (const p of phases) {
    const got = m[`dsv4_step_phase_seconds_total{phase="${p}"}`];
    assert(Math.abs(got - sum((l) => l[p + '_ms']) / 1000) < 1e-4 * lines.length + 1e-6, `phase ${p}: ${got}`);
  }
  assert(Math.abs(m.dsv4_step_seconds_sum - sum((l) => l.total_ms) / 1000) < 1e-4 * lines.length);
  console.log(`trace: ${lines.length} steps, ${m.dsv4_step_rows_total} rows, forward ` +
    `${m['dsv4_step_phase_seconds_total{phase="forward"}'].toFixed(3)} s of ${m.dsv4_step_seconds_sum.toFixed(3)} s`);
}

async function queuedStreamsSleep() {
  const srv = await start(['--max-seqs', '1', '--max-context', '4096']);
  // one long generation holds the only sequence (not streamed: its connection waits,
  // suspended, until the end too); three streams queue behind it
  const stop = new AbortController();
  const long = fetch(srv.url + '/v1/completions', { method: 'POST', signal: stop.signal,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: 'a long answer', max_tokens: 4000, ...ban }) })
    .then(() => assert.fail('the long request was to be cancelled'), (e) => assert.strictEqual(e.name, 'AbortError'));
  for (let i = 0; i < 200 && !(await metrics(srv.url)).dsv4_running_sequences; i++) await sleep(10);
  const queued = [0, 1, 2].map((i) => stream(srv.url, { model: 'm', prompt: `queued ${i}`, max_tokens: 5, ...ban }));
  let m;
  for (let i = 0; i < 300 && (m = await metrics(srv.url)).dsv4_queue_depth < 3; i++) await sleep(10);
  assert.strictEqual(m.dsv4_queue_depth, 3, 'three streams queued');
  // each has looked once for its first token and found nothing (no opening chunk in a
  // completion stream): from then on it waits suspended, and looks again only when woken
  for (let i = 0; i < 300 && (m = await metrics(srv.url)).dsv4_stream_waits_total < 3; i++) await sleep(10);
  const w0 = m.dsv4_stream_waits_total;
  await sleep(1000);
  m = await metrics(srv.url);
  assert.strictEqual(m.dsv4_queue_depth, 3, 'the streams waited the whole second (the long one ended early)');
  assert.strictEqual(m.dsv4_running_sequences, 1);
  console.log(`queued streams: ${w0} waits, then ${m.dsv4_stream_waits_total - w0} more in 1 s`);
  assert.strictEqual(w0, 3, 'one wait a queued stream');
  assert.strictEqual(m.dsv4_stream_waits_total, w0, 'queued streams looked for news while nothing woke them: they spin');
  stop.abort();
  await long;
  assert.deepStrictEqual(await Promise.all(queued), [5, 5, 5], 'each queued stream gets its 5 tokens');
  await srv.stop();
}

// 3. Streamed tokens reach their clients while the requests still run: each token's push
//    resumes its suspended stream (serve/request.c, the waker). With --hangup-check-ms
//    600000 nothing else wakes a waiting stream but its request's end: without the push's
//    wake a stream's first token arrives only once its 3000 are made and counted in
//    /metrics. Two streams, started together and read up to their first tokens,
//    must find no token counted yet (neither request ended). Not a timed bound: with the wake,
//    the first tokens and one /metrics round trip have to beat the 2999 tokens that follow
//    (seconds of decoding on this model, ms for the rest).
async function tokensFlow() {
  const srv = await start(['--hangup-check-ms', '600000', '--max-seqs', '2']);
  const stop = new AbortController();
  const firstToken = async (prompt) => {
    const res = await fetch(srv.url + '/v1/completions', { method: 'POST', signal: stop.signal,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt, max_tokens: 3000, temperature: 0, stream: true, ...ban }) });
    assert.strictEqual(res.status, 200);
    // read up to the first token's event (the one with "finish_reason":null), keeping the
    // stream open: leaving a for-await loop would cancel it, and the server the request
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let text = '';
    while (!text.includes('"finish_reason":null')) {
      const { done, value } = await reader.read();
      assert(!done, 'the stream ended before its first token');
      text += dec.decode(value, { stream: true });
    }
  };
  await Promise.all([firstToken('tokens as they come'), firstToken('and for the other stream')]);
  const m = await metrics(srv.url);
  console.log(`streams: the first tokens came with ${m.dsv4_generated_tokens_total} tokens ended, ` +
    `${m.dsv4_running_sequences} requests running`);
  // (the tokens of a request are counted when it ends, before its end is handed over; the
  // running gauge lags a step behind a first token, so it is not the thing to assert)
  assert.strictEqual(m.dsv4_generated_tokens_total, 0, 'a first token came only when its request ended: no wake per token');
  stop.abort();
  await srv.stop();
}

// The text of an SSE completion stream.
const sseText = (t) => t.split('\n\n').filter((e) => e.startsWith('data: {'))
  .map((e) => JSON.parse(e.slice(6)).choices.map((c) => c.text).join('')).join('');

// 4. (node:http: a paused response stops reading its socket)
async function slowReaders() {
  const srv = await start(['--max-seqs', '4']);
  const late = { model: 'm', prompt: 'read late', max_tokens: 300, temperature: 0, ...ban };
  const soon = { model: 'm', prompt: 'read at once', max_tokens: 100, temperature: 0, ...ban };
  const post = (b, onRes) => new Promise((resolve, reject) => {
    const req = require('http').request(srv.url + '/v1/completions', { method: 'POST',
      headers: { 'content-type': 'application/json' } }, (res) => onRes(res, resolve));
    req.on('error', reject);
    req.end(JSON.stringify(b));
  });
  const readAll = (res, resolve) => {
    let t = '';
    res.setEncoding('utf8');
    res.on('data', (d) => { t += d; });
    res.on('end', () => resolve(t));
  };
  const want = [];
  for (const b of [late, soon]) want.push(JSON.parse(await post(b, readAll)).choices[0].text);
  // the late reader: paused at its headers until the other stream is read to its end
  let resume;
  const gotLate = post({ ...late, stream: true }, (res, resolve) => {
    res.pause();
    resume = () => { readAll(res, resolve); res.resume(); };
  });
  for (let i = 0; i < 500 && !resume; i++) await sleep(10);
  const gotSoon = sseText(await post({ ...soon, stream: true }, readAll));
  resume();
  assert.strictEqual(gotSoon, want[1], 'the stream read at once is its non-stream answer');
  assert.strictEqual(sseText(await gotLate), want[0], 'the stream read late is its non-stream answer');
  console.log(`slow readers: ${want[0].length} + ${want[1].length} bytes of text, as answered without streaming`);
  await srv.stop();
}

// 5. Clients that hang up while their connections wait suspended (a plain answer running,
//    a stream queued for its first token) are noticed by the watcher (--hangup-check-ms):
//    both requests cancelled long before their 3000 tokens (nothing is sent to them that
//    would fail; without the watcher they ran to the end).
async function hangUpsWhileWaiting() {
  const srv = await start(['--max-seqs', '1', '--hangup-check-ms', '20']);
  const stop = new AbortController();
  const body = (prompt, stream) => JSON.stringify({ model: 'm', prompt, max_tokens: 3000, temperature: 0, stream, ...ban });
  const post = (b) => fetch(srv.url + '/v1/completions', { method: 'POST', signal: stop.signal,
    headers: { 'content-type': 'application/json' }, body: b }).then((r) => r.text()).catch((e) => e.name);
  const plain = post(body('a plain answer', false));
  let m;
  for (let i = 0; i < 300 && !(m = await metrics(srv.url)).dsv4_running_sequences; i++) await sleep(10);
  const queued = post(body('a queued stream', true));
  for (let i = 0; i < 300 && !(m = await metrics(srv.url)).dsv4_queue_depth; i++) await sleep(10);
  assert.deepStrictEqual([m.dsv4_running_sequences, m.dsv4_queue_depth], [1, 1]);
  stop.abort();
  assert.deepStrictEqual(await Promise.all([plain, queued]), ['AbortError', 'AbortError']);
  for (let i = 0; i < 1000 && ((m = await metrics(srv.url)).dsv4_running_sequences || m.dsv4_queue_depth); i++) await sleep(10);
  console.log(`hang-ups: ${m.dsv4_requests_cancelled_total} cancelled after ${m.dsv4_generated_tokens_total} tokens`);
  assert.strictEqual(m.dsv4_requests_cancelled_total, 2, 'both hang-ups noticed');
  assert(m.dsv4_generated_tokens_total < 3000, 'cancelled before the end');
  await srv.stop();
}

run('server_steps', async () => {
  await traceAgreesWithMetrics();
  await tokensFlow();
  await queuedStreamsSleep();
  await slowReaders();
  await hangUpsWhileWaiting();
});
