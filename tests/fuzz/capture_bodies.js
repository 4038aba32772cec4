// capture_bodies.js — a node --require hook that writes every request body a server test
// sends ({method, path, body} as JSON, one file each, named by a hash) to $CAPTURE_DIR:
// where make_serve_seeds.py finds the real bodies that seed fuzz_serve.
//   NODE_OPTIONS="--require $PWD/tests/fuzz/capture_bodies.js" CAPTURE_DIR=/tmp/cap \
//     ctest --test-dir build -R '^test_(openai|anthropic|responses|tools|structured|endpoints|choices|intake|abuse)$'
const fs = require('fs'), path = require('path'), http = require('http'), crypto = require('crypto');
const dir = process.env.CAPTURE_DIR;

function dump(method, url, body) {
  if (!dir || body == null) return;
  try {
    const u = new URL(String(url), 'http://x');
    const b = Buffer.isBuffer(body) ? body : Buffer.from(String(body));
    const h = crypto.createHash('sha1').update(u.pathname + '\n').update(b).digest('hex').slice(0, 16);
    fs.writeFileSync(path.join(dir, h), JSON.stringify({ method, path: u.pathname, body: b.toString('latin1') }));
  } catch (e) { /* best effort: the test goes on */ }
}

// the raw requests (harness.js's http) go through fetch
const fetch0 = globalThis.fetch;
if (fetch0) {
  globalThis.fetch = function (url, init = {}) {
    const u = typeof url === 'string' || url instanceof URL ? url : url.url;
    if (typeof init.body === 'string' || Buffer.isBuffer(init.body)) dump(init.method || 'GET', u, init.body);
    return fetch0.apply(this, arguments);
  };
}
// the SDK clients' (node-fetch) through http.ClientRequest
const write0 = http.ClientRequest.prototype.write, end0 = http.ClientRequest.prototype.end;
http.ClientRequest.prototype.write = function (chunk, ...rest) {
  if (chunk != null && typeof chunk !== 'function') (this.capture ||= []).push(Buffer.from(chunk));
  return write0.call(this, chunk, ...rest);
};
http.ClientRequest.prototype.end = function (chunk, ...rest) {
  if (chunk != null && typeof chunk !== 'function') (this.capture ||= []).push(Buffer.from(chunk));
  if (this.capture) dump(this.method, this.path, Buffer.concat(this.capture));
  return end0.call(this, chunk, ...rest);
};
