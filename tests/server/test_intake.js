// test_intake.js — the intake thread (serve/http.c): a request's body is parsed, rendered
// and tokenized off the HTTP thread. While a multi-megabyte prompt is tokenized the HTTP
// thread still answers (/metrics shows it at the intake, unanswered); a client that hangs up
// while its request is queued behind it is dropped unhandled
// (dsv4_intake_total{outcome="gone"}) and nothing of it is submitted, and so is one that only
// shut its write side (libmicrohttpd closes such a connection before a deferred answer: the
// documented behaviour), while a stream client that half-closes after its first event reads
// every event to the end, and a queued stream whose client closes after its first event is
// cancelled before the request ahead of it ends; a small request (the small lane: a body of
// at most 64 KiB) is answered while the large one ahead of it is still being tokenized, and a
// small Responses body whose previous_response_id renders a large stored conversation goes on
// the large lane; a
// SIGTERM with prompts still queued drains the queue and answers each a 503 (not tokenized,
// the connection not closed first) and exits 0.
'use strict';
const assert = require('assert');
const net = require('net');
const { start, http, metrics, run } = require('./harness');

// ~1.2M tokens of chat: over --max-context, so a 400 after its tokenization (no engine work)
const WORDS = 'amber birch cedar dune ember fjord grove heath inlet juniper '.repeat(100000);
const BIG = { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: WORDS }] };
// ~80 KB: a body this long waits on the large lane, behind BIG
const PAD = ' pad'.repeat(20000);

// A POST over a raw socket (Connection: close): {sent (its bytes taken by the kernel),
// answer (resolves {status, json, text} when the server closes)}. halfClose: 'sent' shuts
// the write side once the request is written, 'first' once the first SSE event arrived,
// reading on.
function rawPost(port, body, { halfClose = false } = {}) {
  const b = Buffer.from(JSON.stringify(body));
  let sent;
  const s = net.connect(port, '127.0.0.1');
  const sentP = new Promise((r) => { sent = r; });
  const answer = new Promise((resolve, reject) => {
    const chunks = [];
    s.on('connect', () => {
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${b.length}\r\n\r\n`);
      s.write(b, () => { sent(); if (halfClose === 'sent') s.end(); });
    });
    s.on('data', (d) => {
      chunks.push(d);
      if (halfClose === 'first' && !s.writableEnded && Buffer.concat(chunks).includes('data:')) s.end();
    });
    s.on('end', () => {
      const t = Buffer.concat(chunks).toString();
      const k = t.indexOf('\r\n\r\n');
      let json = null;
      try { json = JSON.parse(t.slice(k + 4)); } catch (e) { /* closed before the answer, or a stream */ }
      const status = k > 0 ? Number(t.split(' ')[1]) : 'closed';
      resolve({ status: json || (body.stream && k > 0) ? status : 'closed', json, text: t.slice(k + 4) });
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
  // queued behind it on the large lane: a client that hangs up and one that half-closes
  // (both dropped unhandled); then a small one, which does not wait for them
  await hangUp(srv.port, { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'never tokenized' + PAD }] });
  const chat = (content, extra = {}) => ({ model: 'm', max_tokens: 2, temperature: 0, messages: [{ role: 'user', content }], ...extra });
  const half = rawPost(srv.port, chat('half closed' + PAD), { halfClose: 'sent' }).answer;
  let bigFirst = null;
  const small = http(srv.url + '/v1/chat/completions', { body: chat('after them') })
    .then((r) => { bigFirst = answered; return r; });
  const [rb, rs, rh] = await Promise.all([big, small, half]);
  assert.strictEqual(bigFirst, false, 'the small request waited for the large one ahead of it');
  assert.strictEqual(rb.status, 400);
  assert.match(rb.json.error.message, /the prompt has \d+ tokens and max_context is 256/);
  assert.strictEqual(rs.status, 200, rs.body);
  assert.strictEqual(rh.status, 'closed', rh.text);
  const m1 = await metrics(srv.url);
  const d = (k) => m1[k] - m0[k];
  assert.strictEqual(d('dsv4_intake_total{outcome="gone"}'), 2, 'the hung-up requests were handled');
  assert.strictEqual(d('dsv4_intake_total{outcome="handled"}'), 2);
  assert.strictEqual(m1.dsv4_intake_depth, 0);
  assert.strictEqual(d('dsv4_requests_cancelled_total'), 0);  // never submitted, so nothing to cancel
  assert.strictEqual(d('dsv4_prompt_tokens_total'), rs.json.usage.prompt_tokens);

  // a stream whose client shuts its write side after the first event (suspended between
  // tokens, watched every 2 ms) is not taken as gone: every event to [DONE], nothing cancelled
  const hs = await rawPost(srv.port, chat('count with me', { stream: true, max_tokens: 48 }), { halfClose: 'first' }).answer;
  assert.strictEqual(hs.status, 200, hs.text);
  assert.match(hs.text, /data: \[DONE\]/, `the half-closed stream was cut: ${hs.text.slice(-200)}`);
  assert.strictEqual((await metrics(srv.url)).dsv4_requests_cancelled_total - m0.dsv4_requests_cancelled_total, 0);

  // a stream queued behind a running request (a server of its own with --max-seqs 1: the
  // stream's headers are sent, then it waits) whose client closes (an SDK's abort: a FIN, no
  // reset) is cancelled while the request before it still runs, not at its own first token
  // (the probe's reset)
  {
    const q = await start(['--max-context', '2048', '--max-seqs', '1', '--hangup-check-ms', '2', '--no-warmup']);
    // first, the lane by cost: a ~100-byte /v1/responses body whose previous_response_id
    // names a stored conversation of ~70 KB (~1,100 tokens) renders and tokenizes all of it,
    // so it goes on the large lane (the lanes' counters), where no small request waits behind
    // it; a small chat still goes on the small one
    {
      const first = await http(q.url + '/v1/responses', { body: { model: 'm', max_output_tokens: 1,
        input: '='.repeat(70000) } });
      assert.strictEqual(first.status, 200, first.body);
      const l0 = await metrics(q.url);
      const next = { model: 'm', max_output_tokens: 1, previous_response_id: first.json.id, input: 'and?' };
      assert(JSON.stringify(next).length < 150);
      const rn = await http(q.url + '/v1/responses', { body: next });
      assert.strictEqual(rn.status, 200, rn.body);
      const rc = await http(q.url + '/v1/chat/completions', { body: chat('small') });
      assert.strictEqual(rc.status, 200, rc.body);
      const l1 = await metrics(q.url);
      const lane = (k) => l1[`dsv4_intake_lane_total{lane="${k}"}`] - l0[`dsv4_intake_lane_total{lane="${k}"}`];
      assert.deepStrictEqual([lane('small'), lane('large')], [1, 1], 'the previous_response_id body went on the small lane');
    }
    const m2 = await metrics(q.url);
    let aDone = false;
    const a = http(q.url + '/v1/chat/completions', { body: chat('long one', { max_tokens: 300, ignore_eos: true }) })
      .then((r) => { aDone = true; return r; });
    await new Promise((r) => setTimeout(r, 100));
    await new Promise((resolve, reject) => {
      const b = Buffer.from(JSON.stringify(chat('aborted', { stream: true, max_tokens: 8 })));
      const s = net.connect(q.port, '127.0.0.1', () => s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${b.length}\r\n\r\n${b}`));
      let got = '';
      s.on('data', (d) => { got += d; if (got.includes('\r\n\r\n')) { s.destroy(); resolve(); } });
      s.on('error', reject);
    });
    while ((await metrics(q.url)).dsv4_requests_cancelled_total === m2.dsv4_requests_cancelled_total && !aDone);
    assert(!aDone, 'the closed stream was cancelled only after the request before it ended');
    const ra = await a;
    assert.strictEqual(ra.status, 200, ra.body);
    console.log(`closed queued stream cancelled while the request ahead ran (${ra.json.usage.completion_tokens} tokens)`);
    await q.stop();
  }

  // SIGTERM with prompts queued (the depth counts the one being tokenized): the queue drains
  // and the server exits 0; only the prompt being tokenized at the SIGTERM may get its 400,
  // the queued ones are not tokenized, and each gets its 503 before MHD closes its connection
  // (a 6 MB prompt at the intake, then 12 of ~80 KB queued behind it on its lane: each 503 is
  // resumed when the intake drains, just before the listener stops)
  const late = [rawPost(srv.port, BIG).answer.then((r) => r.status, () => 'reset')];
  while (!(await metrics(srv.url)).dsv4_intake_depth) await new Promise((r) => setTimeout(r, 5));
  for (let i = 0; i < 12; i++) late.push(rawPost(srv.port, chat(`late ${i}` + PAD)).answer.then((r) => r.status, () => 'reset'));
  while ((await metrics(srv.url)).dsv4_intake_depth < 13) await new Promise((r) => setTimeout(r, 5));
  const t0 = Date.now();
  await srv.stop();
  const sts = await Promise.all(late);
  console.log(`SIGTERM with ${sts.length} queued: exit in ${Date.now() - t0} ms, answers ${JSON.stringify(sts)}`);
  for (const st of sts) assert(st === 400 || st === 503, JSON.stringify(sts));
  assert(sts.filter((st) => st === 400).length <= 1, JSON.stringify(sts));
}, { limitMs: 120000 });
