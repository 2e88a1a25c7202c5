// Per-socket event limits (CONTRACT §1, Limits): one socket that sprays
// 300 concurrent presence:query of 1,000 ids, 300 presence:subscribe and
// 300 join/leave gets rate_limited acks beyond each burst, stays connected
// and works again once its buckets refill; a limit set to 0 is lifted; the
// refusals are counted in presenced_events_rate_limited_total{event}.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { sleep } from '../lib/client.js';
import { counter } from '../lib/http.js';
import {
  TOPOLOGIES, uid, ack, show, within, connectUser, startTopology, clusterDatabase,
} from '../lib/presence.js';

const ids = (n, stem) => Array.from({ length: n }, (_, i) => `${stem}-${i}`);

/** Sends n copies of one event at once; resolves with {ok, limited, other}. */
async function spray(socket, n, event, payload) {
  const acks = await Promise.all(Array.from({ length: n }, (_, i) => ack(socket, event, typeof payload === 'function' ? payload(i) : payload, within(60000))));
  const ok = acks.filter((x) => x?.ok === true).length;
  const limited = acks.filter((x) => x?.ok === false && x.error?.code === 'rate_limited' && typeof x.error.message === 'string').length;
  return { ok, limited, other: acks.filter((x) => !(x?.ok === true || x?.error?.code === 'rate_limited')), acks };
}

for (const kind of TOPOLOGIES) {
  describe(`event limits [${kind}]`, { timeout: 240000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '41' });

    it('300 presence:query of 1,000 ids, 300 presence:subscribe, 300 join/leave: rate_limited beyond the burst, still connected', { timeout: 120000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '41a' });
      const a = await connectUser(topo.url1, uid('A'), { t });
      let disconnected = null;
      a.socket.on('disconnect', (reason) => { disconnected = reason; });
      const thousand = ids(1000, uid('Q'));

      // presence:query and presence:subscribe share one bucket: 5/s, burst 10.
      const t0 = Date.now();
      const q = await spray(a.socket, 300, 'presence:query', { userIds: thousand });
      const qSecs = (Date.now() - t0) / 1000;
      t.diagnostic(`300 presence:query: ${q.ok} ok, ${q.limited} rate_limited in ${qSecs.toFixed(1)} s`);
      assert.deepEqual(q.other, [], `every ack is ok or rate_limited: ${show(q.other.slice(0, 3))}`);
      assert.ok(q.ok >= 10, `the burst of 10 passes: ${q.ok} ok`);
      assert.ok(q.ok <= 10 + Math.ceil(5 * qSecs) + 1, `at most the burst plus 5/s: ${q.ok} ok in ${qSecs.toFixed(1)} s`);
      for (const x of q.acks.filter((y) => y?.ok)) assert.equal(x.presences.length, 1000);

      const t1 = Date.now();
      const s = await spray(a.socket, 300, 'presence:subscribe', (i) => ({ userIds: thousand.slice(0, 1 + (i % 10)) }));
      const sSecs = (Date.now() - t1) / 1000;
      t.diagnostic(`300 presence:subscribe: ${s.ok} ok, ${s.limited} rate_limited in ${sSecs.toFixed(1)} s`);
      assert.deepEqual(s.other, [], show(s.other.slice(0, 3)));
      assert.ok(s.limited >= 300 - (10 + Math.ceil(5 * sSecs) + 1), `beyond the (shared) burst, refused: ${s.limited} rate_limited`);

      // conversation:join and conversation:leave together: 20/s, burst 200.
      const conv = uid('c41');
      const t2 = Date.now();
      const jl = await spray(a.socket, 600, 'conversation:join', (i) => ({ conversationId: `${conv}-${i % 300}` }));
      const jlSecs = (Date.now() - t2) / 1000;
      t.diagnostic(`600 conversation:join: ${jl.ok} ok, ${jl.limited} rate_limited in ${jlSecs.toFixed(1)} s`);
      // Joins past PRESENCE_MAX_CONVERSATIONS (100) answer limit_exceeded:
      // done nothing either, and not a rate limit.
      const notLimited = jl.acks.filter((x) => x?.error?.code !== 'rate_limited');
      assert.ok(notLimited.every((x) => x?.ok === true || x?.error?.code === 'limit_exceeded'), show(notLimited.filter((x) => !(x?.ok || x?.error?.code === 'limit_exceeded')).slice(0, 3)));
      assert.ok(notLimited.length >= 200, `the burst of 200 passes the limiter: ${notLimited.length}`);
      assert.ok(notLimited.length <= 200 + Math.ceil(20 * jlSecs) + 1, `at most the burst plus 20/s: ${notLimited.length} in ${jlSecs.toFixed(1)} s`);
      const lv = await spray(a.socket, 300, 'conversation:leave', (i) => ({ conversationId: `${conv}-${i}` }));
      t.diagnostic(`300 conversation:leave right after: ${lv.ok} ok, ${lv.limited} rate_limited`);
      // Leave shares join's bucket: joins and leaves together pass at most
      // the burst plus 20/s since the joins began.
      const passed = notLimited.length + (300 - lv.limited);
      assert.ok(passed <= 200 + Math.ceil(20 * (Date.now() - t2) / 1000) + 1, `joins and leaves share one bucket: ${passed} passed`);
      assert.ok(lv.limited > 0, 'leaves right after the joins are limited');

      // Still connected, and working: other kinds of events were never
      // limited, and the query bucket refills at 5/s.
      assert.ok(a.socket.connected, `still connected (disconnect: ${disconnected})`);
      assert.equal(disconnected, null);
      const hb = await ack(a.socket, 'heartbeat', {});
      assert.equal(hb?.ok, true, show(hb));
      await sleep(1000);
      const again = await ack(a.socket, 'presence:query', { userIds: thousand.slice(0, 3) });
      assert.equal(again?.ok, true, `a query after a second's pause: ${show(again)}`);

      const m = await counter(topo.url1, 'presenced_events_rate_limited_total', { event: 'presence:query' });
      assert.equal(m, q.limited, 'presence:query refusals counted');
      const mj = await counter(topo.url1, 'presenced_events_rate_limited_total', { event: 'conversation:join' });
      assert.equal(mj, jl.limited, 'conversation:join refusals counted');
    });

    it('heartbeat (10/s, burst 20), state:set (30/s, burst 60) and unknown events (20/s, burst 50)', { timeout: 60000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '41b' });
      const a = await connectUser(topo.url1, uid('A'), { t });
      // At most the burst plus what the rate refills while the spray lasts.
      const upTo = (burst, rate, since) => burst + Math.ceil(rate * (Date.now() - since) / 1000) + 1;
      let t0 = Date.now();
      const hb = await spray(a.socket, 100, 'heartbeat', {});
      t.diagnostic(`100 heartbeats: ${hb.ok} ok, ${hb.limited} rate_limited`);
      assert.deepEqual(hb.other, [], show(hb.other.slice(0, 3)));
      assert.ok(hb.ok >= 20 && hb.ok <= upTo(20, 10, t0), `about the burst of 20: ${hb.ok}`);

      const conv = uid('c41s');
      assert.equal((await ack(a.socket, 'conversation:join', { conversationId: conv }))?.ok, true);
      t0 = Date.now();
      const st = await spray(a.socket, 200, 'state:set', (i) => ({ conversationId: conv, state: { i } }));
      t.diagnostic(`200 state:set: ${st.ok} ok, ${st.limited} rate_limited`);
      assert.deepEqual(st.other, [], show(st.other.slice(0, 3)));
      assert.ok(st.ok >= 60 && st.ok <= upTo(60, 30, t0), `about the burst of 60: ${st.ok}`);

      t0 = Date.now();
      const un = await spray(a.socket, 200, 'no-such-event', {});
      const notFound = un.acks.filter((x) => x?.error?.code === 'not_found').length;
      t.diagnostic(`200 unknown events: ${notFound} not_found, ${un.limited} rate_limited`);
      assert.equal(notFound + un.limited, 200, show(un.acks.slice(0, 3)));
      assert.ok(notFound >= 50 && notFound <= upTo(50, 20, t0), `about the burst of 50: ${notFound}`);
      assert.ok(a.socket.connected);
    });

    it('a limit of 0 is lifted (load tests)', { timeout: 60000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '41c', args: ['--query-limit', '0', '--heartbeat-limit', '0'] });
      const a = await connectUser(topo.url1, uid('A'), { t });
      const q = await spray(a.socket, 100, 'presence:query', { userIds: ids(10, uid('Q')) });
      assert.equal(q.ok, 100, `every query ok: ${show(q.acks.find((x) => !x?.ok))}`);
      const hb = await spray(a.socket, 200, 'heartbeat', {});
      assert.equal(hb.ok, 200, `every heartbeat ok: ${show(hb.acks.find((x) => !x?.ok))}`);
      // The others keep their defaults.
      const ty = await spray(a.socket, 30, 'typing:stop', { conversationId: uid('c') });
      assert.ok(ty.limited > 0, 'typing still limited');
    });
  });
}
