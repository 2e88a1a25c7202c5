// Dev mode generates an admin token and the banner prints a login link
// (/admin/login#token=…, never in the logs); following it in Chromium logs
// in, and another token is refused.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from '../lib/server.js';
import { waitUntil } from '../lib/client.js';
import { adminPage } from '../lib/admin.js';

test('dev mode: the banner\'s admin link logs in', { timeout: 60000 }, async (t) => {
  const srv = await startServer({ t, secret: null, nodeId: 'e2e-admin-dev' });
  const link = await waitUntil(() => /admin panel: +(\S+\/admin\/login#token=([0-9a-f]{32}))/.exec(srv.stdout), {
    timeoutMs: 5000, message: 'the admin link in the dev-mode banner',
  }).catch((err) => assert.fail(`${err.message}\nstdout was:\n${srv.stdout}`));
  const [, url, token] = link;
  assert.ok(url.startsWith(`http://127.0.0.1:${srv.port}/admin/login#token=`), url);
  // the token appears in no log line (only in the banner, on stdout)
  assert.equal(srv.stderr.includes(token), false);

  const page = await adminPage(t);
  await page.goto(url);
  await page.waitForURL(/\/admin\/$/);
  await page.waitForSelector('#nodes tr[data-node="e2e-admin-dev"]');
  assert.deepEqual(page.problems, []);

  const wrong = await fetch(srv.url + '/admin/api/login', { method: 'POST', body: JSON.stringify({ token: 'f'.repeat(32) }) });
  assert.equal(wrong.status, 401);
});
