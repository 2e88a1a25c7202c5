// A hidden user's status changes are not observable through presence
// subscriptions (CONTRACT §3), however a viewer churns its subscriptions:
// viewer V has one socket subscribed to H (last-seen `nobody`) all along
// and a second socket re-subscribing [H] and [] in a loop; H connects, then
// disconnects. V gets no presence:update about H on either socket, and
// every subscribe ack shows H hidden.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { request } from '../lib/http.js';
import { tokenFor } from '../lib/jwt.js';
import { SECRET } from '../lib/server.js';
import { sleep } from '../lib/client.js';
import {
  TOPOLOGIES, uid, ack, show, connectUser, startTopology, clusterDatabase,
} from '../lib/presence.js';

for (const kind of TOPOLOGIES) {
  describe(`subscribe churn and hidden users [${kind}]`, { timeout: 120000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '33' });

    it('no presence:update about a nobody user, whatever the churn; visible users still update', { timeout: 40000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '33a', args: ['--flap-grace', '300ms'] });
      const H = uid('H');
      const W = uid('W'); // everyone: its updates must still arrive
      const V = uid('V');
      const res = await request(`${topo.url2}/v1/me/privacy`, {
        method: 'PUT',
        headers: { Authorization: `Bearer ${tokenFor(H, SECRET)}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ lastSeen: 'nobody' }),
      });
      assert.equal(res.status, 200, res.body);

      const v1 = await connectUser(topo.url1, V, { t });
      const sub = await ack(v1.socket, 'presence:subscribe', { userIds: [H, W] });
      assert.equal(sub?.ok, true, show(sub));
      assert.equal(sub.presences[0].status, 'hidden', show(sub));
      const v2 = await connectUser(topo.url2, V, { t });

      let stop = false;
      const acks = [];
      const churn = (async () => {
        while (!stop) {
          for (const ids of [[H], []]) {
            const a = await ack(v2.socket, 'presence:subscribe', { userIds: ids });
            if (a?.ok) acks.push(...a.presences);
            else if (a?.error?.code === 'rate_limited') await sleep(50);
            else throw new Error(`subscribe: ${show(a)}`);
          }
        }
      })();

      await sleep(300);
      const h = await connectUser(topo.url1, H, { t });
      const w = await connectUser(topo.url2, W, { t });
      await v1.rec.wait('presence:update', { pred: (p) => p.userId === W && p.status === 'online', timeoutMs: 5000 });
      await sleep(700);
      h.socket.disconnect();
      w.socket.disconnect();
      await v1.rec.wait('presence:update', { pred: (p) => p.userId === W && p.status === 'offline', timeoutMs: 5000 });
      await sleep(700);
      stop = true;
      await churn;

      const leaked = [...v1.rec.payloads('presence:update'), ...v2.rec.payloads('presence:update')].filter((p) => p.userId === H);
      assert.deepEqual(leaked, [], `presence:update about hidden H (socket 1:\n    ${v1.rec.dump()}\n  socket 2:\n    ${v2.rec.dump()})`);
      assert.ok(acks.length > 0, 'the churn got acks');
      for (const p of acks) {
        assert.equal(p.userId, H);
        assert.equal(p.status, 'hidden', `an ack shows H hidden: ${show(p)}`);
        assert.equal(p.lastSeen, null, show(p));
      }
      t.diagnostic(`${acks.length} acks during the churn`);
    });

    it('a user who hides through the other node is shown hidden at once; their disconnect then tells nothing', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '33b', args: ['--flap-grace', '300ms'] });
      const H = uid('H');
      const V = uid('V');
      const { tc: h, v } = await watching(topo, t, H, V);
      await hiddenAtOnceThenQuiet(v, H, h, () => privacy(topo.url2, H, 'nobody'));
    });

    it("a viewer taken off a contacts user's list sees them hidden at once, and back on it, visible at once", { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '33c', args: ['--flap-grace', '300ms', '--service-token', serviceToken] });
      const T = uid('T');
      const V = uid('V');
      assert.equal((await contacts(topo.url1, T, [V])).status, 200);
      assert.equal((await privacy(topo.url1, T, 'contacts')).status, 200);
      const { tc, v } = await watching(topo, t, T, V);

      await hiddenAtOnceThenQuiet(v, T, tc, () => contacts(topo.url2, T, []));
      await visibleAtOnce(v, T, () => contacts(topo.url2, T, [V]));
    });

    it('a viewer who sets nobody sees the others hidden at once (reciprocity), and visible again when it sets everyone', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '33d', args: ['--flap-grace', '300ms'] });
      const T = uid('T');
      const V = uid('V');
      const { tc, v } = await watching(topo, t, T, V);

      await hiddenAtOnceThenQuiet(v, T, tc, () => privacy(topo.url2, V, 'nobody'));
      await visibleAtOnce(v, T, () => privacy(topo.url2, V, 'everyone'));
    });
  });
}

const serviceToken = 'e2e-service-token-0123456789';

/** PUT /v1/me/privacy as user. */
function privacy(url, user, lastSeen) {
  return request(`${url}/v1/me/privacy`, {
    method: 'PUT',
    headers: { Authorization: `Bearer ${tokenFor(user, SECRET)}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ lastSeen }),
  });
}

/** PUT /v1/service/users/{user}/contacts. */
function contacts(url, user, userIds) {
  return request(`${url}/v1/service/users/${user}/contacts`, {
    method: 'PUT',
    headers: { Authorization: `Bearer ${serviceToken}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ userIds }),
  });
}

/** T connects to node 2, V to node 1 and subscribes to T (seen online). */
async function watching(topo, t, T, V) {
  const tc = await connectUser(topo.url2, T, { t });
  const v = await connectUser(topo.url1, V, { t });
  const sub = await ack(v.socket, 'presence:subscribe', { userIds: [T] });
  assert.equal(sub.presences?.[0]?.status, 'online', show(sub));
  return { tc, v };
}

/**
 * change() (a request answered 200) makes viewer v, subscribed to T, see T
 * hidden at once; T's socket tc then disconnects, and v is told nothing:
 * its moment would show.
 */
async function hiddenAtOnceThenQuiet(v, T, tc, change) {
  const mark = v.rec.mark();
  const res = await change();
  assert.equal(res.status, 200, res.body);
  const hid = await v.rec.wait('presence:update', { since: mark, pred: (p) => p.userId === T, timeoutMs: 3000, label: 'hidden at once' });
  assert.equal(hid.payload.status, 'hidden', show(hid.payload));
  const mark2 = v.rec.mark();
  tc.socket.disconnect();
  const quiet = await v.rec.quiet('presence:update', 1500, { since: mark2 });
  assert.deepEqual(quiet.map((e) => e.payload), [], 'no update when the hidden user goes offline');
}

/** change() makes v see T (offline) at once, with its last-seen time. */
async function visibleAtOnce(v, T, change) {
  const mark = v.rec.mark();
  const res = await change();
  assert.equal(res.status, 200, res.body);
  const shown = await v.rec.wait('presence:update', { since: mark, pred: (p) => p.userId === T, timeoutMs: 3000, label: 'visible at once' });
  assert.equal(shown.payload.status, 'offline', show(shown.payload));
  assert.equal(typeof shown.payload.lastSeen, 'string', show(shown.payload));
}
