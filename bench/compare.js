'use strict';
// Side-by-side table of `presence-load -json` results:
//   node bench/compare.js presenced.json node.json [--md]
//   node bench/compare.js p-idle.json,p-typing.json n-idle.json,n-typing.json   (merged per side)
// For each figure: presenced, Node, the ratio presenced/Node and which is better
// (by the figure's own direction: lower latency/memory/CPU, higher rate; "none" for
// conditions such as the CPU other processes used meanwhile). When a side's list holds a
// scenario more than once (bench/run.sh's rounds), each figure is the mean of its values, and
// the last column gives each side's values in the order of the list.
const fs = require('node:fs');

const files = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const md = process.argv.includes('--md');
if (files.length !== 2) {
  console.error('usage: node bench/compare.js presenced.json node.json [--md]');
  process.exit(2);
}
// load reads one result, or merges a comma-separated list of results (one per scenario).
function load(list) {
  const parts = list.split(',').filter(Boolean).map((f) => JSON.parse(fs.readFileSync(f, 'utf8')));
  return {
    server: parts[0].server,
    conditions: parts[0].conditions,
    seconds: parts.reduce((s, p) => s + p.seconds, 0),
    scenarios: parts.flatMap((p) => p.scenarios),
    failed: parts.flatMap((p) => p.failed),
    figures: parts.flatMap((p) => p.figures),
  };
}
const [a, b] = files.map(load);

function fmt(v) {
  if (v === undefined) return '-';
  const x = Math.abs(v);
  if (x >= 100) return v.toFixed(0);
  if (x >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

const key = (f) => `${f.scenario}/${f.name}`;
// values groups a side's figures by key, in the order of its list.
function values(figs) {
  const m = new Map();
  for (const f of figs) {
    if (!m.has(key(f))) m.set(key(f), []);
    m.get(key(f)).push(f.value);
  }
  return m;
}
const mean = (vs) => (vs && vs.length ? vs.reduce((s, v) => s + v, 0) / vs.length : undefined);
const avals = values(a.figures);
const bvals = values(b.figures);
const rounds = Math.max(...[...avals.values(), ...bvals.values()].map((vs) => vs.length), 1);
const seen = new Set();
const rows = [];
for (const f of a.figures.concat(b.figures)) {
  const k = key(f);
  if (seen.has(k)) continue;
  seen.add(k);
  const va = mean(avals.get(k));
  const vb = mean(bvals.get(k));
  let ratio = '-';
  let better = '-';
  if (va !== undefined && vb !== undefined) {
    if (vb !== 0) ratio = (va / vb).toFixed(2);
    else if (va === 0) ratio = '1.00';
    if (f.better === 'none') better = '(condition)';
    else if (va === vb) better = 'same';
    else if ((f.better === 'lower') === va < vb) better = 'presenced';
    else better = 'Node';
  }
  const row = [f.scenario, f.name, f.unit, fmt(va), fmt(vb), ratio, better];
  if (rounds > 1) {
    const list = (vs) => (vs || []).map(fmt).join(' / ') || '-';
    row.push(`${list(avals.get(k))} · ${list(bvals.get(k))}`);
  }
  rows.push(row);
}
const head = ['scenario', 'figure', 'unit', 'presenced', 'Node', 'presenced/Node', 'better'];
if (rounds > 1) head.push('each round: presenced · Node');

function note(label, r) {
  const failed = r.failed && r.failed.length ? `; FAILED: ${r.failed.join(' | ')}` : '';
  return `${label}: scenarios done ${r.scenarios.join(', ') || 'none'}${failed}; ${Math.round(r.seconds)} s`;
}

if (md) {
  console.log('| ' + head.join(' | ') + ' |');
  console.log('|' + head.map((_, i) => (i >= 3 && i <= 5 ? '---:' : '---')).join('|') + '|');
  for (const r of rows) console.log('| ' + r.join(' | ') + ' |');
  console.log('');
  console.log('- ' + note('presenced', a));
  console.log('- ' + note('Node', b));
} else {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (r) => r.map((c, i) => (i >= 3 && i <= 5 ? String(c).padStart(w[i]) : String(c).padEnd(w[i]))).join('  ').trimEnd();
  console.log(line(head));
  for (const r of rows) console.log(line(r));
  console.log(note('presenced', a));
  console.log(note('Node', b));
}
