// The chat box: a multi-turn conversation streamed from /v1/chat/completions.
//
// The request is a plain fetch POST with "stream": true, read as Server-Sent Events (sse.js) so
// each token shows as it arrives; Stop aborts the fetch, which closes the connection, and the
// server cancels the generation. A stopped or finished answer stays in the conversation, so the
// next turn continues from what the user saw.
import { readSse } from './sse.js';
import * as fmt from './format.js';

export class Chat {
  // ui: {form, input, messages, placeholder, send, stop, clear, maxTokens, temperature, stats}
  // authHeaders(): extra headers (the API key); onUnauthorized(): ask the user for the key.
  constructor(ui, { authHeaders, onUnauthorized }) {
    this.ui = ui;
    this.authHeaders = authHeaders;
    this.onUnauthorized = onUnauthorized;
    this.history = [];
    this.controller = null;
    this.epoch = 0; // bumped by Clear: an answer still winding down must not land in the new conversation

    ui.form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.submit();
    });
    ui.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.submit();
      }
    });
    ui.stop.addEventListener('click', () => this.controller?.abort());
    ui.clear.addEventListener('click', () => this.clear());
  }

  busy() {
    return this.controller !== null;
  }

  clear() {
    if (this.busy()) this.controller.abort();
    this.epoch += 1;
    this.history = [];
    this.ui.messages.replaceChildren(this.ui.placeholder);
    this.ui.stats.textContent = 'streams from /v1/chat/completions';
  }

  submit() {
    const text = this.ui.input.value.trim();
    if (!text || this.busy()) return;
    this.ui.input.value = '';
    this.run(text);
  }

  bubble(role, text) {
    this.ui.placeholder.remove();
    const div = document.createElement('div');
    div.className = `msg ${role}`;
    div.textContent = text;
    this.ui.messages.appendChild(div);
    this.scroll(true);
    return div;
  }

  scroll(force) {
    const m = this.ui.messages;
    if (force || m.scrollHeight - m.scrollTop - m.clientHeight < 60) m.scrollTop = m.scrollHeight;
  }

  setBusy(busy) {
    this.ui.send.disabled = busy;
    this.ui.stop.disabled = !busy;
  }

  async run(text) {
    const epoch = this.epoch;
    this.history.push({ role: 'user', content: text });
    this.bubble('user', text);
    const answer = this.bubble('assistant', '');
    answer.classList.add('streaming');
    const body = document.createTextNode('');
    answer.appendChild(body);

    const controller = new AbortController();
    this.controller = controller;
    this.setBusy(true);
    const started = performance.now();
    let firstTokenAt = null;
    let chunks = 0;
    let usage = null;
    let finish = null;
    let stopped = false;
    let error = null;
    const maxTokens = parseInt(this.ui.maxTokens.value, 10);
    const temperature = parseFloat(this.ui.temperature.value);
    const request = {
      messages: this.history.slice(),
      stream: true,
      stream_options: { include_usage: true },
      ...(Number.isFinite(maxTokens) && maxTokens > 0 ? { max_tokens: maxTokens } : {}),
      ...(Number.isFinite(temperature) && temperature >= 0 ? { temperature } : {}),
    };
    try {
      const response = await fetch('/v1/chat/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream', ...this.authHeaders() },
        body: JSON.stringify(request),
        signal: controller.signal,
      });
      if (response.status === 401) this.onUnauthorized();
      if (!response.ok) {
        let message = `HTTP ${response.status}`;
        try {
          message = (await response.json()).error?.message || message;
        } catch { /* not JSON: keep the status */ }
        throw new Error(message);
      }
      for await (const event of readSse(response)) {
        if (event.data === '[DONE]') break;
        const chunk = JSON.parse(event.data);
        if (chunk.error) throw new Error(chunk.error.message || 'the server reported an error');
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices?.[0];
        const delta = choice?.delta?.content;
        if (delta) {
          if (firstTokenAt === null) firstTokenAt = performance.now();
          chunks += 1;
          body.appendData(delta);
          this.scroll(false);
          this.showStats(started, firstTokenAt, usage?.completion_tokens ?? chunks, false);
        }
        if (choice?.finish_reason) finish = choice.finish_reason;
      }
    } catch (e) {
      if (e.name === 'AbortError') stopped = true;
      else error = e;
    } finally {
      this.controller = null;
      this.setBusy(false);
      answer.classList.remove('streaming');
    }

    if (epoch !== this.epoch) return; // cleared meanwhile: the bubbles are gone too
    const content = body.data;
    if (content) this.history.push({ role: 'assistant', content });
    else this.history.pop(); // nothing came back: the turn is dropped so it can be retried
    if (!content) answer.remove();
    if (error) {
      this.bubble('error', `Error: ${error.message}`);
      return;
    }
    const tokens = usage?.completion_tokens ?? chunks;
    const meta = document.createElement('span');
    meta.className = 'meta';
    const secs = (performance.now() - started) / 1000;
    const parts = [`${tokens} tokens`, `${fmt.num(secs, 2)} s`];
    if (firstTokenAt !== null) parts.push(`first token ${fmt.ms(firstTokenAt - started)}`);
    if (stopped) parts.push('stopped');
    else if (finish) parts.push(`finish: ${finish}`);
    meta.textContent = parts.join(' · ');
    if (content) answer.appendChild(meta);
    else if (stopped) this.bubble('error', 'Stopped before the first token.');
    this.showStats(started, firstTokenAt, tokens, true);
    this.scroll(false);
  }

  showStats(started, firstTokenAt, tokens, done) {
    if (firstTokenAt === null) return;
    const genSeconds = (performance.now() - firstTokenAt) / 1000;
    const tps = tokens > 1 && genSeconds > 0 ? (tokens - 1) / genSeconds : null;
    this.ui.stats.textContent =
      `${done ? 'last answer' : 'streaming'}: ${tokens} tokens · ${fmt.num(tps)} tok/s · TTFT ${fmt.ms(firstTokenAt - started)}`;
  }
}
