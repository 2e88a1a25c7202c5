// The admin panel in headless Chromium on one node: a wrong token is
// refused, the right one logs in; a client the test connects appears on
// the cluster page and in its conversation without a reload; the user
// lookup shows its connection; the panel disconnects it and the client
// gets the server's disconnect. Each page is screenshot into the output
// folder (out/admin-single); the panel also fits a 360 px wide window.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';

import { waitFor } from '../lib/client.js';
import { uid, joinUser, startTopology, ack } from '../lib/presence.js';
import { ADMIN_TOKEN, adminPage, logIn, outDir } from '../lib/admin.js';

describe('admin panel in a browser (single node)', { timeout: 120000 }, () => {
  it('logs in, follows a client live, looks it up and disconnects it', async (t) => {
    const topo = await startTopology('single', { t, tag: 'admin', args: ['--admin-token', ADMIN_TOKEN, '--lastseen-flush-interval', '500ms'] });
    const base = topo.url1;
    const out = outDir('admin-single');
    const page = await adminPage(t);

    // a wrong token: refused, no session
    await page.goto(base + '/admin/');
    await page.waitForURL(/\/admin\/login$/);
    await page.screenshot({ path: path.join(out, 'login.png') });
    const box = await page.locator('#token').boundingBox();
    assert.ok(box.height < 60, `the token field is one line high, not ${box.height} px`);
    await page.fill('#token', 'not-the-admin-token-xyz');
    await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
    assert.match(page.url(), /\/admin\/login\?e=wrong$/);
    assert.equal(await page.textContent('#error'), 'Wrong token.');
    assert.equal(await page.evaluate(() => fetch('/admin/api/cluster').then((r) => r.status)), 401);

    // the right one
    await logIn(page, base);
    assert.match(page.url(), /\/admin\/$/);
    await page.waitForSelector('#nodes tr[data-node]');
    await page.evaluate(() => { window.notReloaded = true; });
    assert.equal(await page.textContent('#socket-count'), '0');

    // a client connects and joins: the cluster page counts it, live
    const user = uid('adm-u');
    const conv = uid('adm-c');
    const u = await joinUser(base, user, conv, { t });
    await page.waitForFunction(() => document.querySelector('#socket-count')?.textContent === '1', null, { timeout: 10000 });
    // events/s: the join (and the chart's history) reach the page too
    await page.waitForFunction(() => document.querySelectorAll('#nodes svg.chart polyline').length === 2, null, { timeout: 10000 });
    await page.screenshot({ path: path.join(out, 'cluster.png'), fullPage: true });

    // its conversation, with its roster and typing
    await page.click('nav a[data-page=conversations]');
    const row = `#conversations tr[data-conversation="${conv}"]`;
    await page.waitForSelector(row);
    assert.match(await page.textContent(row), new RegExp(user));
    assert.equal((await ack(u.socket, 'typing:start', { conversationId: conv })).ok, true);
    await page.waitForFunction((sel) => document.querySelector(sel)?.querySelector('.pill.typing'), row, { timeout: 10000 });
    await page.screenshot({ path: path.join(out, 'conversations.png'), fullPage: true });
    // search by prefix on the server
    await page.fill('#conv-search', conv.slice(0, 6));
    await page.waitForFunction((c) => [...document.querySelectorAll('#conversations tr[data-conversation]')].every((r) => r.dataset.conversation.startsWith(c.slice(0, 6))), conv);
    // the search is kept in the address: a reload, and Back from a row, come back to it
    await page.waitForFunction((c) => location.hash === `#conversations?q=${c.slice(0, 6)}`, conv);
    await page.reload();
    await page.waitForSelector(row);
    assert.equal(await page.inputValue('#conv-search'), conv.slice(0, 6));
    await page.click(row);
    await page.waitForSelector(`#roster tr[data-user="${user}"]`);
    await page.screenshot({ path: path.join(out, 'conversation.png'), fullPage: true });
    await page.goBack();
    await page.waitForSelector(row);
    assert.equal(await page.inputValue('#conv-search'), conv.slice(0, 6), 'Back comes to the search');
    await page.goForward();
    await page.waitForSelector(`#roster tr[data-user="${user}"]`);
    await page.evaluate(() => { window.notReloaded = true; }); // from here on, live again

    // the user
    await page.click(`#roster tr[data-user="${user}"]`);
    await page.waitForSelector(`#connections tr[data-socket="${u.session.socketId}"]`);
    assert.equal(await page.textContent('#user-status'), 'online');
    const connRow = await page.textContent(`#connections tr[data-socket="${u.session.socketId}"]`);
    assert.match(connRow, /websocket/);
    assert.match(connRow, new RegExp(u.session.node));
    await page.screenshot({ path: path.join(out, 'user.png'), fullPage: true });

    // disconnect: a reason, a confirmation, then the client is told
    const gone = waitFor(u.socket, 'disconnect', { timeoutMs: 10000 });
    await page.click('#disconnect');
    assert.match(await page.textContent('#disconnect-result'), /reason/); // none given yet
    await page.fill('#disconnect-reason', 'e2e: abuse report');
    await page.click('#disconnect');
    await page.waitForSelector('#disconnect-box');
    await page.screenshot({ path: path.join(out, 'user-disconnect.png'), fullPage: true });
    await page.click('#disconnect-confirm');
    const [reason] = await gone;
    assert.equal(reason, 'io server disconnect');
    await page.waitForFunction(() => /Disconnected 1 socket/.test(document.querySelector('#disconnect-result')?.textContent ?? ''));
    await page.waitForFunction(() => document.querySelector('#connections')?.textContent.includes('not connected'), null, { timeout: 10000 });
    const log = topo.servers[0].logs.find((l) => l.msg === 'admin disconnected a user');
    assert.equal(log?.user_id, user);
    assert.equal(log?.reason, 'e2e: abuse report');

    // the other pages
    await page.click('nav a[data-page=lastseen]');
    await page.waitForSelector('#lastseen');
    // the user's offline time was flushed to the store: rows written
    await page.waitForFunction(() => {
      const cells = document.querySelectorAll('#flushes tr[data-node] td');
      const [rows] = (document.querySelector('#flush-totals')?.textContent ?? '0').split(' / ');
      return cells.length > 3 && /ago$/.test(cells[1].textContent) && Number(rows) >= 1;
    }, null, { timeout: 10000 });
    await page.screenshot({ path: path.join(out, 'lastseen.png'), fullPage: true });
    await page.click('nav a[data-page=health]');
    await page.waitForSelector('#health tr[data-check=store]');
    assert.equal(await page.textContent('#health-status'), 'ok');
    await page.screenshot({ path: path.join(out, 'health.png'), fullPage: true });

    // never reloaded; no script error, no CSP violation
    assert.equal(await page.evaluate(() => window.notReloaded), true);
    assert.deepEqual(page.problems, []);

    // a 360 px wide window: nothing wider than the screen
    await page.setViewportSize({ width: 360, height: 740 });
    for (const name of ['cluster', 'conversations', 'user']) {
      await page.click(`nav a[data-page=${name}]`);
      await page.waitForTimeout(300);
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(width <= 360, `${name} page is ${width} px wide in a 360 px window`);
    }
    await page.click('nav a[data-page=cluster]');
    await page.waitForSelector('#nodes tr[data-node]');
    await page.screenshot({ path: path.join(out, 'cluster-360px.png'), fullPage: true });
  });

  // A stream answered with an error status (a balancer's 503 while the node
  // restarts) is not retried by the browser: the page reopens it, with the
  // figures dimmed meanwhile; a hidden tab closes its stream (six tabs'
  // streams took the browser's six connections to the host).
  it('reopens a stream refused with an error status, and pauses it while hidden', async (t) => {
    const topo = await startTopology('single', { t, tag: 'admin-stream', args: ['--admin-token', ADMIN_TOKEN] });
    const page = await adminPage(t);
    await logIn(page, topo.url1);
    await page.waitForSelector('#nodes tr[data-node]');
    let refused = 0;
    await page.route('**/admin/api/stream*', (route) => { refused++; return route.fulfill({ status: 503, contentType: 'application/json', body: '{"error":{"code":"unavailable","message":"no server is available"}}' }); });
    await page.click('nav a[data-page=health]');
    await page.waitForFunction(() => /stale: reconnecting in/.test(document.querySelector('#live').textContent), null, { timeout: 10000 });
    assert.equal(await page.evaluate(() => document.querySelector('main').classList.contains('stale')), true);
    await new Promise((r) => setTimeout(r, 2500));
    assert.ok(refused >= 2, `the refused stream was tried ${refused} time(s) in 2.5 s, want it reopened`);
    await page.unroute('**/admin/api/stream*');
    await page.waitForFunction(() => /live · updated/.test(document.querySelector('#live').textContent), null, { timeout: 15000 });
    await page.waitForSelector('#health tr[data-check=store]');
    assert.equal(await page.evaluate(() => document.querySelector('main').classList.contains('stale')), false);

    // hidden: the stream closes; shown again: it reopens
    const setHidden = (h) => page.evaluate((hidden) => {
      Object.defineProperty(document, 'hidden', { value: hidden, configurable: true });
      document.dispatchEvent(new Event('visibilitychange'));
    }, h);
    await setHidden(true);
    assert.match(await page.textContent('#live'), /paused while this tab is hidden/);
    await setHidden(false);
    await page.waitForFunction(() => /live · updated/.test(document.querySelector('#live').textContent), null, { timeout: 10000 });
    assert.deepEqual(page.problems.filter((p) => !/503/.test(p)), []);
  });
});
