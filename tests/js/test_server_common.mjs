// Shared pieces of the server suites (test_server_*.mjs): the openai client (or a reason to skip), the
// llama2.c greedy reference for stories260K, our tokenizer through `gpu-accel tokenize`, raw HTTP
// helpers, and /metrics parsing. Servers are started with the dashboard's harness (server_harness.mjs).
//
// Missing prerequisites (tests/js/node_modules, the binary, the model) skip a suite with the reason,
// except under GA_REQUIRE_TEST_DATA=1 (CI), where they FAIL it: CI must never pass by running nothing.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import { modelPath, serverBinary, sharedDir, startServer } from './server_harness.mjs';

export const required = process.env.GA_REQUIRE_TEST_DATA === '1';

// {OpenAI, skip}: skip is false or the reason the suite cannot run.
export async function prerequisites() {
  const problems = [];
  let OpenAI = null;
  try {
    ({ default: OpenAI } = await import('openai'));
  } catch {
    problems.push('the openai package is not installed (run `npm ci` in tests/js)');
  }
  for (const check of [serverBinary, modelPath]) {
    try {
      check();
    } catch (e) {
      problems.push(e.message);
    }
  }
  if (problems.length && required) throw new Error(`GA_REQUIRE_TEST_DATA=1 but ${problems.join('; ')}`);
  return { OpenAI, skip: problems.length ? problems.join('; ') : false };
}

// The CPU server the suites share the machine with: 2 threads, quiet logs unless asked.
export function startTestServer(args = []) {
  return startServer({ args: ['--threads', '2', ...args] });
}

export const MODEL_ID = 'stories260K.gguf';

// llama2.c run.c's greedy generations for stories260K: [{prompt, steps, prompt_token_ids, stdout_text}].
export function greedyReference() {
  const file = path.join(sharedDir(), 'models/tinyllamas/stories260K.greedy-reference.json');
  return JSON.parse(fs.readFileSync(file, 'utf8')).cases;
}

// Token ids of text by our tokenizer (the CLI), BOS as the vocabulary says, special tokens parsed.
export function tokenize(text) {
  const out = execFileSync(serverBinary(), ['tokenize', '-m', modelPath(), '-p', text, '--parse-special'], {
    encoding: 'utf8',
  });
  return out.trim().split(/\s+/).filter(Boolean).map(Number);
}

// Hugging Face's default ChatML, the documented fallback for models without a template.
export function chatml(messages) {
  return messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';
}

// A raw HTTP request (any bytes, any headers) -> {status, headers, body}. Node's fetch would refuse to
// send some of what the fuzz tests need (invalid bytes, odd content types, missing bodies).
export function rawRequest(port, { method = 'POST', path: urlPath = '/v1/chat/completions', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: urlPath, headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(30000, () => req.destroy(new Error(`timeout: ${method} ${urlPath}`)));
    if (body !== undefined) req.write(body);
    req.end();
  });
}

export async function postJson(port, urlPath, payload, headers = {}) {
  const body = Buffer.from(JSON.stringify(payload));
  const res = await rawRequest(port, {
    path: urlPath,
    headers: { 'Content-Type': 'application/json', 'Content-Length': body.length, ...headers },
    body,
  });
  return { ...res, json: JSON.parse(res.body.toString('utf8')) };
}

// The data payloads of an SSE body (comments skipped), per the EventSource rules.
export function sseEvents(text) {
  const events = [];
  for (const block of text.split('\n\n')) {
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''));
    if (data.length) events.push(data.join('\n'));
  }
  return events;
}

// /metrics as {name or name{labels}: value}.
export async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const values = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    values[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return values;
}

// Polls until cond() holds (or throws after timeoutMs).
export async function waitFor(cond, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await cond();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
