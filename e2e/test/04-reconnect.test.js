// A client reconnects by itself when the server restarts: the shutdown must
// look like a lost transport ("transport close"), not a deliberate server
// disconnect ("io server disconnect", after which clients do not retry).

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, freePort, SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { client, waitFor } from '../lib/client.js';
import { metric } from '../lib/http.js';

test('client reconnects after the server restarts on the same port', { timeout: 60000 }, async (t) => {
  const port = await freePort();
  const first = await startServer({ t, port, nodeId: 'restart-1' });

  const socket = client(`http://127.0.0.1:${port}`, {
    t,
    token: tokenFor('carol', SECRET),
    reconnection: true,
    reconnectionDelay: 100,
    reconnectionDelayMax: 500,
    randomizationFactor: 0,
  });
  const disconnects = [];
  const sessions = [];
  socket.on('disconnect', (reason) => disconnects.push(reason));
  socket.on('session', (s) => sessions.push(s));

  const upgraded = waitFor(socket.io.engine, 'upgrade', { label: 'engine upgrade' });
  await waitFor(socket, 'session', { failOn: ['connect_error'] });
  await upgraded;
  const firstSession = sessions[0];
  assert.equal(firstSession.userId, 'carol');
  assert.equal(firstSession.node, 'restart-1');
  assert.equal(firstSession.socketId, socket.id);

  const disconnected = waitFor(socket, 'disconnect', { timeoutMs: 10000 });
  const exit = await first.stop('SIGTERM');
  assert.equal(exit.code, 0, `exit code (stderr:\n${first.stderr})`);
  const [reason] = await disconnected;
  assert.equal(reason, 'transport close', 'the client saw the transport close (so it will reconnect)');
  assert.equal(socket.connected, false);

  // The client retries by itself; let it fail at least once against the
  // closed port before the new process starts.
  await waitFor(socket.io, 'reconnect_error', { timeoutMs: 10000, label: 'a failed reconnection attempt' });
  const reconnected = waitFor(socket, 'session', { timeoutMs: 15000, label: 'a new session after the restart' });
  const second = await startServer({ t, port, nodeId: 'restart-2' });
  const [session] = await reconnected;
  assert.ok(socket.connected, 'connected again');
  assert.equal(session.userId, 'carol');
  assert.equal(session.node, 'restart-2', 'the session comes from the new process');
  assert.notEqual(session.socketId, firstSession.socketId, 'a new socket id');
  assert.equal(session.socketId, socket.id);
  assert.deepEqual(disconnects, ['transport close'], 'exactly one disconnect');
  assert.equal(await metric(second.url, 'presenced_sockets_connected'), 1);
});
