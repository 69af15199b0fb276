// `serve --precision`: the choice made at load is in /api/stats as model.precision (what the dashboard's header
// shows) with the load-time line as model.precision_detail, and in /metrics as gpu_accel_model_info's precision
// label; the default is the weights as stored.
import test from 'node:test';
import assert from 'node:assert/strict';

import { modelPath, startServer } from './server_harness.mjs';

async function modelInfo(args) {
  const server = await startServer({ model: modelPath('fixtures/quant/fixture-f32.gguf'), args: ['-q', '--threads', '1', ...args] });
  try {
    const res = await fetch(`${server.url}/api/stats`);
    assert.equal(res.status, 200);
    const model = (await res.json()).model;
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const info = metrics.match(/^gpu_accel_model_info\{(.*)\} 1$/m);
    assert.ok(info, 'gpu_accel_model_info in /metrics');
    assert.match(info[1], new RegExp(`architecture="${model.arch}",precision="${model.precision}"$`));
    return model;
  } finally {
    await server.stop();
  }
}

test('stats: model.precision is native by default and fp8 / bf16 when asked', async () => {
  const native = await modelInfo([]);
  assert.equal(native.precision, 'native');
  assert.equal(native.precision_detail, 'native (weights as stored)');
  assert.deepEqual(native.weight_types, { F32: 21 });

  const fp8 = await modelInfo(['--precision', 'fp8', '--precision-keep', 'none']);
  assert.equal(fp8.precision, 'fp8');
  assert.match(fp8.precision_detail, /^fp8; 14 matrices F8_B128, kept F32: embeddings, output, norms$/);
  assert.deepEqual(fp8.weight_types, { F32: 7, F8_B128: 14 });
  assert.ok(fp8.weight_bytes < native.weight_bytes / 2);

  const bf16 = await modelInfo(['--precision', 'bf16']);
  assert.equal(bf16.precision, 'bf16');
  assert.deepEqual(bf16.weight_types, { F32: 5, BF16: 16 });
});
