// test_echo.js — /v1/completions echo with logprobs (the prompt's tokens scored), as
// lm-evaluation-harness's local-completions model asks for its loglikelihood tasks:
// {prompt: context + continuation (text or token ids, [[ids]] for its batch of one),
//  max_tokens: 0 or 1, temperature: 0, logprobs: N, echo: true, seed}, reading
// choices[0].logprobs.{tokens, token_logprobs, top_logprobs, text_offset} over the prompt.
//  1. The answer's shape: text = the prompt's text (+ the completion's), one entry per
//     prompt token, the first token's logprob and top_logprobs null, text_offset where each
//     token's text begins (in characters); max_tokens 0 answers the prompt alone (finish
//     "length", no completion tokens); a token-id prompt gives the same numbers as its text.
//  2. Bit-identical to decoding across prefill chunks (--step-tokens 32, a ~150-token
//     prompt): prompt token i's top_logprobs are those a request with the first i tokens
//     and max_tokens 1 reports for its first token, and the logprob of a token t at i is
//     the one that request reports when it samples t (its greedy token, echoed after them).
//  3. A prefix-cache hit changes nothing: the echo runs its prompt cold (cached_tokens 0)
//     and answers the same numbers after a plain request kept the prompt's prefix; two echoes
//     and a plain request side by side answer as alone; an id without text scores -9999.
//  4. The 400s: echo streamed, max_tokens 0 with n > 1.
//  5. A list of prompts (lm-eval's batch_size > 1, any legacy-completions client): choice
//     p n + c is prompt p's choice c, each equal to the request of that prompt alone (echo's
//     logprobs bit for bit; sampled choices with n and best_of seed for seed), usage summed,
//     the stream's chunks indexed so; a list over --max-queue and a bad element are 400s.
//  6. vLLM's prompt_logprobs (completions: each choice's; chat: the answer's): null, then
//     per prompt token {id: {logprob, rank, decoded_token}}: the token (echo's logprob, its
//     rank among all ids) and the best k ranked 1..k with echo's numbers; not streamed.
//  7. Beside a decoding request a scored prompt's chunk is charged two rows a row (its LM
//     head and scoring): at most half the step's rows (--trace-steps: rows - decode <= 16).
'use strict';
const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const OpenAI = require('openai').default;
const { start, http, metrics, run } = require('./harness');

const WORDS = 'amber birch cedar dune ember fjord grove heath inlet juniper kelp lichen'.split(' ');
const TEXT = Array.from({ length: 140 }, (_, k) => WORDS[(k * 5) % WORDS.length]).join(' ');
const N_TOP = 5;

run('echo', async () => {
  const trace = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-echo-')), 'steps.jsonl');
  const srv = await start(['--max-context', '512', '--step-tokens', '32', '--max-seqs', '4', '--threads', '2',
    '--trace-steps', trace]);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const lmEval = (prompt, extra = {}) => client.completions.create({ model: 'm', prompt, max_tokens: 0,
    temperature: 0, logprobs: N_TOP, echo: true, seed: 1234, ...extra });
  try {
    // 1. shape
    const a = await lmEval(TEXT);
    const c = a.choices[0], lp = c.logprobs, n = a.usage.prompt_tokens;
    assert(n > 100, `the prompt has ${n} tokens: too short to cross chunks`);
    assert.strictEqual(c.text, TEXT, 'the echo is not the prompt\'s text');
    assert.strictEqual(c.finish_reason, 'length');
    assert.strictEqual(a.usage.completion_tokens, 0);
    for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'])
      assert.strictEqual(lp[k].length, n, `${k} has ${lp[k].length} entries for ${n} prompt tokens`);
    assert.strictEqual(lp.token_logprobs[0], null);
    assert.strictEqual(lp.top_logprobs[0], null);
    for (let i = 1; i < n; i++) {
      const v = lp.token_logprobs[i], top = lp.top_logprobs[i];
      assert(typeof v === 'number' && v <= 0, `token_logprobs[${i}] = ${v}`);
      assert.strictEqual(Object.keys(top).length, N_TOP, `top_logprobs[${i}]`);
      assert(v <= Math.max(...Object.values(top)), `token ${i} more likely than the best`);
    }
    // the BOS put before a text prompt has no text: offset 0, then each token's text in turn
    assert.strictEqual(lp.tokens[0], '<｜begin▁of▁sentence｜>');
    assert.strictEqual(lp.text_offset[0], 0);
    for (let i = 1; i < n; i++) {
      const end = i + 1 < n ? lp.text_offset[i + 1] : c.text.length;
      assert.strictEqual(c.text.slice(lp.text_offset[i], end), lp.tokens[i], `text_offset[${i}]`);
    }
    // text_offset counts characters (code points), as OpenAI and vLLM do, not bytes
    const uni = (await lmEval('naïve café: über Straße, ½ ∑ 東京')).choices[0];
    const cps = [...uni.text], uo = uni.logprobs.text_offset;
    for (let i = 1; i < uo.length; i++) {
      const end = i + 1 < uo.length ? uo[i + 1] : cps.length;
      assert.strictEqual(cps.slice(uo[i], end).join(''), uni.logprobs.tokens[i], `text_offset[${i}] in characters`);
    }
    // the same prompt as token ids ([[ids]]: lm-eval's batch of one): the same numbers
    const tok = await http(srv.url + '/tokenize', { body: { prompt: TEXT } });
    const ids = tok.json.tokens;
    assert.strictEqual(ids.length, n);
    const b = await lmEval([ids]);
    assert.strictEqual(b.choices[0].text, '<｜begin▁of▁sentence｜>' + TEXT);
    assert.deepStrictEqual(b.choices[0].logprobs.token_logprobs, lp.token_logprobs);
    assert.deepStrictEqual(b.choices[0].logprobs.top_logprobs, lp.top_logprobs);

    // 2. decoding's numbers, at chunk edges (rows 31/32/33, 63/64) and the prompt's end, the
    // tokens named by id (vLLM's return_tokens_as_token_ids: a random model's tokens are often
    // fragments of UTF-8, or share a text)
    const asIds = { return_tokens_as_token_ids: true };
    const byId = (await lmEval([ids], asIds)).choices[0].logprobs;
    assert.deepStrictEqual(byId.tokens, ids.map((t) => `token_id:${t}`));
    assert.deepStrictEqual(byId.token_logprobs, lp.token_logprobs);
    for (const i of [1, 2, 32, 33, 64, 65, n - 1]) {
      const d = await client.completions.create({ model: 'm', prompt: ids.slice(0, i), max_tokens: 1,
        temperature: 0, logprobs: N_TOP, ...asIds });
      const dl = d.choices[0].logprobs;
      assert.deepStrictEqual(byId.top_logprobs[i], dl.top_logprobs[0], `prompt row ${i - 1}: top_logprobs differ`);
      // its greedy token put after the first i: scored as decoding scored it
      const g = Number(/^token_id:(\d+)$/.exec(dl.tokens[0])[1]);
      const e = await lmEval(ids.slice(0, i).concat([g]), asIds);
      assert.strictEqual(e.choices[0].logprobs.token_logprobs[i], dl.token_logprobs[0], `prompt token ${i}`);
      assert.deepStrictEqual(e.choices[0].logprobs.top_logprobs[i], dl.top_logprobs[0]);
    }

    // max_tokens 1 (lm-eval's other form): the prompt's entries, then the token's
    const g = await lmEval(TEXT, { max_tokens: 1 });
    const gl = g.choices[0].logprobs;
    assert.strictEqual(gl.tokens.length, n + 1);
    assert.deepStrictEqual(gl.token_logprobs.slice(0, n), lp.token_logprobs);
    assert.strictEqual(g.choices[0].text, TEXT + gl.tokens[n]);
    assert.strictEqual(gl.text_offset[n], TEXT.length);

    // 3. a plain request keeps the prompt's prefix; the echo still scores every row
    await client.completions.create({ model: 'm', prompt: TEXT, max_tokens: 1, temperature: 0 });
    const hit = await client.completions.create({ model: 'm', prompt: TEXT, max_tokens: 1, temperature: 0 });
    assert(hit.usage.prompt_tokens_details.cached_tokens > 0, 'no prefix-cache hit to test against');
    const again = await lmEval(TEXT);
    assert.strictEqual(again.usage.prompt_tokens_details.cached_tokens, 0);
    assert.deepStrictEqual(again.choices[0].logprobs, lp);

    // side by side (two echoes and a plain request in the same steps): each as alone
    const solo2 = await lmEval(ids.slice(0, 90));
    const plainReq = { model: 'm', prompt: ids.slice(0, 70), max_tokens: 4, temperature: 0, logprobs: 2 };
    const solo3 = await client.completions.create(plainReq);
    const [t1, t2, t3] = await Promise.all([lmEval(TEXT), lmEval(ids.slice(0, 90)), client.completions.create(plainReq)]);
    assert.deepStrictEqual(t1.choices, a.choices, 'an echo beside others differs from alone');
    assert.deepStrictEqual(t2.choices, solo2.choices, 'an echo beside others differs from alone');
    assert.deepStrictEqual(t3.choices, solo3.choices, 'a plain request beside echoes differs from alone');

    // an id without text (the vocabulary's padding, never sampled) scores -inf: -9999 (as vLLM), not null
    const pad = await lmEval([0, 300, 129279, 400]);
    const pl = pad.choices[0].logprobs.token_logprobs;
    assert.strictEqual(pl[0], null);
    assert.strictEqual(pl[2], -9999);
    assert(pl[1] > -9999 && pl[3] > -9999 && pl[1] < 0 && pl[3] < 0, JSON.stringify(pl));

    // 7. an echo beside a stream: its chunks half the step's 32 rows
    const before = fs.readFileSync(trace, 'utf8').split('\n').filter(Boolean).length;
    const st = await client.completions.create({ model: 'm', prompt: ids.slice(0, 8), max_tokens: 48,
      ignore_eos: true, temperature: 0, stream: true });
    const it = st[Symbol.asyncIterator]();
    await it.next();  // decoding now
    const beside = lmEval(TEXT);
    while (!(await it.next()).done);
    assert.deepStrictEqual((await beside).choices, a.choices);
    const steps = fs.readFileSync(trace, 'utf8').split('\n').filter(Boolean).slice(before).map((l) => JSON.parse(l));
    const shared = steps.filter((x) => x.decode > 0 && x.rows > x.decode);
    assert(shared.length >= 2, `the echo ran beside the stream in ${shared.length} steps`);
    for (const x of shared) assert(x.rows - x.decode <= 16, `a scored chunk of ${x.rows - x.decode} rows beside decoding`);

    // 4. refused
    let r = await http(srv.url + '/v1/completions', { body: { model: 'm', prompt: 'hi', echo: true, stream: true } });
    assert.strictEqual(r.status, 400);
    assert.match(r.json.error.message, /'echo' cannot be streamed/);
    r = await http(srv.url + '/v1/completions', { body: { model: 'm', prompt: 'hi', echo: true, max_tokens: 0, n: 2 } });
    assert.strictEqual(r.status, 400);
    assert.strictEqual(r.json.error.param, 'max_tokens');
    r = await http(srv.url + '/v1/completions', { body: { model: 'm', prompt: 'hi', max_tokens: 0 } });
    assert.strictEqual(r.status, 400, 'max_tokens 0 without echo');

    // 5. a list of prompts: lm-eval's loglikelihood batch (text and ids mixed), each choice as alone
    const withIndex = (ch, index) => ({ ...ch, index });
    const list = await lmEval([TEXT, ids.slice(0, 90), ids.slice(0, 70)]);
    const solo70 = await lmEval(ids.slice(0, 70));
    assert.strictEqual(list.choices.length, 3);
    assert.deepStrictEqual(list.choices[0], a.choices[0]);
    assert.deepStrictEqual(list.choices[1], withIndex(solo2.choices[0], 1));
    assert.deepStrictEqual(list.choices[2], withIndex(solo70.choices[0], 2));
    assert.strictEqual(list.usage.prompt_tokens, n + 90 + 70);
    // sampled: n and best_of per prompt, choice p n + c is prompt p's choice c (seeded alike)
    const gen = { model: 'm', max_tokens: 3, temperature: 1.0, seed: 7, logprobs: 1, ...asIds };
    for (const extra of [{ n: 2 }, { n: 2, best_of: 3 }]) {
      const prompts = [ids.slice(0, 20), ids.slice(5, 30)];
      const both = await client.completions.create({ ...gen, ...extra, prompt: prompts });
      assert.strictEqual(both.choices.length, 4);
      let completion = 0;
      for (let p = 0; p < 2; p++) {
        const one = await client.completions.create({ ...gen, ...extra, prompt: prompts[p] });
        completion += one.usage.completion_tokens;
        for (let c = 0; c < 2; c++)
          assert.deepStrictEqual(both.choices[2 * p + c], withIndex(one.choices[c], 2 * p + c), `prompt ${p} choice ${c}`);
      }
      assert.strictEqual(both.usage.completion_tokens, completion);
      assert.strictEqual(both.usage.prompt_tokens, 45);
    }
    // streamed: each chunk names its choice p n + c; reassembled, the answer's texts
    const sreq = { ...gen, n: 2, prompt: [ids.slice(0, 20), ids.slice(5, 30)] };
    const whole = await client.completions.create(sreq);
    const texts = ['', '', '', ''], ends = [0, 0, 0, 0];
    for await (const ch of await client.completions.create({ ...sreq, stream: true })) {
      for (const c of ch.choices) {
        texts[c.index] += c.text;
        if (c.finish_reason) ends[c.index]++;
      }
    }
    assert.deepStrictEqual(texts, whole.choices.map((c) => c.text));
    assert.deepStrictEqual(ends, [1, 1, 1, 1]);
    // a client gone mid-stream: every prompt's choices are cancelled (prompts 1.. with prompt 0's)
    const m0 = await metrics(srv.url);
    const ctl = new AbortController();
    const res = await fetch(srv.url + '/v1/completions', { method: 'POST', signal: ctl.signal,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...sreq, prompt: [ids.slice(0, 6), ids.slice(6, 12), ids.slice(12, 18)], max_tokens: 400,
        ignore_eos: true, stream: true }) });
    assert.strictEqual(res.status, 200);
    await res.body.getReader().read();
    ctl.abort();
    let m1;
    for (let i = 0; i < 500; i++) {
      m1 = await metrics(srv.url);
      if (m1.dsv4_requests_cancelled_total - m0.dsv4_requests_cancelled_total >= 6 && m1.dsv4_running_sequences === 0) break;
      await new Promise((f) => setTimeout(f, 10));
    }
    assert.strictEqual(m1.dsv4_requests_cancelled_total - m0.dsv4_requests_cancelled_total, 6, 'every prompt cancelled');
    assert.strictEqual(m1.dsv4_running_sequences, 0);
    // refused: more prompts x choices than the queue takes, an element that is no prompt
    r = await http(srv.url + '/v1/completions', { body: { model: 'm', prompt: Array(35).fill([1, 2]), n: 2 } });
    assert.strictEqual(r.status, 400);
    assert.strictEqual(r.json.error.param, 'prompt');
    assert.match(r.json.error.message, /35 prompts x 2 choices: a request takes at most 68/);
    r = await http(srv.url + '/v1/completions', { body: { model: 'm', prompt: [[1, 2], Array(600).fill(300)] } });
    assert.strictEqual(r.status, 400);
    assert.match(r.json.error.message, /^prompt 1: the prompt has 600 tokens and max_context is 512/);
    r = await http(srv.url + '/v1/completions', { body: { model: 'm', prompt: [[1, 2], 'x', 5] } });
    assert.strictEqual(r.status, 400);
    assert.match(r.json.error.message, /'prompt\[2\]' must be/);

    // 6. prompt_logprobs: echo's numbers, ranked
    const pk = 3;
    const plr = await lmEval([ids.slice(0, 70)], { prompt_logprobs: pk, ...asIds });
    const pl6 = plr.choices[0].prompt_logprobs, el = plr.choices[0].logprobs;
    assert.deepStrictEqual(el.token_logprobs, solo70.choices[0].logprobs.token_logprobs, 'prompt_logprobs changed echo');
    assert.strictEqual(pl6.length, 70);
    assert.strictEqual(pl6[0], null);
    for (let i = 1; i < 70; i++) {
      const d = pl6[i], keys = Object.keys(d);
      assert.strictEqual(d[ids[i]].logprob, el.token_logprobs[i], `prompt_logprobs[${i}]`);
      const top = Object.entries(el.top_logprobs[i]).slice(0, pk);  // best first, by id
      for (let t = 0; t < pk; t++) {
        const e = d[top[t][0].slice('token_id:'.length)];
        assert.strictEqual(e.logprob, top[t][1]);
        assert.strictEqual(e.rank, t + 1, `prompt_logprobs[${i}]: rank of the best ${t}`);
      }
      // the token's rank: 1 + the ids more likely (ties apart, none here)
      const more = Object.values(el.top_logprobs[i]).filter((v) => v > el.token_logprobs[i]).length;
      if (more < N_TOP) assert.strictEqual(d[ids[i]].rank, more + 1, `prompt_logprobs[${i}]: the token's rank`);
      else assert(d[ids[i]].rank > N_TOP);
      assert.strictEqual(keys.length, d[ids[i]].rank <= pk ? pk : pk + 1);
      assert.strictEqual(typeof d[ids[i]].decoded_token, 'string');
    }
    // the rank of a token that is the best, second, fifth after its prefix (one list)
    const pre = ids.slice(0, 33);
    const nx = (await client.completions.create({ model: 'm', prompt: pre, max_tokens: 1, temperature: 0,
      logprobs: N_TOP, ...asIds })).choices[0].logprobs.top_logprobs[0];
    const cand = Object.keys(nx).map((k) => Number(k.slice('token_id:'.length)));
    const ranked = await lmEval([0, 1, 4].map((t) => pre.concat([cand[t]])), { prompt_logprobs: 2, ...asIds });
    [0, 1, 4].forEach((t, p) => {
      const e = ranked.choices[p].prompt_logprobs[33][cand[t]];
      assert.strictEqual(e.rank, t + 1, `the token ${t + 1}th after its prefix`);
      assert.strictEqual(e.logprob, nx[`token_id:${cand[t]}`]);
    });
    const chat = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', max_tokens: 1,
      messages: [{ role: 'user', content: 'hello there' }], prompt_logprobs: 0 } });
    assert.strictEqual(chat.status, 200);
    const cpl = chat.json.prompt_logprobs;
    assert.strictEqual(cpl.length, chat.json.usage.prompt_tokens);
    assert.strictEqual(cpl[0], null);
    assert(cpl.slice(1).every((d) => Object.keys(d).length === 1 && Object.values(d)[0].rank >= 1));
    for (const [body, what] of [[{ prompt: 'hi', prompt_logprobs: 1, stream: true }, /cannot be streamed/],
      [{ prompt: 'hi', prompt_logprobs: 21 }, /from 0 to 20/]]) {
      r = await http(srv.url + '/v1/completions', { body: { model: 'm', ...body } });
      assert.strictEqual(r.status, 400);
      assert.strictEqual(r.json.error.param, 'prompt_logprobs');
      assert.match(r.json.error.message, what);
    }
  } finally {
    await srv.stop();
  }
});
