// Continuous batching seen from clients: 16 concurrent streams (greedy) each produce exactly what the
// same request produces alone, and what llama2.c produces; a client that disconnects mid-stream, or hangs
// up while it waits for a whole (non-streaming) answer, gets its request cancelled and its KV blocks freed
// (seen in /metrics).
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';

import { greedyReference, metrics, prerequisites, startTestServer, waitFor } from './test_server_common.mjs';

const { OpenAI, skip } = await prerequisites();
let server;
let client;

before(async () => {
  if (skip) return;
  server = await startTestServer(['--max-batch', '16', '--quiet']);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});
after(async () => server?.stop());

const N_CLIENTS = 16;

// Request i: one of the reference prompts, with its own length so sequences join and leave the batch
// at different steps.
function requestOf(i) {
  const cases = greedyReference().filter((c) => c.prompt !== '');
  const c = cases[i % cases.length];
  const full = c.steps + 1 - c.prompt_token_ids.length;
  return { c, params: { prompt: c.prompt, max_tokens: full - 3 * Math.floor(i / cases.length), temperature: 0 } };
}

async function streamText(params) {
  const stream = await client.completions.create({ ...params, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices.map((x) => x.text).join('');
  return text;
}

test(`${N_CLIENTS} concurrent streams equal each request alone`, { skip }, async () => {
  const alone = [];
  for (let i = 0; i < N_CLIENTS; ++i) {
    const { c, params } = requestOf(i);
    const r = await client.completions.create(params);
    const text = r.choices[0].text;
    assert.ok(c.stdout_text.slice(c.prompt.length).startsWith(text), `request ${i} alone differs from llama2.c`);
    alone.push(text);
  }
  const together = await Promise.all(Array.from({ length: N_CLIENTS }, (_, i) => streamText(requestOf(i).params)));
  for (let i = 0; i < N_CLIENTS; ++i) assert.equal(together[i], alone[i], `request ${i}`);
  const m = await metrics(server.url);
  assert.equal(m.gpu_accel_requests_running, 0);
  assert.equal(m.gpu_accel_kv_blocks_used, 0);
});

test('a client that disconnects mid-stream is cancelled and its KV blocks freed', { skip }, async () => {
  const before = await metrics(server.url);
  assert.equal(before.gpu_accel_kv_blocks_used, 0);
  const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 1900, ignore_eos: true, stream: true });
  const chunksSeen = await new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port: server.port, method: 'POST', path: '/v1/completions', agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
    }, (res) => {
      let n = 0;
      res.on('data', async () => {
        if (++n !== 5) return;
        // Mid-generation: the sequence holds KV blocks. Then hang up.
        const during = await metrics(server.url);
        req.destroy();
        resolve({ n, during });
      });
      res.on('error', () => {});
    });
    req.on('error', (e) => { if (e.code !== 'ECONNRESET') reject(e); });
    req.end(body);
  });
  assert.ok(chunksSeen.during.gpu_accel_kv_blocks_used > 0, 'no KV blocks in use during generation');
  const afterDisconnect = await waitFor(async () => {
    const m = await metrics(server.url);
    return m.gpu_accel_kv_blocks_used === 0 && m.gpu_accel_requests_running === 0 ? m : null;
  }, 10000, 'the cancelled request to free its KV blocks');
  assert.equal(afterDisconnect.gpu_accel_requests_cancelled_total - before.gpu_accel_requests_cancelled_total, 1);
  // Far fewer tokens than asked for were generated: the request really stopped.
  assert.ok(afterDisconnect.gpu_accel_generated_tokens_total - before.gpu_accel_generated_tokens_total < 1900);
});

test('a client that hangs up on a non-streaming request is cancelled and its KV blocks freed', { skip }, async () => {
  const before = await metrics(server.url);
  assert.equal(before.gpu_accel_kv_blocks_used, 0);
  const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 1900, ignore_eos: true });
  let answered = false;
  const req = http.request({
    host: '127.0.0.1', port: server.port, method: 'POST', path: '/v1/completions', agent: false,
    headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
  });
  req.on('error', () => {});  // the hang-up below
  req.on('response', (res) => { answered = true; res.resume(); });
  req.end(body);
  // Admitted (nothing is written until the answer is whole): the sequence holds KV blocks. Then hang up.
  await waitFor(async () => (await metrics(server.url)).gpu_accel_kv_blocks_used > 0, 10000,
    'the request to hold KV blocks');
  req.destroy();
  const afterDisconnect = await waitFor(async () => {
    const m = await metrics(server.url);
    return m.gpu_accel_kv_blocks_used === 0 && m.gpu_accel_requests_running === 0 ? m : null;
  }, 10000, 'the abandoned request to free its KV blocks');
  assert.ok(!answered, 'the whole answer came before the client hung up (the test raced the generation)');
  assert.equal(afterDisconnect.gpu_accel_requests_cancelled_total - before.gpu_accel_requests_cancelled_total, 1);
  assert.ok(afterDisconnect.gpu_accel_generated_tokens_total - before.gpu_accel_generated_tokens_total < 1900);
});

test('aborting through the openai client cancels too', { skip }, async () => {
  const before = await metrics(server.url);
  const controller = new AbortController();
  const stream = await client.completions.create(
    { prompt: 'Tom and Lily', max_tokens: 1900, ignore_eos: true, stream: true }, { signal: controller.signal });
  let n = 0;
  try {
    for await (const chunk of stream) {
      assert.ok(chunk.choices);
      if (++n === 3) controller.abort();  // the client ends the iteration (or throws an AbortError)
    }
  } catch (e) {
    if (e.name !== 'AbortError' && !/abort/i.test(e.message)) throw e;
  }
  assert.ok(n >= 3 && n < 100, `${n} chunks read after aborting`);
  await waitFor(async () => {
    const m = await metrics(server.url);
    return m.gpu_accel_kv_blocks_used === 0 &&
      m.gpu_accel_requests_cancelled_total === before.gpu_accel_requests_cancelled_total + 1;
  }, 10000, 'the aborted request to be cancelled');
});

test('a full queue answers 503 with Retry-After, and the server recovers', { skip }, async () => {
  const busy = await startTestServer(['--max-batch', '1', '--max-queue', '1', '--quiet']);
  const controllers = [];
  try {
    const busyClient = new OpenAI({ baseURL: `${busy.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    // Opens a long stream and resolves once its first chunk arrived (the request was accepted).
    const open = async () => {
      const controller = new AbortController();
      controllers.push(controller);
      const stream = await busyClient.completions.create(
        { prompt: 'Once', max_tokens: 1900, ignore_eos: true, stream: true }, { signal: controller.signal });
      const iterator = stream[Symbol.asyncIterator]();
      return { iterator };
    };
    const running = await open();
    await running.iterator.next();  // generating: it holds the only batch slot
    const waitingPromise = open();  // the second waits in the queue (headers arrive, no tokens)
    await waitFor(async () => (await metrics(busy.url)).gpu_accel_requests_queued === 1, 10000, 'a queued request');
    const refused = await fetch(`${busy.url}/v1/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: 'x', max_tokens: 1 }),
    });
    assert.equal(refused.status, 503);
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    assert.equal((await refused.json()).error.code, 'server_overloaded');
    for (const c of controllers) c.abort();
    await waitingPromise.catch(() => {});
    await waitFor(async () => {
      const m = await metrics(busy.url);
      return m.gpu_accel_requests_running === 0 && m.gpu_accel_requests_queued === 0 && m.gpu_accel_kv_blocks_used === 0;
    }, 10000, 'both streams to be cancelled');
    const after = await busyClient.completions.create({ prompt: 'Once', max_tokens: 3 });
    assert.equal(after.usage.completion_tokens, 3);
  } finally {
    for (const c of controllers) c.abort();
    await busy.stop();
  }
});
