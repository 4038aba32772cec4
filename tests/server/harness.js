// harness.js — starts a real `dsv4 serve` for the server tests and stops it with SIGTERM.
// Environment (set by CTest): DSV4_BIN (the dsv4 program), DSV4_MODEL (a generated model
// with the real tokenizer). Every test is bounded: a watchdog kills the server and fails.
'use strict';
const { spawn, execFileSync } = require('child_process');
const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');

const BIN = process.env.DSV4_BIN;
const MODEL = process.env.DSV4_MODEL;
assert(BIN && MODEL, 'DSV4_BIN and DSV4_MODEL must be set');

// Servers still running are killed when the test exits, whatever happened.
const children = [];
process.on('exit', () => { for (const p of children) if (p.exitCode === null) p.kill('SIGKILL'); });

// Starts `dsv4 serve --model MODEL --port 0 ...args`; resolves to {url, port, proc, stop}.
// model: another model directory than MODEL.
// mpi: N runs it under `mpirun -np N` (DSV4_MPIEXEC) with --parallel ep; stop() then sends
// SIGTERM to rank 0 (its pid is in the ready line), whose stop message ends the others,
// and expects mpirun to exit 0. dp: data-parallel attention (--attention dp), else home.
function start(args = [], { script, mpi, dp, model } = {}) {
  const extra = [];
  if (script) {
    const f = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-script-')), 'script.json');
    fs.writeFileSync(f, JSON.stringify(script));
    extra.push('--test-script', f);
  }
  let argv = ['serve', '--model', model || MODEL, '--port', '0', '--threads', '1', ...extra, ...args];
  let bin = BIN;
  if (mpi) {
    assert(process.env.DSV4_MPIEXEC, 'DSV4_MPIEXEC must be set for an MPI server');
    bin = process.env.DSV4_MPIEXEC;
    argv = ['--allow-run-as-root', '--oversubscribe', '-np', String(mpi), BIN, ...argv, '--parallel', 'ep',
      '--attention', dp ? 'dp' : 'home'];
  }
  // DSV4_MPI_ASAN_OPTIONS (sanitizer builds): the ranks' ASAN_OPTIONS; one process keeps the
  // test's (full malloc stacks, which LeakSanitizer's Open MPI suppressions need, cost a single
  // process half its time under ASan and suppress nothing there)
  const asan = mpi && process.env.DSV4_MPI_ASAN_OPTIONS ? { ASAN_OPTIONS: process.env.DSV4_MPI_ASAN_OPTIONS } : {};
  const proc = spawn(bin, argv, { stdio: ['ignore', 'inherit', 'pipe'],
    env: { ...process.env, OMPI_MCA_mpi_yield_when_idle: '1', ...asan } });
  children.push(proc);
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve({ code, sig })));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error('server did not start:\n' + log)); }, 30000);
    proc.stderr.on('data', (d) => {
      log += d;
      process.stderr.write(d);
      const m = /ready on http:\/\/([^:]+):(\d+) \(pid (\d+)/.exec(log);
      if (m && timer) {
        clearTimeout(timer);
        const url = `http://127.0.0.1:${m[2]}`;
        resolve({
          url, port: Number(m[2]), proc, pid: Number(m[3]),  // pid: rank 0's under mpirun
          // SIGTERM; the server must exit 0 within the bound
          async stop(boundMs = 20000) {
            if (mpi) process.kill(Number(m[3]), 'SIGTERM');
            else proc.kill('SIGTERM');
            const t = setTimeout(() => proc.kill('SIGKILL'), boundMs);
            const r = await exited;
            clearTimeout(t);
            assert.strictEqual(r.sig, null, `server killed by ${r.sig} (did not stop in ${boundMs} ms)`);
            assert.strictEqual(r.code, 0, `server exit status ${r.code}`);
          },
        });
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}) before it was ready:\n${log}`)));
  });
}

// Raw HTTP request (no client library): resolves {status, body, json}.
async function http(url, { method = 'POST', body, headers = {} } = {}) {
  const res = await fetch(url, {
    method, headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: res.status, body: text, json };
}

// Prometheus text -> {name{labels}: value}
async function metrics(url) {
  const t = await (await fetch(url + '/metrics')).text();
  const m = {};
  for (const line of t.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

// `dsv4 generate` on the same model: {text, ids, logprobs (4 decimals)} (ids and logprobs
// with --logprobs N)
function generate(args) {
  const r = require('child_process').spawnSync(BIN, ['generate', '--model', MODEL, '--threads', '1', ...args],
    { encoding: 'utf8', timeout: 60000 });
  assert.strictEqual(r.status, 0, r.stderr);
  // "[id 'token text' logprob]": the text quoted, with \' \\ \n \t \xNN escapes
  const rows = [...r.stderr.matchAll(/^\[(\d+) '(?:[^'\\]|\\.)*' (-?[\d.]+)\]/gm)];
  return { text: r.stdout.replace(/\n$/, ''), ids: rows.map((m) => Number(m[1])), logprobs: rows.map((m) => Number(m[2])) };
}

// Runs the test body with a server and a watchdog; exits non-zero on any failure.
function run(name, fn, { limitMs = 100000 } = {}) {
  const dog = setTimeout(() => { console.error(`${name}: timed out after ${limitMs} ms`); process.exit(1); }, limitMs);
  fn().then(() => { clearTimeout(dog); console.log(`${name}: ok`); },
    (e) => { console.error(`${name}: FAILED\n`, e); process.exit(1); });
}

module.exports = { start, http, metrics, generate, run, BIN, MODEL, execFileSync };
