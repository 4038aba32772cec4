// test_serve_prefix.js — the prefix cache in the server (serving.md §g, issue 11), on the
// full-vocabulary model (alignment A = 128: its compress ratios are 4 and 128).
//  1. Memory, MTP on (the model's default): the same long prompt twice gives the same
//     answer (sampled, logprobs included) with usage.prompt_tokens_details.cached_tokens =
//     the prompt's last aligned length below its length; chat and Anthropic too
//     (cache_read_input_tokens); /metrics counts the hits and reused tokens.
//  2. --kv-dir: a stale NAME.kv.tmp.PID is deleted at start; a restart serves the prefix from
//     disk (cached_tokens > 0, same answer); a file with one flipped byte is set aside as
//     .bad and the request is served cold with the same answer.
//  3. A finished conversation's aligned prefix (MTP off, scripted answer): a prompt that
//     continues the conversation past 128 tokens restores 128 of them.
'use strict';
const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const OpenAI = require('openai').default;
const Anthropic = require('@anthropic-ai/sdk').default;
const { start, metrics, run, BIN, MODEL, execFileSync } = require('./harness');

const A = 128;
const WORDS = 'amber birch cedar dune ember fjord grove heath inlet juniper'.split(' ');
const LONG = Array.from({ length: 260 }, (_, k) => WORDS[(k * 3) % WORDS.length]).join(' ');
const REQ = { model: 'm', prompt: LONG, max_tokens: 12, temperature: 0.8, seed: 5, logprobs: 1 };
const point = (n) => Math.floor((n - 1) / A) * A;
const shape = (r) => ({ text: r.choices[0].text, finish: r.choices[0].finish_reason,
  lp: r.choices[0].logprobs.token_logprobs });
const cached = (r) => r.usage.prompt_tokens_details.cached_tokens;

async function memoryCache() {
  const srv = await start(['--max-context', '1024']);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const a = await client.completions.create(REQ);
  const b = await client.completions.create(REQ);
  const n = a.usage.prompt_tokens;
  assert(n > 2 * A, `the prompt has ${n} tokens: too short for this test`);
  assert.strictEqual(cached(a), 0, 'a cold start reports cached tokens');
  assert.strictEqual(cached(b), point(n), 'the repeated prompt did not restore its aligned prefix');
  assert.deepStrictEqual(shape(b), shape(a), 'the answer changed after a prefix-cache hit');

  // a longer prompt that starts with the same text restores the same prefix
  const c = await client.completions.create({ ...REQ, prompt: LONG + ' and then some more words' });
  assert.strictEqual(cached(c), point(n));

  // chat, twice, greedy with logprobs
  const chat = { model: 'm', max_tokens: 8, temperature: 0, logprobs: true,
    messages: [{ role: 'system', content: 'Chat. ' + LONG }, { role: 'user', content: 'Say something.' }] };
  const c1 = await client.chat.completions.create(chat);
  const c2 = await client.chat.completions.create(chat);
  assert.strictEqual(cached(c1), 0);
  assert.strictEqual(cached(c2), point(c2.usage.prompt_tokens));
  assert(cached(c2) > 0);
  assert.deepStrictEqual(c2.choices[0].message, c1.choices[0].message);
  assert.deepStrictEqual(c2.choices[0].logprobs, c1.choices[0].logprobs);

  // Anthropic: input_tokens + cache_read_input_tokens = the prompt
  const anth = new Anthropic({ apiKey: 'x', baseURL: srv.url, maxRetries: 0 });
  const msg = { model: 'm', max_tokens: 8, temperature: 0, system: '(anthropic) ' + LONG,
    messages: [{ role: 'user', content: 'Hello.' }] };
  const m1 = await anth.messages.create(msg);
  const m2 = await anth.messages.create(msg);
  const total = m1.usage.input_tokens + m1.usage.cache_read_input_tokens;
  assert.strictEqual(m1.usage.cache_read_input_tokens, 0);
  assert.strictEqual(m2.usage.cache_read_input_tokens, point(total));
  assert.strictEqual(m2.usage.input_tokens + m2.usage.cache_read_input_tokens, total);
  assert.deepStrictEqual(m2.content, m1.content);

  const m = await metrics(srv.url);
  const reused = cached(b) + cached(c) + cached(c1) + cached(c2) + m2.usage.cache_read_input_tokens;
  assert.strictEqual(m.dsv4_prefix_reused_tokens_total, reused);
  assert.strictEqual(m.dsv4_prefix_hits_total, 4);  // b, c, c2, m2
  assert.strictEqual(m.dsv4_prefix_misses_total, 3);  // a, c1, m1
  assert(m.dsv4_prefix_entries >= 3, `${m.dsv4_prefix_entries} entries`);
  assert(m.dsv4_prefix_memory_bytes > 0);
  assert.strictEqual(m.dsv4_prefix_disk_files, 0);
  await srv.stop();
  return shape(a);
}

async function diskCache(cold) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-kv-'));
  const stale = path.join(dir, `p128-${'0'.repeat(16)}.kv.tmp.99999`);
  fs.writeFileSync(stale, 'half a save');
  const ask = async (extra = []) => {
    const srv = await start(['--max-context', '1024', '--kv-dir', dir, ...extra]);
    const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
    const r = await client.completions.create(REQ);
    const m = await metrics(srv.url);
    await srv.stop();
    return { r, m };
  };
  const first = await ask();
  assert(!fs.existsSync(stale), 'the interrupted save was not deleted at start');
  assert.strictEqual(cached(first.r), 0);
  assert.deepStrictEqual(shape(first.r), cold);
  assert(first.m.dsv4_prefix_disk_saves_total >= 1);
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.kv'));
  assert(files.length >= 1, 'nothing was saved');
  assert.strictEqual(first.m.dsv4_prefix_disk_files, files.length);
  assert.strictEqual(first.m.dsv4_prefix_disk_bytes,
    files.reduce((s, f) => s + fs.statSync(path.join(dir, f)).size, 0));

  const again = await ask();
  assert.strictEqual(cached(again.r), point(again.r.usage.prompt_tokens), 'the restart did not restore from disk');
  assert.deepStrictEqual(shape(again.r), cold, 'the answer changed after a restore from disk');
  assert.strictEqual(again.m.dsv4_prefix_disk_loads_total, 1);

  // one flipped byte in every file: each fails validation, is set aside, the request is cold
  for (const f of files) {
    const p = path.join(dir, f);
    const buf = fs.readFileSync(p);
    buf[buf.length >> 1] ^= 0x40;
    fs.writeFileSync(p, buf);
  }
  const bad = await ask();
  assert.strictEqual(cached(bad.r), 0, 'a corrupted file was used');
  assert.deepStrictEqual(shape(bad.r), cold, 'a corrupted file changed the answer');
  assert.strictEqual(bad.m.dsv4_prefix_disk_bad_total, 1);
  assert(fs.readdirSync(dir).some((f) => f.endsWith('.kv.bad')), 'the bad file was not set aside');

  // budget: 1 byte keeps nothing
  await ask(['--kv-dir-bytes', '1']);
  assert.strictEqual(fs.readdirSync(dir).filter((f) => f.endsWith('.kv')).length, 0, 'the budget was not kept');
  fs.rmSync(dir, { recursive: true });
}

async function conversation() {
  const answer = 'The cedar grove by the fjord is quiet tonight, and the embers of the old fire glow '
    + 'amber under the birch trees while the tide turns slowly in the inlet below the heath.';
  const srv = await start(['--max-context', '1024', '--mtp', 'off'],
    { script: [{ match: 'CONV_TEST', text: answer }] });
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const tok = (text) => execFileSync(BIN, ['tokenize', '--tokenizer', MODEL], { input: text, encoding: 'utf8' })
    .trim().split(/\s+/).map(Number);
  const ans = tok(answer);
  const prompt = Array.from({ length: 110 }, (_, k) => 1000 + ((k * 37) % 3000));
  assert(prompt.length + ans.length > A + 8, 'the scripted answer does not reach 128 tokens');
  const a = await client.completions.create({ model: 'm', prompt, max_tokens: 100, user: 'CONV_TEST' });
  assert.strictEqual(a.choices[0].text, answer);
  // the next turn: the conversation so far and more
  const next = [...prompt, ...ans, 2000, 2001, 2002];
  const b = await client.completions.create({ model: 'm', prompt: next, max_tokens: 3, temperature: 0 });
  assert.strictEqual(cached(b), A, 'the conversation prefix was not kept');
  await srv.stop();
}

run('server_prefix', async () => {
  const cold = await memoryCache();
  await diskCache(cold);
  await conversation();
}, { limitMs: 150000 });
