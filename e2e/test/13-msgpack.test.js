// PRESENCE_PARSER=msgpack: clients using socket.io-msgpack-parser (what the
// official client bundles in socket.io.msgpack.min.js) connect, join,
// receive room events and acks, send binary, over websocket, polling and
// the upgrade; on one node and across two. A JSON-parser client cannot
// talk to such a server, as in Node. The browser test is 14-msgpack-browser.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import msgpackParser from 'socket.io-msgpack-parser';
import notepack from 'notepack.io';

import { SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { connect, waitFor, sleep } from '../lib/client.js';
import { TOPOLOGIES, uid, ack, show, startTopology, clusterDatabase, TIMESTAMP } from '../lib/presence.js';

const MINUTE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

for (const kind of TOPOLOGIES) {
  describe(`msgpack parser (${kind})`, { timeout: 90000 }, () => {
    const holder = clusterDatabase(kind, { before, after, tag: 'msgpack' });

    for (const transports of [['websocket'], ['polling'], ['polling', 'websocket']]) {
      it(`over ${transports.join('→')}: session, join, room events, acks, binary`, async (t) => {
        const topo = await startTopology(kind, { t, db: holder.db, tag: `mp${transports.length}`, args: ['--parser', 'msgpack', '--handshake-limit', '0'] });
        const conv = uid('mpc');
        const a = uid('mpa');
        const b = uid('mpb');
        const opts = (user) => ({ t, transports, parser: msgpackParser, token: tokenFor(user, SECRET) });
        const { socket: sa, session } = await connect(topo.url1, opts(a));
        assert.equal(session.userId, a);
        assert.equal(typeof session.heartbeat.intervalMs, 'number');
        const joined = await ack(sa, 'conversation:join', { conversationId: conv });
        assert.equal(joined.ok, true, show(joined));
        assert.deepEqual(joined.online.map((m) => m.userId), [a]);

        const { socket: sb } = await connect(topo.url2, opts(b));
        const joinSeen = waitFor(sa, 'presence:join', { label: 'presence:join of b' });
        assert.equal((await ack(sb, 'conversation:join', { conversationId: conv })).ok, true);
        const [ev] = await joinSeen;
        assert.equal(ev.userId, b);
        assert.equal(ev.conversationId, conv);
        assert.ok(ev.at === null || MINUTE.test(ev.at) || TIMESTAMP.test(ev.at), show(ev));

        const typingSeen = waitFor(sa, 'typing', { label: 'typing of b' });
        assert.equal((await ack(sb, 'typing:start', { conversationId: conv })).ok, true);
        const [ty] = await typingSeen;
        assert.deepEqual({ userId: ty.userId, typing: ty.typing }, { userId: b, typing: true });

        const hb = await ack(sa, 'heartbeat', { active: true });
        assert.equal(hb.ok, true);
        assert.equal(typeof hb.nextInMs, 'number');

        // a bad payload is refused with invalid_argument, the socket stays
        const bad = await ack(sa, 'conversation:join', { conversationId: 42 });
        assert.equal(bad.ok, false);
        assert.equal(bad.error.code, 'invalid_argument');

        // binary in an event: state carries JSON only, so an unknown event
        // with a buffer and an ack checks the binary way through the parser
        const reply = await ack(sa, 'no:such:event', Buffer.from([1, 2, 3]));
        assert.equal(reply.ok, false, show(reply));
        assert.ok(sa.connected && sb.connected);
      });
    }
  });
}

describe('msgpack parser: packets it refuses', { timeout: 30000 }, () => {
  // As a JSON-parser server refuses them, whatever the parser's own
  // check lets through: an event with a reserved name (before
  // 2026-12-07 "disconnect" ran the socket's disconnect work and left the
  // connection open, out of its user's presence and counts, still getting
  // its rooms' events), and a text event (the JSON parser's form; before,
  // served on a msgpack server's websocket).
  for (const [what, packet] of [
    ['an event named "disconnect"', () => notepack.encode({ type: 2, nsp: '/', data: ['disconnect', 'x'] })],
    ['an event named "connect"', () => notepack.encode({ type: 2, nsp: '/', data: ['connect'] })],
    ['a JSON-parser text event', (conv) => `2["typing:start",{"conversationId":"${conv}"}]`],
  ]) {
    it(`${what} closes the connection, and the user leaves`, async (t) => {
      const topo = await startTopology('single', { t, tag: 'mpref', args: ['--parser', 'msgpack', '--flap-grace', '100ms'] });
      const conv = uid('mpref');
      const { socket: sa, session: a } = await connect(topo.url1, { t, transports: ['websocket'], parser: msgpackParser, token: tokenFor(uid('a'), SECRET) });
      const { socket: sb } = await connect(topo.url1, { t, transports: ['websocket'], parser: msgpackParser, token: tokenFor(uid('b'), SECRET) });
      assert.equal((await ack(sa, 'conversation:join', { conversationId: conv })).ok, true);
      assert.equal((await ack(sb, 'conversation:join', { conversationId: conv })).ok, true);
      const left = waitFor(sb, 'presence:leave', { timeoutMs: 5000 });
      const gone = waitFor(sa, 'disconnect', { timeoutMs: 3000 });
      sa.io.engine.write(packet(conv));
      const [reason] = await gone;
      t.diagnostic(`the client saw: ${reason}`);
      const [leave] = await left;
      assert.equal(leave.userId, a.userId, show(leave));
      assert.equal(leave.reason, 'disconnected', show(leave));
      assert.ok(sb.connected);
    });
  }
});

describe('msgpack parser: mismatched clients', { timeout: 30000 }, () => {
  it('a JSON-parser client cannot connect to a msgpack server', async (t) => {
    const topo = await startTopology('single', { t, tag: 'mpmis', args: ['--parser', 'msgpack'] });
    await assert.rejects(connect(topo.url1, { t, transports: ['websocket'], token: tokenFor(uid('json'), SECRET), timeoutMs: 3000 }));
    // the server is still fine for msgpack clients
    const { session } = await connect(topo.url1, { t, transports: ['websocket'], parser: msgpackParser, token: tokenFor(uid('mp'), SECRET) });
    assert.ok(session.userId);
    await sleep(10);
  });
});
