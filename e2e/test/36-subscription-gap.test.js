// A gap in a node's subscription: node 1 connects to a private
// redis-server as its own ACL user, whose channels are taken away (Redis
// drops its subscriptions, and refuses them again) and given back after
// room events were published through node 2, which never reached node 1.
// When its subscription is back, a node makes up for them on its own
// sockets, from the rosters of their conversations: a typing stop for
// each user another node had shown typing there and no longer typing, a
// presence:join for each member missing from what they were shown, a
// presence:leave (reason timeout) for each one shown and gone. Before
// 2026-12-07 none was: a member who left stayed in node 1's clients'
// rooms for good, one who joined was missing, and a typing indicator
// stayed on (to clients that do not expire indicators with ttlMs).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from '../lib/server.js';
import { sleep } from '../lib/client.js';
import { uid, ack, show, joinUser, freshDatabase } from '../lib/presence.js';
import { privateRedis, redisCli } from '../lib/faults.js';

/**
 * Two nodes on a private redis-server, node 1 as the ACL user node1 (see
 * gap), and user a on node 1 and b on node 2 in a new conversation conv.
 */
async function gapPair(t, db) {
  const redis = await privateRedis(t);
  await redis.start();
  const prefix = uid('gap');
  assert.equal(await redisCli(redis.port, 'ACL', 'SETUSER', 'node1', 'on', '>pw1', '~*', '&*', '+@all'), 'OK');
  const args = ['--redis-prefix', prefix, '--database-url', db.url, '--membership', 'open'];
  const n1 = await startServer({ t, nodeId: uid('gap-n1'), args: [...args, '--redis-url', `redis://node1:pw1@127.0.0.1:${redis.port}`] });
  const n2 = await startServer({ t, nodeId: uid('gap-n2'), args: [...args, '--redis-url', redis.url] });
  const conv = uid('gc');
  const a = await joinUser(n1.url, uid('a'), conv, { t });
  const b = await joinUser(n2.url, uid('b'), conv, { t });
  await a.rec.wait('presence:join', { pred: (p) => p.userId === b.userId });
  return { redis, n1, n2, conv, a, b };
}

describe('a gap in one node\'s subscription', { timeout: 60000 }, () => {
  let db;
  before(async () => { db = await freshDatabase('gap'); });
  after(async () => { await db?.drop(); });

  it('a typing stop published in the gap reaches the other node\'s sockets after it', async (t) => {
    const { redis, conv, a, b } = await gapPair(t, db);
    assert.equal((await ack(b.socket, 'typing:start', { conversationId: conv }))?.ok, true);
    await a.rec.wait('typing', { pred: (p) => p.userId === b.userId && p.typing === true });
    const mark = a.rec.mark();

    // node 1 loses its subscription, and cannot subscribe again
    assert.equal(await redisCli(redis.port, 'ACL', 'SETUSER', 'node1', 'resetchannels'), 'OK');
    const r = await ack(b.socket, 'typing:stop', { conversationId: conv });
    const sent = Date.now();
    assert.equal(r?.ok, true, `typing:stop in the gap: ${show(r)}`);
    assert.deepEqual(await a.rec.quiet('typing', 500, { since: mark }), [], 'the stop reached node 1 in the gap');
    assert.equal(await redisCli(redis.port, 'ACL', 'SETUSER', 'node1', 'allchannels'), 'OK');

    const stop = await a.rec.wait('typing', { since: mark, pred: (p) => p.userId === b.userId && p.typing === false, timeoutMs: 8000, label: `${b.userId}'s stop` });
    t.diagnostic(`the stop reached the other node's socket ${stop.at - sent} ms after it was sent`);
    assert.deepEqual(stop.payload, { conversationId: conv, userId: b.userId, typing: false, ttlMs: stop.payload.ttlMs });
    // told once
    const stops = await a.rec.quiet('typing', 1000, { since: mark });
    assert.equal(stops.length, 1, `typing events after the gap: ${a.rec.dump(mark)}`);
    assert.ok(a.socket.connected && b.socket.connected);
  });
  it('a leave and a join sent in the gap reach the other node\'s sockets after it', async (t) => {
    const { redis, n2, conv, a, b } = await gapPair(t, db);
    const mark = a.rec.mark();

    assert.equal(await redisCli(redis.port, 'ACL', 'SETUSER', 'node1', 'resetchannels'), 'OK');
    assert.equal((await ack(b.socket, 'conversation:leave', { conversationId: conv }))?.ok, true);
    const c = await joinUser(n2.url, uid('c'), conv, { t });
    assert.deepEqual(await a.rec.quiet('presence:leave', 500, { since: mark }), [], 'the leave reached node 1 in the gap');
    assert.equal(await redisCli(redis.port, 'ACL', 'SETUSER', 'node1', 'allchannels'), 'OK');

    const leave = await a.rec.wait('presence:leave', { since: mark, pred: (p) => p.userId === b.userId, timeoutMs: 8000, label: `${b.userId}'s leave` });
    const join = await a.rec.wait('presence:join', { since: mark, pred: (p) => p.userId === c.userId, timeoutMs: 8000, label: `${c.userId}'s join` });
    t.diagnostic(`leave ${show(leave.payload)}, join ${show(join.payload)}`);
    assert.equal(leave.payload.reason, 'timeout');
    assert.equal(join.payload.conversationId, conv);
    // each told once, and nothing else
    await sleep(1000);
    assert.deepEqual(a.rec.list('presence:join', { since: mark }).length + a.rec.list('presence:leave', { since: mark }).length, 2, a.rec.dump(mark));
    // a's room now is what the roster says
    const r = await ack(a.socket, 'conversation:join', { conversationId: conv });
    assert.deepEqual(r.online.map((m) => m.userId).sort(), [a.userId, c.userId].sort(), show(r));
  });
});
