// typing:start / typing:stop and the `typing` event: one broadcast per
// typing session, the stop, expiry after --typing-ttl, forbidden before a
// join, the per-socket rate limit. One node, and two nodes (A on node 1,
// B on node 2).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { sleep } from '../lib/client.js';
import {
  TOPOLOGIES, uid, ack, show, connectUser, startPair, clusterDatabase,
} from '../lib/presence.js';

for (const kind of TOPOLOGIES) {
  describe(`typing [${kind}]`, { timeout: 180000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '22' });

    it('start broadcasts once per session, repeats are silent, stop {reason:"sent"} broadcasts typing:false', { timeout: 30000 }, async (t) => {
      const { topo, c, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--typing-ttl', '5s'], tag: '22a' });
      const markA = a.rec.mark();
      const start = await ack(b.socket, 'typing:start', { conversationId: c });
      assert.deepEqual(start, { ok: true }, `typing:start ack: ${show(start)}`);
      const { payload: on } = await a.rec.wait('typing', { since: markA, timeoutMs: 5000 });
      assert.deepEqual(on, { conversationId: c, userId: B, typing: true, ttlMs: 5000 }, `typing event: ${show(on)}`);

      // A join while B types: the ack's typing list names B.
      const probe = await connectUser(topo.url1, uid('P'), { t });
      const ackP = await ack(probe.socket, 'conversation:join', { conversationId: c });
      assert.deepEqual(ackP.typing, [B], `join ack while B types: ${show(ackP)}`);

      // A repeat within the TTL refreshes silently.
      await sleep(300);
      const markRepeat = a.rec.mark();
      const again = await ack(b.socket, 'typing:start', { conversationId: c });
      assert.deepEqual(again, { ok: true }, `repeat ack: ${show(again)}`);
      const extra = await a.rec.quiet('typing', 800, { since: markRepeat });
      assert.deepEqual(extra.map((e) => e.payload), [], 'a repeat within the TTL broadcasts nothing');

      const markStop = a.rec.mark();
      const stop = await ack(b.socket, 'typing:stop', { conversationId: c, reason: 'sent' });
      assert.deepEqual(stop, { ok: true }, `typing:stop ack: ${show(stop)}`);
      const { payload: off } = await a.rec.wait('typing', { since: markStop, timeoutMs: 5000 });
      assert.deepEqual(off, { conversationId: c, userId: B, typing: false, ttlMs: 5000 }, `stop event: ${show(off)}`);
      await probe.rec.wait('typing', { pred: (p) => p.userId === B && p.typing === false });

      // A second stop, while not typing, broadcasts nothing.
      const markStop2 = a.rec.mark();
      const stop2 = await ack(b.socket, 'typing:stop', { conversationId: c, reason: 'cleared' });
      assert.deepEqual(stop2, { ok: true }, `second stop ack: ${show(stop2)}`);
      const extraStop = await a.rec.quiet('typing', 600, { since: markStop2 });
      assert.deepEqual(extraStop.map((e) => e.payload), [], 'a stop while not typing broadcasts nothing');
      assert.deepEqual(b.rec.list('typing'), [], `the typist is not told of its own typing:\n    ${b.rec.dump()}`);

      // A new typing session after the stop broadcasts again.
      const markNew = a.rec.mark();
      await ack(b.socket, 'typing:start', { conversationId: c });
      const { payload: on2 } = await a.rec.wait('typing', { since: markNew, timeoutMs: 5000 });
      assert.equal(on2.typing, true);
      const ackQ = await ack(probe.socket, 'conversation:join', { conversationId: c });
      assert.deepEqual(ackQ.typing, [B]);
    });

    it('typing expires after --typing-ttl 1s: typing:false without a stop', { timeout: 30000 }, async (t) => {
      const { c, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--typing-ttl', '1s'], tag: '22b' });
      const markA = a.rec.mark();
      const sentAt = Date.now();
      const start = await ack(b.socket, 'typing:start', { conversationId: c });
      assert.deepEqual(start, { ok: true });
      const on = await a.rec.wait('typing', { since: markA, timeoutMs: 5000 });
      assert.deepEqual(on.payload, { conversationId: c, userId: B, typing: true, ttlMs: 1000 });
      const off = await a.rec.wait('typing', { since: markA, pred: (p) => p.typing === false, timeoutMs: 4000, label: 'typing:false by expiry' });
      const ms = off.at - sentAt;
      t.diagnostic(`typing:false arrived ${ms} ms after typing:start`);
      assert.deepEqual(off.payload, { conversationId: c, userId: B, typing: false, ttlMs: 1000 }, show(off.payload));
      assert.ok(ms >= 900, `not before the TTL (${ms} ms)`);
      assert.ok(ms <= 2500, `within ~2 s (${ms} ms)`);
      const all = await a.rec.quiet('typing', 500, { since: markA });
      assert.equal(all.length, 2, `exactly one start and one stop:\n    ${a.rec.dump(markA)}`);
      const probe = await connectUser(a.socket.io.uri, uid('P'), { t });
      const ackP = await ack(probe.socket, 'conversation:join', { conversationId: c });
      assert.deepEqual(ackP.typing, [], `no one types after the expiry: ${show(ackP)}`);
    });

    it('typing:start / typing:stop before joining: forbidden', { timeout: 30000 }, async (t) => {
      const { topo, c, a } = await startPair(kind, { t, db: store.db, args: [], tag: '22c' });
      const x = await connectUser(topo.url2, uid('X'), { t });
      const markA = a.rec.mark();
      const start = await ack(x.socket, 'typing:start', { conversationId: c });
      assert.equal(start?.ok, false, show(start));
      assert.equal(start.error?.code, 'forbidden', show(start));
      assert.equal(typeof start.error.message, 'string');
      const other = await ack(x.socket, 'typing:start', { conversationId: uid('nobody-here') });
      assert.equal(other?.error?.code, 'forbidden', `a conversation nobody joined: ${show(other)}`);
      // After a leave, the same.
      await ack(x.socket, 'conversation:join', { conversationId: c });
      await ack(x.socket, 'conversation:leave', { conversationId: c });
      const afterLeave = await ack(x.socket, 'typing:start', { conversationId: c });
      assert.equal(afterLeave?.error?.code, 'forbidden', `after leaving: ${show(afterLeave)}`);
      const extra = await a.rec.quiet('typing', 500, { since: markA });
      assert.deepEqual(extra, [], 'nothing broadcast');
      assert.ok(x.socket.connected);
    });

    it('a burst of 30 typing:start: some acks rate_limited, one broadcast', { timeout: 30000 }, async (t) => {
      const { c, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--typing-ttl', '5s'], tag: '22d' });
      const markA = a.rec.mark();
      const acks = await Promise.all(Array.from({ length: 30 }, () => ack(b.socket, 'typing:start', { conversationId: c })));
      const ok = acks.filter((x) => x?.ok === true).length;
      const limited = acks.filter((x) => x?.ok === false && x.error?.code === 'rate_limited').length;
      t.diagnostic(`30 typing:start: ${ok} ok, ${limited} rate_limited`);
      assert.equal(ok + limited, 30, `every ack is ok or rate_limited: ${show(acks.filter((x) => !(x?.ok === true || x?.error?.code === 'rate_limited')))}`);
      assert.ok(limited > 0, 'some are rate limited');
      assert.ok(ok > 0, 'some pass');
      const got = await a.rec.quiet('typing', 1000, { since: markA });
      assert.deepEqual(got.map((e) => e.payload), [{ conversationId: c, userId: B, typing: true, ttlMs: 5000 }],
        `one typing broadcast:\n    ${a.rec.dump(markA)}`);
      // The socket stays connected and works.
      assert.ok(b.socket.connected);
      const hb = await ack(b.socket, 'heartbeat', {});
      assert.equal(hb?.ok, true, show(hb));
    });
  });
}
