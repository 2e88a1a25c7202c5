// Helpers for the presence-event tests (test/2x-*.test.js): acks with
// timeouts, an event recorder per socket, unique ids, and topologies (one
// node, or a cluster of nodes sharing Redis and a fresh PostgreSQL database).

import { execFile, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { createClient } from 'redis';

import { startServer, SECRET } from './server.js';
import { tokenFor } from './jwt.js';
import { connect, sleep } from './client.js';

const here = path.dirname(fileURLToPath(import.meta.url));

/** RFC 3339 UTC with milliseconds, as the contract's `at`. */
export const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** A unique id with a readable stem: "B" -> "B-3f9a1c". Valid per the contract. */
export function uid(stem) {
  return `${stem}-${crypto.randomBytes(3).toString('hex')}`;
}

/**
 * Emits event (with payload, if given) and resolves with the ack's first
 * argument. Rejects if no ack arrives within timeoutMs.
 */
export async function ack(socket, event, ...args) {
  let timeoutMs = 5000;
  if (args.length && args[args.length - 1] && typeof args[args.length - 1] === 'object' && args[args.length - 1].__timeoutMs) {
    timeoutMs = args.pop().__timeoutMs;
  }
  try {
    return await socket.timeout(timeoutMs).emitWithAck(event, ...args);
  } catch (err) {
    throw new Error(`no ack for "${event}" ${JSON.stringify(args)} within ${timeoutMs} ms (${err.message})`);
  }
}

/** Option for ack(): ack(socket, ev, payload, within(10000)). */
export const within = (ms) => ({ __timeoutMs: ms });

/** Short text of an ack for assertion messages. */
export const show = (x) => JSON.stringify(x);

/**
 * Records every event a socket receives (socket.onAny), with the time it
 * arrived. Use mark() before an action and wait()/list() after it.
 */
export class Recorder {
  constructor(socket, name = socket.id) {
    this.socket = socket;
    this.name = name;
    this.events = []; // {event, payload, args, at}
    this._waiters = new Set();
    socket.onAny((event, ...args) => {
      this.events.push({ event, payload: args[0], args, at: Date.now() });
      for (const w of this._waiters) w();
    });
  }

  /** The index of the next event to arrive. */
  mark() { return this.events.length; }

  /** Recorded events named event (optionally matching pred) since index. */
  list(event, { since = 0, pred } = {}) {
    return this.events.slice(since).filter((e) => e.event === event && (!pred || pred(e.payload)));
  }

  /** Payloads of list(). */
  payloads(event, opts) { return this.list(event, opts).map((e) => e.payload); }

  /** Every recorded event since index, short, for messages. */
  dump(since = 0) {
    return this.events.slice(since).map((e) => `${e.event} ${JSON.stringify(e.payload)}`).join('\n    ') || '(none)';
  }

  /**
   * Resolves with the first recorded {event, payload, at} named event (and
   * matching pred) at index >= since; waits up to timeoutMs for it.
   */
  wait(event, { since = 0, pred, timeoutMs = 5000, label } = {}) {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.events.slice(since).find((e) => e.event === event && (!pred || pred(e.payload)));
        if (found) { done(); resolve(found); }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`${this.name}: no "${label ?? event}" within ${timeoutMs} ms; got since mark:\n    ${this.dump(since)}`));
      }, timeoutMs);
      const done = () => { clearTimeout(timer); this._waiters.delete(check); };
      this._waiters.add(check);
      check();
    });
  }

  /** Waits ms and returns the matching events recorded since index. */
  async quiet(event, ms, { since = this.mark(), pred } = {}) {
    await sleep(ms);
    return this.list(event, { since, pred });
  }
}

/**
 * Connects user (a token for userId signed with SECRET) to url over
 * websocket, with a Recorder. Resolves with {socket, session, rec, userId}.
 */
export async function connectUser(url, userId, { t, opts = {} } = {}) {
  const { socket, session } = await connect(url, {
    t,
    transports: ['websocket'],
    token: tokenFor(userId, SECRET),
    ...opts,
  });
  // The recorder starts after `session`; it records everything later.
  const rec = new Recorder(socket, userId);
  return { socket, session, rec, userId };
}

/** connectUser + conversation:join; throws unless the join is acked ok. */
export async function joinUser(url, userId, conversationId, { t } = {}) {
  const u = await connectUser(url, userId, { t });
  const joinAck = await ack(u.socket, 'conversation:join', { conversationId });
  if (!joinAck?.ok) throw new Error(`${userId} could not join ${conversationId}: ${show(joinAck)}`);
  return { ...u, joinAck };
}

// ---------------------------------------------------------------------------
// Cluster stores: PostgreSQL through psql, Redis through the redis package.

function psql(sql, { timeoutMs = 20000, db = 'postgres' } = {}) {
  return new Promise((resolve, reject) => {
    execFile('psql', ['-h', '127.0.0.1', '-U', 'postgres', '-d', db, '-v', 'ON_ERROR_STOP=1', '-qAtc', sql],
      { timeout: timeoutMs, env: { ...process.env, PGCONNECT_TIMEOUT: '5' } },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`psql ${sql}: ${err.message}\n${stderr}`));
        else resolve(stdout);
      });
  });
}

/** The last-seen time (ms) database db (a freshDatabase) stores for user, or null. */
export async function storedLastSeen(db, user) {
  if (!/^[A-Za-z0-9_.:@-]+$/.test(user)) throw new Error(`not a user id: ${user}`);
  const out = (await psql(`SELECT seen_at FROM last_seen WHERE user_id = '${user}'`, { db: db.name })).trim();
  return out === '' ? null : Number(out);
}

/**
 * Creates a fresh PostgreSQL database; resolves with {name, url, drop()}.
 * drop() removes it (WITH (FORCE)) and never throws.
 */
export async function freshDatabase(tag) {
  const name = `e2e_${tag}_${process.pid}_${crypto.randomBytes(3).toString('hex')}`.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  await psql(`CREATE DATABASE ${name}`);
  return {
    name,
    url: `postgres://postgres@127.0.0.1:5432/${name}?sslmode=disable`,
    async drop() {
      try { await psql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`); } catch { /* best effort */ }
    },
  };
}

export const REDIS_URL = 'redis://127.0.0.1:6379';

/** Deletes every Redis key starting with prefix (SCAN + UNLINK). Never throws. */
export async function flushRedisPrefix(prefix) {
  const c = createClient({ url: REDIS_URL, socket: { connectTimeout: 5000, reconnectStrategy: false } });
  c.on('error', () => {});
  try {
    await c.connect();
    let batch = [];
    for await (const key of c.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
      batch.push(key);
      if (batch.length >= 500) { await c.unlink(batch); batch = []; }
    }
    if (batch.length) await c.unlink(batch);
  } catch { /* best effort */ } finally {
    try { await c.quit(); } catch { /* gone */ }
  }
}

// ---------------------------------------------------------------------------
// Topologies.

export const TOPOLOGIES = ['single', 'cluster'];
// A cluster whose adapter uses sharded pub/sub (SPUBLISH/SSUBSCRIBE); the
// conversation and subscription files run on it too.
export const WITH_SHARDED = [...TOPOLOGIES, 'cluster-sharded'];

/**
 * Starts a topology. kind "single": one node; "cluster": `nodes` nodes
 * sharing Redis (a unique prefix, flushed afterwards) and db.url.
 * Every node gets --membership open unless args name a membership.
 * Resolves with {kind, servers, urls, url1, url2, prefix, killAll()}:
 * url1 is node 1, url2 node 2 (the same node in "single").
 * Everything started is killed in t.after.
 */
export async function startTopology(kind, { t, args = [], db, nodes = 2, tag = 'x', redisUrl = REDIS_URL } = {}) {
  const base = args.includes('--membership') ? [...args] : ['--membership', 'open', ...args];
  const servers = [];
  const topo = {
    kind,
    servers,
    prefix: null,
    async killAll() {
      await Promise.all(servers.map((s) => s.kill()));
      if (topo.prefix) await flushRedisPrefix(topo.prefix);
    },
  };
  t.after(() => topo.killAll());
  if (kind === 'single') {
    servers.push(await startServer({ args: base, nodeId: `e2e-${tag}-single` }));
  } else {
    if (!db) throw new Error('cluster topology needs a database');
    topo.prefix = `e2e-${tag}-${process.pid}-${crypto.randomBytes(3).toString('hex')}`;
    const clusterArgs = [...base, '--redis-url', redisUrl, '--redis-prefix', topo.prefix, '--database-url', db.url];
    if (kind === 'cluster-sharded') clusterArgs.push('--redis-sharded', 'true');
    // The first node migrates the database alone; the others start together.
    servers.push(await startServer({ args: clusterArgs, nodeId: `e2e-${tag}-n1` }));
    const rest = [];
    for (let i = 2; i <= nodes; i++) rest.push(startServer({ args: clusterArgs, nodeId: `e2e-${tag}-n${i}` }));
    servers.push(...await Promise.all(rest));
  }
  topo.urls = servers.map((s) => s.url);
  topo.url1 = topo.urls[0];
  topo.url2 = topo.urls[1] ?? topo.urls[0];
  return topo;
}

/**
 * startTopology, then user A on node 1 and user B on node 2 joined to one
 * new conversation c. Resolves with {topo, c, A, B, a, b}: a and b are
 * their joinUser results.
 */
export async function startPair(kind, { t, db, args, tag }) {
  const topo = await startTopology(kind, { t, db, args, tag });
  const c = uid('c');
  const A = uid('A');
  const B = uid('B');
  const a = await joinUser(topo.url1, A, c, { t });
  const b = await joinUser(topo.url2, B, c, { t });
  return { topo, c, A, B, a, b };
}

/**
 * For a test file: one fresh database for the cluster topology, created in
 * before() and dropped in after(). Returns a getter object {db}.
 */
export function clusterDatabase(kind, { before, after, tag }) {
  const holder = { db: null };
  if (!kind.startsWith('cluster')) return holder;
  before(async () => { holder.db = await freshDatabase(tag); });
  after(async () => { await holder.db?.drop(); });
  return holder;
}

// ---------------------------------------------------------------------------
// A socket.io client in another process (killed with SIGKILL by tests).

/**
 * Runs lib/child-client.js: connects userId to url over websocket, joins
 * conversationId, prints "joined". Resolves with {child, pid, kill(signal)}
 * once "joined" is printed. Killed in t.after.
 */
export function spawnChildClient(url, userId, conversationId, { t, timeoutMs = 10000 } = {}) {
  const child = spawn(process.execPath, [path.join(here, 'child-client.js'), url, tokenFor(userId, SECRET), conversationId],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  const onExit = () => { try { child.kill('SIGKILL'); } catch { /* gone */ } };
  process.on('exit', onExit);
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => { process.off('exit', onExit); resolve({ code, signal }); }));
  const handle = {
    child,
    pid: child.pid,
    exited,
    output: '',
    async kill(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
  t?.after(() => handle.kill('SIGKILL'));
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { handle.output += d; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { handle.kill(); reject(new Error(`child client did not join within ${timeoutMs} ms: ${handle.output}`)); }, timeoutMs);
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d) => {
      handle.output += d;
      if (handle.output.includes('joined')) { clearTimeout(timer); resolve(handle); }
    });
    exited.then((e) => { clearTimeout(timer); reject(new Error(`child client exited ${JSON.stringify(e)}: ${handle.output}`)); });
  });
}

/**
 * The display the contract expects for a visible lastSeen (already rounded
 * down to the minute) read at `at` (ms): the server computes it from the
 * rounded value, so a user gone two seconds may be "1 minute ago" once a
 * minute boundary passed. Returns the acceptable texts.
 */
export function recentDisplays(lastSeen, at = Date.now()) {
  const age = at - Date.parse(lastSeen);
  const texts = [];
  if (age < 62000) texts.push('last seen just now');
  if (age > 58000 && age < 122000) texts.push('last seen 1 minute ago');
  if (age > 118000 && age < 182000) texts.push('last seen 2 minutes ago');
  return texts;
}
