// Plain HTTP requests (node:http, no keep-alive) and metrics reading.

import http from 'node:http';
import crypto from 'node:crypto';

/**
 * One HTTP request. Resolves with {status, headers, body}.
 *   body may be a string/Buffer; chunked: true sends it without
 *   Content-Length (Transfer-Encoding: chunked).
 */
export function request(url, { method = 'GET', headers = {}, body, chunked = false, timeoutMs = 10000 } = {}) {
  return new Promise((resolve, reject) => {
    const hdrs = { ...headers };
    if (body != null && !chunked) hdrs['Content-Length'] = Buffer.byteLength(body);
    const req = http.request(url, { method, headers: hdrs, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') });
      });
      res.on('error', (err) => { clearTimeout(timer); reject(err); });
    });
    const timer = setTimeout(() => req.destroy(new Error(`${method} ${url}: no response within ${timeoutMs} ms`)), timeoutMs);
    req.on('error', (err) => { clearTimeout(timer); reject(err); });
    if (body != null) {
      if (chunked) {
        // Two writes so that node really uses chunked encoding.
        const buf = Buffer.from(body);
        const half = Math.floor(buf.length / 2);
        req.write(buf.subarray(0, half));
        req.write(buf.subarray(half));
      } else {
        req.write(body);
      }
    }
    req.end();
  });
}

/** The headers of a websocket upgrade request (a fresh key), then extra. */
export function upgradeHeaders(extra = {}) {
  return {
    Connection: 'Upgrade',
    Upgrade: 'websocket',
    'Sec-WebSocket-Version': '13',
    'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64'),
    ...extra,
  };
}

/**
 * A raw websocket upgrade request. Resolves with {status, headers}: 101 if
 * the server switched protocols (the socket is then destroyed), else the
 * HTTP status of the refusal.
 */
export function upgradeRequest(url, headers = {}, timeoutMs = 10000) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      agent: false,
      headers: upgradeHeaders(headers),
    });
    const timer = setTimeout(() => req.destroy(new Error(`upgrade ${url}: no response within ${timeoutMs} ms`)), timeoutMs);
    req.on('upgrade', (res, socket) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ status: res.statusCode, headers: res.headers });
    });
    req.on('response', (res) => {
      clearTimeout(timer);
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers }));
    });
    req.on('error', (err) => { clearTimeout(timer); reject(err); });
    req.end();
  });
}

/** A new Engine.IO polling handshake URL (no sid). */
export function pollingUrl(base, query = '') {
  return `${base}/socket.io/?EIO=4&transport=polling${query ? `&${query}` : ''}`;
}

/** Opens an Engine.IO polling session with a raw GET; resolves with {sid, handshake, res}. */
export async function pollingHandshake(base, headers = {}) {
  const res = await request(pollingUrl(base), { headers });
  if (res.status !== 200) return { res };
  if (!res.body.startsWith('0')) throw new Error(`unexpected handshake body ${res.body}`);
  const handshake = JSON.parse(res.body.slice(1));
  return { sid: handshake.sid, handshake, res };
}

/** GET /metrics: the Prometheus text. */
export async function fetchMetrics(base) {
  const res = await request(`${base}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}: ${res.body}`);
  return res.body;
}

function parseLabels(s) {
  const labels = {};
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(s)) !== null) {
    labels[m[1]] = m[2].replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
  }
  return labels;
}

/**
 * The value of the sample `name` whose labels are exactly `labels`, from a
 * Prometheus text exposition; undefined when absent.
 */
export function metricValue(text, name, labels = {}) {
  const want = Object.entries(labels);
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = m[2] ? parseLabels(m[2]) : {};
    if (Object.keys(got).length !== want.length) continue;
    if (want.every(([k, v]) => got[k] === v)) return Number(m[3]);
  }
  return undefined;
}

/** Fetches /metrics and returns one value (undefined when the sample is absent). */
export async function metric(base, name, labels = {}) {
  return metricValue(await fetchMetrics(base), name, labels);
}

/** Like metric, for a counter: an absent labelled sample counts as 0. */
export async function counter(base, name, labels = {}) {
  return (await metric(base, name, labels)) ?? 0;
}
