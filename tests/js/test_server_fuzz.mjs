// Bad input never crashes or hangs the server: a few thousand malformed requests (broken JSON, wrong
// types and huge numbers in every field, invalid UTF-8 bytes, odd content types, truncated bodies) are
// all answered 4xx with an OpenAI error object, and /health is still ok afterwards. The generator is
// seeded: a failure names the request, and the same seed reproduces it.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';

import { prerequisites, rawRequest, startTestServer } from './test_server_common.mjs';

const { skip } = await prerequisites();
let server;

before(async () => {
  if (skip) return;
  server = await startTestServer(['--quiet']);
});
after(async () => server?.stop());

// xorshift32: deterministic across runs and Node versions.
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

const BAD_VALUES = [
  null, true, false, -1, 0, -0.5, 1e308, -1e308, 9007199254740993, '18446744073709551616', 1.5, 'text', '',
  [], [1, 2], {}, { a: 1 }, [[[]]], 'x'.repeat(3000), -9223372036854775808, 4294967296,
];
const FIELDS = ['model', 'messages', 'prompt', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p',
  'top_k', 'min_p', 'seed', 'stop', 'stream', 'stream_options', 'n', 'logprobs', 'top_logprobs', 'presence_penalty',
  'frequency_penalty', 'repeat_penalty', 'ignore_eos', 'tools', 'logit_bias', 'response_format', 'echo', 'best_of'];

// A body that must be refused: valid requests with one field made wrong, or structural damage.
function badBody(next, endpoint) {
  const base = endpoint === '/v1/chat/completions'
    ? { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }
    : { prompt: 'hi', max_tokens: 2 };
  const pick = (arr) => arr[Math.floor(next() * arr.length)];
  const kind = Math.floor(next() * 9);
  if (kind === 0) {  // truncated or mangled JSON
    const text = JSON.stringify(base);
    return Buffer.from(text.slice(0, Math.floor(next() * (text.length - 1))));
  }
  if (kind === 1) {  // invalid UTF-8 bytes inside a string
    const text = JSON.stringify({ ...base, messages: [{ role: 'user', content: 'AAAA' }], prompt: 'AAAA' });
    const bytes = Buffer.from(text);
    const at = text.indexOf('AAAA');
    bytes[at + 1] = pick([0xff, 0xfe, 0xc0, 0x80, 0xed]);
    bytes[at + 2] = pick([0xa0, 0xbf, 0x00 + 0x41, 0xff]);
    return bytes;
  }
  if (kind === 2) {  // random bytes
    return Buffer.from(Array.from({ length: 1 + Math.floor(next() * 64) }, () => Math.floor(next() * 256)));
  }
  if (kind === 3) return Buffer.from(JSON.stringify(pick([[], 42, 'str', null, [base]])));  // not an object
  if (kind === 4) {  // messages that cannot be rendered
    const messages = pick([[], [{}], [{ role: 'wizard', content: 'x' }], [{ role: 'user', content: 7 }],
      [{ role: 'user', content: [{ type: 'image_url' }] }], ['hi'], [{ role: null }], [{ role: 'tool', content: 'x' }]]);
    return Buffer.from(JSON.stringify({ messages }));
  }
  if (kind === 5) {  // huge numbers the JSON parser cannot hold
    return Buffer.from(`{"prompt":"hi","max_tokens":1${'0'.repeat(400)},"temperature":1e999}`);
  }
  // One field with a wrong type or an out-of-range value (kinds 6-8: the most common case). Values that
  // a field legitimately accepts are skipped by construction below.
  for (;;) {
    const field = pick(FIELDS);
    const value = pick(BAD_VALUES);
    const body = { ...base, [field]: value };
    if (isAcceptable(field, value, endpoint)) continue;
    return Buffer.from(JSON.stringify(body));
  }
}

// The few (field, value) pairs of BAD_VALUES that are valid requests (so they are not sent as "bad").
function isAcceptable(field, value, endpoint) {
  const chat = endpoint === '/v1/chat/completions';
  if (value === null) return field !== (chat ? 'messages' : 'prompt');  // null: not given
  switch (field) {
    case 'model': return value === '';  // '' means the served model (documented); other strings 404, types 400
    case 'prompt': return chat || typeof value === 'string' || (Array.isArray(value) && value.length > 0 &&
      value.every((v) => Number.isInteger(v) && v >= 0 && v < 512));  // chat ignores 'prompt'

    case 'messages': return !chat;
    case 'temperature': case 'top_p': case 'min_p': return typeof value === 'number' && value >= 0 &&
      value <= (field === 'temperature' ? 2 : 1);
    case 'presence_penalty': case 'frequency_penalty': return typeof value === 'number' && Math.abs(value) <= 2;
    case 'repeat_penalty': return typeof value === 'number' && value > 0 && value <= 100;
    case 'top_k': return Number.isInteger(value) && value >= 0 && value < 2 ** 31;
    case 'seed': return typeof value === 'number' && Number.isInteger(value) && value >= -(2 ** 63) && value < 2 ** 64;
    case 'stop': return typeof value === 'string' ? value.length <= 1024 : Array.isArray(value) && value.length === 0;
    case 'stream': case 'ignore_eos': return typeof value === 'boolean';
    case 'echo': return chat || value === false;
    case 'logprobs': return chat ? typeof value === 'boolean' : Number.isInteger(value) && value >= 0 && value <= 5;
    case 'n': case 'best_of': return value === 1 || (field === 'best_of' && chat);
    case 'max_tokens': case 'max_completion_tokens':
      if (field === 'max_completion_tokens' && !chat) return true;  // ignored by /v1/completions
      return Number.isInteger(value) && value >= 1 && value <= 2000;
    case 'tools': return Array.isArray(value) && value.length === 0;
    case 'logit_bias': return typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length === 0;
    case 'top_logprobs': return !chat;  // not a /v1/completions parameter: ignored there
    case 'response_format': case 'stream_options': return false;
    default: return false;
  }
}

const N_REQUESTS = 3000;
const CONCURRENCY = 8;

test(`${N_REQUESTS} malformed requests: all 4xx with an error object, server still healthy`, { skip }, async () => {
  const next = rng(20240611);
  const requests = Array.from({ length: N_REQUESTS }, (_, i) => {
    const endpoint = next() < 0.5 ? '/v1/chat/completions' : '/v1/completions';
    const body = badBody(next, endpoint);
    const contentType = next() < 0.9 ? 'application/json' : ['text/plain', 'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=zz', 'application/json; charset=latin1'][i % 4];
    return { i, endpoint, body, contentType };
  });
  let cursor = 0;
  const failures = [];
  const statuses = {};
  const worker = async () => {
    while (cursor < requests.length) {
      const r = requests[cursor++];
      const res = await rawRequest(server.port, {
        path: r.endpoint, headers: { 'Content-Type': r.contentType, 'Content-Length': r.body.length }, body: r.body,
      });
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      let errorObject = null;
      try {
        errorObject = JSON.parse(res.body.toString('utf8')).error;
      } catch {}
      if (res.status < 400 || res.status >= 500 || !errorObject?.message || !errorObject?.type) {
        const acceptedAsValid = r.contentType === 'application/json; charset=latin1' && res.status === 200;
        if (!acceptedAsValid) {
          failures.push(`#${r.i} ${r.endpoint} [${r.contentType}] ${r.body.toString('latin1').slice(0, 200)} -> ` +
            `${res.status} ${res.body.toString('utf8').slice(0, 200)}`);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  assert.deepEqual(failures.slice(0, 10), [], `${failures.length} bad answers; statuses ${JSON.stringify(statuses)}`);
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
  assert.deepEqual(await health.json(), { status: 'ok' });
});

test('requests cut off mid-body or with lying lengths do not hang the server', { skip }, async () => {
  const net = await import('node:net');
  const send = (text) => new Promise((resolve) => {
    const socket = net.connect(server.port, '127.0.0.1', () => {
      socket.write(text);
      setTimeout(() => socket.destroy(), 100);
    });
    socket.on('error', () => {});
    socket.on('close', resolve);
  });
  await Promise.all([
    send('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nContent-Type: application/json\r\n\r\n{"pro'),
    send('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n'),
    send('POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'),
    send('GARBAGE\r\n\r\n'),
    send('\x00\xff\xfe\r\n\r\n'),
  ]);
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
});
