// Node ids are unique in a cluster (CONTRACT §4): a node whose
// PRESENCE_NODE_ID is held by a live node refuses to start (exit 2, the
// setting named); a node restarting under its own id after a crash starts
// (once the crashed process's lease lapsed) and the crashed process's users
// are evicted.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { runCli, startServer, SECRET } from '../lib/server.js';
import { metric } from '../lib/http.js';
import { sleep, waitUntil } from '../lib/client.js';
import {
  REDIS_URL, uid, joinUser, startTopology, clusterDatabase,
} from '../lib/presence.js';

describe('unique node ids [cluster]', { timeout: 90000 }, () => {
  const store = clusterDatabase('cluster', { before, after, tag: '31' });

  it('a second node under a live node\'s id exits 2; after a crash the id starts again', { timeout: 60000 }, async (t) => {
    const topo = await startTopology('cluster', { t, db: store.db, tag: '31a' });
    const clusterArgs = ['--membership', 'open', '--redis-url', REDIS_URL, '--redis-prefix', topo.prefix, '--database-url', store.db.url];

    const t0 = Date.now();
    const dup = await runCli(['serve', '--addr', '127.0.0.1:0', '--jwt-secret', SECRET, '--node-id', 'e2e-31a-n1', ...clusterArgs], { timeoutMs: 20000 });
    t.diagnostic(`duplicate exited ${dup.code} after ${Date.now() - t0} ms`);
    assert.equal(dup.code, 2, `exit code of a duplicate node id\nstderr:\n${dup.stderr}`);
    assert.match(dup.stderr, /PRESENCE_NODE_ID/);
    assert.match(dup.stderr, /e2e-31a-n1/);
    // the live node with that id is unharmed
    const c = uid('c');
    const A = uid('A');
    const B = uid('B');
    const a = await joinUser(topo.url2, A, c, { t });
    const b = await joinUser(topo.url1, B, c, { t });
    assert.deepEqual(b.joinAck.online.map((m) => m.userId).sort(), [A, B].sort());

    // node 1 crashes; a new process under its id starts (waiting out the
    // crashed one's lease), and B, connected to the crashed one, is evicted
    const markA = a.rec.mark();
    await topo.servers[0].kill();
    const t1 = Date.now();
    const again = await startServer({ args: clusterArgs, nodeId: 'e2e-31a-n1', t });
    t.diagnostic(`restarted under the same id after ${Date.now() - t1} ms`);
    assert.ok(Date.now() - t1 < 10000, `restart took ${Date.now() - t1} ms`);
    const left = await a.rec.wait('presence:leave', { since: markA, pred: (p) => p.userId === B, timeoutMs: 15000 });
    assert.equal(left.payload.reason, 'timeout');
    t.diagnostic(`B evicted ${left.at - t1} ms after the crash`);
    // one node reaped the crashed process, once (counted once its reap is
    // done, just after the events)
    const reaped = async () => (await metric(topo.url2, 'presenced_nodes_reaped_total')) + (await metric(again.url, 'presenced_nodes_reaped_total'));
    await waitUntil(async () => (await reaped()) >= 1, { timeoutMs: 3000, message: "a reap counted" });
    await sleep(1000);
    assert.equal(await reaped(), 1, 'presenced_nodes_reaped_total over the live nodes');
    // the restarted node serves
    const d = await joinUser(again.url, uid('D'), c, { t });
    assert.ok(d.joinAck.online.some((m) => m.userId === A));
  });
});
