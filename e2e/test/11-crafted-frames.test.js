// Crafted websocket frames against our own frame reader (server/wsframes.go):
// a length that overflows when added to the fragment so far must close the
// connection at once, not pin a core, and the server must still stop on
// SIGTERM.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import crypto from 'node:crypto';
import os from 'node:os';

import { startServer, SECRET, cpuSeconds } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { connect, sleep } from '../lib/client.js';
import { upgradeHeaders } from '../lib/http.js';

/** Upgrades a raw Engine.IO websocket; resolves with the net.Socket. */
function rawWebsocket(base) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}/socket.io/?EIO=4&transport=websocket`, {
      agent: false,
      headers: upgradeHeaders(),
    });
    req.on('upgrade', (res, socket) => { socket.resume(); resolve(socket); });
    req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
    req.on('error', reject);
    req.end();
  });
}

/** A masked client frame header with a 64-bit length. */
function head64(b0, len) {
  const b = Buffer.alloc(14);
  b[0] = b0;
  b[1] = 0x80 | 127;
  b.writeBigUInt64BE(len, 2);
  b.set([1, 2, 3, 4], 10);
  return b;
}

describe('crafted frames', { timeout: 60000, skip: os.platform() !== 'linux' && 'needs /proc' }, () => {
  let server;

  before(async () => { server = await startServer({ args: ['--handshake-limit', '0'] }); });
  after(() => server?.kill());

  const cases = [
    { name: 'a continuation declaring 2^63-1 bytes after a 1-byte fragment', bytes: () => Buffer.concat([
      Buffer.from([0x01, 0x81, 0, 0, 0, 0, 0x78]), // text, no FIN, 1 byte ("x", mask 0)
      head64(0x80, (1n << 63n) - 1n), // continuation, FIN
      crypto.randomBytes(200 << 10),
    ]) },
    { name: 'a text frame declaring 2^64-1 bytes', bytes: () => Buffer.concat([head64(0x81, (1n << 64n) - 1n), crypto.randomBytes(200 << 10)]) },
  ];
  for (const tc of cases) {
    it(`${tc.name}: closed within 2 s, no spinning after`, async () => {
      const sock = await rawWebsocket(server.url);
      const closed = new Promise((resolve) => sock.once('close', () => resolve(Date.now())));
      sock.on('error', () => {});
      const sent = Date.now();
      sock.write(tc.bytes());
      const at = await Promise.race([closed, sleep(2000).then(() => null)]);
      assert.ok(at !== null, 'the server closed the connection within 2 s');
      assert.ok(at - sent < 2000);
      const before = cpuSeconds(server.pid);
      await sleep(5000);
      const used = cpuSeconds(server.pid) - before;
      assert.ok(used < 0.5, `the server used ${used.toFixed(2)} core-seconds in the 5 s after (want < 0.5)`);
      // the server still serves real clients
      const { socket } = await connect(server.url, { token: tokenFor(`after-${crypto.randomUUID()}`, SECRET) });
      socket.close();
    });
  }

  it('still stops on SIGTERM after the crafted frames', async () => {
    const sock = await rawWebsocket(server.url);
    sock.on('error', () => {});
    sock.write(cases[0].bytes());
    await sleep(200);
    const res = await server.stop('SIGTERM', 10000);
    assert.equal(res.code, 0, `exit ${JSON.stringify(res)}`);
  });
});
