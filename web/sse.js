// A Server-Sent Events reader for fetch() responses.
//
// Why not EventSource: it can only GET, cannot send an Authorization header, and cannot be aborted
// per request. The chat POSTs to /v1/chat/completions and reads the body as a stream instead. The
// parser follows the WHATWG event-stream rules that matter here: lines end in \n, \r\n or \r (even
// split across network chunks), "data:" lines accumulate, a blank line dispatches, ':' lines are
// comments, and one optional space after the colon is dropped.

export class SseParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = '';
    this.data = [];
    this.event = '';
    this.pendingCR = false; // a chunk ended in '\r': a '\n' starting the next one belongs to it
  }

  push(text) {
    if (text === '') return; // an empty chunk must not forget a pending '\r'
    let s = text;
    if (this.pendingCR && s.startsWith('\n')) s = s.slice(1);
    this.pendingCR = false;
    this.buffer += s;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buffer);
      if (!m) break;
      if (m[0] === '\r' && m.index === this.buffer.length - 1) {
        // "\r" at the very end: wait to see whether "\n" follows in the next chunk.
        this.pendingCR = true;
      }
      const line = this.buffer.slice(0, m.index);
      this.buffer = this.buffer.slice(m.index + m[0].length);
      this.line(line);
    }
  }

  // The stream closed: an unterminated final event is dropped, as the specification says.
  end() {
    this.buffer = '';
    this.data = [];
    this.event = '';
  }

  line(line) {
    if (line === '') {
      if (this.data.length > 0) this.onEvent({ event: this.event || 'message', data: this.data.join('\n') });
      this.data = [];
      this.event = '';
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
  }
}

// Yields {event, data} for each event of a fetch Response body.
export async function* readSse(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const queue = [];
  const parser = new SseParser((e) => queue.push(e));
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.push(decoder.decode(value, { stream: true }));
      while (queue.length > 0) yield queue.shift();
    }
    parser.push(decoder.decode());
    parser.end();
    while (queue.length > 0) yield queue.shift();
  } finally {
    reader.releaseLock();
  }
}
