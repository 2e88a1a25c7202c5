// --max-buffer: a message over Engine.IO's maxHttpBufferSize closes the
// client's connection, on both transports; smaller ones are fine.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { connect, sleep, waitFor, waitUntil } from '../lib/client.js';
import { request, pollingHandshake, metric } from '../lib/http.js';

describe('max buffer 2KB', { timeout: 60000 }, () => {
  let server;

  before(async () => {
    server = await startServer({ args: ['--max-buffer', '2KB', '--handshake-limit', '0'] });
  });
  after(() => server?.kill());

  it('advertises maxPayload 2048 in the handshake', async () => {
    const { handshake } = await pollingHandshake(server.url);
    assert.equal(handshake.maxPayload, 2048);
  });

  for (const transport of ['websocket', 'polling']) {
    it(`over ${transport}: 1 KB is fine, 10 KB disconnects`, async (t) => {
      const { socket } = await connect(server.url, { t, transports: [transport], token: tokenFor(`big-${transport}`, SECRET) });
      const connectedBefore = await metric(server.url, 'presenced_sockets_connected');
      let disconnected = null;
      socket.on('disconnect', (reason) => { disconnected = reason; });

      socket.emit('note', 'x'.repeat(1024));
      await sleep(1000);
      assert.equal(disconnected, null, `a 1 KB event does not disconnect (got ${disconnected})`);
      assert.ok(socket.connected, 'still connected after a 1 KB event');

      const gone = waitFor(socket, 'disconnect', { timeoutMs: 10000, label: 'disconnect after a 10 KB event' });
      socket.emit('note', 'x'.repeat(10 * 1024));
      const [reason] = await gone;
      t.diagnostic(`client disconnect reason: ${reason}`);
      // as from Node: over polling the waiting GET gets the session's
      // CLOSE (it got a NOOP, and the client reported "transport error")
      assert.equal(reason, 'transport close');
      assert.equal(socket.connected, false);
      await waitUntil(async () => (await metric(server.url, 'presenced_sockets_connected')) === connectedBefore - 1, {
        timeoutMs: 10000, message: 'the server to drop the socket',
      });
    });
  }

  it('answers a polling POST over the limit with 413 (with and without Content-Length)', async () => {
    const { sid } = await pollingHandshake(server.url);
    assert.ok(sid);
    const url = `${server.url}/socket.io/?EIO=4&transport=polling&sid=${encodeURIComponent(sid)}`;
    const body = `4${'x'.repeat(3000)}`;
    const res = await request(url, { method: 'POST', body, headers: { 'Content-Type': 'text/plain;charset=UTF-8' } });
    assert.equal(res.status, 413, `with Content-Length: ${res.body}`);

    const { sid: sid2 } = await pollingHandshake(server.url);
    const url2 = `${server.url}/socket.io/?EIO=4&transport=polling&sid=${encodeURIComponent(sid2)}`;
    const res2 = await request(url2, { method: 'POST', body, chunked: true, headers: { 'Content-Type': 'text/plain;charset=UTF-8' } });
    assert.equal(res2.status, 413, `chunked: ${res2.body}`);
  });
});
