// The OpenAI-compatible API of `gpu-accel serve` on stories260K (CPU), through the official openai client
// and raw HTTP. References: llama2.c run.c's greedy generations (stories260K.greedy-reference.json) for
// the text and the prompt token counts, our tokenizer (`gpu-accel tokenize`) for usage, Hugging Face's
// ChatML for the chat prompt (the documented fallback: stories260K has no chat template), and the OpenAI
// API reference for the shapes.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';

import {
  MODEL_ID, chatml, greedyReference, metrics, postJson, prerequisites, rawRequest, sseEvents, startTestServer,
  tokenize,
} from './test_server_common.mjs';

const { OpenAI, skip } = await prerequisites();
let server;
let client;

before(async () => {
  if (skip) return;
  server = await startTestServer();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
});
after(async () => server?.stop());

// Tokens run.c generated after the prompt: its steps count positions, BOS included.
const generatedCount = (c) => c.steps + 1 - c.prompt_token_ids.length;
// run.c prints the prompt then the continuation (leading space of the first piece after BOS removed).
const expectedContinuation = (c) => c.stdout_text.slice(c.prompt.length);

test('health and models', { skip }, async () => {
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
  assert.deepEqual(await health.json(), { status: 'ok' });
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL_ID]);
  assert.equal((await client.models.retrieve(MODEL_ID)).id, MODEL_ID);
  await assert.rejects(client.models.retrieve('nope'), (e) => e.status === 404);
});

test('greedy completions equal llama2.c, with exact usage', { skip }, async () => {
  for (const c of greedyReference()) {
    const n = generatedCount(c);
    const r = await client.completions.create({ model: MODEL_ID, prompt: c.prompt, max_tokens: n, temperature: 0 });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].text, expectedContinuation(c), `prompt ${JSON.stringify(c.prompt)}`);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.prompt_tokens, c.prompt_token_ids.length);  // run.c's encode, BOS included
    assert.equal(r.usage.prompt_tokens, tokenize(c.prompt).length);  // and our tokenizer's count
    assert.equal(r.usage.completion_tokens, n);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + n);
    // The same prompt as token ids gives the same continuation.
    const ids = await client.completions.create({ prompt: c.prompt_token_ids, max_tokens: n, temperature: 0 });
    assert.equal(ids.choices[0].text, r.choices[0].text);
  }
});

test('streamed completions equal whole ones; include_usage adds a usage chunk', { skip }, async () => {
  const c = greedyReference()[2];
  const n = generatedCount(c);
  const stream = await client.completions.create({
    model: MODEL_ID, prompt: c.prompt, max_tokens: n, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.text;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(text, expectedContinuation(c));
  assert.equal(finish, 'length');
  assert.deepEqual([usage.prompt_tokens, usage.completion_tokens], [c.prompt_token_ids.length, n]);
});

test('chat: ChatML prompt tokens, streaming equals non-streaming', { skip }, async () => {
  const messages = [
    { role: 'system', content: 'You tell short stories.' },
    { role: 'user', content: 'Tell me about a cat.' },
  ];
  const whole = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 24, temperature: 0 });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(typeof whole.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  assert.equal(whole.usage.prompt_tokens, tokenize(chatml(messages)).length);

  const stream = await client.chat.completions.create({
    model: MODEL_ID, messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');  // the first chunk carries the role
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);  // include_usage: a final chunk with usage and no choices
  // The same prompt again: equal counts (cached_tokens may grow: the prefix cache now holds it).
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens']) assert.equal(last.usage[k], whole.usage[k]);
  assert.ok(last.usage.prompt_tokens_details.cached_tokens <= last.usage.prompt_tokens);
  const finishChunk = chunks.at(-2);
  assert.equal(finishChunk.choices[0].finish_reason, whole.choices[0].finish_reason);
  assert.ok(chunks.every((ch) => ch.id === chunks[0].id && ch.object === 'chat.completion.chunk'));
  const text = chunks.flatMap((ch) => ch.choices.map((x) => x.delta.content ?? '')).join('');
  assert.equal(text, whole.choices[0].message.content);
});

test('raw SSE framing ends with [DONE]', { skip }, async () => {
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, stream: true });
  const res = await rawRequest(server.port, { headers: { 'Content-Type': 'application/json' }, body });
  assert.equal(res.status, 200);
  assert.match(res.headers['content-type'], /^text\/event-stream/);
  const events = sseEvents(res.body.toString('utf8'));
  assert.equal(events.at(-1), '[DONE]');
  for (const e of events.slice(0, -1)) assert.equal(JSON.parse(e).object, 'chat.completion.chunk');
});

test('stop strings end the text before them, streaming or not', { skip }, async () => {
  const c = greedyReference()[1];
  const full = expectedContinuation(c);
  for (const stop of ['Lily', ['never-there', 'play'], '.']) {
    const first = Math.min(...[stop].flat().map((s) => full.indexOf(s)).filter((i) => i >= 0));
    const expected = full.slice(0, first);
    const r = await client.completions.create({ prompt: c.prompt, max_tokens: generatedCount(c), temperature: 0, stop });
    assert.equal(r.choices[0].text, expected, `stop ${JSON.stringify(stop)}`);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const stream = await client.completions.create({
      prompt: c.prompt, max_tokens: generatedCount(c), temperature: 0, stop, stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices.map((x) => x.text).join('');
    assert.equal(text, expected);
  }
});

test('the same seed gives the same text; other seeds differ', { skip }, async () => {
  const ask = (seed) =>
    client.completions.create({ prompt: 'Once upon a time', max_tokens: 40, temperature: 1, seed })
      .then((r) => r.choices[0].text);
  const a = await ask(1234);
  assert.equal(await ask(1234), a);
  assert.equal(await ask(1234), a);
  const others = await Promise.all([1, 2, 3].map(ask));
  assert.ok(others.some((t) => t !== a), 'three other seeds all produced the same 40 tokens');
});

test('logprobs: chat and legacy completions shapes', { skip }, async () => {
  const chat = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, chat.usage.completion_tokens);
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.deepEqual(Buffer.from(t.bytes).toString('utf8'), t.token);
    assert.equal(t.top_logprobs.length, 3);
    const lps = t.top_logprobs.map((x) => x.logprob);
    assert.deepEqual(lps, [...lps].sort((x, y) => y - x));  // most likely first
    assert.ok(lps.reduce((s, lp) => s + Math.exp(lp), 0) <= 1 + 1e-4);  // probabilities of one distribution
    assert.equal(t.top_logprobs[0].token, t.token);  // greedy picks the most likely
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
  }
  assert.equal(content.map((t) => t.token).join(''), chat.choices[0].message.content);

  const legacy = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0, logprobs: 2 });
  const lp = legacy.choices[0].logprobs;
  assert.equal(lp.tokens.length, 8);
  assert.equal(lp.token_logprobs.length, 8);
  assert.equal(lp.top_logprobs.length, 8);
  assert.ok(lp.top_logprobs.every((m) => Object.keys(m).length <= 2 && Object.keys(m).length >= 1));
  assert.equal(lp.tokens.join(''), legacy.choices[0].text);
  let offset = 0;
  lp.tokens.forEach((t, i) => {
    assert.equal(lp.text_offset[i], offset);
    offset += Buffer.byteLength(t);
  });
});

test('errors: OpenAI error objects and status codes', { skip }, async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404 && e.code === 'model_not_found' && e.param === 'model');
  await assert.rejects(client.completions.create({ prompt: 'x', n: 2 }), (e) => e.status === 400 && e.param === 'n');

  // An omitted model means the served one (documented).
  const omitted = await postJson(server.port, '/v1/completions', { prompt: 'Once', max_tokens: 2 });
  assert.equal(omitted.status, 200);
  assert.equal(omitted.json.model, MODEL_ID);

  // A prompt longer than the context: 400 naming both numbers.
  const nCtx = Number(/context: (\d+)/.exec(server.log())[1]);  // the server's startup line
  const long = await postJson(server.port, '/v1/completions', { prompt: Array(nCtx + 5).fill(300), max_tokens: 1 });
  assert.equal(long.status, 400);
  assert.equal(long.json.error.code, 'context_length_exceeded');
  assert.match(long.json.error.message, new RegExp(`\\b${nCtx}\\b`));
  assert.match(long.json.error.message, new RegExp(`\\b${nCtx + 5}\\b`));
  const tooMany = await postJson(server.port, '/v1/completions', { prompt: 'Once', max_tokens: nCtx });
  assert.equal(tooMany.status, 400);
  assert.equal(tooMany.json.error.param, 'max_tokens');

  const wrongMethod = await rawRequest(server.port, { method: 'GET', path: '/v1/chat/completions' });
  assert.equal(wrongMethod.status, 405);
  const unknown = await rawRequest(server.port, { method: 'GET', path: '/v2/nothing' });
  assert.equal(unknown.status, 404);
  assert.equal(JSON.parse(unknown.body).error.code, 'unknown_url');
  const big = await rawRequest(server.port, {
    headers: { 'Content-Type': 'application/json' }, body: `{"prompt":"${'a'.repeat(2 << 20)}"}`,
  });
  assert.equal(big.status, 413);
  assert.equal(JSON.parse(big.body).error.type, 'invalid_request_error');
  const form = await rawRequest(server.port, {
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'prompt=hi',
  });
  assert.equal(form.status, 415);
});

test('metrics: Prometheus text with HELP/TYPE, counters that move', { skip }, async () => {
  const res = await fetch(`${server.url}/metrics`);
  assert.match(res.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  const text = await res.text();
  for (const family of ['http_requests_total', 'prompt_tokens_total', 'generated_tokens_total', 'requests_running',
    'requests_queued', 'kv_blocks_used', 'kv_blocks_total', 'generation_tokens_per_second',
    'request_duration_seconds']) {
    assert.match(text, new RegExp(`^# HELP gpu_accel_${family} `, 'm'));
    assert.match(text, new RegExp(`^# TYPE gpu_accel_${family} (counter|gauge|histogram)$`, 'm'));
  }
  const before = await metrics(server.url);
  await client.completions.create({ prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
  const after = await metrics(server.url);
  assert.equal(after.gpu_accel_generated_tokens_total - before.gpu_accel_generated_tokens_total, 5);
  assert.equal(after.gpu_accel_prompt_tokens_total - before.gpu_accel_prompt_tokens_total, 5);
  assert.equal(after.gpu_accel_request_duration_seconds_count - before.gpu_accel_request_duration_seconds_count, 1);
  assert.ok(after['gpu_accel_http_requests_total{status="200"}'] > before['gpu_accel_http_requests_total{status="200"}']);
  assert.ok(after.gpu_accel_kv_blocks_total > 0);
});

test('--api-key guards /v1 and /metrics, not /health', { skip }, async () => {
  const guarded = await startTestServer(['--api-key', 'k3y', '--quiet']);
  try {
    const ok = new OpenAI({ baseURL: `${guarded.url}/v1`, apiKey: 'k3y', maxRetries: 0 });
    const bad = new OpenAI({ baseURL: `${guarded.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    assert.equal((await ok.completions.create({ prompt: 'Once', max_tokens: 2 })).choices.length, 1);
    await assert.rejects(bad.completions.create({ prompt: 'Once', max_tokens: 2 }),
      (e) => e.status === 401 && e.code === 'invalid_api_key');
    const none = await rawRequest(guarded.port, { method: 'GET', path: '/v1/models' });
    assert.equal(none.status, 401);
    assert.equal((await rawRequest(guarded.port, { method: 'GET', path: '/metrics' })).status, 401);
    assert.equal((await rawRequest(guarded.port, { method: 'GET', path: '/health' })).status, 200);
  } finally {
    await guarded.stop();
  }
});

test('SIGTERM stops the server cleanly', { skip }, async () => {
  const s = await startTestServer(['--quiet']);
  const { code, signal } = await s.stop();
  assert.equal(signal, null);
  assert.equal(code, 0);
  assert.match(s.log(), /server stopped/);
});
