// test_serve_fidelity.js — `dsv4 serve --fidelity` (spec/model.md §6) and FP4 indexer keys in the
// server (serving.md §a.1): under fidelity item F3 every indexer key is rounded to FP4 values,
// so a server storing the keys as FP4 (--kv-dtype bf16+fp4) answers exactly what one storing
// them as BF16 answers (tokens and logprobs, greedy and seeded, chat and completions, several
// requests at once and a prefix-cache hit); F3 itself changes the answers (the option reached
// the engine); and +fp4 without F3 is refused at startup, before the listener. /metrics counts
// the rows by indexer path (dsv4_indexer_rows_total{path}): on a model whose indexer is wide
// enough for the bounded selection (DSV4_MODEL_IDX), FP4 keys take the integer block dots for
// exactly the rows BF16 keys score by the F32 path.
'use strict';
const assert = require('assert');
const { spawnSync } = require('child_process');
const OpenAI = require('openai').default;
const { start, run, http, metrics, BIN, MODEL } = require('./harness');

// prompts long enough that the CSA layer (ratio 4, index_topk 4) selects among more entries
// than it keeps: a position t sees (t + 1) / 4 entries
const WORDS = 'river stone lantern meadow copper harbor willow ember falcon granite'.split(' ');
const text = (i, n) => Array.from({ length: n }, (_, k) => WORDS[(k * 3 + i) % 10]).join(' ');

async function answers(args) {
  const srv = await start(['--max-seqs', '4', '--step-tokens', '64', '--max-context', '512', ...args]);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const chat = (i) => client.chat.completions.create({ model: 'm', max_tokens: 24, logprobs: true, top_logprobs: 2,
    messages: [{ role: 'user', content: text(i, 60 + 20 * i) }],
    ...(i % 2 ? { temperature: 0.9, seed: 11 + i } : { temperature: 0 }) })
    .then((r) => ({ text: r.choices[0].message.content, lp: r.choices[0].logprobs.content }));
  const out = await Promise.all([0, 1, 2, 3].map(chat));
  // a completion of token ids, then the same prompt again: its prefix comes from the cache
  const ids = Array.from({ length: 200 }, (_, k) => 7 + ((k * 53) % 900));
  for (let r = 0; r < 2; r++) {
    const c = await client.completions.create({ model: 'm', prompt: ids, max_tokens: 16, temperature: 0, logprobs: 2 });
    out.push({ text: c.choices[0].text, lp: c.choices[0].logprobs, cached: c.usage.prompt_tokens_details.cached_tokens });
  }
  await srv.stop();
  return out;
}

// The rows by indexer path before and after a completion of a 96-id prompt and 4 tokens.
async function paths(kv) {
  const srv = await start(['--max-seqs', '2', '--max-context', '256', '--no-warmup', '--kv-dtype', kv, '--fidelity', 'F3'],
    { model: process.env.DSV4_MODEL_IDX });
  // once /metrics shows nothing running, the counters hold every step that ran (one lock)
  const get = async () => {
    let m;
    for (let i = 0; i < 2000; i++) {
      m = await metrics(srv.url);
      if (m.dsv4_running_sequences === 0 && m.dsv4_queue_depth === 0)
        return Object.fromEntries(['exact', 'bounded_f32', 'bounded_int', 'bounded_unpack'].map((p) => [p, m[`dsv4_indexer_rows_total{path="${p}"}`]]));
      await new Promise((ok) => setTimeout(ok, 2));
    }
    assert.fail(`/metrics never showed nothing running: ${JSON.stringify(m)}`);
  };
  const before = await get();
  const ids = Array.from({ length: 96 }, (_, k) => 7 + ((k * 53) % 900));
  const res = await http(srv.url + '/v1/completions', { body: { model: 'm', prompt: ids, max_tokens: 4, temperature: 0 } });
  assert.strictEqual(res.status, 200, res.body);
  const after = await get();
  await srv.stop();
  return { before, after };
}

run('serve_fidelity', async () => {
  // +fp4 without F3: exit status 2 and the reason, before anything listens
  for (const fid of [[], ['--fidelity', 'F1,F2,F4,F5']]) {
    const r = spawnSync(BIN, ['serve', '--model', MODEL, '--port', '0', '--kv-dtype', 'bf16+fp4', ...fid],
      { encoding: 'utf8', timeout: 20000 });
    assert.strictEqual(r.status, 2, r.stderr);
    assert.match(r.stderr, /--kv-dtype bf16\+fp4: FP4 indexer keys need fidelity item F3/);
    assert.doesNotMatch(r.stderr, /listening/);
  }
  const bad = spawnSync(BIN, ['serve', '--model', MODEL, '--fidelity', 'F9'], { encoding: 'utf8', timeout: 20000 });
  assert.strictEqual(bad.status, 2, bad.stderr);
  assert.match(bad.stderr, /--fidelity/);

  const bf16 = await answers(['--kv-dtype', 'bf16', '--fidelity', 'F3']);
  const fp4 = await answers(['--kv-dtype', 'bf16+fp4', '--fidelity', 'F3']);
  assert.strictEqual(fp4.length, 6);
  for (let i = 0; i < fp4.length; i++)
    assert.deepStrictEqual(fp4[i], bf16[i], `request ${i}: FP4 keys answer otherwise than BF16 keys under F3`);
  assert(fp4[4].cached === 0 && fp4[5].cached > 0, 'the repeated prompt was not a prefix-cache hit');
  // without F3 the indexer scores other keys: some logprob differs (the option is not ignored)
  const none = await answers(['--kv-dtype', 'bf16']);
  assert.notDeepStrictEqual(none, bf16, 'the answers under --fidelity F3 are those without it');

  const zero = { exact: 0, bounded_f32: 0, bounded_int: 0, bounded_unpack: 0 };
  const t0 = Date.now();
  const p4 = await paths('bf16+fp4'), p16 = await paths('bf16');
  assert.deepStrictEqual(p4.before, zero, `indexer rows before any request: ${JSON.stringify(p4.before)}`);
  assert.deepStrictEqual(p16.before, zero, `indexer rows before any request: ${JSON.stringify(p16.before)}`);
  // every row that sees more than index_topk entries goes bounded on this indexer (8 x 128)
  const n = p16.after.bounded_f32;
  assert(n >= 70, `BF16 keys: ${JSON.stringify(p16.after)}: the rows did not take the bounded F32 path`);
  assert.deepStrictEqual(p16.after, { ...zero, bounded_f32: n });
  assert.deepStrictEqual(p4.after, { ...zero, bounded_int: n }, `FP4 keys: ${JSON.stringify(p4.after)} (BF16: ${n} rows)`);
  console.log(`indexer rows by path: FP4 keys ${JSON.stringify(p4.after)}, BF16 keys ${JSON.stringify(p16.after)} ` +
    `(${(Date.now() - t0) / 1000} s)`);
});
