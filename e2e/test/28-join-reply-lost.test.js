// Cluster only: a conversation:join whose Redis reply is lost (the command
// ran on Redis, the node timed out waiting). Whatever the ack says, once
// the user's only socket has closed and the flap grace has passed, the
// user must not be left in the conversation's roster (no ghost member),
// and a presence:join that others got must be followed by a presence:leave.
// (Node 2's lease may lapse while its replies are lost: node 1 then reaps
// it, and node 2 re-registers its sockets when its replies flow again.)
// Node 2 talks to Redis through a proxy that can drop Redis's replies.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from '../lib/server.js';
import { sleep, closeClient } from '../lib/client.js';
import { startReplyProxy } from '../lib/reply-proxy.js';
import {
  uid, ack, show, within, connectUser, joinUser, freshDatabase, flushRedisPrefix,
} from '../lib/presence.js';

describe('join whose Redis reply is lost [cluster]', { timeout: 120000 }, () => {
  let db;
  before(async () => { db = await freshDatabase('28'); });
  after(async () => { await db?.drop(); });

  it('the user is not left in the roster after its socket closes', { timeout: 60000 }, async (t) => {
    const prefix = `e2e-28-${process.pid}-${uid('p')}`;
    const proxy = await startReplyProxy(6379, { t });
    const servers = [];
    t.after(async () => {
      await Promise.all(servers.map((s) => s.kill()));
      await flushRedisPrefix(prefix);
    });
    const common = ['--membership', 'open', '--redis-prefix', prefix, '--database-url', db.url, '--flap-grace', '1s', '--ttl', '6s'];
    servers.push(await startServer({ nodeId: 'e2e-28-n1', args: [...common, '--redis-url', 'redis://127.0.0.1:6379'] }));
    servers.push(await startServer({ nodeId: 'e2e-28-n2', args: [...common, '--redis-url', `redis://127.0.0.1:${proxy.port}`] }));
    const [n1, n2] = servers;

    const c = uid('c');
    const A = uid('A');
    const B = uid('B');
    const a = await joinUser(n1.url, A, c, { t });
    const b = await connectUser(n2.url, B, { t });
    const markA = a.rec.mark();

    proxy.dropReplies(true);
    const t0 = Date.now();
    const joinAck = await ack(b.socket, 'conversation:join', { conversationId: c }, within(15000))
      .catch((err) => ({ noAck: err.message }));
    t.diagnostic(`B's join while Redis replies are lost: ${show(joinAck)} after ${Date.now() - t0} ms (${proxy.droppedBytes} reply bytes dropped)`);
    proxy.dropReplies(false);

    // Node 2 recovers: its heartbeats are acked ok again.
    const deadline = Date.now() + 15000;
    let hb;
    do {
      hb = await ack(b.socket, 'heartbeat', {}, within(10000)).catch((err) => ({ noAck: err.message }));
      if (hb?.ok) break;
      await sleep(500);
    } while (Date.now() < deadline);
    assert.equal(hb?.ok, true, `node 2 works again after the replies flow: ${show(hb)}`);

    // What node 1 sees now.
    const probe = await connectUser(n1.url, uid('P'), { t });
    const during = await ack(probe.socket, 'conversation:join', { conversationId: c });
    await ack(probe.socket, 'conversation:leave', { conversationId: c });
    const listedDuring = during.online?.some((m) => m.userId === B);
    t.diagnostic(`roster on node 1 after the lost reply: ${show(during.online?.map((m) => m.userId))}; B listed: ${listedDuring}`);

    // B's only socket closes; after the flap grace B must be gone.
    const tClose = Date.now();
    closeClient(b.socket);
    await sleep(1000 + 2500);
    const afterClose = await ack(probe.socket, 'conversation:join', { conversationId: c });
    const ghost = afterClose.online?.some((m) => m.userId === B);
    const seen = a.rec.events.slice(markA).filter((e) => e.event.startsWith('presence:') && e.payload?.userId === B);
    t.diagnostic(`${Date.now() - tClose} ms after B's socket closed: roster ${show(afterClose.online?.map((m) => m.userId))}; A saw: ${seen.map((e) => `${e.event} ${e.payload.reason ?? ''}`).join(', ') || 'nothing'}`);
    if (ghost) {
      // How long the ghost lasts (--ttl 6s: an entry not refreshed should
      // expire), for the report; bounded to 3 x TTL.
      const until = Date.now() + 18000;
      let gone = false;
      while (!gone && Date.now() < until) {
        await sleep(2000);
        const r = await ack(probe.socket, 'conversation:join', { conversationId: c });
        gone = !r.online?.some((m) => m.userId === B);
      }
      const leave = a.rec.list('presence:leave', { since: markA, pred: (p) => p.userId === B })[0];
      t.diagnostic(`the ghost ${gone ? `disappeared ${Date.now() - tClose} ms after the close` : `was still listed ${Date.now() - tClose} ms after the close (--ttl 6s)`}; A's presence:leave: ${show(leave?.payload ?? null)}`);
    }
    assert.equal(ghost, false, `B is not in the roster once its only socket closed (join ack was ${show(joinAck)}): ${show(afterClose)}`);
    const joins = seen.filter((e) => e.event === 'presence:join').length;
    const leaves = seen.filter((e) => e.event === 'presence:leave').length;
    // A join whose outcome was unknown was never announced; if it had
    // taken effect, its removal is (a leave without a join is harmless, a
    // join without a leave would be a ghost).
    assert.ok(leaves >= joins, `every presence:join A got for B is followed by a presence:leave: ${seen.map((e) => e.event).join(', ')}`);
  });
});
