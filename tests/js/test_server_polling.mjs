// The busy-waiting hand-offs of a lone request (the scheduler thread from a request's head to its submit,
// `--poll-us`; a stream's thread until its first token, `--first-token-poll-ms`; a connection's thread until its
// next request, `--keep-alive-poll-us`) change timing only. A GPU server turns them on by itself; this CPU server
// forces them on, so that the paths run in CI: streams alone and 6 at once (more than the 2 that may spin) equal
// the same requests answered whole, and a client that goes away while its stream is still waiting for the first
// token is cancelled and its KV blocks freed. The server's own connection loop (apps/server/http_connection.h):
// a keep-alive connection serves request after request (busy-waiting, and after the window sleeping in poll),
// pipelined requests are all answered in order, and a connection is closed after its 5th request as httplib's
// own loop did.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';

import { greedyReference, metrics, prerequisites, startTestServer, waitFor } from './test_server_common.mjs';

const { OpenAI, skip } = await prerequisites();
let server;
let client;

before(async () => {
  if (skip) return;
  server = await startTestServer(['--max-batch', '8', '--quiet', '--poll-us', '5000', '--first-token-poll-ms', '50',
    '--keep-alive-poll-us', '3000']);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});
after(async () => server?.stop());

function params(i) {
  const cases = greedyReference().filter((c) => c.prompt !== '');
  return { prompt: cases[i % cases.length].prompt, max_tokens: 24 + 5 * i, temperature: 0 };
}

async function streamText(p) {
  const stream = await client.completions.create({ ...p, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices.map((x) => x.text).join('');
  return text;
}

test('with busy-waiting forced on, streams alone and together equal the whole answers', { skip }, async () => {
  const n = 6;
  const whole = [];
  for (let i = 0; i < n; ++i) whole.push((await client.completions.create(params(i))).choices[0].text);
  for (let i = 0; i < n; ++i) assert.equal(await streamText(params(i)), whole[i], `request ${i} streamed alone`);
  const together = await Promise.all(Array.from({ length: n }, (_, i) => streamText(params(i))));
  for (let i = 0; i < n; ++i) assert.equal(together[i], whole[i], `request ${i} streamed with ${n - 1} others`);
  const m = await metrics(server.url);
  assert.equal(m.gpu_accel_requests_running, 0);
  assert.equal(m.gpu_accel_kv_blocks_used, 0);
});

test('a stream abandoned before its first token is cancelled and frees its blocks', { skip }, async () => {
  const before = await metrics(server.url);
  // A long prompt (its prefill takes a while on the CPU), then hang up as soon as the response head arrives.
  const prompt = Array.from({ length: 400 }, (_, i) => 3 + ((i * 37) % 500));
  const body = JSON.stringify({ prompt, max_tokens: 1000, ignore_eos: true, stream: true });
  await new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port: server.port, method: 'POST', path: '/v1/completions', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
    }, (res) => {
      assert.equal(res.statusCode, 200);
      req.destroy();
      resolve();
    });
    req.on('error', (e) => { if (e.code !== 'ECONNRESET') reject(e); });
    req.end(body);
  });
  const m = await waitFor(async () => {
    const now = await metrics(server.url);
    return now.gpu_accel_kv_blocks_used === 0 && now.gpu_accel_requests_running === 0 &&
      now.gpu_accel_requests_cancelled_total === before.gpu_accel_requests_cancelled_total + 1 ? now : null;
  }, 15000, 'the abandoned stream to be cancelled');
  assert.ok(m.gpu_accel_generated_tokens_total - before.gpu_accel_generated_tokens_total < 1000);
});

// GET /health on one keep-alive agent socket, `n` times with `pauseMs` between them: [status, reused socket].
async function healthOnAgent(agent, n, pauseMs) {
  const answers = [];
  for (let i = 0; i < n; ++i) {
    if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
    answers.push(await new Promise((resolve, reject) => {
      const req = http.get({ host: '127.0.0.1', port: server.port, path: '/health', agent }, (res) => {
        let body = '';
        res.on('data', (d) => { body += d; });
        res.on('end', () => resolve([res.statusCode, body, req.reusedSocket]));
      });
      req.on('error', reject);
    }));
  }
  return answers;
}

test('a keep-alive connection serves requests inside and after the busy-wait window', { skip }, async () => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    // Back to back (found while busy-waiting) and 20 ms apart (after the 3 ms window: found by poll).
    for (const pauseMs of [0, 20]) {
      const answers = await healthOnAgent(agent, 4, pauseMs);
      for (const [status, body] of answers) {
        assert.equal(status, 200);
        assert.deepEqual(JSON.parse(body), { status: 'ok' });
      }
      assert.ok(answers.slice(1).some(([, , reused]) => reused), `pause ${pauseMs} ms: the connection was kept`);
    }
  } finally {
    agent.destroy();
  }
});

// Writes `payload` on a raw connection and collects everything until the server closes it.
function rawExchange(payload) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, '127.0.0.1', () => socket.write(payload));
    let data = '';
    socket.setEncoding('latin1');
    socket.on('data', (d) => { data += d; });
    socket.on('end', () => resolve(data));
    socket.on('error', reject);
  });
}

test('pipelined requests are all answered, in order; the 5th closes the connection', { skip }, async () => {
  const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
  const completion = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  const health = 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n';
  // Five requests in one write: the server's stream keeps the bytes past each request for the next one. The 5th
  // (keep-alive max count) is answered with Connection: close, and the server ends the connection.
  const reply = await rawExchange(health + completion + health + completion + health);
  const statuses = [...reply.matchAll(/HTTP\/1\.1 (\d+) /g)].map((m) => Number(m[1]));  // bodies have no newline
  assert.deepEqual(statuses, [200, 200, 200, 200, 200]);
  const texts = [...reply.matchAll(/"text":"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]);
  const whole = (await client.completions.create({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0 }))
    .choices[0].text;
  assert.equal(texts.length, 2);
  for (const t of texts) assert.equal(JSON.parse(`"${t}"`), whole);
  assert.match(reply, /Connection: close/i);
});
