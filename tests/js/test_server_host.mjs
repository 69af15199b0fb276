// `gpu-accel serve --host-model` end to end: the command line's host options reach the server (the RWKV
// host on the CPU, the keys, the log file), /v1/host/ask streams its figures then the answer, the roles
// hold (401 / 403), the report is a table with the summary beneath, and housekeeping rotates the log
// file it was given. The in-process checks (the captured prompt, yielding within one step) are in
// tests/server/test_host_server.cpp; this one checks the binary a user runs.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { modelPath } from './server_harness.mjs';
import { prerequisites, sseEvents, startTestServer } from './test_server_common.mjs';

const { skip } = await prerequisites();
const USER = 'user-key';
const ADMIN = 'admin-key';
const logFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ga-host-')), 'serve.log');
let server;

before(async () => {
  if (skip) return;
  server = await startTestServer(['-q', '--api-key', USER, '--host-admin-key', ADMIN, '--host-threads', '1',
    '--host-model', modelPath('models/rwkv-tiny/tiny-rwkv-7v0-834K-FP32.bin'), '--host-ctx', '2048',
    '--host-max-tokens', '16', '--log-file', logFile]);
});
after(async () => server?.stop());

const auth = (key) => (key ? { Authorization: `Bearer ${key}` } : {});
const post = (urlPath, body, key = USER) => fetch(`${server.url}${urlPath}`, {
  method: 'POST', headers: { 'Content-Type': 'application/json', ...auth(key) }, body: JSON.stringify(body),
});

test('the startup line names the host model and its device', { skip }, () => {
  assert.match(server.log(), /host model: tiny-rwkv-7v0-834K-FP32\.bin on cpu, 1 threads, context 2048/);
});

test('/v1/host/ask streams the figures, then the answer', { skip }, async () => {
  const res = await post('/v1/host/ask', { question: 'How many requests are running?' });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const events = sseEvents(await res.text());
  assert.equal(events.at(-1), '[DONE]');
  const first = JSON.parse(events[0]);
  assert.equal(first.object, 'host.answer.figures');
  const running = first.figures.find((f) => f.key === 'requests_running');
  assert.equal(running.value, '0');
  const done = JSON.parse(events.at(-2));
  assert.equal(done.object, 'host.answer.done');
  assert.ok(done.completion_tokens >= 1 && done.completion_tokens <= 16);
  const deltas = events.slice(1, -2).map((e) => JSON.parse(e));
  assert.ok(deltas.every((d) => d.object === 'host.answer.delta'));
});

test('roles: the API key asks, only the admin key runs housekeeping', { skip }, async () => {
  assert.equal((await post('/v1/host/ask', { question: 'hi' }, '')).status, 401);
  assert.equal((await post('/v1/host/ask', { question: 'hi' }, 'wrong')).status, 401);
  const forbidden = await post('/v1/host/housekeeping', {});
  assert.equal(forbidden.status, 403);
  assert.equal((await forbidden.json()).error.code, 'host_admin_required');
  const done = await post('/v1/host/housekeeping', {}, ADMIN);
  assert.equal(done.status, 200);
  const report = await done.json();
  const rotate = report.actions.find((a) => a.action === 'rotate_log');
  assert.equal(rotate.changed, true, rotate.detail);
  assert.ok(fs.existsSync(`${logFile}.1`));
  assert.match(fs.readFileSync(`${logFile}.1`, 'utf8'), /POST \/v1\/host\/ask 200/);
});

test('the report is the figures table with the summary beneath', { skip }, async () => {
  const res = await fetch(`${server.url}/v1/host/report?format=markdown`, { headers: auth(USER) });
  assert.equal(res.status, 200);
  const md = await res.text();
  const table = md.indexOf('| figure | value |');
  const summary = md.indexOf('## Summary');
  assert.ok(table > 0 && summary > table, md);
  assert.match(md, /\| requests running \| 0 \|/);
  assert.doesNotMatch(md.slice(summary), /\(failed|\(deferred/);
});

test('a question too long for the host is refused', { skip }, async () => {
  const res = await post('/v1/host/ask', { question: 'q'.repeat(5000) });
  assert.equal(res.status, 413);
  assert.equal((await res.json()).error.code, 'question_too_long');
});
