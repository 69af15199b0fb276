// The busy-waiting hand-offs of a lone request (the scheduler thread from a request's head to its submit,
// `--poll-us`; a stream's thread until its first token, `--first-token-poll-ms`) change timing only. A GPU
// server turns them on by itself; this CPU server forces them on, so that the paths run in CI: streams alone and
// 6 at once (more than the 2 that may spin) equal the same requests answered whole, and a client that goes away
// while its stream is still waiting for the first token is cancelled and its KV blocks freed.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';

import { greedyReference, metrics, prerequisites, startTestServer, waitFor } from './test_server_common.mjs';

const { OpenAI, skip } = await prerequisites();
let server;
let client;

before(async () => {
  if (skip) return;
  server = await startTestServer(['--max-batch', '8', '--quiet', '--poll-us', '5000', '--first-token-poll-ms', '50']);
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
