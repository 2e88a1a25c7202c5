// Every refused handshake token, over websocket and over polling: the client
// gets connect_error "unauthorized" with {code, reason}, nothing connects,
// and presenced_handshakes_total{outcome="unauthorized"} counts them.

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, SECRET } from '../lib/server.js';
import { signJwt, tokenFor, bigToken, nowSec } from '../lib/jwt.js';
import { connect, connectError, closeClient } from '../lib/client.js';
import { metric } from '../lib/http.js';

const WRONG_SECRET = 'not-the-server-secret-0123456789';

// [name, socket.io-client auth option (undefined: none at all), reason]
function cases() {
  const now = nowSec();
  return [
    ['no auth at all', undefined, 'missing token'],
    ['token is not a string', { token: 123 }, 'missing token'],
    ['"garbage"', { token: 'garbage' }, 'malformed token'],
    ['"a.b.c"', { token: 'a.b.c' }, 'malformed token'],
    ['wrong secret', { token: tokenFor('alice', WRONG_SECRET) }, 'invalid signature'],
    ['alg none, empty signature', { token: signJwt({ sub: 'alice', iat: now, exp: now + 3600 }, '', { alg: 'none', header: { alg: 'none' } }) }, 'algorithm not allowed'],
    ['HS512 with the right secret', { token: signJwt({ sub: 'alice', iat: now, exp: now + 3600 }, SECRET, { alg: 'HS512' }) }, 'algorithm not allowed'],
    ['expired (exp = now - 60)', { token: signJwt({ sub: 'alice', iat: now - 120, exp: now - 60 }, SECRET) }, 'token expired'],
    ['nbf = now + 60', { token: signJwt({ sub: 'alice', iat: now, nbf: now + 60, exp: now + 3600 }, SECRET) }, 'token not valid yet'],
    ['iat = now + 60', { token: signJwt({ sub: 'alice', iat: now + 60, exp: now + 3600 }, SECRET) }, 'token not valid yet'],
    ['no sub', { token: signJwt({ iat: now, exp: now + 3600 }, SECRET) }, 'token has no sub'],
    ['sub "a b"', { token: tokenFor('a b', SECRET) }, 'sub is not a valid user id'],
    ['a 9000-byte token', { token: bigToken('alice', SECRET, 9000) }, 'token too large'],
  ];
}

describe('refused tokens', { timeout: 90000 }, () => {
  let server;
  let refused = 0;

  before(async () => {
    // The handshake limit is off: this file opens many sessions quickly.
    server = await startServer({ args: ['--handshake-limit', '0'] });
  });
  after(() => server?.kill());

  it('the crafted big token really is 9000 bytes and correctly signed', () => {
    const tok = bigToken('alice', SECRET, 9000);
    assert.ok(tok.length >= 9000 && tok.length <= 9003, `length ${tok.length}`);
  });

  for (const transport of ['websocket', 'polling']) {
    for (const [name, auth, reason] of cases()) {
      it(`${transport}: ${name} → "${reason}"`, async () => {
        const opts = { transports: [transport] };
        if (auth !== undefined) opts.auth = auth;
        const err = await connectError(server.url, opts);
        refused++;
        assert.equal(err.message, 'unauthorized', `connect_error message (data: ${JSON.stringify(err.data)})`);
        assert.deepEqual(err.data, { code: 'unauthorized', reason });
      });
    }
  }

  it('nothing connected and every refusal was counted', async () => {
    assert.equal(refused, 26);
    assert.equal(await metric(server.url, 'presenced_sockets_connected'), 0);
    assert.equal(await metric(server.url, 'presenced_handshakes_total', { outcome: 'unauthorized' }), refused);
    assert.equal(await metric(server.url, 'presenced_handshakes_total', { outcome: 'ok' }), 0);
  });

  it('a good token still connects on both transports (control)', async () => {
    for (const transport of ['websocket', 'polling']) {
      const { socket, session } = await connect(server.url, { transports: [transport], token: tokenFor('alice', SECRET) });
      try {
        assert.equal(session.userId, 'alice');
      } finally {
        closeClient(socket);
      }
    }
    assert.equal(await metric(server.url, 'presenced_handshakes_total', { outcome: 'ok' }), 2);
  });

  it('accepts a token expired by less than the 5 s leeway', async () => {
    const now = nowSec();
    const { socket, session } = await connect(server.url, {
      transports: ['websocket'],
      token: signJwt({ sub: 'bob', iat: now - 60, exp: now - 1 }, SECRET),
    });
    closeClient(socket);
    assert.equal(session.userId, 'bob');
  });
});
