// The Host panel: the host assistant's state (from /api/stats "host"), a question box streamed from
// /v1/host/ask, the latest brief (/v1/host/report) and the admin's housekeeping button.
//
// What the host was given is shown before its words: the figures event that opens every answer is
// rendered as a table (computed by the server), then the generated text streams beneath it. The
// admin key (serve --host-admin-key) is asked for only when housekeeping answers 403, and kept in
// sessionStorage like the API key. The pure helpers at the top are unit-tested in Node.
import { readSse } from './sse.js';

const ADMIN_KEY_STORAGE = 'gpu-accel-host-admin-key';

// "41.2 ms", "3", "n/a": a figure as the server's table shows it (host_figures.cpp figure_text).
export function figureText(f) {
  if (!f) return '';
  return f.unit && f.value !== 'n/a' ? `${f.value} ${f.unit}` : String(f.value ?? '');
}

// One line for the panel's header from the status object (HostService::status_json), or null.
export function hostStateText(host) {
  if (!host) return 'no host information';
  if (!host.enabled) return 'off: start the server with --host-model SMALL';
  const state = host.state === 'paused' ? 'paused (main work has priority)' : host.state;
  return `${host.model} on ${host.device} · ${state} · ${host.steps} steps · ${host.pauses} pauses`;
}

// The latest brief in one line: its time, trigger and summary (or why there is none).
export function briefLine(brief) {
  if (!brief) return 'no brief yet';
  const text = brief.summary ?? `(${brief.summary_status})`;
  return `${brief.created} (${brief.trigger}): ${text}`;
}

function table(figures) {
  const t = document.createElement('table');
  t.className = 'host-figures';
  const body = document.createElement('tbody');
  for (const f of figures || []) {
    const tr = document.createElement('tr');
    const name = document.createElement('td');
    name.textContent = f.label;
    const value = document.createElement('td');
    value.className = 'n';
    value.textContent = figureText(f);
    tr.append(name, value);
    body.appendChild(tr);
  }
  t.appendChild(body);
  return t;
}

export class HostPanel {
  // ui: {state, form, question, ask, answer, figures, brief, report, housekeeping, result}
  // authHeaders(): the API key's header; onUnauthorized(): ask the user for it.
  constructor(ui, { authHeaders, onUnauthorized }) {
    this.ui = ui;
    this.authHeaders = authHeaders;
    this.onUnauthorized = onUnauthorized;
    this.controller = null;
    ui.form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.ask();
    });
    ui.report.addEventListener('click', () => this.report());
    ui.housekeeping.addEventListener('click', () => this.housekeeping());
  }

  render(host) {
    const text = hostStateText(host);
    if (this.ui.state.textContent !== text) this.ui.state.textContent = text;
    const enabled = Boolean(host?.enabled);
    this.ui.ask.disabled = !enabled || this.controller !== null;
    this.ui.report.disabled = !enabled;
    if (host?.latest_brief) this.ui.brief.textContent = briefLine(host.latest_brief);
  }

  async failure(response) {
    if (response.status === 401) this.onUnauthorized();
    try {
      return (await response.json()).error?.message || `HTTP ${response.status}`;
    } catch {
      return `HTTP ${response.status}`;
    }
  }

  async ask() {
    const question = this.ui.question.value.trim();
    if (!question || this.controller) return;
    const controller = new AbortController();
    this.controller = controller;
    this.ui.ask.disabled = true;
    this.ui.figures.replaceChildren();
    this.ui.answer.textContent = '';
    this.ui.answer.classList.add('streaming');
    try {
      const response = await fetch('/v1/host/ask', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream', ...this.authHeaders() },
        body: JSON.stringify({ question }),
        signal: controller.signal,
      });
      if (!response.ok) throw new Error(await this.failure(response));
      for await (const event of readSse(response)) {
        if (event.data === '[DONE]') break;
        const e = JSON.parse(event.data);
        if (e.error) throw new Error(e.error.message || 'the host reported an error');
        if (e.object === 'host.answer.figures') this.ui.figures.replaceChildren(table(e.figures));
        if (e.object === 'host.answer.delta') this.ui.answer.appendChild(document.createTextNode(e.text));
        if (e.object === 'host.answer.done') {
          this.ui.result.textContent = `${e.completion_tokens} tokens · ${e.host_steps} host steps · ` +
            `${e.pauses} pauses · finish: ${e.finish_reason}`;
        }
      }
    } catch (e) {
      if (e.name !== 'AbortError') this.ui.result.textContent = `Error: ${e.message}`;
    } finally {
      this.controller = null;
      this.ui.ask.disabled = false;
      this.ui.answer.classList.remove('streaming');
    }
  }

  async report() {
    this.ui.report.disabled = true;
    this.ui.brief.textContent = 'writing a brief…';
    try {
      const response = await fetch('/v1/host/report', { headers: this.authHeaders(), cache: 'no-store' });
      if (!response.ok) throw new Error(await this.failure(response));
      const brief = await response.json();
      this.ui.figures.replaceChildren(table(brief.figures));
      this.ui.brief.textContent = briefLine(brief);
    } catch (e) {
      this.ui.brief.textContent = `Error: ${e.message}`;
    } finally {
      this.ui.report.disabled = false;
    }
  }

  async housekeeping(retried = false) {
    const admin = sessionStorage.getItem(ADMIN_KEY_STORAGE) || '';
    const headers = { 'Content-Type': 'application/json', ...this.authHeaders() };
    if (admin) headers.Authorization = `Bearer ${admin}`;
    const response = await fetch('/v1/host/housekeeping', { method: 'POST', headers, body: '{}' });
    if (response.status === 403 && !retried) {
      const key = window.prompt('Housekeeping needs the host admin key (serve --host-admin-key):');
      if (!key) return;
      sessionStorage.setItem(ADMIN_KEY_STORAGE, key.trim());
      return this.housekeeping(true);
    }
    if (!response.ok) {
      this.ui.result.textContent = `Housekeeping: ${await this.failure(response)}`;
      return;
    }
    const report = await response.json();
    this.ui.result.textContent = report.actions.map((a) => `${a.action}: ${a.detail}`).join(' · ');
  }
}
