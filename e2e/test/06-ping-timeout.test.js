// A client that vanishes without closing anything (no close frame, no FIN)
// is found by the Engine.IO ping timeout.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, SECRET } from '../lib/server.js';
import { startProxy } from '../lib/proxy.js';
import { tokenFor } from '../lib/jwt.js';
import { connect, waitUntil } from '../lib/client.js';
import { fetchMetrics, metricValue } from '../lib/http.js';

test('a silently vanished websocket client is disconnected by ping timeout', { timeout: 60000 }, async (t) => {
  const server = await startServer({ t, args: ['--ping-interval', '300ms', '--ping-timeout', '300ms'] });
  const proxy = await startProxy(server.port, { t });

  const { socket, session } = await connect(`http://127.0.0.1:${proxy.port}`, {
    t,
    transports: ['websocket'],
    token: tokenFor('erin', SECRET),
  });
  assert.equal(session.userId, 'erin');
  assert.equal(proxy.connections, 1);

  // Connected, and stays so while the link works (pongs flow).
  const before = await fetchMetrics(server.url);
  assert.equal(metricValue(before, 'presenced_sockets_connected'), 1);

  proxy.freeze();
  const frozenAt = Date.now();

  // Measured directly on the server, not through the proxy.
  let text;
  await waitUntil(async () => {
    text = await fetchMetrics(server.url);
    return metricValue(text, 'presenced_sockets_connected') === 0
      && metricValue(text, 'presenced_disconnects_total', { reason: 'ping timeout' }) === 1;
  }, { timeoutMs: 8000, intervalMs: 100, message: 'the server to drop the frozen socket by ping timeout' })
    .catch((err) => assert.fail(`${err.message}\nmetrics:\n${text?.split('\n').filter((l) => l.startsWith('presenced_')).join('\n')}`));
  t.diagnostic(`detected ${Date.now() - frozenAt} ms after the freeze`);

  // The only disconnect was the ping timeout (a close passed on by the
  // proxy would have been counted as "transport close").
  const disconnects = text.split('\n').filter((l) => l.startsWith('presenced_disconnects_total{'));
  assert.deepEqual(disconnects, ['presenced_disconnects_total{reason="ping timeout"} 1']);
  socket.close();
});
