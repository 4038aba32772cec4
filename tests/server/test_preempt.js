// test_preempt.js — pool pressure: the compressed-cache pools hold 10 blocks of 128
// positions and 8 requests arrive at once; each prompt fits one block and each answer
// grows into a second one, mid-generation. All complete (the newest running request is
// preempted when a step runs out of pages, and recomputed later from its tokens) with
// exactly the outputs each gives alone, sampled ones included.
// Then n = 2 whose prompt ends with the pools full (6 blocks: two requests decoding in their
// second block, its prompt in two): its fork cannot copy the open block, so choice 0 waits
// for pages (dsv4_fork_waits_total) and forks once a request ends; the prompt is computed
// once (choice 1 forked, not recomputed) and each choice is what n = 1 with its seed gives.
// While it waits no block page is free, so no request queued behind it could be admitted.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, http, metrics, run } = require('./harness');

// fixed per-sequence bytes (8 x 137,216 at c_max 64, with the MTP caches this model's
// server keeps by default) + 10 blocks x 6,272 bytes for this test's model: the planner
// accepts it (T_cap = (10 - 8) x 128 >= max_context 256); bytes of F32 rows (--kv-dtype f32)
const CACHE = 8 * 137216 + 10 * 6272;

function req(i) {
  const words = Array.from({ length: 100 + 2 * i }, (_, k) => ['alpha', 'beta', 'gamma', 'delta'][(k + i) % 4]);
  return { model: 'm', prompt: words.join(' '), max_tokens: 40, temperature: i % 2 ? 0.8 : 0, seed: 7 + i,
    logprobs: 1 };
}

run('server_preempt', async () => {
  const srv = await start(['--max-seqs', '8', '--max-context', '256', '--step-tokens', '64',
    '--cache-bytes', String(CACHE), '--kv-dtype', 'f32']);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const shape = (r) => ({ text: r.choices[0].text, finish: r.choices[0].finish_reason,
    lp: r.choices[0].logprobs.token_logprobs });
  const solo = [];
  for (let i = 0; i < 8; i++) solo.push(shape(await client.completions.create(req(i))));
  const m0 = await metrics(srv.url);
  const together = await Promise.all(solo.map((_, i) => client.completions.create(req(i)).then(shape)));
  const m1 = await metrics(srv.url);
  for (let i = 0; i < 8; i++) assert.deepStrictEqual(together[i], solo[i], `request ${i} differs under preemption`);
  const pre = m1.dsv4_preemptions_total - m0.dsv4_preemptions_total;
  console.log(`preemptions: ${pre}`);
  assert(pre > 0, 'the pools never ran out: the test does not exercise preemption');
  assert.strictEqual(m1['dsv4_requests_total{status="5xx"}'], 0);
  await srv.stop();

  // five slots: the two blockers, the two choices and one free for the request sent during
  // the fork wait (nothing but the wait keeps it out); 8 blocks, 3 a blocker and 2 the prompt
  const fs = await start(['--max-seqs', '5', '--max-context', '384', '--step-tokens', '64', '--no-warmup',
    '--cache-bytes', String(5 * 137216 + 8 * 6272), '--kv-dtype', 'f32', '--hangup-check-ms', '2']);
  const words = Array.from({ length: 190 }, (_, k) => ['alpha', 'beta', 'gamma', 'delta'][k % 4]).join(' ');
  const xreq = { model: 'm', prompt: words, max_tokens: 6, temperature: 1, seed: 5 };
  const xsolo = [];
  for (const seed of [5, 6]) xsolo.push((await http(fs.url + '/v1/completions', { body: { ...xreq, seed } })).json.choices[0].text);
  // two requests decoding past position 256 (their third block, which holds them to the
  // context's end), EOS banned; each runs until the test drops its client
  const toks = [0, 0];
  const stop = [new AbortController(), new AbortController()];
  const blockers = [0, 1].map(async (k) => {
    try {
      const res = await fetch(fs.url + '/v1/completions', { method: 'POST', signal: stop[k].signal,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: `blocker ${k} says`, max_tokens: 370, temperature: 0, logit_bias: { 1: -100 }, stream: true }) });
      const rd = res.body.getReader();
      for (;;) {
        const { value, done } = await rd.read();
        if (done) return;
        toks[k] += (Buffer.from(value).toString().match(/"text"/g) || []).length;
      }
    } catch (e) { /* dropped */ }
  });
  while (toks[0] < 256 || toks[1] < 256) await new Promise((ok) => setTimeout(ok, 2));
  const f0 = await metrics(fs.url);
  const xp = http(fs.url + '/v1/completions', { body: { ...xreq, n: 2 } });
  // choice 0 waits for pages (its prompt ran on the full pools), then one blocker leaves
  for (let i = 0; i < 2000 && (await metrics(fs.url)).dsv4_fork_waits_total === f0.dsv4_fork_waits_total; i++)
    await new Promise((ok) => setTimeout(ok, 2));
  // while it waits the block pool has no page free (the fork needs one, its open block, and
  // the prefix cache was evicted for it): no other request would fit either, so admitting
  // none behind it loses nothing (rv-srv5's question, session 46)
  const fw = await metrics(fs.url);
  assert.strictEqual(fw['dsv4_cache_pages{pool="block",state="free"}'], 0, 'a page was free while the fork waited');
  // one more request during the wait, a slot free for it: it is not admitted (queued, not
  // run, not preempted) until the fork goes through (rv-srv6)
  const late = http(fs.url + '/v1/completions', { body: { model: 'm', prompt: 'late', max_tokens: 1 } });
  for (let i = 0; i < 2000 && (await metrics(fs.url)).dsv4_queue_depth === fw.dsv4_queue_depth; i++)
    await new Promise((ok) => setTimeout(ok, 2));
  for (let i = 0; i < 40; i++) {
    const m = await metrics(fs.url);
    assert.strictEqual(m.dsv4_queue_depth, fw.dsv4_queue_depth + 1, 'a request was admitted behind the waiting fork');
    assert.strictEqual(m.dsv4_running_sequences, fw.dsv4_running_sequences, 'a request ran behind the waiting fork');
    assert.strictEqual(m.dsv4_preemptions_total, fw.dsv4_preemptions_total, 'a request admitted behind the fork was preempted');
    await new Promise((ok) => setTimeout(ok, 5));
  }
  stop[0].abort();
  const x = await xp;
  assert.strictEqual((await late).status, 200);
  stop[1].abort();
  await Promise.all(blockers);
  const f1 = await metrics(fs.url);
  const fd = (k) => f1[k] - f0[k];
  assert.strictEqual(x.status, 200, x.body);
  assert.deepStrictEqual(x.json.choices.map((c) => c.text), xsolo);
  console.log(`n = 2 under pressure: fork waits ${fd('dsv4_fork_waits_total')}, forks ${fd('dsv4_choices_forked_total')}`);
  assert.strictEqual(fd('dsv4_fork_waits_total'), 1, 'the pools were not short at the fork: the test does not exercise the wait');
  assert.strictEqual(fd('dsv4_choices_forked_total'), 1, 'choice 1 computed the prompt again');
  assert.strictEqual(fd('dsv4_prompt_tokens_forked_total'), x.json.usage.prompt_tokens);
  await fs.stop();
});
