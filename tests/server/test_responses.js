// test_responses.js — OpenAI's Responses API (/v1/responses) through the official client
// (openai 4.95.0: client.responses.create, .stream, .retrieve, .del) on the random-weight model,
// tool calls and reasoning on scripted answers:
//  - text, non-streamed and streamed: the same answer and usage as /v1/chat/completions for
//    the same conversation; the typed events in OpenAI's order with sequence_number 0, 1, ...;
//    the client's stream helper accumulates the non-streamed response;
//  - max_output_tokens -> status "incomplete" (reason max_output_tokens);
//  - reasoning.effort -> thinking mode: a reasoning item, then the message; reasoning_tokens;
//  - a forced function call (tool_choice named, a strict tool), streamed and not; its
//    function_call_output sent back by previous_response_id: the stored conversation is
//    rebuilt (input_tokens = the chat's for the same messages) and the prefix cache restores
//    its KV (cached_tokens > 0);
//  - text.format json_schema: the output parses and follows the schema;
//  - GET / DELETE /v1/responses/{id}, store false, an evicted or unknown id: 404 in
//    OpenAI's error shape; bad requests: 400 naming the field (in the Responses API's terms,
//    also where the chat path found the error);
//  - GET /v1/responses/{id}/input_items: OpenAI's list object, order, limit, after / before,
//    the client's auto-pagination;
//  - a request the engine fails mid-answer (the test script's error): the stream closes each
//    open item (incomplete) and ends with response.failed; the non-streamed answer is the
//    same failed response; it is stored;
//  - truncation: disabled -> 400 context_length_exceeded; auto drops the fewest oldest items;
//  - the store's per-entry cap: a response over an eighth of the store is not kept (its
//    store false), the others stay;
//  - include message.output_text.logprobs: the chat's logprobs, streamed and not;
//  - POST /v1/responses/input_tokens: create's prompt counted; include
//    reasoning.encrypted_content: a sealed reasoning sent back is the reasoning; OpenAI's
//    fields accepted and ignored (echoed), or refused (a 400 naming them, as every 400 does);
//  - background: the POST answers queued, GET polls it to the foreground's answer; cancel
//    mid-run (the sequence freed), and the cancel rules; a background stream replayed whole
//    and after event N, resumed live after its client left; a log past its entry's share
//    keeps its newest events (a resume below them a 400) while its stream gets every one; the
//    background stream's created, queued, in_progress; a shutdown with background work running.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, http, metrics, run } = require('./harness');
const { SYS } = require('./common');

const D = '｜DSML｜';
const P = (name, str, v) => `<${D}parameter name="${name}" string="${str}">${v}</${D}parameter>`;
const SCRIPT = [
  { match: 'WEATHER_RESULT_42', text: 'It is sunny in Paris.' },
  // after the forced `...<invoke name="get_weather">\n` of a named choice
  { match: 'NAMED_CALL', text: `${P('city', 'true', 'Paris')}\n${P('days', 'false', '3')}\n</${D}invoke>\n</${D}tool_calls>` },
  { match: 'THINK_TEST', text: 'I should greet.</think>Hello there!' },
  { match: 'ALL_ITEMS', text: `Check it.</think>Let me check.\n\n<${D}tool_calls>\n<${D}invoke name="get_weather">\n` +
    `${P('city', 'true', 'Paris')}\n${P('days', 'false', '3')}\n</${D}invoke>\n</${D}tool_calls>` },
  // (both calls valid under the strict tool: its arguments are constrained, script or not)
  { match: 'TWO_CALLS', text: `<${D}tool_calls>\n<${D}invoke name="get_weather">\n${P('city', 'true', 'Paris')}\n` +
    `${P('days', 'false', '1')}\n</${D}invoke>\n<${D}invoke name="get_weather">\n${P('city', 'true', 'Rome')}\n` +
    `${P('days', 'false', '2')}\n</${D}invoke>\n</${D}tool_calls>` },
  // a block that never closes
  { match: 'MALFORMED', text: `Hmm.\n\n<${D}tool_calls>\n<${D}invoke name="get_weather">\n<${D}parameter name="city" string="true">Par` },
  // the engine fails the request after the text: in a message, in the reasoning, in a call
  { match: 'FAIL_TEXT', text: 'Partial answer', error: 'injected failure' },
  { match: 'FAIL_EMPTY', text: '', error: 'injected failure' },
  // an empty answer: EOS at once
  { match: 'EMPTY_ANSWER', text: '' },
  // (its last byte could begin "</think>": the split holds it back until the end)
  { match: 'FAIL_THINK', text: 'Half a thought <', error: 'injected failure' },
  { match: 'FAIL_CALL', text: `Calling.\n\n<${D}tool_calls>\n<${D}invoke name="get_weather">\n${P('city', 'true', 'Paris')}\n` +
    `<${D}parameter name="days" string="false">`, error: 'injected failure' },
];
const WEATHER = { type: 'function', name: 'get_weather', description: 'Weather forecast for a city', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } },
    required: ['city', 'days'], additionalProperties: false } };
const TEXT_EVENTS = ['response.created', 'response.in_progress', 'response.output_item.added',
  'response.content_part.added', 'response.output_text.delta', 'response.output_text.done',
  'response.content_part.done', 'response.output_item.done'];

// SSE text -> [{event, data}]
const parseSse = (t) => t.split('\n\n').filter((b) => b).map((b) => ({ event: /^event: (.*)$/m.exec(b)[1],
  data: JSON.parse(/^data: (.*)$/m.exec(b)[1]) }));
async function sse(url, body) {
  const res = await fetch(url, body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, events: res.status === 200 ? parseSse(text) : [], json: res.status === 200 ? null : JSON.parse(text) };
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// GET id until its status leaves queued / in_progress (bounded: a hang fails, not a slow run)
async function poll(url, id, seen = []) {
  for (let i = 0; i < 4000; i++) {
    const g = await http(`${url}/v1/responses/${id}`, { method: 'GET' });
    assert.strictEqual(g.status, 200, g.body);
    seen.push(g.json.status);
    if (g.json.status !== 'queued' && g.json.status !== 'in_progress') return g.json;
    await sleep(5);
  }
  assert.fail(`${id} still running`);
}

// event types with runs of deltas collapsed to one
const squeeze = (types) => types.filter((t, i) => !(t.endsWith('.delta') && types[i - 1] === t));

async function events(client, req) {
  const out = [];
  for await (const e of await client.responses.create({ ...req, stream: true })) out.push(e);
  out.forEach((e, i) => assert.strictEqual(e.sequence_number, i, `event ${i} (${e.type}): sequence_number`));
  return out;
}

run('server_responses', async () => {
  const srv = await start(['--max-context', '1024', '--mtp', 'off', '--responses-store-bytes', '64K'], { script: SCRIPT });
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const model = 'm';

  // text: the chat endpoint's answer and usage for the same conversation
  const req = { model, instructions: 'Be brief.', input: 'Name a colour.', temperature: 0, max_output_tokens: 6 };
  const r = await client.responses.create(req);
  const chat = await client.chat.completions.create({ model, temperature: 0, max_tokens: 6,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Name a colour.' }] });
  assert.match(r.id, /^resp_[0-9a-f]{16}\d+$/);
  assert.strictEqual(r.object, 'response');
  assert.strictEqual(r.output_text, chat.choices[0].message.content);
  assert.deepStrictEqual(r.usage, { input_tokens: chat.usage.prompt_tokens, input_tokens_details: { cached_tokens: 0 },
    output_tokens: chat.usage.completion_tokens, output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: chat.usage.total_tokens });
  assert.strictEqual(r.status, chat.choices[0].finish_reason === 'length' ? 'incomplete' : 'completed');
  assert.strictEqual(r.instructions, 'Be brief.');

  // streamed: OpenAI's event order; the helper's final response is the non-streamed one
  const ev = await events(client, req);
  const last = ev[ev.length - 1];
  assert.deepStrictEqual(squeeze(ev.map((e) => e.type)), [...TEXT_EVENTS, `response.${r.status}`]);
  assert.strictEqual(ev.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join(''), r.output_text);
  const strip = (x) => ({ ...x, id: 0, created_at: 0, output: x.output.map((o) => ({ ...o, id: 0, ...(o.call_id && { call_id: 0 }) })) });
  const { output_text: _, ...plain } = r;  // the client's convenience field
  assert.deepStrictEqual(strip(last.response), strip(plain));
  const helper = await client.responses.stream(req).finalResponse();
  assert.strictEqual(helper.output[0].content[0].text, r.output_text);

  // include message.output_text.logprobs: the chat endpoint's logprobs for the same prompt and
  // seed, in the output_text part and (without bytes) on the streamed deltas, whose
  // concatenation is the part's; output_text.done repeats them
  const lpReq = { model, input: 'Name a colour.', temperature: 0.9, seed: 11, max_output_tokens: 8,
    include: ['message.output_text.logprobs'], top_logprobs: 3 };
  const lpChat = (await client.chat.completions.create({ model, messages: [{ role: 'user', content: lpReq.input }],
    temperature: 0.9, seed: 11, max_tokens: 8, logprobs: true, top_logprobs: 3 })).choices[0].logprobs.content;
  const lr = await client.responses.create(lpReq);
  assert.strictEqual(lr.top_logprobs, 3);
  assert.strictEqual(lpChat.length, lr.usage.output_tokens);
  assert.strictEqual(lpChat[0].top_logprobs.length, 3);
  assert.deepStrictEqual(lr.output[0].content[0].logprobs, lpChat);
  const noBytes = (l) => l.map(({ bytes, ...x }) => ({ ...x, top_logprobs: x.top_logprobs.map(({ bytes: b, ...t }) => t) }));
  const lev = await events(client, lpReq);
  assert.deepStrictEqual(lev.filter((e) => e.type === 'response.output_text.delta').flatMap((e) => e.logprobs), noBytes(lpChat));
  assert.deepStrictEqual(lev.find((e) => e.type === 'response.output_text.done').logprobs, noBytes(lpChat));
  assert.deepStrictEqual(lev[lev.length - 1].response.output[0].content[0].logprobs, lpChat);
  // (without the include: none, as OpenAI's)
  assert.deepStrictEqual((await client.responses.create({ ...lpReq, include: undefined })).output[0].content[0].logprobs, []);
  // thinking mode: the message's tokens only (the chat's after the reasoning's)
  const lpThink = { model, input: 'Hi THINK_TEST', reasoning: { effort: 'high' }, include: ['message.output_text.logprobs'] };
  const lt = (await client.responses.create(lpThink)).output[1].content[0].logprobs;
  const ltChat = (await client.chat.completions.create({ model, messages: [{ role: 'user', content: lpThink.input }],
    reasoning_effort: 'high', logprobs: true })).choices[0].logprobs.content;
  assert.deepStrictEqual(lt.map((x) => x.token), ltChat.slice(ltChat.length - lt.length).map((x) => x.token));
  assert.strictEqual(lt.map((x) => x.token).join('').replace(/<｜end▁of▁sentence｜>$/, ''), 'Hello there!');
  const ltev = await events(client, lpThink);
  assert.deepStrictEqual(ltev.filter((e) => e.type === 'response.output_text.delta').flatMap((e) => e.logprobs), noBytes(lt));

  // a message of two input_text parts: the chat's parts rule (joined by "\n\n")
  const parts = await client.responses.create({ model, max_output_tokens: 1, input: [{ role: 'user',
    content: [{ type: 'input_text', text: 'Name' }, { type: 'input_text', text: 'a colour.' }] }] });
  const partsChat = await client.chat.completions.create({ model, max_tokens: 1,
    messages: [{ role: 'user', content: 'Name\n\na colour.' }] });
  assert.strictEqual(parts.usage.input_tokens, partsChat.usage.prompt_tokens);

  // max_output_tokens -> incomplete
  const inc = await client.responses.create({ ...req, max_output_tokens: 1, instructions: undefined });
  assert.strictEqual(inc.status, 'incomplete');
  assert.deepStrictEqual(inc.incomplete_details, { reason: 'max_output_tokens' });
  assert.strictEqual(inc.output[0].status, 'incomplete');
  assert.strictEqual(inc.usage.output_tokens, 1);

  // reasoning.effort: thinking mode, a reasoning item before the message
  const th = await client.responses.create({ model, input: 'Hi THINK_TEST', reasoning: { effort: 'high' } });
  assert.deepStrictEqual(th.output.map((o) => o.type), ['reasoning', 'message']);
  assert.strictEqual(th.output[0].content[0].text, 'I should greet.');
  assert.strictEqual(th.output_text, 'Hello there!');
  const rt = th.usage.output_tokens_details.reasoning_tokens;
  assert(rt > 0 && rt < th.usage.output_tokens, `reasoning_tokens ${rt} of ${th.usage.output_tokens}`);
  const thev = await events(client, { model, input: 'Hi THINK_TEST', reasoning: { effort: 'high' } });
  assert.deepStrictEqual(squeeze(thev.map((e) => e.type)).slice(2, 6), ['response.output_item.added',
    'response.reasoning_text.delta', 'response.reasoning_text.done', 'response.output_item.done']);

  // a forced function call; its output sent back through previous_response_id
  const call = { model, instructions: SYS, input: 'Weather in Paris? NAMED_CALL', tools: [WEATHER],
    tool_choice: { type: 'function', name: 'get_weather' }, temperature: 0 };
  const fc = await client.responses.create(call);
  assert.strictEqual(fc.status, 'completed');
  const item = fc.output.find((o) => o.type === 'function_call');
  assert.strictEqual(item.name, 'get_weather');
  assert.match(item.call_id, /^call_resp_/);
  const args = JSON.parse(item.arguments);
  assert.deepStrictEqual(Object.keys(args), WEATHER.parameters.required);
  assert.strictEqual(typeof args.city, 'string');
  assert(Number.isInteger(args.days));
  const fcev = await events(client, call);
  const types = squeeze(fcev.map((e) => e.type));
  assert.deepStrictEqual(types.slice(-5), ['response.output_item.added', 'response.function_call_arguments.delta',
    'response.function_call_arguments.done', 'response.output_item.done', 'response.completed']);
  assert.strictEqual(fcev.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join(''),
    item.arguments);
  const fin = await client.responses.stream(call).finalResponse();
  assert.strictEqual(fin.output.find((o) => o.type === 'function_call').arguments, item.arguments);

  const back = await client.responses.create({ model, previous_response_id: fc.id, tools: [WEATHER], temperature: 0,
    instructions: SYS, input: [{ type: 'function_call_output', call_id: item.call_id, output: 'WEATHER_RESULT_42: sunny' }] });
  assert.strictEqual(back.output_text, 'It is sunny in Paris.');
  assert(back.usage.input_tokens_details.cached_tokens > 0, 'the follow-up restored no prefix');
  const msgs = [{ role: 'system', content: SYS }, { role: 'user', content: call.input },
    { role: 'assistant', content: fc.output_text, tool_calls: [{ id: item.call_id, type: 'function',
      function: { name: item.name, arguments: item.arguments } }] },
    { role: 'tool', tool_call_id: item.call_id, content: 'WEATHER_RESULT_42: sunny' }];
  const chat2 = await client.chat.completions.create({ model, messages: msgs, max_tokens: 1, temperature: 0,
    tools: [{ type: 'function', function: { ...WEATHER, type: undefined } }] });
  assert.strictEqual(back.usage.input_tokens, chat2.usage.prompt_tokens, 'the stored conversation was not rebuilt');

  // reasoning, a message and a call in one answer: the stream's items in order; the
  // follow-up rebuilds that turn as one assistant message (reasoning kept: tools are present)
  const all = { model, input: 'Weather? ALL_ITEMS', tools: [WEATHER], reasoning: { effort: 'high' }, temperature: 0 };
  const ai = await client.responses.create(all);
  assert.deepStrictEqual(ai.output.map((o) => o.type), ['reasoning', 'message', 'function_call']);
  const aiev = await events(client, all);
  const item3 = ['response.output_item.added', 'response.output_item.done'];
  assert.deepStrictEqual(squeeze(aiev.map((e) => e.type)), ['response.created', 'response.in_progress',
    item3[0], 'response.reasoning_text.delta', 'response.reasoning_text.done', item3[1],
    ...TEXT_EVENTS.slice(2), item3[0], 'response.function_call_arguments.delta',
    'response.function_call_arguments.done', item3[1], 'response.completed']);
  assert.deepStrictEqual(strip(aiev[aiev.length - 1].response).output, strip(ai).output);
  const aiCall = ai.output[2];
  const aiBack = await client.responses.create({ model, previous_response_id: ai.id, tools: [WEATHER],
    reasoning: { effort: 'high' }, max_output_tokens: 1,
    input: [{ type: 'function_call_output', call_id: aiCall.call_id, output: 'rain' }] });
  const aiChat = await client.chat.completions.create({ model, max_tokens: 1, reasoning_effort: 'high',
    tools: [{ type: 'function', function: { ...WEATHER, type: undefined } }],
    messages: [{ role: 'user', content: all.input }, { role: 'assistant', content: 'Let me check.',
      reasoning_content: 'Check it.', tool_calls: [{ id: aiCall.call_id, type: 'function',
        function: { name: 'get_weather', arguments: aiCall.arguments } }] },
    { role: 'tool', tool_call_id: aiCall.call_id, content: 'rain' }] });
  assert.strictEqual(aiBack.usage.input_tokens, aiChat.usage.prompt_tokens, 'the turn was not rebuilt as one message');
  // POST /v1/responses/input_tokens: the prompt create renders (previous_response_id's items,
  // tools, reasoning), counted without generating
  const itUrl = `${srv.url}/v1/responses/input_tokens`;
  const it = await http(itUrl, { body: { model, previous_response_id: ai.id, tools: [WEATHER], reasoning: { effort: 'high' },
    input: [{ type: 'function_call_output', call_id: aiCall.call_id, output: 'rain' }] } });
  assert.deepStrictEqual([it.status, it.json], [200, { object: 'response.input_tokens', input_tokens: aiBack.usage.input_tokens }]);
  for (const [body, param] of [[{ model, input: 7 }, 'input'], [{ model, input: 'x', conversation: 'c' }, 'conversation'],
    [{ model, input: 'x', previous_response_id: 'resp_nope' }, 'previous_response_id']]) {
    const b = await http(itUrl, { body });
    assert.deepStrictEqual([b.status, b.json.error.param], [400, param], b.body);
  }
  // stateless turns (store false): include reasoning.encrypted_content seals each reasoning
  // item's text; an item sent back with only that carries the reasoning into the next turn
  // as its content does; one another server sealed is a 400 naming it
  const sealedAns = await client.responses.create({ ...all, store: false, include: ['reasoning.encrypted_content'] });
  const [srs, smsg, scall] = sealedAns.output;
  assert.match(srs.encrypted_content, /^dsv4-reasoning-v1:[A-Za-z0-9+/]+=*$/);
  assert(!srs.encrypted_content.includes(srs.content[0].text));
  assert.strictEqual(ai.output[0].encrypted_content, undefined);
  const turn = (rs) => ({ model, tools: [WEATHER], reasoning: { effort: 'high' }, input: [{ role: 'user', content: all.input },
    rs, smsg, scall, { type: 'function_call_output', call_id: scall.call_id, output: 'rain' }] });
  const counts = [];
  for (const rs of [srs, { type: 'reasoning', summary: [], encrypted_content: srs.encrypted_content },
    { type: 'reasoning', summary: [] }]) counts.push((await http(itUrl, { body: turn(rs) })).json.input_tokens);
  assert(counts[0] === counts[1] && counts[2] < counts[0], counts.join());
  const foreign = await http(itUrl, { body: turn({ type: 'reasoning', summary: [], encrypted_content: 'gAAAAABoZ' }) });
  assert.deepStrictEqual([foreign.status, foreign.json.error.param], [400, 'input[1].encrypted_content'], foreign.body);

  // a malformed block (never closes): no function call, streamed or not (a client would run
  // it); its raw text a message of its own after the content, in both (a tool that opts out
  // of strict: without `strict` a Responses tool is strict, and its block always closes)
  const mal = { model, input: 'MALFORMED', tools: [{ type: 'function', name: 'get_weather', strict: false }] };
  const mr = await client.responses.create(mal);
  const raw = SCRIPT.find((x) => x.match === 'MALFORMED').text.slice('Hmm.\n\n'.length);
  assert.deepStrictEqual(mr.output.map((o) => [o.type, o.content[0].text]), [['message', 'Hmm.'], ['message', raw]]);
  const mev = await events(client, mal);
  const fcDone = (evs) => evs.filter((e) => e.type === 'response.output_item.done' && e.item.type === 'function_call');
  assert.deepStrictEqual(fcDone(mev), []);
  assert.deepStrictEqual(strip(mev[mev.length - 1].response).output, strip(mr).output);
  assert.deepStrictEqual(mev.filter((e) => e.type === 'response.output_item.done').map((e) => e.output_index), [0, 1]);

  // two calls: each its own output_index and call_id, streamed as not; parallel_tool_calls
  // false keeps the first only
  const two = { model, input: 'TWO_CALLS', tools: [WEATHER] };
  const tr = await client.responses.create(two);
  const cities = (o) => o.filter((x) => x.type === 'function_call').map((x) => JSON.parse(x.arguments).city);
  assert.deepStrictEqual(cities(tr.output), ['Paris', 'Rome']);
  assert.notStrictEqual(tr.output[0].call_id, tr.output[1].call_id);
  const tev = await events(client, two);
  assert.deepStrictEqual(fcDone(tev).map((e) => [e.output_index, e.item.call_id.split('_').pop()]), [[0, '0'], [1, '1']]);
  assert.deepStrictEqual(strip(tev[tev.length - 1].response).output, strip(tr).output);
  // (a tool that is not strict: a strict one would not let the script write a second call)
  const one = { ...two, tools: [{ ...WEATHER, strict: false }], parallel_tool_calls: false };
  assert.deepStrictEqual(cities((await client.responses.create(one)).output), ['Paris']);
  const oev = await events(client, one);
  assert.deepStrictEqual(cities(oev[oev.length - 1].response.output), ['Paris']);
  assert.strictEqual(oev.filter((e) => e.type === 'response.output_item.added').length, 1);

  // text.format json_schema
  const schema = { type: 'object', properties: { ok: { type: 'boolean' }, level: { enum: ['low', 'high'] } },
    required: ['ok', 'level'], additionalProperties: false };
  const js = await client.responses.create({ model, input: 'Rate it.', max_output_tokens: 64, temperature: 0,
    text: { format: { type: 'json_schema', name: 'rating', schema, strict: true } } });
  assert.strictEqual(js.status, 'completed');
  const v = JSON.parse(js.output_text);
  assert.deepStrictEqual(Object.keys(v), ['ok', 'level']);
  assert(typeof v.ok === 'boolean' && ['low', 'high'].includes(v.level), js.output_text);

  // input_items: the items back was made from (fc's input and output, then its own input)
  const listed = await http(`${srv.url}/v1/responses/${back.id}/input_items?order=asc&limit=100`, { method: 'GET' });
  assert.strictEqual(listed.status, 200, listed.body);
  const items = listed.json.data;
  assert.deepStrictEqual(items.map((x) => x.type), ['message', ...fc.output.map((o) => o.type), 'function_call_output']);
  assert.deepStrictEqual(items[0], { type: 'message', role: 'user', content: [{ type: 'input_text', text: call.input }],
    id: items[0].id, status: 'completed' });
  assert.match(items[0].id, /^msg_/);
  assert.deepStrictEqual(items.slice(1, -1), fc.output);
  assert.deepStrictEqual([items[items.length - 1].call_id, items[items.length - 1].output], [item.call_id, 'WEATHER_RESULT_42: sunny']);
  assert.match(items[items.length - 1].id, /^fco_/);
  assert.deepStrictEqual([listed.json.object, listed.json.first_id, listed.json.last_id, listed.json.has_more],
    ['list', items[0].id, items[items.length - 1].id, false]);
  const ids = items.map((x) => x.id);
  // desc by default; a page of limit; after / before an id of that order
  const page = async (q) => (await http(`${srv.url}/v1/responses/${back.id}/input_items${q}`, { method: 'GET' })).json;
  const pg = (l) => [l.data.map((x) => x.id), l.first_id, l.last_id, l.has_more];
  assert.deepStrictEqual(pg(await page('')), [[...ids].reverse(), ids[ids.length - 1], ids[0], false]);
  assert.deepStrictEqual(pg(await page('?limit=1')), [[ids[ids.length - 1]], ids[ids.length - 1], ids[ids.length - 1], true]);
  assert.deepStrictEqual(pg(await page(`?order=asc&after=${ids[0]}&limit=1`)), [[ids[1]], ids[1], ids[1], true]);
  assert.deepStrictEqual(pg(await page(`?order=asc&before=${ids[ids.length - 1]}&limit=1`)),
    [[ids[ids.length - 2]], ids[ids.length - 2], ids[ids.length - 2], true]);
  assert.deepStrictEqual(pg(await page(`?order=desc&after=${ids[1]}`)), [[ids[0]], ids[0], ids[0], false]);
  assert.deepStrictEqual(pg(await page(`?after=${ids[0]}`)), [[], null, null, false]);
  // the client walks the pages (after = the last id of each)
  const walked = [];
  for await (const x of client.responses.inputItems.list(back.id, { order: 'asc', limit: 1 })) walked.push(x.id);
  assert.deepStrictEqual(walked, ids);
  for (const [q, param] of [['?limit=0', 'limit'], ['?limit=101', 'limit'], ['?limit=2x', 'limit'], ['?limit=+5', 'limit'],
    ['?limit=%205', 'limit'],
    ['?order=up', 'order'], ['?after=msg_nope', 'after'], ['?before=msg_nope', 'before']]) {
    const b = await http(`${srv.url}/v1/responses/${back.id}/input_items${q}`, { method: 'GET' });
    assert.deepStrictEqual([b.status, b.json.error.type, b.json.error.param], [400, 'invalid_request_error', param], q);
  }
  const nf = await http(`${srv.url}/v1/responses/resp_nope/input_items`, { method: 'GET' });
  assert.deepStrictEqual([nf.status, nf.json.error.type], [404, 'invalid_request_error']);

  // the engine fails the request mid-answer: the stream closes the open item (incomplete)
  // and ends with response.failed; the non-streamed answer is the same failed response,
  // stored
  const failed = { code: 'server_error', message: 'injected failure' };
  const stripFail = (x) => ({ ...strip(x), error: x.error, usage: x.usage, status: x.status });
  const expectFail = async (req, types, output) => {
    const nr = await http(`${srv.url}/v1/responses`, { body: req });
    assert.strictEqual(nr.status, 200, nr.body);
    assert.deepStrictEqual([nr.json.status, nr.json.error], ['failed', failed]);
    assert(nr.json.usage.input_tokens > 0 && nr.json.usage.output_tokens === nr.json.usage.total_tokens - nr.json.usage.input_tokens);
    assert.deepStrictEqual(nr.json.output.map((o) => [o.type, o.status, (o.content || [{}])[0].text]), output);
    const fev = await events(client, req);
    assert.deepStrictEqual(squeeze(fev.map((e) => e.type)), types);
    assert.deepStrictEqual(stripFail(fev[fev.length - 1].response), stripFail(nr.json));
    // every item added is done, at its index
    const idx = (t) => fev.filter((e) => e.type === t).map((e) => e.output_index);
    assert.deepStrictEqual(idx('response.output_item.done'), idx('response.output_item.added'));
    const got = await client.responses.retrieve(nr.json.id);
    assert.deepStrictEqual([got.status, got.error], ['failed', failed]);
    return fev;
  };
  await expectFail({ model, input: 'FAIL_TEXT' }, [...TEXT_EVENTS, 'response.failed'],
    [['message', 'incomplete', 'Partial answer']]);
  await expectFail({ model, input: 'FAIL_THINK', reasoning: { effort: 'high' } }, ['response.created',
    'response.in_progress', 'response.output_item.added', 'response.reasoning_text.delta',
    'response.reasoning_text.done', 'response.output_item.done', 'response.failed'],
  [['reasoning', undefined, 'Half a thought <']]);
  const empty = await http(`${srv.url}/v1/responses`, { body: { model, input: 'FAIL_EMPTY' } });
  assert.deepStrictEqual([empty.json.status, empty.json.error, empty.json.output], ['failed', failed, []]);
  // an empty script (FAIL_EMPTY, EMPTY_ANSWER) is a script too: its row is never drawn.
  // (store false: the store's eviction order below is counted without these)
  // An empty text once left the request sampling freely, so FAIL_EMPTY's step drew a token
  // nobody saw and the failure flushed its held-back bytes: on this model these seeds draw
  // a partial UTF-8 sequence (~1.1 % of the vocabulary; the session 48 flake, '\ufffd' in a
  // message item where [] was due)
  for (const seed of [47, 162, 230, 277]) {
    const e = await http(`${srv.url}/v1/responses`, { body: { model, input: 'FAIL_EMPTY', seed, store: false } });
    assert.deepStrictEqual([e.json.status, e.json.output], ['failed', []], `seed ${seed}`);
  }
  const emptyEv = await events(client, { model, input: 'FAIL_EMPTY', seed: 47, store: false });
  assert.deepStrictEqual(emptyEv.map((e) => e.type), ['response.created', 'response.in_progress', 'response.failed']);
  // the other endpoints' failures send no text either (chat and completions: data frames
  // only, no event names)
  const frames = (path, body) => fetch(`${srv.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body) }).then((x) => x.text()).then((t) => t.split('\n\n').filter((b) => b)
    .map((b) => b.replace(/^data: /, '')).map((d) => (d === '[DONE]' ? d : JSON.parse(d))));
  const chatFail = await frames('/v1/chat/completions', { model, stream: true, seed: 47,
    messages: [{ role: 'user', content: 'FAIL_EMPTY' }] });
  assert.deepStrictEqual(chatFail.map((d) => (d.choices ? d.choices[0].delta.content : d.error ? d.error.message : d)),
    ['', 'injected failure', '[DONE]']);
  const cmplFail = await frames('/v1/completions', { model, stream: true, seed: 47, prompt: 'FAIL_EMPTY' });
  assert.deepStrictEqual(cmplFail.map((d) => (d.error ? d.error.message : d)), ['injected failure', '[DONE]']);
  const msgFail = await sse(`${srv.url}/v1/messages`, { model, stream: true, seed: 47, max_tokens: 8,
    messages: [{ role: 'user', content: 'FAIL_EMPTY' }] });
  assert.deepStrictEqual(msgFail.events.map((e) => e.event), ['message_start', 'error']);
  // an empty answer: no token sampled but the EOS (it sampled freely)
  const ea = await client.responses.create({ model, input: 'EMPTY_ANSWER', max_output_tokens: 8, store: false });
  assert.deepStrictEqual([ea.status, ea.output_text, ea.usage.output_tokens], ['completed', '', 1]);
  const ec = await client.chat.completions.create({ model, max_tokens: 8, messages: [{ role: 'user', content: 'EMPTY_ANSWER' }] });
  assert.deepStrictEqual([ec.choices[0].message.content, ec.choices[0].finish_reason, ec.usage.completion_tokens],
    ['', 'stop', 1]);
  // in a call's arguments: the call announced closes incomplete with its arguments so far,
  // streamed or not (the same response); sent back, it is a 400 (its arguments are unfinished)
  const fxReq = { model, input: 'FAIL_CALL', tools: [{ ...WEATHER, strict: false }] };
  const fxev = await events(client, fxReq);
  const fxTypes = squeeze(fxev.map((e) => e.type));
  assert.deepStrictEqual(fxTypes.slice(-5), ['response.output_item.added', 'response.function_call_arguments.delta',
    'response.function_call_arguments.done', 'response.output_item.done', 'response.failed']);
  const fxItem = fxev.find((e) => e.type === 'response.output_item.done' && e.item.type === 'function_call').item;
  assert.strictEqual(fxItem.status, 'incomplete');
  assert.strictEqual(fxev.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join(''),
    fxItem.arguments);
  const fxLast = fxev[fxev.length - 1].response;
  assert.deepStrictEqual([fxLast.status, fxLast.error], ['failed', failed]);
  // (the message ended where the block began: completed)
  assert.deepStrictEqual(fxLast.output.map((o) => [o.type, o.status]), [['message', 'completed'], ['function_call', 'incomplete']]);
  const fxr = await http(`${srv.url}/v1/responses`, { body: fxReq });
  assert.deepStrictEqual(stripFail(fxr.json), stripFail(fxLast));
  const fxBack = await http(`${srv.url}/v1/responses`, { body: { model, previous_response_id: fxr.json.id, input: 'go on' } });
  assert.strictEqual(fxBack.status, 400);
  assert.match(fxBack.json.error.message, /^previous_response_id's conversation\[2\]: an incomplete function_call/);

  // truncation: a conversation over the context (1,024): disabled (the default) is a 400
  // with OpenAI's code; auto drops the fewest items from its start: not the developer
  // message; the long function_call, and its output with it (a cut leaves no output first)
  const words = (w, n) => Array(n).fill(w).join(' ');
  const dev = { role: 'developer', content: 'Keep it short.' };
  const fcArgs = JSON.stringify({ city: words('cat', 380) });
  const t1 = await client.responses.create({ model, max_output_tokens: 1, temperature: 0, input: [dev,
    { type: 'function_call', call_id: 'call_t', name: 'get_weather', arguments: fcArgs },
    { type: 'function_call_output', call_id: 'call_t', output: 'sunny' }, { role: 'user', content: 'Go on.' }] });
  const t2 = await client.responses.create({ model, previous_response_id: t1.id, input: words('dog', 380),
    max_output_tokens: 1, temperature: 0 });
  const t3 = { model, previous_response_id: t2.id, input: words('owl', 380), max_output_tokens: 1, temperature: 0 };
  // (auto keeps the last item: one too long alone is a 400 as well)
  for (const [body, truncation] of [[t3, undefined], [t3, 'disabled'], [{ model, input: words('cat', 1100) }, 'auto']]) {
    const b = await http(`${srv.url}/v1/responses`, { body: { ...body, truncation } });
    assert.strictEqual(b.status, 400, b.body);
    assert.deepStrictEqual([b.json.error.code, b.json.error.param, b.json.error.type],
      ['context_length_exceeded', 'input', 'invalid_request_error']);
  }
  const ta = await client.responses.create({ ...t3, truncation: 'auto' });
  assert.strictEqual(ta.truncation, 'auto');
  assert.strictEqual(t1.truncation, 'disabled');
  const kept = [{ role: 'user', content: 'Go on.' }, { role: 'assistant', content: t1.output_text },
    { role: 'user', content: words('dog', 380) }, { role: 'assistant', content: t2.output_text },
    { role: 'user', content: words('owl', 380) }];
  const count = async (messages) => (await http(`${srv.url}/tokenize`, { body: { model, messages } })).json.count;
  assert.strictEqual(ta.usage.input_tokens, await count([dev, ...kept]));
  const call1 = { role: 'assistant', content: '', tool_calls: [{ id: 'call_t', type: 'function',
    function: { name: 'get_weather', arguments: fcArgs } }] };
  assert(await count([dev, call1, { role: 'tool', tool_call_id: 'call_t', content: 'sunny' }, ...kept]) >= 1024,
    'dropped more than needed');
  const taItems = (await http(`${srv.url}/v1/responses/${ta.id}/input_items?order=asc`, { method: 'GET' })).json.data;
  assert.deepStrictEqual(taItems.map((x) => x.role), ['developer', 'user', 'assistant', 'user', 'assistant', 'user']);
  assert.strictEqual(taItems[2].id, t1.output[0].id);
  // a cut keeps no output whose call it drops: [user, call A (long), call B, output A, output B,
  // user] keeps the last user message alone (dropping two items would fit, but split B)
  const fcPair = (id, args) => [{ type: 'function_call', call_id: id, name: 'get_weather', arguments: args },
    { type: 'function_call_output', call_id: id, output: 'ok' }];
  const [callA, outA] = fcPair('call_a', fcArgs), [callB, outB] = fcPair('call_b', '{}');
  const tb = await client.responses.create({ model, max_output_tokens: 1, temperature: 0, truncation: 'auto',
    input: [{ role: 'user', content: 'Q' }, callA, callB, outA, outB, { role: 'user', content: words('owl', 700) }] });
  const tbItems = (await http(`${srv.url}/v1/responses/${tb.id}/input_items`, { method: 'GET' })).json.data;
  assert.deepStrictEqual(tbItems.map((x) => [x.type, x.role]), [['message', 'user']]);

  // the store's per-entry cap (an eighth of 64K): a response this large is not kept, and
  // evicts nothing
  const huge = await client.responses.create({ model, input: 'big', max_output_tokens: 1,
    metadata: Object.fromEntries([...Array(16).keys()].map((i) => [`k${i}`, 'x'.repeat(512)])) });
  assert.strictEqual((await http(`${srv.url}/v1/responses/${huge.id}`, { method: 'GET' })).status, 404, 'kept');
  assert.strictEqual(huge.store, false, 'not kept, but its store says true');
  for (const x of [t1, t2, ta]) assert.strictEqual((await client.responses.retrieve(x.id)).id, x.id);

  // GET, DELETE, store false, unknown ids
  const got = await client.responses.retrieve(fc.id);
  assert.deepStrictEqual(got.output, fc.output);
  assert.deepStrictEqual(got.usage, fc.usage);
  const del = await http(`${srv.url}/v1/responses/${fc.id}`, { method: 'DELETE' });
  assert.deepStrictEqual([del.status, del.json], [200, { id: fc.id, object: 'response', deleted: true }]);
  for (const id of [fc.id, 'resp_nope']) {
    const g = await http(`${srv.url}/v1/responses/${id}`, { method: 'GET' });
    assert.strictEqual(g.status, 404);
    assert.strictEqual(g.json.error.type, 'invalid_request_error');
    assert.match(g.json.error.message, new RegExp(id));
  }
  // an unknown previous_response_id: OpenAI's 400 with its code (proxies look for it)
  const pnf = await http(`${srv.url}/v1/responses`, { body: { model, previous_response_id: fc.id, input: 'again' } });
  assert.strictEqual(pnf.status, 400);
  assert.deepStrictEqual([pnf.json.error.code, pnf.json.error.param, pnf.json.error.type],
    ['previous_response_not_found', 'previous_response_id', 'invalid_request_error']);
  assert.match(pnf.json.error.message, /not found/);
  const ns = await client.responses.create({ ...req, store: false });
  assert.strictEqual((await http(`${srv.url}/v1/responses/${ns.id}`, { method: 'GET' })).status, 404);
  // the store's byte cap (64K): a run of responses evicts the oldest
  let newest;
  // (th, older than back, is read between them: a GET makes it the most recently used)
  for (let i = 0; i < 16; i++) {
    newest = await client.responses.create({ model, input: SYS + SYS + i, max_output_tokens: 1 });
    assert.strictEqual((await client.responses.retrieve(th.id)).id, th.id);
  }
  for (const id of [r.id, back.id])
    assert.strictEqual((await http(`${srv.url}/v1/responses/${id}`, { method: 'GET' })).status, 404, 'not evicted');
  assert.strictEqual((await client.responses.retrieve(newest.id)).id, newest.id);

  // bad requests
  const bad = [
    [{ model, input: [{ type: 'bogus' }] }, /input\[0\]: item type 'bogus'/, 'input[0]'],
    // after a stored conversation: the client's own index
    [{ model, previous_response_id: newest.id, input: [{ type: 'bogus' }] }, /^input\[0\]: item type 'bogus'/, 'input[0]'],
    [{ model, input: [{ type: 'message', role: 'robot', content: 'x' }] }, /role/, 'input[0]'],
    [{ model, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, /input\[0\]\.content\[0\]/,
      'input[0].content[0]'],
    [{ model, input: [{ type: 'function_call', name: 'f' }] }, /call_id/, 'input[0]'],
    [{ model }, /'input'/, 'input'],
    [{ model, input: 7 }, /'input'/, 'input'],
    [{ model, input: 'x', temperature: 'hot' }, /'temperature'/, 'temperature'],
    [{ model, input: 'x', max_output_tokens: 0 }, /'max_output_tokens'/, 'max_output_tokens'],
    [{ model, input: 'x', store: 'yes' }, /'store'/, 'store'],
    [{ model, input: 'x', tools: {} }, /'tools'/, 'tools'],
    [{ model, input: 'x', tools: [{ type: 'web_search' }] }, /tool type 'web_search'/, 'tools[0]'],
    [{ model, input: 'x', tool_choice: { type: 'function' } }, /'tool_choice'/, 'tool_choice'],
    [{ model, input: 'x', text: { format: { type: 'xml' } } }, /'text.format.type'/, 'text.format.type'],
    [{ model, input: 'x', reasoning: { effort: 'extreme' } }, /'reasoning.effort'/, 'reasoning.effort'],
    [{ model, input: 'x', background: true, store: false }, /'background' requires 'store' true/, 'background'],
    [{ model, input: 'x', previous_response_id: 5 }, /'previous_response_id'/, 'previous_response_id'],
    [{ model, input: 'x', metadata: { a: 1 } }, /'metadata'/, 'metadata'],
    [{ model, input: 'x', metadata: Object.fromEntries([...Array(17).keys()].map((i) => [`k${i}`, 'v'])) }, /'metadata'/, 'metadata'],
    [{ model, input: 'x', truncation: 'middle' }, /'truncation'/, 'truncation'],
    [{ model, input: 'x', include: 'message.output_text.logprobs' }, /'include' must be a list/, 'include'],
    [{ model, input: 'x', include: ['message.output_text.logprobs', 'file_search_call.results'] },
      /'include\[1\]': "file_search_call.results" cannot be included/, 'include'],
    [{ model, input: 'x', include: ['bogus'] }, /'include\[0\]': unknown value "bogus"/, 'include'],
    [{ model, input: 'x', top_logprobs: 21 }, /'top_logprobs'/, 'top_logprobs'],
    [{ model, input: 'x', top_logprobs: 1.5 }, /'top_logprobs'/, 'top_logprobs'],
    // OpenAI's fields this server cannot honour, and the ignored ones' types
    [{ model, input: 'x', conversation: 'conv_1' }, /'conversation' is not supported/, 'conversation'],
    [{ model, input: 'x', prompt: { id: 'pmpt_1' } }, /'prompt' is not supported/, 'prompt'],
    [{ model, input: 'x', context_management: [{ type: 'compaction' }] }, /'context_management' is not supported/,
      'context_management'],
    [{ model, input: 'x', moderation: { model: 'omni' } }, /'moderation' is not supported/, 'moderation'],
    [{ model, input: 'x', safety_identifier: 'u'.repeat(65) }, /'safety_identifier'/, 'safety_identifier'],
    [{ model, input: 'x', max_tool_calls: 1.5 }, /'max_tool_calls'/, 'max_tool_calls'],
    [{ model, input: 'x', service_tier: 5 }, /'service_tier'/, 'service_tier'],
    [{ model, input: 'x', stream_options: true }, /'stream_options'/, 'stream_options'],
    // found by the chat path, named in this API's terms
    [{ model, instructions: 'Be brief.', input: [{ role: 'user', content: 'x' }, { role: 'developer', content: '' }] },
      /^input\[1\]: a developer message needs content/, 'input[1]'],
    [{ model, input: 'x', text: { format: { type: 'json_schema', name: 'n', schema: {}, strict: 'yes' } } },
      /^'text\.format\.strict' must be a boolean/, 'text.format.strict'],
    [{ model, input: 'x', text: { format: { type: 'json_schema', name: 'n', schema: { not: {} } } } },
      /^'text\.format\.schema': /, 'text.format.schema'],
    // (text.format's system message goes in front unless the first message is one)
    [{ model, text: { format: { type: 'json_object' } }, input: [{ role: 'user', content: 'x' },
      { role: 'developer', content: '' }, { role: 'user', content: 'y' }] }, /^input\[1\]: a developer message/, 'input[1]'],
    [{ model, text: { format: { type: 'json_object' } }, input: [{ role: 'user', content: 'x' },
      { role: 'user', content: 'y' }, { role: 'developer', content: '' }] }, /^input\[2\]: a developer message/, 'input[2]'],
  ];
  for (const [body, re, param] of bad) {
    const b = await http(`${srv.url}/v1/responses`, { body });
    assert.strictEqual(b.status, 400, JSON.stringify(body) + ' -> ' + b.body);
    assert.match(b.json.error.message, re);
    assert.strictEqual(b.json.error.param, param, b.body);
    assert.strictEqual(b.json.error.type, 'invalid_request_error');
  }

  // OpenAI's fields accepted and not acted on (harmless here), echoed when given
  const extras = { max_tool_calls: 2, prompt_cache_key: 'k1', safety_identifier: 'user-1', service_tier: 'flex',
    prompt_cache_retention: '24h', prompt_cache_options: { mode: 'implicit' }, stream_options: { include_obfuscation: false },
    context_management: [], text: { verbosity: 'low' } };
  const ex = await http(`${srv.url}/v1/responses`, { body: { model, input: 'x', max_output_tokens: 1, ...extras } });
  assert.strictEqual(ex.status, 200, ex.body);
  assert.deepStrictEqual(['max_tool_calls', 'prompt_cache_key', 'safety_identifier', 'service_tier', 'prompt_cache_retention',
    'prompt_cache_options', 'text'].map((k) => ex.json[k]), [2, 'k1', 'user-1', 'default', '24h', { mode: 'implicit' },
    { verbosity: 'low', format: { type: 'text' } }]);

  // a background stream whose events outgrow its entry's share of the store (8K of 64K): the
  // stream following it gets every event; the log keeps only its newest (the oldest trimmed
  // below a watermark), so a resume below it is a 400 naming it, one from it replays exactly
  const capped = await sse(`${srv.url}/v1/responses`, { model, input: 'Tell a story.', max_output_tokens: 60,
    temperature: 0, background: true, stream: true });
  const capId = capped.events[0].data.response.id;
  capped.events.forEach((e, i) => assert.strictEqual(e.data.sequence_number, i, `event ${i} (${e.event})`));
  assert.match(capped.events[capped.events.length - 1].event, /^response\.(completed|incomplete)$/);
  assert.strictEqual(capped.events[capped.events.length - 1].data.response.usage.output_tokens, 60);
  assert(Buffer.byteLength(capped.text) > 8192, `${Buffer.byteLength(capped.text)} bytes: not past the share`);
  const capBelow = await http(`${srv.url}/v1/responses/${capId}?stream=true&starting_after=2`, { method: 'GET' });
  assert.deepStrictEqual([capBelow.status, capBelow.json.error.param], [400, 'starting_after'], capBelow.body);
  const mark = Number(/'starting_after' must be at least (\d+)/.exec(capBelow.json.error.message)[1]);
  assert(mark > 2 && mark < capped.events.length - 1, capBelow.json.error.message);
  const capKept = await sse(`${srv.url}/v1/responses/${capId}?stream=true&starting_after=${mark}`);
  assert.deepStrictEqual(capKept.events, capped.events.slice(mark + 1));
  assert(Buffer.byteLength(capKept.text) <= 8192, `${Buffer.byteLength(capKept.text)} bytes kept`);
  for (const q of [`&starting_after=${mark - 1}`, ''])
    assert.strictEqual((await http(`${srv.url}/v1/responses/${capId}?stream=true${q}`, { method: 'GET' })).status, 400);
  // a first batch of events past the share (created and queued carry 3.5K of metadata each):
  // the trim keeps what the stream has not sent yet (it cannot have read any), it gets them
  const metadata = Object.fromEntries([...Array(7).keys()].map((i) => [`k${i}`, 'x'.repeat(500)]));
  const wide = await sse(`${srv.url}/v1/responses`, { model, input: 'Hi.', metadata, max_output_tokens: 2,
    background: true, stream: true });
  assert.strictEqual(wide.status, 200, JSON.stringify(wide.json));
  assert(Buffer.byteLength(wide.text.slice(0, wide.text.indexOf('event: response.in_progress'))) > 8192);
  assert.deepStrictEqual(wide.events.slice(0, 3).map((e) => e.event), ['response.created', 'response.queued', 'response.in_progress']);
  wide.events.forEach((e, i) => assert.strictEqual(e.data.sequence_number, i, `event ${i} (${e.event})`));
  assert.match(wide.events[wide.events.length - 1].event, /^response\.(completed|incomplete)$/);
  await srv.stop();
  await background();
});

// background mode on a server whose store holds a few hundred tokens' events per response
async function background() {
  // (one sequence at a time: a second request waits queued)
  const srv = await start(['--max-context', '2048', '--mtp', 'off', '--responses-store-bytes', '4M', '--max-seqs', '1']);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const model = 'm';
  const url = `${srv.url}/v1/responses`;

  // poll to completion: the POST answers at once (queued); the end is the foreground's answer
  const req = { model, input: 'Name a colour.', temperature: 0, max_output_tokens: 12 };
  const fg = await client.responses.create(req);
  const q = await http(url, { body: { ...req, background: true } });
  assert.strictEqual(q.status, 200, q.body);
  assert.deepStrictEqual([q.json.status, q.json.background, q.json.output, q.json.usage, q.json.store],
    ['queued', true, [], null, true]);
  assert.strictEqual(fg.background, false);
  const seen = [];
  const done = await poll(srv.url, q.json.id, seen);
  assert.strictEqual(done.status, fg.status);
  assert.deepStrictEqual(done.output.map((o) => o.content[0].text), [fg.output_text]);
  assert.strictEqual(done.usage.output_tokens, fg.usage.output_tokens);
  assert(seen.every((x, i) => i === seen.length - 1 || x === 'queued' || x === 'in_progress'), seen.join());
  // it continues like any stored response
  const next = await client.responses.create({ model, previous_response_id: q.json.id, input: 'Another.', max_output_tokens: 1 });
  assert(next.usage.input_tokens > fg.usage.input_tokens + fg.usage.output_tokens);

  // cancel mid-run: the answer says cancelled; the run ends so (no output), its sequence and
  // cache pages freed (a run that ended before the cancel came is tried again)
  const m0 = await metrics(srv.url);
  let cancelled = null, mid = null, lastRefusal = null;
  for (let tries = 0; tries < 3 && !cancelled; tries++) {
    const c0 = await http(url, { body: { model, input: 'Count to a thousand.', max_output_tokens: 1500, background: true } });
    for (mid = c0.json; mid.status === 'queued'; await sleep(1))
      mid = (await http(`${url}/${c0.json.id}`, { method: 'GET' })).json;
    // (while it runs: not deletable, not a previous_response_id yet)
    const del = await http(`${url}/${c0.json.id}`, { method: 'DELETE' });
    const prev = await http(url, { body: { model, previous_response_id: c0.json.id, input: 'x' } });
    const cz = await http(`${url}/${c0.json.id}/cancel`, { body: {} });
    if (cz.status !== 200) { lastRefusal = cz.body; continue; }
    assert.deepStrictEqual([del.status, del.json.error.message.startsWith('Cannot delete an in-flight response')], [400, true]);
    assert.deepStrictEqual([prev.status, prev.json.error.param], [400, 'previous_response_id']);
    assert.match(prev.json.error.message, /still in progress/);
    assert.deepStrictEqual([cz.json.id, cz.json.status, cz.json.output, cz.json.error], [c0.json.id, 'cancelled', [], null]);
    // (a poll right after: cancelled, whether its end was written yet or not)
    assert.strictEqual((await http(`${url}/${c0.json.id}`, { method: 'GET' })).json.status, 'cancelled');
    cancelled = c0.json.id;
  }
  assert(cancelled, `every try ended before its cancel: ${lastRefusal}`);
  assert.strictEqual(mid.status, 'in_progress');
  const cend = await poll(srv.url, cancelled);
  assert.deepStrictEqual([cend.status, cend.output, cend.error], ['cancelled', [], null]);
  assert(cend.usage.output_tokens < 1500, `ran to ${cend.usage.output_tokens} tokens`);
  let m1;
  for (let i = 0; i < 2000; i++) {
    m1 = await metrics(srv.url);
    if (m1.dsv4_running_sequences === 0) break;
    await sleep(5);
  }
  assert.strictEqual(m1.dsv4_running_sequences, 0);
  assert.strictEqual(m1['dsv4_cache_pages{pool="window",state="used"}'], m0['dsv4_cache_pages{pool="window",state="used"}']);
  // cancelled again: the same; an ended response, a foreground one: OpenAI's 400s; unknown: 404
  const again = await http(`${url}/${cancelled}/cancel`, { body: {} });
  assert.deepStrictEqual([again.status, again.json.status], [200, 'cancelled']);
  for (const [id, re] of [[q.json.id, /^Cannot cancel an? (completed|incomplete) response/], [fg.id, /synchronous/]]) {
    const b = await http(`${url}/${id}/cancel`, { body: {} });
    assert.deepStrictEqual([b.status, b.json.error.type], [400, 'invalid_request_error'], b.body);
    assert.match(b.json.error.message, re);
  }
  assert.strictEqual((await http(`${url}/resp_nope/cancel`, { body: {} })).status, 404);
  assert.strictEqual((await http(`${url}/${fg.id}/cancelx`, { body: {} })).status, 404);

  // a background stream: sequence_numbers 0, 1, ...; GET ?stream=true replays it exactly, and
  // after event N the events after N
  const sreq = { model, input: 'Tell a story.', temperature: 0, max_output_tokens: 20, background: true, stream: true };
  const s1 = await sse(url, sreq);
  s1.events.forEach((e, i) => assert.strictEqual(e.data.sequence_number, i));
  assert.deepStrictEqual(s1.events.slice(0, 3).map((e) => [e.event, e.data.response.status]),
    [['response.created', 'queued'], ['response.queued', 'queued'], ['response.in_progress', 'in_progress']]);
  const last = s1.events[s1.events.length - 1];
  assert.strictEqual(last.data.response.status, fg.status);
  const sid = s1.events[0].data.response.id;
  assert.strictEqual((await sse(`${url}/${sid}?stream=true`)).text, s1.text);
  for (const n of [0, 5, s1.events.length - 2, s1.events.length - 1])
    assert.deepStrictEqual((await sse(`${url}/${sid}?stream=true&starting_after=${n}`)).events, s1.events.slice(n + 1), `after ${n}`);
  // (past the last event of an ended response: a 400, not an empty stream without an end)
  const past = await http(`${url}/${sid}?stream=true&starting_after=${s1.events.length}`, { method: 'GET' });
  assert.deepStrictEqual([past.status, past.json.error.param], [400, 'starting_after'], past.body);
  // a background stream queued behind a running request: created and queued only, as long as a
  // poll says queued (in_progress comes with its first token); cancelled while queued, it
  // ends there: created, queued, failed (cancelled)
  const busy = await http(url, { body: { model, input: 'Count to a thousand.', max_output_tokens: 1500, background: true } });
  for (let st = 'queued'; st === 'queued'; await sleep(1)) st = (await http(`${url}/${busy.json.id}`, { method: 'GET' })).json.status;
  const qres = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...sreq, max_output_tokens: 5 }) });
  const qreader = qres.body.getReader();
  let qtext = '';
  while ((qtext.match(/\n\n/g) || []).length < 2) qtext += Buffer.from((await qreader.read()).value).toString();
  const qid = parseSse(qtext)[0].data.response.id;
  assert.strictEqual((await http(`${url}/${qid}`, { method: 'GET' })).json.status, 'queued');
  assert.strictEqual((await http(`${url}/${qid}/cancel`, { body: {} })).json.status, 'cancelled');
  for (let r; !(r = await qreader.read()).done;) qtext += Buffer.from(r.value).toString();
  assert.deepStrictEqual(parseSse(qtext).map((e) => [e.event, e.data.response.status]),
    [['response.created', 'queued'], ['response.queued', 'queued'], ['response.failed', 'cancelled']]);
  assert.strictEqual((await http(`${url}/${busy.json.id}/cancel`, { body: {} })).json.status, 'cancelled');
  await poll(srv.url, busy.json.id);
  // a stream the client left goes on; resumed after the last event seen, it follows live
  const ac = new AbortController();
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
    body: JSON.stringify({ ...sreq, input: 'Count to a thousand.', max_output_tokens: 150 }) });
  const reader = res.body.getReader();
  let got = '';
  while ((got.match(/\n\n/g) || []).length < 6) got += Buffer.from((await reader.read()).value).toString();
  ac.abort();
  const head = parseSse(got.slice(0, got.lastIndexOf('\n\n') + 2));
  const lid = head[0].data.response.id;
  const rest = await sse(`${url}/${lid}?stream=true&starting_after=${head[head.length - 1].data.sequence_number}`);
  const whole = await sse(`${url}/${lid}?stream=true`);
  assert.deepStrictEqual([...head, ...rest.events], whole.events);
  assert.strictEqual(whole.events[whole.events.length - 1].data.response.usage.output_tokens, 150);
  // a background stream cancelled mid-run: its open items close, then response.failed with
  // the cancelled response (OpenAI's stream has no cancelled event)
  const cres = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...sreq, input: 'Count to a thousand.', max_output_tokens: 1500 }) });
  const creader = cres.body.getReader();
  let ctext = '';
  while (!/response\.output_text\.delta/.test(ctext)) ctext += Buffer.from((await creader.read()).value).toString();
  const cid = parseSse(ctext.slice(0, ctext.indexOf('\n\n') + 2))[0].data.response.id;
  assert.strictEqual((await http(`${url}/${cid}/cancel`, { body: {} })).json.status, 'cancelled');
  for (let r; !(r = await creader.read()).done;) ctext += Buffer.from(r.value).toString();
  const cev = parseSse(ctext);
  cev.forEach((e, i) => assert.strictEqual(e.data.sequence_number, i));
  const clast = cev[cev.length - 1];
  assert.deepStrictEqual([clast.event, clast.data.response.status, clast.data.response.output, clast.data.response.error],
    ['response.failed', 'cancelled', [], null]);
  assert.deepStrictEqual(cev.filter((e) => e.event === 'response.output_item.done').map((e) => e.data.output_index),
    cev.filter((e) => e.event === 'response.output_item.added').map((e) => e.data.output_index));
  assert(clast.data.response.usage.output_tokens < 1500);
  // refusals: not background, not streamed, a bad cursor, unknown
  const nb = await client.responses.create({ ...req, max_output_tokens: 1 });
  for (const [u, status, param] of [[`${url}/${nb.id}?stream=true`, 400, 'stream'],
    [`${url}/${q.json.id}?stream=true`, 400, 'stream'], [`${url}/${sid}?stream=true&starting_after=x`, 400, 'starting_after'],
    [`${url}/${sid}?stream=true&starting_after=-1`, 400, 'starting_after'], [`${url}/resp_nope?stream=true`, 404, null]]) {
    const b = await http(u, { method: 'GET' });
    assert.deepStrictEqual([b.status, b.json.error.param], [status, param], u);
  }

  // shutdown with a background response running and a stream following it: a clean exit
  // (the grace lets it end), the stream's last event its end
  const bgRun = await http(url, { body: { model, input: 'Count to a thousand.', max_output_tokens: 100, background: true } });
  // (its headers in before the stop: a POST still on its way could meet the stop's 503)
  const follow = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...sreq, max_output_tokens: 100 }) });
  for (let st = 'queued'; st === 'queued'; await sleep(1)) st = (await http(`${url}/${bgRun.json.id}`, { method: 'GET' })).json.status;
  await srv.stop();
  assert.strictEqual(follow.status, 200);
  assert.match((await follow.text()).slice(-3000), /event: response\.(completed|incomplete|failed)\n/);
}
