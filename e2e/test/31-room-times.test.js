// Room events and rosters tell times only as CONTRACT §1 allows: `at` and
// `since` rounded down to the minute, and null for a user whose last-seen
// setting is not `everyone`; the same for every member, on both nodes of a
// cluster (events made on the other node included), and a privacy change
// through one node applies at once on the other.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { request } from '../lib/http.js';
import { tokenFor } from '../lib/jwt.js';
import { SECRET } from '../lib/server.js';
import {
  TOPOLOGIES, uid, ack, show, connectUser, joinUser, startTopology, clusterDatabase,
} from '../lib/presence.js';

const MINUTE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:00\.000Z$/;

async function setPrivacy(url, user, lastSeen) {
  const res = await request(`${url}/v1/me/privacy`, {
    method: 'PUT',
    headers: { Authorization: `Bearer ${tokenFor(user, SECRET)}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ lastSeen }),
  });
  assert.equal(res.status, 200, `PUT privacy of ${user}: ${res.status} ${res.body}`);
}

async function restRoster(url, viewer, conv) {
  const res = await request(`${url}/v1/conversations/${conv}/presence`, {
    headers: { Authorization: `Bearer ${tokenFor(viewer, SECRET)}` },
  });
  assert.equal(res.status, 200, `GET roster: ${res.status} ${res.body}`);
  return JSON.parse(res.body);
}

const sinceOf = (online, user) => online.find((m) => m.userId === user)?.since;

function assertMinute(ts, what) {
  assert.match(String(ts), MINUTE, `${what} is rounded down to the minute: ${show(ts)}`);
  const ms = Date.parse(ts);
  assert.ok(ms <= Date.now() && Date.now() - ms < 65000, `${what} ${ts} is this minute`);
}

for (const kind of TOPOLOGIES) {
  describe(`room times and privacy [${kind}]`, { timeout: 120000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '31' });

    it('join/leave `at` and roster `since`: minute for everyone, null for nobody and contacts, for every member', { timeout: 40000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '31a' });
      const c = uid('c');
      const E = uid('E'); // everyone (the default)
      const N = uid('N'); // nobody
      const K = uid('K'); // contacts; E is one of K's contacts: room events ignore that
      await setPrivacy(topo.url2, N, 'nobody');
      await setPrivacy(topo.url1, K, 'contacts');

      const e = await joinUser(topo.url1, E, c, { t });
      assertMinute(sinceOf(e.joinAck.online, E), 'E.since in E\'s own ack');

      // N joins through node 2: E, on node 1, gets presence:join with at null.
      const markE = e.rec.mark();
      const n = await joinUser(topo.url2, N, c, { t });
      const joinN = await e.rec.wait('presence:join', { since: markE, pred: (p) => p.userId === N });
      assert.equal(joinN.payload.at, null, `presence:join of a nobody user: ${show(joinN.payload)}`);
      assert.equal(sinceOf(n.joinAck.online, N), null, `N's own roster entry is null too (room data is the same for all): ${show(n.joinAck)}`);
      assertMinute(sinceOf(n.joinAck.online, E), 'E.since in N\'s ack');

      // K joins on node 1; the roster of a late joiner on node 2 and REST on both nodes.
      const markN = n.rec.mark();
      await joinUser(topo.url1, K, c, { t });
      const joinK = await n.rec.wait('presence:join', { since: markN, pred: (p) => p.userId === K });
      assert.equal(joinK.payload.at, null, `presence:join of a contacts user: ${show(joinK.payload)}`);
      const late = await joinUser(topo.url2, uid('L'), c, { t });
      assert.equal(sinceOf(late.joinAck.online, N), null, show(late.joinAck));
      assert.equal(sinceOf(late.joinAck.online, K), null, show(late.joinAck));
      assertMinute(sinceOf(late.joinAck.online, E), 'E.since in a late ack');
      for (const url of topo.urls) {
        const r = await restRoster(url, E, c);
        assert.equal(sinceOf(r.online, N), null, `REST roster: ${show(r)}`);
        assert.equal(sinceOf(r.online, K), null, `REST roster: ${show(r)}`);
        assertMinute(sinceOf(r.online, E), 'E.since over REST');
      }

      // Leaves: N's through node 2 reaches E on node 1 with at null; E's own leave is a minute.
      const markE2 = e.rec.mark();
      await ack(n.socket, 'conversation:leave', { conversationId: c });
      const leaveN = await e.rec.wait('presence:leave', { since: markE2, pred: (p) => p.userId === N });
      assert.equal(leaveN.payload.at, null, show(leaveN.payload));
      const markL = late.rec.mark();
      await ack(e.socket, 'conversation:leave', { conversationId: c });
      const leaveE = await late.rec.wait('presence:leave', { since: markL, pred: (p) => p.userId === E });
      assertMinute(leaveE.payload.at, 'presence:leave at of an everyone user');
    });

    it('a privacy change through one node applies at once to room events and rosters on the other', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '31b' });
      const c = uid('c');
      const A = uid('A');
      const B = uid('B');
      const b = await joinUser(topo.url2, B, c, { t });
      const a = await joinUser(topo.url1, A, c, { t });
      await b.rec.wait('presence:join', { pred: (p) => p.userId === A && typeof p.at === 'string' });
      // Node 1 has A's setting (everyone) cached by now; A hides through node 2.
      await setPrivacy(topo.url2, A, 'nobody');
      const probe = await joinUser(topo.url1, uid('P'), c, { t });
      assert.equal(sinceOf(probe.joinAck.online, A), null, `A's since right after the change, node 1: ${show(probe.joinAck)}`);
      const markB = b.rec.mark();
      await ack(a.socket, 'conversation:leave', { conversationId: c });
      const left = await b.rec.wait('presence:leave', { since: markB, pred: (p) => p.userId === A });
      assert.equal(left.payload.at, null, `A's leave (made on node 1) right after the change: ${show(left.payload)}`);
      // And back.
      await setPrivacy(topo.url2, A, 'everyone');
      const markB2 = b.rec.mark();
      await ack(a.socket, 'conversation:join', { conversationId: c });
      const joined = await b.rec.wait('presence:join', { since: markB2, pred: (p) => p.userId === A });
      assertMinute(joined.payload.at, 'A\'s join at after going back to everyone');
    });
  });
}
