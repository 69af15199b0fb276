// The dashboard end to end: `gpu-accel serve` on stories260K, the page in headless Chromium.
//
// Checks what a user would: the page and its assets are served with the right types, validators
// and CSP; the figures move while a long completion streams (observed by the page itself: two
// renders that both show a running request, with the generated-token counter grown in between);
// the chat box streams an answer and Stop cancels a long one on the server; the no-GPU panel shows
// NVML's reason on a machine without a GPU; the API-key prompt guards /api/stats. A screenshot goes
// to $GA_ARTIFACT_DIR (or build/test-artifacts)/dashboard.png. Any console error (a CSP violation,
// a script exception) fails the suite.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { artifactDir, sharedDir, startServer } from './server_harness.mjs';
import { readSse } from '../../web/sse.js';

const CHROMIUM = process.env.GA_CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const required = process.env.GA_REQUIRE_TEST_DATA === '1';

let chromium = null;
let missing = null;
try {
  ({ chromium } = await import('playwright-core'));
} catch {
  missing = 'playwright-core is not installed (run npm ci in tests/js)';
}
if (!missing && !fs.existsSync(CHROMIUM)) missing = `no Chromium at ${CHROMIUM} (apt-get install chromium, or set GA_CHROMIUM)`;
if (missing && required) throw new Error(`GA_REQUIRE_TEST_DATA=1 but ${missing}`);
const skip = missing ? missing : false;

let server;
let browser;
let page;
const consoleErrors = [];

before(async () => {
  if (skip) return;
  // --ctx 2048 (stories260K was trained on 512): the Stop test's 1900-token answer must still be
  // generating when the page aborts it; capped at 512 positions it could end before the server sees
  // the closed connection (the disconnect shows on the write after the client's FIN), and the request
  // then finishes instead of being cancelled.
  server = await startServer({ args: ['-q', '--threads', '1', '--ctx', '2048'] });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  page = await browser.newPage({ viewport: { width: 1440, height: 1280 } });
  page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.goto(`${server.url}/`);
  await page.waitForSelector('#status.live', { timeout: 10000 });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

async function stats(url = server.url, headers = {}) {
  const res = await fetch(`${url}/api/stats`, { headers });
  assert.equal(res.status, 200);
  return res.json();
}

// Starts a streaming completion and consumes it in the background.
async function streamCompletion(body) {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  // The body is read only on failure: an assert message argument is evaluated first, and reading a clone of a
  // stream waits for its end (the run would be over before the page is watched).
  if (res.status !== 200) assert.fail(`HTTP ${res.status}: ${await res.text()}`);
  const state = { id: null, chunks: 0 };
  state.finished = (async () => {
    for await (const e of readSse(res)) {
      if (e.data === '[DONE]') break;
      const chunk = JSON.parse(e.data);
      state.id ??= chunk.id;
      state.chunks += 1;
    }
  })();
  return state;
}

test('serves the page and its assets with types, validators and a CSP', { skip }, async () => {
  const index = await fetch(`${server.url}/`);
  assert.equal(index.status, 200);
  assert.match(index.headers.get('content-type'), /^text\/html/);
  assert.match(index.headers.get('content-security-policy'), /default-src 'none'/);
  const etag = index.headers.get('etag');
  assert.ok(etag);
  const again = await fetch(`${server.url}/`, { headers: { 'If-None-Match': etag } });
  assert.equal(again.status, 304);
  for (const [file, type] of [['app.js', /^text\/javascript/], ['style.css', /^text\/css/], ['sse.js', /^text\/javascript/],
    ['favicon.svg', /^image\/svg\+xml/]]) {
    const res = await fetch(`${server.url}/${file}`);
    assert.equal(res.status, 200, file);
    assert.match(res.headers.get('content-type'), type, file);
    assert.equal(res.headers.get('cache-control'), 'no-cache');
    assert.equal(await res.text(), fs.readFileSync(new URL(`../../web/${file}`, import.meta.url), 'utf8'), file);
  }
  assert.equal((await fetch(`${server.url}/appXjs`)).status, 404); // the route's '.' is literal

  const s = await stats();
  for (const key of ['time_unix_ms', 'model', 'device', 'gpu', 'cpu', 'scheduler', 'throughput', 'recent_requests']) {
    assert.ok(key in s, key);
  }
  assert.equal(s.device.kind, 'cpu');
  assert.equal(s.model.weight_bytes, s.scheduler.weight_bytes);
  // the weights' precision (serve --precision; native by default) in the header's model line, its detail on hover
  assert.equal(s.model.precision, 'native');
  assert.match(await page.textContent('#model-meta'), / · precision native · /);
  assert.equal(await page.getAttribute('#model-meta', 'title'), `precision: ${s.model.precision_detail}`);
  assert.ok(s.cpu.cores >= 1 && s.cpu.process_rss_bytes > 0);
  if (s.device.gpu_available) assert.ok(s.gpu.name);
  else assert.ok(s.gpu === null && typeof s.device.reason === 'string' && s.device.reason.length > 0);
});

test('the Host panel says the host is off without --host-model, and /api/stats carries its status', { skip }, async () => {
  const s = await stats();
  assert.equal(s.host.enabled, false);
  assert.equal(typeof s.host.schedule.housekeeping_every_minutes, 'number');
  await page.waitForFunction(() => document.getElementById('host-state').textContent.includes('--host-model'),
    null, { timeout: 5000 });
  assert.equal(await page.isDisabled('#host-ask'), true);
});

test('the figures move while a long completion streams', { skip }, async () => {
  const before = await stats();
  // Two sequences of 2000 tokens: several seconds of decoding, so the page (polling once a second)
  // sees the run more than once even on a fast machine.
  const body = { prompt: 'Once upon a time', max_tokens: 2000, ignore_eos: true };
  const streams = [await streamCompletion(body), await streamCompletion(body)];
  // The page must show the run in progress (a request running, tokens flowing, a count between the
  // start and the end) and then the final count: its figures are live, not a page-load snapshot.
  const seen = [];
  const deadline = Date.now() + 30000;
  const target = before.scheduler.generated_tokens_total + 4000;
  const shown = () => page.evaluate(() => {
    const value = (id) => Number(document.getElementById(id).textContent.replace(/,/g, ''));
    return { running: value('running'), generated: value('generated-total'), tps: value('gen-tps') };
  });
  const midRun = (x) => x.running >= 1 && x.tps > 0 && x.generated > before.scheduler.generated_tokens_total &&
    x.generated < target;
  for (let last = null; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    const now = await shown();
    if (JSON.stringify(now) !== JSON.stringify(last)) seen.push(now);
    last = now;
    if (seen.some(midRun) && now.generated === target) break;
  }
  assert.ok(seen.some(midRun), `the page never showed the run in progress: ${JSON.stringify(seen)}`);
  assert.equal(seen[seen.length - 1].generated, target, `the page never showed the final count: ${JSON.stringify(seen)}`);
  await Promise.all(streams.map((x) => x.finished));
  const afterStats = await stats();
  assert.equal(afterStats.scheduler.generated_tokens_total, target);
  // The throughput figures follow from the same answer's scheduler figures (see throughput.h).
  const q = afterStats.scheduler;
  const gbs = (q.generation_tokens_per_second / Math.max(q.running, 1)) * q.weight_bytes / 1e9;
  const tflops = (2 * afterStats.model.n_params * (q.prompt_tokens_per_second + q.generation_tokens_per_second)) / 1e12;
  assert.ok(q.generation_tokens_per_second > 0, 'no generation rate right after a run');
  assert.ok(Math.abs(afterStats.throughput.achieved_gbs - gbs) <= 1e-9 * gbs, JSON.stringify(afterStats.throughput));
  assert.ok(Math.abs(afterStats.throughput.achieved_tflops - tflops) <= 1e-9 * tflops);
  assert.ok(afterStats.throughput.ceiling_gbs > 0 || afterStats.device.kind !== 'cpu'); // memcpy measured by now
  // The finished request reaches the table and the latency chart.
  await page.waitForFunction((id) => document.getElementById('recent-body').textContent.includes(id.slice(-12)),
    streams[1].id, { timeout: 5000 });
  assert.ok(await page.locator('#chart-latency circle').count() >= 2);
  assert.ok(await page.locator('#chart-tps path').count() >= 1);
});

test('no-GPU panel or GPU figures, as the machine has', { skip }, async () => {
  const s = await stats();
  if (s.gpu === null) {
    assert.ok(await page.isVisible('#gpu-absent'));
    assert.ok(!(await page.isVisible('#gpu-present')));
    assert.equal(await page.textContent('#gpu-reason'), s.device.reason);
    assert.match(await page.textContent('#gpu-absent'), /No GPU on this machine/);
  } else {
    assert.ok(await page.isVisible('#gpu-present'));
    assert.match(await page.textContent('#m-gpu-mem .value'), /iB \/ .*iB/);
  }
  assert.match(await page.textContent('#cpu-cores'), /^\d+$/);
});

test('the chat box streams an answer; Stop cancels a long one', { skip }, async () => {
  await page.fill('#chat-max-tokens', '24');
  await page.fill('#chat-input', 'Tell me a story about a cat.');
  await page.click('#chat-send');
  const done = page.locator('.msg.assistant .meta').first();
  await done.waitFor({ timeout: 15000 });
  assert.match(await done.textContent(), /tokens .* finish: (length|stop)/);
  const answer = (await page.locator('.msg.assistant').first().textContent()).replace(await done.textContent(), '');
  assert.ok(answer.trim().length > 0, 'the answer is empty');

  const cancelledBefore = (await stats()).scheduler.requests_cancelled;
  // stories260K ends its stories (EOS) within a second; for an answer long enough to stop, the
  // test adds ignore_eos to the page's request on its way out (the response still streams).
  await page.route('**/v1/chat/completions', (route) =>
    route.continue({ postData: JSON.stringify({ ...route.request().postDataJSON(), ignore_eos: true }) }));
  await page.fill('#chat-max-tokens', '1900');
  await page.fill('#chat-input', 'And another, a long one.');
  // Text visible while the answer is still streaming (tokens are shown as they arrive). Stop is
  // clicked by a MutationObserver in the page, in the same task that renders the 21st character:
  // a polling check could run only after a fast answer had ended (the page's main thread is busy
  // rendering ~1000 chunks a second), and then there would be nothing left to stop.
  const stopped = page.evaluate(() => new Promise((resolve) => {
    const observer = new MutationObserver(() => {
      const m = document.querySelector('.msg.assistant.streaming');
      const stop = document.getElementById('chat-stop');
      if (!m || m.textContent.length <= 20 || stop.disabled) return;
      observer.disconnect();
      const text = m.textContent;
      stop.click();
      resolve(text);
    });
    observer.observe(document.body, { subtree: true, childList: true, characterData: true });
  }));
  await page.press('#chat-input', 'Enter');
  let timer;
  const partial = await Promise.race([stopped, new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('no streaming answer with text to stop within 15 s')), 15000);
  })]);
  clearTimeout(timer);
  assert.ok(partial.length > 20);
  const stoppedMeta = page.locator('.msg.assistant .meta').nth(1);
  await stoppedMeta.waitFor({ timeout: 5000 });
  assert.match(await stoppedMeta.textContent(), /stopped/);
  assert.ok(await page.isEnabled('#chat-send'));
  await page.unroute('**/v1/chat/completions');
  const deadline = Date.now() + 10000;
  while ((await stats()).scheduler.requests_cancelled <= cancelledBefore) {
    assert.ok(Date.now() < deadline, 'the server never cancelled the stopped request');
    await new Promise((r) => setTimeout(r, 200));
  }
});

test('screenshot, and no console errors', { skip }, async () => {
  await page.waitForTimeout(1200); // one more poll: the table and charts show the chat's requests
  const file = path.join(artifactDir(), 'dashboard.png');
  await page.screenshot({ path: file, fullPage: true });
  assert.ok(fs.statSync(file).size > 10000);
  assert.deepEqual(consoleErrors, []);
});

test('with --api-key the page asks for the key and keeps it for the tab', { skip }, async () => {
  const guarded = await startServer({ args: ['-q', '--threads', '1', '--api-key', 'sesame'] });
  const context = await browser.newContext();
  try {
    assert.equal((await fetch(`${guarded.url}/api/stats`)).status, 401);
    await stats(guarded.url, { Authorization: 'Bearer sesame' });
    const p = await context.newPage();
    await p.goto(`${guarded.url}/`);
    await p.waitForSelector('#key-overlay:not([hidden])', { timeout: 10000 });
    await p.fill('#key-input', 'wrong');
    await p.press('#key-input', 'Enter');
    await p.waitForFunction(() => document.getElementById('key-error').textContent.includes('not accepted'));
    await p.fill('#key-input', 'sesame');
    await p.press('#key-input', 'Enter');
    await p.waitForSelector('#status.live', { timeout: 10000 });
    assert.ok(!(await p.isVisible('#key-overlay')));
    assert.equal(await p.evaluate(() => sessionStorage.getItem('gpu-accel-api-key')), 'sesame');
  } finally {
    await context.close();
    await guarded.stop();
  }
});

test('with --host-model the Host panel streams an answer beneath the figures it was given', { skip }, async () => {
  const hosted = await startServer({ args: ['-q', '--threads', '1', '--host-threads', '1', '--host-max-tokens', '12',
    '--host-ctx', '2048', '--host-model', path.join(sharedDir(), 'models/rwkv-tiny/tiny-rwkv-7v0-834K-FP32.bin')] });
  const context = await browser.newContext();
  try {
    const p = await context.newPage();
    const errors = [];
    p.on('pageerror', (e) => errors.push(String(e)));
    await p.goto(`${hosted.url}/`);
    await p.waitForFunction(() => document.getElementById('host-state').textContent.includes('tiny-rwkv-7v0'),
      null, { timeout: 10000 });
    await p.fill('#host-question', 'How many requests are running?');
    await p.click('#host-ask');
    await p.waitForFunction(() => document.getElementById('host-result').textContent.includes('host steps'),
      null, { timeout: 15000 });
    // The figures table came first and holds the server's computed values.
    const rows = await p.$$eval('#host-figures tr', (trs) => trs.map((tr) => tr.textContent));
    assert.ok(rows.some((r) => r.startsWith('requests running') && r.endsWith('0')), rows.join('\n'));
    assert.ok((await p.textContent('#host-answer')).length > 0, 'the host answer is empty');
    assert.match(await p.textContent('#host-result'), /finish: (length|stop)/);
    await p.click('#host-report');
    await p.waitForFunction(() => /\((request)\)/.test(document.getElementById('host-brief').textContent),
      null, { timeout: 15000 });
    assert.deepEqual(errors, []);
  } finally {
    await context.close();
    await hosted.stop();
  }
});
