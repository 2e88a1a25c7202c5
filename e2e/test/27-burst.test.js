// A burst: 2,000 websocket clients connect at once and each emits
// conversation:join the instant it sees 'connect' (before `session`).
// Every join must be acked ok and the rosters must list every user. On one
// node, and on two nodes (clients alternate between them).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';
import { io } from 'socket.io-client';

import { closeClient, sleep } from '../lib/client.js';
import { request } from '../lib/http.js';
import { tokenFor } from '../lib/jwt.js';
import { SECRET } from '../lib/server.js';
import {
  TOPOLOGIES, uid, ack, show, connectUser, startTopology, clusterDatabase, within,
} from '../lib/presence.js';

const CLIENTS = 2000;
const CONVERSATIONS = 20; // 100 users each
const DEADLINE_MS = 45000;

for (const kind of TOPOLOGIES) {
  describe(`burst of ${CLIENTS} joins [${kind}]`, { timeout: 120000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '27' });

    it(`${CLIENTS} clients join on 'connect': every join acked ok, every roster complete`, { timeout: 90000 }, async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, args: ['--handshake-limit', '0', '--flap-grace', '1s'], tag: '27' });
      const run = uid('burst');
      const convs = Array.from({ length: CONVERSATIONS }, (_, i) => `${run}-c${i}`);
      const users = Array.from({ length: CLIENTS }, (_, i) => `${run}-u${i}`);
      const sockets = [];
      t.after(() => { for (const s of sockets) closeClient(s); });

      const results = new Array(CLIENTS).fill(null); // {ack, ms} | {error}
      let sessions = 0;
      let connected = 0;
      let lastConnectAt = 0;
      let settled = 0;
      let resolveAll;
      const all = new Promise((resolve) => { resolveAll = resolve; });
      const settle = (i, r) => {
        if (results[i]) return;
        results[i] = r;
        if (++settled === CLIENTS) resolveAll();
      };

      const load0 = os.loadavg()[0];
      const t0 = Date.now();
      for (let i = 0; i < CLIENTS; i++) {
        const url = topo.urls[i % topo.urls.length];
        const conversationId = convs[i % CONVERSATIONS];
        const s = io(url, {
          transports: ['websocket'], forceNew: true, reconnection: false, timeout: 30000,
          auth: { token: tokenFor(users[i], SECRET) },
        });
        sockets.push(s);
        s.on('session', () => { sessions++; });
        s.on('connect_error', (err) => settle(i, { error: `connect_error ${err.message} ${JSON.stringify(err.data ?? null)}` }));
        s.on('disconnect', (reason) => settle(i, { error: `disconnect ${reason} before the ack` }));
        s.on('connect', () => {
          connected++;
          lastConnectAt = Date.now();
          const sent = Date.now();
          s.timeout(30000).emitWithAck('conversation:join', { conversationId })
            .then((res) => settle(i, { ack: res, ms: Date.now() - sent }))
            .catch((err) => settle(i, { error: `no ack: ${err.message}` }));
        });
      }
      const timer = setTimeout(resolveAll, DEADLINE_MS);
      await all;
      clearTimeout(timer);
      const elapsed = Date.now() - t0;

      const missing = results.filter((r) => r === null).length;
      const errors = results.filter((r) => r?.error).map((r) => r.error);
      const notOk = results.filter((r) => r?.ack && r.ack.ok !== true).map((r) => show(r.ack));
      const ackMs = results.filter((r) => r?.ack?.ok).map((r) => r.ms).sort((x, y) => x - y);
      const pct = (p) => ackMs[Math.min(ackMs.length - 1, Math.floor(ackMs.length * p))];
      t.diagnostic(`${kind}: ${connected} connected (last ${lastConnectAt - t0} ms), ${ackMs.length} joins acked ok in ${elapsed} ms; ack latency p50 ${pct(0.5)} ms, p99 ${pct(0.99)} ms, max ${ackMs[ackMs.length - 1]} ms; ${sessions} sessions; load average ${load0.toFixed(2)} -> ${os.loadavg()[0].toFixed(2)} on ${os.cpus().length} CPUs`);
      const errorKinds = {};
      for (const e of [...errors, ...notOk]) errorKinds[e.slice(0, 120)] = (errorKinds[e.slice(0, 120)] ?? 0) + 1;
      if (errors.length || notOk.length) {
        // What the servers said about the failures.
        const said = {};
        for (const srv of topo.servers) {
          for (const l of srv.logs) {
            if (l.level !== 'WARN' && l.level !== 'ERROR') continue;
            const key = `${l.node ?? ''} ${l.level} ${l.msg} ${l.event ?? ''} ${String(l.err ?? '').slice(0, 200)}`;
            said[key] = (said[key] ?? 0) + 1;
          }
        }
        t.diagnostic(`server warnings/errors during the burst:\n${Object.entries(said).map(([k, n]) => `  ${n} x ${k}`).join('\n')}`);
      }
      // Every roster (a fresh socket joins each conversation and reads its
      // ack), read before asserting, to report what failed acks left behind.
      const probe = await connectUser(topo.url1, `${run}-probe`, { t });
      const rosters = [];
      for (let k = 0; k < CONVERSATIONS; k++) {
        const roster = await ack(probe.socket, 'conversation:join', { conversationId: convs[k] }, within(15000));
        rosters.push(roster);
        await ack(probe.socket, 'conversation:leave', { conversationId: convs[k] }, within(15000)).catch(() => {});
      }
      t.diagnostic(`${kind}: rosters read ${Date.now() - t0} ms after the start`);
      // The REST roster of the first conversation, also before anyone leaves.
      const rest = await request(`${topo.url2}/v1/conversations/${convs[0]}/presence`, {
        headers: { Authorization: `Bearer ${tokenFor(`${run}-probe`, SECRET)}` },
      });
      const failedUsers = new Set(users.filter((_, i) => !results[i]?.ack?.ok));
      if (failedUsers.size) {
        const listed = rosters.flatMap((r) => r?.online ?? []).filter((m) => failedUsers.has(m.userId)).length;
        t.diagnostic(`${kind}: ${failedUsers.size} joins not acked ok; ${listed} of those users are listed in the rosters anyway`);
      }

      // Everyone leaves: after the flap grace (1 s) every roster is empty
      // again, whatever the acks said (no ghost members).
      const closeStart = Date.now();
      for (const s of sockets) closeClient(s);
      t.diagnostic(`${kind}: closed ${sockets.length} sockets in ${Date.now() - closeStart} ms`);
      let ghosts = [];
      const ghostDeadline = Date.now() + 15000;
      do {
        await sleep(1000);
        ghosts = [];
        for (let k = 0; k < CONVERSATIONS; k++) {
          const r = await ack(probe.socket, 'conversation:join', { conversationId: convs[k] }, within(15000)).catch((err) => ({ err: err.message }));
          ghosts.push(...(r?.online ?? []).map((m) => m.userId).filter((u) => u !== probe.userId));
          await ack(probe.socket, 'conversation:leave', { conversationId: convs[k] }, within(15000)).catch(() => {});
        }
      } while (ghosts.length && Date.now() < ghostDeadline);
      t.diagnostic(`${kind}: rosters empty again ${Date.now() - closeStart} ms after the close (${ghosts.length} still listed)`);
      if (ghosts.length) {
        const failedListed = ghosts.filter((u) => failedUsers.has(u)).length;
        t.diagnostic(`${kind}: ${ghosts.length} users still listed 15 s after every socket closed (${failedListed} of them had a failed join ack)`);
      }

      assert.equal(missing, 0, `${missing} clients neither acked nor failed within ${DEADLINE_MS} ms`);
      assert.deepEqual(errorKinds, {}, 'every client connected and its join was acked ok');
      assert.equal(ackMs.length, CLIENTS);
      for (const r of results) {
        assert.equal(r.ack.online.length >= 1 && r.ack.online.length <= CLIENTS / CONVERSATIONS, true, `roster size ${r.ack.online.length}`);
      }
      let total = 0;
      for (let k = 0; k < CONVERSATIONS; k++) {
        const roster = rosters[k];
        assert.equal(roster?.ok, true, show(roster).slice(0, 300));
        const got = new Set(roster.online.map((m) => m.userId));
        const want = users.filter((_, i) => i % CONVERSATIONS === k);
        const absent = want.filter((u) => !got.has(u));
        assert.deepEqual(absent, [], `conversation ${convs[k]}: ${absent.length} of ${want.length} users missing from the roster`);
        assert.equal(roster.online.length, want.length + 1, `conversation ${convs[k]}: exactly its users and the probe`);
        total += want.length;
      }
      assert.equal(total, CLIENTS);

      // The REST roster agrees (read while the probe had left every conversation).
      if (rest.status === 404) {
        t.diagnostic(`GET /v1/conversations/{id}/presence answered 404; REST roster not checked: ${rest.body.slice(0, 100)}`);
      } else {
        assert.equal(rest.status, 200, `GET /v1/conversations/${convs[0]}/presence: ${rest.status} ${rest.body.slice(0, 300)}`);
        const body = JSON.parse(rest.body);
        assert.equal(body.conversationId, convs[0]);
        assert.deepEqual(body.online.map((m) => m.userId).sort(), users.filter((_, i) => i % CONVERSATIONS === 0).sort(), 'REST roster of the first conversation');
        assert.deepEqual(body.typing, []);
      }

      assert.deepEqual(ghosts, [], 'no one is listed once every socket closed (after the flap grace)');
    });
  });
}
