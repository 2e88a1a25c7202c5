// Sockets per user (CONTRACT §1 Limits): 20 by default, counted
// cluster-wide; beyond, connect_error "unauthorized" with
// data {code: "unauthorized", reason: "too many connections"}, and nothing
// changes for the sockets already there. A closed socket frees its place.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { connectError, closeClient, waitUntil } from '../lib/client.js';
import { counter } from '../lib/http.js';
import { tokenFor } from '../lib/jwt.js';
import { SECRET } from '../lib/server.js';
import {
  TOPOLOGIES, uid, ack, show, connectUser, startTopology, clusterDatabase,
} from '../lib/presence.js';

const tooMany = { code: 'unauthorized', reason: 'too many connections' };

for (const kind of TOPOLOGIES) {
  describe(`sockets per user [${kind}]`, { timeout: 120000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '43' });

    it('20 by default (split over the nodes): the 21st is refused, a closed one frees a place', { timeout: 60000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '43a' });
      const A = uid('A');
      const socks = [];
      for (let i = 0; i < 20; i++) {
        socks.push(await connectUser(i % 2 ? topo.url2 : topo.url1, A, { t }));
      }
      for (const url of [topo.url1, topo.url2]) {
        const err = await connectError(url, { transports: ['websocket'], token: tokenFor(A, SECRET) });
        assert.equal(err.message, 'unauthorized');
        assert.deepEqual(err.data, tooMany);
      }
      // The polling transport is counted the same way.
      const errP = await connectError(topo.url1, { transports: ['polling'], token: tokenFor(A, SECRET) });
      assert.deepEqual(errP.data, tooMany);
      // The 20 are untouched and work.
      assert.ok(socks.every((s) => s.socket.connected));
      const hb = await ack(socks[0].socket, 'heartbeat', {});
      assert.equal(hb?.ok, true, show(hb));
      // Another user is not limited by A.
      await connectUser(topo.url1, uid('B'), { t });
      const refused = (await counter(topo.url1, 'presenced_sockets_refused_total')) + (kind === 'single' ? 0 : await counter(topo.url2, 'presenced_sockets_refused_total'));
      assert.equal(refused, 3, 'refusals counted');

      // A closed socket frees its place, cluster-wide.
      closeClient(socks[1].socket); // on node 2
      await waitUntil(async () => {
        try {
          await connectUser(topo.url1, A, { t });
          return true;
        } catch (err) {
          if (!/too many connections/.test(err.message)) throw err;
          return false;
        }
      }, { timeoutMs: 5000, intervalMs: 100, message: 'a place after a close' });
    });

    it('--max-sockets-per-user 2; 0 lifts the cap', { timeout: 60000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: '43b', args: ['--max-sockets-per-user', '2'] });
      const A = uid('A');
      // Concurrent handshakes: exactly 2 pass.
      const results = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => connectUser(i % 2 ? topo.url2 : topo.url1, A, { t })));
      const ok = results.filter((r) => r.status === 'fulfilled').length;
      // (connectUser's error names the connect_error and its data)
      const refused = results.filter((r) => r.status === 'rejected' && /connect_error.*too many connections/.test(r.reason?.message)).length;
      assert.equal(ok, 2, `2 of 6 concurrent handshakes pass: ${results.map((r) => r.status === 'fulfilled' ? 'ok' : r.reason?.message).join(', ')}`);
      assert.equal(refused, 4);

      const free = await startTopology(kind, { t, db: store.db, tag: '43c', args: ['--max-sockets-per-user', '0'] });
      const B = uid('B');
      for (let i = 0; i < 25; i++) await connectUser(i % 2 ? free.url2 : free.url1, B, { t });
    });
  });
}
