// presence:subscribe / presence:query and presence:update: never seen,
// online, offline with a minute-rounded lastSeen, several devices,
// unsubscribing, bulk lookups in request order and their limits; away
// after --away-after without activity. One node, and two nodes (A on
// node 1, B on node 2).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { sleep, closeClient } from '../lib/client.js';
import {
  WITH_SHARDED, uid, ack, show, connectUser, startTopology, clusterDatabase, recentDisplays,
} from '../lib/presence.js';

const neverSeen = (userId) => ({ userId, status: 'offline', lastSeen: null, lastSeenBucket: null, display: 'never seen' });
const online = (userId) => ({ userId, status: 'online', lastSeen: null, lastSeenBucket: null, display: 'online' });
const away = (userId) => ({ userId, status: 'away', lastSeen: null, lastSeenBucket: null, display: 'away' });

function assertOfflineJustNow(p, userId, disconnectedAt) {
  assert.equal(p.userId, userId);
  assert.equal(p.status, 'offline', show(p));
  assert.equal(typeof p.lastSeen, 'string', `lastSeen: ${show(p)}`);
  assert.match(p.lastSeen, /^\d{4}-\d\d-\d\dT\d\d:\d\d:00\.000Z$/, `lastSeen rounded down to the minute: ${p.lastSeen}`);
  // The disconnect time rounded down (the close may land a moment after t0,
  // across a minute boundary).
  const floors = [disconnectedAt, disconnectedAt + 1000].map((ms) => Math.floor(ms / 60000) * 60000);
  assert.ok(floors.includes(Date.parse(p.lastSeen)), `lastSeen ${p.lastSeen} is the disconnect time ${new Date(disconnectedAt).toISOString()} rounded down`);
  // "last seen just now", or "1 minute ago" when a minute boundary passed
  // since the (rounded) lastSeen: the display describes the value shown.
  assert.ok(recentDisplays(p.lastSeen).includes(p.display), `display ${show(p.display)} for lastSeen ${p.lastSeen} read at ${new Date().toISOString()} (expected one of ${show(recentDisplays(p.lastSeen))})`);
  assert.deepEqual(Object.keys(p).sort(), ['display', 'lastSeen', 'lastSeenBucket', 'status', 'userId']);
}

for (const kind of WITH_SHARDED) {
  describe(`presence:subscribe / presence:query [${kind}]`, { timeout: 240000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '25' });

    it('subscribe: never seen, then online and offline updates, only to subscribers, until unsubscribed', { timeout: 40000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, args: ['--flap-grace', '1s'], tag: '25a' });
      const A = uid('A');
      const B = uid('B');
      const C = uid('C');
      const a = await connectUser(topo.url1, A, { t });
      const d = await connectUser(topo.url1, uid('D'), { t }); // connected, not subscribed
      const sub = await ack(a.socket, 'presence:subscribe', { userIds: [B, C] });
      assert.deepEqual(sub, { ok: true, presences: [neverSeen(B), neverSeen(C)] }, `subscribe ack: ${show(sub)}`);

      const markA = a.rec.mark();
      const b = await connectUser(topo.url2, B, { t });
      const up = await a.rec.wait('presence:update', { since: markA, timeoutMs: 5000 });
      assert.deepEqual(up.payload, online(B), show(up.payload));
      await sleep(500);
      assert.equal(a.rec.list('presence:update', { since: markA }).length, 1, `one update:\n    ${a.rec.dump(markA)}`);
      assert.deepEqual(d.rec.list('presence:update'), [], `a socket that did not subscribe gets none:\n    ${d.rec.dump()}`);

      // query agrees.
      const q = await ack(a.socket, 'presence:query', { userIds: [B, C] });
      assert.deepEqual(q, { ok: true, presences: [online(B), neverSeen(C)] }, show(q));

      const markOff = a.rec.mark();
      const t0 = Date.now();
      b.socket.disconnect();
      const off = await a.rec.wait('presence:update', { since: markOff, timeoutMs: 6000 });
      t.diagnostic(`offline update ${off.at - t0} ms after the disconnect: ${show(off.payload)}`);
      assert.ok(off.at - t0 >= 900, `not before the flap grace (${off.at - t0} ms)`);
      assertOfflineJustNow(off.payload, B, t0);
      assert.deepEqual(d.rec.list('presence:update'), []);
      const q2 = await ack(d.socket, 'presence:query', { userIds: [B] });
      assertOfflineJustNow(q2.presences[0], B, t0);

      // Unsubscribe: no more updates.
      const unsub = await ack(a.socket, 'presence:subscribe', { userIds: [] });
      assert.deepEqual(unsub, { ok: true, presences: [] }, `unsubscribe ack: ${show(unsub)}`);
      const markUn = a.rec.mark();
      const b2 = await connectUser(topo.url2, B, { t });
      await sleep(1000);
      closeClient(b2.socket);
      await sleep(2000);
      assert.deepEqual(a.rec.list('presence:update', { since: markUn }), [], `no update after unsubscribing:\n    ${a.rec.dump(markUn)}`);
    });

    it('subscribe replaces the set; duplicates are ignored', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, args: ['--flap-grace', '1s'], tag: '25b' });
      const A = uid('A');
      const B = uid('B');
      const C = uid('C');
      const a = await connectUser(topo.url1, A, { t });
      const s1 = await ack(a.socket, 'presence:subscribe', { userIds: [B, B, C, B] });
      assert.equal(s1?.ok, true, show(s1));
      assert.ok(s1.presences.every((p) => p.userId === B || p.userId === C), show(s1));
      const markA = a.rec.mark();
      const b = await connectUser(topo.url2, B, { t });
      await a.rec.wait('presence:update', { since: markA, pred: (p) => p.userId === B });
      await sleep(500);
      assert.equal(a.rec.list('presence:update', { since: markA }).length, 1, `one update despite duplicates:\n    ${a.rec.dump(markA)}`);

      // Replace [B, C] by [C]: B's changes are no longer sent, C's are.
      const s2 = await ack(a.socket, 'presence:subscribe', { userIds: [C] });
      assert.deepEqual(s2, { ok: true, presences: [neverSeen(C)] }, show(s2));
      const markR = a.rec.mark();
      closeClient(b.socket);
      const c = await connectUser(topo.url2, C, { t });
      const upC = await a.rec.wait('presence:update', { since: markR, pred: (p) => p.userId === C });
      assert.deepEqual(upC.payload, online(C));
      await sleep(2000);
      assert.deepEqual(a.rec.list('presence:update', { since: markR, pred: (p) => p.userId === B }), [], `nothing about B:\n    ${a.rec.dump(markR)}`);
      closeClient(c.socket);
    });

    it('query: request order with duplicates, 1000 ids, limits and invalid ids', { timeout: 30000 }, async (t) => {
      // Many queries in a row on one socket: the query limit (41-event-limits) is lifted.
      const topo = await startTopology(kind, { t, db: store.db, args: ['--query-limit', '0'], tag: '25c' });
      const A = uid('A');
      const B = uid('B');
      const C = uid('C');
      const a = await connectUser(topo.url1, A, { t });
      await connectUser(topo.url2, B, { t });
      const q = await ack(a.socket, 'presence:query', { userIds: [C, B, C] });
      assert.deepEqual(q, { ok: true, presences: [neverSeen(C), online(B), neverSeen(C)] }, show(q));
      const self = await ack(a.socket, 'presence:query', { userIds: [A] });
      assert.deepEqual(self, { ok: true, presences: [online(A)] }, `a user asking about itself: ${show(self)}`);

      const thousand = Array.from({ length: 1000 }, (_, i) => `bulk-${i}`);
      thousand[500] = B;
      const big = await ack(a.socket, 'presence:query', { userIds: thousand });
      assert.equal(big?.ok, true, `1000 ids: ${show(big).slice(0, 300)}`);
      assert.deepEqual(big.presences.map((p) => p.userId), thousand, 'in request order');
      assert.equal(big.presences[500].status, 'online');

      const tooMany = await ack(a.socket, 'presence:query', { userIds: [...thousand, 'one-more'] });
      assert.equal(tooMany?.ok, false, show(tooMany));
      assert.equal(tooMany.error?.code, 'limit_exceeded', `1001 ids: ${show(tooMany)}`);
      const subTooMany = await ack(a.socket, 'presence:subscribe', { userIds: [...thousand, 'one-more'] });
      assert.equal(subTooMany?.error?.code, 'limit_exceeded', `subscribe 1001 ids: ${show(subTooMany)}`);

      for (const bad of [[], ['has space'], ['x'.repeat(129)], [''], [5], [B, null], ['ok', 'caf\u00e9']]) {
        const r = await ack(a.socket, 'presence:query', { userIds: bad });
        assert.equal(r?.ok, false, `query ${show(bad).slice(0, 60)}: ${show(r)}`);
        assert.equal(r.error?.code, 'invalid_argument', `query ${show(bad).slice(0, 60)}: ${show(r)}`);
      }
      for (const bad of [['has space'], ['x'.repeat(129)], [5]]) {
        const r = await ack(a.socket, 'presence:subscribe', { userIds: bad });
        assert.equal(r?.error?.code, 'invalid_argument', `subscribe ${show(bad).slice(0, 60)}: ${show(r)}`);
      }
      const max = await ack(a.socket, 'presence:query', { userIds: ['x'.repeat(128), 'a_b.c:d@e-f'] });
      assert.equal(max?.ok, true, `128 chars and every allowed punctuation: ${show(max)}`);
      assert.ok(a.socket.connected);
    });

    it('two devices of B: one disconnects, still online (no update); both, offline', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, args: ['--flap-grace', '1s'], tag: '25d' });
      const A = uid('A');
      const B = uid('B');
      const a = await connectUser(topo.url1, A, { t });
      await ack(a.socket, 'presence:subscribe', { userIds: [B] });
      const markA = a.rec.mark();
      const b1 = await connectUser(topo.url2, B, { t });
      const b2 = await connectUser(topo.url1, B, { t }); // the other node in the cluster
      await a.rec.wait('presence:update', { since: markA });
      const markOne = a.rec.mark();
      b1.socket.disconnect();
      await sleep(2500); // grace 1s, and then some
      assert.deepEqual(a.rec.list('presence:update', { since: markA }).map((e) => e.payload), [online(B)],
        `one online update, nothing when one device goes:\n    ${a.rec.dump(markA)}`);
      const q = await ack(a.socket, 'presence:query', { userIds: [B] });
      assert.deepEqual(q.presences, [online(B)], `still online: ${show(q)}`);
      const t0 = Date.now();
      b2.socket.disconnect();
      const off = await a.rec.wait('presence:update', { since: markOne, timeoutMs: 6000 });
      assertOfflineJustNow(off.payload, B, t0);
    });

    it('away after --away-after 2s of idle heartbeats; active heartbeat: online again; the roster shows away', { timeout: 40000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, args: ['--away-after', '2s'], tag: '25e' });
      const A = uid('A');
      const B = uid('B');
      const c = uid('c');
      const a = await connectUser(topo.url1, A, { t });
      await ack(a.socket, 'presence:subscribe', { userIds: [B] });
      const markA = a.rec.mark();
      const b = await connectUser(topo.url2, B, { t });
      const joinB = await ack(b.socket, 'conversation:join', { conversationId: c });
      assert.equal(joinB?.ok, true);
      await a.rec.wait('presence:update', { since: markA, pred: (p) => p.status === 'online' });
      const idleFrom = Date.now();
      let idle = true;
      const hbErrors = [];
      const idler = (async () => {
        while (idle) {
          const r = await ack(b.socket, 'heartbeat', { active: false }).catch((err) => ({ err: err.message }));
          if (!r?.ok) hbErrors.push(r);
          await sleep(500);
        }
      })();
      t.after(async () => { idle = false; await idler; });
      try {
        const aw = await a.rec.wait('presence:update', { since: markA, pred: (p) => p.status !== 'online', timeoutMs: 6000, label: 'presence:update away' });
        t.diagnostic(`away update ${aw.at - idleFrom} ms after the last activity`);
        assert.deepEqual(aw.payload, away(B), show(aw.payload));
        assert.ok(aw.at - idleFrom >= 1800, `not before --away-after (${aw.at - idleFrom} ms)`);
        assert.ok(aw.at - idleFrom <= 4500, `within ~4 s (${aw.at - idleFrom} ms)`);

        // A fresh join ack (A's own activity) lists B as away; query agrees.
        const roster = await ack(a.socket, 'conversation:join', { conversationId: c });
        assert.equal(roster?.ok, true, show(roster));
        const mB = roster.online.find((m) => m.userId === B);
        assert.equal(mB?.status, 'away', `B in A's join ack while idle: ${show(roster)}`);
        assert.equal(roster.online.find((m) => m.userId === A)?.status, 'online');
        const q = await ack(a.socket, 'presence:query', { userIds: [B] });
        assert.deepEqual(q.presences, [away(B)], show(q));
      } finally {
        idle = false;
        await idler;
      }
      assert.deepEqual(hbErrors, [], 'idle heartbeats acked ok');

      const markBack = a.rec.mark();
      const hb = await ack(b.socket, 'heartbeat', { active: true });
      assert.equal(hb?.ok, true, show(hb));
      const back = await a.rec.wait('presence:update', { since: markBack, timeoutMs: 5000, label: 'presence:update online' });
      assert.deepEqual(back.payload, online(B), show(back.payload));
      const roster2 = await ack(a.socket, 'conversation:join', { conversationId: c });
      assert.equal(roster2.online.find((m) => m.userId === B)?.status, 'online', show(roster2));
      // No presence:leave or join in the conversation for an away/online change.
      assert.deepEqual(a.rec.list('presence:leave'), []);
    });
  });
}
