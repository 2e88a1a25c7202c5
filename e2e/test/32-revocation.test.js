// Membership changes apply at once on every node: a member removed through
// one node is evicted from the conversation on the others, and a join
// right after the change, through any node, with the old socket or a new
// one, is refused; a member added through one node may join at once on the
// other (no node answers from a stale membership cache).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { request } from '../lib/http.js';
import {
  TOPOLOGIES, uid, ack, show, connectUser, startTopology, clusterDatabase,
} from '../lib/presence.js';

const serviceToken = 'e2e-service-token-0123456789';

async function setMembers(url, conv, userIds) {
  const res = await request(`${url}/v1/service/conversations/${conv}/members`, {
    method: 'PUT',
    headers: { Authorization: `Bearer ${serviceToken}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ userIds }),
  });
  assert.equal(res.status, 200, `PUT members ${show(userIds)}: ${res.status} ${res.body}`);
  return JSON.parse(res.body);
}

for (const kind of TOPOLOGIES) {
  describe(`membership revocation [${kind}]`, { timeout: 120000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '32' });

    it('removed through node 2: A on node 1 is evicted, and every later join of A is forbidden', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '32a', args: ['--membership', 'store', '--service-token', serviceToken] });
      const c = uid('c');
      const A = uid('A');
      const B = uid('B');
      await setMembers(topo.url2, c, [A, B]);
      const a = await connectUser(topo.url1, A, { t });
      const joined = await ack(a.socket, 'conversation:join', { conversationId: c });
      assert.equal(joined?.ok, true, `A joins on node 1 (node 1 now caches A as a member): ${show(joined)}`);
      const b = await connectUser(topo.url2, B, { t });
      assert.equal((await ack(b.socket, 'conversation:join', { conversationId: c }))?.ok, true);

      const markB = b.rec.mark();
      const res = await setMembers(topo.url2, c, [B]);
      assert.deepEqual(res.removed, [A], show(res));
      // Evicted on node 1 by the time the PUT answered (or just after).
      const left = await b.rec.wait('presence:leave', { since: markB, pred: (p) => p.userId === A, timeoutMs: 3000 });
      assert.equal(left.payload.reason, 'left', show(left.payload));
      const typing = await ack(a.socket, 'typing:start', { conversationId: c });
      assert.equal(typing?.error?.code, 'forbidden', `A's old socket is out of the room: ${show(typing)}`);

      // Every join of A right after: the old socket, a new socket on node 1, one on node 2.
      const again = await ack(a.socket, 'conversation:join', { conversationId: c });
      assert.equal(again?.error?.code, 'forbidden', `A's old socket re-joins on node 1: ${show(again)}`);
      const a2 = await connectUser(topo.url1, A, { t });
      const fresh = await ack(a2.socket, 'conversation:join', { conversationId: c });
      assert.equal(fresh?.error?.code, 'forbidden', `a new socket of A on node 1: ${show(fresh)}`);
      const a3 = await connectUser(topo.url2, A, { t });
      const other = await ack(a3.socket, 'conversation:join', { conversationId: c });
      assert.equal(other?.error?.code, 'forbidden', `a new socket of A on node 2: ${show(other)}`);
      const roster = await ack(b.socket, 'conversation:join', { conversationId: c });
      assert.deepEqual(roster.online.map((m) => m.userId), [B], `A is not in the roster: ${show(roster)}`);
    });

    it('added through node 2: A, refused a moment ago on node 1, joins there at once', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '32b', args: ['--membership', 'store', '--service-token', serviceToken] });
      const c = uid('c');
      const A = uid('A');
      await setMembers(topo.url2, c, [uid('B')]);
      const a = await connectUser(topo.url1, A, { t });
      const refused = await ack(a.socket, 'conversation:join', { conversationId: c });
      assert.equal(refused?.error?.code, 'forbidden', `not a member yet (node 1 caches that): ${show(refused)}`);
      await setMembers(topo.url2, c, [A]);
      const joined = await ack(a.socket, 'conversation:join', { conversationId: c });
      assert.equal(joined?.ok, true, `A's join on node 1 right after being added through node 2: ${show(joined)}`);
    });
  });
}
