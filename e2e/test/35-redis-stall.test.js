// An 8 s Redis stall (DEBUG SLEEP 8) on a two-node cluster: nobody who
// stayed connected gets a presence:leave, and rosters are complete right
// after. Leases are on Redis's clock and a node reaps others only after
// renewing its own lease without a gap for a full lease, so every node
// renews first after the stall. A private redis-server (lib/faults.js).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from '../lib/server.js';
import { sleep, waitUntil } from '../lib/client.js';
import { request } from '../lib/http.js';
import { uid, ack, show, joinUser, freshDatabase } from '../lib/presence.js';
import { privateRedis, redisCli } from '../lib/faults.js';

describe('an 8 s Redis stall on two nodes', { timeout: 120000 }, () => {
  let db;
  before(async () => { db = await freshDatabase('stall'); });
  after(async () => { await db?.drop(); });

  it('costs nobody their presence: no presence:leave, rosters complete right after', async (t) => {
    const redis = await privateRedis(t);
    await redis.start();
    const prefix = uid('stall');
    const args = ['--redis-url', redis.url, '--redis-prefix', prefix, '--database-url', db.url, '--membership', 'open'];
    const n1 = await startServer({ t, nodeId: uid('stall-n1'), args });
    const n2 = await startServer({ t, nodeId: uid('stall-n2'), args });
    const conv = uid('sc');
    const a = await joinUser(n1.url, uid('a'), conv, { t });
    const b = await joinUser(n2.url, uid('b'), conv, { t });
    await a.rec.wait('presence:join', { pred: (p) => p.userId === b.userId });
    const markA = a.rec.mark();
    const markB = b.rec.mark();

    const started = Date.now();
    const out = await redisCli(redis.port, 'DEBUG', 'SLEEP', '8');
    assert.equal(out, 'OK', `DEBUG SLEEP: ${out}`);
    t.diagnostic(`Redis was stalled for ${Date.now() - started} ms`);
    assert.ok(Date.now() - started >= 7500);

    // right after: both rosters complete
    for (const [u, other] of [[a, b], [b, a]]) {
      let r;
      await waitUntil(async () => {
        r = await ack(u.socket, 'conversation:join', { conversationId: conv }).catch(() => null);
        return r?.ok === true;
      }, { timeoutMs: 3000, message: `${u.userId}'s join ack after the stall` });
      assert.deepEqual(r.online.map((m) => m.userId).sort(), [a.userId, b.userId].sort(), `${u.userId} sees ${other.userId}: ${show(r)}`);
    }
    // and over the next leases nobody is reaped or told of a leave
    await sleep(8000);
    assert.deepEqual(a.rec.payloads('presence:leave', { since: markA }), [], 'A got no presence:leave');
    assert.deepEqual(b.rec.payloads('presence:leave', { since: markB }), [], 'B got no presence:leave');
    for (const s of [n1, n2]) {
      const m = await request(`${s.url}/metrics`);
      const reaped = /^presenced_nodes_reaped_total (\d+)/m.exec(m.body);
      assert.equal(reaped?.[1] ?? '0', '0', `${s.url}: nodes reaped`);
    }
    assert.ok(a.socket.connected && b.socket.connected);
  });
});
