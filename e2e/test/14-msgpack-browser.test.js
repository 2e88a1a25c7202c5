// A real browser with the official msgpack bundle
// (socket.io-client/dist/socket.io.msgpack.min.js) against a server started
// with --parser msgpack: it connects over websocket and over polling, gets
// `session`, joins a conversation, and sees a Node msgpack client arrive.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import msgpackParser from 'socket.io-msgpack-parser';

import { SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { connect } from '../lib/client.js';
import { uid, ack, startTopology } from '../lib/presence.js';
import { launchBrowser, staticServer } from '../lib/browser.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const bundle = fs.readFileSync(path.join(here, '..', 'node_modules', 'socket.io-client', 'dist', 'socket.io.msgpack.min.js'));

const page = `<!doctype html><meta charset="utf-8"><title>msgpack</title>
<script src="/socket.io.msgpack.min.js"></script>
<script>
window.run = (url, token, conversationId, transports) => new Promise((resolve, reject) => {
  const out = {};
  window.joins = [];
  const socket = io(url, { auth: { token }, transports, reconnection: false });
  window.socket = socket;
  socket.on('connect_error', (err) => reject(new Error('connect_error ' + err.message)));
  socket.on('presence:join', (e) => window.joins.push(e));
  socket.on('session', async (s) => {
    out.session = s;
    out.join = await socket.emitWithAck('conversation:join', { conversationId });
    resolve(out);
  });
});
</script>`;

describe('msgpack parser in a browser', { timeout: 90000 }, () => {
  for (const transports of [['websocket'], ['polling']]) {
    it(`socket.io.msgpack.min.js over ${transports[0]}`, async (t) => {
      const site = await staticServer({
        '/': { type: 'text/html; charset=utf-8', body: page },
        '/socket.io.msgpack.min.js': { type: 'text/javascript', body: bundle },
      }, t);
      const topo = await startTopology('single', { t, tag: 'mpbrowser', args: ['--parser', 'msgpack', '--cors-origins', site.url] });
      const browser = await launchBrowser(t);
      const tab = await browser.newPage();
      const errors = [];
      tab.on('pageerror', (e) => errors.push(e.message));
      await tab.goto(site.url + '/');
      const conv = uid('mpbc');
      const user = uid('browser');
      const out = await tab.evaluate(([url, token, c, tr]) => window.run(url, token, c, tr), [topo.url1, tokenFor(user, SECRET), conv, transports]);
      assert.equal(out.session.userId, user);
      assert.equal(out.join.ok, true, JSON.stringify(out.join));
      assert.deepEqual(out.join.online.map((m) => m.userId), [user]);
      const used = await tab.evaluate(() => window.socket.io.engine.transport.name);
      assert.equal(used, transports[0]);

      // a Node msgpack client joins: the browser sees presence:join
      const other = uid('node');
      const { socket } = await connect(topo.url1, { t, transports: ['websocket'], parser: msgpackParser, token: tokenFor(other, SECRET) });
      assert.equal((await ack(socket, 'conversation:join', { conversationId: conv })).ok, true);
      await tab.waitForFunction((o) => window.joins.some((e) => e.userId === o), other, { timeout: 10000 });
      const seen = await tab.evaluate((o) => window.joins.find((e) => e.userId === o), other);
      assert.equal(seen.conversationId, conv);
      assert.deepEqual(errors, []);
    });
  }
});
