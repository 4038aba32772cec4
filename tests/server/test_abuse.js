// test_abuse.js — load and abuse, loopback only, bounded: 200 requests at concurrency 16
// (DSV4_ABUSE_N requests instead: the sanitizer build, 20x slower, runs 40)
// mixing good requests (checked against their solo answers) with malformed JSON, wrong
// types, oversized bodies, unknown routes and methods, and clients that hang up mid-stream
// or mid-request; plus raw garbage on the socket. Every request gets exactly one outcome,
// every good one the right answer; afterwards the server is healthy, idle, and exits 0
// (under AddressSanitizer, that includes no leak).
'use strict';
const assert = require('assert');
const net = require('net');
const { start, http, metrics, run } = require('./harness');

const PROMPTS = ['Hello there', 'What is two plus two?', 'Name a color.'];
const chatBody = (p, extra = {}) => ({ model: 'm', messages: [{ role: 'user', content: p }], max_tokens: 6,
  temperature: 0, ...extra });

async function sseText(res) {
  let text = '';
  const body = await res.text();
  for (const line of body.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    text += JSON.parse(line.slice(6)).choices[0]?.delta?.content || '';
  }
  return { text, done: body.endsWith('data: [DONE]\n\n') };
}

// Hangs up: a stream after its first bytes, a plain request after afterMs (before its
// answer, which takes longer).
async function hangUp(url, body, afterMs) {
  const ctl = new AbortController();
  const timer = body.stream ? null : setTimeout(() => ctl.abort(), afterMs);
  try {
    const res = await fetch(url + '/v1/chat/completions', { method: 'POST', signal: ctl.signal,
      headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    if (body.stream) await res.body.getReader().read();
    ctl.abort();
    await res.text().catch(() => {});
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  }
  clearTimeout(timer);
  return 'hung-up';
}

function rawGarbage(port, payload) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.end(payload));
    let got = '';
    s.on('data', (d) => { got += d; });
    s.on('close', () => resolve(got));
    s.on('error', () => resolve(got));
    s.setTimeout(5000, () => s.destroy());
  });
}

run('server_abuse', async () => {
  const srv = await start(['--max-seqs', '8', '--step-tokens', '64', '--max-context', '512', '--max-body', '16K']);
  const url = srv.url;
  const expect = [];
  for (const p of PROMPTS) expect.push((await http(url + '/v1/chat/completions', { body: chatBody(p) })).json.choices[0].message.content);

  const N = Number(process.env.DSV4_ABUSE_N || 200);
  const outcome = new Array(N).fill(undefined);
  const task = async (i) => {
    const p = i % PROMPTS.length;
    switch (i % 10) {
      case 0: case 1: case 2: {
        const r = await http(url + '/v1/chat/completions', { body: chatBody(PROMPTS[p]) });
        assert.strictEqual(r.status, 200, r.body);
        assert.strictEqual(r.json.choices[0].message.content, expect[p]);
        return 'good';
      }
      case 3: {
        const res = await fetch(url + '/v1/chat/completions', { method: 'POST', body: JSON.stringify(chatBody(PROMPTS[p], { stream: true })) });
        const { text, done } = await sseText(res);
        assert(done);
        assert.strictEqual(text, expect[p]);
        return 'good';
      }
      case 4: {
        const r = await http(url + '/v1/chat/completions', { body: '{"messages": [{"role": "user", "content": "x"}' });
        assert.strictEqual(r.status, 400);
        return 'rejected';
      }
      case 5: {
        const r = await http(url + '/v1/completions', { body: { prompt: 'x', max_tokens: 'ten', top_k: [1] } });
        assert.strictEqual(r.status, 400);
        assert(r.json.error.message.length > 0);
        return 'rejected';
      }
      case 6: {
        const r = await http(url + '/v1/chat/completions', { body: chatBody('y'.repeat(20000)) });
        assert.strictEqual(r.status, 413);
        return 'rejected';
      }
      case 7: {
        const r = i % 20 === 7 ? await http(url + '/v2/everything', { body: {} })
          : await http(url + '/v1/completions', { method: 'DELETE' });
        assert.strictEqual(r.status, i % 20 === 7 ? 404 : 405);
        return 'rejected';
      }
      case 8: return hangUp(url, chatBody(PROMPTS[p], { max_tokens: 300, stream: true }));
      default: return hangUp(url, chatBody(PROMPTS[p], { max_tokens: 300 }), 30);
    }
  };
  let next = 0;
  const worker = async () => {
    while (next < N) {
      const i = next++;
      assert.strictEqual(outcome[i], undefined, `request ${i} ran twice`);
      outcome[i] = await task(i);
      if (process.env.DSV4_TRACE) console.error(`task ${i}: ${outcome[i]}`);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  for (const g of ['GARBAGE\r\n\r\n', 'POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"pro',
    'GET / HTTP/1.1\r\nHost: x\r\n' + 'X-Long: ' + 'a'.repeat(20000) + '\r\n\r\n'])
    await rawGarbage(srv.port, g);

  const count = (k) => outcome.filter((o) => o === k).length;
  assert.strictEqual(count('good') + count('rejected') + count('hung-up'), N, 'a request was lost');
  assert.strictEqual(count('good'), (4 * N) / 10);
  assert.strictEqual(count('hung-up'), (2 * N) / 10);

  // healthy and idle afterwards: hung-up requests were cancelled, nothing keeps running
  let m;
  for (let t = 0; t < 100; t++) {
    m = await metrics(url);
    if (m.dsv4_running_sequences === 0 && m.dsv4_queue_depth === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.strictEqual(m.dsv4_running_sequences, 0);
  assert(m.dsv4_requests_cancelled_total > 0, 'no hang-up was noticed');
  assert.strictEqual(m['dsv4_requests_total{status="5xx"}'], 0);
  assert.strictEqual((await http(url + '/health', { method: 'GET' })).status, 200);
  const last = await http(url + '/v1/chat/completions', { body: chatBody(PROMPTS[0]) });
  assert.strictEqual(last.json.choices[0].message.content, expect[0]);
  await srv.stop();
}, { limitMs: 140000 });
