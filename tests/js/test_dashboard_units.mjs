// The dashboard's pure modules in Node (no browser): the SSE parser against hand-written streams cut
// at every possible byte boundary, and the number formatting the panels rely on.
import test from 'node:test';
import assert from 'node:assert/strict';

import { SseParser, readSse } from '../../web/sse.js';
import * as fmt from '../../web/format.js';
import { niceCeil } from '../../web/charts.js';

function parseAll(chunks) {
  const events = [];
  const parser = new SseParser((e) => events.push(e));
  for (const c of chunks) parser.push(c);
  parser.end();
  return events;
}

const STREAM =
  ': a comment\r\n' +
  'data: {"a":1}\n\n' +
  'event: ping\r\ndata:no-space\r\n\r\n' +
  'data: line one\ndata: line two\n\n' +
  'data: [DONE]\r\r' +
  'data: unterminated';
const EXPECTED = [
  { event: 'message', data: '{"a":1}' },
  { event: 'ping', data: 'no-space' },
  { event: 'message', data: 'line one\nline two' },
  { event: 'message', data: '[DONE]' },
];

test('SSE: whole stream', () => {
  assert.deepEqual(parseAll([STREAM]), EXPECTED);
});

test('SSE: the same events whatever the chunk boundaries (CR LF split included)', () => {
  for (let i = 0; i <= STREAM.length; i++) {
    for (const j of [i, Math.min(STREAM.length, i + 1), Math.min(STREAM.length, i + 7)]) {
      const chunks = [STREAM.slice(0, i), STREAM.slice(i, j), STREAM.slice(j)];
      assert.deepEqual(parseAll(chunks), EXPECTED, `split at ${i}/${j}`);
    }
  }
});

test('SSE: readSse over a byte stream with multi-byte UTF-8 split across chunks', async () => {
  const bytes = new TextEncoder().encode('data: héllo ✓\n\ndata: 2\n\n');
  const body = new ReadableStream({
    start(controller) {
      for (let i = 0; i < bytes.length; i += 3) controller.enqueue(bytes.slice(i, i + 3));
      controller.close();
    },
  });
  const events = [];
  for await (const e of readSse(new Response(body))) events.push(e.data);
  assert.deepEqual(events, ['héllo ✓', '2']);
});

test('format: units and missing values', () => {
  assert.equal(fmt.bytes(268435456), '256 MiB');
  assert.equal(fmt.bytes(1171200), '1.1 MiB');
  assert.equal(fmt.bytes(512), '512 B');
  assert.equal(fmt.count(292800), '293K');
  assert.equal(fmt.count(7.24e9), '7.2B');
  assert.equal(fmt.ms(850), '850 ms');
  assert.equal(fmt.ms(12500), '12.5 s');
  assert.equal(fmt.duration(3725), '1h 2m');
  assert.equal(fmt.int(1234567), '1,234,567');
  assert.equal(fmt.percent(null), fmt.DASH);
  assert.equal(fmt.num(undefined), fmt.DASH);
  assert.equal(fmt.fraction(5, 20), 0.25);
  assert.equal(fmt.fraction(30, 20), 1);
  assert.equal(fmt.fraction(5, null), null);
  assert.equal(fmt.rate(0.000191), '0.00019');
});

test('format: the header model line names the precision the weights run in', () => {
  const m = { arch: 'llama', format: 'gguf', n_params: 260000, weight_bytes: 1171200,
    weight_types: { F32: 40, F8_B128: 8 }, precision: 'fp8', n_ctx: 512 };
  assert.deepEqual(fmt.modelMeta(m), ['llama', 'gguf', '260K params', '1.1 MiB weights', 'F32, F8_B128',
    'precision fp8', 'ctx 512']);
  assert.deepEqual(fmt.modelMeta({ arch: 'llama' }), ['llama']);  // an older server: no precision field
});

test('charts: round axis maxima', () => {
  assert.equal(niceCeil(0), 1);
  assert.equal(niceCeil(7), 10);
  assert.equal(niceCeil(11), 20);
  assert.equal(niceCeil(210), 250);
  assert.equal(niceCeil(100), 100);
  assert.equal(niceCeil(0.03), 0.05);
});

// The Host panel's pure helpers (web/host.js): figures read as the server's table shows them, and the
// panel's state and brief lines.
import { figureText, hostStateText, briefLine } from '../../web/host.js';

test('host panel: figure text, state and brief lines', () => {
  assert.equal(figureText({ value: '41.2', unit: 'ms' }), '41.2 ms');
  assert.equal(figureText({ value: '3', unit: '' }), '3');
  assert.equal(figureText({ value: 'n/a', unit: 'ms' }), 'n/a');
  assert.equal(hostStateText(null), 'no host information');
  assert.match(hostStateText({ enabled: false }), /--host-model/);
  assert.equal(hostStateText({ enabled: true, model: 'tiny', device: 'cpu, 1 threads', state: 'paused', steps: 7,
    pauses: 2 }), 'tiny on cpu, 1 threads · paused (main work has priority) · 7 steps · 2 pauses');
  assert.equal(briefLine(null), 'no brief yet');
  assert.equal(briefLine({ created: '2026-01-01T00:00:00Z', trigger: 'schedule', summary: 'All quiet.' }),
    '2026-01-01T00:00:00Z (schedule): All quiet.');
  assert.equal(briefLine({ created: 'T', trigger: 'request', summary: null, summary_status: 'no host model' }),
    'T (request): (no host model)');
});
