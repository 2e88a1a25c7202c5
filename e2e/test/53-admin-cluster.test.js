// The admin panel on a two-node cluster: the panel of node 1 shows both
// nodes (each publishes its figures to Redis), a client connected to node
// 2 in its conversation and on the user page (node, transport), and its
// disconnect from node 1's panel reaches the client on node 2. The session
// opened on node 1 is valid on node 2.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';

import { waitFor } from '../lib/client.js';
import { uid, joinUser, startTopology, clusterDatabase } from '../lib/presence.js';
import { ADMIN_TOKEN, adminPage, logIn, outDir } from '../lib/admin.js';

for (const kind of ['cluster', 'cluster-sharded']) {
  describe(`admin panel in a browser (two nodes) [${kind}]`, { timeout: 150000 }, () => {
    const store = clusterDatabase(kind, { before, after, tag: '53admin' });

    it('shows both nodes and a client of the other node, and disconnects it', async (t) => {
      const topo = await startTopology(kind, { t, db: store.db, tag: 'admincl', args: ['--admin-token', ADMIN_TOKEN] });
      const [n1, n2] = topo.servers.map((s) => s.argv[s.argv.indexOf('--node-id') + 1]);
      const out = outDir(`admin-${kind}`);
      const page = await adminPage(t);
      await logIn(page, topo.url1);

      // both nodes, with a lease
      await page.waitForSelector(`#nodes tr[data-node="${n1}"]`);
      await page.waitForSelector(`#nodes tr[data-node="${n2}"]`, { timeout: 10000 });
      assert.equal(await page.textContent('#node-count'), '2');
      for (const n of [n1, n2]) {
        assert.doesNotMatch(await page.textContent(`#nodes tr[data-node="${n}"] td:nth-child(2)`), /—/, `lease age of ${n}`);
      }

      // a client on node 2 appears in the totals and on node 2's row
      const user = uid('admcl-u');
      const conv = uid('admcl-c');
      const u = await joinUser(topo.url2, user, conv, { t });
      assert.equal(u.session.node, n2);
      await page.waitForFunction((n) => document.querySelector(`#nodes tr[data-node="${n}"] td:nth-child(3)`)?.textContent === '1', n2, { timeout: 10000 });
      assert.equal(await page.textContent('#socket-count'), '1');
      await page.waitForFunction(() => document.querySelectorAll('#nodes svg.chart polyline').length === 4, null, { timeout: 10000 });
      await page.screenshot({ path: path.join(out, 'cluster-2-nodes.png'), fullPage: true });

      // its conversation, read from Redis by node 1
      await page.click('nav a[data-page=conversations]');
      await page.fill('#conv-search', conv);
      await page.waitForSelector(`#conversations tr[data-conversation="${conv}"]`);
      assert.match(await page.textContent(`#conversations tr[data-conversation="${conv}"]`), new RegExp(user));

      // the user: its connection is on node 2, over websocket (node 2 answered)
      await page.goto(`${topo.url1}/admin/#user/${user}`);
      const sel = `#connections tr[data-socket="${u.session.socketId}"]`;
      await page.waitForSelector(sel);
      const row = await page.textContent(sel);
      assert.match(row, new RegExp(n2));
      assert.match(row, /websocket/);
      assert.match(row, new RegExp(conv));
      await page.screenshot({ path: path.join(out, 'user-on-other-node.png'), fullPage: true });

      // the session is valid on node 2 as well (same token, stateless cookie)
      const cookie = (await page.context().cookies(topo.url1 + '/admin/')).find((c) => c.name === 'presenced_admin');
      const res = await fetch(topo.url2 + '/admin/api/cluster', { headers: { Cookie: `presenced_admin=${cookie.value}` } });
      assert.equal(res.status, 200);
      assert.equal((await res.json()).nodes.length, 2);

      // the last-seen page has both nodes' flushes
      await page.click('nav a[data-page=lastseen]');
      await page.waitForSelector(`#flushes tr[data-node="${n2}"]`);
      await page.waitForSelector(`#flushes tr[data-node="${n1}"]`);
      await page.screenshot({ path: path.join(out, 'lastseen-2-nodes.png'), fullPage: true });
      await page.goto(`${topo.url1}/admin/#user/${user}`);
      await page.waitForSelector(sel);

      // node 1's panel disconnects the client of node 2
      const gone = waitFor(u.socket, 'disconnect', { timeoutMs: 10000 });
      await page.fill('#disconnect-reason', 'e2e cluster');
      await page.click('#disconnect');
      await page.click('#disconnect-confirm');
      const [reason] = await gone;
      assert.equal(reason, 'io server disconnect');
      await page.waitForFunction(() => document.querySelector('#connections')?.textContent.includes('not connected'), null, { timeout: 10000 });
      assert.deepEqual(page.problems, []);
    });
  });
}
