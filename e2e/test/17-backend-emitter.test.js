// Backends emit to the contract's rooms through Redis with Node's
// @socket.io/redis-emitter, as they would to a Node Socket.IO cluster
// (CONTRACT §1, Rooms for backends). Two nodes, classic and sharded
// adapter; a member of a conversation on each node, over websocket and
// over polling, and a bystander in no conversation.
//  - conversation:<id> and user:<id> reach their sockets on both nodes;
//  - NaN and Infinity arrive as null, as a Node server's JSON.stringify
//    writes them (the event used to arrive without data, and
//    socket.io-client threw on it);
//  - a message whose rooms are no list (a string) is dropped, not sent to
//    every socket; a packet whose type is a string is dropped, not read
//    as CONNECT (which disconnected its clients).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createClient } from 'redis';
import { Emitter } from '@socket.io/redis-emitter';
import { encode } from 'notepack.io';

import { sleep } from '../lib/client.js';
import {
  uid, connectUser, joinUser, startTopology, clusterDatabase, show, REDIS_URL,
} from '../lib/presence.js';

for (const kind of ['cluster', 'cluster-sharded']) {
  describe(`a backend's emitter [${kind}]`, { timeout: 120000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '17' });

    it('reaches rooms on both nodes; NaN arrives as null; malformed messages reach nobody', { timeout: 60000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: `17${kind.length}` });
      const c = uid('c');
      const A = uid('A');
      const B = uid('B');
      const a = await joinUser(topo.url1, A, c, { t });
      const b = await joinUser(topo.url2, B, c, { t });
      const bystander = await connectUser(topo.url2, uid('X'), { t, opts: { transports: ['polling'] } });
      const all = [a, b, bystander];

      const redis = createClient({ url: REDIS_URL });
      await redis.connect();
      t.after(() => redis.quit().catch(() => {}));
      const emitter = new Emitter(redis, { key: topo.prefix });
      const marks = all.map((u) => u.rec.mark());

      emitter.to(`conversation:${c}`).emit('news', { n: 1, s: 'é ✓' });
      emitter.to(`user:${B}`).emit('direct', 1);
      emitter.to(`conversation:${c}`).emit('numbers', { x: NaN, y: Infinity, ok: 1 }, -Infinity, [NaN]);
      // what a backend with a bug publishes on the broadcast channel
      const raw = (packet, opts) => redis.publish(`${topo.prefix}#/#`, Buffer.from(encode(['emitter', packet, opts])));
      await raw({ type: 2, data: ['leak', 'rooms a string'], nsp: '/' }, { rooms: `conversation:${c}` });
      await raw({ type: 2, data: ['leak', 'options a string'], nsp: '/' }, `conversation:${c}`);
      await raw({ type: '2', data: ['leak', 'type a string'], nsp: '/' }, { rooms: [`conversation:${c}`] });
      emitter.emit('fence', 1);

      for (const [i, u] of all.entries()) {
        await u.rec.wait('fence', { since: marks[i], timeoutMs: 5000 });
      }
      await sleep(200);
      for (const [i, u] of all.entries()) {
        assert.deepEqual(u.rec.list('leak', { since: marks[i] }).map((e) => e.args), [], `${u.userId} got no malformed message:\n    ${u.rec.dump(marks[i])}`);
        assert.ok(u.socket.connected, `${u.userId} is still connected`);
      }
      for (const [i, u] of [a, b].entries()) {
        assert.deepEqual(u.rec.list('news', { since: marks[i] }).map((e) => e.args), [[{ n: 1, s: 'é ✓' }]], `${u.userId}: news`);
        assert.deepEqual(u.rec.list('numbers', { since: marks[i] }).map((e) => e.args), [[{ x: null, y: null, ok: 1 }, null, [null]]],
          `${u.userId}: NaN and Infinity as null:\n    ${u.rec.dump(marks[i])}`);
      }
      assert.deepEqual(b.rec.list('direct', { since: marks[1] }).map((e) => e.args), [[1]], show(b.rec.dump(marks[1])));
      assert.deepEqual(a.rec.list('direct', { since: marks[0] }), [], 'user:<B> is not A');
      assert.deepEqual(bystander.rec.list('news', { since: marks[2] }), [], 'the bystander is in no conversation');
    });
  });
}
