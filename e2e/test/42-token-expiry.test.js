// Tokens (CONTRACT §1): `exp` is honoured for the life of the connection:
// at exp the server closes the Engine.IO transport without a Socket.IO
// DISCONNECT, so socket.io-client reconnects by itself and an `auth`
// callback supplies a fresh token (the README's pattern). `aud` / `iss` are
// checked when --jwt-audience / --jwt-issuer are set.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import { client, connect, connectError, waitFor, sleep } from '../lib/client.js';
import { tokenFor, nowSec } from '../lib/jwt.js';
import { counter } from '../lib/http.js';
import { SECRET, startServer } from '../lib/server.js';
import { uid, ack, show } from '../lib/presence.js';

describe('token expiry', { timeout: 60000 }, () => {
  for (const transports of [['websocket'], ['polling']]) {
    it(`[${transports}] dropped at exp, reconnects by itself with a fresh token from the auth callback`, { timeout: 30000 }, async (t) => {
      const server = await startServer({ t });
      const user = uid('exp');
      const minted = [];
      // Each token valid for ~3 s (exp is whole seconds).
      const fresh = () => {
        const exp = nowSec() + 3;
        minted.push(exp);
        return tokenFor(user, SECRET, { exp });
      };
      const socket = client(server.url, {
        t, transports, reconnection: true, reconnectionDelay: 100, reconnectionDelayMax: 500,
        auth: (cb) => cb({ token: fresh() }),
      });
      const sessions = [];
      const disconnects = [];
      socket.on('session', (s) => sessions.push({ ...s, at: Date.now() }));
      socket.on('disconnect', (reason) => disconnects.push({ reason, at: Date.now() }));
      await waitFor(socket, 'session', { timeoutMs: 10000 });
      const first = sessions[0];
      assert.equal(first.userId, user);
      const hb = await ack(socket, 'heartbeat', {});
      assert.equal(hb?.ok, true, show(hb));

      // Dropped at exp, then a second session on its own.
      await waitFor(socket, 'disconnect', { timeoutMs: 8000 });
      const drop = disconnects[0];
      const expMs = minted[0] * 1000;
      assert.ok(drop.at >= expMs - 200 && drop.at <= expMs + 4000, `dropped at exp: ${drop.at - expMs} ms after it`);
      // Not "io server disconnect" (a DISCONNECT packet would stop reconnection).
      assert.equal(drop.reason, 'transport close', `disconnect reason: ${drop.reason}`);
      if (sessions.length < 2) await waitFor(socket, 'session', { timeoutMs: 8000 });
      const second = sessions[1];
      assert.equal(second.userId, user, 'same user after the reconnect');
      assert.notEqual(second.socketId, first.socketId, 'a new socket');
      assert.ok(minted.length >= 2, 'the auth callback was asked again');
      assert.ok(socket.connected);
      const hb2 = await ack(socket, 'heartbeat', {});
      assert.equal(hb2?.ok, true, `the new socket works: ${show(hb2)}`);
      assert.ok(await counter(server.url, 'presenced_tokens_expired_total') >= 1, 'counted');
    });
  }

  it('a token without exp is never dropped', { timeout: 20000 }, async (t) => {
    const server = await startServer({ t });
    const tok = tokenFor(uid('noexp'), SECRET, { exp: undefined });
    const { socket } = await connect(server.url, { t, transports: ['websocket'], token: tok });
    let dropped = false;
    socket.on('disconnect', () => { dropped = true; });
    await sleep(2500);
    assert.equal(dropped, false);
  });
});

describe('aud and iss', { timeout: 60000 }, () => {
  it('required when --jwt-audience / --jwt-issuer are set: good, wrong, missing', { timeout: 30000 }, async (t) => {
    const server = await startServer({ t, args: ['--jwt-audience', 'presence', '--jwt-issuer', 'https://idp.example'] });
    const good = { aud: 'presence', iss: 'https://idp.example' };
    const { session } = await connect(server.url, { t, transports: ['websocket'], token: tokenFor('u-good', SECRET, good) });
    assert.equal(session.userId, 'u-good');
    const listed = await connect(server.url, { t, transports: ['websocket'], token: tokenFor('u-list', SECRET, { ...good, aud: ['other', 'presence'] }) });
    assert.equal(listed.session.userId, 'u-list');
    for (const [name, claims, reason] of [
      ['wrong aud', { ...good, aud: 'billing' }, 'wrong audience'],
      ['missing aud', { ...good, aud: undefined }, 'token has no aud'],
      ['wrong iss', { ...good, iss: 'https://evil.example' }, 'wrong issuer'],
      ['missing iss', { ...good, iss: undefined }, 'token has no iss'],
    ]) {
      const err = await connectError(server.url, { transports: ['websocket'], token: tokenFor('u-bad', SECRET, claims) });
      assert.equal(err.message, 'unauthorized', name);
      assert.deepEqual(err.data, { code: 'unauthorized', reason }, name);
    }
  });

  it('not checked when unset', { timeout: 20000 }, async (t) => {
    const server = await startServer({ t });
    const { session } = await connect(server.url, { t, transports: ['websocket'], token: tokenFor('u-any', SECRET, { aud: 'whatever', iss: 'anyone' }) });
    assert.equal(session.userId, 'u-any');
  });
});
