// test_gen_config.js — the model's generation_config.json as the defaults of requests that
// omit the sampling fields (vLLM's --generation-config auto, the default).
// 1. A copy of the test model's directory with a generation_config.json (temperature 0.6,
//    top_p 0.9, top_k 20, min_p 0.05, repetition_penalty 1.1, max_new_tokens 6): on every
//    endpoint, a seed-fixed sampled answer without the fields equals the same request with
//    them explicit, and differs from it with the API's own defaults explicit. max_new_tokens
//    caps max_tokens (asked 40 -> 6; asked 3 -> 3). The Responses object shows the
//    temperature and top_p sampled with.
// 2. A malformed file (temperature a string) stops the start with an error naming the file
//    and the field; with --generation-config none the same directory serves, and a request
//    without the fields samples with the API's defaults.
// 3. transformers' own defaults are not taken.
// 4. eos_token_id [1 (the model's EOS), 19923 ('Hello')]: 'Hello' ends generation as a stop
//    token id does (finish stop, its text not shown) on every endpoint, but not with
//    ignore_eos, nor under --generation-config none; an id outside the vocabulary, or a
//    string, stops the start naming eos_token_id.
'use strict';
const assert = require('assert');
const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { start, http, run } = require('./harness');

// the test model's files linked into a new directory, with gen as its generation_config.json
function modelWith(gen) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-gencfg-'));
  for (const f of fs.readdirSync(process.env.DSV4_MODEL))
    if (f !== 'generation_config.json') fs.symlinkSync(path.join(process.env.DSV4_MODEL, f), path.join(dir, f));
  fs.writeFileSync(path.join(dir, 'generation_config.json'), typeof gen === 'string' ? gen : JSON.stringify(gen));
  return dir;
}

const GEN = { temperature: 0.6, top_p: 0.9, top_k: 20, min_p: 0.05, repetition_penalty: 1.1 };
const API = { temperature: 1, top_p: 1, top_k: -1, min_p: 0, repetition_penalty: 1 };
const msgs = [{ role: 'user', content: 'name a colour' }];
// each endpoint: [path, body without the sampling fields, its answer's text, its token count]
const ENDPOINTS = [
  ['/v1/completions', { model: 'm', prompt: 'colours: red, green,', seed: 7, max_tokens: 40, ignore_eos: true },
    (j) => j.choices[0].text, (j) => j.usage.completion_tokens],
  ['/v1/chat/completions', { model: 'm', messages: msgs, seed: 7, max_tokens: 40, ignore_eos: true },
    (j) => j.choices[0].message.content, (j) => j.usage.completion_tokens],
  ['/v1/messages', { model: 'm', messages: msgs, seed: 7, max_tokens: 40, ignore_eos: true },
    (j) => j.content.map((c) => c.text).join(''), (j) => j.usage.output_tokens],
  ['/v1/responses', { model: 'm', input: 'name a colour', seed: 7, max_output_tokens: 40, ignore_eos: true },
    (j) => j.output.map((o) => (o.content || []).map((c) => c.text).join("")).join(""), (j) => j.usage.output_tokens],
];

run('server_gen_config', async () => {
  // 1. the defaults applied
  const dir = modelWith({ ...GEN, max_new_tokens: 6, do_sample: true, eos_token_id: 1, transformers_version: '4.46.3' });
  const srv = await start(['--no-warmup', '--max-seqs', '2'], { model: dir });
  const said = [];
  for (const [p, body, text, count] of ENDPOINTS) {
    const post = async (b) => {
      const r = await http(srv.url + p, { body: b });
      assert.strictEqual(r.status, 200, `${p}: ${r.body}`);
      return r.json;
    };
    const implicit = await post(body);
    const explicit = await post({ ...body, ...GEN });
    const api = await post({ ...body, ...API });
    assert.strictEqual(text(implicit), text(explicit), `${p}: the model's defaults were not applied`);
    assert.notStrictEqual(text(implicit), text(api), `${p}: the API's defaults gave the same answer (no test)`);
    assert.strictEqual(count(implicit), 6, `${p}: max_new_tokens did not cap max_tokens 40`);
    const capped = { ...body };
    if (p === '/v1/responses') capped.max_output_tokens = 3;
    else capped.max_tokens = 3;
    assert.strictEqual(count(await post(capped)), 3, `${p}: a max_tokens below the cap`);
    if (p === '/v1/responses') {
      assert.strictEqual(implicit.temperature, 0.6, 'the response shows the temperature sampled with');
      assert.strictEqual(implicit.top_p, 0.9);
    }
    said.push(`${p}: ${JSON.stringify(text(implicit)).slice(0, 40)}`);
  }
  // null is omitted (vLLM reads it so)
  const cmp = ENDPOINTS[0];
  const nul = await http(srv.url + cmp[0], { body: { ...cmp[1], temperature: null, top_k: null } });
  const exp = await http(srv.url + cmp[0], { body: { ...cmp[1], ...GEN } });
  assert.strictEqual(cmp[2](nul.json), cmp[2](exp.json), 'a null field did not take the default');
  await srv.stop();
  fs.rmSync(dir, { recursive: true, force: true });

  // 2. a malformed file
  const bad = modelWith({ temperature: 'hot', top_k: 5 });
  // (not the harness's start: its 30 s readiness timer would outlive the failed start)
  const failed = spawnSync(process.env.DSV4_BIN, ['serve', '--model', bad, '--port', '0', '--no-warmup', '--threads', '1'],
    { encoding: 'utf8', timeout: 20000 });
  assert.strictEqual(failed.status, 1, `a malformed generation_config.json: exit ${failed.status}\n${failed.stderr}`);
  assert(/generation_config\.json: temperature is a string, must be a number/.test(failed.stderr), failed.stderr);
  // under mpirun the whole group ends at once (rank 0 refuses the file before the warm-up and
  // the collective engine create, with the group still marked broken: an abort), not at the
  // followers' peer timeout
  if (process.env.DSV4_MPIEXEC) {
    const t0 = Date.now();
    const mpi = spawnSync(process.env.DSV4_MPIEXEC, ['--allow-run-as-root', '--oversubscribe', '-np', '2',
      process.env.DSV4_BIN, 'serve', '--model', bad, '--port', '0', '--no-warmup', '--threads', '1',
      '--parallel', 'ep', '--attention', 'home'], { encoding: 'utf8', timeout: 30000 });
    // (a hang bound, as the harness's watchdogs: the followers would wait the peer timeout, 300 s)
    assert(!mpi.error, `mpirun with a malformed file did not end: ${mpi.error}`);
    assert(mpi.status !== 0 && mpi.status !== null, `mpirun with a malformed file: exit ${mpi.status}`);
    assert(/temperature is a string/.test(mpi.stderr), mpi.stderr);
    said.push(`mpirun -np 2: exit ${mpi.status} in ${Date.now() - t0} ms`);
  }
  const none = await start(['--no-warmup', '--generation-config', 'none'], { model: bad });
  const [p, body, text] = ENDPOINTS[0];
  const a = await http(none.url + p, { body });
  const b = await http(none.url + p, { body: { ...body, ...API } });
  assert.strictEqual(text(a.json), text(b.json), '--generation-config none: not the API defaults');
  await none.stop();
  fs.rmSync(bad, { recursive: true, force: true });

  // 3. transformers' defaults are not taken (vLLM reads the file through to_diff_dict, which
  //    drops them): top_k 50 leaves top_k unlimited
  const hf = modelWith({ top_k: 50, temperature: 1.0, min_p: 0.02 });
  const h = await start(['--no-warmup'], { model: hf });
  const noK = await http(h.url + p, { body });
  const off = await http(h.url + p, { body: { ...body, min_p: 0.02, top_k: -1 } });
  const k50 = await http(h.url + p, { body: { ...body, min_p: 0.02, top_k: 50 } });
  assert.strictEqual(text(noK.json), text(off.json), 'a top_k of 50 (transformers\' default) was applied');
  assert.notStrictEqual(text(noK.json), text(k50.json), 'top_k 50 gave the same answer (no test)');
  await h.stop();
  fs.rmSync(hf, { recursive: true, force: true });

  // 4. eos_token_id: the bias makes 'Hello' (19923) the first token drawn
  const HELLO = 19923;
  const eos = modelWith({ eos_token_id: [1, HELLO] });
  const bias = { logit_bias: { [HELLO]: 100 }, temperature: 0 };
  const stopped = [
    ['/v1/completions', { model: 'm', prompt: 'say hi', max_tokens: 4, ...bias },
      (j) => [j.choices[0].text, j.choices[0].finish_reason, j.usage.completion_tokens]],
    ['/v1/chat/completions', { model: 'm', messages: msgs, max_tokens: 4, ...bias },
      (j) => [j.choices[0].message.content, j.choices[0].finish_reason, j.usage.completion_tokens]],
    ['/v1/messages', { model: 'm', messages: msgs, max_tokens: 4, ...bias },
      (j) => [j.content.map((c) => c.text).join(''), j.stop_reason, j.usage.output_tokens]],
  ];
  const e = await start(['--no-warmup'], { model: eos });
  for (const [path, b, got] of stopped) {
    const stop = await http(e.url + path, { body: b });
    assert.strictEqual(stop.status, 200, stop.body);
    assert.deepStrictEqual(got(stop.json), ['', path === '/v1/messages' ? 'end_turn' : 'stop', 1], `${path}: eos_token_id`);
    const ign = await http(e.url + path, { body: { ...b, ignore_eos: true } });
    assert.deepStrictEqual(got(ign.json), ['HelloHelloHelloHello', path === '/v1/messages' ? 'max_tokens' : 'length', 4],
      `${path}: ignore_eos`);
  }
  // (a request's own stop_token_ids join the file's)
  const own = await http(e.url + stopped[0][0], { body: { ...stopped[0][1], logit_bias: { 8295: 100 }, stop_token_ids: [8295] } });
  assert.deepStrictEqual(stopped[0][2](own.json), ['', 'stop', 1]);
  await e.stop();
  const eosNone = await start(['--no-warmup', '--generation-config', 'none'], { model: eos });
  const free = await http(eosNone.url + stopped[0][0], { body: stopped[0][1] });
  assert.deepStrictEqual(stopped[0][2](free.json), ['HelloHelloHelloHello', 'length', 4], '--generation-config none');
  await eosNone.stop();
  fs.rmSync(eos, { recursive: true, force: true });
  for (const [v, re] of [[[1, 129280], /generation_config\.json: eos_token_id\[1\] = 129280, must be a token id in \[0, 129280\)/],
    ['1', /generation_config\.json: eos_token_id is a string, must be a token id or a list of them/]]) {
    const badEos = modelWith({ eos_token_id: v });
    const f = spawnSync(process.env.DSV4_BIN, ['serve', '--model', badEos, '--port', '0', '--no-warmup', '--threads', '1'],
      { encoding: 'utf8', timeout: 20000 });
    assert.strictEqual(f.status, 1, `eos_token_id ${JSON.stringify(v)}: exit ${f.status}\n${f.stderr}`);
    assert(re.test(f.stderr), f.stderr);
    fs.rmSync(badEos, { recursive: true, force: true });
  }
  console.log(said.join('; '));
});
