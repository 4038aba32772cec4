// test_choices.js — OpenAI's `n` (several choices of one prompt) and best_of: choice i samples
// with seed + i, so it equals the n = 1 request with that seed (the choices fork choice 0's
// prompt: /metrics counts the forks); the stream, reassembled by index, equals the JSON
// answer; usage counts the prompt once and every choice's tokens; stop ends one choice, not
// the others; n = 4 with a slot taken waits for all 4 (every choice forks) and the request
// after it waits behind it; n over --max-seqs and best_of with stream are 400s naming the
// field; a client gone mid-stream cancels every choice (the sequences free again).
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, http, metrics, run } = require('./harness');
const { SCRIPT, WEATHER_TOOL } = require('./common');

const SEED = 4242;
const msgs = [{ role: 'user', content: 'Name three colours of the rainbow and say why the sky looks blue.' }];

run('server_choices', async () => {
  const srv = await start(['--max-seqs', '4', '--hangup-check-ms', '2'], { script: SCRIPT });
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const req = { model: 'm', messages: msgs, temperature: 1.0, max_tokens: 10, seed: SEED, logprobs: true };

  // n = 1 with the seeds choice i derives: seed + i
  const solo = [];
  for (let i = 0; i < 3; i++) solo.push(await client.chat.completions.create({ ...req, seed: SEED + i }));
  const m0 = await metrics(srv.url);

  const r = await client.chat.completions.create({ ...req, n: 3 });
  assert.deepStrictEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (let i = 0; i < 3; i++) {
    assert.strictEqual(r.choices[i].message.content, solo[i].choices[0].message.content, `choice ${i}`);
    assert.deepStrictEqual(r.choices[i].logprobs, solo[i].choices[0].logprobs, `choice ${i}'s logprobs`);
    assert.strictEqual(r.choices[i].finish_reason, solo[i].choices[0].finish_reason);
  }
  assert(new Set(r.choices.map((c) => c.message.content)).size > 1, 'the choices are all the same');
  assert.strictEqual(r.usage.prompt_tokens, solo[0].usage.prompt_tokens);
  assert.strictEqual(r.usage.completion_tokens, solo.reduce((a, s) => a + s.usage.completion_tokens, 0));
  // the prompt ran once: the two other choices forked it
  const m1 = await metrics(srv.url);
  assert.strictEqual(m1.dsv4_choices_forked_total - m0.dsv4_choices_forked_total, 2);
  assert.strictEqual(m1.dsv4_prompt_tokens_forked_total - m0.dsv4_prompt_tokens_forked_total, 2 * r.usage.prompt_tokens);

  // the stream: every chunk one choice's, each choice one finish_reason, one usage chunk last
  const st = { text: ['', '', ''], finish: [null, null, null], lp: [[], [], []], usage: null, after: 0 };
  for await (const ch of await client.chat.completions.create({ ...req, n: 3, stream: true,
    stream_options: { include_usage: true } })) {
    if (ch.usage) { st.usage = ch.usage; assert.strictEqual(ch.choices.length, 0); continue; }
    assert.strictEqual(st.usage, null, 'a chunk after the usage');
    assert.strictEqual(ch.choices.length, 1);
    const c = ch.choices[0];
    st.text[c.index] += c.delta.content || '';
    if (c.logprobs) st.lp[c.index].push(...c.logprobs.content);
    if (c.finish_reason) {
      assert.strictEqual(st.finish[c.index], null, `choice ${c.index} finished twice`);
      st.finish[c.index] = c.finish_reason;
    }
  }
  for (let i = 0; i < 3; i++) {
    assert.strictEqual(st.text[i], r.choices[i].message.content, `streamed choice ${i}`);
    assert.deepStrictEqual(st.lp[i], r.choices[i].logprobs.content);
    assert.strictEqual(st.finish[i], r.choices[i].finish_reason);
  }
  assert.deepStrictEqual(st.usage, r.usage);

  // a stop string ends the choice that wrote it, the others go on (each as alone)
  const sreq = { model: 'm', prompt: 'Once upon a time', temperature: 1.0, max_tokens: 24, seed: SEED, stop: ['e'] };
  const sc = await client.completions.create({ ...sreq, n: 3 });
  const lens = [];
  for (let i = 0; i < 3; i++) {
    const one = await client.completions.create({ ...sreq, seed: SEED + i });
    assert.strictEqual(sc.choices[i].text, one.choices[0].text, `stop choice ${i}`);
    assert.strictEqual(sc.choices[i].finish_reason, one.choices[0].finish_reason);
    lens.push(one.usage.completion_tokens);
  }
  assert.strictEqual(sc.usage.completion_tokens, lens.reduce((a, b) => a + b, 0));

  // best_of 3, n 2: the two of the highest cumulative logprob, best first
  const breq = { model: 'm', prompt: 'Once upon a time', temperature: 1.0, max_tokens: 6, seed: SEED, logprobs: 0 };
  const cands = [];
  for (let i = 0; i < 3; i++) {
    const one = await client.completions.create({ ...breq, seed: SEED + i });
    cands.push({ text: one.choices[0].text, sum: one.choices[0].logprobs.token_logprobs.reduce((a, b) => a + b, 0) });
  }
  cands.sort((a, b) => b.sum - a.sum);
  const b = await client.completions.create({ ...breq, n: 2, best_of: 3 });
  assert.deepStrictEqual(b.choices.map((c) => [c.index, c.text]), [[0, cands[0].text], [1, cands[1].text]]);
  assert.strictEqual(b.usage.completion_tokens, 18);

  // tool calls per choice (scripted: both call), their ids unique across the choices
  const treq = { model: 'm', messages: [{ role: 'user', content: 'TOOLCALL_TEST weather?' }], tools: [WEATHER_TOOL], n: 2 };
  const tc = await client.chat.completions.create(treq);
  const ids = tc.choices.map((c) => { assert.strictEqual(c.finish_reason, 'tool_calls'); return c.message.tool_calls[0].id; });
  assert.deepStrictEqual(tc.choices.map((c) => c.message.tool_calls[0].function.arguments), ['{"city": "Paris", "days": 3}', '{"city": "Paris", "days": 3}']);
  assert.notStrictEqual(ids[0], ids[1]);
  const sids = [[], []];
  for await (const ch of await client.chat.completions.create({ ...treq, stream: true }))
    for (const c of ch.choices) for (const t of c.delta.tool_calls || []) if (t.id) sids[c.index].push(t.id);
  assert(sids[0].length === 1 && sids[1].length === 1 && sids[0][0] !== sids[1][0], JSON.stringify(sids));

  // n = 4 on a ~100-token prompt with MTP (the model has the block): the forks copy no
  // pending MTP rows, so the MTP call stays within max_rows; a bystander n = 1 decoding in
  // the same steps answers its own text
  const long = { model: 'm', messages: [{ role: 'user', content: 'word '.repeat(96) }], max_tokens: 5, temperature: 0 };
  const by = { model: 'm', prompt: 'Once upon a time', max_tokens: 40, temperature: 0 };
  const bySolo = await http(srv.url + '/v1/completions', { body: by });
  const [byRes, longRes] = await Promise.all([http(srv.url + '/v1/completions', { body: by }),
    new Promise((ok) => setTimeout(ok, 30)).then(() => http(srv.url + '/v1/chat/completions', { body: { ...long, n: 4 } }))]);
  assert.strictEqual(byRes.status, 200, byRes.body);
  assert.strictEqual(byRes.json.choices[0].text, bySolo.json.choices[0].text);
  assert.strictEqual(longRes.status, 200, longRes.body);
  assert(longRes.json.usage.prompt_tokens >= 97, longRes.body);
  assert.strictEqual(longRes.json.choices.length, 4);

  // under load the waiting choices hold their slots: three n = 2 at once on 4 slots fork all
  const m3 = await metrics(srv.url);
  const two = await Promise.all([0, 1, 2].map((k) => http(srv.url + '/v1/completions',
    { body: { model: 'm', prompt: `w${k} `.repeat(20), n: 2, max_tokens: 8, temperature: 1 } })));
  for (const t of two) assert.strictEqual(t.status, 200, t.body);
  assert.strictEqual((await metrics(srv.url)).dsv4_choices_forked_total - m3.dsv4_choices_forked_total, 3);

  // the reservation: n = 4 with one of the 4 slots taken waits until all 4 are free (then
  // every choice forks the prompt: none computes it), and a request sent after it waits
  // behind it (first come, first served), not in the 3 free slots
  const xreq = { model: 'm', prompt: 'Four colours:', max_tokens: 4, temperature: 1.0, seed: SEED, logprobs: 0 };
  const xsolo = [];
  for (let i = 0; i < 4; i++) xsolo.push((await client.completions.create({ ...xreq, seed: SEED + i })).choices[0]);
  const m4 = await metrics(srv.url);
  const actl = new AbortController();
  const ares = await fetch(srv.url + '/v1/completions', { method: 'POST', signal: actl.signal,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'a long story', max_tokens: 4000, temperature: 1.0, stream: true }) });
  const ard = ares.body.getReader();
  await ard.read();
  await ard.read();  // A runs (its first tokens out)
  const order = [];
  const xp = http(srv.url + '/v1/completions', { body: { ...xreq, n: 4 } });
  for (let i = 0; i < 500 && (await metrics(srv.url)).dsv4_queue_depth < 4; i++) await new Promise((ok) => setTimeout(ok, 5));
  const bp = (async () => {
    const bres = await fetch(srv.url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'behind it', max_tokens: 3, temperature: 0, stream: true }) });
    const brd = bres.body.getReader();
    for (let got = ''; ;) {
      const { value, done } = await brd.read();
      if (done) return got;
      got += Buffer.from(value).toString();
      if (/"text":"[^"]/.test(got) && !order.includes('B token')) order.push('B token');
    }
  })();
  // X's 4 choices and B queued (or B already running: the order below fails), then A leaves
  for (let i = 0; i < 500 && (await metrics(srv.url)).dsv4_queue_depth < 5 && !order.length; i++)
    await new Promise((ok) => setTimeout(ok, 5));
  order.push('A gone');
  actl.abort();
  const xr = await xp;
  assert.strictEqual(xr.status, 200, xr.body);
  for (let i = 0; i < 4; i++) {
    assert.strictEqual(xr.json.choices[i].text, xsolo[i].text, `reserved choice ${i}`);
    assert.deepStrictEqual(xr.json.choices[i].logprobs, xsolo[i].logprobs, `reserved choice ${i}'s logprobs`);
  }
  assert.strictEqual((await metrics(srv.url)).dsv4_choices_forked_total - m4.dsv4_choices_forked_total, 3,
    'a choice computed the prompt (its slot was not held)');
  assert((await bp).includes('[DONE]'));
  assert.deepStrictEqual(order, ['A gone', 'B token'], 'the request sent after n = 4 passed it');

  // n beyond --max-seqs, best_of below n or streamed: 400s naming the field
  for (const [route, body, param] of [
    ['/v1/chat/completions', { messages: msgs, n: 5 }, 'n'],
    ['/v1/chat/completions', { messages: msgs, n: 1.5 }, 'n'],
    ['/v1/completions', { prompt: 'x', n: 0 }, 'n'],
    ['/v1/completions', { prompt: 'x', n: 3, best_of: 2 }, 'best_of'],
    ['/v1/completions', { prompt: 'x', best_of: 2, stream: true }, 'best_of'],
    ['/v1/chat/completions', { messages: msgs, best_of: 2 }, 'best_of'],
  ]) {
    const e = await http(srv.url + route, { body });
    assert.strictEqual(e.status, 400, `${JSON.stringify(body)}: ${e.body}`);
    assert.strictEqual(e.json.error.param, param, e.body);
    assert.strictEqual(e.json.error.type, 'invalid_request_error');
  }

  // a client gone mid-stream: all its choices are cancelled, their sequences free
  const m2 = await metrics(srv.url);
  const ctl = new AbortController();
  const res = await fetch(srv.url + '/v1/chat/completions', { method: 'POST', signal: ctl.signal,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: msgs, n: 3, max_tokens: 4000, temperature: 1.0, stream: true }) });
  assert.strictEqual(res.status, 200);
  const rd = res.body.getReader();
  // every choice generating (its opening chunk and a few tokens out)
  const seen = [0, 0, 0];
  for (let got = ''; Math.min(...seen) < 4;) {
    const { value, done } = await rd.read();
    assert(!done, 'the stream ended: ' + got);
    got += Buffer.from(value).toString();
    seen.fill(0);
    for (const m of got.matchAll(/"index":(\d)/g)) seen[m[1]]++;
  }
  ctl.abort();
  let m;
  for (let i = 0; i < 500; i++) {
    m = await metrics(srv.url);
    if (m.dsv4_requests_cancelled_total - m2.dsv4_requests_cancelled_total >= 3 &&
        m.dsv4_running_sequences === 0 && m.dsv4_queue_depth === 0) break;
    await new Promise((ok) => setTimeout(ok, 20));
  }
  assert.strictEqual(m.dsv4_running_sequences, 0, 'choices still running after the client left');
  assert.strictEqual(m.dsv4_requests_cancelled_total - m2.dsv4_requests_cancelled_total, 3);
  await srv.stop();
});
