// Small SVG time-series charts (no library): a fixed time window ending "now", auto-scaled y axis
// with round gridlines, one polyline per series (the first also filled), and optional dots for
// event series such as per-request latencies.
//
// Coordinates are CSS pixels: the viewBox is reset to the element's size on every render, so text
// never stretches when the layout changes. Gaps longer than `gapMs` (the page was offline) break
// the line instead of drawing a misleading straight segment. Only presentation attributes are set
// (no style attributes), which the page's Content-Security-Policy allows.

const SVG_NS = 'http://www.w3.org/2000/svg';

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (parent) parent.appendChild(node);
  return node;
}

// The smallest 1/2/2.5/5 x 10^k at or above v (axis maxima that read well).
export function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v * (1 - 1e-9)) return m * p;
  return 10 * p;
}

export class TimeChart {
  // series: [{key, label, color, dots?: bool}]; format: y-axis label formatter.
  constructor(svg, { series, windowMs = 120000, gapMs = 5000, minMax = 1, format = (v) => String(v) }) {
    this.svg = svg;
    this.series = series;
    this.windowMs = windowMs;
    this.gapMs = gapMs;
    this.minMax = minMax;
    this.format = format;
  }

  // points: [{t: unix ms, [key]: number|null}], oldest first; nowMs: the right edge.
  render(points, nowMs, { emptyText = 'no data yet' } = {}) {
    const svg = this.svg;
    const width = Math.max(svg.clientWidth, 120);
    const height = Math.max(svg.clientHeight, 60);
    svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
    svg.replaceChildren();
    const m = { left: 46, right: 8, top: 8, bottom: 18 };
    const w = width - m.left - m.right;
    const h = height - m.top - m.bottom;
    const t0 = nowMs - this.windowMs;
    const visible = points.filter((p) => p.t >= t0 - this.gapMs && p.t <= nowMs + 1000);

    let maxV = 0;
    for (const p of visible) for (const s of this.series) if (typeof p[s.key] === 'number') maxV = Math.max(maxV, p[s.key]);
    const yMax = niceCeil(Math.max(maxV, this.minMax));
    const x = (t) => m.left + ((t - t0) / this.windowMs) * w;
    const y = (v) => m.top + h - (Math.max(0, v) / yMax) * h;

    const grid = el('g', { class: 'grid' }, svg);
    for (const f of [0, 0.5, 1]) {
      const gy = y(yMax * f);
      el('line', { x1: m.left, x2: m.left + w, y1: gy, y2: gy }, grid);
      el('text', { x: m.left - 6, y: gy + 4, 'text-anchor': 'end' }, grid).textContent = this.format(yMax * f);
    }
    const minutes = this.windowMs / 60000;
    for (const f of [0, 0.5, 1]) {
      const label = f === 1 ? 'now' : `-${+(minutes * (1 - f)).toFixed(1)}m`;
      el('text', { x: m.left + f * w, y: height - 4, 'text-anchor': f === 0 ? 'start' : f === 1 ? 'end' : 'middle' },
        grid).textContent = label;
    }

    const clip = `clip-${svg.id || Math.random().toString(36).slice(2)}`;
    const defs = el('defs', {}, svg);
    el('rect', { x: m.left, y: m.top - 4, width: w, height: h + 8 }, el('clipPath', { id: clip }, defs));
    const plot = el('g', { 'clip-path': `url(#${clip})` }, svg);

    let drew = false;
    this.series.forEach((s, index) => {
      const runs = [];
      let run = [];
      let lastT = null;
      for (const p of visible) {
        const v = p[s.key];
        if (typeof v !== 'number' || !Number.isFinite(v) || (lastT !== null && p.t - lastT > this.gapMs && !s.dots)) {
          if (run.length) runs.push(run);
          run = [];
        }
        if (typeof v === 'number' && Number.isFinite(v)) run.push([x(p.t), y(v)]);
        lastT = p.t;
      }
      if (run.length) runs.push(run);
      for (const r of runs) {
        drew = true;
        const d = r.map(([px, py], i) => `${i ? 'L' : 'M'}${px.toFixed(1)},${py.toFixed(1)}`).join('');
        if (index === 0 && !s.dots && r.length > 1) {
          const area = `${d}L${r[r.length - 1][0].toFixed(1)},${y(0)}L${r[0][0].toFixed(1)},${y(0)}Z`;
          el('path', { d: area, fill: s.color, 'fill-opacity': 0.12, stroke: 'none' }, plot);
        }
        el('path', { d, fill: 'none', stroke: s.color, 'stroke-width': s.dots ? 1 : 1.8, 'stroke-opacity': s.dots ? 0.45 : 1,
          'stroke-linejoin': 'round', 'stroke-linecap': 'round' }, plot);
        if (s.dots) for (const [px, py] of r) el('circle', { cx: px, cy: py, r: 3, fill: s.color }, plot);
      }
    });
    if (!drew) {
      el('text', { x: m.left + w / 2, y: m.top + h / 2, 'text-anchor': 'middle', class: 'empty' }, svg).textContent =
        emptyText;
    }
  }
}

// Fills a legend element with colored keys for the chart's series.
export function legend(container, series) {
  container.replaceChildren();
  for (const s of series) {
    const item = document.createElement('span');
    item.className = 'key';
    const swatch = document.createElementNS(SVG_NS, 'svg');
    swatch.setAttribute('width', '10');
    swatch.setAttribute('height', '10');
    el('rect', { width: 10, height: 10, rx: 2, fill: s.color }, swatch);
    item.append(swatch, document.createTextNode(s.label));
    container.appendChild(item);
  }
}
