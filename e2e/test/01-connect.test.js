// Connecting over each transport: the `session` event, ping cycles after an
// upgrade, the health endpoints and the connected-sockets gauge.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { client, connect, waitFor, countPings, closeClient, waitUntil } from '../lib/client.js';
import { request, metric, fetchMetrics, metricValue } from '../lib/http.js';

const NODE_ID = 'e2e-node-connect';
const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

function checkSession(session, socket, userId) {
  assert.equal(typeof session, 'object');
  assert.equal(session.userId, userId, 'userId is the token sub');
  assert.equal(typeof session.socketId, 'string');
  assert.ok(session.socketId.length > 0, 'socketId not empty');
  assert.equal(session.socketId, socket.id, 'socketId is the client socket.id');
  assert.equal(session.node, NODE_ID, 'node is --node-id');
  assert.match(session.serverTime, TIMESTAMP, 'serverTime is RFC 3339 UTC with milliseconds');
  const t = Date.parse(session.serverTime);
  assert.ok(Number.isFinite(t), `serverTime parses: ${session.serverTime}`);
  assert.ok(Math.abs(Date.now() - t) < 5000, `serverTime ${session.serverTime} within 5 s of now (${new Date().toISOString()})`);
  assert.deepEqual(session.heartbeat, { intervalMs: 7000, jitterMs: 2000 }, 'heartbeat from --heartbeat-interval/--heartbeat-jitter');
  assert.equal(session.typingTtlMs, 3500, 'typingTtlMs from --typing-ttl');
}

describe('connect and session', { timeout: 60000 }, () => {
  let server;
  const sockets = [];

  before(async () => {
    server = await startServer({
      nodeId: NODE_ID,
      args: [
        '--heartbeat-interval', '7s',
        '--heartbeat-jitter', '2s',
        '--typing-ttl', '3500ms',
        '--ping-interval', '300ms',
        '--ping-timeout', '1s',
      ],
    });
  });

  after(async () => {
    for (const s of sockets) closeClient(s);
    await server?.kill();
  });

  it('serves /healthz and /readyz', async () => {
    const h = await request(`${server.url}/healthz`);
    assert.equal(h.status, 200);
    assert.deepEqual(JSON.parse(h.body), { status: 'ok' });
    const r = await request(`${server.url}/readyz`);
    assert.equal(r.status, 200);
    assert.deepEqual(JSON.parse(r.body), { status: 'ok', checks: { store: 'ok' } });
  });

  it('starts with no socket connected', async () => {
    assert.equal(await metric(server.url, 'presenced_sockets_connected'), 0);
  });

  /** Connects userId over transport only; checks the transport and the session. */
  async function connectOver(transport, userId) {
    const { socket, session } = await connect(server.url, {
      transports: [transport],
      token: tokenFor(userId, SECRET),
    });
    sockets.push(socket);
    assert.equal(socket.io.engine.transport.name, transport);
    checkSession(session, socket, userId);
    return socket;
  }

  it('connects over websocket only', async () => {
    await connectOver('websocket', 'ws-user');
  });

  it('connects over polling only', async () => {
    const socket = await connectOver('polling', 'poll-user');
    // A polling socket stays connected across ping cycles too.
    const pings = await countPings(socket, 1500);
    assert.ok(pings >= 2, `polling socket got ${pings} pings in 1.5 s at a 300 ms interval`);
    assert.ok(socket.connected, 'still connected');
  });

  it('connects with the default transports and upgrades to websocket', async () => {
    const userId = 'upgrade.user@example:1';
    const token = tokenFor(userId, SECRET);
    // Wire the listeners before anything can happen (io() opens at once).
    const socket = client(server.url, { token });
    sockets.push(socket);
    const upgraded = waitFor(socket.io.engine, 'upgrade', { timeoutMs: 10000, label: 'engine upgrade' });
    const [session] = await waitFor(socket, 'session', { timeoutMs: 10000, failOn: ['connect_error', 'disconnect'] });
    assert.ok(socket.connected);
    checkSession(session, socket, userId);
    await upgraded;
    assert.equal(socket.io.engine.transport.name, 'websocket', 'transport after upgrade');

    let disconnected = null;
    socket.on('disconnect', (reason) => { disconnected = reason; });
    const pings = await countPings(socket, 2000);
    assert.equal(disconnected, null, `no disconnect across ping cycles (got ${disconnected})`);
    assert.ok(pings >= 3, `got ${pings} pings in 2 s at a 300 ms interval`);
    assert.ok(socket.connected, 'still connected after several ping cycles');
    assert.equal(socket.io.engine.transport.name, 'websocket');
    assert.equal(socket.id, session.socketId, 'same socket after the upgrade');
  });

  it('counts every connected socket in presenced_sockets_connected', async () => {
    assert.equal(sockets.filter((s) => s.connected).length, 3);
    assert.equal(await metric(server.url, 'presenced_sockets_connected'), 3);
    assert.equal(await metric(server.url, 'presenced_handshakes_total', { outcome: 'ok' }), 3);
  });

  it('counts a client disconnect', async () => {
    const s = sockets.shift(); // the websocket-only one
    s.disconnect();
    await waitUntil(async () => (await metric(server.url, 'presenced_sockets_connected')) === 2, {
      timeoutMs: 5000, message: 'presenced_sockets_connected to drop to 2',
    });
    // One disconnect counted (its reason is checked in "client disconnect reason").
    await waitUntil(async () => {
      const lines = (await fetchMetrics(server.url)).split('\n').filter((l) => l.startsWith('presenced_disconnects_total{'));
      return lines.length === 1 && lines[0].endsWith(' 1');
    }, { timeoutMs: 5000, message: 'one presenced_disconnects_total sample with value 1' });
  });
});


describe('session defaults', { timeout: 30000 }, () => {
  let server;
  before(async () => { server = await startServer({ nodeId: null }); });
  after(() => server?.kill());

  it('uses the default heartbeat, typing TTL and node id', async () => {
    const { socket, session } = await connect(server.url, { transports: ['websocket'], token: tokenFor('dflt', SECRET) });
    closeClient(socket);
    assert.equal(session.userId, 'dflt');
    assert.deepEqual(session.heartbeat, { intervalMs: 15000, jitterMs: 5000 });
    assert.equal(session.typingTtlMs, 5000);
    assert.match(session.node, /^.+-[0-9a-f]{6}$/, 'default node id is hostname-<6 hex>');
    const listening = server.logs.find((l) => l.msg === 'listening');
    assert.equal(listening.node, session.node, 'the log names the same node');
  });
});
