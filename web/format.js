// Number formatting for the dashboard: compact, unit-aware, and "—" for figures the server does not
// have (null), so a missing NVML field reads as missing rather than as zero.

export const DASH = '—';

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

// 1234.5 -> "1,235"; digits: fraction digits (default: fewer as the number grows).
export function num(v, digits) {
  if (!isNum(v)) return DASH;
  const d = digits ?? (Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2);
  return v.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
}

export function int(v) {
  return isNum(v) ? Math.round(v).toLocaleString('en-US') : DASH;
}

// Bytes in binary units: 268435456 -> "256 MiB".
export function bytes(v) {
  if (!isNum(v)) return DASH;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let x = v;
  while (Math.abs(x) >= 1024 && i < units.length - 1) {
    x /= 1024;
    i += 1;
  }
  return `${num(x, i === 0 ? 0 : x >= 100 ? 0 : 1)} ${units[i]}`;
}

// Parameter counts: 260000 -> "260K", 7.2e9 -> "7.2B".
export function count(v) {
  if (!isNum(v)) return DASH;
  const steps = [[1e12, 'T'], [1e9, 'B'], [1e6, 'M'], [1e3, 'K']];
  for (const [scale, suffix] of steps) {
    if (Math.abs(v) >= scale) return `${num(v / scale, v / scale >= 100 ? 0 : 1)}${suffix}`;
  }
  return String(Math.round(v));
}

export function percent(v, digits = 0) {
  return isNum(v) ? `${num(v, digits)}%` : DASH;
}

// Milliseconds: 850 -> "850 ms", 12500 -> "12.5 s".
export function ms(v) {
  if (!isNum(v)) return DASH;
  if (v < 1) return `${num(v, 2)} ms`;
  if (v < 1000) return `${num(v, v < 10 ? 1 : 0)} ms`;
  return `${num(v / 1000, 1)} s`;
}

// Seconds of uptime: 3725 -> "1h 2m".
export function duration(seconds) {
  if (!isNum(seconds) || seconds < 0) return DASH;
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

// A rate that may be small: 0.0042 TFLOP/s -> "0.0042".
export function rate(v) {
  if (!isNum(v)) return DASH;
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 100) return num(v, 0);
  if (a >= 1) return num(v, 2);
  return v.toPrecision(2);
}

// value / ceiling as a fraction in [0, 1], or null when either is missing.
export function fraction(value, ceiling) {
  if (!isNum(value) || !isNum(ceiling) || ceiling <= 0) return null;
  return Math.max(0, Math.min(1, value / ceiling));
}

// The header's model line: architecture, format, size, stored types, the precision the weights run in (the
// server's --precision: "native" is the file's own) and the context. m: the stats JSON's `model`.
export function modelMeta(m) {
  const types = m.weight_types ? Object.keys(m.weight_types).join(', ') : '';
  return [m.arch, m.format, m.n_params ? `${count(m.n_params)} params` : null,
    m.weight_bytes ? `${bytes(m.weight_bytes)} weights` : null, types || null,
    m.precision ? `precision ${m.precision}` : null,
    m.n_ctx ? `ctx ${int(m.n_ctx)}` : null].filter(Boolean);
}
