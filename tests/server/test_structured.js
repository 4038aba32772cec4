// test_structured.js — structured output through the official clients on the random-weight
// model: response_format json_schema / json_object (chat, streaming and not; completions),
// Anthropic's output_config.format. Every answer that ends ("stop") parses and validates under its
// schema (a validator of the subset below); constrained and unconstrained requests, greedy
// and seeded, give the same answers one by one on a server without MTP as all at once on a
// server with MTP; schemas outside the subset are 400s naming the reason; Anthropic's format
// with tools is served (the document or a call; the chat's: test_format_tools). A schema with pattern, format, minLength and maxLength (TICKET) is
// served and its answers checked with V8's RegExp and the formats' own rules.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const Anthropic = require('@anthropic-ai/sdk').default;
const { start, http, run } = require('./harness');

// The schema subset of include/dsv4_text.h, checked on a parsed value (key order too: the
// properties come in the order declared).
function valid(schema, v, root = schema) {
  if (schema === true) return true;
  if (schema.$ref) return valid(schema.$ref === '#' ? root : root.$defs[schema.$ref.split('/').pop()], v, root);
  if (schema.anyOf) return schema.anyOf.some((s) => valid(s, v, root));
  if (schema.oneOf) return schema.oneOf.filter((s) => valid(s, v, root)).length === 1;  // exactly one
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  if ('const' in schema) return same(schema.const, v);
  if (schema.enum) return schema.enum.some((e) => same(e, v));
  const type = v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v === 'object' ? 'object'
    : typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v;
  const types = [].concat(schema.type || []);
  if (types.length && !types.includes(type) && !(type === 'integer' && types.includes('number'))) return false;
  if (type === 'object' && schema.properties) {
    const names = Object.keys(schema.properties), keys = Object.keys(v);
    let at = -1;
    for (const k of keys) {
      const i = names.indexOf(k);
      if (i <= at) return false;  // unknown, repeated or out of order
      at = i;
      if (!valid(schema.properties[k], v[k], root)) return false;
    }
    return (schema.required || []).every((k) => keys.includes(k));
  }
  if (type === 'object' && schema.additionalProperties !== undefined && schema.additionalProperties !== true)
    return Object.values(v).every((x) => valid(schema.additionalProperties, x, root));
  if (type === 'integer' || type === 'number') {
    if (v < (schema.minimum ?? -Infinity) || v > (schema.maximum ?? Infinity)) return false;
    if (v <= (schema.exclusiveMinimum ?? -Infinity) || v >= (schema.exclusiveMaximum ?? Infinity)) return false;
    if (schema.multipleOf && Math.abs(v / schema.multipleOf - Math.round(v / schema.multipleOf)) > 1e-9) return false;
  }
  if (type === 'string') {
    const n = [...v].length;  // code points
    if (n < (schema.minLength || 0) || n > (schema.maxLength ?? Infinity)) return false;
    if (schema.pattern && !new RegExp(schema.pattern, 'u').test(v)) return false;
    if (schema.format && !FORMATS[schema.format](v)) return false;
  }
  if (type === 'array') {
    if (v.length < (schema.minItems || 0) || v.length > (schema.maxItems ?? Infinity)) return false;
    const pre = schema.prefixItems || [];
    return v.every((x, i) => (i < pre.length ? valid(pre[i], x, root) : valid(schema.items ?? true, x, root)));
  }
  return true;
}

// the formats TICKET uses, from their RFCs (RFC 3339 full-date; an address with a dotted domain)
const FORMATS = {
  date: (s) => {
    const m = /^(\d{4})-(\d\d)-(\d\d)$/.exec(s);
    return !!m && m[2] >= 1 && m[2] <= 12 && m[3] >= 1 && m[3] <= [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][m[2] - 1];
  },
  email: (s) => /^[^@\s"]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$/.test(s),
};

// Finite schemas: a random-weight model completes them in a few dozen tokens.
const ORDER = {
  type: 'object', additionalProperties: false, required: ['size', 'extras'],
  properties: {
    size: { enum: ['small', 'large', 12] },
    hot: { type: ['boolean', 'null'] },
    extras: { type: 'array', items: { $ref: '#/$defs/extra' }, maxItems: 2 },
    note: { const: 'ok' },
  },
  $defs: { extra: { anyOf: [{ enum: ['milk', 'sugar'] }, { type: 'object', properties: { shots: { enum: [1, 2] } },
    required: ['shots'] }] } },
};
const TICKET = {
  type: 'object', additionalProperties: false, required: ['id', 'day', 'tag', 'mail'],
  properties: {
    id: { type: 'string', pattern: '^[A-Z]{2}-\\d{3}$' },
    day: { type: 'string', format: 'date' },
    tag: { type: 'string', minLength: 2, maxLength: 6 },
    mail: { type: 'string', format: 'email', maxLength: 24 },
  },
};
// Pydantic v2's model_json_schema() of
//   class Color(str, Enum): red = 'red'; green = 'green'
//   class Cat(BaseModel): pet_type: Literal['cat']; meows: int = Field(ge=0, le=10)
//   class Dog(BaseModel): pet_type: Literal['dog']; barks: int = Field(gt=0, lt=5)
//   class Order(BaseModel): qty: int = Field(ge=1, le=99); color: Color = Field(description='the color')
//     note: Optional[str] = Field(None, max_length=8); pet: Union[Cat, Dog] = Field(discriminator='pet_type')
// (bounds, an enum $ref with a sibling, an Optional field, a oneOf discriminated union)
const PYD = {
  $defs: {
    Color: { enum: ['red', 'green'], title: 'Color', type: 'string' },
    Cat: { properties: { pet_type: { const: 'cat', enum: ['cat'], title: 'Pet Type', type: 'string' },
      meows: { maximum: 10, minimum: 0, title: 'Meows', type: 'integer' } }, required: ['pet_type', 'meows'], title: 'Cat', type: 'object' },
    Dog: { properties: { pet_type: { const: 'dog', title: 'Pet Type', type: 'string' },
      barks: { exclusiveMaximum: 5, exclusiveMinimum: 0, title: 'Barks', type: 'integer' } }, required: ['pet_type', 'barks'], title: 'Dog', type: 'object' },
  },
  properties: {
    qty: { maximum: 99, minimum: 1, title: 'Qty', type: 'integer' },
    color: { $ref: '#/$defs/Color', description: 'the color' },
    note: { anyOf: [{ maxLength: 8, type: 'string' }, { type: 'null' }], default: null, title: 'Note' },
    pet: { discriminator: { mapping: { cat: '#/$defs/Cat', dog: '#/$defs/Dog' }, propertyName: 'pet_type' },
      oneOf: [{ $ref: '#/$defs/Cat' }, { $ref: '#/$defs/Dog' }], title: 'Pet' },
  },
  required: ['qty', 'color', 'pet'], title: 'Order', type: 'object',
};
const PAIR = { type: 'array', prefixItems: [{ type: 'boolean' }, { enum: ['x', 'y'] }], items: false, minItems: 2 };
const fmt = (schema) => ({ type: 'json_schema', json_schema: { name: 'out', schema, strict: true } });
const WORDS = 'tell me about the weather in paris and what to wear today please'.split(' ');
const say = (i) => [{ role: 'user', content: WORDS.slice(0, 3 + (i % 9)).join(' ') }];

// One request of the mix: {text, finish, n}; kinds cycle through constrained chat (schema,
// JSON mode, streaming), unconstrained chat and constrained completions.
async function ask(client, i) {
  const sampled = i % 2 === 1;
  const base = { model: 'm', max_tokens: i >= 6 && i % 6 <= 1 ? 200 : 96, temperature: sampled ? 0.8 : 0, ...(sampled ? { seed: 50 + i } : {}) };
  const k = i % 6;
  if (k === 5) {
    const r = await client.completions.create({ ...base, prompt: WORDS.slice(0, 4 + i).join(' '), response_format: fmt(PAIR) });
    return { schema: PAIR, text: r.choices[0].text, finish: r.choices[0].finish_reason, n: r.usage.completion_tokens };
  }
  const schema = k === 2 ? { type: 'object' } : k === 4 ? null : k <= 1 && i >= 6 ? TICKET : k === 1 ? PAIR : ORDER;
  const req = { ...base, messages: say(i),
    ...(k === 4 ? {} : { response_format: k === 2 ? { type: 'json_object' } : fmt(schema) }) };
  if (k !== 3) {
    const r = await client.chat.completions.create(req);
    return { schema, text: r.choices[0].message.content, finish: r.choices[0].finish_reason, n: r.usage.completion_tokens };
  }
  const out = { schema, text: '', finish: null, n: null };
  for await (const ch of await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
    if (ch.usage) out.n = ch.usage.completion_tokens;
    const c = ch.choices[0];
    if (!c) continue;
    out.text += c.delta.content || '';
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

run('server_structured', async () => {
  const N = 12;
  // one by one, without MTP
  let srv = await start(['--mtp', 'off', '--max-context', '1024']);
  let client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const solo = [];
  for (let i = 0; i < N; i++) solo.push(await ask(client, i));
  let ended = 0;
  for (const [i, r] of solo.entries()) {
    if (!r.schema) continue;
    assert(r.finish === 'stop' || r.finish === 'length', `request ${i}: finish ${r.finish}`);
    if (r.finish === 'length') continue;  // cut short: a valid beginning, as OpenAI's
    ended++;
    const v = JSON.parse(r.text);
    assert(valid(r.schema, v), `request ${i}: ${r.text} does not validate`);
  }
  console.log(`${ended} constrained answers ended and validate; e.g. ${solo[0].text.trim()} | ${solo[1].text.trim()}`);
  assert(ended >= 6, 'too few constrained answers ended');
  const tickets = solo.filter((r) => r.schema === TICKET && r.finish === 'stop');
  console.log(`TICKET (pattern, format, lengths): ${tickets.map((r) => JSON.stringify(JSON.parse(r.text))).join(' | ')}`);
  assert(tickets.length >= 1, 'no TICKET answer ended');

  // the Pydantic-shaped schema: served, and every answer that ends validates (bounds, the enum,
  // exactly one branch of the union)
  const pyd = [];
  for (let i = 0; i < 4; i++) {
    const r = await client.chat.completions.create({ model: 'm', max_tokens: 200, messages: say(i + 3),
      temperature: i < 2 ? 0 : 0.8, ...(i < 2 ? {} : { seed: 7 + i }), response_format: fmt(PYD) });
    const c = r.choices[0];
    assert(c.finish_reason === 'stop' || c.finish_reason === 'length', c.finish_reason);
    if (c.finish_reason === 'length') continue;
    assert(valid(PYD, JSON.parse(c.message.content)), `${c.message.content} does not validate`);
    pyd.push(JSON.stringify(JSON.parse(c.message.content)));
  }
  console.log(`PYD (ge/le, enum $ref, Optional, oneOf union): ${pyd.join(' | ')}`);
  assert(pyd.length >= 1, 'no PYD answer ended');

  // the schema reaches the model: the template's Response Format section (prompt tokens)
  const plain = await client.chat.completions.create({ model: 'm', max_tokens: 1, messages: say(0) });
  const shown = await client.chat.completions.create({ model: 'm', max_tokens: 1, messages: say(0), response_format: fmt(PAIR) });
  assert(shown.usage.prompt_tokens > plain.usage.prompt_tokens + 20, 'the schema is not in the prompt');

  // refusals
  const bad = async (body, what) => {
    const r = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', messages: say(0), max_tokens: 4, ...body } });
    assert.strictEqual(r.status, 400, r.body);
    assert(r.json.error.message.includes(what), `${r.json.error.message} lacks ${what}`);
  };
  await bad({ response_format: fmt({ type: 'string', pattern: '(?<=a)b' }) }, "'pattern' uses a lookbehind");
  await bad({ response_format: fmt({ type: 'object', properties: { d: { type: 'string', format: 'uri' } } }) },
    '\'format\' "uri" (at #/properties/d)');
  await bad({ response_format: fmt({ type: 'integer', minimum: 5, maximum: 4 }) }, 'leaves no number');
  await bad({ response_format: { type: 'yaml' } }, 'response_format.type');
  await bad({ response_format: { type: 'json_schema', json_schema: { schema: {} } } }, "'name'");
  // a \u0000 escape anywhere in a body is a 400 (cJSON would end the string there: the pattern
  // served as "^a", the prompt cut short); an escaped backslash before u0000 is text, served
  await bad({ response_format: fmt({ type: 'string', pattern: '^a\u0000b$' }) }, '\\u0000 escape');
  await bad({ messages: [{ role: 'user', content: 'tell me\u0000about paris' }] }, '\\u0000 escape');
  const lit = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', max_tokens: 1,
    messages: [{ role: 'user', content: 'the text \\u0000 is six characters' }] } });
  assert.strictEqual(lit.status, 200, lit.body);

  // logit_bias cannot empty a constrained mask: biases are finite (within [-100, 100]) and the
  // constraint bans what it refuses after them, so -100 on every id that can write the value
  // leaves those ids the only ones to draw: the value comes, not an error (chat streamed and
  // not, Anthropic's messages, which take logit_bias too)
  const ban = {};
  for (const text of ['"', 'x', '"x', 'x"', '"x"']) {
    const t = await http(srv.url + '/tokenize', { body: { prompt: text, add_special_tokens: false } });
    assert.strictEqual(t.status, 200, t.body);
    for (const id of t.json.tokens) ban[id] = -100;
  }
  const X = { enum: ['x'] };
  const bx = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', max_tokens: 48, messages: say(1),
    temperature: 0, logit_bias: ban, response_format: fmt(X) } });
  assert.strictEqual(bx.status, 200, bx.body);
  assert.strictEqual(JSON.parse(bx.json.choices[0].message.content), 'x', bx.body);
  let streamed = '';
  for await (const ch of await client.chat.completions.create({ model: 'm', max_tokens: 48, messages: say(1),
    temperature: 0, logit_bias: ban, response_format: fmt(X), stream: true })) streamed += ch.choices[0]?.delta?.content || '';
  assert.strictEqual(JSON.parse(streamed), 'x', streamed);
  const ax = await http(srv.url + '/v1/messages', { body: { model: 'm', max_tokens: 48, messages: say(1), temperature: 0,
    logit_bias: ban, output_config: { format: { type: 'json_schema', schema: X } } } });
  assert.strictEqual(ax.status, 200, ax.body);
  assert.strictEqual(JSON.parse(ax.json.content[0].text), 'x', ax.body);
  // Anthropic's older output_format: served the same; a schema outside the subset a 400 in
  // Anthropic's error shape naming the field
  const of = await http(srv.url + '/v1/messages', { body: { model: 'm', max_tokens: 48, messages: say(1), temperature: 0,
    output_format: { type: 'json_schema', schema: X } } });
  assert.strictEqual(of.status, 200, of.body);
  assert.strictEqual(JSON.parse(of.json.content[0].text), 'x', of.body);
  const ob = await http(srv.url + '/v1/messages', { body: { model: 'm', max_tokens: 8, messages: say(1),
    output_format: { type: 'json_schema', schema: { type: 'string', pattern: '(?=a)' } } } });
  assert.deepStrictEqual([ob.status, ob.json.type, ob.json.error.type], [400, 'error', 'invalid_request_error'], ob.body);
  assert(ob.json.error.message.includes("'output_format'") && ob.json.error.message.includes('lookahead'), ob.body);
  // a null output_config.format is absent (output_format then holds); both given must agree;
  // the schema an object
  const on = await http(srv.url + '/v1/messages', { body: { model: 'm', max_tokens: 48, messages: say(1), temperature: 0,
    output_format: { type: 'json_schema', schema: X }, output_config: { format: null } } });
  assert.strictEqual(on.status, 200, on.body);
  assert.strictEqual(JSON.parse(on.json.content[0].text), 'x', on.body);
  const abad = async (body, what) => {
    const r = await http(srv.url + '/v1/messages', { body: { model: 'm', max_tokens: 8, messages: say(1), ...body } });
    assert.deepStrictEqual([r.status, r.json.type, r.json.error.type], [400, 'error', 'invalid_request_error'], r.body);
    assert(r.json.error.message.includes(what), `${r.json.error.message} lacks ${what}`);
  };
  await abad({ output_format: { type: 'json_schema', schema: X },
    output_config: { format: { type: 'json_schema', schema: { enum: ['y'] } } } }, "'output_format' and 'output_config.format' differ");
  await abad({ output_config: { format: { type: 'json_schema', schema: true } } }, 'output_config.format: must be');
  // JSON output and tools together (tool_choice auto): the answer is the document or a tool
  // call. logit_bias +100 on the document's tokens gives the document (a text block, no
  // call); on the block's opener the call (the strict tool's one value, then the block's end:
  // one call), the format unused. Both are also an answer of the other request's constraint:
  // the union (test_tool_match's test_doc has its rules). A tool the block cannot carry
  // (a '"' in its name) is a 400 naming the tools; a required call takes the tools alone.
  const tok = async (text) => {
    const r = await http(srv.url + '/tokenize', { body: { prompt: text, add_special_tokens: false } });
    assert.strictEqual(r.status, 200, r.body);
    return Object.fromEntries(r.json.tokens.map((id) => [id, 100]));
  };
  const F = [{ name: 'f', strict: true, input_schema: { type: 'object', properties: { a: { enum: ['p'] } },
    required: ['a'], additionalProperties: false } }, { name: 'g', input_schema: { type: 'object' } }];
  const both = (bias, extra = {}) => http(srv.url + '/v1/messages', { body: { model: 'm', max_tokens: 256,
    messages: say(1), temperature: 0, logit_bias: bias, tools: F, tool_choice: { type: 'auto',
      disable_parallel_tool_use: true }, output_format: { type: 'json_schema', schema: X }, ...extra } });
  const doc = await both(await tok('"x"'));
  assert.strictEqual(doc.status, 200, doc.body);
  assert.deepStrictEqual([doc.json.stop_reason, doc.json.content.map((b) => b.type)], ['end_turn', ['text']], doc.body);
  assert.strictEqual(JSON.parse(doc.json.content[0].text), 'x', doc.body);
  const call = await both(await tok('\n\n<\uff5cDSML\uff5ctool_calls>\n<\uff5cDSML\uff5cinvoke name="f">\n'));
  assert.strictEqual(call.status, 200, call.body);
  const uses = call.json.content.filter((b) => b.type === 'tool_use');
  assert.deepStrictEqual([call.json.stop_reason, uses.length, uses[0]?.name, uses[0]?.input], ['tool_use', 1, 'f',
    { a: 'p' }], call.body);
  assert(call.json.content.every((b) => b.type === 'tool_use' || (b.type === 'text' && !b.text.trim())), call.body);
  const counted = await http(srv.url + '/v1/messages/count_tokens', { body: { model: 'm', messages: say(1), tools: F,
    output_format: { type: 'json_schema', schema: X } } });
  assert(counted.status === 200 && counted.json.input_tokens > 0, counted.body);
  await abad({ output_format: { type: 'json_schema', schema: X }, tools: [{ name: 'f"', input_schema: { type: 'object' } }] },
    "'tools'");
  const any = await both(await tok('"x"'), { tool_choice: { type: 'any' } });
  assert.strictEqual(any.status, 200, any.body);
  assert(any.json.stop_reason === 'max_tokens' || any.json.content.some((b) => b.type === 'tool_use'), any.body);
  await srv.stop();

  // all at once, with MTP: the same answers
  srv = await start(['--mtp', 'on', '--max-seqs', '16', '--max-context', '1024']);
  client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const together = await Promise.all(Array.from({ length: N }, (_, i) => ask(client, i)));
  for (let i = 0; i < N; i++) assert.deepStrictEqual(together[i], solo[i], `request ${i} differs batched with MTP`);

  // Anthropic's output_config.format (the SDK turns the older output_format into it)
  const an = new Anthropic({ apiKey: 'x', baseURL: srv.url, maxRetries: 0 });
  let done = 0;
  for (let i = 0; i < 4; i++) {
    const m = await an.messages.create({ model: 'm', max_tokens: 200, temperature: 0, messages: say(i),
      output_config: { format: { type: 'json_schema', schema: ORDER } } });
    assert(m.stop_reason === 'end_turn' || m.stop_reason === 'max_tokens', m.stop_reason);
    if (m.stop_reason === 'max_tokens') continue;
    assert(valid(ORDER, JSON.parse(m.content[0].text)), m.content[0].text);
    done++;
  }
  assert(done > 0, 'no Anthropic answer ended');
  await srv.stop();
});
