// Leaves caused by connections going away: a client disconnect (after the
// flap grace), a reconnect within the grace (nothing said), an operator's
// disconnect (at once), a client process SIGKILLed, and (cluster only) a
// node SIGKILLed, whose users the surviving node evicts with reason
// "timeout".

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import net from 'node:net';

import { sleep, waitFor } from '../lib/client.js';
import { ADMIN_TOKEN } from '../lib/admin.js';
import { SECRET } from '../lib/server.js';
import { tokenFor } from '../lib/jwt.js';
import { request } from '../lib/http.js';
import {
  TOPOLOGIES, uid, ack, show, connectUser, joinUser, startTopology, startPair, clusterDatabase, spawnChildClient, recentDisplays, storedLastSeen,
} from '../lib/presence.js';

// `at` is rounded down to the minute (CONTRACT §1).
const MINUTE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:00\.000Z$/;

/** b (user B) disconnects once a has seen it join: a's presence:leave, ms after the disconnect, and a's mark before it. */
async function leaveAfterDisconnect(a, b, B) {
  await a.rec.wait('presence:join', { pred: (p) => p.userId === B });
  const markA = a.rec.mark();
  const t0 = Date.now();
  b.socket.disconnect();
  const left = await a.rec.wait('presence:leave', { since: markA, timeoutMs: 6000 });
  return { left, ms: left.at - t0, t0, markA };
}

for (const kind of TOPOLOGIES) {
  describe(`leaves on disconnect [${kind}]`, { timeout: 180000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '24' });

    it('--flap-grace 0s and --heartbeat-jitter 0s turn them off (not their defaults)', { timeout: 30000 }, async (t) => {
      const { A, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--flap-grace', '0s', '--heartbeat-jitter', '0s'], tag: '24z' });
      assert.equal(b.session.heartbeat?.jitterMs, 0, show(b.session));
      const { left, ms } = await leaveAfterDisconnect(a, b, B);
      t.diagnostic(`presence:leave ${ms} ms after the disconnect (${A} watching)`);
      assert.equal(left.payload.userId, B);
      assert.ok(ms < 1500, `no grace: the leave came ${ms} ms after the disconnect (the default grace is 3 s)`);
    });

    it('a client disconnect: presence:leave "disconnected" after the flap grace (1s)', { timeout: 30000 }, async (t) => {
      const { topo, c, A, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--flap-grace', '1s'], tag: '24a' });
      const { left, ms, t0, markA } = await leaveAfterDisconnect(a, b, B);
      t.diagnostic(`presence:leave ${ms} ms after the disconnect`);
      assert.deepEqual(Object.keys(left.payload).sort(), ['at', 'conversationId', 'reason', 'userId']);
      assert.equal(left.payload.conversationId, c);
      assert.equal(left.payload.userId, B);
      assert.equal(left.payload.reason, 'disconnected', show(left.payload));
      assert.match(left.payload.at, MINUTE);
      assert.ok(ms >= 900, `not before the grace (${ms} ms)`);
      assert.ok(ms <= 4000, `within ~4 s (${ms} ms)`);
      // `at` is the minute of the leave (rounded down, CONTRACT §1): not in the future.
      const at = Date.parse(left.payload.at);
      assert.ok(at >= t0 - 61000 && at <= Date.now(), `at ${left.payload.at} is the minute between the disconnect and now`);
      await sleep(500);
      assert.equal(a.rec.list('presence:leave', { since: markA }).length, 1, `one leave:\n    ${a.rec.dump(markA)}`);
      const probe = await connectUser(topo.url1, uid('P'), { t });
      const roster = await ack(probe.socket, 'conversation:join', { conversationId: c });
      assert.deepEqual(roster.online.map((m) => m.userId).sort(), [A, probe.userId].sort(), `B is gone: ${show(roster)}`);
    });

    it('a flap: B reconnects and joins again within the grace: no leave, no join, no presence:update (3 s)', { timeout: 30000 }, async (t) => {
      const { topo, c, A, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--flap-grace', '1s'], tag: '24b' });
      await a.rec.wait('presence:join', { pred: (p) => p.userId === B });
      const sinceB = b.joinAck.online.find((m) => m.userId === B).since;
      // A also watches B's status: a flap changes no status either.
      const sub = await ack(a.socket, 'presence:subscribe', { userIds: [B] });
      assert.equal(sub.presences?.[0]?.status, 'online', show(sub));
      const markA = a.rec.mark();
      const t0 = Date.now();
      b.socket.disconnect();
      await sleep(200);
      const b2 = await joinUser(topo.url2, B, c, { t });
      t.diagnostic(`rejoined ${Date.now() - t0} ms after the disconnect`);
      assert.ok(Date.now() - t0 < 1000, 'the rejoin happened within the grace');
      assert.deepEqual(b2.joinAck.online.map((m) => m.userId).sort(), [A, B].sort(), show(b2.joinAck));
      const sinceB2 = b2.joinAck.online.find((m) => m.userId === B).since;
      t.diagnostic(`B since: first ${sinceB}, after the flap ${sinceB2}`);
      await sleep(3000);
      const seen = a.rec.events.slice(markA).filter((e) => e.event.startsWith('presence:'));
      assert.deepEqual(seen.map((e) => `${e.event} ${show(e.payload)}`), [], 'A saw no leave, no join and no presence:update');
      assert.deepEqual(b2.rec.list('presence:join'), []);
    });

    it('an operator disconnect (admin API) of a user on both nodes: the leave and the offline status at once, not after the flap grace (10 s)', { timeout: 30000 }, async (t) => {
      const { topo, c, A, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--flap-grace', '10s', '--admin-token', ADMIN_TOKEN], tag: '24k' });
      const b2 = await joinUser(topo.url1, B, c, { t }); // B's second device, on node 1
      await a.rec.wait('presence:join', { pred: (p) => p.userId === B });
      const sub = await ack(a.socket, 'presence:subscribe', { userIds: [B] });
      assert.equal(sub.presences?.[0]?.status, 'online', show(sub));
      const login = await fetch(topo.url1 + '/admin/api/login', { method: 'POST', body: JSON.stringify({ token: ADMIN_TOKEN }) });
      assert.equal(login.status, 204);
      const cookie = login.headers.get('set-cookie').split(';')[0];
      const { csrf } = await (await fetch(topo.url1 + '/admin/api/session', { headers: { Cookie: cookie } })).json();
      const markA = a.rec.mark();
      const gone = [b, b2].map((x) => waitFor(x.socket, 'disconnect', { timeoutMs: 10000 }));
      const t0 = Date.now();
      const res = await fetch(topo.url1 + '/admin/api/users/disconnect', {
        method: 'POST',
        headers: { Cookie: cookie, 'X-CSRF-Token': csrf, 'Content-Type': 'application/json' },
        body: JSON.stringify({ userId: B, reason: 'e2e: kick' }),
      });
      assert.equal(res.status, 200);
      assert.equal((await res.json()).sockets, 2);
      for (const [reason] of await Promise.all(gone)) assert.equal(reason, 'io server disconnect');
      const left = await a.rec.wait('presence:leave', { since: markA, timeoutMs: 5000 });
      const off = await a.rec.wait('presence:update', { since: markA, pred: (p) => p.userId === B && p.status === 'offline', timeoutMs: 5000 });
      t.diagnostic(`presence:leave ${left.at - t0} ms and the offline update ${off.at - t0} ms after the request`);
      assert.equal(left.payload.userId, B);
      assert.equal(left.payload.reason, 'disconnected', show(left.payload));
      assert.ok(left.at - t0 < 3000 && off.at - t0 < 3000, 'at once, not after the 10 s grace');
      await sleep(300);
      assert.equal(a.rec.list('presence:leave', { since: markA }).length, 1, `one leave:\n    ${a.rec.dump(markA)}`);
      const probe = await connectUser(topo.url2, uid('P'), { t });
      const roster = await ack(probe.socket, 'conversation:join', { conversationId: c });
      assert.deepEqual(roster.online.map((m) => m.userId).sort(), [A, probe.userId].sort(), `B is gone: ${show(roster)}`);
    });

    it('a client process killed with SIGKILL: presence:leave "disconnected"', { timeout: 30000 }, async (t) => {
      const args = ['--ping-interval', '500ms', '--ping-timeout', '500ms', '--flap-grace', '500ms'];
      const topo = await startTopology(kind, { t, db: store.db, args, tag: '24c' });
      const c = uid('c');
      const A = uid('A');
      const B = uid('B');
      const a = await joinUser(topo.url1, A, c, { t });
      const markJoin = a.rec.mark();
      const child = await spawnChildClient(topo.url2, B, c, { t });
      await a.rec.wait('presence:join', { since: markJoin, pred: (p) => p.userId === B });
      const markA = a.rec.mark();
      const t0 = Date.now();
      const exit = await child.kill('SIGKILL');
      assert.equal(exit.signal, 'SIGKILL');
      const bound = 500 + 500 + 500;
      const left = await a.rec.wait('presence:leave', { since: markA, timeoutMs: bound + 3000 });
      const ms = left.at - t0;
      t.diagnostic(`presence:leave ${ms} ms after the kill (ping interval + timeout + grace = ${bound} ms)`);
      assert.equal(left.payload.userId, B);
      assert.equal(left.payload.conversationId, c);
      assert.equal(left.payload.reason, 'disconnected', show(left.payload));
      assert.ok(ms <= bound + 1000, `within interval + timeout + grace (+1 s slack): ${ms} ms`);
    });

    if (kind === 'cluster') {
      /** Two nodes (args), and user A on node 1 in conversation c, subscribed to user B. */
      const watcherOnNode1 = async (t, args, tag) => {
        const topo = await startTopology(kind, { t, db: store.db, args, tag });
        const c = uid('c');
        const A = uid('A');
        const B = uid('B');
        const a = await joinUser(topo.url1, A, c, { t });
        const sub = await ack(a.socket, 'presence:subscribe', { userIds: [B] });
        assert.equal(sub?.ok, true, show(sub));
        return { topo, c, A, B, a };
      };

      it('node 2 killed with SIGKILL: A on node 1 gets presence:leave "timeout" and presence:update offline', { timeout: 40000 }, async (t) => {
        const { topo, c, A, B, a } = await watcherOnNode1(t, ['--flap-grace', '1s'], '24d');
        const markJoin = a.rec.mark();
        const b = await joinUser(topo.url2, B, c, { t });
        assert.deepEqual(b.joinAck.online.map((m) => m.userId).sort(), [A, B].sort());
        // Online as seen from node 1 (presence:join is checked in 21-conversation;
        // this test is about the crash, so it does not depend on it).
        await a.rec.wait('presence:update', { since: markJoin, pred: (p) => p.userId === B && p.status === 'online', timeoutMs: 5000 })
          .catch((err) => assert.fail(`(before the kill) ${err.message}`));
        const q = await ack(a.socket, 'presence:query', { userIds: [B] });
        assert.equal(q.presences?.[0]?.status, 'online', `B online before the kill: ${show(q)}`);

        const markA = a.rec.mark();
        const t0 = Date.now();
        await topo.servers[1].kill();
        assert.equal(topo.servers[1].exit.signal, 'SIGKILL');
        const left = await a.rec.wait('presence:leave', { since: markA, timeoutMs: 10000 });
        t.diagnostic(`presence:leave ${left.at - t0} ms after the node was killed`);
        assert.equal(left.payload.userId, B);
        assert.equal(left.payload.conversationId, c);
        assert.equal(left.payload.reason, 'timeout', show(left.payload));
        assert.match(left.payload.at, MINUTE);
        const upd = await a.rec.wait('presence:update', { since: markA, pred: (p) => p.userId === B, timeoutMs: Math.max(1000, 10000 - (Date.now() - t0)) });
        t.diagnostic(`presence:update ${upd.at - t0} ms after the kill: ${show(upd.payload)}`);
        assert.equal(upd.payload.status, 'offline', show(upd.payload));
        assert.equal(typeof upd.payload.lastSeen, 'string', `lastSeen of a crashed node's user: ${show(upd.payload)}`);
        assert.match(upd.payload.lastSeen, /:00\.000Z$/, 'lastSeen rounded down to the minute');
        assert.ok(Date.parse(upd.payload.lastSeen) <= t0 && Date.parse(upd.payload.lastSeen) > t0 - 120000, `lastSeen ${upd.payload.lastSeen} near the crash`);
        assert.ok(recentDisplays(upd.payload.lastSeen, upd.at).includes(upd.payload.display),
          `display ${show(upd.payload.display)} for lastSeen ${upd.payload.lastSeen} received at ${new Date(upd.at).toISOString()}`);
        // Node 1 still works, and its roster no longer lists B.
        const probe = await connectUser(topo.url1, uid('P'), { t });
        const roster = await ack(probe.socket, 'conversation:join', { conversationId: c });
        assert.deepEqual(roster.online.map((m) => m.userId).sort(), [A, probe.userId].sort(), show(roster));
        await sleep(1000);
        assert.equal(a.rec.list('presence:leave', { since: markA }).length, 1, `one leave:\n    ${a.rec.dump(markA)}`);
        assert.equal(a.rec.list('presence:update', { since: markA }).length, 1, `one update:\n    ${a.rec.dump(markA)}`);
      });

      it('a user with a device on each node, node 2 SIGKILLed, then the node 1 device closes: last-seen is that close, not the away check that came before the reap', { timeout: 40000 }, async (t) => {
        // --away-after 2s: the away check of B (its other socket still on
        // the dead node) fires before the dead node's reap (lease 5 s); it
        // was recorded as a last-seen (not coarsened: --lastseen-coarse 1s),
        // later than the close, and kept
        const { topo, c, B, a } = await watcherOnNode1(t, ['--flap-grace', '0s', '--away-after', '2s', '--lastseen-flush-interval', '1s', '--lastseen-coarse', '1s'], '24k');
        const b1 = await joinUser(topo.url1, B, c, { t });
        await joinUser(topo.url2, B, c, { t });
        const markA = a.rec.mark();
        await topo.servers[1].kill();
        await sleep(1000);
        const closed = Date.now();
        b1.socket.disconnect();
        const away = await a.rec.wait('presence:update', { since: markA, pred: (p) => p.userId === B && p.status === 'away', timeoutMs: 8000 })
          .catch(() => null); // (the reap may come first: then there is nothing to check)
        const off = await a.rec.wait('presence:update', { since: markA, pred: (p) => p.userId === B && p.status === 'offline', timeoutMs: 12000 });
        t.diagnostic(`away ${away ? away.at - closed : '-'} ms, offline ${off.at - closed} ms after the close`);
        await sleep(2500); // two flushes
        const res = await request(`${topo.url1}/v1/users/${encodeURIComponent(B)}/presence`, { headers: { Authorization: `Bearer ${tokenFor(B, SECRET)}` } });
        assert.equal(res.status, 200, res.body);
        const own = JSON.parse(res.body);
        const ms = Date.parse(own.lastSeen) - closed;
        t.diagnostic(`B's own last-seen ${own.lastSeen}: ${ms} ms after the close`);
        assert.ok(ms >= -50 && ms <= 500, `B's last-seen ${own.lastSeen} is the close of its last live socket (${new Date(closed).toISOString()}), ${ms} ms after it`);
        // what the store keeps, read when Redis no longer holds the time
        const stored = await storedLastSeen(store.db, B);
        t.diagnostic(`stored: ${stored === null ? 'nothing' : `${stored - closed} ms after the close`}`);
        assert.ok(stored !== null && stored - closed >= -50 && stored - closed <= 500, `stored last-seen ${stored} is the close (${closed}), ${stored - closed} ms after it`);
      });

      it('a SIGTERM held up past the flap grace (a request body that stopped): the leaving user\'s presence:leave still comes, from the other node', { timeout: 40000 }, async (t) => {
        const { topo, c, B, a, b } = await startPair(kind, { t, db: store.db, args: ['--flap-grace', '1s', '--shutdown-timeout', '12s'], tag: '24h' });
        await a.rec.wait('presence:join', { pred: (p) => p.userId === B });
        // a REST request to node 2 whose body never finishes holds its HTTP shutdown up (half the timeout: 6 s)
        const port = Number(new URL(topo.url2).port);
        const stalled = net.connect(port, '127.0.0.1');
        await new Promise((resolve) => stalled.once('connect', resolve));
        stalled.on('error', () => {});
        t.after(() => stalled.destroy());
        stalled.write(`POST /v1/presence/query HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${tokenFor(uid('S'), SECRET)}\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"userIds":[`);
        await sleep(300);
        const markA = a.rec.mark();
        const t0 = Date.now();
        b.socket.disconnect();
        await sleep(200);
        const stopping = topo.servers[1].stop('SIGTERM', 20000);
        const left = await a.rec.wait('presence:leave', { since: markA, pred: (p) => p.userId === B, timeoutMs: 8000 })
          .catch((err) => assert.fail(`${err.message}; A's events:\n    ${a.rec.dump(markA)}`));
        t.diagnostic(`presence:leave ${left.at - t0} ms after the disconnect`);
        assert.equal(left.payload.conversationId, c);
        assert.equal(left.payload.reason, 'disconnected', show(left.payload));
        const exit = await stopping;
        assert.equal(exit.code, 0, show(exit));
        assert.ok(topo.servers[1].logs.some((l) => /requests still in flight/.test(l.msg ?? '')), 'the shutdown was held up');
      });
    }
  });
}
