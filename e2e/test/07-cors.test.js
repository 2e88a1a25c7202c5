// CORS: the origin allow-list is enforced before the engine, for polling and
// for websocket (handshake and upgrade alike).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { client, connect, connectError, closeClient, waitFor } from '../lib/client.js';
import { request, upgradeRequest, pollingUrl, pollingHandshake, metric } from '../lib/http.js';

const APP = 'http://app.example';
const EVIL = 'http://evil.example';


describe('CORS', { timeout: 60000 }, () => {
  let server;
  let forbiddenHandshakes = 0;
  let okHandshakes = 0;

  before(async () => {
    server = await startServer({ args: ['--cors-origins', APP, '--handshake-limit', '0'] });
  });
  after(() => server?.kill());

  it('refuses a polling handshake from a foreign origin with 403', async () => {
    const res = await request(pollingUrl(server.url), { headers: { Origin: EVIL } });
    forbiddenHandshakes++;
    assert.equal(res.status, 403, res.body);
    assert.equal(res.headers['access-control-allow-origin'], undefined);
  });

  it('allows a polling handshake from an allowed origin, with CORS headers', async () => {
    const res = await request(pollingUrl(server.url), { headers: { Origin: APP } });
    assert.equal(res.status, 200, res.body);
    assert.equal(res.headers['access-control-allow-origin'], APP);
    assert.equal(res.headers['access-control-allow-credentials'], 'true');
    assert.match(res.body, /^0\{.*"sid"/);
  });

  it('allows a page served by the server itself (Origin equals the Host)', async () => {
    const res = await request(pollingUrl(server.url), { headers: { Origin: server.url } });
    assert.equal(res.status, 200, res.body);
  });

  it('answers a preflight from an allowed origin with 204', async () => {
    const res = await request(pollingUrl(server.url), {
      method: 'OPTIONS',
      headers: { Origin: APP, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type' },
    });
    assert.equal(res.status, 204);
    assert.equal(res.headers['access-control-allow-origin'], APP);
    assert.equal(res.headers['access-control-allow-credentials'], 'true');
    assert.match(res.headers['access-control-allow-methods'] ?? '', /POST/);
  });

  it('refuses a websocket handshake from a foreign origin with 403', async () => {
    const res = await upgradeRequest(`${server.url}/socket.io/?EIO=4&transport=websocket`, { Origin: EVIL });
    forbiddenHandshakes++;
    assert.equal(res.status, 403);
  });

  it('refuses a websocket upgrade of an existing session from a foreign origin with 403', async () => {
    const { sid } = await pollingHandshake(server.url, { Origin: APP });
    assert.ok(sid, 'polling session opened');
    const res = await upgradeRequest(`${server.url}/socket.io/?EIO=4&transport=websocket&sid=${encodeURIComponent(sid)}`, { Origin: EVIL });
    assert.equal(res.status, 403);
  });

  it('accepts a websocket handshake from an allowed origin (101)', async () => {
    const res = await upgradeRequest(`${server.url}/socket.io/?EIO=4&transport=websocket`, { Origin: APP });
    assert.equal(res.status, 101);
  });

  for (const transport of ['websocket', 'polling']) {
    it(`socket.io-client over ${transport} from a foreign origin gets connect_error`, async () => {
      const err = await connectError(server.url, {
        transports: [transport],
        extraHeaders: { origin: EVIL },
        token: tokenFor('mallory', SECRET),
      });
      forbiddenHandshakes++;
      assert.ok(err instanceof Error);
      assert.notEqual(err.message, 'unauthorized', 'refused before authentication');
    });

    it(`socket.io-client over ${transport} from the allowed origin connects`, async () => {
      const { socket, session } = await connect(server.url, {
        transports: [transport],
        extraHeaders: { origin: APP },
        token: tokenFor('frank', SECRET),
      });
      okHandshakes++;
      closeClient(socket);
      assert.equal(session.userId, 'frank');
    });
  }

  it('socket.io-client with default transports from the allowed origin upgrades to websocket', async (t) => {
    const socket = client(server.url, { t, extraHeaders: { origin: APP }, token: tokenFor('frank', SECRET) });
    const upgraded = waitFor(socket.io.engine, 'upgrade', { timeoutMs: 10000, failOn: ['upgradeError'], label: 'engine upgrade' });
    await waitFor(socket, 'session', { failOn: ['connect_error'] });
    okHandshakes++;
    await upgraded;
    assert.equal(socket.io.engine.transport.name, 'websocket');
    closeClient(socket);
  });

  it('counts the refused handshakes as forbidden_origin, and connected none of them', async () => {
    assert.equal(forbiddenHandshakes, 4);
    assert.equal(await metric(server.url, 'presenced_handshakes_total', { outcome: 'forbidden_origin' }), forbiddenHandshakes);
    assert.equal(await metric(server.url, 'presenced_handshakes_total', { outcome: 'ok' }), okHandshakes);
  });
});

describe('CORS with "*"', { timeout: 30000 }, () => {
  let server;
  before(async () => { server = await startServer({ args: ['--cors-origins', '*'] }); });
  after(() => server?.kill());

  it('allows any origin over polling', async () => {
    const res = await request(pollingUrl(server.url), { headers: { Origin: EVIL } });
    assert.equal(res.status, 200);
    assert.equal(res.headers['access-control-allow-origin'], EVIL);
    const { socket } = await connect(server.url, { transports: ['polling'], extraHeaders: { origin: EVIL }, token: tokenFor('gina', SECRET) });
    closeClient(socket);
  });

  it('allows any origin over websocket', async () => {
    const { socket } = await connect(server.url, { transports: ['websocket'], extraHeaders: { origin: EVIL }, token: tokenFor('gina', SECRET) });
    closeClient(socket);
  });
});
