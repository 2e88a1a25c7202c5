// A client that stops reading must not cost the server unbounded memory:
// it joins a room, then reads nothing, only sending a PONG now and then
// (blindly). A backend floods that room through @socket.io/redis-emitter
// with 20 KB messages, 1,000 per second for 20 s (400 MB). The server must
// disconnect the socket (PRESENCE_MAX_UNREAD, 1 MiB by default) and its
// RSS must grow by less than 150 MB.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import { createClient } from 'redis';
import { Emitter } from '@socket.io/redis-emitter';

import { SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { connect, closeClient, sleep, waitUntil } from '../lib/client.js';
import { metric, request, pollingHandshake } from '../lib/http.js';
import { uid, ack, startTopology, clusterDatabase, REDIS_URL } from '../lib/presence.js';

/** A masked client text frame. */
function textFrame(s) {
  const payload = Buffer.from(s);
  const key = crypto.randomBytes(4);
  let head;
  if (payload.length < 126) head = Buffer.from([0x81, 0x80 | payload.length]);
  else { head = Buffer.alloc(4); head[0] = 0x81; head[1] = 0x80 | 126; head.writeUInt16BE(payload.length, 2); }
  const masked = Buffer.from(payload.map((b, i) => b ^ key[i % 4]));
  return Buffer.concat([head, key, masked]);
}

/**
 * A raw websocket Socket.IO client that can stop reading. Resolves once
 * connected and joined to conversationId, with {sock, stopReading()}.
 */
function rawClient(base, token, conversationId) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}/socket.io/?EIO=4&transport=websocket`, {
      agent: false,
      headers: { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64') },
    });
    const timer = setTimeout(() => reject(new Error('raw client: not joined within 10 s')), 10000);
    req.on('error', reject);
    req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
    req.on('upgrade', (res, sock, head) => {
      let buf = Buffer.alloc(0);
      sock.on('error', () => {});
      const onData = (d) => {
        buf = Buffer.concat([buf, d]);
        for (;;) { // server frames are unmasked; small ones only until joined
          if (buf.length < 2) return;
          let len = buf[1] & 0x7f; let off = 2;
          if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); off = 4; }
          else if (len === 127) { if (buf.length < 10) return; len = Number(buf.readBigUInt64BE(2)); off = 10; }
          if (buf.length < off + len) return;
          const msg = buf.subarray(off, off + len).toString();
          buf = buf.subarray(off + len);
          if (msg.startsWith('0{')) sock.write(textFrame(`40${JSON.stringify({ token })}`));
          else if (msg === '2') sock.write(textFrame('3'));
          else if (msg.startsWith('42["session"')) sock.write(textFrame(`421["conversation:join",${JSON.stringify({ conversationId })}]`));
          else if (msg.startsWith('431[')) {
            clearTimeout(timer);
            if (!msg.includes('"ok":true')) { reject(new Error(`join refused: ${msg}`)); return; }
            resolve({
              sock,
              stopReading() {
                sock.removeAllListeners('data');
                sock.pause();
                // blind PONGs: they must not keep a reader that reads nothing alive
                const pongs = setInterval(() => { if (!sock.destroyed) sock.write(textFrame('3')); }, 2000);
                sock.once('close', () => clearInterval(pongs));
                return () => clearInterval(pongs);
              },
            });
          }
        }
      };
      sock.on('data', onData);
      if (head?.length) onData(head);
    });
    req.end();
  });
}

function rssBytes(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

describe('slow consumer under a 400 MB flood', { timeout: 120000, skip: os.platform() !== 'linux' && 'needs /proc' }, () => {
  const holder = clusterDatabase('cluster', { before, after, tag: 'slow' });

  it('is disconnected, and the server RSS grows by less than 150 MB', async (t) => {
    const topo = await startTopology('cluster', { t, db: holder.db, nodes: 1, tag: 'slow', args: ['--handshake-limit', '0'] });
    const [server] = topo.servers;
    const conv = uid('flood');
    const user = uid('slow');
    const client = await rawClient(topo.url1, tokenFor(user, SECRET), conv);
    const stopPongs = client.stopReading();
    t.after(() => { stopPongs(); client.sock.destroy(); });

    const redis = createClient({ url: REDIS_URL });
    await redis.connect();
    t.after(() => redis.quit().catch(() => {}));
    const emitter = new Emitter(redis, { key: topo.prefix });

    const rssBefore = rssBytes(server.pid);
    let rssMax = rssBefore;
    const payload = 'x'.repeat(20 * 1024);
    const start = Date.now();
    let sent = 0;
    let disconnectedAfter = null;
    while (Date.now() - start < 20000) {
      for (let i = 0; i < 100; i++) emitter.to(`conversation:${conv}`).emit('flood', payload);
      sent += 100;
      await sleep(100 - ((Date.now() - start) % 100));
      rssMax = Math.max(rssMax, rssBytes(server.pid));
      if (disconnectedAfter === null && (await metric(topo.url1, 'presenced_slow_consumer_disconnects_total')) >= 1) {
        disconnectedAfter = Date.now() - start;
      }
    }
    t.diagnostic(`sent ${sent} × 20 KB; disconnected after ${disconnectedAfter} ms; RSS ${(rssBefore / 2 ** 20).toFixed(0)} → max ${(rssMax / 2 ** 20).toFixed(0)} MiB`);
    assert.ok(disconnectedAfter !== null, 'the slow consumer was disconnected');
    await waitUntil(async () => (await metric(topo.url1, 'presenced_sockets_connected')) === 0, { message: 'the socket to be gone' });
    assert.ok(rssMax - rssBefore < 150 * 2 ** 20, `RSS grew by ${((rssMax - rssBefore) / 2 ** 20).toFixed(0)} MiB (want < 150)`);
    const warn = server.logs.find((l) => l.msg === 'slow consumer disconnected');
    assert.equal(warn?.user_id, user, 'the log line names the user');
  });

  it('a client that reads gets a broadcast larger than the bound (1.5 MB), and stays', async (t) => {
    const topo = await startTopology('cluster', { t, db: holder.db, nodes: 1, tag: 'bigmsg', args: ['--handshake-limit', '0'] });
    const conv = uid('big');
    const redis = createClient({ url: REDIS_URL });
    await redis.connect();
    t.after(() => redis.quit().catch(() => {}));
    const emitter = new Emitter(redis, { key: topo.prefix });
    const payload = 'y'.repeat(1536 * 1024);
    for (const transports of [['websocket'], ['polling']]) {
      const { socket } = await connect(topo.url1, { t, transports, token: tokenFor(uid('reader'), SECRET) });
      assert.equal((await ack(socket, 'conversation:join', { conversationId: conv })).ok, true);
      const got = new Promise((resolve) => socket.once('big', resolve));
      emitter.to(`conversation:${conv}`).emit('big', payload);
      const body = await Promise.race([got, sleep(10000).then(() => null)]);
      assert.equal(body?.length, payload.length, `${transports}: the message arrived whole`);
      await sleep(300);
      assert.ok(socket.connected, `${transports}: still connected`);
      closeClient(socket);
    }
    assert.equal(await metric(topo.url1, 'presenced_slow_consumer_disconnects_total'), 0);
  });

  it('a polling client that stops polling is disconnected too', async (t) => {
    const topo = await startTopology('cluster', { t, db: holder.db, nodes: 1, tag: 'slowpoll', args: ['--handshake-limit', '0'] });
    const [server] = topo.servers;
    const conv = uid('floodp');
    const user = uid('slowpoll');
    const { sid } = await pollingHandshake(topo.url1);
    const url = `${topo.url1}/socket.io/?EIO=4&transport=polling&sid=${encodeURIComponent(sid)}`;
    const post = (body) => request(url, { method: 'POST', body, headers: { 'Content-Type': 'text/plain;charset=UTF-8' } });
    await post(`40${JSON.stringify({ token: tokenFor(user, SECRET) })}`);
    let got = '';
    while (!got.includes('"session"')) got += (await request(url)).body;
    await post(`421["conversation:join",${JSON.stringify({ conversationId: conv })}]`);
    got = '';
    while (!got.includes('431[')) got += (await request(url)).body;
    assert.match(got, /"ok":true/);
    // From here on the client never polls again.

    const redis = createClient({ url: REDIS_URL });
    await redis.connect();
    t.after(() => redis.quit().catch(() => {}));
    const emitter = new Emitter(redis, { key: topo.prefix });
    const payload = 'x'.repeat(20 * 1024);
    const rssBefore = rssBytes(server.pid);
    for (let round = 0; round < 20; round++) {
      for (let i = 0; i < 100; i++) emitter.to(`conversation:${conv}`).emit('flood', payload);
      await sleep(100);
    }
    await waitUntil(async () => (await metric(topo.url1, 'presenced_slow_consumer_disconnects_total')) >= 1, { message: 'the polling slow consumer to be disconnected' });
    await waitUntil(async () => (await metric(topo.url1, 'presenced_sockets_connected')) === 0, { message: 'the socket to be gone' });
    const grew = rssBytes(server.pid) - rssBefore;
    assert.ok(grew < 150 * 2 ** 20, `RSS grew by ${(grew / 2 ** 20).toFixed(0)} MiB`);
  });
});
