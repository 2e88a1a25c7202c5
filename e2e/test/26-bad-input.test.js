// Bad input on every client event: invalid_argument (or not_found for an
// unknown event, limit_exceeded past --max-conversations), nothing changes,
// and the socket stays connected. The heartbeat ack. One node, and two
// nodes (A on node 1, B on node 2).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { sleep } from '../lib/client.js';
import {
  TOPOLOGIES, TIMESTAMP, uid, ack, show, connectUser, joinUser, startTopology, clusterDatabase,
} from '../lib/presence.js';

const EVENTS = [
  'conversation:join', 'conversation:leave', 'heartbeat', 'typing:start', 'typing:stop',
  'presence:query', 'presence:subscribe', 'state:set',
];
const CONVERSATION_EVENTS = ['conversation:join', 'conversation:leave', 'typing:start', 'typing:stop', 'state:set'];

async function stillUp(socket, what) {
  assert.ok(socket.connected, `still connected after ${what}`);
  const hb = await ack(socket, 'heartbeat', {});
  assert.equal(hb?.ok, true, `heartbeat after ${what}: ${show(hb)}`);
}

function assertError(res, code, what) {
  assert.equal(res?.ok, false, `${what}: ${show(res)}`);
  assert.equal(res.error?.code, code, `${what}: ${show(res)}`);
  assert.equal(typeof res.error.message, 'string', `${what}: error.message is a string: ${show(res)}`);
  assert.ok(res.error.message.length > 0, `${what}: error.message not empty`);
}

for (const kind of TOPOLOGIES) {
  describe(`bad input and heartbeat [${kind}]`, { timeout: 180000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '26' });

    it('invalid payloads on every event: invalid_argument, nothing broadcast, still connected', { timeout: 60000 }, async (t) => {
      // Bad input is refused before any work, and counts against the
      // socket's event limits (41-event-limits); lifted here for the many
      // payloads in a row.
      const noLimits = ['typing', 'join', 'query', 'state', 'heartbeat', 'event'].flatMap((k) => [`--${k}-limit`, '0']);
      const topo = await startTopology(kind, { t, db: store.db, args: noLimits, tag: '26a' });
      const c = uid('c');
      const A = uid('A');
      const B = uid('B');
      const a = await joinUser(topo.url1, A, c, { t });
      const b = await joinUser(topo.url2, B, c, { t });
      // B's presence:join is checked in 21-conversation; here it only must
      // not be counted as a reaction to the bad input.
      await a.rec.wait('presence:join', { pred: (p) => p.userId === B, timeoutMs: 2000 }).catch(() => {});
      const markA = a.rec.mark();

      // Not an object.
      for (const ev of EVENTS) {
        for (const bad of ['x', 5, [], [{ conversationId: c }], true]) {
          assertError(await ack(b.socket, ev, bad), 'invalid_argument', `${ev} with ${show(bad)}`);
        }
      }
      await stillUp(b.socket, 'non-object payloads');

      // conversationId missing, too long, with a space, not a string, empty, non-ASCII.
      const badIds = [undefined, null, 'x'.repeat(129), 'has space', 5, '', 'caf\u00e9', 'a/b', { id: c }, [c]];
      for (const ev of CONVERSATION_EVENTS) {
        for (const id of badIds) {
          const payload = id === undefined ? {} : { conversationId: id };
          if (ev === 'state:set') payload.state = { x: 1 };
          assertError(await ack(b.socket, ev, payload), 'invalid_argument', `${ev} with conversationId ${show(id)?.slice(0, 40)}`);
        }
        await stillUp(b.socket, `bad conversationIds on ${ev}`);
      }

      // Other fields of the wrong type.
      assertError(await ack(b.socket, 'heartbeat', { active: 'yes' }), 'invalid_argument', 'heartbeat active "yes"');
      assertError(await ack(b.socket, 'heartbeat', { active: 1 }), 'invalid_argument', 'heartbeat active 1');
      assertError(await ack(b.socket, 'typing:stop', { conversationId: c, reason: 'bogus' }), 'invalid_argument', 'typing:stop reason "bogus"');
      assertError(await ack(b.socket, 'typing:stop', { conversationId: c, reason: 5 }), 'invalid_argument', 'typing:stop reason 5');
      for (const ev of ['presence:query', 'presence:subscribe']) {
        assertError(await ack(b.socket, ev, {}), 'invalid_argument', `${ev} without userIds`);
        assertError(await ack(b.socket, ev, { userIds: B }), 'invalid_argument', `${ev} userIds a string`);
        assertError(await ack(b.socket, ev, { userIds: { 0: B } }), 'invalid_argument', `${ev} userIds an object`);
      }
      await stillUp(b.socket, 'fields of the wrong type');

      // Nothing of that reached A, and B is still in the conversation once.
      await sleep(300);
      assert.deepEqual(a.rec.events.slice(markA).map((e) => e.event), [], `A saw nothing:\n    ${a.rec.dump(markA)}`);
      const probe = await connectUser(topo.url1, uid('P'), { t });
      const roster = await ack(probe.socket, 'conversation:join', { conversationId: c });
      assert.deepEqual(roster.online.map((m) => m.userId).sort(), [A, B, probe.userId].sort(), show(roster));
      assert.deepEqual(roster.typing, []);

      // The boundary that is valid: 128 characters of every allowed kind.
      const longest = `${'aZ09_.:@-'.repeat(14)}ab`;
      assert.equal(longest.length, 128);
      const ok = await ack(b.socket, 'conversation:join', { conversationId: longest });
      assert.equal(ok?.ok, true, `conversationId of 128 allowed characters: ${show(ok)}`);
      assert.equal(ok.conversationId, longest);
    });

    it('an unknown event with an ack: not_found; without an ack: ignored', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '26b' });
      const b = await connectUser(topo.url2, uid('B'), { t });
      assertError(await ack(b.socket, 'no:such-event', { conversationId: 'x' }), 'not_found', 'unknown event');
      assertError(await ack(b.socket, 'presence:join', { conversationId: 'x' }), 'not_found', 'a server→client event sent by the client');
      assertError(await ack(b.socket, 'nothing'), 'not_found', 'unknown event without payload');
      b.socket.emit('no:such-event', { a: 1 });
      b.socket.emit('another-unknown');
      await sleep(200);
      await stillUp(b.socket, 'unknown events');
    });

    it('more than --max-conversations joins: limit_exceeded', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, args: ['--max-conversations', '3'], tag: '26c' });
      const b = await connectUser(topo.url2, uid('B'), { t });
      const convs = [uid('c'), uid('c'), uid('c'), uid('c')];
      for (const c of convs.slice(0, 3)) {
        const r = await ack(b.socket, 'conversation:join', { conversationId: c });
        assert.equal(r?.ok, true, `join ${c}: ${show(r)}`);
      }
      const over = await ack(b.socket, 'conversation:join', { conversationId: convs[3] });
      assertError(over, 'limit_exceeded', 'the 4th conversation');
      await stillUp(b.socket, 'limit_exceeded');
      // The refused join changed nothing: nobody sees B in the 4th conversation.
      const probe = await connectUser(topo.url1, uid('P'), { t });
      const roster = await ack(probe.socket, 'conversation:join', { conversationId: convs[3] });
      assert.deepEqual(roster.online.map((m) => m.userId), [probe.userId], `B not in the refused conversation: ${show(roster)}`);
      // Rejoining one already joined is not a new one.
      const again = await ack(b.socket, 'conversation:join', { conversationId: convs[0] });
      assert.equal(again?.ok, true, `joining a joined conversation again: ${show(again)}`);
      // After a leave there is room for one more.
      assert.deepEqual(await ack(b.socket, 'conversation:leave', { conversationId: convs[0] }), { ok: true });
      const now = await ack(b.socket, 'conversation:join', { conversationId: convs[3] });
      assert.equal(now?.ok, true, `after a leave: ${show(now)}`);
      // The limit is per socket: another socket of the same user has its own.
      const b2 = await connectUser(topo.url2, b.userId, { t });
      const other = await ack(b2.socket, 'conversation:join', { conversationId: uid('c') });
      assert.equal(other?.ok, true, `another socket: ${show(other)}`);
    });

    it('heartbeat ack: {ok, serverTime, nextInMs} with nextInMs in [interval, interval + jitter]', { timeout: 30000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, args: ['--heartbeat-interval', '2s', '--heartbeat-jitter', '1s'], tag: '26d' });
      const b = await connectUser(topo.url2, uid('B'), { t });
      assert.deepEqual(b.session.heartbeat, { intervalMs: 2000, jitterMs: 1000 });
      const nexts = [];
      for (let i = 0; i < 20; i++) {
        const payload = [undefined, {}, { active: true }, { active: false }][i % 4];
        const before = Date.now();
        const hb = payload === undefined ? await ack(b.socket, 'heartbeat') : await ack(b.socket, 'heartbeat', payload);
        assert.equal(hb?.ok, true, show(hb));
        assert.deepEqual(Object.keys(hb).sort(), ['nextInMs', 'ok', 'serverTime'], show(hb));
        assert.match(hb.serverTime, TIMESTAMP, show(hb));
        assert.ok(Math.abs(Date.parse(hb.serverTime) - before) < 5000, `serverTime ${hb.serverTime} near now`);
        assert.ok(Number.isInteger(hb.nextInMs), show(hb));
        assert.ok(hb.nextInMs >= 2000 && hb.nextInMs <= 3000, `nextInMs ${hb.nextInMs} in [2000, 3000]`);
        nexts.push(hb.nextInMs);
      }
      t.diagnostic(`nextInMs: ${nexts.join(',')}`);
      assert.ok(new Set(nexts).size > 1, `jitter varies: ${nexts}`);
    });
  });
}
