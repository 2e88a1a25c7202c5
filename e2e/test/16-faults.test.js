// Faults, each bounded in time: Redis unreachable at start, Redis restarted
// (with an append-only file, and without persistence), PostgreSQL down for a minute during flushes,
// SIGTERM under load on one node. Private Redis and PostgreSQL servers
// (lib/faults.js), never the shared ones. A node killed with SIGKILL is in
// 24-disconnect (its users leave within 10 s).

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { startServer, SECRET, cpuSeconds } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { connect, closeClient, sleep, waitUntil } from '../lib/client.js';
import { request } from '../lib/http.js';
import { Recorder, uid, ack, show, freshDatabase, REDIS_URL, flushRedisPrefix } from '../lib/presence.js';
import { privateRedis, privatePostgres } from '../lib/faults.js';

const readyz = async (url) => {
  try { return await request(`${url}/readyz`, { timeoutMs: 3000 }); } catch (err) { return { status: 0, body: String(err) }; }
};

/**
 * A node on a redis-server of its own (aof: with an append-only file) and a
 * fresh database named db, with membership open and extra args. Resolves
 * with {redis, server, args} (args: the node's, to start another like it).
 */
async function nodeOnPrivateRedis(t, { aof, db: name, tag, args: extra }) {
  const redis = await privateRedis(t, { aof });
  await redis.start();
  const db = await freshDatabase(name);
  t.after(() => db.drop());
  const args = ['--redis-url', redis.url, '--database-url', db.url, '--membership', 'open', ...extra];
  const server = await startServer({ t, nodeId: uid(tag), args });
  return { redis, server, args };
}

/** The user's own presence through REST: the exact last-seen. */
async function ownPresence(url, user) {
  const res = await request(`${url}/v1/users/${encodeURIComponent(user)}/presence`, { headers: { Authorization: `Bearer ${tokenFor(user, SECRET)}` } });
  assert.equal(res.status, 200, res.body);
  return JSON.parse(res.body);
}


/**
 * One node on a fresh embedded store (last-seen flushed every `flush`,
 * no flap grace) and two users: the first stays connected, the second
 * connects and leaves. Resolves with {args, server, stays, ids}.
 */
async function crashSetup(t, flush, stems) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'presenced-sigkill-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const args = ['--data', path.join(dir, 'presenced.db'), '--membership', 'open', '--lastseen-flush-interval', flush, '--flap-grace', '0s'];
  const server = await startServer({ t, nodeId: uid('kill'), args });
  const ids = stems.map(uid);
  const { socket: stays } = await connect(server.url, { transports: ['websocket'], token: tokenFor(ids[0], SECRET) });
  const { socket: goes } = await connect(server.url, { transports: ['websocket'], token: tokenFor(ids[1], SECRET) });
  closeClient(goes);
  return { args, server, stays, ids };
}
describe('faults', { timeout: 300000 }, () => {
  it('Redis unreachable at start: the node starts, /readyz is 503 until Redis comes', { timeout: 60000 }, async (t) => {
    const redis = await privateRedis(t); // not started yet
    const db = await freshDatabase('fault_redis_start');
    t.after(() => db.drop());
    const server = await startServer({ t, nodeId: uid('nr'), args: ['--redis-url', redis.url, '--database-url', db.url, '--membership', 'open'] });
    const before = await readyz(server.url);
    assert.equal(before.status, 503, before.body);
    assert.match(before.body, /"redis":"unavailable"/);
    assert.doesNotMatch(before.body, new RegExp(String(redis.port)), '/readyz names no address');
    if (os.platform() === 'linux') {
      // Waiting for Redis is not a dial loop: it once spun a core.
      const cpu0 = cpuSeconds(server.pid);
      await sleep(3000);
      const used = cpuSeconds(server.pid) - cpu0;
      assert.ok(used < 0.5, `the idle node used ${used.toFixed(2)} CPU-seconds in 3 s while Redis was down`);
    }

    await redis.start();
    await waitUntil(async () => (await readyz(server.url)).status === 200, { timeoutMs: 20000, message: '/readyz 200 once Redis is up' });
    const { socket } = await connect(server.url, { t, transports: ['websocket'], token: tokenFor(uid('a'), SECRET) });
    const joined = await ack(socket, 'conversation:join', { conversationId: uid('c') });
    assert.equal(joined.ok, true, show(joined));
  });

  it('Redis restarted (AOF): clients stay connected, rosters heal, buffered last-seen is kept', { timeout: 90000 }, async (t) => {
    const { redis, server, args } = await nodeOnPrivateRedis(t, { aof: true, db: 'fault_redis_restart', tag: 'rr',
      args: ['--lastseen-flush-interval', '1h', '--flap-grace', '300ms', '--ttl', '6s'] });
    const conv = uid('rc');
    const [A, B] = [uid('stay'), uid('gone')];
    const a = await connect(server.url, { t, transports: ['websocket'], token: tokenFor(A, SECRET) });
    const rec = new Recorder(a.socket, A);
    assert.equal((await ack(a.socket, 'conversation:join', { conversationId: conv })).ok, true);
    const b = await connect(server.url, { transports: ['websocket'], token: tokenFor(B, SECRET) });
    assert.equal((await ack(b.socket, 'conversation:join', { conversationId: conv })).ok, true);
    const goneAt = Date.now();
    closeClient(b.socket);
    await rec.wait('presence:leave', { pred: (p) => p.userId === B, timeoutMs: 5000 });
    let own;
    await waitUntil(async () => { own = await ownPresence(server.url, B); return own.lastSeen !== null; }, { timeoutMs: 5000, message: "B's last-seen to be recorded" });
    assert.equal(own.status, 'offline', show(own));
    const lastSeen = Date.parse(own.lastSeen);
    assert.ok(Math.abs(lastSeen - goneAt) < 2000, `B's last-seen ${own.lastSeen} near ${new Date(goneAt).toISOString()}`);

    // Redis dies hard and comes back from its AOF
    await redis.stop();
    await sleep(1000);
    // meanwhile a state would reach this node's sockets alone: refused, as a typing change is
    for (const [ev, payload] of [['state:set', { conversationId: conv, state: { x: 1 } }], ['typing:start', { conversationId: conv }]]) {
      const r = await ack(a.socket, ev, payload);
      assert.equal(r.error?.code, 'unavailable', `${ev} without Redis: ${show(r)}`);
    }
    await redis.start();
    await waitUntil(async () => (await readyz(server.url)).status === 200, { timeoutMs: 20000, message: '/readyz 200 after the restart' });
    assert.ok(a.socket.connected, 'the client stayed connected');
    await waitUntil(async () => (await ack(a.socket, 'state:set', { conversationId: conv, state: { x: 2 } })).ok === true,
      { timeoutMs: 8000, message: 'state:set accepted again after the restart' });
    // within PRESENCE_TTL the roster holds A again (and never B)
    await waitUntil(async () => {
      const r = await ack(a.socket, 'conversation:join', { conversationId: conv }).catch(() => null);
      return r?.ok && r.online.some((m) => m.userId === A) && !r.online.some((m) => m.userId === B);
    }, { timeoutMs: 8000, message: 'the roster to hold A after the restart' });
    const hb = await ack(a.socket, 'heartbeat', { active: true });
    assert.equal(hb.ok, true, show(hb));

    // the node's last flush writes B's buffered last-seen: nothing was lost
    const stopped = await server.stop('SIGTERM', 20000);
    assert.equal(stopped.code, 0, show(stopped));
    const again = await startServer({ t, nodeId: uid('rr2'), args });
    const after = await ownPresence(again.url, B);
    assert.equal(after.lastSeen, own.lastSeen, 'the last-seen buffered in Redis across its restart reached the store');
  });

  it('Redis restarted without persistence: an idle user comes back away, a typing indicator still stops', { timeout: 90000 }, async (t) => {
    const { redis, server } = await nodeOnPrivateRedis(t, { aof: false, db: 'fault_redis_lost', tag: 'rl',
      args: ['--away-after', '2s', '--typing-ttl', '6s', '--flap-grace', '300ms'] });
    const conv = uid('rl');
    const [A, B, C] = [uid('watch'), uid('idle'), uid('types')];
    const a = await connect(server.url, { t, transports: ['websocket'], token: tokenFor(A, SECRET) });
    const rec = new Recorder(a.socket, A);
    assert.equal((await ack(a.socket, 'conversation:join', { conversationId: conv })).ok, true);
    assert.equal((await ack(a.socket, 'presence:subscribe', { userIds: [B] })).ok, true);
    const b = await connect(server.url, { t, transports: ['websocket'], token: tokenFor(B, SECRET) });
    assert.equal((await ack(b.socket, 'conversation:join', { conversationId: conv })).ok, true);
    await rec.wait('presence:update', { pred: (p) => p.userId === B && p.status === 'away', timeoutMs: 8000, label: 'B away' });
    const c = await connect(server.url, { t, transports: ['websocket'], token: tokenFor(C, SECRET) });
    assert.equal((await ack(c.socket, 'conversation:join', { conversationId: conv })).ok, true);
    const startedAt = Date.now();
    assert.equal((await ack(c.socket, 'typing:start', { conversationId: conv })).ok, true);
    await rec.wait('typing', { pred: (p) => p.userId === C && p.typing === true, timeoutMs: 5000 });

    // Redis dies and comes back empty
    const mark = rec.mark();
    await redis.stop();
    await sleep(500);
    await redis.start();
    await waitUntil(async () => (await readyz(server.url)).status === 200, { timeoutMs: 20000, message: '/readyz 200 after the restart' });
    // the node registers its sockets again: C's typing entry with them, whose stop comes at its expiry
    const off = await rec.wait('typing', { since: mark, pred: (p) => p.userId === C && p.typing === false, timeoutMs: 12000, label: "C's typing stop" });
    t.diagnostic(`typing:false ${off.at - startedAt} ms after typing:start (TTL 6 s)`);
    assert.ok(off.at - startedAt >= 5500, `not before the TTL: ${off.at - startedAt} ms`);
    const updates = rec.list('presence:update', { since: mark, pred: (p) => p.userId === B });
    assert.ok(!updates.some((e) => e.payload.status === 'online'), `B, idle, shown online after the loss:\n    ${rec.dump(mark)}`);
    // nor offline for a moment, before the node registered its sockets again
    assert.ok(!updates.some((e) => e.payload.status === 'offline'), `B, connected, shown offline after the loss:\n    ${rec.dump(mark)}`);
    const q = await ack(a.socket, 'presence:query', { userIds: [B] });
    assert.equal(q.presences?.[0]?.status, 'away', `B away after the loss: ${show(q)}`);
    // the others' joins are announced again (what they were shown stands); a socket is not told of its own
    assert.deepEqual(rec.list('presence:join', { since: mark, pred: (p) => p.userId === A }), [], rec.dump(mark));
    assert.ok(a.socket.connected && b.socket.connected && c.socket.connected, 'the clients stayed connected');
  });

  it('PostgreSQL down for a minute during flushes: no last-seen is lost', { timeout: 180000 }, async (t) => {
    const pg = await privatePostgres(t);
    const prefix = uid('pgdown');
    t.after(() => flushRedisPrefix(prefix));
    const args = ['--redis-url', REDIS_URL, '--redis-prefix', prefix, '--database-url', pg.url, '--membership', 'open',
      '--lastseen-flush-interval', '1s', '--flap-grace', '200ms'];
    const server = await startServer({ t, nodeId: uid('pg'), args });

    await pg.stop();
    const users = Array.from({ length: 20 }, (_, i) => uid(`pgu${i}`));
    const gone = new Map();
    for (const u of users) {
      const { socket } = await connect(server.url, { transports: ['websocket'], token: tokenFor(u, SECRET) });
      closeClient(socket);
      gone.set(u, Date.now());
    }
    await sleep(Number(process.env.PG_DOWN_MS ?? 60000)); // flushes fail all along
    assert.equal((await readyz(server.url)).status, 503, 'not ready while its store is down');
    await pg.start();
    try {
      await waitUntil(() => Number(pg.sql('SELECT count(*) FROM last_seen')) >= users.length, { timeoutMs: 45000, intervalMs: 500, message: 'every buffered last-seen flushed once PostgreSQL is back (the flush retries at least every 30 s ± 20 %)' });
    } catch (err) {
      throw new Error(`${err.message}; rows: ${pg.sql('SELECT count(*) FROM last_seen').trim()}; node warnings:\n${server.logs.filter((l) => l.level !== 'DEBUG' && l.level !== 'INFO').slice(-8).map((l) => JSON.stringify(l)).join('\n')}`);
    }
    const rows = new Map(pg.sql('SELECT user_id, seen_at FROM last_seen').trim().split('\n').map((l) => l.split('|')).map(([u, ms]) => [u, Number(ms)]));
    for (const u of users) {
      assert.ok(rows.has(u), `${u} has a row`);
      assert.ok(Math.abs(rows.get(u) - gone.get(u)) < 2000, `${u}: stored ${rows.get(u)}, disconnected at ${gone.get(u)}`);
    }
  });

  it('SIGTERM under load on one node: everyone offline with an exact last-seen, final flush, exit 0', { timeout: 90000 }, async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'presenced-sigterm-'));
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const args = ['--data', path.join(dir, 'presenced.db'), '--membership', 'open', '--handshake-limit', '0',
      '--lastseen-flush-interval', '1h', '--shutdown-timeout', '10s'];
    const server = await startServer({ t, nodeId: uid('st'), args });
    const conv = uid('stc');
    const users = Array.from({ length: 100 }, (_, i) => uid(`st${i}`));
    const sockets = [];
    for (const u of users) {
      const { socket } = await connect(server.url, { transports: ['websocket'], token: tokenFor(u, SECRET) });
      sockets.push(socket);
      socket.emit('conversation:join', { conversationId: conv });
    }
    // load: every socket heartbeats every 100 ms (1,000/s, within the per-socket limit)
    const timer = setInterval(() => { for (const s of sockets) if (s.connected) s.emit('heartbeat', { active: true }); }, 100);
    t.after(() => clearInterval(timer));
    await sleep(2000);
    const termAt = Date.now();
    const res = await server.stop('SIGTERM', 15000);
    const exitAt = Date.now();
    clearInterval(timer);
    for (const s of sockets) closeClient(s);
    assert.equal(res.code, 0, show(res));
    assert.ok(res.ms < 10000, `exited within the shutdown timeout (${res.ms} ms)`);

    const again = await startServer({ t, nodeId: uid('st2'), args });
    assert.ok(!again.logs.some((l) => /without a clean shutdown/.test(l.msg ?? '')), 'a clean shutdown leaves no online users to recover');
    for (const u of users) {
      const p = await ownPresence(again.url, u);
      assert.equal(p.status, 'offline', `${u}: ${show(p)}`);
      const seen = Date.parse(p.lastSeen);
      assert.ok(seen >= termAt - 50 && seen <= exitAt + 50, `${u}: last-seen ${p.lastSeen} between SIGTERM (${new Date(termAt).toISOString()}) and exit (${new Date(exitAt).toISOString()})`);
    }
  });

  it('SIGKILL of one node (embedded store): its online users get its last alive moment as last-seen, the others keep theirs', { timeout: 60000 }, async (t) => {
    const { args, server, stays, ids: [online, left] } = await crashSetup(t, '1s', ['kon', 'kleft']);
    const leftAt = Date.now();
    await sleep(2500); // two flushes or more
    const killAt = Date.now();
    await server.kill();
    closeClient(stays);

    const again = await startServer({ t, nodeId: uid('kill2'), args });
    const p = await ownPresence(again.url, online);
    assert.equal(p.status, 'offline', show(p));
    const seen = Date.parse(p.lastSeen);
    // its last flush came within the flush interval (1 s) and a write before the kill
    assert.ok(seen <= killAt && seen >= killAt - 2500, `online at the kill: last-seen ${p.lastSeen}, killed at ${new Date(killAt).toISOString()}`);
    const q = await ownPresence(again.url, left);
    assert.ok(Math.abs(Date.parse(q.lastSeen) - leftAt) < 1000, `left before the kill: last-seen ${q.lastSeen}, left at ${new Date(leftAt).toISOString()}`);
    assert.ok(again.logs.some((l) => /without a clean shutdown/.test(l.msg ?? '') && l.users === 1), 'the start says it recovered one user');
  });

  it('SIGKILL of one node (embedded store) before any flush: a user who came since is listed within a second, one who came and went keeps their exact last-seen', { timeout: 60000 }, async (t) => {
    const startAt = Date.now();
    const { args, server, stays, ids: [came, brief] } = await crashSetup(t, '1h', ['kcame', 'kbrief']);
    const leftAt = Date.now();
    await sleep(1500); // one write of the list (every second), no flush (1 h)
    const killAt = Date.now();
    await server.kill();
    closeClient(stays);

    const again = await startServer({ t, nodeId: uid('kill2'), args });
    for (const u of [came, brief]) {
      const p = await ownPresence(again.url, u);
      assert.equal(p.status, 'offline', show(p));
      assert.ok(p.lastSeen, `${u}: a last-seen after the crash, not "never seen": ${show(p)}`);
      const seen = Date.parse(p.lastSeen);
      assert.ok(seen >= startAt - 50 && seen <= killAt, `${u}: last-seen ${p.lastSeen} between the start (${new Date(startAt).toISOString()}) and the kill`);
    }
    // stored within a second of going, not the list's moment (the run's start here)
    const q = await ownPresence(again.url, brief);
    assert.ok(Math.abs(Date.parse(q.lastSeen) - leftAt) < 500, `came and went: last-seen ${q.lastSeen}, left at ${new Date(leftAt).toISOString()}`);
    assert.ok(again.logs.some((l) => /without a clean shutdown/.test(l.msg ?? '') && l.users === 1), 'the start says it recovered one user (the one who came and stayed)');
  });

  it('SIGHUP (a closed terminal) shuts down as SIGTERM does: final flush, exit 0', { timeout: 60000 }, async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'presenced-sighup-'));
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const args = ['--data', path.join(dir, 'presenced.db'), '--membership', 'open', '--lastseen-flush-interval', '1h'];
    const server = await startServer({ t, nodeId: uid('hup'), args });
    const u = uid('hupu');
    const { socket } = await connect(server.url, { transports: ['websocket'], token: tokenFor(u, SECRET) });
    const hupAt = Date.now();
    const res = await server.stop('SIGHUP', 15000);
    const exitAt = Date.now();
    closeClient(socket);
    assert.equal(res.code, 0, show(res)); // Go's default: killed by the signal, nothing flushed
    const again = await startServer({ t, nodeId: uid('hup2'), args });
    const p = await ownPresence(again.url, u);
    assert.equal(p.status, 'offline', show(p));
    const seen = Date.parse(p.lastSeen);
    assert.ok(seen >= hupAt - 50 && seen <= exitAt + 50, `last-seen ${p.lastSeen} between SIGHUP and exit`);
  });

  it('the final flush fails on one node (PostgreSQL down, the buffer in memory): exit 1, saying so', { timeout: 90000 }, async (t) => {
    const pg = await privatePostgres(t);
    const args = ['--database-url', pg.url, '--membership', 'open', '--lastseen-flush-interval', '1h', '--flap-grace', '0s', '--shutdown-timeout', '5s'];
    const server = await startServer({ t, nodeId: uid('ff'), args });
    const { socket } = await connect(server.url, { transports: ['websocket'], token: tokenFor(uid('ffu'), SECRET) });
    closeClient(socket); // its offline time waits in memory for the next flush
    await sleep(300);
    await pg.stop();
    const res = await server.stop('SIGTERM', 15000);
    assert.equal(res.code, 1, show(res));
    assert.match(server.stderr, /last-seen times not stored at shutdown/, server.stderr);
  });
});
