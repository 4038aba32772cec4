// test_intake.js — the intake thread (serve/http.c): a request's body is parsed, rendered
// and tokenized off the HTTP thread. While a multi-megabyte prompt is tokenized the HTTP
// thread still answers (/metrics shows it at the intake, unanswered); a client that hangs up
// while its request is queued behind it is dropped unhandled
// (dsv4_intake_total{outcome="gone"}) and nothing of it is submitted; a SIGTERM with prompts
// still queued drains the queue (503s, not tokenized) and exits 0.
'use strict';
const assert = require('assert');
const net = require('net');
const { start, http, metrics, run } = require('./harness');

// ~1.2M tokens of chat: over --max-context, so a 400 after its tokenization (no engine work)
const WORDS = 'amber birch cedar dune ember fjord grove heath inlet juniper '.repeat(100000);
const BIG = { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: WORDS }] };

// A POST over a raw socket (Connection: close): {sent (its bytes taken by the kernel),
// answer (resolves {status, json} when the server closes)}.
function rawPost(port, body) {
  const b = Buffer.from(JSON.stringify(body));
  let sent;
  const s = net.connect(port, '127.0.0.1');
  const sentP = new Promise((r) => { sent = r; });
  const answer = new Promise((resolve, reject) => {
    const chunks = [];
    s.on('connect', () => {
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${b.length}\r\n\r\n`);
      s.write(b, sent);
    });
    s.on('data', (d) => chunks.push(d));
    s.on('end', () => {
      const t = Buffer.concat(chunks).toString();
      const k = t.indexOf('\r\n\r\n');
      let json = null;
      try { json = JSON.parse(t.slice(k + 4)); } catch (e) { /* closed before the answer */ }
      resolve({ status: json ? Number(t.split(' ')[1]) : 'closed', json });
    });
    s.on('error', reject);
  });
  return { sent: sentP, answer };
}

// a request written whole, then the socket closed without reading the answer
function hangUp(port, body) {
  const b = JSON.stringify(body);
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`, () => { s.destroy(); resolve(); });
    });
    s.on('error', resolve);
  });
}

run('server_intake', async () => {
  const srv = await start(['--max-context', '256', '--hangup-check-ms', '2', '--max-body', '16M', '--no-warmup']);
  const m0 = await metrics(srv.url);

  // a 6 MB prompt (~0.3 s of tokenizing on the bench VM); /metrics, answered by the HTTP
  // thread meanwhile, sees it at the intake while its answer has not come
  let answered = false;
  const big = rawPost(srv.port, BIG).answer.then((r) => { answered = true; return r; });
  let seen = 0;
  while (!answered && !(seen = (await metrics(srv.url)).dsv4_intake_depth));
  assert(seen >= 1 && !answered, 'the HTTP thread did not answer while a prompt was at the intake');
  // queued behind it: a client that hangs up (dropped unhandled), then one that waits
  await hangUp(srv.port, { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'never tokenized' }] });
  const small = http(srv.url + '/v1/chat/completions', { body: { model: 'm', max_tokens: 2, temperature: 0,
    messages: [{ role: 'user', content: 'after them' }] } });
  const [rb, rs] = await Promise.all([big, small]);
  assert.strictEqual(rb.status, 400);
  assert.match(rb.json.error.message, /the prompt has \d+ tokens and max_context is 256/);
  assert.strictEqual(rs.status, 200, rs.body);
  const m1 = await metrics(srv.url);
  const d = (k) => m1[k] - m0[k];
  assert.strictEqual(d('dsv4_intake_total{outcome="gone"}'), 1, 'the hung-up request was handled');
  assert.strictEqual(d('dsv4_intake_total{outcome="handled"}'), 2);
  assert.strictEqual(m1.dsv4_intake_depth, 0);
  assert.strictEqual(d('dsv4_requests_cancelled_total'), 0);  // never submitted, so nothing to cancel
  assert.strictEqual(d('dsv4_prompt_tokens_total'), rs.json.usage.prompt_tokens);

  // SIGTERM with prompts queued (the depth counts the one being tokenized): the queue drains
  // and the server exits 0; only the prompt being tokenized at the SIGTERM may get its 400,
  // the queued ones are not tokenized (a 503, or their connection closes)
  const late = [1, 2, 3, 4].map(() => rawPost(srv.port, BIG).answer.then((r) => r.status, () => 'reset'));
  while ((await metrics(srv.url)).dsv4_intake_depth < 3) await new Promise((r) => setTimeout(r, 10));
  await srv.stop();
  const sts = await Promise.all(late);
  for (const st of sts) assert(st === 400 || st === 503 || st === 'closed' || st === 'reset', String(st));
  assert(sts.filter((st) => st === 400).length <= 1, JSON.stringify(sts));
}, { limitMs: 120000 });
