// state:set and the `state` event: fan-out to the others, throttled and
// coalesced per socket (at most 10/s, last value wins), the 1 KiB bound,
// clearing with null, on leave and on disconnect. One node, and two nodes
// (A on node 1, B on node 2).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { sleep } from '../lib/client.js';
import {
  TOPOLOGIES, uid, ack, show, startPair, startTopology, clusterDatabase, joinUser,
} from '../lib/presence.js';

/** b sets state in conversation c; resolves, once a got it, with a mark of a's recorder. */
async function stateSeen(a, b, c, state) {
  const mark = a.rec.mark();
  await ack(b.socket, 'state:set', { conversationId: c, state });
  await a.rec.wait('state', { since: mark, timeoutMs: 5000 });
  return a.rec.mark();
}

/** a's state and presence:leave events since mark, as [event, userId, state or reason]. */
function stateAndLeaves(a, mark) {
  return a.rec.events.slice(mark)
    .filter((e) => e.event === 'state' || e.event === 'presence:leave')
    .map((e) => [e.event, e.payload.userId, e.event === 'state' ? e.payload.state : e.payload.reason]);
}

/** A state object whose JSON encoding is exactly n bytes. */
function stateOfBytes(n) {
  const s = { s: '' };
  s.s = 'x'.repeat(n - JSON.stringify(s).length);
  assert.equal(JSON.stringify(s).length, n);
  return s;
}

for (const kind of TOPOLOGIES) {
  describe(`state [${kind}]`, { timeout: 180000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '23' });

    it('state:set reaches the others, not the sender; null clears', { timeout: 30000 }, async (t) => {
      const { c, B, a, b } = await startPair(kind, { t, db: store.db, args: [], tag: '23a' });
      const markA = a.rec.mark();
      const set = await ack(b.socket, 'state:set', { conversationId: c, state: { x: 1 } });
      assert.deepEqual(set, { ok: true }, `state:set ack: ${show(set)}`);
      const { payload } = await a.rec.wait('state', { since: markA, timeoutMs: 5000 });
      assert.deepEqual(payload, { conversationId: c, userId: B, state: { x: 1 } }, show(payload));

      // A nested object comes through as sent.
      await sleep(150);
      const rich = { cursor: { line: 3, col: 14 }, selection: [1, 2], colour: '#ff0000', name: 'B é ✓', on: true, none: null };
      const markRich = a.rec.mark();
      assert.deepEqual(await ack(b.socket, 'state:set', { conversationId: c, state: rich }), { ok: true });
      const { payload: p2 } = await a.rec.wait('state', { since: markRich, timeoutMs: 5000 });
      assert.deepEqual(p2, { conversationId: c, userId: B, state: rich });

      await sleep(150);
      const markNull = a.rec.mark();
      const clear = await ack(b.socket, 'state:set', { conversationId: c, state: null });
      assert.deepEqual(clear, { ok: true }, `state null ack: ${show(clear)}`);
      const { payload: cleared } = await a.rec.wait('state', { since: markNull, timeoutMs: 5000 });
      assert.deepEqual(cleared, { conversationId: c, userId: B, state: null }, show(cleared));
      await sleep(300);
      assert.deepEqual(b.rec.list('state'), [], `the sender gets no state of its own:\n    ${b.rec.dump()}`);
      assert.equal(a.rec.list('state', { since: markA }).length, 3, `three state events:\n    ${a.rec.dump(markA)}`);
    });

    it('20 rapid state:set: at most ~3 in the first 250 ms, coalesced to the last value, <= 10/s', { timeout: 30000 }, async (t) => {
      const { c, B, a, b } = await startPair(kind, { t, db: store.db, args: [], tag: '23b' });
      const markA = a.rec.mark();
      const t0 = Date.now();
      const acks = await Promise.all(Array.from({ length: 20 }, (_, i) => ack(b.socket, 'state:set', { conversationId: c, state: { n: i } })));
      assert.ok(acks.every((x) => x?.ok === true), `every state:set acked ok: ${show(acks)}`);
      const last = await a.rec.wait('state', { since: markA, pred: (p) => p.state?.n === 19, timeoutMs: 5000, label: 'state {n:19}' });
      await sleep(700); // nothing after the last value
      const got = a.rec.list('state', { since: markA });
      const early = got.filter((e) => e.at - t0 <= 250);
      const span = Math.max(1, got[got.length - 1].at - got[0].at);
      t.diagnostic(`A got ${got.length} state events (${early.length} in the first 250 ms), last ${last.at - t0} ms after the first emit: ${got.map((e) => e.payload.state?.n).join(',')}`);
      assert.ok(early.length <= 3, `at most ~3 in the first 250 ms:\n    ${a.rec.dump(markA)}`);
      assert.ok(got.length < 20, 'coalesced');
      assert.ok(got.length <= Math.floor(span / 100) + 2, `at most 10/s: ${got.length} events over ${span} ms`);
      assert.deepEqual(got[got.length - 1].payload, { conversationId: c, userId: B, state: { n: 19 } }, 'the last value is the last event');
      const ns = got.map((e) => e.payload.state.n);
      assert.deepEqual(ns, [...ns].sort((x, y) => x - y), `values in order: ${ns}`);
      assert.equal(new Set(ns).size, ns.length, `no value twice: ${ns}`);
    });

    it('state over 1 KiB, not an object, or with binary: invalid_argument; exactly 1 KiB is fine', { timeout: 30000 }, async (t) => {
      const { c, B, a, b } = await startPair(kind, { t, db: store.db, args: [], tag: '23c' });
      const markA = a.rec.mark();
      const big = await ack(b.socket, 'state:set', { conversationId: c, state: stateOfBytes(1025) });
      assert.equal(big?.ok, false, show(big));
      assert.equal(big.error?.code, 'invalid_argument', show(big));
      const huge = await ack(b.socket, 'state:set', { conversationId: c, state: stateOfBytes(10000) });
      assert.equal(huge?.error?.code, 'invalid_argument', show(huge));
      for (const bad of [5, 'x', [1, 2], true]) {
        const r = await ack(b.socket, 'state:set', { conversationId: c, state: bad });
        assert.equal(r?.error?.code, 'invalid_argument', `state ${show(bad)}: ${show(r)}`);
      }
      const missing = await ack(b.socket, 'state:set', { conversationId: c });
      assert.equal(missing?.error?.code, 'invalid_argument', `state missing: ${show(missing)}`);
      // a binary attachment is not JSON (it would reach the others as {})
      for (const bin of [{ img: Buffer.from([1, 2, 3]), n: 1 }, { a: [1, new Uint8Array(50000)] }]) {
        const r = await ack(b.socket, 'state:set', { conversationId: c, state: bin });
        assert.equal(r?.error?.code, 'invalid_argument', `state with binary: ${show(r)}`);
      }
      await sleep(300);
      assert.deepEqual(a.rec.list('state', { since: markA }), [], 'refused states are not broadcast');

      const max = stateOfBytes(1024);
      const okAck = await ack(b.socket, 'state:set', { conversationId: c, state: max });
      assert.deepEqual(okAck, { ok: true }, `a state of exactly 1024 bytes: ${show(okAck)}`);
      const { payload } = await a.rec.wait('state', { since: markA, timeoutMs: 5000 });
      assert.deepEqual(payload, { conversationId: c, userId: B, state: max });
      assert.ok(b.socket.connected);
    });

    it('leave clears the state: state null, then presence:leave', { timeout: 30000 }, async (t) => {
      const { c, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--flap-grace', '1s'], tag: '23d' });
      const markA = await stateSeen(a, b, c, { x: 1 });
      assert.deepEqual(await ack(b.socket, 'conversation:leave', { conversationId: c }), { ok: true });
      const left = await a.rec.wait('presence:leave', { since: markA, timeoutMs: 5000 });
      assert.equal(left.payload.reason, 'left');
      await sleep(300);
      assert.deepEqual(stateAndLeaves(a, markA), [['state', B, null], ['presence:leave', B, 'left']],
        `state null then presence:leave:\n    ${a.rec.dump(markA)}`);

      // Without a state, a leave sends no state event.
      const c2 = uid('c');
      await ack(a.socket, 'conversation:join', { conversationId: c2 });
      await ack(b.socket, 'conversation:join', { conversationId: c2 });
      const markB = a.rec.mark();
      await ack(b.socket, 'conversation:leave', { conversationId: c2 });
      await a.rec.wait('presence:leave', { since: markB, timeoutMs: 5000 });
      await sleep(300);
      assert.deepEqual(a.rec.list('state', { since: markB }), [], `no state event for a user without state:\n    ${a.rec.dump(markB)}`);
    });

    it("a user's two sockets: one's leave shows the other's state again (last write wins, per socket)", { timeout: 30000 }, async (t) => {
      const { topo, c, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--flap-grace', '1s'], tag: '23f' });
      // B's second socket on the other node (the same one when single)
      const b2 = await joinUser(topo.url1, B, c, { t });
      await stateSeen(a, b2, c, { s: 2 });
      await sleep(150);
      const markA = await stateSeen(a, b, c, { s: 1 });
      // b wrote last; its leave clears {s:1}, and b2's state is B's again
      assert.deepEqual(await ack(b.socket, 'conversation:leave', { conversationId: c }), { ok: true });
      await a.rec.wait('state', { since: markA, pred: (p) => p.state?.s === 2, timeoutMs: 5000, label: 'state {s:2} again' });
      await sleep(300);
      assert.deepEqual(stateAndLeaves(a, markA), [['state', B, null], ['state', B, { s: 2 }]],
        `state null, then b2's state; no presence:leave (b2 is there):\n    ${a.rec.dump(markA)}`);

      // b2's own clear leaves nothing to show: b has left
      const markClear = a.rec.mark();
      assert.deepEqual(await ack(b2.socket, 'state:set', { conversationId: c, state: null }), { ok: true });
      await a.rec.wait('state', { since: markClear, timeoutMs: 5000 });
      await sleep(300);
      assert.deepEqual(stateAndLeaves(a, markClear), [['state', B, null]], a.rec.dump(markClear));

      // b back with a state, then b2 sets one and goes away: b's shows again
      const rejoin = await ack(b.socket, 'conversation:join', { conversationId: c });
      assert.equal(rejoin?.ok, true, show(rejoin));
      await stateSeen(a, b, c, { s: 3 });
      await sleep(150);
      const markGone = await stateSeen(a, b2, c, { s: 4 });
      b2.socket.disconnect();
      await a.rec.wait('state', { since: markGone, pred: (p) => p.state?.s === 3, timeoutMs: 5000, label: 'state {s:3} again' });
      await sleep(1500); // past the flap grace: B is still online through b
      assert.deepEqual(stateAndLeaves(a, markGone), [['state', B, null], ['state', B, { s: 3 }]], a.rec.dump(markGone));
    });

    it("a user's sockets racing: the restore after a leave goes at once, a later set stays; a null from a socket that shows nothing clears nothing", { timeout: 30000 }, async (t) => {
      const { topo, c, B, a, b } = await startPair(kind, { t, db: store.db, args: [], tag: '23g' });
      const b1 = await joinUser(topo.url1, B, c, { t });
      const b2 = await joinUser(topo.url2, B, c, { t });
      // b2 shows nothing: its null clears nothing
      const markNone = a.rec.mark();
      assert.deepEqual(await ack(b2.socket, 'state:set', { conversationId: c, state: null }), { ok: true });
      await sleep(300);
      assert.deepEqual(a.rec.list('state', { since: markNone }), [], `a null from a socket without a state:\n    ${a.rec.dump(markNone)}`);

      await stateSeen(a, b, c, { z: 1 });
      await sleep(300);
      await stateSeen(a, b1, c, { y: 1 });
      // b leaves 20 ms after b1's set (within b1's throttle), b2 sets 10 ms later
      await sleep(20);
      const mark = a.rec.mark();
      assert.deepEqual(await ack(b.socket, 'conversation:leave', { conversationId: c }), { ok: true });
      await sleep(10);
      assert.deepEqual(await ack(b2.socket, 'state:set', { conversationId: c, state: { w: 1 } }), { ok: true });
      await sleep(700);
      const got = a.rec.list('state', { since: mark }).map((e) => e.payload.state);
      assert.deepEqual(got[got.length - 1], { w: 1 }, `the last set stays: ${JSON.stringify(got)}`);
      assert.deepEqual(got[0], null, `the leave's null first: ${JSON.stringify(got)}`);
    });

    it("last write wins over the throttle: a held state is not shown over a later one of the user's other socket, and shows again once that one is cleared", { timeout: 30000 }, async (t) => {
      const { topo, c, B, a, b } = await startPair(kind, { t, db: store.db, args: [], tag: '23h' });
      // b is on node 2, b2 on node 1 (the same node when single)
      const b2 = await joinUser(topo.url1, B, c, { t });
      await stateSeen(a, b, c, { a: 0 });
      const mark = a.rec.mark();
      // within b's throttle interval: held
      assert.deepEqual(await ack(b.socket, 'state:set', { conversationId: c, state: { a: 1 } }), { ok: true });
      await sleep(20);
      assert.deepEqual(await ack(b2.socket, 'state:set', { conversationId: c, state: { y: 1 } }), { ok: true });
      await sleep(500);
      const got = a.rec.list('state', { since: mark }).map((e) => e.payload.state);
      assert.deepEqual(got, [{ y: 1 }], `b2's later state, not b's held one over it: ${JSON.stringify(got)}`);
      // b2 clears: b's state (its last, held one) is B's again
      const markClear = a.rec.mark();
      assert.deepEqual(await ack(b2.socket, 'state:set', { conversationId: c, state: null }), { ok: true });
      await a.rec.wait('state', { since: markClear, pred: (p) => p.state?.a === 1, timeoutMs: 5000, label: 'state {a:1} again' });
      await sleep(300);
      assert.deepEqual(stateAndLeaves(a, markClear), [['state', B, null], ['state', B, { a: 1 }]], a.rec.dump(markClear));
    });

    if (kind === 'cluster') {
      it("a user's sockets on three nodes: after one leaves, every member ends on the last state set by one still there", { timeout: 60000 }, async (t) => {
        const topo = await startTopology(kind, { t, db: store.db, nodes: 3, tag: '23i' });
        const c = uid('c');
        const U = uid('U');
        // an observer on each node, the user's three devices one per node
        const obs = [];
        for (const url of topo.urls) obs.push(await joinUser(url, uid('O'), c, { t }));
        const d = [];
        for (const url of topo.urls) d.push(await joinUser(url, U, c, { t }));
        const mark = obs.map((o) => o.rec.mark());
        for (const [i, v] of [[0, 'X'], [1, 'Y'], [2, 'Z']]) {
          assert.deepEqual(await ack(d[i].socket, 'state:set', { conversationId: c, state: { v } }), { ok: true });
          await sleep(150);
        }
        // the device of Z leaves: Y (node 2's) is the user's last state still there
        assert.deepEqual(await ack(d[2].socket, 'conversation:leave', { conversationId: c }), { ok: true });
        await sleep(800);
        for (const [i, o] of obs.entries()) {
          const got = o.rec.list('state', { since: mark[i] }).filter((e) => e.payload.userId === U).map((e) => e.payload.state);
          assert.deepEqual(got[got.length - 1], { v: 'Y' }, `observer on node ${i + 1} ends on Y: ${JSON.stringify(got)}`);
          assert.ok(!got.slice(got.indexOf(null)).some((s) => s?.v === 'X'), `node 1's older X not shown again after the null to the observer on node ${i + 1}: ${JSON.stringify(got)}`);
        }
      });
    }

    it('disconnect clears the state: state null, then presence:leave after the grace', { timeout: 30000 }, async (t) => {
      const { c, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--flap-grace', '1s'], tag: '23e' });
      const markA = await stateSeen(a, b, c, { y: 2 });
      b.socket.disconnect();
      await a.rec.wait('presence:leave', { since: markA, timeoutMs: 6000 });
      assert.deepEqual(stateAndLeaves(a, markA), [['state', B, null], ['presence:leave', B, 'disconnected']],
        `state null then presence:leave:\n    ${a.rec.dump(markA)}`);
    });
  });
}
