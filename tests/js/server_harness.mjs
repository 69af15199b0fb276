// Starts `gpu-accel serve` for Node tests and stops it afterwards.
//
// The binary comes from $GA_GPU_ACCEL_BIN (ctest sets it to the built target), else the usual build
// folders beside this checkout; test models from $GA_SHARED_DIR (default ../shared beside the
// checkout). The server is started on port 0 and the harness reads the port from its
// "listening on http://HOST:PORT" line, so parallel suites never collide. stop() sends SIGTERM and
// escalates to SIGKILL, so a hung server cannot hang the test run.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');

export function sharedDir() {
  return process.env.GA_SHARED_DIR || path.resolve(repoRoot, '..', 'shared');
}

export function modelPath(relative = 'models/tinyllamas/stories260K.gguf') {
  const p = path.join(sharedDir(), relative);
  if (!fs.existsSync(p)) throw new Error(`test model missing: ${p} (set GA_SHARED_DIR)`);
  return p;
}

export function serverBinary() {
  const candidates = process.env.GA_GPU_ACCEL_BIN
    ? [process.env.GA_GPU_ACCEL_BIN]
    : ['build', 'build-release', 'build-debug'].map((b) => path.join(repoRoot, b, 'bin', 'gpu-accel'));
  for (const c of candidates) if (fs.existsSync(c)) return c;
  throw new Error(`gpu-accel binary not found (tried ${candidates.join(', ')}); set GA_GPU_ACCEL_BIN`);
}

// A folder for screenshots and other artifacts: $GA_ARTIFACT_DIR, else build/test-artifacts.
export function artifactDir() {
  const dir = process.env.GA_ARTIFACT_DIR || path.join(repoRoot, 'build', 'test-artifacts');
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

// Starts the server; resolves to {url, port, log(), stop()}. args are added after -m MODEL.
export async function startServer({ model = modelPath(), args = [], env = {}, timeoutMs = 30000 } = {}) {
  const bin = serverBinary();
  const child = spawn(bin, ['serve', '-m', model, '--port', '0', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start in ${timeoutMs} ms:\n${output}`)), timeoutMs);
    const onData = (chunk) => {
      output += chunk.toString();
      const m = /listening on https?:\/\/[^\s:]+:(\d+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`server exited (code ${code}, signal ${signal}) before listening:\n${output}`));
    });
  });
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    log: () => output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
      const result = await exited;
      clearTimeout(killer);
      return result;
    },
  };
}
