// test_priority.js — request priorities (--scheduling-policy priority, vLLM's `priority`:
// lower first, ties in arrival order).
// 1. First come, first served (the default) refuses a priority other than 0 with a 400 that
//    names it, on every endpoint that takes one; 0 is accepted.
// 2. Admission order: one sequence slot, held by a stream; three requests of priority 5
//    queue, then one of priority 1. When the stream leaves, the priority-1 request runs
//    first, then the others in arrival order (read from the step trace: each admission's
//    rows are its prompt, of a length of its own). /metrics shows the queue by priority.
// 3. Preemption: the pools hold 5 blocks of 128 positions on 3 slots. Two priority-5
//    streams decode in their second block (4 blocks); a priority-0 request's prompt then
//    needs two, so a step runs short. The preemption takes a priority-5 stream (not the
//    newest request, which first come, first served takes), so the priority-0 request
//    answers while both streams are still open, with the text it gives alone.
// 4. Preemption for a slot (--max-seqs 2, pools large enough): two priority-5 streams hold both
//    slots (64 tokens each). A priority-5 request queues behind them and preempts nobody (equal priority); a
//    priority-0 request takes the newest stream's slot (its wait soon exceeds that stream's
//    recompute) and answers while both streams are open. Both streams then end with the
//    text each gives alone (the victim recomputed from its tokens), and
//    dsv4_priority_preemptions_total is exactly 1.
'use strict';
const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { start, http, metrics, run } = require('./harness');

// a stream the test ends by dropping its client; counts its tokens in toks[k]
function stream(url, body, toks, k, signal) {
  return (async () => {
    try {
      const res = await fetch(url + '/v1/completions', { method: 'POST', signal,
        headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
      const rd = res.body.getReader();
      for (;;) {
        const { value, done } = await rd.read();
        if (done) break;
        toks[k] += (Buffer.from(value).toString().match(/"text"/g) || []).length;
      }
    } catch (e) { /* dropped */ }
    return 'ended';
  })();
}

const until = async (f) => { while (!(await f())) await new Promise((ok) => setTimeout(ok, 2)); };

run('server_priority', async () => {
  // 1. fcfs
  const f = await start(['--max-seqs', '2', '--no-warmup']);
  const one = { model: 'm', max_tokens: 1, priority: 3 };
  for (const [path, body] of [
    ['/v1/completions', { ...one, prompt: 'hi' }],
    ['/v1/chat/completions', { ...one, messages: [{ role: 'user', content: 'hi' }] }],
    ['/v1/responses', { model: 'm', max_output_tokens: 1, priority: 3, input: 'hi' }],
    ['/v1/messages', { ...one, messages: [{ role: 'user', content: 'hi' }] }]]) {
    const r = await http(f.url + path, { body });
    assert.strictEqual(r.status, 400, `${path}: ${r.body}`);
    assert(/'priority'.*--scheduling-policy priority/.test(r.body), r.body);
    const z = await http(f.url + path, { body: { ...body, priority: 0 } });
    assert.strictEqual(z.status, 200, `${path}: ${z.body}`);
  }
  await f.stop();

  // 2. admission order
  const trace = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-prio-')), 'steps.jsonl');
  const a = await start(['--max-seqs', '1', '--no-warmup', '--scheduling-policy', 'priority',
    '--hangup-check-ms', '2', '--trace-steps', trace]);
  const bad = await http(a.url + '/v1/completions', { body: { model: 'm', prompt: 'x', priority: 1.5 } });
  assert.strictEqual(bad.status, 400, bad.body);
  const intMsg = "'priority' must be an integer in [-2147483648, 2147483647]";
  assert(bad.body.includes(intMsg), bad.body);
  for (const pr of [2147483648, -2147483649, '1']) {
    const r = await http(a.url + '/v1/completions', { body: { model: 'm', prompt: 'x', priority: pr } });
    assert.strictEqual(r.status, 400, r.body);
    assert(r.body.includes(intMsg), r.body);
  }
  for (const pr of [-2147483648, 2147483647]) {
    const r = await http(a.url + '/v1/completions', { body: { model: 'm', prompt: 'x', max_tokens: 1, priority: pr } });
    assert.strictEqual(r.status, 200, r.body);
  }
  const toks = [0];
  const hold = new AbortController();
  const holder = stream(a.url, { model: 'm', prompt: 'holder', max_tokens: 3000, temperature: 0,
    logit_bias: { 1: -100 } }, toks, 0, hold.signal);
  await until(() => toks[0] > 0);
  // (the order is the server's admissions, not the answers' arrival: one polling thread
  // writes every resumed connection, so when it runs late, answers that ended in one pass
  // arrive in its connection order, the three queued first ahead: 'high' came last once
  // under load)
  const rows = {};  // a prompt's rows -> its name
  const send = (name, prompt, priority) => http(a.url + '/v1/completions', { body: { model: 'm', prompt,
    max_tokens: 2, temperature: 0, priority } }).then((r) => {
    assert.strictEqual(r.status, 200, r.body);
    const n = r.json.usage.prompt_tokens - ((r.json.usage.prompt_tokens_details || {}).cached_tokens || 0);
    assert(!(n in rows), `two prompts of ${n} rows: the trace cannot tell them apart`);
    rows[n] = name;
  });
  const queued = [];
  for (const [name, prompt, p] of [['low a', 'low', 5], ['low b', 'low low', 5], ['low c', 'low low low', 5]]) {
    queued.push(send(name, prompt, p));
    await until(async () => (await metrics(a.url)).dsv4_queue_depth === queued.length);
  }
  queued.push(send('high', 'high high high high high', 1));
  await until(async () => (await metrics(a.url)).dsv4_queue_depth === 4);
  const q = await metrics(a.url);
  assert.strictEqual(q['dsv4_queue_depth_by_priority{priority="1"}'], 1);
  assert.strictEqual(q['dsv4_queue_depth_by_priority{priority="5"}'], 3);
  hold.abort();
  await holder;
  await Promise.all(queued);
  await a.stop();
  const admits = fs.readFileSync(trace, 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l))
    .filter((t) => t.admitted > 0);
  assert(admits.every((t) => t.admitted === 1), 'one slot: one admission a step');
  assert.deepStrictEqual(admits.slice(-4).map((t) => rows[t.rows]), ['high', 'low a', 'low b', 'low c']);
  fs.rmSync(path.dirname(trace), { recursive: true, force: true });

  // 3. preemption (the pools of test_preempt's second part, one slot fewer: fixed bytes of
  // 3 sequences at c_max 64 with the MTP caches + 5 blocks x 6,272, F32 rows)
  const p = await start(['--max-seqs', '3', '--max-context', '256', '--step-tokens', '64', '--no-warmup',
    '--cache-bytes', String(3 * 137216 + 5 * 6272), '--kv-dtype', 'f32', '--hangup-check-ms', '2',
    '--scheduling-policy', 'priority']);
  const words = Array.from({ length: 190 }, (_, k) => ['alpha', 'beta', 'gamma', 'delta'][k % 4]).join(' ');
  const hreq = { model: 'm', prompt: words, max_tokens: 6, temperature: 1, seed: 5, priority: 0 };
  const n = [0, 0];
  const stop = [new AbortController(), new AbortController()];
  const low = [0, 1].map((k) => stream(p.url, { model: 'm', prompt: `low ${k} says`, max_tokens: 240,
    temperature: 0, logit_bias: { 1: -100 }, priority: 5 }, n, k, stop[k].signal));
  const ended = [false, false];
  low.forEach((s, k) => s.then(() => { ended[k] = true; }));
  await until(() => n[0] >= 128 && n[1] >= 128);
  const m0 = await metrics(p.url);
  const h = await http(p.url + '/v1/completions', { body: hreq });
  const m1 = await metrics(p.url);
  assert.strictEqual(h.status, 200, h.body);
  assert.deepStrictEqual(ended, [false, false], 'the priority-0 request waited for a priority-5 one to end');
  assert.strictEqual(m1.dsv4_preemptions_total - m0.dsv4_preemptions_total, 1,
    'the pools were not short: the test does not exercise preemption');
  stop.forEach((c) => c.abort());
  await Promise.all(low);
  const solo = await http(p.url + '/v1/completions', { body: hreq });
  assert.strictEqual(h.json.choices[0].text, solo.json.choices[0].text);
  await p.stop();

  // 4. preemption for a slot
  const g = await start(['--max-seqs', '2', '--max-context', '512', '--no-warmup', '--scheduling-policy', 'priority']);
  const sbody = (k) => ({ model: 'm', prompt: `stream ${k} runs`, max_tokens: 64, temperature: 1, seed: 11 + k,
    ignore_eos: true, priority: 5 });
  const texts = ['', ''];
  const streams = [0, 1].map((k) => (async () => {
    const res = await fetch(g.url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...sbody(k), stream: true }) });
    let buf = '';
    for await (const chunk of res.body) {
      buf += Buffer.from(chunk).toString();
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i).replace(/^data: /, '');
        buf = buf.slice(i + 2);
        if (ev !== '[DONE]') texts[k] += JSON.parse(ev).choices[0].text;
      }
    }
  })());
  const done = [false, false];
  streams.forEach((x, k) => x.then(() => { done[k] = true; }));
  await until(() => texts[0].length > 0 && texts[1].length > 0);
  let eqDone = false;
  const eq = http(g.url + '/v1/completions', { body: { model: 'm', prompt: 'equal', max_tokens: 2, priority: 5 } })
    .then((r) => { assert.strictEqual(r.status, 200, r.body); eqDone = true; });
  await until(async () => (await metrics(g.url)).dsv4_queue_depth === 1);
  const hi = { model: 'm', prompt: 'urgent', max_tokens: 4, temperature: 1, seed: 3, priority: 0 };
  const hr = await http(g.url + '/v1/completions', { body: hi });
  assert.strictEqual(hr.status, 200, hr.body);
  assert.deepStrictEqual(done, [false, false], 'the priority-0 request waited for a stream to end');
  assert.strictEqual(eqDone, false, 'the priority-5 request took a slot from a stream of its own priority');
  await Promise.all(streams);
  await eq;
  const mg = await metrics(g.url);
  assert.strictEqual(mg.dsv4_priority_preemptions_total, 1, 'priority preemptions');
  assert.strictEqual(mg.dsv4_preemptions_total, 1, 'preemptions');
  for (const k of [0, 1]) {
    const alone = await http(g.url + '/v1/completions', { body: sbody(k) });
    assert.strictEqual(texts[k], alone.json.choices[0].text, `stream ${k} changed by the preemption`);
  }
  assert.strictEqual(hr.json.choices[0].text, (await http(g.url + '/v1/completions', { body: hi })).json.choices[0].text);
  await g.stop();
});
