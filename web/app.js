// The dashboard: polls /api/stats once a second and renders it; wires the chat box, the Host panel
// (host.js) and the API key.
//
// Everything shown comes from one JSON answer (see apps/server/dashboard_routes.cpp), so a render
// is a pure function of the latest answer plus the page's own 2-minute history of rates (kept here:
// the server keeps no time series). Charts use the server's clock (time_unix_ms) so a skewed client
// clock cannot shift them. When /api/stats answers 401 the page asks for the key, keeps it in
// sessionStorage (this tab only) and sends it as a Bearer token, to the chat as well.
import * as fmt from './format.js';
import { TimeChart, legend } from './charts.js';
import { Chat } from './chat.js';
import { HostPanel } from './host.js';

const POLL_MS = 1000;
const WINDOW_MS = 120000;
const KEY_STORAGE = 'gpu-accel-api-key';
const COLORS = { green: '#3fb950', blue: '#58a6ff', violet: '#bc8cff', amber: '#d29922', teal: '#39c5cf' };

const $ = (id) => document.getElementById(id);
const state = {
  apiKey: sessionStorage.getItem(KEY_STORAGE) || '',
  samples: [], // [{t, gen, prompt, gpu, gpuMem, cpu, proc}]
  stats: null,
  utilHasGpu: null,
};

function authHeaders() {
  return state.apiKey ? { Authorization: `Bearer ${state.apiKey}` } : {};
}

function setText(id, text) {
  const node = $(id);
  if (node.textContent !== text) node.textContent = text;
}

// A labelled bar: fraction in [0, 1] or null (unknown: hatched); warn/hot thresholds color it.
function meter(id, fraction, text, { warn = 0.8, hot = 0.95 } = {}) {
  const root = $(id);
  root.querySelector('.value').textContent = text;
  const bar = root.querySelector('.bar');
  const fill = root.querySelector('.fill');
  bar.classList.toggle('unknown', fraction === null);
  // A tiny non-zero fraction still shows a sliver, so "0.1% of the ceiling" does not read as idle.
  const shown = fraction > 0 ? Math.max(fraction, 0.005) : 0;
  fill.style.width = `${(shown * 100).toFixed(1)}%`;
  fill.classList.toggle('warn', fraction !== null && fraction >= warn && fraction < hot);
  fill.classList.toggle('hot', fraction !== null && fraction >= hot);
}

const of = (value, ceiling, unit = '') =>
  `${typeof value === 'number' ? value : fmt.DASH}${unit} / ${typeof ceiling === 'number' ? ceiling : fmt.DASH}${unit}`;

// ---------------------------------------------------------------- header and KPI cards
function renderHeader(s) {
  const m = s.model || {};
  // GGUF files often name the model after its architecture ("llama"): the file name says more then.
  const file = (m.path || '').split('/').filter(Boolean).pop();
  setText('model-name', (m.name && m.name !== m.arch ? m.name : file) || m.name || 'model');
  setText('model-meta', fmt.modelMeta(m).join(' · '));
  $('model-meta').title = m.precision_detail ? `precision: ${m.precision_detail}` : '';
  const badge = $('device-badge');
  const kind = s.device?.kind || 'cpu';
  badge.className = `device-badge ${kind}`;
  badge.replaceChildren();
  const b = document.createElement('b');
  b.textContent = kind === 'cuda' ? 'CUDA' : kind.toUpperCase();
  badge.append(b, document.createTextNode(s.device?.name || ''));
  badge.title = s.device?.id || '';
  const up = (s.time_unix_ms - s.started_unix_ms) / 1000;
  setStatus('live', `live · up ${fmt.duration(up)}`);
}

function setStatus(kind, text) {
  $('status').className = `status ${kind}`;
  setText('status-text', text);
}

function renderKpis(s) {
  const q = s.scheduler || {};
  setText('gen-tps', fmt.num(q.generation_tokens_per_second, 1));
  setText('prompt-tps', fmt.num(q.prompt_tokens_per_second, 1));
  setText('generated-total', fmt.int(q.generated_tokens_total));
  setText('prompt-total', fmt.int(q.prompt_tokens_total));
  setText('running', fmt.int(q.running));
  setText('queued', fmt.int(q.queued));
  setText('max-running', fmt.int(q.max_running));
  setText('finished', fmt.int(q.requests_finished));
  setText('cancelled', fmt.int(q.requests_cancelled));

  const total = q.kv_blocks_total || 0;
  const used = q.kv_blocks_used || 0;
  const cached = q.kv_blocks_cached || 0;
  setText('kv-percent', total ? fmt.percent((100 * used) / total, used && used < total / 100 ? 1 : 0) : fmt.DASH);
  const bar = $('kv-bar');
  bar.querySelector('.used').style.width = total ? `${(100 * used) / total}%` : '0';
  bar.querySelector('.cached').style.width = total ? `${(100 * cached) / total}%` : '0';
  // a recurrent model (RWKV) keeps a state per sequence and reuses prompt states instead of prefix blocks
  const reuse = q.recurrent_state
    ? `${fmt.int(q.prompt_states_cached || 0)} prompt states kept · ${fmt.int(q.prompt_state_hits || 0)} reused`
    : `${fmt.int(cached)} cached prefixes`;
  setText('kv-detail', total ? `${fmt.int(used)} of ${fmt.int(total)} blocks · ${reuse}` : 'no KV figures');
}

// ---------------------------------------------------------------- efficiency, GPU, CPU
function renderThroughput(s) {
  const t = s.throughput || {};
  const bw = fmt.fraction(t.achieved_gbs, t.ceiling_gbs);
  meter('m-bandwidth', bw, t.ceiling_gbs
    ? `${fmt.rate(t.achieved_gbs)} of ${fmt.rate(t.ceiling_gbs)} GB/s · ${fmt.percent(100 * bw, bw < 0.1 ? 1 : 0)}`
    : `${fmt.rate(t.achieved_gbs)} GB/s · ceiling unknown`, { warn: 2, hot: 2 });
  const fl = fmt.fraction(t.achieved_tflops, t.ceiling_tflops);
  meter('m-compute', fl, t.ceiling_tflops
    ? `${fmt.rate(t.achieved_tflops)} of ${fmt.rate(t.ceiling_tflops)} TFLOP/s · ${fmt.percent(100 * fl, fl < 0.1 ? 1 : 0)}`
    : `${fmt.rate(t.achieved_tflops)} TFLOP/s · no peak known for this device`, { warn: 2, hot: 2 });
  const q = s.scheduler || {};
  setText('decode-steps', fmt.num(t.decode_steps_per_second, 1));
  setText('weights-per-step', fmt.bytes(q.weight_bytes ?? s.model?.weight_bytes));
  setText('tps-per-seq', q.running > 0 ? fmt.num(q.generation_tokens_per_second / q.running, 1) : fmt.DASH);
  setText('ceiling-source', t.ceiling_source ? `Ceiling: ${t.ceiling_source}.` : '');
}

function renderGpu(s) {
  const g = s.gpu;
  $('gpu-present').hidden = !g;
  $('gpu-absent').hidden = !!g;
  if (!g) {
    setText('gpu-name', '');
    setText('gpu-reason', s.device?.reason || 'NVML reported no GPU.');
    return;
  }
  setText('gpu-name', g.count > 1 ? `${g.name} · #${g.index} of ${g.count}` : g.name);
  meter('m-gpu-util', g.utilization_gpu_percent == null ? null : g.utilization_gpu_percent / 100,
    fmt.percent(g.utilization_gpu_percent), { warn: 2, hot: 2 });
  meter('m-gpu-mem', fmt.fraction(g.memory_used_bytes, g.memory_total_bytes),
    `${fmt.bytes(g.memory_used_bytes)} / ${fmt.bytes(g.memory_total_bytes)}`);
  meter('m-gpu-power', fmt.fraction(g.power_w, g.power_limit_w),
    `${fmt.num(g.power_w, 0)} W / ${fmt.num(g.power_limit_w, 0)} W`);
  meter('m-gpu-sm', fmt.fraction(g.sm_clock_mhz, g.sm_clock_max_mhz), `${of(g.sm_clock_mhz, g.sm_clock_max_mhz, ' MHz')}`,
    { warn: 2, hot: 2 });
  setText('gpu-temp', g.temperature_c == null ? fmt.DASH : `${g.temperature_c} °C`);
  setText('gpu-mem-util', fmt.percent(g.utilization_memory_percent));
  setText('gpu-mem-clock', g.memory_clock_mhz == null ? fmt.DASH : `${fmt.int(g.memory_clock_mhz)} MHz`);
  setText('gpu-cc', g.compute_capability || fmt.DASH);
}

function renderCpu(s) {
  const c = s.cpu || {};
  setText('cpu-name', c.model_name || '');
  const cores = c.cores || 1;
  meter('m-cpu-process', c.process_cpu_percent == null ? null : c.process_cpu_percent / (100 * cores),
    c.process_cpu_percent == null ? fmt.DASH : `${fmt.num(c.process_cpu_percent / 100, 1)} of ${cores} cores`, { warn: 2, hot: 2 });
  meter('m-cpu-machine', c.machine_cpu_percent == null ? null : c.machine_cpu_percent / 100, fmt.percent(c.machine_cpu_percent),
    { warn: 2, hot: 2 });
  meter('m-cpu-mem', fmt.fraction(c.process_rss_bytes, c.mem_total_bytes),
    `${fmt.bytes(c.process_rss_bytes)} of ${fmt.bytes(c.mem_total_bytes)}`);
  setText('cpu-cores', String(cores));
  const usedSys = c.mem_total_bytes != null && c.mem_available_bytes != null ? c.mem_total_bytes - c.mem_available_bytes : null;
  setText('cpu-sysmem', `${fmt.bytes(usedSys)} / ${fmt.bytes(c.mem_total_bytes)}`);
  setText('cpu-copy', c.copy_bandwidth_gbs == null ? 'measuring…' : `${fmt.num(c.copy_bandwidth_gbs, 1)} GB/s`);
}

// ---------------------------------------------------------------- charts and table
const tpsSeries = [
  { key: 'gen', label: 'generation tok/s', color: COLORS.green },
  { key: 'prompt', label: 'prompt tok/s', color: COLORS.blue },
];
const latencySeries = [
  { key: 'total', label: 'total', color: COLORS.violet, dots: true },
  { key: 'ttft', label: 'TTFT', color: COLORS.amber, dots: true },
];
const charts = {
  tps: new TimeChart($('chart-tps'), { series: tpsSeries, windowMs: WINDOW_MS, format: (v) => fmt.count(v) }),
  latency: new TimeChart($('chart-latency'), { series: latencySeries, windowMs: WINDOW_MS, gapMs: Infinity, minMax: 10,
    format: (v) => (v >= 1000 ? `${+(v / 1000).toFixed(1)}s` : `${Math.round(v)}ms`) }),
  util: null,
};
legend($('legend-tps'), tpsSeries);
legend($('legend-latency'), latencySeries);

function utilChart(hasGpu) {
  const series = hasGpu
    ? [{ key: 'gpu', label: 'GPU', color: COLORS.green }, { key: 'gpuMem', label: 'GPU mem', color: COLORS.teal },
      { key: 'cpu', label: 'CPU', color: COLORS.blue }]
    : [{ key: 'cpu', label: 'machine CPU', color: COLORS.blue }, { key: 'proc', label: 'server', color: COLORS.violet }];
  legend($('legend-util'), series);
  return new TimeChart($('chart-util'), { series, windowMs: WINDOW_MS, minMax: 100, format: (v) => `${Math.round(v)}%` });
}

function renderCharts(s) {
  const now = s.time_unix_ms;
  charts.tps.render(state.samples, now);
  const hasGpu = !!s.gpu;
  if (state.utilHasGpu !== hasGpu) {
    state.utilHasGpu = hasGpu;
    charts.util = utilChart(hasGpu);
  }
  charts.util.render(state.samples, now);
  const points = (s.recent_requests || []).map((r) => ({ t: r.finished_unix_ms, ttft: r.ttft_ms, total: r.total_ms }));
  charts.latency.render(points, now, { emptyText: 'no requests in the last 2 minutes' });
}

function renderRecent(s) {
  const rows = (s.recent_requests || []).slice(-50).reverse();
  setText('recent-count', rows.length ? `last ${rows.length}` : '');
  const tbody = $('recent-body');
  const key = rows.length ? `${rows.length}:${rows[0].id}:${rows[0].finished_unix_ms}` : 'empty';
  if (tbody.dataset.key === key) return; // unchanged: keep the user's scroll and selection
  tbody.dataset.key = key;
  tbody.replaceChildren();
  if (!rows.length) {
    const tr = tbody.insertRow();
    const td = tr.insertCell();
    td.colSpan = 8;
    td.className = 'empty';
    td.textContent = 'no finished requests yet';
    return;
  }
  for (const r of rows) {
    const tr = tbody.insertRow();
    const cell = (text, cls) => {
      const td = tr.insertCell();
      td.textContent = text;
      if (cls) td.className = cls;
      return td;
    };
    cell(new Date(r.finished_unix_ms).toLocaleTimeString([], { hour12: false }));
    cell(String(r.id || '').slice(-12), 'mono').title = r.id || '';
    cell(fmt.int(r.prompt_tokens), 'n');
    cell(fmt.int(r.completion_tokens), 'n');
    cell(fmt.ms(r.ttft_ms), 'n');
    cell(fmt.ms(r.total_ms), 'n');
    const genMs = r.total_ms - r.ttft_ms;
    cell(r.completion_tokens > 1 && genMs > 0 ? fmt.num(((r.completion_tokens - 1) * 1000) / genMs, 1) : fmt.DASH, 'n');
    const pill = document.createElement('span');
    pill.className = `pill ${r.finish_reason || ''}`;
    pill.textContent = r.finish_reason || fmt.DASH;
    tr.insertCell().appendChild(pill);
  }
}

// ---------------------------------------------------------------- polling and the API key
function record(s) {
  const g = s.gpu;
  const c = s.cpu || {};
  const q = s.scheduler || {};
  state.samples.push({
    t: s.time_unix_ms,
    gen: q.generation_tokens_per_second ?? null,
    prompt: q.prompt_tokens_per_second ?? null,
    gpu: g?.utilization_gpu_percent ?? null,
    gpuMem: g?.utilization_memory_percent ?? null,
    cpu: c.machine_cpu_percent ?? null,
    proc: c.process_cpu_percent == null ? null : c.process_cpu_percent / (c.cores || 1),
  });
  const oldest = s.time_unix_ms - WINDOW_MS - 10000;
  while (state.samples.length && state.samples[0].t < oldest) state.samples.shift();
}

function render(s) {
  renderHeader(s);
  renderKpis(s);
  renderThroughput(s);
  renderGpu(s);
  renderCpu(s);
  renderCharts(s);
  renderRecent(s);
  hostPanel.render(s.host);
}

function askForKey(message) {
  $('key-overlay').hidden = false;
  setText('key-error', message || '');
  $('key-input').focus();
  setStatus('error', 'API key needed');
}

$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  state.apiKey = $('key-input').value.trim();
  sessionStorage.setItem(KEY_STORAGE, state.apiKey);
  $('key-overlay').hidden = true;
  poll();
});

let timer = null;
async function poll() {
  clearTimeout(timer);
  try {
    const response = await fetch('/api/stats', { headers: authHeaders(), cache: 'no-store', signal: AbortSignal.timeout(5000) });
    if (response.status === 401) {
      askForKey(state.apiKey ? 'That key was not accepted.' : '');
      return; // resumes when a key is entered
    }
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const s = await response.json();
    state.stats = s;
    record(s);
    render(s);
  } catch (e) {
    setStatus('error', `offline (${e.name === 'TimeoutError' ? 'timeout' : e.message})`);
  }
  timer = setTimeout(poll, POLL_MS);
}

const hostPanel = new HostPanel({
  state: $('host-state'), form: $('host-form'), question: $('host-question'), ask: $('host-ask'),
  answer: $('host-answer'), figures: $('host-figures'), brief: $('host-brief'), report: $('host-report'),
  housekeeping: $('host-housekeeping'), result: $('host-result'),
}, { authHeaders, onUnauthorized: () => askForKey('The host needs the API key.') });

new Chat({
  form: $('chat-form'), input: $('chat-input'), messages: $('chat-messages'), placeholder: $('chat-placeholder'),
  send: $('chat-send'), stop: $('chat-stop'), clear: $('chat-clear'), maxTokens: $('chat-max-tokens'),
  temperature: $('chat-temperature'), stats: $('chat-stats'),
}, { authHeaders, onUnauthorized: () => askForKey('The chat needs the API key.') });

window.addEventListener('resize', () => state.stats && renderCharts(state.stats));
poll();
