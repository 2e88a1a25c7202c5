// Handshake rate limit per IP: only new Engine.IO sessions count, on both
// transports; an established session is never limited.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { connect, connectError, countPings } from '../lib/client.js';
import { request, pollingUrl, upgradeRequest, metric } from '../lib/http.js';

test('handshake limit 3/10s: the 4th new session is refused on both transports, established ones keep working', { timeout: 60000 }, async (t) => {
  const server = await startServer({
    t,
    args: ['--handshake-limit', '3/10s', '--ping-interval', '300ms', '--ping-timeout', '1s'],
  });

  let disconnected = null;
  // Handshake 1: a socket.io-client over polling (it keeps polling with its sid).
  const { socket } = await connect(server.url, { t, transports: ['polling'], token: tokenFor('henry', SECRET) });
  socket.on('disconnect', (reason) => { disconnected = reason; });

  // Handshakes 2 and 3: raw polling handshakes.
  for (let i = 2; i <= 3; i++) {
    const res = await request(pollingUrl(server.url));
    assert.equal(res.status, 200, `handshake ${i}: ${res.body}`);
    assert.match(res.body, /^0\{/);
  }

  // Handshake 4: over the limit.
  const limited = await request(pollingUrl(server.url));
  assert.equal(limited.status, 429, `4th handshake: ${limited.body}`);
  assert.ok(limited.headers['retry-after'], 'Retry-After header');
  const retryAfter = Number(limited.headers['retry-after']);
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 10, `Retry-After ${limited.headers['retry-after']} is 1..10 seconds`);

  // Forwarding headers from the client do not get around it (the server is
  // not configured to trust any proxy).
  const spoofed = await request(pollingUrl(server.url), { headers: { 'X-Forwarded-For': '203.0.113.9', 'X-Real-IP': '203.0.113.9', 'True-Client-IP': '203.0.113.9' } });
  assert.equal(spoofed.status, 429, 'X-Forwarded-For does not reset the limit');

  // A raw websocket handshake is limited too.
  const ws = await upgradeRequest(`${server.url}/socket.io/?EIO=4&transport=websocket`);
  assert.equal(ws.status, 429, 'raw websocket handshake over the limit');

  // And so is a socket.io-client over websocket only.
  const err = await connectError(server.url, { transports: ['websocket'], token: tokenFor('ivy', SECRET) });
  assert.ok(err instanceof Error);
  assert.notEqual(err.message, 'unauthorized');

  // Meanwhile the established polling session keeps working: its requests
  // carry a sid and are not limited. It answers pings for over a second.
  const pings = await countPings(socket, 1500);
  assert.ok(pings >= 2, `the polling client got ${pings} pings in 1.5 s at a 300 ms interval`);
  assert.equal(disconnected, null, `the polling client was not disconnected (got ${disconnected})`);
  assert.ok(socket.connected);
  assert.equal(await metric(server.url, 'presenced_sockets_connected'), 1);

  assert.equal(await metric(server.url, 'presenced_handshakes_total', { outcome: 'rate_limited' }), 4);
  assert.equal(await metric(server.url, 'presenced_handshakes_total', { outcome: 'ok' }), 1);
});
