// Graceful shutdown on SIGTERM and SIGINT: every socket is disconnected,
// the log says so, and the process exits 0.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { connect, waitFor } from '../lib/client.js';
import { metric } from '../lib/http.js';

function checkShutdownLogs(server, n) {
  const msgs = server.logs.map((l) => l.msg);
  const iDown = msgs.indexOf('shutting down');
  const iClosed = msgs.indexOf('sockets closed');
  const iStopped = msgs.indexOf('stopped');
  assert.ok(iDown >= 0, `"shutting down" logged\n${server.stderr}`);
  assert.ok(iClosed > iDown, `"sockets closed" logged after "shutting down"\n${server.stderr}`);
  assert.ok(iStopped > iClosed, `"stopped" logged last\n${server.stderr}`);
  assert.equal(server.logs[iDown].sockets, n, '"shutting down" sockets');
  assert.equal(server.logs[iClosed].sockets_disconnected, n, '"sockets closed" sockets_disconnected');
  assert.equal(server.logs[iClosed].sockets_open, 0, '"sockets closed" sockets_open');
}

test('SIGTERM disconnects every socket and exits 0', { timeout: 60000 }, async (t) => {
  const server = await startServer({ t });
  const transports = [['websocket'], ['websocket'], ['polling'], ['polling'], ['polling', 'websocket']];
  const clients = [];
  for (const [i, tr] of transports.entries()) {
    clients.push(await connect(server.url, { t, transports: tr, token: tokenFor(`user-${i}`, SECRET) }));
  }
  assert.equal(await metric(server.url, 'presenced_sockets_connected'), 5);

  const disconnected = clients.map(({ socket }) => waitFor(socket, 'disconnect', { timeoutMs: 10000 }));
  const exit = await server.stop('SIGTERM', 10000);
  assert.equal(exit.code, 0, `exit code (stderr:\n${server.stderr})`);
  assert.equal(exit.signal, null);
  checkShutdownLogs(server, 5);

  const reasons = (await Promise.all(disconnected)).map(([r]) => r);
  for (const r of reasons) assert.ok(['transport close', 'transport error'].includes(r), `client disconnect reason ${r}`);
  // Every socket's disconnect work ran with the shutdown reason.
  const serverReasons = server.logs.filter((l) => l.msg === 'socket disconnected').map((l) => l.reason);
  assert.deepEqual(serverReasons, Array(5).fill('server shutting down'), 'server-side disconnect reasons');
});

test('SIGINT shuts down the same way', { timeout: 60000 }, async (t) => {
  const server = await startServer({ t });
  const { socket } = await connect(server.url, { t, token: tokenFor('dave', SECRET) });
  const disconnected = waitFor(socket, 'disconnect', { timeoutMs: 10000 });
  const exit = await server.stop('SIGINT', 10000);
  assert.equal(exit.code, 0, `exit code (stderr:\n${server.stderr})`);
  checkShutdownLogs(server, 1);
  await disconnected;
});

test('SIGTERM with no socket exits 0 at once', { timeout: 30000 }, async (t) => {
  const server = await startServer({ t });
  const exit = await server.stop('SIGTERM', 10000);
  assert.equal(exit.code, 0);
  checkShutdownLogs(server, 0);
});
