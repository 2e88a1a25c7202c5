// The admin API over HTTP: every /admin/api/ route answers 401 without a
// session (and with a forged one); with the JSON login's cookie the same
// routes answer; without PRESENCE_ADMIN_TOKEN (outside dev mode) the panel
// is off (404).

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from '../lib/server.js';
import { ADMIN_TOKEN } from '../lib/admin.js';

const ROUTES = [
  ['GET', '/admin/api/session'],
  ['GET', '/admin/api/openapi.json'],
  ['GET', '/admin/api/cluster'],
  ['GET', '/admin/api/conversations?page=1&limit=10&q=a'],
  ['GET', '/admin/api/conversation?id=c1'],
  ['GET', '/admin/api/user?id=u1'],
  ['GET', '/admin/api/lastseen'],
  ['GET', '/admin/api/health'],
  ['GET', '/admin/api/stream?view=cluster'],
  ['POST', '/admin/api/users/disconnect'],
  ['GET', '/admin/api/unknown'],
];

async function call(base, [method, path], headers = {}) {
  const ctl = new AbortController();
  const res = await fetch(base + path, {
    method, headers: { 'Content-Type': 'application/json', ...headers }, signal: ctl.signal,
    body: method === 'POST' ? JSON.stringify({ userId: 'u1', reason: 'x' }) : undefined,
  });
  if (path.includes('/stream')) ctl.abort(); // the stream would go on
  else res.body_ = await res.text();
  return res;
}

describe('admin API', { timeout: 60000 }, () => {
  it('refuses every route without a session', async (t) => {
    const srv = await startServer({ t, nodeId: 'e2e-admin-api', args: ['--admin-token', ADMIN_TOKEN] });
    for (const route of ROUTES) {
      for (const cookie of [undefined, 'presenced_admin=9999999999.0011.forged']) {
        const res = await call(srv.url, route, cookie ? { Cookie: cookie } : {});
        assert.equal(res.status, 401, `${route.join(' ')} ${cookie ? 'with a forged cookie' : 'without a cookie'}`);
        assert.match(res.headers.get('content-security-policy') ?? '', /script-src 'self'/);
      }
    }
    assert.equal(srv.logs.some((l) => l.msg === 'admin disconnected a user'), false);

    // log in with the JSON route; the routes answer
    const bad = await fetch(srv.url + '/admin/api/login', { method: 'POST', body: JSON.stringify({ token: 'wrong-token-0123456789' }) });
    assert.equal(bad.status, 401);
    const login = await fetch(srv.url + '/admin/api/login', { method: 'POST', body: JSON.stringify({ token: ADMIN_TOKEN }) });
    assert.equal(login.status, 204);
    const cookie = login.headers.get('set-cookie');
    assert.match(cookie, /HttpOnly/i);
    assert.match(cookie, /SameSite=Strict/i);
    const session = cookie.split(';')[0];
    for (const route of ROUTES.filter(([m, p]) => m === 'GET' && !p.includes('unknown'))) {
      const res = await call(srv.url, route, { Cookie: session });
      assert.equal(res.status, 200, route.join(' '));
    }
    const spec = JSON.parse((await call(srv.url, ['GET', '/admin/api/openapi.json'], { Cookie: session })).body_);
    assert.equal(spec.openapi.slice(0, 2), '3.');
  });

  it('is off without PRESENCE_ADMIN_TOKEN outside dev mode', async (t) => {
    const srv = await startServer({ t, nodeId: 'e2e-admin-off' });
    for (const path of ['/admin/', '/admin/login', '/admin/api/cluster']) {
      assert.equal((await fetch(srv.url + path)).status, 404, path);
    }
  });
});
